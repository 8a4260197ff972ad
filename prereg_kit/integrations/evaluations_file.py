"""``prereg import evaluations --from TOOL PATH --out FILE``: an ``--evaluations`` file from what a trainer writes.

The tracker imports (``prereg import tensorboard|mlflow|wandb``), ``prereg import openrlhf`` and
``prereg import trl`` need per-problem evaluation results that the trackers do not keep. This
command builds the outputs file they read (:func:`.rescore.read_outputs`, and the raw-output shape
of :mod:`.tracker_evals`): one JSON line per evaluation output with ``step`` (the training steps
done before the evaluation; 0 = before training), ``eval_set``, ``problem_id``, ``input``,
``output``, ``answer`` and ``tool_score`` (the trainer's own score, kept beside ours; null where
it logged none). Our verifiers score the outputs when the file is imported.

:data:`SOURCES` maps a tool's name to a plain function ``(path, **options) -> iterator of
records`` (the keys above; ``options``: ``eval_set``); a new tool adds an entry. A tool that
writes no per-output evaluation file is in :data:`NO_OUTPUTS` with the reason, which
``--from`` gives as its refusal. The file is written atomically (a temporary file in the same
folder, moved in place when every line is read) and never over an existing file unless
``--force``. Its pandas and the readers load only when the command runs (``prereg --help`` stays
fast).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from ..cli.base import handles_errors, out
from ..errors import PreregError

RECORD_KEYS = ("step", "eval_set", "problem_id", "input", "output", "answer", "tool_score")


def from_verl(path: str | Path, *, eval_set: str | None = None) -> Iterator[dict[str, Any]]:
    """verl's validation dumps (``trainer.validation_data_dir``: ``<global_step>.jsonl`` with
    input, output, gts, score): every output, in step and line order."""
    from .verl import validation_records

    for r in validation_records(path, eval_set=eval_set):
        yield {k: r[k] for k in RECORD_KEYS}


def from_trl(path: str | Path, *, completions: int | None = None, eval_steps: list[int] | None = None,
             state: str | Path | None = None, answer_column: str = "answer",
             eval_set: str | None = None) -> Iterator[dict[str, Any]]:
    """TRL's completions tables (``log_completions=True``: ``completions/completions_<step>.parquet``
    in its ``output_dir``): each evaluation's completions (:func:`.trl_outputs.trl_outputs`),
    the reference answer from the column a reward function logged it into (``VerifierReward(log_answer=True)``),
    a problem named by its id where logged, else by its prompt's text."""
    from .rescore import problem_of
    from .trl_outputs import trl_outputs

    if completions is None:
        raise PreregError("--from trl needs --completions N: the completions one evaluation generates (evaluation "
                          "prompts x generations per prompt); TRL's tables keep only the last generation batch")
    for n, r in enumerate(trl_outputs(path, completions=completions, eval_steps=eval_steps, state=state,
                                      eval_set=eval_set, answer_column=answer_column), 1):
        yield {"step": r["step"], "eval_set": r.get("eval_set", eval_set),
               "problem_id": problem_of(r, f"{path}: completion {n}"), "input": r.get("input"),
               "output": r["output"], "answer": r["answer"], "tool_score": None}


Source = Callable[..., Iterator[dict[str, Any]]]
SOURCES: dict[str, Source] = {"verl": from_verl, "trl": from_trl}
TRL_ONLY = ("completions", "eval_steps", "state", "answer_column")  # options only the trl source takes
NO_OUTPUTS: dict[str, str] = {
    "openrlhf": "OpenRLHF 0.11.2 writes no evaluation outputs: PPOTrainer.evaluate (openrlhf/trainer/ppo_trainer.py) "
                "logs only pass@k aggregates (eval/*) to W&B or TensorBoard; save the outputs yourself, one JSON line "
                "per output with step, input, output, answer",
}


