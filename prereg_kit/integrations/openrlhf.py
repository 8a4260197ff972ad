"""OpenRLHF: per-step metrics as JSON lines, mapped through the OpenRLHF preset, as an :class:`ImportedRun`.

What OpenRLHF 0.11.2 writes (checked against its source): its PPO/GRPO trainer
(``openrlhf/trainer/ppo_trainer.py``, ``PPOTrainer.fit`` and ``BasePPOTrainer.train_step``)
builds one ``status`` dict per rollout step and hands it to ``save_logs_and_checkpoints``, which
logs it every ``logger.logging_steps``-th step through ``WandbLogger.log_train`` or
``TensorboardLogger.log_train`` (``openrlhf/utils/logging_utils.py``): every key as
``train/<key>``, values that are None left out, the step as ``train/global_step`` (W&B; step_sync
on ``train/*``) or as the event step (TensorBoard). ``generated_samples`` goes to W&B as a table
of its own ``wandb.log`` call, so a W&B history has a second row per step holding only the table
(and the step W&B copies into it). OpenRLHF writes no JSON-lines file and no evaluation outputs of
its own: ``evaluate`` logs only pass@k aggregates as ``eval/*``. This importer reads a history
exported as JSON lines (one object per row, ``train/`` prefix optional, W&B's ``_step``,
``_runtime``, ``_timestamp`` ignored); the trackers' importers read the same keys through
:data:`PRESET`.

Keys (:data:`~.tracker_presets.OPENRLHF`; each can be overridden with ``--key COLUMN=KEY`` for
another version): ``global_step``, ``rollout/response_length_mean``, ``rollout/num_samples``,
``rollout/reward_mean``, ``rollout/truncated_rate`` (``_compute_rollout_stats``) and
``timing/step_total`` (in ``fit``: the sum of ``timing/generation``, ``make_experience``,
``ppo_train`` and ``broadcast``, taken before evaluation and checkpointing). Mapping (dense-rewards
paper §2.3 "Two budgets"): generated tokens of a step = mean response length x the step's samples (logged per step;
else ``rollout.batch_size x rollout.n_samples_per_prompt`` from its arguments or
``--responses-per-step``); training seconds = ``timing/step_total``, unsplit (its
``make_experience`` part mixes rewards with the old and reference log-probabilities, which our
stages put in credit and update); updates per step = ``train.max_epochs x samples //
train.batch_size``, none in the steps the actor is frozen (``critic.freezing_steps``).

Rows of one step are merged when they log different keys (W&B's table row); a key logged twice
for one step (a resumed run's history) is refused. Refused too: dynamic filtering
(``algo.dynamic_filtering_enable``, or a logged ``dynamic_filtering_pass_rate``: the
filtered-out groups' tokens are not logged); asynchronous training (``train.async_enable``:
``PPOTrainerAsync`` logs ``timing/step_total`` as the wall clock between steps, checkpoint saving
and queue waits included, ``ppo_trainer_async.py``) unless another time key is named;
``logger.logging_steps`` above 1 (the other steps' tokens are in no log).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import PreregError
from .importing import (
    MAX_STEP,
    MAX_STEP_SECONDS,
    MAX_STEP_TOKENS,
    STEP_SECONDS,
    ImportedRun,
    file_record,
    iterations_from_lengths,
)
from .jsonlines import finite, is_number, json_lines, written
from .rescore import check_steps, is_integer, outputs_evaluations
from .tracker_presets import OPENRLHF

SAMPLES = "samples_per_step"

# our column -> OpenRLHF's logged key (as its W&B / TensorBoard logger names it; shared with the tracker preset)
PRESET: dict[str, str] = OPENRLHF


def _strip(key: str) -> str:
    return key.removeprefix("train/")


@dataclass
class HistoryStep:
    """The rows of one ``global_step`` of the history: each key's value and the line it came from."""

    step: int
    line: int
    values: dict[str, tuple[Any, int]] = field(default_factory=dict)


