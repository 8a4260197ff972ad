"""Files laid out as verl, OpenRLHF and TRL write them, and a locked study to import them into.

verl: ``verl/utils/tracking.py`` FileLogger writes ``{"step": N, "data": {...}}`` per line; the
validation dumps (``ray_trainer._write_generations``) write ``<global_step>.jsonl`` with input,
output, gts, score, step per line. :func:`write_verl_run` is a simplified layout (always a step-0
line, validation at 0, 5 and the last step); tests/verlwriter.py writes verl 0.9.1's exact format
with verl's own code, and varies it by hand. TRL: ``Trainer.save_state`` writes
``trainer_state.json`` with ``log_history`` (written here through transformers' ``TrainerState.save_to_json``; a
real run's files are built by ``trl_runs.real_run``).
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from plans import lock_at

T_LOCK = datetime(2026, 1, 10, 12, 0, tzinfo=UTC)
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


def grpo_entry(step: int, *, generated: bool, num_tokens: float = 0.0, mean_length: float = 40.0, step_time: float = 2.5,
               epoch: float = 0.0, ints: bool = False, drop: tuple[str, ...] = (), reward: str = "prereg_default") -> dict:
    """One training entry of ``log_history`` with the keys TRL 1.16 logs (beta = 0): transformers
    5.24, trainer.py ``_maybe_log_save_evaluate``: ``loss``, ``grad_norm``, ``learning_rate``; TRL,
    trl/trainer/grpo_trainer.py, ``_generate_and_score_completions`` (a step that generates only):
    ``num_tokens``, ``completions/{mean,min,max}_length``, ``completions/clipped_ratio``,
    ``completions/{mean,min,max}_terminated_length``, ``rewards/<function>/mean|std``, ``reward``,
    ``reward_std``, ``frac_reward_zero_std``; ``_compute_loss``: ``entropy``, ``clip_ratio/*``;
    ``training_step``: ``step_time``; ``Trainer.log``: ``epoch``, ``step``. ``ints``: whole values
    written as JSON integers (a float that happens to be whole is written 40.0 by TRL)."""
    num = int if ints else float
    e = {"loss": num(0), "grad_norm": 0.5, "learning_rate": 1e-6, "entropy": 4.8, "clip_ratio/low_mean": num(0),
         "clip_ratio/high_mean": num(0), "clip_ratio/region_mean": num(0), "clip_ratio/low_min": num(0),
         "clip_ratio/high_max": num(0), "step_time": num(step_time) if float(step_time).is_integer() else step_time,
         "epoch": epoch, "step": step}
    if generated:
        e.update({"num_tokens": num(num_tokens), "completions/mean_length": num(mean_length),
                  "completions/min_length": num(10), "completions/max_length": num(64), "completions/clipped_ratio": 0.125,
                  "completions/mean_terminated_length": num(38), "completions/min_terminated_length": num(10),
                  "completions/max_terminated_length": num(60), f"rewards/{reward}/mean": 0.5, f"rewards/{reward}/std": 0.5,
                  "reward": 0.5, "reward_std": 0.4, "frac_reward_zero_std": 0.25})
    for k in drop:
        e.pop(k, None)
    return e


def grpo_eval_entry(step: int, epoch: float, reward: str = "prereg_default") -> dict:
    """An evaluation entry: ``Trainer.evaluate``'s ``eval_loss``, ``eval_runtime`` and speeds, and
    GRPOTrainer.log's metrics of the evaluation prefixed ``eval_`` (TRL 1.16, ``GRPOTrainer.log``)."""
    keys = ["num_tokens", "completions/mean_length", "completions/min_length", "completions/max_length",
            "completions/clipped_ratio", "completions/mean_terminated_length", "completions/min_terminated_length",
            "completions/max_terminated_length", f"rewards/{reward}/mean", f"rewards/{reward}/std", "reward", "reward_std",
            "frac_reward_zero_std", "entropy", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
            "clip_ratio/low_min", "clip_ratio/high_max"]
    return {"eval_loss": 0.0, "eval_runtime": 3.0, "eval_samples_per_second": 1.0, "eval_steps_per_second": 0.5,
            **{f"eval_{k}": 0.4 for k in keys}, "epoch": epoch, "step": step}


def trl_state(steps: int = 6, *, every: int = 1, span: int = 1, completions: int = 8, step_time: bool = True,
              mean_length: float = 40.0, prompt_length: float = 15.0, eval_every: int = 3, eval_at_start: bool = False,
              ints: bool = False, drop: tuple[str, ...] = ()) -> dict:
    """The fields of transformers' ``TrainerState`` after a GRPOTrainer run of ``steps`` optimizer
    steps, as ``Trainer.save_state`` writes them: ``log_history`` with a training entry every
    ``every`` steps (``logging_steps``), a generation every ``span`` steps (``steps_per_generation x
    num_iterations / gradient_accumulation_steps``) of ``completions`` completions, an evaluation
    entry every ``eval_every`` steps (0: none) and at step 0 with ``eval_at_start``, and the
    closing summary entry. ``drop``: keys left out of the training entries."""
    hist, num_tokens = [], 0
    if eval_at_start:
        hist.append(grpo_eval_entry(0, 0.0))
    for step in range(1, steps + 1):
        generated = (step - 1) % span == 0
        if generated:
            num_tokens += int(completions * (mean_length + prompt_length))
        if step % every == 0:
            hist.append(grpo_entry(step, generated=generated, num_tokens=num_tokens, mean_length=mean_length,
                                   step_time=2.5 if not ints else 2, epoch=step / steps, ints=ints,
                                   drop=drop + (() if step_time else ("step_time",))))
        if eval_every and step % eval_every == 0:
            hist.append(grpo_eval_entry(step, step / steps))
    hist.append({"train_runtime": 40.0, "train_samples_per_second": 1.0, "train_steps_per_second": 0.1,
                 "total_flos": 0.0, "train_loss": 0.01, "epoch": 1.0, "step": steps})
    return {"best_global_step": None, "best_metric": None, "best_model_checkpoint": None, "epoch": 1.0,
            "eval_steps": eval_every or 500, "global_step": steps, "is_hyper_param_search": False,
            "is_local_process_zero": True, "is_world_process_zero": True, "log_history": hist, "logging_steps": every,
            "max_steps": steps, "num_input_tokens_seen": 0, "num_train_epochs": 1, "save_steps": 500,
            "stateful_callbacks": {}, "total_flos": 0.0, "train_batch_size": 4, "trial_name": None, "trial_params": None}


def checkpoint_state(state: dict, step: int) -> dict:
    """The state a checkpoint at ``step`` holds (``Trainer._save_checkpoint``): the log_history
    up to that step, without the closing summary; a run resumed from it continues this history."""
    hist = [e for e in state["log_history"] if e["step"] <= step and "train_runtime" not in e]
    return {**state, "log_history": hist, "global_step": step}


def write_trl_state(folder: Path, state: dict) -> Path:
    """``folder/trainer_state.json`` written by transformers' own ``TrainerState.save_to_json``."""
    from transformers import TrainerState

    folder.mkdir(parents=True, exist_ok=True)
    TrainerState(**state).save_to_json(str(folder / "trainer_state.json"))
    return folder


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


@functools.cache
def prereg_app():
    """A copy of the `prereg` app with the `prereg_kit.commands` group's `import` loaded (the
    editable install may predate the group; the real app is left as it is). Made once per process:
    no test changes it, and the test CliRunner builds an app's click command once per app
    (tests/conftest.py), where a new copy on each call rebuilt every command's parameters."""
    import typer

    from prereg_kit import cli
    from prereg_kit.integrations import command

    app = typer.Typer(name="prereg", add_completion=False, pretty_exceptions_enable=False)
    app.registered_callback = cli.app.registered_callback
    app.registered_commands = list(cli.app.registered_commands)
    app.registered_groups = [g for g in cli.app.registered_groups if g.name != "import"]
    app.add_typer(command.app, name="import")
    return app
