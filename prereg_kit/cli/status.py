"""``prereg status``: a table of every run of a stage, its totals, ``--json`` and ``--watch``.

The reading is :mod:`prereg_kit.study.status`'s; this module only draws it. During the main stage the
table has no accuracy column and says the study is blind until it is analyzed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from .base import handles_errors, out

if TYPE_CHECKING:
    from rich.table import Table

_STYLE = {"pending": "dim", "queued": "cyan", "running": "bold blue", "stopped": "yellow", "failed": "red",
          "complete": "green"}


def _n(x: float | None) -> str:
    """A count of tokens or iterations to one decimal of its unit: ``512``, ``30.4k``, ``1.2M``."""
    if x is None:
        return "—"
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.1f}{suf}"
    return f"{x:.0f}"


def _t(s: float | None) -> str:
    if s is None:
        return "—"
    s = int(round(s))
    h, m = divmod(s, 3600)
    m, sec = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


def render(st) -> Table:
    """The table of one :class:`~prereg_kit.study.status.StudyStatus`, with the totals as its caption."""
    from rich.table import Table  # lock and verify print no table

    from ..study.status import BLIND_NOTE

    tab = Table(title=f"{escape(st.study)} · stage {st.stage} · {escape(st.plan)}", title_justify="left",
                caption_justify="left")
    for col in ("configuration", "seed", "state", "progress", "×B", "iteration", "evals", "train", "wall", "left",
                "job", "holder", "device"):
        tab.add_column(col, no_wrap=col not in ("holder", "job"))
    if not st.blind:
        tab.add_column("accuracy (last eval)")
    for r in st.runs:
        stop = f" / {_n(r.stop)}" if r.stop else ""
        unit = "" if r.unit == "tokens" else " it"
        job = " ".join(x for x in (r.executor, r.job_id, f"×{r.attempts}" if r.attempts > 1 else "") if x)
        holder = r.holder + (f" ({r.heartbeat_age_s:.0f}s ago)" if r.holder and r.heartbeat_age_s is not None else "")
        state = f"[{_STYLE.get(r.state, '')}]{r.state}[/]" + ("" if r.in_plan else " [magenta](not in plan)[/]")
        cells = [escape(r.configuration), str(r.seed), state, f"{_n(r.done)}{stop}{unit}",
                 "—" if r.b_multiple is None else f"{r.b_multiple:.2f}", str(r.iteration), str(r.evaluations),
                 _t(r.train_s if r.train_s else None), _t(r.wall_s), _t(r.eta_s) if r.state != "complete" else "",
                 escape(job), escape(holder), escape(r.device)]
        if not st.blind:
            cells.append(", ".join(f"{escape(k)} {v:.3f}" for k, v in (r.accuracy or {}).items()))
        tab.add_row(*cells)
    tot = st.totals()
    states = ", ".join(f"{tot[s]} {s}" for s in ("complete", "running", "queued", "pending", "stopped", "failed") if tot[s])
    # the tokens trained (runs end past their stop at an iteration's end) and the share of the stops reached
    prog = (f"; {_n(tot['done'])} / {_n(tot['total'])} {tot['unit']} trained / planned"
            + (f", {tot['fraction']:.0%} of the way" if tot["fraction"] is not None else "")) if tot["unit"] else ""
    eta = f"; about {_t(tot['eta_s'])} left at {tot['parallel']} run(s) at once" if tot["eta_s"] else ""
    extra = f"; {tot['not_in_plan']} run folder(s) not in plan" if tot["not_in_plan"] else ""
    tab.caption = f"{tot['runs']} run(s): {states or 'none'}{prog}{eta}{extra}" + (f"\n{BLIND_NOTE}" if st.blind else "")
    return tab


@handles_errors
def status(study_dir: Annotated[Path, typer.Argument(help="Study folder (holding plan.toml).")],
           stage: Annotated[str, typer.Option(help="Stage to show: main, smoke, pilot, calibration.")] = "main",
           as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document (for scripts) instead of the table.")] = False,
           watch: Annotated[float | None, typer.Option("--watch", min=0.05, help="Refresh every SECONDS until every run is complete or failed (Ctrl-C ends it).")] = None,
           parallel: Annotated[int | None, typer.Option("--parallel", min=1, help="Runs at once, for the study's time left (default: those running now).")] = None) -> None:
    """Progress of every run of a stage: state, tokens / B, iteration, evaluations, time, time left, job, holder."""
    from ..study.status import StatusCache, study_status

    cache = StatusCache()

    def read():
        return study_status(study_dir, stage, parallel=parallel, cache=cache)

    st = read()
    if watch is None:
        _show(st, as_json)
        return
    try:
        if out.is_terminal and not as_json:
            from rich.live import Live

            with Live(render(st), console=out, refresh_per_second=4) as live:
                while not st.finished:
                    time.sleep(watch)
                    st = read()
                    live.update(render(st))
            return
        _show(st, as_json, lines=True)  # one JSON document a line while watching
        while not st.finished:
            time.sleep(watch)
            st = read()
            _show(st, as_json, lines=True)
    except KeyboardInterrupt:
        return


def _show(st, as_json: bool, lines: bool = False) -> None:
    if as_json:
        print(st.to_json(indent=None if lines else 2), flush=True)
    else:
        out.print(render(st))
