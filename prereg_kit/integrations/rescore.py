"""Re-scoring another trainer's evaluation outputs with our verifiers.

A trainer's own evaluation score is its reward function's, not the preregistered verifier's
(dense-rewards paper §2.3 "Verifier": accuracy under the default verifier; the strict verifier requires a boxed answer,
and the boxed rate is read beside it). Where a trainer dumps the evaluation outputs, every output
is scored here with ``trainer.data.verifiers``: ``default``, ``strict`` and ``has_boxed``; the
per-problem counts are the run log's ``samples``, ``correct``, ``correct_strict`` and ``boxed``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

# the trainer's verifiers: the preregistered rule
from trainer.data.verifiers import get_verifier, has_boxed

from ..errors import PreregError
from .importing import MAX_STEP, file_record
from .jsonlines import json_lines, written

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


def is_integer(value: Any) -> bool:
    """A JSON integer (``true`` and ``false`` are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def problem_of(rec: dict, where: str) -> str:
    """A problem's identity: its ``problem_id`` (a string or an integer) as given, else a hash of
    its ``input`` text (the same text is the same problem in every evaluation)."""
    pid = rec.get("problem_id")
    if pid is not None:
        if not (isinstance(pid, str) or is_integer(pid)) or pid == "":
            raise PreregError(f"{where}: key 'problem_id' is {written(pid)}, expected a string or an integer")
        return str(pid)
    if "input" not in rec:
        raise PreregError(f"{where}: key 'problem_id' or 'input' missing (a problem is named by one of them)")
    if not isinstance(rec["input"], str):
        raise PreregError(f"{where}: key 'input' is {written(rec['input'])}, expected the prompt's text")
    return "p-" + hashlib.sha256(rec["input"].encode()).hexdigest()[:16]


def text_of(rec: dict, key: str, where: str, *, what: str) -> str:
    """``rec[key]`` as text: a string, or an integer (a reference answer may be written as one)."""
    v = rec[key]
    if isinstance(v, str) or (is_integer(v) and key != "output"):
        return str(v)
    raise PreregError(f"{where}: key {key!r} is {written(v)}, expected {what}")


class SameAnswer:
    """Refuses a problem whose outputs at one evaluation carry different reference answers,
    naming both lines: the samples of one problem share its reference answer."""

    def __init__(self, key: str = "answer"):
        self.key, self.first = key, {}

    def check(self, at: tuple, answer: str, where: str, line: int) -> None:
        prev = self.first.setdefault(at, (answer, line))
        if prev[0] != answer:
            raise PreregError(f"{where}:{line}: key {self.key!r} is {written(answer)}, but line {prev[1]} gave problem "
                              f"{at[-1]} the answer {written(prev[0])}: the samples of one problem share its reference answer")


def scored_outputs(df: pd.DataFrame, *, means: Sequence[str] = ()) -> pd.DataFrame:
    """Per evaluation (``iteration``), set and problem, evaluations in order and problems in
    order of first appearance: ``samples`` and our verifiers' counts of the outputs in ``df``
    (columns iteration, eval_set, problem_id, output, answer; the readers have checked that a
    problem's outputs share their answer), and ``<column>_mean`` of each column in ``means``."""
    keys = ["iteration", "eval_set", "problem_id"]
    scores = rescore(df["output"].tolist(), df["answer"].tolist())
    g = pd.concat([df[[*keys, *means]].reset_index(drop=True), scores], axis=1).groupby(keys, sort=False)
    out = g[list(SCORE_COLUMNS)].sum()
    out.insert(0, "samples", g.size())
    for col in means:
        out[f"{col}_mean"] = g[col].mean()
    return out.reset_index().sort_values(["iteration", "eval_set"], kind="stable", ignore_index=True)


def read_outputs(path: str | Path, *, eval_set: str | None) -> pd.DataFrame:
    """Evaluation rows from an outputs file: one JSON line per evaluation output with ``step``
    (training steps done before the evaluation; 0 = before training), ``output``, ``answer``,
    and ``problem_id`` or ``input`` (a problem is then a hash of its text); ``eval_set`` per line
    or for the whole file. Rows: iteration, eval_set, problem_id and our verifiers' counts.
    A line is refused naming the file, line, key and the value as written."""
    p = Path(path)
    recs, same, first = [], SameAnswer(), {}
    for n, rec in json_lines(p):
        where = f"{p}:{n}"
        if not isinstance(rec, dict):
            raise PreregError(f"{where}: expected a JSON object (an outputs line has step, problem_id or input, output, "
                              f"answer), got {written(rec)}")
        for k in ("step", "output", "answer"):
            if k not in rec:
                raise PreregError(f"{where}: key {k!r} missing (an outputs line has step, problem_id or input, output, answer)")
        if not is_integer(rec["step"]) or not 0 <= rec["step"] < MAX_STEP:
            raise PreregError(f"{where}: key 'step' is {written(rec['step'])}, expected an integer >= 0 (the training "
                              "steps done before the evaluation)")
        pid = problem_of(rec, where)
        output = text_of(rec, "output", where, what="the output's text")
        answer = text_of(rec, "answer", where, what="the reference answer's text")
        name = rec.get("eval_set", eval_set)
        if not isinstance(name, str) or not name:
            raise PreregError(f"{where}: key 'eval_set' is {written(name)}, expected the plan's evaluation set's name"
                              if "eval_set" in rec else f"{where}: no eval_set: give the plan's evaluation set (--eval-set)")
        same.check((int(rec["step"]), name, pid), answer, str(p), n)
        recs.append({"iteration": int(rec["step"]), "eval_set": name, "problem_id": pid, "output": output, "answer": answer})
        first.setdefault(int(rec["step"]), n)
    if not recs:
        raise PreregError(f"{p}: no evaluation outputs (the file is empty)")
    out = scored_outputs(pd.DataFrame(recs))
    out.attrs["first_line"] = first
    return out


def check_steps(evaluations: pd.DataFrame, steps: int, path: str | Path | None) -> None:
    """Refuse an evaluation of an outputs file (:func:`read_outputs`) stamped after the ``steps``
    training steps logged, naming the file and the line of its first output."""
    if path is None or not len(evaluations):
        return
    late = sorted(k for k in evaluations.attrs.get("first_line", {}) if k > steps)
    if late:
        line = evaluations.attrs["first_line"][late[0]]
        raise PreregError(f"{path}:{line}: key 'step' is {late[0]}, but the training steps logged end at step {steps}")


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


__all__ = ["SCORE_COLUMNS", "SameAnswer", "check_steps", "is_integer", "json_lines", "outputs_evaluations", "problem_of", "read_outputs",
           "rescore", "score_problems", "scored_outputs", "text_of"]
