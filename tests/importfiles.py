"""Files laid out as verl, OpenRLHF and TRL write them, and a locked study to import them into.

verl: ``verl/utils/tracking.py`` FileLogger writes ``{"step": N, "data": {...}}`` per line; the
validation dumps (``ray_trainer._write_generations``) write ``<global_step>.jsonl`` with input,
output, gts, score, step per line. :func:`write_verl_run` is a simplified layout (always a step-0
line, validation at 0, 5 and the last step); tests/verlwriter.py writes verl 0.9.1's exact format
with verl's own code, and varies it by hand. TRL: ``Trainer.save_state`` writes
``trainer_state.json`` with ``log_history``.
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


def trl_state(steps: int = 6, *, every: int = 1, completions: int = 8, step_time: bool = True, mean_length: float = 40.0,
              prompt_length: float = 15.0) -> dict:
    """``trainer_state.json`` as ``Trainer.save_state`` writes it after a GRPOTrainer run
    (``log_history``: training entries every ``every`` steps, an eval entry, the summary entry)."""
    hist, num_tokens = [], 0
    for step in range(1, steps + 1):
        num_tokens += int(completions * (mean_length + prompt_length))
        if step % every:
            continue
        e = {"loss": 0.01, "grad_norm": 0.5, "learning_rate": 1e-6, "num_tokens": float(num_tokens),
             "completions/mean_length": mean_length, "completions/min_length": 10.0, "completions/max_length": 64.0,
             "completions/clipped_ratio": 0.125, "rewards/accuracy/mean": 0.5, "reward": 0.5, "reward_std": 0.4,
             "frac_reward_zero_std": 0.25, "kl": 0.0, "clip_ratio/region_mean": 0.0, "epoch": step / steps, "step": step}
        if step_time:
            e["step_time"] = 2.5
        hist.append(e)
        if step == steps // 2:
            hist.append({"eval_loss": 0.0, "eval_reward": 0.4, "eval_runtime": 3.0, "epoch": step / steps, "step": step})
    hist.append({"train_runtime": 40.0, "train_samples_per_second": 1.0, "train_steps_per_second": 0.1,
                 "total_flos": 0.0, "train_loss": 0.01, "epoch": 1.0, "step": steps})
    return {"best_metric": None, "best_model_checkpoint": None, "epoch": 1.0, "eval_steps": 500, "global_step": steps,
            "is_hyper_param_search": False, "is_local_process_zero": True, "is_world_process_zero": True,
            "log_history": hist, "logging_steps": every, "max_steps": steps, "num_input_tokens_seen": 0,
            "num_train_epochs": 1, "save_steps": 500, "stateful_callbacks": {}, "total_flos": 0.0,
            "train_batch_size": 4, "trial_name": None, "trial_params": None}


def openrlhf_lines(steps: int = 6, *, samples: int = 16, time: bool = True, extra: dict | None = None) -> str:
    """OpenRLHF 0.11's logged keys per rollout step (``status`` of ``PPOTrainer.train_step`` with
    ``_compute_rollout_stats`` and the ``timing/*`` keys; its loggers prefix ``train/``), as a W&B
    history exported to JSON lines; then one eval/ line."""
    out = []
    for step in range(1, steps + 1):
        rec = {"train/global_step": step, "train/policy_loss": 0.1, "train/kl": 0.001, "train/actor_lr": 1e-6,
               "train/rollout/reward_mean": 0.4, "train/rollout/reward_std": 0.2,
               "train/rollout/response_length_mean": 30.0, "train/rollout/truncated_rate": 0.0,
               "train/rollout/num_samples": float(samples), "train/timing/generation": 2.0,
               "train/timing/make_experience": 1.0, "train/timing/ppo_train": 0.9, "train/timing/broadcast": 0.1,
               "_step": step - 1, **(extra or {})}
        if time:
            rec["train/timing/step_total"] = 4.0
        out.append(json.dumps(rec) + "\n")
    out.append(json.dumps({"eval/epoch": 1, "eval/eval_pass1": 0.3}) + "\n")
    return "".join(out)


def outputs_lines(steps: tuple[int, ...] = (0, 3, 6), skill: float = 0.5, seed: int = 0) -> str:
    """Evaluation outputs, one JSON line per output (the importers' --evaluations format)."""
    rng = np.random.default_rng(seed)
    out = []
    for step in steps:
        for q, a in PROBLEMS:
            for _ in range(2):
                ok = rng.uniform() < skill
                out.append(json.dumps({"step": step, "input": q, "output": f"\\boxed{{{a}}}" if ok else "7",
                                       "answer": a}) + "\n")
    return "".join(out)
