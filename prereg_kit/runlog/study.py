"""Loading every main run of a study folder into tidy frames."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from .columnar import _RUN, Columnar, load_columnar
from .folder import find_runs
from .reader import add_derived, read_run
from .schema import EVALS, ITERATIONS, SCHEMAS, LogProblem, RunLogError, RunMeta, validate_frame
from .text import TEXT_COLUMNS, sorted_categories

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


def load_study(study_dir: str | Path, *, progress: bool | None = None, strict: bool = False,
               configurations: list[str] | None = None) -> StudyRuns:
    """Load every run under ``<study_dir>/runs`` (``configurations``: only theirs, e.g. the ones a
    plan takes from this study as a source).

    A run whose files cannot be read (corrupt line, bad field, bad metadata) is left out and
    reported as a ``corrupt`` problem; with ``strict=True`` the first problem of kind torn,
    missing, inconsistent or corrupt raises :class:`RunLogError`. ``progress``: a rich progress
    bar; ``None`` shows it for 8+ runs when stderr is a terminal.
    """
    folders = find_runs(study_dir)
    if configurations is not None:
        folders = [f for f in folders if f.parent.name in set(configurations)]
    return _load(study_dir, folders, progress=progress, strict=strict, columnar=True)


def unreadable(folders: list[Path]) -> dict[int, str]:
    """The first problem the analysis's reader finds in each of ``folders`` that it cannot read
    as a complete run would be read (index → the problem's line; a run's status is not such a
    problem): the runs read column-wise as :func:`load_study` reads them (:mod:`.columnar`), the
    ones it leaves to the per-run reader by :func:`.reader.read_run`, with the same lines.

    Sealing asks this of every run it seals, so that nothing the analysis refuses is sealed; read
    column-wise, a dry run's 96 runs are checked in one pass instead of 96 (each run's frames
    validated, ordered, derived and cross-checked on their own).
    """
    folders = [Path(f) for f in folders]
    col = load_columnar(folders, strict=False, where=str(folders[0].parent)) if len(folders) > 1 else None
    out: dict[int, str] = {}
    for i, folder in enumerate(folders):
        if col is not None and i not in col.slow:
            problems = col.problems.get(i, [])
        else:
            try:
                problems = read_run(folder).problems
            except RunLogError as e:
                out[i] = str(e)
                continue
        bad = [p for p in problems if p.kind != "status"]
        if bad:
            out[i] = str(bad[0])
    return out


def _meta_row(m: RunMeta, folder: Path, n_iterations: int, n_evals: int) -> dict:
    return {
        "configuration": m.configuration, "seed": m.seed, "study": m.study, "stage": m.stage,
        "status": m.status, "plan_hash": m.plan_hash, "started_at": m.started_at, "ended_at": m.ended_at,
        "device": m.device, "tool_version": m.tool_version, "path": str(folder),
        "n_iterations": n_iterations, "n_evals": n_evals,
        "trainer": m.trainer, "cpu": getattr(m, "cpu", None),  # CPU model of a CPU run (audit.device_type)
    }


def _load(study_dir: str | Path, folders: list[Path], *, progress: bool | None, strict: bool, columnar: bool) -> StudyRuns:
    """The runs of ``folders``: column-wise where they allow it (:mod:`.columnar`), the rest run
    by run (``columnar=False``: every run by the per-run reader, as the reference)."""
    col = load_columnar(folders, strict=strict, where=str(study_dir)) if columnar and len(folders) > 1 else None
    todo = [i for i in range(len(folders)) if col is None or i in col.slow]
    metas: dict[int, dict] = {}
    its: dict[int, pd.DataFrame] = {}
    evs: dict[int, pd.DataFrame] = {}
    problems: dict[int, list[LogProblem]] = {}

    def one(i: int) -> None:
        folder = folders[i]
        try:
            run = read_run(folder, strict=strict)
        except RunLogError as e:
            if strict:
                raise
            problems[i] = [LogProblem(str(folder), None, "corrupt", f"run left out: {e}")]
            return
        problems[i] = run.problems
        m = run.meta
        metas[i] = _meta_row(m, folder, len(run.iterations), int(run.evals["eval_index"].nunique()) if len(run.evals) else 0)
        for frames, df in ((its, run.iterations), (evs, run.evals)):
            df = df.copy()
            df.insert(0, "seed", m.seed)
            df.insert(0, "configuration", m.configuration)
            if col is not None:
                df[_RUN] = i
            frames[i] = df

    if _progress_wanted(progress, len(todo)):
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task("loading runs", total=len(todo))
            for i in todo:
                one(i)
                bar.advance(task)
    else:
        for i in todo:
            one(i)
    if col is not None:
        _add_columnar(col, folders, metas, its, evs, problems)
    order = sorted(metas)
    its = [its[i] for i in sorted(its)]
    evs = [evs[i] for i in sorted(evs)]
    problems = [p for i in sorted(problems) for p in problems[i]]

    def cat(frames: list[pd.DataFrame], kind: str) -> pd.DataFrame:
        if frames:
            df = pd.concat(frames, ignore_index=True)
            if _RUN in df:  # column-wise and per-run pieces: back in folder order
                if not df[_RUN].is_monotonic_increasing:
                    df = df.sort_values(_RUN, kind="stable", ignore_index=True)
                del df[_RUN]
            if kind == EVALS:
                for c in ("configuration",) + TEXT_COLUMNS:
                    if c in df:
                        df[c] = sorted_categories(df[c])
            return df
        empty = validate_frame(pd.DataFrame(), SCHEMAS[kind], where=str(study_dir))
        if kind == ITERATIONS:
            empty = add_derived(empty)
        empty.insert(0, "seed", pd.Series([], dtype="int64"))
        empty.insert(0, "configuration", pd.Series([], dtype="str"))
        return empty

    meta_cols = ["configuration", "seed", "study", "stage", "status", "plan_hash", "started_at", "ended_at",
                 "device", "tool_version", "path", "n_iterations", "n_evals", "trainer", "cpu"]
    meta = pd.DataFrame([metas[i] for i in order], columns=meta_cols)
    if len(meta):
        meta = meta.sort_values(["configuration", "seed"], ignore_index=True)
    return StudyRuns(meta, cat(its, ITERATIONS), cat(evs, EVALS), problems)


def _add_columnar(col: Columnar, folders: list[Path], metas: dict, its: dict, evs: dict, problems: dict) -> None:
    """Split the column-wise frames into the per-folder pieces :func:`_load` orders by folder."""
    problems.update(col.problems)
    cfg = {i: m.configuration for i, m in col.metas.items()}
    seed = {i: m.seed for i, m in col.metas.items()}
    n_it = col.iterations.groupby(_RUN).size()
    n_ev = col.evals.groupby(_RUN)["eval_index"].nunique()
    for i, m in col.metas.items():
        metas[i] = _meta_row(m, folders[i], int(n_it.get(i, 0)), int(n_ev.get(i, 0)))
    for frames, df in ((its, col.iterations), (evs, col.evals)):
        if not len(df):
            continue
        run = df[_RUN].to_numpy()
        ids = sorted(col.metas)
        pos = np.searchsorted(np.array(ids), run)  # each row's run among the column-wise ones
        df.insert(0, "seed", np.array([seed[i] for i in ids], dtype="int64")[pos])
        names = pa.array([cfg[i] for i in ids], type=pa.string()).take(pa.array(pos))
        df.insert(0, "configuration", pd.Series(names.to_pandas(), index=df.index, dtype="str"))
        frames[min(col.metas)] = df  # one piece, placed at its first run; pieces are ordered below
