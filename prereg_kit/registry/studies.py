"""The registry's studies: finding a study folder by name, id or path, and what ``prereg
registry`` shows for each (plan, lock, runs, report, record)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..chain.lock import check_plan, lock_path, read_chain
from ..errors import PreregError
from ..plan import PLAN_FILE, Plan, load_plan, read_toml, resolve_plan_path
from .reported import REPORTED_FILE, load_reported


def default_root() -> Path:
    """``./registry`` if the current folder has one, else the repository's ``registry/``."""
    here = Path.cwd() / "registry"
    if here.is_dir():
        return here
    return Path(__file__).resolve().parents[2] / "registry"


def study_dirs(root: str | Path) -> list[Path]:
    """Every folder under ``root`` that holds a ``plan.toml``, sorted by name."""
    r = Path(root)
    if not r.is_dir():
        raise PreregError(f"{r}: no such registry folder")
    return sorted((p.parent for p in r.glob(f"*/{PLAN_FILE}")), key=lambda p: p.name)


def find_study(root: str | Path, name: str) -> Path:
    """A study folder by folder name or plan id (case-insensitive; ``S1`` finds ``S01``), or by its path."""
    if "/" in name or "\\" in name or Path(name).is_dir():  # typed as a path: that folder, or why it is none
        return resolve_plan_path(name).parent
    want = name.strip().lower()
    dirs = study_dirs(root)
    for d in dirs:
        if d.name.lower() == want:
            return d
    for d in dirs:
        try:
            study = read_toml(d / PLAN_FILE)[1].get("study", {})  # bounded: size, depth, numbers
        except PreregError:
            continue
        sid = study.get("id", "") if isinstance(study, dict) else ""
        if isinstance(sid, str) and sid.lower() == want:
            return d
    raise PreregError(f"{name}: no study of that folder name or id in {root} (have: {', '.join(d.name for d in dirs)})")


@dataclass
class StudyState:
    """What ``prereg registry`` shows for one study folder."""

    folder: str
    path: Path
    study_id: str = ""
    title: str = ""
    plan_valid: bool = False
    plan_error: str = ""
    locked: str = "no"  # no | yes | changed | comments changed | broken
    runs: int = 0
    report: bool = False
    reported_rows: int | None = None  # None: no reported.toml
    reported_error: str = ""
    endpoints: int = 0
    plan: Plan | None = None  # the validated plan (None when invalid)


def study_state(d: Path) -> StudyState:
    st = StudyState(folder=d.name, path=d)
    try:
        pf = load_plan(d / PLAN_FILE)
        st.plan_valid, st.plan = True, pf.plan
        st.study_id, st.title = pf.plan.study.id, pf.plan.study.title
    except PreregError as e:
        st.plan_error = e.lines[0] if e.lines else str(e)
        try:
            study = read_toml(d / PLAN_FILE)[1].get("study", {})
            st.study_id, st.title = str(study.get("id", "")), str(study.get("title", ""))
        except Exception:  # noqa: BLE001 - an unparseable plan: its error is already recorded
            pass
    if lock_path(d / PLAN_FILE).exists():
        try:
            chain = read_chain(d / PLAN_FILE)
            state = check_plan(d / PLAN_FILE, chain).state
            st.locked = {"clean": "yes", "comment-only": "comments changed", "changed": "changed"}[state]
        except PreregError:
            st.locked = "broken"
    st.runs = sum(1 for p in (d / "runs").glob("*/seed-*") if p.is_dir()) if (d / "runs").is_dir() else 0
    st.report = (d / "report" / "report.md").is_file()
    if (d / REPORTED_FILE).exists():
        try:
            rep = load_reported(d)
            st.reported_rows, st.endpoints = len(rep.rows), len(rep.endpoints)
        except PreregError as e:
            st.reported_rows = 0
            st.reported_error = e.lines[0] if e.lines else str(e)
    return st


def registry_states(root: str | Path) -> list[StudyState]:
    return [study_state(d) for d in study_dirs(root)]
