"""The notebook API behind ``import prereg_kit as pk`` (docs/python-api.md).

``pk.analyze`` (the callable module :mod:`prereg_kit.analysis.analyze`) returns an :class:`Analysis`
whose tables are pandas DataFrames; ``pk.write_report`` writes its report; ``pk.load_report``
reads a written report back (``results.json`` and ``curves.csv``) into a :class:`Report` with
the same tables, so a notebook can work from a report without the run logs; ``pk.dry_run``
makes a synthetic study of a plan. Every refusal is a :class:`PreregError` whose one-line
message names the path and the cause, as the ``prereg`` command prints it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .analysis.analyze import Analysis
from .analysis.checks import CHECK_COLUMNS, CHECK_SEED_COLUMNS
from .analysis.notebook import Shown
from .errors import PreregError
from .plan import load_plan
from .report import TARGET_SHARES
from .report import write_report as _write_report
from .simulate.dryrun import DryRun
from .simulate.dryrun import dry_run as _dry_run
from .study.verify import VerifyReport

__all__ = ["Analysis", "DryRun", "Report", "VerifyReport", "dry_run", "load_plan", "load_report", "write_report"]

RESULTS_FORMAT = "prereg-results/1"
RESULTS_FILE = "results.json"
# the columns of a table whose record list is empty (results.json keeps no header): from the
# table's CSV beside it where the report writes one, else these
_EMPTY_COLUMNS = {
    "exclusions": ["configuration", "seed", "what", "reason"],
    "hypotheses": ["id", "statement", "prediction", "outcome", "evidence", "reading"],
    "checks": CHECK_COLUMNS,
    "check_seeds": CHECK_SEED_COLUMNS,
}
_CSV = {"contrasts": "contrasts.csv", "per_seed": "per_seed.csv", "configurations": "configurations.csv",
        "checks": "checks.csv"}


@dataclass(repr=False)  # the notebook's short repr (Shown)
class Report(Shown):
    """A written report read back (:func:`load_report`): the tables of the :class:`Analysis` that
    wrote it, as DataFrames with the same columns, and what ``results.json`` says of the study."""

    folder: Path  # the report folder (results.json, curves.csv, …)
    study: str
    title: str
    plan_path: str  # the plan the report was made from, as the analysis named it
    plan_hash: str
    lock: dict  # the lock chain's summary (entries, seals, head, violations)
    exploratory: bool
    synthetic: bool  # made by `prereg dry-run` from simulated runs
    contrasts: pd.DataFrame
    per_seed: pd.DataFrame
    hypotheses: pd.DataFrame
    configurations: pd.DataFrame
    exclusions: pd.DataFrame
    checks: pd.DataFrame
    check_seeds: pd.DataFrame
    curves: pd.DataFrame  # from curves.csv; empty for a report written before it existed
    notes: list[str] = field(default_factory=list)
    devices: dict = field(default_factory=dict)
    gradient_tests: dict | None = None  # the plan's gradient tests as results.json records them


def write_report(analysis: Analysis, out: str | Path | None = None) -> list[Path]:
    """Write the report of ``analysis`` (``report.md``, ``results.json``, the CSV tables, the
    figures) into ``out``, by default the study's ``report/`` folder; return the files written."""
    return _write_report(analysis, Path(out) if out is not None else analysis.plan_path.parent / "report")


def dry_run(plan: str | Path, effects: dict[str, float] | None = None, *, out: str | Path | None = None,
            seed: int = 0, n_resamples: int | None = None, progress: bool = False,
            time_ratio: dict[str, float] | None = None, update_ratio: dict[str, float] | None = None) -> DryRun:
    """``prereg dry-run`` from Python: synthetic runs of the plan (a ``plan.toml`` or its study
    folder) with true effects at B given per contrast id (``{"C1": 0.03}``; the others 0),
    locked, analyzed and reported in ``out`` (default ``<study>/dry-run``). The returned
    ``DryRun`` holds ``folder``, ``analysis`` (marked synthetic) and ``effects`` per configuration."""
    return _dry_run(plan, dict(effects or {}), out=out, seed=seed, n_resamples=n_resamples, progress=progress,
                    time_ratio=time_ratio, update_ratio=update_ratio)


