"""Re-scoring another trainer's evaluation outputs with our verifiers.

A trainer's own evaluation score is its reward function's, not the preregistered verifier's
(paper 1 §2.2: accuracy under the default verifier; the strict verifier requires a boxed answer,
and the boxed rate is read beside it). Where a trainer dumps the evaluation outputs, every output
is scored here with ``trainer.data.verifiers``: ``default``, ``strict`` and ``has_boxed``; the
per-problem counts are the run log's ``samples``, ``correct``, ``correct_strict`` and ``boxed``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from ..errors import PreregError
from .importing import file_record

from trainer.data.verifiers import get_verifier, has_boxed  # the trainer's verifiers: the preregistered rule

SCORE_COLUMNS = ("correct", "correct_strict", "boxed")


def rescore(outputs: Sequence[str], answers: Sequence[str]) -> pd.DataFrame:
    """One row per output: ``correct`` (default verifier), ``correct_strict`` (strict verifier),
    ``boxed`` (a closed boxed answer), each 0/1, in the order given."""
    if len(outputs) != len(answers):
        raise ValueError(f"rescore: {len(outputs)} outputs but {len(answers)} answers")
    default, strict = get_verifier("default"), get_verifier("strict")
    rows = [(int(default(o, a)), int(strict(o, a)), int(has_boxed(o))) for o, a in zip(map(str, outputs), map(str, answers))]
    return pd.DataFrame(rows, columns=list(SCORE_COLUMNS), dtype="int64")


def score_problems(df: pd.DataFrame) -> pd.DataFrame:
    """Per problem (in order of first appearance): ``problem_id``, ``samples`` (outputs of the
    problem), ``correct``, ``correct_strict``, ``boxed`` (counts); from ``problem_id``,
    ``output`` and ``answer`` columns. A problem whose outputs carry different answers is refused:
    the samples of one problem share its reference answer."""
    for c in ("problem_id", "output", "answer"):
        if c not in df.columns:
            raise ValueError(f"score_problems: column {c!r} missing (have: {', '.join(map(str, df.columns))})")
    answers = df.groupby("problem_id", sort=False)["answer"].nunique()
    if (answers > 1).any():
        pid = answers.index[answers.to_numpy() > 1][0]
        raise ValueError(f"score_problems: problem {pid!r} has outputs with different reference answers")
    scored = pd.concat([df[["problem_id"]].reset_index(drop=True),
                        rescore(df["output"].tolist(), df["answer"].tolist())], axis=1)
    g = scored.groupby("problem_id", sort=False)
    out = g[list(SCORE_COLUMNS)].sum()
    out.insert(0, "samples", g.size())
    return out.reset_index()


def json_lines(path: str | Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) of every non-blank line of a JSON-lines file, as the tools write
    them (verl's file logger and dumps, W&B histories exported as lines, outputs files); a line
    that is not JSON is refused naming the file and line."""
    p = Path(path)
    if not p.is_file():  # the path as typed, not an internal error from open()
        raise PreregError(f"{p}: no such file" if not p.exists() else f"{p}: a folder, not a JSON-lines file")
    with open(p, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as e:
                raise PreregError(f"{p}:{n}: not a JSON line ({e.msg})") from None


def read_outputs(path: str | Path, *, eval_set: str | None) -> pd.DataFrame:
    """Evaluation rows from an outputs file: one JSON line per evaluation output with ``step``
    (training steps done before the evaluation; 0 = before training), ``output``, ``answer``,
    and ``problem_id`` or ``input`` (a problem is then a hash of its text); ``eval_set`` per line
    or for the whole file. Rows: iteration, eval_set, problem_id and our verifiers' counts."""
    p = Path(path)
    recs = []
    for n, rec in json_lines(p):
        if not isinstance(rec, dict):
            raise PreregError(f"{p}:{n}: expected a JSON object")
        for k in ("step", "output", "answer"):
            if k not in rec:
                raise PreregError(f"{p}:{n}: key {k!r} missing (an outputs line has step, problem_id or input, output, answer)")
        if not isinstance(rec["step"], int) or isinstance(rec["step"], bool) or rec["step"] < 0:
            raise PreregError(f"{p}:{n}: key 'step': expected an integer >= 0, got {rec['step']!r}")
        pid = rec.get("problem_id")
        if pid is None:
            if "input" not in rec:
                raise PreregError(f"{p}:{n}: key 'problem_id' or 'input' missing")
            pid = "p-" + hashlib.sha256(str(rec["input"]).encode()).hexdigest()[:16]
        name = rec.get("eval_set", eval_set)
        if not isinstance(name, str) or not name:
            raise PreregError(f"{p}:{n}: no eval_set: give the plan's evaluation set (--eval-set)")
        recs.append({"iteration": rec["step"], "eval_set": name, "problem_id": str(pid),
                     "output": str(rec["output"]), "answer": str(rec["answer"])})
    if not recs:
        raise PreregError(f"{p}: no evaluation outputs")
    df = pd.DataFrame(recs)
    frames = []
    for (it, name), g in df.groupby(["iteration", "eval_set"], sort=True):
        scored = score_problems(g)
        scored.insert(0, "eval_set", name)
        scored.insert(0, "iteration", int(it))
        frames.append(scored)
    return pd.concat(frames, ignore_index=True)


def outputs_evaluations(evaluations: str | Path | None, *, eval_set: str | None,
                        eval_seed: int | None) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """The evaluation rows of an importer from an optional outputs file (:func:`read_outputs`),
    with the evaluation sampling seed when it is known, and the file's record for the run's
    source; no file: no evaluations (the analysis then refuses the seed by name)."""
    if evaluations is None:
        return pd.DataFrame(columns=["iteration", "eval_set", "problem_id", "samples", "correct"]), []
    ev = read_outputs(evaluations, eval_set=eval_set)
    if eval_seed is not None:
        ev["eval_seed"] = int(eval_seed)
    return ev, [file_record(evaluations, Path(evaluations).parent) | {"kind": "evaluation outputs"}]


__all__ = ["SCORE_COLUMNS", "json_lines", "outputs_evaluations", "read_outputs", "rescore", "score_problems"]