def build(source: str, path: str | Path, out_file: str | Path, *, force: bool = False, **options: Any) -> int:
    """Write the outputs file ``out_file`` from ``path`` read by ``SOURCES[source]``; return the
    number of outputs written. Refused (one line): an unknown source or one in
    :data:`NO_OUTPUTS`, an output name that is not ``.jsonl``, an existing file without
    ``force``, a source with no outputs, and whatever the source's reader refuses."""
    fn = SOURCES.get(source)
    if fn is None:
        if source in NO_OUTPUTS:
            raise PreregError(f"--from {source}: {NO_OUTPUTS[source]}")
        raise PreregError(f"--from {source!r}: not a source of evaluation outputs (have: {', '.join(sorted(SOURCES))})")
    dest = Path(out_file)
    if dest.suffix != ".jsonl":
        raise PreregError(f"--out {dest}: name the file *.jsonl (the importers read --evaluations as JSON lines)")
    if dest.is_dir():
        raise PreregError(f"--out {dest}: a folder, not a file")
    if dest.exists() and not force:
        raise PreregError(f"--out {dest}: already exists; give --force to replace it")
    if not dest.parent.is_dir():
        raise PreregError(f"--out {dest}: the folder {dest.parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for rec in fn(path, **options):
                fh.write(json.dumps({k: rec.get(k) for k in RECORD_KEYS}, ensure_ascii=False, allow_nan=False) + "\n")
                count += 1
            fh.flush()
            os.fsync(fh.fileno())
        if not count:
            raise PreregError(f"{path}: no evaluation outputs")
        if force:
            os.replace(tmp, dest)
        else:
            try:
                os.link(tmp, dest)  # fails rather than replace a file that appeared meanwhile
            except FileExistsError:
                raise PreregError(f"--out {dest}: already exists; give --force to replace it") from None
            os.unlink(tmp)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


SOURCE_HELP = (f"The tool that wrote PATH: {', '.join(SOURCES)}. "
               + " ".join(f"{name}: none to read ({why.split(': ', 1)[0]})." for name, why in NO_OUTPUTS.items()))


@handles_errors
def evaluations_cmd(path: Annotated[Path, typer.Argument(help="What the trainer wrote: verl's trainer.validation_data_dir "
                                                               "(the <global_step>.jsonl validation dumps); TRL's output_dir, "
                                                               "its completions/ folder or one completions table.")],
                    source: Annotated[str, typer.Option("--from", help=SOURCE_HELP)],
                    out_file: Annotated[Path, typer.Option("--out", help="The outputs file to write (*.jsonl); give it "
                                                                         "to an import as --evaluations.")],
                    eval_set: Annotated[str | None, typer.Option("--eval-set", help="The plan's evaluation set the "
                                                                 "outputs belong to (verl's dumps do not name one).")] = None,
                    completions: Annotated[int | None, typer.Option("--completions", min=1, help="trl: the completions one "
                                                                    "evaluation generates (prompts x generations).")] = None,
                    eval_step: Annotated[list[int] | None, typer.Option("--eval-step", help="trl: a step TRL evaluated at "
                                                                        "(repeatable; default: read from trainer_state.json).")] = None,
                    state: Annotated[Path | None, typer.Option("--state", help="trl: its trainer_state.json (default: the "
                                                               "one in PATH).")] = None,
                    answer_column: Annotated[str, typer.Option("--answer-column", help="trl: the table column a reward "
                                                               "function logged the reference answer into.")] = "answer",
                    force: Annotated[bool, typer.Option("--force", help="Replace FILE if it exists.")] = False) -> None:
    """Build an --evaluations file (JSON lines: step, eval_set, problem_id, input, output, answer) from a trainer's
    evaluation outputs: verl's validation dumps, TRL's completions tables. OpenRLHF writes none (it logs only pass@k
    aggregates)."""
    trl = {"completions": completions, "eval_steps": eval_step or None, "state": state, "answer_column": answer_column}
    given = [k for k in TRL_ONLY if trl[k] is not None and (k != "answer_column" or trl[k] != "answer")]
    if source != "trl" and given:
        raise PreregError(f"--{given[0].replace('_', '-').replace('eval-steps', 'eval-step')}: an option of --from trl only")
    options = {"eval_set": eval_set, **(trl if source == "trl" else {})}
    n = build(source, path, out_file, force=force, **options)
    out.print(f"wrote {n} evaluation outputs -> {out_file} (give it as --evaluations; our verifiers score it on import)",
              soft_wrap=True)


COMMANDS: dict[str, Callable[..., None]] = {"evaluations": evaluations_cmd}

__all__ = ["COMMANDS", "NO_OUTPUTS", "RECORD_KEYS", "SOURCES", "build", "from_trl", "from_verl"]
