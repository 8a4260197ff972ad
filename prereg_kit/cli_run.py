"""``prereg run``: hand a stage's configurations × seeds to the installed trainer.

The trainer (``prereg_kit.runners``) trains; this module only reads the command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .cli_base import RUNNER_HELP, err, handles_errors, out, seed_list, split_values


@handles_errors
def run(study_dir: Annotated[Path, typer.Argument(help="Study folder (holding plan.toml).")],
        stage: Annotated[str, typer.Option(help="Stage to run: main (needs a locked plan), smoke, pilot, calibration.")] = "main",
        configs: Annotated[list[str] | None, typer.Option("--configs", help="Configurations to run (comma-separated or repeated); default all.")] = None,
        seeds: Annotated[list[str] | None, typer.Option("--seeds", help="Seeds to run: 0,1 or 0-3 (repeatable); default all.")] = None,
        jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help="Runs at once (default: one per GPU; 1 on CPU).")] = None,
        runner: Annotated[str | None, typer.Option("--runner", help=RUNNER_HELP)] = None) -> None:
    """Train every configuration x seed of the plan's stage; skip complete runs, resume incomplete ones."""
    from .runners import load_runner

    backend = load_runner(runner, command="run")
    chosen = seed_list(split_values(seeds) or []) if seeds else None
    if not backend.run(study_dir, stage=stage, configs=split_values(configs), seeds=chosen, n_jobs=jobs, console=err):
        raise typer.Exit(1)
    if stage == "calibration":  # the budget and truncation rules, written as an amendment
        from .calibrate import apply_calibration

        out.print(escape("\n".join(apply_calibration(study_dir).lines())))
