"""Evaluation outputs from the completions tables TRL writes, as lines of an outputs file.

What TRL writes of its completions (TRL 1.16, trl/trainer/grpo_trainer.py): with
``log_completions=True``, ``GRPOTrainer.log`` writes on the main process, at every log,
``<output_dir>/completions/completions_<global_step:05d>.parquet`` with the columns ``step``,
``prompt``, ``completion`` (text, or a conversation: a list of ``{role, content}``), one column
per reward function (its ``__name__``), the columns reward functions add through the ``log_extra``
argument TRL passes them, and ``advantage``. The table is built from buffers that hold the last
``generation_batch_size`` completions generated (``GRPOTrainer._logs``), filled in training and
in TRL's own evaluation alike. Hence:

- the reference answer is in the table only if a reward function logs it
  (``log_extra("answer", answer)``; prereg's ``VerifierReward(log_answer=True)`` does);
- the table written at an evaluation (a log_history entry with ``eval_*`` keys at that step)
  replaces the training table of the same step; its last rows are the evaluation's completions,
  all of them only if the evaluation generated at most ``generation_batch_size`` (evaluation
  prompts x ``num_generations_eval``, else ``num_generations``); earlier rows are the training
  batch before it.

:func:`trl_outputs` therefore takes, for each evaluation step, the last ``completions`` rows of
that step's table, and refuses a table with fewer. Its records are the lines that
:func:`.rescore.read_outputs` reads (``--evaluations``): ``step``, ``input`` (the prompt's text;
``problem_id`` too where a reward function logged one), ``output``, ``answer`` and, when given,
``eval_set``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import PreregError
from .trl_state import read_json, state_file, written

TABLES = "completions"  # TRL's folder of completions tables under output_dir
TABLE = re.compile(r"completions_(\d+)\.parquet")


def completion_text(completion: Any) -> str:
    """The text of one TRL prompt or completion: a string, or a conversation whose last turn's
    content is the text (conversational datasets; multimodal parts: their text parts)."""
    if isinstance(completion, str):
        return completion
    if hasattr(completion, "tolist"):  # a conversation read back from Parquet: an array of dicts
        completion = completion.tolist()
    if isinstance(completion, (list, tuple)) and completion:
        last = completion[-1]
        if isinstance(last, dict) and "content" in last:
            content = last["content"]
            if hasattr(content, "tolist"):
                content = content.tolist()
            if isinstance(content, list):
                return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
            return str(content)
    raise PreregError(f"a TRL completion of type {type(completion).__name__} is neither text nor a conversation")


def tables(path: str | Path) -> dict[int, Path]:
    """TRL's completions tables under ``path`` (``output_dir``, its ``completions`` folder, or one
    table) by the step in their name."""
    p = Path(path)
    if p.is_file():
        m = TABLE.fullmatch(p.name)
        if not m:
            raise PreregError(f"{p}: not one of TRL's completions tables (completions_<step>.parquet)")
        return {int(m.group(1)): p}
    folder = p / TABLES if (p / TABLES).is_dir() else p
    if not folder.is_dir():
        raise PreregError(f"{p}: no such folder")
    found = {int(m.group(1)): f for f in folder.iterdir() if (m := TABLE.fullmatch(f.name))}
    if not found:
        raise PreregError(f"{folder}: no completions_<step>.parquet (TRL writes them with log_completions=True)")
    return found


def evaluation_steps(state: str | Path) -> list[int]:
    """The steps of the evaluation entries (``eval_*`` keys) of a ``trainer_state.json``."""
    p = state_file(state)
    doc = read_json(p, "TRL's trainer_state.json")
    hist = doc.get("log_history") if isinstance(doc, dict) else None
    if not isinstance(hist, list):
        raise PreregError(f"{p}: key 'log_history' missing or not a list (is this TRL's trainer_state.json?)")
    steps = []
    for i, e in enumerate(hist):
        if isinstance(e, dict) and any(str(k).startswith("eval_") for k in e):
            s = e.get("step")
            if isinstance(s, bool) or not isinstance(s, int) or s < 0:
                raise PreregError(f"{p}: log_history[{i}]: key 'step' is {written(s) if 'step' in e else 'missing'}, "
                                  "expected an integer >= 0")
            steps.append(s)
    if not steps:
        raise PreregError(f"{p}: no evaluation entry (eval_* keys) in log_history: TRL ran no evaluation")
    return sorted(set(steps))


def _read(f: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(f)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid / ArrowIOError derive from these
        raise PreregError(f"{f}: not a Parquet table ({str(e).splitlines()[0][:120]})") from None


def _cell(value: Any) -> Any:
    return value.item() if hasattr(value, "item") and not hasattr(value, "__len__") else value


def trl_outputs(path: str | Path, *, completions: int, eval_steps: Iterable[int] | None = None,
                state: str | Path | None = None, eval_set: str | None = None,
                answer_column: str = "answer") -> Iterator[dict]:
    """Evaluation outputs from TRL's completions tables (see the module docstring), one record
    per completion, in step order: ``step``, ``input``, ``output``, ``answer``, and
    ``problem_id`` / ``eval_set`` where known.

    ``path``: TRL's ``output_dir``, its ``completions`` folder or one table; ``completions``: the
    completions one evaluation generates (evaluation prompts x generations per prompt);
    ``eval_steps``: the steps TRL evaluated at, else read from ``state`` (a
    ``trainer_state.json`` or the folder holding it; default ``path``'s own);
    ``answer_column``: the column a reward function logged the reference answer into."""
    if isinstance(completions, bool) or not isinstance(completions, int) or completions < 1:
        raise PreregError(f"completions = {completions!r}: expected the number of completions one evaluation "
                          "generates (an integer >= 1)")
    found = tables(path)
    if eval_steps is None:
        if state is None:
            p = Path(path)
            state = p.parent.parent if p.is_file() else (p.parent if p.name == TABLES else p)
        steps = evaluation_steps(state)
    else:
        steps = sorted({int(s) for s in eval_steps})
    for step in steps:
        f = found.get(step)
        if f is None:
            raise PreregError(f"{Path(path)}: no completions_{step:05d}.parquet for the evaluation at step {step} "
                              "(TRL writes one at every log with log_completions=True)")
        df = _read(f)
        missing = [c for c in ("prompt", "completion", answer_column) if c not in df.columns]
        if missing:
            how = (" (TRL keeps the reference answer only when a reward function logs it: log_extra('answer', answer); "
                   "prereg's VerifierReward(log_answer=True) does)" if answer_column in missing else "")
            raise PreregError(f"{f}: column {missing[0]!r} missing{how}")
        if len(df) < completions:
            raise PreregError(f"{f}: {len(df)} completions, fewer than the {completions} one evaluation generates: TRL "
                              "keeps only the last generation_batch_size completions, so this evaluation was cut")
        rows = df.iloc[len(df) - completions:]
        for k, rec in zip(range(len(df) - completions, len(df)), rows.to_dict("records")):
            logged = _cell(rec.get("step", step))
            if logged != step:
                raise PreregError(f"{f}: row {k}: key 'step' is {written(logged)}, not the step {step} in the file name")
            answer = _cell(rec[answer_column])
            if answer is None or (isinstance(answer, float) and math.isnan(answer)):
                raise PreregError(f"{f}: row {k}: key {answer_column!r} is null: a reward function logged no answer for it")
            out = {"step": step, "input": completion_text(rec["prompt"]), "output": completion_text(rec["completion"]),
                   "answer": str(answer)}
            pid = _cell(rec.get("problem_id"))
            if pid is not None and not (isinstance(pid, float) and math.isnan(pid)):
                out["problem_id"] = str(pid)
            if eval_set is not None:
                out["eval_set"] = eval_set
            yield out


__all__ = ["TABLES", "completion_text", "evaluation_steps", "tables", "trl_outputs"]
