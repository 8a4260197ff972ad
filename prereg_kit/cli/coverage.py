"""``prereg registry --coverage``: the papers' tables and figures with the plans, contrasts and
rechecked rows that hold them (``prereg_kit/registry/coverage.py``), one table per paper."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ..registry.coverage import coverage, coverage_line, coverage_record
from .base import out_console
from .jsonout import print_json


def coverage_table(base: Path, as_json: bool) -> None:
    """``prereg registry --coverage``: one table per paper, then the covered count."""
    papers = coverage(base)
    if as_json:
        print_json(coverage_record(base, papers))
        return
    if not papers:
        out_console.print(f"no coverage files in {base / 'coverage'}")
    style = {"covered": "green", "reason": "yellow", "partial": "red", "not covered": "red"}
    for p in papers:
        t = Table(title=f"coverage of the {p.paper} paper ({p.file.name})")
        for col in ("item", "title", "plans", "contrasts", "recheck rows", "status"):
            t.add_column(col, overflow="fold")
        for i in p.items:
            rows = f"{len(i.checked_rows)} of {len(i.recheck)}" if i.recheck else "—"
            status = {"reason": f"not coverable: {i.reason}"}.get(i.status, i.status)
            t.add_row(*map(escape, (i.id, i.title, ", ".join(i.plans) or "—", ", ".join(i.contrasts + i.checks) or "—", rows)),
                      f"[{style[i.status]}]{escape(status)}[/{style[i.status]}]")
        out_console.print(t)
    out_console.print(coverage_line(papers))
