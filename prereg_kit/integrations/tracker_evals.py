"""Per-problem evaluation results beside a tracker import (``--evaluations``).

Trackers log only aggregate evaluation metrics (e.g. verl's ``val-core/<set>/reward/mean@4``),
while the analysis reads one row per evaluation x set x problem (dense-rewards paper §C.1 "Pools and
evaluation": every B/16 generated tokens, 8 completions per problem; accuracy is the mean over problems of the fraction
correct, paired across the configurations of a seed). This module reads such a file, JSONL or
Parquet, in one of two shapes:

- counted: ``problem_id, eval_set, iteration|step, samples, correct`` and optionally
  ``correct_strict, boxed, greedy_correct, level, log_length, eval_seed``;
- raw outputs: ``problem_id, eval_set, iteration|step, answer`` and ``output`` (one completion a
  row) or ``outputs`` (a list a row), re-scored with our verifiers (default, strict, boxed).

``step`` is the tool's step stamp (steps completed); ``iteration`` is ours (0 = initial).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

from .jsonlines import json_lines
from .rescore import score_problems
from .trackers import TrackerError, evaluation_iteration

KEYS = ("problem_id", "eval_set")
COUNTED = ("samples", "correct")
OPTIONAL = ("correct_strict", "boxed", "greedy_correct", "level", "log_length", "eval_seed")


def read_table(path: Path) -> pd.DataFrame:
    """The rows of an evaluations file: Parquet, or JSON lines of one object each (read by
    :func:`.jsonlines.json_lines`, so bytes that are not UTF-8 or a line that is not JSON are
    refused by file and line)."""
    if path.suffix == ".parquet":
        try:
            return pd.read_parquet(path)
        except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds for a file that is not Parquet
            raise TrackerError(f"{path}: not a Parquet file ({type(e).__name__})") from None
    if path.suffix in (".jsonl", ".json"):
        rows = []
        for n, rec in json_lines(path):
            if not isinstance(rec, dict):
                raise TrackerError(f"{path}:{n}: expected a JSON object (one evaluation row a line)")
            rows.append({k: (float(v) if isinstance(v, float) else int(v) if isinstance(v, int) and not isinstance(v, bool)
                             else v) for k, v in rec.items()})
        if not rows:
            raise TrackerError(f"{path}: no evaluation rows")
        return pd.DataFrame(rows)
    raise TrackerError(f"{path}: evaluations must be .jsonl or .parquet")


def _rescore(df: pd.DataFrame) -> pd.DataFrame:
    parts = []
    for (eval_set, it), g in df.groupby(["eval_set", "iteration"], sort=True):
        scored = score_problems(g[["problem_id", "output", "answer"]].reset_index(drop=True))
        if "problem_id" not in scored.columns:
            scored = scored.reset_index()
        parts.append(scored.assign(eval_set=eval_set, iteration=it))
    return pd.concat(parts, ignore_index=True)


def load_evaluations(path: str | Path, first_step: int) -> tuple[pd.DataFrame, dict]:
    """The evaluation rows of ``path`` and the source entry (file, sha256, shape)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TrackerError(f"{path}: {e.strerror or e}") from None
    df = read_table(path)
    missing = [c for c in KEYS if c not in df.columns]
    if missing:
        raise TrackerError(f"{path}: evaluations need the column(s) {', '.join(missing)}")
    if "iteration" not in df.columns:
        if "step" not in df.columns:
            raise TrackerError(f"{path}: evaluations need 'iteration' (ours, 0 = initial) or 'step' (the tool's)")
        df = df.assign(iteration=evaluation_iteration(df["step"], first_step))
    df = df.assign(problem_id=df["problem_id"].astype(str), eval_set=df["eval_set"].astype(str))
    if all(c in df.columns for c in COUNTED):
        shape = "counted"
        cols = ["iteration", *KEYS, *COUNTED, *(c for c in OPTIONAL if c in df.columns)]
        out = df[cols]
    elif "answer" in df.columns and ("output" in df.columns or "outputs" in df.columns):
        shape = "outputs re-scored with trainer.data.verifiers (default, strict, boxed)"
        if "output" not in df.columns:
            df = df.explode("outputs").rename(columns={"outputs": "output"})
        df = df.assign(output=df["output"].fillna("").astype(str), answer=df["answer"].astype(str))
        out = _rescore(df)
    else:
        raise TrackerError(f"{path}: evaluations need samples and correct per problem, or answer with output(s) to re-score")
    dup = out.duplicated(["iteration", *KEYS])
    if dup.any():
        r = out[dup].iloc[0]
        raise TrackerError(f"{path}: problem {r['problem_id']!r} of {r['eval_set']!r} appears twice at iteration {int(r['iteration'])}")
    entry = {"path": path.name, "sha256": hashlib.sha256(data).hexdigest(), "shape": shape}
    return out.sort_values(["iteration", "eval_set", "problem_id"], kind="stable").reset_index(drop=True), entry
