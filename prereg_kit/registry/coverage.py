"""How much of each paper the registry covers: every table and figure that prints a comparison,
with the plans and contrasts that hold it and the reported rows that ``prereg recheck`` checks.

``registry/coverage/<paper>.toml`` lists a paper's items::

    paper = "dense-rewards"            # the short name of docs/papers.md
    [[item]]
    id = "Table 11"                    # as the paper numbers it ("Figure 7", "Table C.2")
    title = "Share of the budget the critic filter needs"
    plans = ["S20", "S22"]             # registry studies (folder name or plan id)
    contrasts = ["S22:P1"]             # STUDY:CONTRAST, a contrast of that study's plan
    checks = ["S21:C-calibration"]     # STUDY:CHECK, a manipulation check ([[checks]]) of that study's plan
    recheck = ["S22:T11-history"]      # STUDY:ROWID, a row of that study's reported.toml
    reason = "…"                       # optional: why the paper's own text keeps it from being covered

An item is **covered** when it has at least one plan, one contrast or manipulation check (a reading
within one configuration, such as the critic's calibration) and at least one recheck row whose
recheck ran (any status but ``not checkable``), or a ``reason``. Every name is checked against the
registry: an unknown study, contrast, check or row is an error naming the file and the item.
``prereg registry --coverage`` prints the table; see ``docs/registry.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field

from ..errors import PreregError
from ..plan import PLAN_FILE, load_plan
from . import REPORTED_FILE, find_study, load_record_file, recheck_study

COVERAGE_DIR = "coverage"
PAPERS = ("dense-rewards", "multi-reward")  # the short names of docs/papers.md
COVERAGE_STATUSES = ("covered", "reason", "partial", "not covered")


class CoverageItem(BaseModel):
    """One table or figure of a paper and where the registry holds it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    title: str = Field(min_length=1)
    plans: list[str] = []
    contrasts: list[str] = []
    checks: list[str] = []
    recheck: list[str] = []
    reason: str | None = Field(default=None, min_length=1)


class CoverageFile(BaseModel):
    """``registry/coverage/<paper>.toml``: one paper's tables and figures."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    paper: str
    item: list[CoverageItem] = []


@dataclass
class ItemCoverage:
    """One item with its status and, per recheck row, the row's recheck status."""

    paper: str
    id: str
    title: str
    plans: list[str]
    contrasts: list[str]
    recheck: list[str]
    reason: str | None
    checks: list[str] = field(default_factory=list)  # STUDY:CHECK, manipulation checks read in place of a contrast
    row_status: dict[str, str] = field(default_factory=dict)  # STUDY:ROWID -> recheck status

    @property
    def checked_rows(self) -> list[str]:
        """The recheck rows that recheck actually checked (all but ``not checkable``)."""
        return [r for r, s in self.row_status.items() if s != "not checkable"]

    @property
    def status(self) -> str:
        if self.plans and (self.contrasts or self.checks) and self.checked_rows:
            return "covered"
        if self.reason:
            return "reason"
        if self.plans or self.contrasts or self.checks or self.recheck:
            return "partial"
        return "not covered"

    @property
    def covered(self) -> bool:
        return self.status in ("covered", "reason")


@dataclass
class PaperCoverage:
    paper: str
    file: Path
    items: list[ItemCoverage]


def coverage_files(root: str | Path) -> list[Path]:
    """The coverage files under ``root/coverage/``, sorted by name (none: an empty list)."""
    d = Path(root) / COVERAGE_DIR
    return sorted(d.glob("*.toml")) if d.is_dir() else []


def load_coverage_file(path: str | Path) -> CoverageFile:
    """Read and validate the schema of one coverage file (names are checked by :func:`coverage`)."""
    p = Path(path)
    cf = load_record_file(p, CoverageFile)
    if cf.paper not in PAPERS:
        raise PreregError(f"{p}: paper = {cf.paper!r} is not a paper of docs/papers.md (one of {', '.join(PAPERS)})")
    ids = [i.id for i in cf.item]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise PreregError(f"{p}: items listed twice: {', '.join(dup)}")
    return cf