def _results_file(path: str | Path) -> Path:
    """The ``results.json`` a path leads to: the file itself, a report folder, or a study folder
    with its ``report/``."""
    p = Path(path)
    if p.is_file():
        return p
    if not p.exists():
        raise PreregError(f"{path}: no such folder")
    for candidate in (p / RESULTS_FILE, p / "report" / RESULTS_FILE):
        if candidate.is_file():
            return candidate
    raise PreregError(f"{path}: no {RESULTS_FILE} in this folder or in its report/ "
                      f"(`prereg analyze {path}` writes the report)")


def _read_record(file: Path) -> dict[str, Any]:
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise PreregError(f"{file}: not valid JSON (line {e.lineno}: {e.msg}); a report's {RESULTS_FILE} is") from None
    except UnicodeDecodeError:
        raise PreregError(f"{file}: not UTF-8 text; a report's {RESULTS_FILE} is") from None
    except OSError as e:
        raise PreregError(f"{file}: cannot be read ({e.strerror or e})") from None
    fmt = record.get("format") if isinstance(record, dict) else None
    if fmt != RESULTS_FORMAT:
        raise PreregError(f"{file}: format {fmt!r} is not one this version reads ({RESULTS_FORMAT})")
    missing = [k for k in ("study", "contrasts", "per_seed", "configurations") if k not in record]
    if missing:
        raise PreregError(f"{file}: no {', '.join(missing)} in the record (a {RESULTS_FORMAT} record holds them)")
    return record


def _table(record: dict[str, Any], name: str, folder: Path) -> pd.DataFrame:
    """One table of the record as the analysis held it: null reads NaN, a to-target row's
    ``"n.r."`` share (not reached) reads inf; an empty table keeps its columns."""
    rows = record.get(name) or []
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise PreregError(f"{folder / RESULTS_FILE}: {name!r} is not a list of records")
    if not rows:
        csv = folder / _CSV.get(name, "")
        if name in _CSV and csv.is_file():
            return _without_mark(pd.read_csv(csv, nrows=0))
        return pd.DataFrame(columns=_EMPTY_COLUMNS.get(name, []))
    rows = [{k: math.inf if k in TARGET_SHARES and v == "n.r." else v for k, v in r.items()} for r in rows]
    df = pd.DataFrame.from_records(rows)
    return df.astype(object).where(df.notna(), np.nan).infer_objects()


def _without_mark(df: pd.DataFrame) -> pd.DataFrame:
    """A CSV without its ``synthetic`` or ``exploratory`` column: the mark is the report's flag, not data."""
    return df.drop(columns=["synthetic", "exploratory"], errors="ignore")


def load_report(study_or_report: str | Path) -> Report:
    """Read a written report back: ``study_or_report`` is a report folder, a study folder (its
    ``report/``) or a ``results.json``. Refuses, naming the path, a folder without a report, a
    file that is not JSON and a record of another format."""
    file = _results_file(study_or_report)
    record = _read_record(file)
    folder = file.parent
    tables = {k: _table(record, k, folder) for k in ("contrasts", "per_seed", "hypotheses", "configurations",
                                                      "exclusions", "checks", "check_seeds")}
    curves_csv = folder / "curves.csv"
    curves = _without_mark(pd.read_csv(curves_csv)) if curves_csv.is_file() else pd.DataFrame()
    return Report(folder=folder, study=record["study"], title=record.get("title", ""), plan_path=record.get("plan", ""),
                  plan_hash=record.get("plan_hash", ""), lock=record.get("lock") or {},
                  exploratory=bool(record.get("exploratory", False)), synthetic=bool(record.get("synthetic", False)),
                  curves=curves, notes=list(record.get("notes") or []), devices=record.get("devices") or {},
                  gradient_tests=record.get("gradient_tests"), **tables)
