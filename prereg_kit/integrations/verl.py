"""verl: its ``file`` tracker's JSON lines and its validation dumps, as an :class:`ImportedRun`.

What verl writes (``verl/utils/tracking.py``, ``FileLogger``; ``trainer/ppo/ray_trainer.py``):

- one JSON line per logged step, ``{"step": N, "data": {metric: value, ...}}``, to
  ``$VERL_FILE_LOGGER_PATH`` (or ``<project>/<experiment>.jsonl``); step 0 carries only the
  validation before training; steps 1..n are the training steps;
- with ``trainer.validation_data_dir`` set, ``<dir>/<global_step>.jsonl``: one line per
  validation output with ``input``, ``output``, ``gts`` (the reference answer), ``score``.

The mapping (paper 1 §2.2: compute is counted in generated tokens of every kind and in training
seconds split into stages; evaluations are read at matched compute):

- generated tokens of a step: ``perf/total_num_tokens`` counts prompt + response tokens of every
  response; with the prompt and response length means, the response share is
  ``total x r / (p + r)`` (= responses x mean response length); without the total, the response
  mean times the responses per step (``data.train_batch_size x actor_rollout_ref.rollout.n``);
- stages: :data:`~.tracker_presets.VERL_STAGES` (generation = ``gen``; credit = ``reward +
  values + adv + update_critic``; update = ``old_log_prob + ref + update_actor``, as the built-in
  trainer times them; weight sync = ``update_weights`` where logged, else 0: older verl syncs
  inside generation's sharding manager, so the time is in generation); selection = 0. ``timing_s/step`` includes validation and checkpointing and is never used;
- updates per step: ``ppo_epochs x (train_batch_size // ppo_mini_batch_size)`` optimizer steps;
- evaluations: every output of a validation dump re-scored with our verifiers
  (:mod:`.rescore`); a problem is its input text (``problem_id`` = a hash of it unless the dump
  has an ``id``); verl's own ``score`` is kept beside ours as ``tool_score_mean``.

Refused: dynamic sampling (``algorithm.filter_groups.enable``, or the DAPO recipe's
``train/num_gen_batches`` key): verl's logs then count only the kept groups' tokens, and its
dumps hold only kept outputs, so the discarded tokens (part of the compute, paper 1 §2.2) are
not in any file verl writes.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import PreregError
from .importing import ImportedRun, file_record
from .rescore import json_lines, score_problems
from .tracker_presets import VERL_STAGES

GEN, UPDATE_ACTOR, STEP = "timing_s/gen", "timing_s/update_actor", "timing_s/step"
TOTAL, PROMPT_MEAN, RESPONSE_MEAN = "perf/total_num_tokens", "prompt_length/mean", "response_length/mean"
TRAINING_KEYS = (GEN, TOTAL, RESPONSE_MEAN, UPDATE_ACTOR)
KEY_MAP = {
    "tokens_rollout": f"{TOTAL} x {RESPONSE_MEAN} / ({PROMPT_MEAN} + {RESPONSE_MEAN}), else {RESPONSE_MEAN} x responses per step",
    "seconds_selection": "0", **{stage: " + ".join(keys) for stage, keys in VERL_STAGES.items()},
    "updates": "ppo_epochs x (train_batch_size // ppo_mini_batch_size) per step",
    "reward_mean": "critic/score/mean", "length_mean": RESPONSE_MEAN, "truncation_rate": "response_length/clip_ratio",
}


def nested(cfg: dict, dotted: str, default: Any = None) -> Any:
    """``cfg["a"]["b"]`` for ``"a.b"``; ``default`` when any part is missing."""
    cur: Any = cfg
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return default
        cur = cur[part]
    return cur


def read_config(path: str | Path) -> dict:
    """verl's resolved hydra config (``.hydra/config.yaml``, or the same as JSON)."""
    p = Path(path)
    text = p.read_text()
    try:
        if p.suffix == ".json":
            cfg = json.loads(text)
        else:
            import yaml  # noqa: PLC0415 - only for configs

            cfg = yaml.safe_load(text)
    except Exception as e:  # noqa: BLE001 - any parse error is the file's
        raise PreregError(f"{p}: not a readable config: {' '.join(str(e).split())[:200]}") from None
    if not isinstance(cfg, dict):
        raise PreregError(f"{p}: a config is a mapping of settings, got {type(cfg).__name__}")
    return cfg


def read_file_logger(path: str | Path) -> pd.DataFrame:
    """The steps verl's ``file`` logger wrote: a ``step`` column, a ``line`` column (1-based
    line of the file) and one column per logged key. A line that is not ``{"step": int,
    "data": {...}}`` or a step logged twice is refused naming the line."""
    p = Path(path)
    rows, seen = [], {}
    for n, rec in json_lines(p):
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), int) or not isinstance(rec.get("data"), dict):
            raise PreregError(f"{p}:{n}: expected {{\"step\": <int>, \"data\": {{...}}}} (verl's file logger)")
        step = rec["step"]
        if step in seen:
            raise PreregError(f"{p}:{n}: step {step} logged again (first at line {seen[step]}): a resumed run? "
                              "keep only the lines of the run that continued")
        seen[step] = n
        rows.append({"step": step, "line": n, **rec["data"]})
    if not rows:
        raise PreregError(f"{p}: no steps logged")
    return pd.DataFrame(rows)