class _Registry:
    """Study folders, plan contrasts and reported rows with their recheck status, each read once."""

    def __init__(self, root: Path):
        self.root = root
        self._dirs: dict[str, Path] = {}
        self._contrasts: dict[Path, set[str]] = {}
        self._checks: dict[Path, set[str]] = {}
        self._rows: dict[Path, dict[str, str]] = {}

    def study(self, name: str) -> Path:
        if name not in self._dirs:
            if not name or "/" in name or "\\" in name:
                raise PreregError(f"{name!r} is not a study name")
            self._dirs[name] = find_study(self.root, name)
        return self._dirs[name]

    def contrasts(self, d: Path) -> set[str]:
        if d not in self._contrasts:
            plan = load_plan(d / PLAN_FILE).plan
            self._contrasts[d] = {c.id for c in plan.contrasts}
            self._checks[d] = {c.id for c in plan.checks}
        return self._contrasts[d]

    def checks(self, d: Path) -> set[str]:
        self.contrasts(d)
        return self._checks[d]

    def rows(self, d: Path) -> dict[str, str]:
        if d not in self._rows:
            if not (d / REPORTED_FILE).exists():
                self._rows[d] = {}
            else:
                # rows and endpoints alike, by what recheck found (an endpoint without checks is
                # "not checkable", which does not count as covering an item)
                self._rows[d] = {r.row: r.status for r in recheck_study(d)}
        return self._rows[d]


def _split(ref: str, what: str) -> tuple[str, str]:
    study, sep, name = ref.partition(":")
    if not sep or not study or not name:
        raise PreregError(f"{ref!r}: a {what} is named STUDY:{what.upper()}")
    return study, name


def _check_item(reg: _Registry, path: Path, paper: str, item: CoverageItem) -> ItemCoverage:
    where = f"{path}: item {item.id!r}"

    def study(name: str) -> Path:
        try:
            return reg.study(name)
        except PreregError as e:
            raise PreregError(f"{where}: unknown study {name!r} ({e.lines[0] if e.lines else e})") from None

    for name in item.plans:
        study(name)
    def name_in(ref: str, what: str, names: Callable[[Path], set[str]], plural: str) -> None:
        try:
            s, c = _split(ref, what)
        except PreregError as e:
            raise PreregError(f"{where}: {e.lines[0]}") from None
        d = study(s)
        if c not in names(d):
            raise PreregError(f"{where}: {ref}: the plan of {d.name} has no {plural} {c!r}")

    for ref in item.contrasts:
        name_in(ref, "contrast", reg.contrasts, "contrast")
    for ref in item.checks:
        name_in(ref, "check", reg.checks, "manipulation check")
    row_status = {}
    for ref in item.recheck:
        try:
            s, r = _split(ref, "row")
        except PreregError as e:
            raise PreregError(f"{where}: {e.lines[0]}") from None
        d = study(s)
        rows = reg.rows(d)
        if r not in rows:
            raise PreregError(f"{where}: {ref}: {d.name} has no reported row {r!r}"
                              + ("" if rows else f" (no {REPORTED_FILE})"))
        row_status[ref] = rows[r]
    return ItemCoverage(paper=paper, id=item.id, title=item.title, plans=list(item.plans), contrasts=list(item.contrasts),
                        recheck=list(item.recheck), reason=item.reason, checks=list(item.checks), row_status=row_status)


def coverage(root: str | Path) -> list[PaperCoverage]:
    """Load every file of ``root/coverage/`` and check every name in it against the registry at ``root``."""
    base = Path(root)
    reg = _Registry(base)
    out = []
    papers: dict[str, Path] = {}
    for path in coverage_files(base):
        cf = load_coverage_file(path)
        if cf.paper in papers:
            raise PreregError(f"{path}: paper {cf.paper!r} is already listed in {papers[cf.paper]}")
        papers[cf.paper] = path
        out.append(PaperCoverage(cf.paper, path, [_check_item(reg, path, cf.paper, i) for i in cf.item]))
    return out


def coverage_line(papers: list[PaperCoverage]) -> str:
    """``N of M tables and figures covered`` over every paper."""
    items = [i for p in papers for i in p.items]
    return f"{sum(i.covered for i in items)} of {len(items)} tables and figures covered"


def coverage_record(base: Path, papers: list[PaperCoverage]) -> dict:
    """``prereg registry --coverage --json``."""
    items = [i for p in papers for i in p.items]
    return {
        "root": str(base),
        "papers": [{"paper": p.paper, "file": str(p.file), "items": [
            {"id": i.id, "title": i.title, "plans": i.plans, "contrasts": i.contrasts, "checks": i.checks, "recheck": i.recheck,
             "row_status": i.row_status, "reason": i.reason, "status": i.status, "covered": i.covered}
            for i in p.items]} for p in papers],
        "covered": sum(i.covered for i in items),
        "total": len(items),
        "line": coverage_line(papers),
    }


__all__ = ["COVERAGE_DIR", "PAPERS", "COVERAGE_STATUSES", "CoverageItem", "CoverageFile", "ItemCoverage", "PaperCoverage",
           "coverage_files", "load_coverage_file", "coverage", "coverage_line", "coverage_record"]