def read_metrics_jsonl(path: str | Path, step_key: str) -> list[HistoryStep]:
    """The logged steps, in step order. A row without the step key (or with it null: ``eval/``
    rows, W&B's table row of the first step) is left out; rows of one step are merged (see the
    module docstring). Refused naming the file, line, key and value: a row that is not an
    object, a step that is not an integer, a key logged twice for one step, no step at all."""
    p = Path(path)
    sk = _strip(step_key)
    steps: dict[int, HistoryStep] = {}
    for n, rec in json_lines(p):
        if not isinstance(rec, dict):
            raise PreregError(f"{p}:{n}: expected a JSON object of logged keys, got {written(rec)}")
        rec = {_strip(k): v for k, v in rec.items() if not k.startswith("_")}
        step = rec.get(sk)
        if step is None:
            continue
        if isinstance(step, float) and not isinstance(step, bool) and step.is_integer() and step >= 0:
            step = int(step)  # an export through pandas writes a column with gaps as floats (3.0)
        if not is_integer(step) or not 0 <= step < MAX_STEP:
            raise PreregError(f"{p}:{n}: key {step_key!r} is {written(rec[sk])}, expected an integer step >= 0")
        s = steps.setdefault(int(step), HistoryStep(int(step), n))
        for k, v in rec.items():
            if k == sk or v is None:
                continue
            if k in s.values:
                raise PreregError(f"{p}:{n}: step {step}: key {k!r} logged again (first at line {s.values[k][1]}): a "
                                  "resumed run's history? export the steps of the attempt each step's weights came from")
            s.values[k] = (v, n)
    if not steps:
        raise PreregError(f"{p}: no line has the step key {step_key!r}" + (" (the file is empty)" if p.stat().st_size == 0
                                                                           else ""))
    return [steps[k] for k in sorted(steps)]


def _number(s: HistoryStep, key: str, where: Path, *, limit: float, minimum: float = 0.0,
            integer: bool = False) -> float | None:
    """A needed value of step ``s``, as parsed (its text kept for messages); None when the key
    is not logged at that step."""
    if key not in s.values:
        return None
    v, line = s.values[key]
    ok = is_number(v) and (isinstance(v, int) or finite(v)) and v >= minimum
    if not ok or (integer and isinstance(v, float) and not v.is_integer()):
        want = "a whole number >= 1" if integer else "a number >= 0"
        raise PreregError(f"{where}:{line}: step {s.step}: key {key!r} is {written(v)}, expected {want}")
    if v >= limit:  # an integer beyond a float's range too
        raise PreregError(f"{where}:{line}: step {s.step}: key {key!r} is {written(v)}: above "
                          f"{'10^9 seconds' if limit == MAX_STEP_SECONDS else '2^40 tokens'}, which no step reaches")
    return v


def _optional(s: HistoryStep, key: str, where: Path, hi: float | None = None) -> float:
    """An informative value (reward, truncation): NaN where not logged or not finite."""
    if key not in s.values:
        return math.nan
    v, line = s.values[key]
    if not is_number(v):
        raise PreregError(f"{where}:{line}: step {s.step}: key {key!r} is {written(v)}, expected a number")
    if not finite(v):
        return math.nan
    if hi is not None and not 0 <= v <= hi:
        raise PreregError(f"{where}:{line}: step {s.step}: key {key!r} is {written(v)}, expected a number between 0 and {hi:g}")
    return float(v)