def _num(steps: pd.DataFrame, key: str, i: int, where: str) -> float:
    v = steps[key].iloc[i] if key in steps.columns else None
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise PreregError(f"{where}:{int(steps['line'].iloc[i])}: step {int(steps['step'].iloc[i])}: key {key!r} "
                          f"{'missing' if v is None or (isinstance(v, float) and math.isnan(v)) else f'is {v!r}, expected a number >= 0'}")
    return float(v)


def _opt(steps: pd.DataFrame, key: str, i: int) -> float:
    v = steps[key].iloc[i] if key in steps.columns else None
    return 0.0 if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def iterations_from_steps(steps: pd.DataFrame, *, where: str, responses_per_step: int | None,
                          updates_per_step: int) -> pd.DataFrame:
    """Run-log iteration rows from verl's training steps 1..n (see the module docstring)."""
    train = steps[steps[[k for k in TRAINING_KEYS if k in steps.columns]].notna().any(axis=1)] if any(
        k in steps.columns for k in TRAINING_KEYS) else steps.iloc[:0]
    if not len(train):
        raise PreregError(f"{where}: no training step has any of {', '.join(TRAINING_KEYS)}")
    train = train.sort_values("step", ignore_index=True)
    want = np.arange(1, len(train) + 1)
    if not np.array_equal(train["step"].to_numpy(), want):
        k = int(np.flatnonzero(train["step"].to_numpy() != want)[0])
        raise PreregError(f"{where}:{int(train['line'].iloc[k])}: training steps must run 1..n without gaps; found step "
                          f"{int(train['step'].iloc[k])} where {k + 1} was due (verl logs every step: was the file cut?)")
    if "train/num_gen_batches" in train.columns:
        raise PreregError(f"{where}: the run used dynamic sampling (train/num_gen_batches logged): verl logs only the kept "
                          "groups' tokens, so the discarded tokens are missing")
    rows = []
    for i in range(len(train)):
        if GEN not in train.columns or pd.isna(train[GEN].iloc[i]):
            if STEP in train.columns and not pd.isna(train[STEP].iloc[i]):
                raise PreregError(f"{where}:{int(train['line'].iloc[i])}: only {STEP} is logged, which includes validation "
                                  f"and checkpointing; the stage timers ({GEN}, {UPDATE_ACTOR}, ...) are needed")
        _num(train, GEN, i, where), _num(train, UPDATE_ACTOR, i, where)  # required timers (missing: refused)
        r = _num(train, RESPONSE_MEAN, i, where)
        if TOTAL in train.columns and not pd.isna(train[TOTAL].iloc[i]):
            total, p = _num(train, TOTAL, i, where), _num(train, PROMPT_MEAN, i, where)
            n_resp = total / (p + r) if p + r > 0 else 0.0
            if responses_per_step is not None and abs(n_resp - responses_per_step) > 0.5:
                raise PreregError(f"{where}:{int(train['line'].iloc[i])}: {TOTAL} / ({PROMPT_MEAN} + {RESPONSE_MEAN}) gives "
                                  f"{n_resp:.1f} responses, but the step should have {responses_per_step}")
            tokens = round(total * r / (p + r)) if p + r > 0 else 0
        elif responses_per_step is not None:
            tokens = round(r * responses_per_step)
        else:
            raise PreregError(f"{where}:{int(train['line'].iloc[i])}: {TOTAL} not logged: give the responses per step "
                              "(--config with data.train_batch_size and actor_rollout_ref.rollout.n, or --responses-per-step)")
        row = {"iteration": i, "tokens_rollout": int(tokens), "tokens_continuation": 0, "tokens_discarded": 0,
               "seconds_selection": 0.0,
               **{stage: sum(_num(train, k, i, where) if k in (GEN, UPDATE_ACTOR) else _opt(train, k, i) for k in keys)
                  for stage, keys in VERL_STAGES.items()},
               "updates": (i + 1) * updates_per_step, "length_mean": r, "verl_step": int(train["step"].iloc[i])}
        for col, key in (("reward_mean", "critic/score/mean"), ("truncation_rate", "response_length/clip_ratio"),
                         ("total_num_tokens", TOTAL)):
            if key in train.columns and not pd.isna(train[key].iloc[i]):
                row[col] = float(train[key].iloc[i])
        rows.append(row)
    return pd.DataFrame(rows)


def _problem_id(rec: dict) -> str:
    for k in ("problem_id", "id"):
        if isinstance(rec.get(k), (str, int)) and not isinstance(rec.get(k), bool):
            return str(rec[k])
    return "p-" + hashlib.sha256(str(rec["input"]).encode()).hexdigest()[:16]


