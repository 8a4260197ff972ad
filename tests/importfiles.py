"""Files laid out as verl, OpenRLHF and TRL write them, and a locked study to import them into.

verl: ``verl/utils/tracking.py`` FileLogger writes ``{"step": N, "data": {...}}`` per line; the
validation dumps (``ray_trainer._dump_generations``) write ``<global_step>.jsonl`` with input,
output, gts, score, step per line. TRL: ``Trainer.save_state`` writes ``trainer_state.json`` with
``log_history``.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
from plans import lock_at

T_LOCK = datetime(2026, 1, 10, 12, 0, tzinfo=timezone.utc)
T_RUN = T_LOCK + timedelta(days=1)

IMPORT_PLAN = """\
[study]
id = "imp"
title = "Imported runs"
question = "Does B beat A when trained with verl?"
comparator = "A"
seeds = [0, 1, 2]

[[hypotheses]]
id = "H1"
statement = "B beats A"
prediction = "B - A > 0"
contrasts = ["C1"]
readings = { gain = "B helps", deficit = "B hurts", inconclusive = "no claim" }

[recipe]
learning_rate = 1e-6
group_size = 2

[configurations.A]
description = "control"

[configurations.B]
overrides = { learning_rate = 2e-6 }

[budget]
tokens = "4K"
eval_every = "B/2"

[evaluation]
sets = [{ name = "test", n_problems = 6 }]
samples = 2

[[contrasts]]
id = "C1"
treatment = "B"
control = "A"
tier = "primary"

[[families]]
name = "primary"
members = ["C1"]
"""

PROBLEMS = [(f"What is {k} + {k}?", str(2 * k)) for k in range(1, 7)]
N_STEPS, BATCH, N = 10, 4, 2  # 10 steps of 4 prompts x 2 responses: 8 x 50 = 400 tokens a step, B = 4000


def locked_study(root: Path, plan: str = IMPORT_PLAN) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "plan.toml").write_text(plan)
    lock_at(root / "plan.toml", T_LOCK)
    return root


def verl_config(**over) -> dict:
    cfg = {"data": {"train_batch_size": BATCH, "max_prompt_length": 64, "max_response_length": 128},
           "actor_rollout_ref": {"rollout": {"n": N, "name": "vllm"},
                                 "actor": {"ppo_mini_batch_size": 2, "ppo_epochs": 1}},
           "algorithm": {"adv_estimator": "grpo"},
           "trainer": {"test_freq": 5, "val_before_train": True, "validation_data_dir": "val"}}
    for k, v in over.items():
        cur = cfg
        *parts, last = k.split(".")
        for p in parts:
            cur = cur.setdefault(p, {})
        cur[last] = v
    return cfg


def verl_step_data(step: int, rng: np.random.Generator, *, drop: tuple[str, ...] = (), val: dict | None = None) -> dict:
    """The metrics verl's trainer logs for one step (compute_data_metrics, timing and throughput)."""
    r, p = 50.0, 20.0
    d = {"training/global_step": step, "training/epoch": 0,
         "critic/score/mean": float(rng.uniform(0, 1)), "critic/rewards/mean": float(rng.uniform(0, 1)),
         "response_length/mean": r, "response_length/max": 80.0, "response_length/clip_ratio": 0.0,
         "prompt_length/mean": p, "perf/total_num_tokens": int(BATCH * N * (p + r)), "perf/time_per_step": 3.0,
         "timing_s/gen": 1.5, "timing_s/reward": 0.1, "timing_s/old_log_prob": 0.2, "timing_s/ref": 0.2,
         "timing_s/adv": 0.01, "timing_s/update_actor": 0.9, "timing_s/step": 3.4 + (2.0 if val else 0.0),
         "actor/pg_loss": 0.0, "actor/lr": 1e-6}
    if val:
        d["timing_s/testing"] = 2.0
        d.update(val)
    for k in drop:
        d.pop(k, None)
    return d


def write_verl_run(folder: Path, seed: int, skill: float, *, drop: tuple[str, ...] = (), steps: int = N_STEPS,
                   config: dict | None = None) -> dict[str, Path]:
    """A verl run as its file logger, validation dumps and hydra config leave it."""
    rng = np.random.default_rng(seed * 100 + int(skill * 100))
    folder.mkdir(parents=True, exist_ok=True)
    val_dir = folder / "val"
    val_dir.mkdir(exist_ok=True)
    lines = []
    for step in [0, *range(1, steps + 1)]:
        validated = step in (0, 5, steps)
        val = None
        if validated:
            recs, hits = [], []
            for q, a in PROBLEMS:
                for _ in range(2):
                    ok = rng.uniform() < min(skill + 0.05 * step / steps, 1.0)
                    out = f"Adding gives \\boxed{{{a}}}" if ok else "I think it is 7"
                    hits.append(ok)
                    recs.append({"input": q, "output": out, "gts": a, "score": 1.0 if ok else 0.0, "step": step})
            (val_dir / f"{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
            val = {"val-core/openai/gsm8k/reward/mean@2": float(np.mean(hits))}
        data = val if step == 0 else verl_step_data(step, rng, drop=drop, val=val)
        lines.append(json.dumps({"step": step, "data": data}) + "\n")
    (folder / "metrics.jsonl").write_text("".join(lines))
    import yaml

    (folder / "config.yaml").write_text(yaml.safe_dump(config or verl_config()))
    return {"log": folder / "metrics.jsonl", "val": val_dir, "config": folder / "config.yaml"}
