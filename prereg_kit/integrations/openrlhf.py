"""OpenRLHF: per-step metrics as JSON lines, mapped through the OpenRLHF preset, as an :class:`ImportedRun`.

OpenRLHF's PPO/GRPO trainer logs each rollout step through its W&B or TensorBoard logger
(``openrlhf/trainer/ppo_utils/loggers.py``) as ``train/<key>`` with ``train/global_step``; it
writes no JSON-lines file of its own. This importer reads one JSON object per line with those
keys (``train/`` prefix optional), e.g. a W&B history exported as JSON lines; the trackers'
importers (TensorBoard, MLflow, W&B) read the same keys through :data:`PRESET`.

Keys (OpenRLHF 0.11, checked against its source; :data:`~.tracker_presets.OPENRLHF`; each can
be overridden with ``--key COLUMN=KEY`` for another version): ``global_step``,
``rollout/response_length_mean``, ``rollout/num_samples``, ``rollout/reward_mean``,
``rollout/truncated_rate``, ``timing/step_total``. Mapping (paper 1 §2.2): generated tokens of a
step = mean response length x the step's samples (logged per step; else ``rollout.batch_size x
rollout.n_samples_per_prompt`` from its arguments or ``--responses-per-step``); training seconds =
``timing/step_total``, unsplit (it is taken before evaluation and checkpointing; its
``make_experience`` part mixes rewards with the old and reference log-probabilities, which our
stages put in credit and update); updates per step = ``train.max_epochs x samples //
train.batch_size``. Dynamic filtering (``algo.dynamic_filtering_enable``, or a logged
``dynamic_filtering_pass_rate``) is refused: the filtered-out groups' tokens are not logged.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import PreregError
from .importing import STEP_SECONDS, ImportedRun, file_record, iterations_from_lengths
from .rescore import json_lines, outputs_evaluations
from .tracker_presets import OPENRLHF

SAMPLES = "samples_per_step"

# our column -> OpenRLHF's logged key (as its W&B / TensorBoard logger names it; shared with the tracker preset)
PRESET: dict[str, str] = OPENRLHF


def _strip(key: str) -> str:
    return key[len("train/"):] if key.startswith("train/") else key


def read_metrics_jsonl(path: str | Path, step_key: str) -> pd.DataFrame:
    """One row per logged step: a ``step`` column, a ``line`` column and every key (``train/``
    prefix removed). Lines without the step key (e.g. ``eval/`` lines) are left out."""
    p = Path(path)
    rows, seen = [], {}
    sk = _strip(step_key)
    for n, rec in json_lines(p):
        if not isinstance(rec, dict):
            raise PreregError(f"{p}:{n}: expected a JSON object of logged keys")
        rec = {_strip(k): v for k, v in rec.items()}
        if sk not in rec:
            continue
        step = rec[sk]
        if isinstance(step, float) and step.is_integer():
            step = int(step)
        if not isinstance(step, int) or isinstance(step, bool):
            raise PreregError(f"{p}:{n}: key {step_key!r}: expected an integer step, got {step!r}")
        if step in seen:
            raise PreregError(f"{p}:{n}: step {step} logged again (first at line {seen[step]})")
        seen[step] = n
        rows.append({**rec, "step": step, "line": n})
    if not rows:
        raise PreregError(f"{p}: no line has the step key {step_key!r}")
    return pd.DataFrame(rows)


def _arg(cfg: dict, nested: str, flat: str):
    """An OpenRLHF argument: nested (0.11: ``rollout.batch_size``) or flat (older: ``rollout_batch_size``)."""
    node = cfg
    for part in nested.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if node is not None else cfg.get(flat)


def _logged_samples(steps: pd.DataFrame, key: str, expected: int | None, where: Path):
    """The samples of each step where OpenRLHF logs them (``rollout/num_samples``), checked against
    the arguments' count; None when not logged."""
    if key not in steps.columns:
        return None
    v = pd.to_numeric(steps.sort_values("step")[key], errors="coerce").to_numpy(dtype=float)
    bad = np.flatnonzero(~np.isfinite(v) | (v < 1) | (v != np.round(v)))
    if bad.size:
        raise PreregError(f"{where}: step {int(bad[0]) + 1}: {key} is {v[bad[0]]!r}, expected a whole number >= 1")
    if expected is not None and (v != expected).any():
        k = int(np.flatnonzero(v != expected)[0])
        raise PreregError(f"{where}: step {k + 1}: {key} = {int(v[k])}, but the arguments give {expected} samples per step")
    return v