def read_args(args: str | Path | dict | None) -> tuple[dict, str, Path | None]:
    """OpenRLHF's arguments (a JSON file or a dict), where to name them, and the file."""
    if not isinstance(args, (str, Path)):
        return dict(args or {}), "--args", None
    p = Path(args)
    if not p.is_file():
        raise PreregError(f"{p}: no such file" if not p.exists() else f"{p}: a folder, not an arguments file")
    try:
        cfg = json.loads(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise PreregError(f"{p}: not UTF-8 text (byte {e.start + 1}): the arguments are a JSON file") from None
    except json.JSONDecodeError as e:
        raise PreregError(f"{p}:{e.lineno}: not JSON ({e.msg})") from None
    if not isinstance(cfg, dict):
        raise PreregError(f"{p}: the arguments are a JSON object, got {written(cfg)}")
    return cfg, str(p), p


def _arg(cfg: dict, nested: str, flat: str | None = None) -> Any:
    """An OpenRLHF argument: nested (0.11: ``rollout.batch_size``), dotted as argparse names it
    before ``hierarchize`` (``"rollout.batch_size"``), or flat (older: ``rollout_batch_size``)."""
    node: Any = cfg
    for part in nested.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if node is not None:
        return node
    return cfg.get(nested) if cfg.get(nested) is not None else (cfg.get(flat) if flat else None)


def _int_arg(cfg: dict, nested: str, flat: str | None, where: str, *, minimum: int = 1) -> int | None:
    v = _arg(cfg, nested, flat)
    if v is not None and (not is_integer(v) or not minimum <= v < MAX_STEP_TOKENS):
        raise PreregError(f"{where}: {nested} is {written(v)}, expected an integer >= {minimum} (below 2^40)")
    return None if v is None else int(v)


def _check_args(cfg: dict, where: str, mapping: dict[str, str]) -> None:
    if _arg(cfg, "algo.dynamic_filtering_enable", "dynamic_filtering"):
        raise PreregError(f"{where}: dynamic filtering is on: the filtered-out groups' tokens are not logged")
    every = _int_arg(cfg, "logger.logging_steps", "logging_steps", where)
    if every is not None and every > 1:
        raise PreregError(f"{where}: logger.logging_steps = {every}: OpenRLHF then logs every {every}th step, and the "
                          "other steps' tokens are in no log (train with logger.logging_steps 1)")
    if _arg(cfg, "train.async_enable", "async_train") and mapping[STEP_SECONDS] == PRESET[STEP_SECONDS]:
        raise PreregError(f"{where}: train.async_enable is on: OpenRLHF's asynchronous trainer logs timing/step_total as "
                          "the wall clock between steps (queue waits and checkpoint saving included); name another "
                          "time key with --key seconds_step=KEY to accept it")


def import_openrlhf(path: str | Path, *, responses_per_step: int | None = None, args: str | Path | dict | None = None,
                    updates_per_step: int | None = None, keys: dict[str, str] | None = None,
                    evaluations: str | Path | None = None, eval_set: str | None = None, eval_seed: int | None = None,
                    started_at: datetime | None = None, ended_at: datetime | None = None, trainer: str = "openrlhf",
                    device: str = "unknown") -> ImportedRun:
    """Read OpenRLHF per-step metrics (``path``, JSON lines); ``args``: its arguments as JSON or a
    dict; ``keys``: overrides of :data:`PRESET`; ``evaluations``: an outputs file to re-score."""
    p = Path(path)
    cfg, where_args, args_path = read_args(args)
    unknown = sorted(set(keys or {}) - set(PRESET))
    if unknown:
        raise PreregError(f"--key: {unknown[0]!r} is not a column the preset maps (have: {', '.join(sorted(PRESET))})")
    mapping = {**PRESET, **(keys or {})}
    _check_args(cfg, where_args, mapping)
    steps = read_metrics_jsonl(p, mapping["step"])
    for s in steps:
        if "dynamic_filtering_pass_rate" in s.values:
            raise PreregError(f"{p}:{s.values['dynamic_filtering_pass_rate'][1]}: dynamic_filtering_pass_rate is logged: "
                              "dynamic filtering was on, and the filtered-out groups' tokens are not logged")
    batch = _int_arg(cfg, "rollout.batch_size", "rollout_batch_size", where_args)
    per_prompt = _int_arg(cfg, "rollout.n_samples_per_prompt", "n_samples_per_prompt", where_args) or 1
    from_args = batch * per_prompt if batch else None
    if from_args is not None and from_args >= MAX_STEP_TOKENS:
        raise PreregError(f"{where_args}: rollout.batch_size {batch} x rollout.n_samples_per_prompt {per_prompt} samples: "
                          "2^40 or more, beyond any step")
    for option, v in (("--responses-per-step", responses_per_step), ("--updates-per-step", updates_per_step)):
        if v is not None and v >= MAX_STEP_TOKENS:
            raise PreregError(f"{option}: {v}: 2^40 or more, beyond any step")
    if responses_per_step is not None and from_args is not None and responses_per_step != from_args:
        raise PreregError(f"--responses-per-step {responses_per_step} contradicts {where_args} (rollout.batch_size x "
                          f"rollout.n_samples_per_prompt = {from_args})")
    responses_per_step = responses_per_step or from_args
    length_key, seconds_key, samples_key = (_strip(mapping[c]) for c in ("length_mean", STEP_SECONDS, SAMPLES))
    logged = [_number(s, samples_key, p, limit=MAX_STEP_TOKENS, minimum=1, integer=True) for s in steps]
    if any(v is None for v in logged) and not all(v is None for v in logged):
        s = steps[[v is None for v in logged].index(True)]
        raise PreregError(f"{p}:{s.line}: step {s.step}: key {samples_key!r} missing, but other steps log it")
    per_step = None if logged[0] is None else np.asarray(logged, dtype=float)
    if per_step is not None and responses_per_step is not None and (per_step != responses_per_step).any():
        k = int(np.flatnonzero(per_step != responses_per_step)[0])
        v, line = steps[k].values[samples_key]
        raise PreregError(f"{p}:{line}: step {steps[k].step}: key {samples_key!r} is {written(v)}, but the arguments give "
                          f"{responses_per_step} samples per step (rollout.batch_size x rollout.n_samples_per_prompt)")
    if per_step is None and responses_per_step is None:
        raise PreregError(f"{p}: the samples per step are not logged: give --responses-per-step "
                          "(rollout.batch_size x rollout.n_samples_per_prompt) or --args")
    if updates_per_step is None:
        tbs = _int_arg(cfg, "train.batch_size", "train_batch_size", where_args)
        if not tbs:
            raise PreregError(f"{where_args}: train.batch_size needed for the updates per step (or give --updates-per-step)")
        epochs = _int_arg(cfg, "train.max_epochs", "max_epochs", where_args) or 1
        updates_per_step = max(epochs * (responses_per_step or int(per_step[0])) // tbs, 1)
    # the actor trains once the step before it passes critic.freezing_steps (ppo_train's run_actor)
    frozen = _int_arg(cfg, "critic.freezing_steps", "freezing_actor_steps", where_args, minimum=-1)
    updates = np.array([0 if frozen is not None and s.step - 1 <= frozen else updates_per_step for s in steps])
    rows = []
    for s in steps:
        row = {"step": s.step, "line": s.line}
        for key, limit in ((length_key, MAX_STEP_TOKENS), (seconds_key, MAX_STEP_SECONDS)):
            v = _number(s, key, p, limit=limit)
            if v is not None:
                row[key] = v
        row["reward_mean"] = _optional(s, _strip(mapping["reward_mean"]), p)
        row["truncation_rate"] = _optional(s, _strip(mapping["truncation_rate"]), p, hi=1.0)
        rows.append(row)
    # object columns keep each number's text for iterations_from_lengths' messages (a float64 column would not)
    frame = pd.DataFrame({k: pd.Series([r.get(k) for r in rows], dtype=object) for k in dict.fromkeys(k for r in rows for k in r)})
    frame["step"] = frame["step"].astype(np.int64)
    for key in (length_key, seconds_key):  # a step without the key: named with its line below
        if key in frame.columns and frame[key].isna().any():
            s = steps[int(np.flatnonzero(frame[key].isna().to_numpy())[0])]
            raise PreregError(f"{p}:{s.line}: step {s.step}: key {key!r} missing, but other steps log it")
    iterations = iterations_from_lengths(frame, where=str(p), length_key=length_key,
                                         responses_per_step=per_step if per_step is not None else responses_per_step,
                                         seconds_key=seconds_key, updates_per_step=updates,
                                         optional={"reward_mean": "reward_mean", "truncation_rate": "truncation_rate"})
    files = [file_record(p, p.parent)] + ([file_record(args_path, args_path.parent)] if args_path else [])
    ev, more = outputs_evaluations(evaluations, eval_set=eval_set, eval_seed=eval_seed)
    check_steps(ev, steps[-1].step, evaluations)
    files += more
    notes = ["stages not split: seconds_step only (stage shares unavailable)",
             "tokens: mean response length x " + ("the logged samples of each step" if per_step is not None
                                                  else f"{responses_per_step} samples per step")]
    return ImportedRun(trainer=trainer, importer="openrlhf", iterations=iterations, evaluations=ev, config=cfg,
                       source={"files": files, "key_map": mapping, "responses_per_step": responses_per_step,
                               "updates_per_step": updates_per_step, "notes": notes},
                       started_at=started_at, ended_at=ended_at, device=device)


__all__ = ["PRESET", "HistoryStep", "import_openrlhf", "read_args", "read_metrics_jsonl"]
