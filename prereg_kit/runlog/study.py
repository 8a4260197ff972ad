"""Loading every main run of a study folder into tidy frames."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .folder import find_runs
from .reader import add_derived, read_run
from .schema import EVALS, ITERATIONS, LogProblem, RunLogError, SCHEMAS, validate_frame


# A whole study
# --------------------------------------------------------------------------------------------


@dataclass
class StudyRuns:
    """Every run of a study folder, as tidy frames.

    ``meta``: one row per run (configuration, seed, study, stage, status, plan_hash, started_at,
    ended_at, device, tool_version, path, n_iterations, n_evals, trainer: what trained it, cpu: the CPU model
    a CPU run recorded, else None). ``iterations`` / ``evals``: all
    rows with ``configuration`` and ``seed`` columns first. ``problems``: what was reported
    (torn lines, missing files, runs that could not be read).
    """

    meta: pd.DataFrame
    iterations: pd.DataFrame
    evals: pd.DataFrame
    problems: list[LogProblem]


def _progress_wanted(progress: bool | None, n: int) -> bool:
    if progress is not None:
        return progress
    return n >= 8 and sys.stderr.isatty()


def load_study(study_dir: str | Path, *, progress: bool | None = None, strict: bool = False) -> StudyRuns:
    """Load every run under ``<study_dir>/runs``.

    A run whose files cannot be read (corrupt line, bad field, bad metadata) is left out and
    reported as a ``corrupt`` problem; with ``strict=True`` the first problem of kind torn,
    missing, inconsistent or corrupt raises :class:`RunLogError`. ``progress``: a rich progress
    bar; ``None`` shows it for 8+ runs when stderr is a terminal.
    """
    folders = find_runs(study_dir)
    metas, its, evs, problems = [], [], [], []

    def one(folder: Path) -> None:
        try:
            run = read_run(folder, strict=strict)
        except RunLogError as e:
            if strict:
                raise
            problems.append(LogProblem(str(folder), None, "corrupt", f"run left out: {e}"))
            return
        problems.extend(run.problems)
        m = run.meta
        metas.append({
            "configuration": m.configuration, "seed": m.seed, "study": m.study, "stage": m.stage,
            "status": m.status, "plan_hash": m.plan_hash, "started_at": m.started_at, "ended_at": m.ended_at,
            "device": m.device, "tool_version": m.tool_version, "path": str(folder),
            "n_iterations": len(run.iterations), "n_evals": int(run.evals["eval_index"].nunique()) if len(run.evals) else 0,
            "trainer": m.trainer, "cpu": getattr(m, "cpu", None),  # CPU model of a CPU run (audit.device_type)
        })
        for frames, df in ((its, run.iterations), (evs, run.evals)):
            df = df.copy()
            df.insert(0, "seed", m.seed)
            df.insert(0, "configuration", m.configuration)
            frames.append(df)

    if _progress_wanted(progress, len(folders)):
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("loading runs", total=len(folders))
            for f in folders:
                one(f)
                bar.advance(task)
    else:
        for f in folders:
            one(f)

    def cat(frames: list[pd.DataFrame], kind: str) -> pd.DataFrame:
        if frames:
            return pd.concat(frames, ignore_index=True)
        empty = validate_frame(pd.DataFrame(), SCHEMAS[kind], where=str(study_dir))
        if kind == ITERATIONS:
            empty = add_derived(empty)
        empty.insert(0, "seed", pd.Series([], dtype="int64"))
        empty.insert(0, "configuration", pd.Series([], dtype="str"))
        return empty

    meta_cols = ["configuration", "seed", "study", "stage", "status", "plan_hash", "started_at", "ended_at",
                 "device", "tool_version", "path", "n_iterations", "n_evals", "trainer", "cpu"]
    meta = pd.DataFrame(metas, columns=meta_cols)
    if len(meta):
        meta = meta.sort_values(["configuration", "seed"], ignore_index=True)
    return StudyRuns(meta, cat(its, ITERATIONS), cat(evs, EVALS), problems)