def import_openrlhf(path: str | Path, *, responses_per_step: int | None = None, args: str | Path | dict | None = None,
                    updates_per_step: int | None = None, keys: dict[str, str] | None = None,
                    evaluations: str | Path | None = None, eval_set: str | None = None, eval_seed: int | None = None,
                    started_at: datetime | None = None, ended_at: datetime | None = None, trainer: str = "openrlhf",
                    device: str = "unknown") -> ImportedRun:
    """Read OpenRLHF per-step metrics (``path``, JSON lines); ``args``: its arguments as JSON or a
    dict; ``keys``: overrides of :data:`PRESET` (and ``seconds_step``, which has no default)."""
    p = Path(path)
    args_path = Path(args) if isinstance(args, (str, Path)) else None
    cfg = json.loads(args_path.read_text()) if args_path else dict(args or {})
    where_args = str(args_path) if args_path else "--args"
    if _arg(cfg, "algo.dynamic_filtering_enable", "dynamic_filtering"):
        raise PreregError(f"{where_args}: dynamic filtering is on: the filtered-out groups' tokens are not logged")
    mapping = {**PRESET, **(keys or {})}
    unknown = sorted(set(keys or {}) - set(PRESET))
    if unknown:
        raise PreregError(f"--key: {unknown[0]!r} is not a column the preset maps (have: {', '.join(sorted(PRESET))})")
    steps = read_metrics_jsonl(p, mapping["step"])
    if "dynamic_filtering_pass_rate" in steps.columns:
        raise PreregError(f"{p}: dynamic_filtering_pass_rate is logged: dynamic filtering was on, and the "
                          "filtered-out groups' tokens are not logged")
    samples = (_arg(cfg, "rollout.batch_size", "rollout_batch_size") or 0) * (_arg(cfg, "rollout.n_samples_per_prompt", "n_samples_per_prompt") or 1)
    if responses_per_step is None and samples:
        responses_per_step = int(samples)
    per_step = _logged_samples(steps, _strip(mapping[SAMPLES]), responses_per_step, p)
    if per_step is None and responses_per_step is None:
        raise PreregError(f"{p}: the samples per step are not logged: give --responses-per-step "
                          "(rollout.batch_size x rollout.n_samples_per_prompt) or --args")
    if updates_per_step is None:
        tbs = _arg(cfg, "train.batch_size", "train_batch_size")
        if not tbs:
            raise PreregError(f"{where_args}: train.batch_size needed for the updates per step (or give --updates-per-step)")
        n = responses_per_step or int(per_step[0])
        updates_per_step = max(int(_arg(cfg, "train.max_epochs", "max_epochs") or 1) * n // int(tbs), 1)
    optional = {c: _strip(mapping[c]) for c in ("reward_mean", "truncation_rate", "total_length_mean") if c in mapping}
    iterations = iterations_from_lengths(steps, where=str(p), length_key=_strip(mapping["length_mean"]),
                                         responses_per_step=per_step if per_step is not None else responses_per_step,
                                         seconds_key=_strip(mapping[STEP_SECONDS]),
                                         updates_per_step=updates_per_step, optional=optional)
    if "total_length_mean" in iterations.columns:  # prompt + response mean: never below the response mean
        bad = (iterations["total_length_mean"] < iterations["length_mean"] - 1e-9).to_numpy().nonzero()[0]
        if bad.size and not math.isnan(iterations["total_length_mean"].iloc[int(bad[0])]):
            raise PreregError(f"{p}: step {int(bad[0]) + 1}: total_length_mean is below response_length: the keys are swapped?")
    files = [file_record(p, p.parent)] + ([file_record(args_path, args_path.parent)] if args_path else [])
    ev, more = outputs_evaluations(evaluations, eval_set=eval_set, eval_seed=eval_seed)
    files += more
    notes = ["stages not split: seconds_step only (stage shares unavailable)",
             "tokens: mean response length x " + ("the logged samples of each step" if per_step is not None
                                                  else f"{responses_per_step} samples per step")]
    return ImportedRun(trainer=trainer, importer="openrlhf", iterations=iterations, evaluations=ev, config=cfg,
                       source={"files": files, "key_map": mapping, "responses_per_step": responses_per_step,
                               "updates_per_step": updates_per_step, "notes": notes},
                       started_at=started_at, ended_at=ended_at, device=device)


__all__ = ["PRESET", "import_openrlhf", "read_metrics_jsonl"]
