"""The ``prereg`` command: new, lock, amend, verify (and, as they land, run, analyze, ...).

User errors print one line each on stderr, without traceback, and exit with the error's code
(2 unusable input, 1 violation or refusal).
"""

from __future__ import annotations

import functools
import shutil
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from . import __version__
from .errors import PreregError
from .plan import PLAN_FILE

app = typer.Typer(
    name="prereg",
    help="Preregister, lock, run and analyze matched-compute RL training studies.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def handles_errors(fn):
    """Turn :class:`PreregError` into its lines on stderr and its exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PreregError as e:
            for line in e.lines:
                err.print(f"[red]error:[/red] {line}" if not line.startswith("  ") else line, soft_wrap=True)
            raise typer.Exit(e.exit_code) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        out.print(f"prereg-kit {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    pass


@app.command()
@handles_errors
def new(study_dir: Annotated[Path, typer.Argument(help="Folder for the new study.")],
        force: Annotated[bool, typer.Option(help="Overwrite an existing plan.toml.")] = False) -> None:
    """Write a commented template plan into STUDY_DIR/plan.toml."""
    target = study_dir / PLAN_FILE
    if target.exists() and not force:
        raise PreregError(f"{target}: exists already (use --force to overwrite)")
    study_dir.mkdir(parents=True, exist_ok=True)
    with resources.as_file(resources.files("prereg_kit") / "templates" / "plan.toml") as src:
        shutil.copyfile(src, target)
    out.print(f"wrote {target}: edit it, then `prereg lock {target}`")


@app.command()
@handles_errors
def lock(plan: Annotated[Path, typer.Argument(help="plan.toml or its study folder.")]) -> None:
    """Validate and lock a plan: write plan.lock beside it (a no-op if already locked unchanged)."""
    from .lock import lock_plan

    res = lock_plan(plan)
    e = res.entry
    if res.status == "unchanged":
        out.print(f"{res.path}: already locked at {e['time']}, plan unchanged: nothing to do")
        return
    git = e["git"]
    if git is None:
        where = "not in a git work tree"
    else:
        state = "committed and clean" if git["clean"] else "has uncommitted changes" if git["tracked"] else "not committed"
        where = f"git {git['commit'][:12] if git['commit'] else '(no commit yet)'}, plan {state}"
    out.print(f"locked {plan} at {e['time']} → {res.path}")
    out.print(f"  content {e['content_sha256'][:23]}…  raw {e['raw_sha256'][:23]}…  ({where})")


@app.command()
@handles_errors
def amend(plan: Annotated[Path, typer.Argument(help="plan.toml or its study folder.")],
          reason: Annotated[str, typer.Option("--reason", "-r", help="Why the plan changed (required).")] = "") -> None:
    """Record a dated, reasoned amendment of a locked plan (chained by hash)."""
    from .diff import describe
    from .lock import amend_plan

    res = amend_plan(plan, reason)
    e = res.entry
    out.print(f"amendment {e['index']} recorded at {e['time']} → {res.path}")
    if e["comment_only"]:
        out.print("  comments or layout only; meaning unchanged")
    for c in e["changes"]:
        out.print(f"  {describe(c)}", soft_wrap=True)


@app.command()
@handles_errors
def verify(path: Annotated[Path, typer.Argument(help="plan.toml or its study folder.")]) -> None:
    """Check the lock chain, the plan against its last entry, and the timing of main runs.

    Exit 0 clean, 1 violations, 2 unusable input.
    """
    from .verify import verify_study

    rep = verify_study(path)
    for line in rep.info:
        out.print(f"  {line}", soft_wrap=True)
    for line in rep.warnings:
        err.print(f"[yellow]warning:[/yellow] {line}", soft_wrap=True)
    for line in rep.violations:
        err.print(line if line.startswith("  ") else f"[red]violation:[/red] {line}", soft_wrap=True)
    for line in rep.problems:
        err.print(f"[red]error:[/red] {line}", soft_wrap=True)
    code = rep.exit_code
    verdict = {0: "[green]OK[/green]", 1: "[red]VIOLATIONS[/red]", 2: "[red]UNUSABLE INPUT[/red]"}[code]
    out.print(f"{rep.plan_path}: {verdict}")
    raise typer.Exit(code)


def main() -> None:  # console-script entry point
    app()


if __name__ == "__main__":
    main()
