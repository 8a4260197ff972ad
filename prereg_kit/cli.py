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


def _console(stderr: bool = False) -> Console:
    c = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not c.is_terminal:
        c.width = 160  # tables in logs and pipes: don't squeeze them to 80 columns
    return c


out = out_console = _console()
err = _console(stderr=True)


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


@app.command()
@handles_errors
def analyze(study_dir: Annotated[Path, typer.Argument(help="Study folder (plan.toml, plan.lock, runs/).")],
            exploratory: Annotated[bool, typer.Option(
                "--exploratory", help="Analyze despite failed preregistration checks; label every result exploratory.")] = False,
            resamples: Annotated[int, typer.Option(help="Bootstrap resamples (default: the plan's).")] = 0,
            out: Annotated[Path, typer.Option(help="Report folder (default STUDY_DIR/report).")] = None) -> None:
    """Verify the lock, read the run logs, compute every contrast at matched compute, write the report.

    Exit 1 if the preregistration checks fail (plan changed, runs before the lock); 2 for
    unusable input (no lock, unpaired runs, corrupt logs).
    """
    from .analyze import analyze_study
    from .report import write_report

    a = analyze_study(study_dir, exploratory=exploratory, n_resamples=resamples or None)
    target = out or Path(study_dir) / "report"
    files = write_report(a, target)
    _print_contrasts(a)
    for h in a.hypotheses.itertuples():
        out_console.print(f"{h.id}: {h.outcome} → {h.reading}", soft_wrap=True)
    for n in a.notes:
        err.print(f"[yellow]note:[/yellow] {n}", soft_wrap=True)
    out_console.print(f"report: {target / 'report.md'} ({len(files)} files)")


def _print_contrasts(a) -> None:
    from rich.table import Table

    from .report import format_p

    t = Table(title=f"{a.plan.study.id}: contrasts" + (" (EXPLORATORY)" if a.exploratory else ""))
    for col in ("contrast", "tier", "pair", "at", "n", "Δ [95% CI]", "tested p (Holm if primary)", "TOST p", "verdict"):
        t.add_column(col)
    for r in a.contrasts.itertuples():
        t.add_row(r.contrast, r.tier, f"{r.treatment} − {r.control}", r.at, str(r.n),
                  f"{r.mean:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}]",
                  format_p(r.p_holm if r.tier == "primary" else r.tested_p), format_p(r.tost_p), r.verdict)
    out_console.print(t)


def _pairs(items: list[str], option: str, example: str) -> dict[str, float]:
    """``["A=0.1", ...]`` → ``{"A": 0.1}``; a malformed item is a one-line error."""
    out = {}
    for item in items:
        name, sep, val = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[name.strip()] = float(val)
        except ValueError:
            raise PreregError(f"{option} {item!r}: expected NAME=NUMBER, e.g. {example}") from None
    return out


@app.command("dry-run")
@handles_errors
def dry_run_cmd(plan: Annotated[Path, typer.Argument(help="plan.toml or its study folder (need not be locked).")],
                effect: Annotated[list[str], typer.Option(
                    "--effect", "-e", help="CONTRAST=DELTA: true treatment − control at B (fraction). Repeatable.")] = [],
                repeat: Annotated[int, typer.Option(help="Further synthetic studies, for power by simulation.")] = 0,
                out: Annotated[Path, typer.Option(help="Folder for the synthetic study (default PLAN_DIR/dry-run).")] = None,
                seed: Annotated[int, typer.Option(help="Seed of the synthetic data.")] = 0,
                resamples: Annotated[int, typer.Option(help="Bootstrap resamples (default: the plan's).")] = 0,
                time_ratio: Annotated[list[str], typer.Option(
                    "--time-ratio", help="CONFIG=X: training seconds per token relative to the others.")] = [],
                update_ratio: Annotated[list[str], typer.Option(
                    "--update-ratio", help="CONFIG=X: optimizer updates per token relative to the others.")] = []) -> None:
    """Simulate the plan on synthetic run logs with chosen effects; report what it would conclude."""
    from .dryrun import dry_run

    res = dry_run(plan, _pairs(effect, "--effect", "C1=0.02"), out=out, repeat=repeat, seed=seed,
                  n_resamples=resamples or None, time_ratio=_pairs(time_ratio, "--time-ratio", "mc_k4=0.3"),
                  update_ratio=_pairs(update_ratio, "--update-ratio", "mc_k4=0.1"))
    out_console.print("true effects at B: " + ", ".join(f"{k} {v:+.3f}" for k, v in res.effects.items()))
    _print_contrasts(res.analysis)
    if res.power is not None:
        from rich.table import Table

        t = Table(title=f"verdicts over {repeat} simulated studies")
        for col in res.power.columns:
            t.add_column(str(col))
        for row in res.power.itertuples(index=False):
            t.add_row(*[f"{x:.2f}" if isinstance(x, float) else str(x) for x in row])
        out_console.print(t)
    out_console.print(f"synthetic study: {res.folder}; report: {res.folder / 'report' / 'report.md'}")


def main() -> None:  # console-script entry point
    app()


if __name__ == "__main__":
    main()
