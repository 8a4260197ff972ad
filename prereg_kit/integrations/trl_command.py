"""``prereg evaluate-checkpoints STUDY``: score the checkpoints of TRL runs trained with
``PreregCallback(evaluate="deferred")`` (``trl_deferred.evaluate_checkpoints``), then finish and
seal each run. Registered through the ``prereg_kit.commands`` entry-point group."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from prereg_kit.errors import PreregError

app = typer.Typer(add_completion=False)


@app.callback(invoke_without_command=True)
def main(study: Annotated[Path, typer.Argument(help="the study folder (plan.toml, runs/)")],
         stage: Annotated[str, typer.Option(help="the stage whose runs to score")] = "main") -> None:
    """Score deferred TRL checkpoints with the plan's evaluations; finish and seal the runs."""
    from prereg_kit.plan import resolve_plan_path

    try:
        resolve_plan_path(study)  # a wrong path is named before the trainer (and torch) loads
        from .trl_deferred import evaluate_checkpoints  # the trainer loads only when the command runs

        done = evaluate_checkpoints(study, stage=stage, log=typer.echo)
    except PreregError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(getattr(e, "exit_code", 1)) from None
    typer.echo(f"{len(done)} run(s) evaluated and finished" + ("" if done else " (nothing pending)"))