def read_validation_dumps(folder: str | Path, *, eval_set: str | None) -> tuple[pd.DataFrame, list[Path]]:
    """Evaluation rows from ``<folder>/<global_step>.jsonl``: per dump and problem, samples and
    our verifiers' counts (:func:`.rescore.score_problems`), and verl's mean score."""
    d = Path(folder)
    files = sorted((p for p in d.glob("*.jsonl") if re.fullmatch(r"\d+", p.stem)), key=lambda p: int(p.stem))
    if not files:
        raise PreregError(f"{d}: no validation dumps (<global_step>.jsonl) found")
    frames = []
    for f in files:
        recs = []
        for n, rec in json_lines(f):
            missing = [k for k in ("input", "output", "gts") if not isinstance(rec, dict) or k not in rec]
            if missing:
                raise PreregError(f"{f}:{n}: key {missing[0]!r} missing (verl's validation dump has input, output, gts, score)")
            name = eval_set or rec.get("data_source")
            if not isinstance(name, str) or not name:
                raise PreregError(f"{f}:{n}: no data_source in the dump: give the plan's evaluation set (--eval-set)")
            score = rec.get("score")
            recs.append({"eval_set": name, "problem_id": _problem_id(rec), "output": str(rec["output"]),
                         "answer": str(rec["gts"]), "tool_score": float(score) if isinstance(score, (int, float)) else np.nan})
        if not recs:
            raise PreregError(f"{f}: empty validation dump")
        df = pd.DataFrame(recs)
        for name, g in df.groupby("eval_set", sort=False):
            g = g.copy()
            g["problem_id"] = g["problem_id"].astype(str)
            try:
                scored = score_problems(g)
            except ValueError as e:
                raise PreregError(f"{f}: {e}") from None
            scored["tool_score_mean"] = g.groupby("problem_id", sort=False)["tool_score"].mean().to_numpy()
            scored.insert(0, "eval_set", name)
            scored.insert(0, "iteration", int(f.stem))
            frames.append(scored)
    return pd.concat(frames, ignore_index=True), files


def import_verl(path: str | Path, *, config: str | Path | dict | None = None, validation_dir: str | Path | None = None,
                responses_per_step: int | None = None, updates_per_step: int | None = None,
                eval_set: str | None = None, eval_seed: int | None = None, started_at: datetime | None = None,
                ended_at: datetime | None = None, trainer: str = "verl", device: str = "unknown") -> ImportedRun:
    """Read a verl run: ``path`` is the ``file`` logger's JSONL; ``config`` verl's resolved config
    (a file or a dict); ``validation_dir`` the ``trainer.validation_data_dir`` dumps."""
    p = Path(path)
    cfg_path = Path(config) if isinstance(config, (str, Path)) else None
    cfg = read_config(cfg_path) if cfg_path else dict(config or {})
    where_cfg = str(cfg_path) if cfg_path else "--config"
    if nested(cfg, "algorithm.filter_groups.enable") is True:
        raise PreregError(f"{where_cfg}: algorithm.filter_groups.enable = true (dynamic sampling): verl logs only the kept "
                          "groups' tokens and dumps only kept outputs, so the discarded tokens are not in its files")
    tbs, n = nested(cfg, "data.train_batch_size"), nested(cfg, "actor_rollout_ref.rollout.n")
    if responses_per_step is None and isinstance(tbs, int) and isinstance(n, int):
        responses_per_step = tbs * n
    if updates_per_step is None:
        mini, epochs = nested(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size"), nested(cfg, "actor_rollout_ref.actor.ppo_epochs", 1)
        if not (isinstance(tbs, int) and isinstance(mini, int) and isinstance(epochs, int) and mini > 0):
            raise PreregError(f"{where_cfg}: the updates per step need data.train_batch_size and "
                              "actor_rollout_ref.actor.ppo_mini_batch_size (give --config, or --updates-per-step)")
        updates_per_step = epochs * max(tbs // mini, 1)
    steps = read_file_logger(p)
    iterations = iterations_from_steps(steps, where=str(p), responses_per_step=responses_per_step,
                                       updates_per_step=updates_per_step)
    files = [file_record(p, p.parent)] + ([file_record(cfg_path, cfg_path.parent)] if cfg_path else [])
    if validation_dir is not None:
        evaluations, dumps = read_validation_dumps(validation_dir, eval_set=eval_set)
        files += [file_record(f, Path(validation_dir)) | {"kind": "validation dump"} for f in dumps]
        if eval_seed is not None:
            evaluations["eval_seed"] = int(eval_seed)
    else:
        evaluations = pd.DataFrame(columns=["iteration", "eval_set", "problem_id", "samples", "correct"])
    notes = []
    if "timing_s/update_weights" not in steps.columns:
        notes.append("weight sync 0: this verl version does not time it apart (it is inside timing_s/gen)")
    if eval_seed is None:
        notes.append("evaluation sampling seed not known")
    return ImportedRun(trainer=trainer, importer="verl", iterations=iterations, evaluations=evaluations, config=cfg,
                       source={"files": files, "key_map": KEY_MAP, "responses_per_step": responses_per_step,
                               "updates_per_step": updates_per_step, "notes": notes},
                       started_at=started_at, ended_at=ended_at, device=device)


__all__ = ["KEY_MAP", "import_verl", "iterations_from_steps", "nested", "read_config", "read_file_logger",
           "read_validation_dumps"]
