"""`prereg registry` (the registry's studies and their state, or the papers' coverage) and
`prereg recheck` (the papers' printed numbers recomputed): the registry's two commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import PreregError
from .base import RUNNER_HELP, err, handles_errors, out_console
from .jsonout import JsonOpt, print_json


@handles_errors
def registry_cmd(root: Annotated[Path, typer.Option(
        help="Registry folder (default: ./registry, else the repository's registry/).")] = None,
        why: Annotated[bool, typer.Option("--why", help="Name, for every configuration the trainer cannot run, why.")] = False,
        runner: Annotated[str | None, typer.Option("--runner", help=RUNNER_HELP)] = None, as_json: JsonOpt = False,
        coverage: Annotated[bool, typer.Option("--coverage", help="The papers' tables and figures the registry covers.")] = False) -> None:
    """List the registry's studies: plan valid, locked, runs, report, reported record, and how many
    configurations the installed trainer can run; or, with --coverage, the papers' tables and figures."""
    from rich.markup import escape
    from rich.table import Table

    from ..registry import default_root, registry_states

    if coverage:  # registry/coverage/*.toml: plans, contrasts and rechecked rows per table and figure
        from .coverage import coverage_table
        return coverage_table(root or default_root(), as_json)
    from .runners import configuration_problems, load_runner

    base = root or default_root()
    states = registry_states(base)
    try:
        backend, not_checked = load_runner(runner, command="registry"), ""
    except PreregError as e:
        backend, not_checked = None, e.lines[0]
    problems = {s.folder: configuration_problems(backend, s.plan) if backend and s.plan else None for s in states}
    if backend is not None and all(p is None for p in problems.values()) and any(s.plan for s in states):
        not_checked = "the installed trainer does not say which configurations it can run"
    bad = sum(not s.plan_valid or bool(s.reported_error) for s in states)
    if as_json:
        from .jsonout import registry_record

        print_json(registry_record(base, states, problems, getattr(backend, "name", runner or ""), not_checked, why))
        raise typer.Exit(2 if bad else 0)
    t = Table(title=f"registry: {base} ({len(states)} studies)")
    for col in ("study", "id", "title", "plan", "locked", "runs", "report", "reported", "runnable"):
        t.add_column(col, overflow="fold")
    for s in states:
        plan = "[green]✓[/green]" if s.plan_valid else f"[red]✗[/red] {escape(s.plan_error)}"
        rep = ("—" if s.reported_rows is None else f"[red]✗[/red] {escape(s.reported_error)}" if s.reported_error
               else f"{s.reported_rows} rows" + (f", {s.endpoints} endpoints" if s.endpoints else ""))
        pr = problems[s.folder]
        runnable = "—" if pr is None else f"{sum(not v for v in pr.values())} of {len(pr)}"
        t.add_row(escape(s.folder), escape(s.study_id), escape(s.title), plan, s.locked, str(s.runs) if s.runs else "—",
                  "✓" if s.report else "—", rep, runnable)
    out_console.print(t)
    out_console.print(f"{len(states)} studies, {sum(s.plan_valid for s in states)} valid plans, "
                      f"{sum(s.reported_rows is not None for s in states)} reported records" + (f", {bad} with errors" if bad else ""))
    checked = [p for p in problems.values() if p is not None]
    if checked:
        n_ok = sum(not v for p in checked for v in p.values())
        out_console.print(f"{n_ok} of {sum(len(p) for p in checked)} configurations runnable by the trainer "
                          f"'{getattr(backend, 'name', runner or '')}'" + ("" if why else " (--why names the reasons)"))
    else:
        out_console.print(f"runnable: not checked ({not_checked})")
    if why:
        for folder, p in problems.items():
            for name, lines in (p or {}).items():
                if lines:
                    out_console.print(f"{folder}/{name}: {escape(lines[0])}" + (f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""),
                                      highlight=False)
    if bad:
        raise typer.Exit(2)


@handles_errors
def recheck_cmd(studies: Annotated[list[str], typer.Argument(help="Study folders or ids (S1, S01, S26).")] = None,
                all_: Annotated[bool, typer.Option("--all", help="Recheck every study with a reported record.")] = False,
                root: Annotated[Path, typer.Option(help="Registry folder (default: ./registry, else the repository's).")] = None,
                mismatches: Annotated[bool, typer.Option("--mismatches", help="Show only inconsistent and explained rows.")] = False,
                as_json: JsonOpt = False) -> None:
    """Recompute every printed p-value from its printed mean, 95% CI and n, and every endpoint from the paper's other printed numbers; list those that do not match.

    Exit 0 when every mismatch is explained in its record, 1 otherwise.
    """
    from rich.markup import escape
    from rich.table import Table

    from ..registry import default_root, recheck

    if not studies and not all_:
        raise PreregError("name one or more studies, or use --all")
    base = root or default_root()
    res = recheck(base, None if all_ else list(studies))
    if as_json:
        from .jsonout import recheck_record

        print_json(recheck_record(res, [r for r in res.rows if r.mismatch or not mismatches]))
        raise typer.Exit(res.exit_code)
    style = {"consistent": "green", "explained": "yellow", "inconsistent": "red", "no test": "dim", "not checkable": "dim"}
    t = Table(title="recheck of reported p-values (from printed mean, 95% CI and n) and endpoints (from other printed numbers); rounding allowed")
    for col in ("study", "row", "source", "n", "printed Δ [95% CI]", "printed test", "recomputed", "status"):
        t.add_column(col, overflow="fold")
    for r in res.rows:
        if mismatches and not r.mismatch:
            continue
        status = r.status + ("*" if "inferred" in r.basis and r.status == "consistent" else "")
        detail = "; ".join(r.checks) + (f" [{r.basis}]" if r.basis else "")
        if r.explanation:
            detail += f" — explained: {r.explanation}"
        t.add_row(*map(escape, (r.study, r.row, r.source, str(r.n or ""), r.printed, r.test, detail)),
                  f"[{style[r.status]}]{status}[/{style[r.status]}]")
    out_console.print(t)
    c = res.counts()
    out_console.print(", ".join(f"{v} {k}" for k, v in c.items()) + f" ({len(res.rows)} rows)"
                      + (f"; no reported record: {', '.join(res.skipped)}" if res.skipped else ""))
    if any("inferred" in r.basis for r in res.rows):
        out_console.print("* consistent only with a Holm family size inferred from the printed value (the paper does not state the family)")
    for r in res.unexplained:
        err.print(f"[red]unexplained mismatch:[/red] {escape(r.study)} {escape(r.row)} ({escape(r.source)}): "
                  f"{escape('; '.join(r.checks))}", soft_wrap=True)
    raise typer.Exit(res.exit_code)
