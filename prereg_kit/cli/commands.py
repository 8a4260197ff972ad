"""The ``prereg`` command: new, lock, amend, verify (and, as they land, run, analyze, ...).

User errors print one line each on stderr, without traceback, and exit with the error's code
(2 unusable input, 1 violation or refusal). An input too large or deep for memory or the stack
exits 2; any other unexpected exception is a bug in prereg-kit: one line, exit 3 (set
``PREREG_TRACEBACK=1`` to see the traceback instead).
"""

from __future__ import annotations

import copy
import shutil
import sys
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .. import __version__
from ..errors import PreregError
from .base import RUNNER_HELP, PreregGroup, err, handles_errors, out, out_console
from .base import seed_list as _seed_list
from .export import export_app
from .jsonout import JsonOpt, print_json
from .registry import recheck_cmd, registry_cmd
from .run import run as run_command
from .status import status as status_command

# PreregGroup: flags without `<bool>`, arguments as STUDY_DIR in every --help
app = typer.Typer(name="prereg", help="Preregister, lock, run and analyze matched-compute RL training studies.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, cls=PreregGroup)


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
    from ..plan import PLAN_FILE  # the plan's models (pydantic) only for commands that read one: --help starts fast

    target = study_dir / PLAN_FILE
    if target.exists() and not force:
        raise PreregError(f"{target}: exists already (use --force to overwrite)")
    study_dir.mkdir(parents=True, exist_ok=True)
    with resources.as_file(resources.files("prereg_kit") / "templates" / "plan.toml") as src:
        shutil.copyfile(src, target)
    out.print(f"wrote {target}: edit it, then `prereg lock {target}`")


TimestampOpt = Annotated[str | None, typer.Option(
    "--timestamp", metavar="URL",
    help="Also get an RFC 3161 timestamp of the chain's head from this time-stamping authority (kept in timestamps/).")]
TsaCaOpt = Annotated[Path | None, typer.Option(
    "--tsa-ca", help="The TSA's root certificate (PEM/DER): receipts must verify against it.")]


def _stamp_head(plan: Path, url: str | None, tsa_ca: Path | None) -> None:
    """Timestamp the lock chain's head into STUDY/timestamps/ (no-op when ``url`` is None)."""
    if url is None:
        return
    from ..chain.lock import read_chain
    from ..chain.timestamp import digest_of, stamp_entry, verify_receipt
    from ..plan import resolve_plan_path

    plan_path = resolve_plan_path(plan)
    head = read_chain(plan_path).head
    path = stamp_entry(plan_path.parent, head, url, trusted=tsa_ca)
    info = verify_receipt(path.read_bytes(), digest_of(head["hash"]), trusted=tsa_ca)
    out.print(escape(f"  timestamp: entry {head['index']} ({head['kind']}) existed by {info.gen_time.isoformat()} per {info.tsa}"
                     f" → {path}" + ("" if info.chain_checked else " (TSA not checked against a root: give --tsa-ca)")))


def _print_runs(plan: Path) -> None:
    """What the plan names to run, one line per stage: a seed typo shows as a count."""
    from ..plan import load_plan
    from ..study.jobs import run_summary

    out.print(escape("\n".join(f"  {line}" for line in run_summary(load_plan(plan).plan))), soft_wrap=True)


@app.command()
@handles_errors
def lock(plan: Annotated[Path, typer.Argument(help="plan.toml or its study folder.")],
         timestamp: TimestampOpt = None, tsa_ca: TsaCaOpt = None) -> None:
    """Validate and lock a plan: write plan.lock beside it (a no-op if already locked unchanged); say what it runs."""
    from ..chain.lock import lock_plan
    from .recipecheck import gate

    notes: list[str] = []  # "recipe not checked: ..." when the plan's trainer is not installed
    res = lock_plan(plan, check=gate(notes))
    for line in notes:
        out.print(escape(line), soft_wrap=True)
    e, git = res.entry, res.entry.get("git")
    if res.status == "unchanged":
        out.print(escape(f"{res.path}: already locked at {e['time']}, plan unchanged: nothing to do"))
    else:
        state = ("committed and clean" if git["clean"] else "has uncommitted changes" if git["tracked"] else "not committed") if git else ""
        where = f"git {git['commit'][:12] if git['commit'] else '(no commit yet)'}, plan {state}" if git else "not in a git work tree"
        out.print(escape(f"locked {plan} at {e['time']} → {res.path}"))
        out.print(f"  content {e['content_sha256'][:23]}…  raw {e['raw_sha256'][:23]}…  ({where})")
    for r in e.get("sources") or []:  # [[sources]]: each study read, as its lock was pinned
        out.print(escape(f"  source {r['name']} ({r['study']}): study {r['study_id']}, lock {r['lock'][:23]}…, "
                         f"plan entry {r['entry']} pinned"))
    _print_runs(plan)
    _stamp_head(plan, timestamp, tsa_ca)


@app.command()
@handles_errors
def amend(plan: Annotated[Path, typer.Argument(help="plan.toml or its study folder.")],
          reason: Annotated[str, typer.Option("--reason", "-r", help="Why the plan changed (required).")] = "",
          timestamp: TimestampOpt = None, tsa_ca: TsaCaOpt = None) -> None:
    """Record a dated, reasoned amendment of a locked plan (chained by hash)."""
    from ..chain.lock import amend_plan
    from ..plan.diff import describe
    from .recipecheck import gate

    notes: list[str] = []
    res = amend_plan(plan, reason, check=gate(notes))
    for line in notes:
        out.print(escape(line), soft_wrap=True)
    e = res.entry
    out.print(escape(f"amendment {e['index']} recorded at {e['time']} → {res.path}"))
    if e["comment_only"]:
        out.print("  comments or layout only; meaning unchanged")
    for c in e["changes"]:
        out.print(escape(f"  {describe(c)}"), soft_wrap=True)
    _print_runs(plan)
    _stamp_head(plan, timestamp, tsa_ca)


@app.command("timestamp")
@handles_errors
def timestamp_cmd(study_dir: Annotated[Path, typer.Argument(help="Study folder or its plan.toml.")],
                  tsa: Annotated[str, typer.Option("--tsa", metavar="URL", help="The time-stamping authority (RFC 3161 over HTTP).")],
                  tsa_ca: TsaCaOpt = None) -> None:
    """Timestamp the lock chain's head now, e.g. after the runs are sealed.

    The receipt proves that every entry up to the head existed by the TSA's time. It is kept in
    STUDY_DIR/timestamps/ and `prereg verify` checks it offline.
    """
    _stamp_head(study_dir, tsa, tsa_ca)


@app.command()
@handles_errors
def verify(path: Annotated[Path, typer.Argument(help="plan.toml or its study folder.")],
           tsa_ca: TsaCaOpt = None, as_json: JsonOpt = False,
           head: Annotated[str | None, typer.Option(
               "--head", metavar="SHA256",
               help="The chain's head hash the author shared: fail unless an entry of the chain has it.")] = None,
           receipts: Annotated[Path | None, typer.Option("--receipts", metavar="DIR", help=(
               "RFC 3161 receipts you kept (*.tsr): each must stamp an entry still in the chain."))] = None) -> None:
    """Check the lock chain, the plan, its anchors and timestamps, the seals, the run timing and the design.

    Every run folder must be one the plan names and every sealed file as it was sealed; the anchors
    the plan declares ([integrity]) must hold for every entry. Exit 0 clean, 1 violations, 2 unusable input.
    """
    from ..study.verify import verify_study
    from .recipecheck import gate

    notes: list[str] = []
    rep = verify_study(path, tsa_ca=tsa_ca, check=gate(notes), head=head, receipts=receipts)
    if as_json:  # the findings are the document; the exit code as without --json
        from .jsonout import verify_record

        print_json(verify_record(rep, notes))
        raise typer.Exit(rep.exit_code)
    for line in rep.info + notes:  # plan values and paths are printed as text, never as rich markup
        out.print(f"  {escape(line)}", soft_wrap=True)
    for line in rep.warnings:
        err.print(f"[yellow]warning:[/yellow] {escape(line)}", soft_wrap=True)
    for line in rep.violations:
        err.print(escape(line) if line.startswith("  ") else f"[red]violation:[/red] {escape(line)}", soft_wrap=True)
    for line in rep.problems:
        err.print(f"[red]error:[/red] {escape(line)}", soft_wrap=True)
    code = rep.exit_code
    verdict = {0: "[green]OK[/green]", 1: "[red]VIOLATIONS[/red]", 2: "[red]UNUSABLE INPUT[/red]"}[code]
    out.print(f"{escape(str(rep.plan_path))}: {verdict}")
    raise typer.Exit(code)


@app.command()
@handles_errors
def seal(study_dir: Annotated[Path, typer.Argument(help="Study folder (plan.toml, plan.lock, runs/).")]) -> None:
    """Seal the complete main runs of a locked study into its lock chain (runs from other trainers).

    The built-in trainer seals each main run when it completes; logs converted from another
    trainer are sealed with this command before `prereg analyze`. Runs sealed before are left as
    they are; a run whose files changed since its seal is refused. Exit 0, 1 if any run was refused.
    """
    from ..chain.seal import seal_runs

    res = seal_runs(study_dir)
    for key in res.sealed:
        out.print(escape(f"  sealed {key}"))
    if res.already:
        out.print(f"  {len(res.already)} run(s) sealed before, unchanged")
    for line in res.refused:
        err.print(f"[red]refused:[/red] {escape(line)}", soft_wrap=True)
    entry = res.entries[-1] if res.entries else None
    out.print(f"{len(res.sealed)} run(s) sealed" + (f" (entries {res.entries[0]['index']}–{entry['index']}, {entry['time']})"
                                                    if entry else ""))
    raise typer.Exit(1 if res.refused else 0)


@app.command()
@handles_errors
def analyze(study_dir: Annotated[Path, typer.Argument(help="Study folder (plan.toml, plan.lock, runs/).")],
            exploratory: Annotated[bool, typer.Option(
                "--exploratory", help="Analyze despite failed preregistration checks; label every result exploratory.")] = False,
            resamples: Annotated[int, typer.Option(help="Bootstrap resamples (default: the plan's).")] = 0,
            out: Annotated[Path, typer.Option(help="Report folder (default STUDY_DIR/report).")] = None,
            look: Annotated[int, typer.Option(help="Sequential plans: the look to read (default: the last the runs complete).")] = 0,
            tsa_ca: TsaCaOpt = None, as_json: JsonOpt = False) -> None:
    """Verify the lock, read the run logs, compute every contrast at matched compute, write the report.

    A plan with [sequential] is read at one look, recorded in the lock chain (not when exploratory).

    Exit 1 if the preregistration checks fail (plan changed, runs before the lock); 2 for
    unusable input (no lock, unpaired runs, corrupt logs).
    """
    from ..analysis.analyze import analyze_study
    from ..report import write_report

    a = analyze_study(study_dir, exploratory=exploratory, n_resamples=resamples or None, tsa_ca=tsa_ca,
                      look=look or None, **({"progress": False} if as_json else {}))
    if a.sequential is not None:  # the look enters the lock chain before any report is written
        from ..chain.look_chain import record_look

        sq = a.sequential
        state = "not recorded (exploratory)"
        if not exploratory:
            state, entry = record_look(a.plan_path, sq.fields)
            state = f"{state} as lock entry {entry['index']}"
        err.print(escape(f"look {sq.look} of {sq.of} on seeds {', '.join(map(str, sq.fields['seeds']))}: "
                         f"{sq.decision} ({state})"), soft_wrap=True)
    target = out or Path(study_dir) / "report"
    files = write_report(a, target)
    if as_json:  # the record results.json holds; notes also on stderr, as without --json
        from ..report import results_record

        print_json(results_record(a))
        for n in a.notes:
            err.print(f"[yellow]note:[/yellow] {escape(n)}", soft_wrap=True)
        return
    _print_contrasts(a)
    for h in a.hypotheses.itertuples():
        out_console.print(escape(f"{h.id}: {h.outcome} → {h.reading}"), soft_wrap=True)
    for n in a.notes:
        err.print(f"[yellow]note:[/yellow] {escape(n)}", soft_wrap=True)
    out_console.print(escape(f"report: {target / 'report.md'} ({len(files)} files)"))


def _print_contrasts(a) -> None:
    from ..report import console_table

    out_console.print(console_table(a))


@app.command("dry-run")
@handles_errors
def dry_run_cmd(plan: Annotated[Path, typer.Argument(help="plan.toml or its study folder (need not be locked).")],
                effect: Annotated[list[str] | None, typer.Option(
                    "--effect", "-e", help="CONTRAST=DELTA: true treatment − control at B (fraction). Repeatable.")] = None,
                repeat: Annotated[int, typer.Option(help="Further synthetic studies, for power by simulation.")] = 0,
                out: Annotated[Path, typer.Option(help="Folder for the synthetic study (default PLAN_DIR/dry-run).")] = None,
                seed: Annotated[int, typer.Option(help="Seed of the synthetic data.")] = 0,
                resamples: Annotated[int, typer.Option(help="Bootstrap resamples (default: the plan's).")] = 0,
                time_ratio: Annotated[list[str] | None, typer.Option(
                    "--time-ratio", help="CONFIG=X: training seconds per token relative to the others.")] = None,
                update_ratio: Annotated[list[str] | None, typer.Option(
                    "--update-ratio", help="CONFIG=X: optimizer updates per token relative to the others.")] = None,
                as_json: JsonOpt = False) -> None:
    """Simulate the plan on synthetic run logs with chosen effects; report what it would conclude."""
    from ..simulate.dryrun import dry_run, parse_pairs

    res = dry_run(plan, parse_pairs(effect or [], "--effect", "C1=0.02"), out=out, repeat=repeat, seed=seed,
                  n_resamples=resamples or None, time_ratio=parse_pairs(time_ratio or [], "--time-ratio", "mc_k4=0.3"),
                  update_ratio=parse_pairs(update_ratio or [], "--update-ratio", "mc_k4=0.1"), **({"progress": False} if as_json else {}))
    if as_json:  # the synthetic analysis's results record, with the true effects and power.csv's rows
        from ..report import results_record
        from .jsonout import frame_records

        print_json({**results_record(res.analysis), "effects": res.effects,
                    "power": None if res.power is None else frame_records(res.power),
                    **({"looks_power": frame_records(res.power.attrs["looks"])} if res.power is not None and "looks" in res.power.attrs else {})})
        return
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
        if "looks" in res.power.attrs:  # a sequential plan: stopping per look, power by the final look
            t = Table(title=f"sequential looks over {repeat} simulated studies (rejected_by_look at the last look: the power)")
            for col in res.power.attrs["looks"].columns:
                t.add_column(str(col))
            for row in res.power.attrs["looks"].itertuples(index=False):
                t.add_row(*[f"{x:.2f}" if isinstance(x, float) else str(x) for x in row])
            out_console.print(t)
    out_console.print(escape(f"synthetic study: {res.folder}; report: {res.folder / 'report' / 'report.md'}"))


app.command("run")(run_command)  # prereg_kit/cli/run.py
app.command("status")(status_command)  # prereg_kit/cli/status.py
app.command("registry")(registry_cmd)  # prereg_kit/cli/registry.py
app.command("recheck")(recheck_cmd)


@app.command("gradient-test")
@handles_errors
def gradient_test_cmd(study_dir: Annotated[Path, typer.Argument(help="Study folder (holding plan.toml, locked).")],
                      test: Annotated[list[str] | None, typer.Option("--test", help="Gradient test id (repeatable); default all.")] = None,
                      runner: Annotated[str | None, typer.Option("--runner", help=RUNNER_HELP)] = None) -> None:
    """Run the locked plan's gradient tests through the trainer and seal each result into the lock chain."""
    from ..plan import resolve_plan_path

    resolve_plan_path(study_dir)  # a wrong path is named before the trainer's modules load
    from .gradient import run_gradient_tests, summary_lines

    done = run_gradient_tests(study_dir, test, runner_name=runner, log=lambda m: err.print(escape(m), soft_wrap=True))
    out.print(escape("\n".join(summary_lines(study_dir, [e["test"] for e in done]))), soft_wrap=True)


@app.command()
@handles_errors
def probe(study_dir: Annotated[Path, typer.Argument(help="Study folder (holding plan.toml).")],
          stage: Annotated[str, typer.Option(help="Stage whose runs are the probe (one configuration per learning rate).")] = "pilot",
          eval_set: Annotated[str | None, typer.Option("--eval-set", help="Development set (default: the plan's first).")] = None) -> None:
    """The learning-rate stability probe: each rate's runs collapsed or degraded, and the largest stable rate."""
    from ..stages.probe import probe_study

    out.print(escape("\n".join(probe_study(study_dir, stage=stage, eval_set=eval_set).lines())))


@app.command()
@handles_errors
def elect(study_dir: Annotated[Path, typer.Argument(help="Study folder (holding plan.toml).")],
          configuration: Annotated[str | None, typer.Option(help="Configuration whose channels are candidates (default: the one with anchor = \"elected\").")] = None,
          seeds: Annotated[str | None, typer.Option(help="Probe seeds: 0,1 or 0-3 (default: the plan's first seed).")] = None,
          tokens: Annotated[str | None, typer.Option(help="Probe budget in generated tokens: 15K, or B/2 (default B/2; not with --steps).")] = None,
          steps: Annotated[int | None, typer.Option(min=1, help="Stop each probe after T iterations instead (the paper's T = 300; not with --tokens).")] = None,
          prompts: Annotated[int, typer.Option(min=1, help="Held-out prompts for the KLs (the primary evaluation set's first N).")] = 64,
          samples: Annotated[int, typer.Option(min=1, help="Samples per prompt for each KL.")] = 4,
          jobs: Annotated[int | None, typer.Option("--jobs", "-j", min=1, help="Probe runs at once (default: one per GPU; 1 on CPU).")] = None,
          runner: Annotated[str | None, typer.Option("--runner", help=RUNNER_HELP)] = None) -> None:
    """Anchor election: a probe per channel, reverse/forward KL from the base; writes election.json."""
    from rich.markup import escape

    from ..plan import resolve_plan_path
    from .runners import load_runner

    resolve_plan_path(study_dir)  # a wrong path is named before the trainer (and torch) loads
    backend = load_runner(runner, command="elect")
    seed_list = _seed_list([x.strip() for x in seeds.split(",") if x.strip()]) if seeds else None
    if steps is not None and tokens is not None:
        raise PreregError("give --steps or --tokens, not both: a probe stops after T iterations or at a token budget")
    rec = backend.elect(study_dir, configuration=configuration, seeds=seed_list, tokens=tokens, steps=steps, prompts=prompts,
                        samples=samples, n_jobs=jobs, log=lambda m: err.print(escape(m), soft_wrap=True))
    import json

    print(json.dumps({"elected": rec["elected"], "kl_rev": rec["kl_rev"], "kl_fwd": rec["kl_fwd"]}))


app.add_typer(export_app, name="export")


def add_commands(group: str = "prereg_kit.commands") -> None:  # other packages' commands: `prereg import` (docs/cli.md)
    from importlib.metadata import entry_points
    for ep in entry_points(group=group):
        app.add_typer(ep.load(), name=ep.name)
add_commands()


def app_for(args: list[str]) -> typer.Typer:
    """The app that runs ``prereg ARGS``: for one of this module's commands (``prereg lock ...``), a
    copy of ``app`` holding that command alone, else ``app``. typer builds the parameters of every
    command before it runs one (about 70 ms for all of them); a command's behaviour and its
    ``--help`` are the same in the copy, which leaves ``app`` unchanged."""
    from typer.main import get_command_name

    name = args[0] if args else None
    mine = [c for c in app.registered_commands if (c.name or get_command_name(c.callback.__name__)) == name]
    if len(mine) != 1 or any(g.name == name for g in app.registered_groups):
        return app
    one = copy.copy(app)
    one.registered_commands, one.registered_groups = mine, []
    return one


def main() -> None:  # console-script entry point
    app_for(sys.argv[1:])()


if __name__ == "__main__":
    main()
