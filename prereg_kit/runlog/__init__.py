"""Run-log format: one folder per run, ``runs/<configuration>/seed-<n>/``.

This package owns the contract between the trainer (writer) and the analysis (reader).
See ``docs/run-log.md`` for the full specification and a conversion sketch for other trainers.

Files of one run folder:

- ``meta.json`` — :class:`RunMeta`: who the run is (study, configuration, seed, stage), the
  canonical plan hash it was launched under, the resolved trainer config, UTC start/end, device,
  status and tool version; for ``anchor = "elected"`` runs, the sha256 of the study's
  ``election.json`` it read (:func:`election_sha256`). Written atomically (temp file, fsync, rename).
- ``iterations.jsonl`` — one JSON line per training iteration (:data:`ITERATION_COLUMNS`).
- ``evals.jsonl`` — one JSON line per evaluation x evaluation set x problem (:data:`EVAL_COLUMNS`).
- ``iterations.parquet`` / ``evals.parquet`` — the same rows, compacted by :func:`finalize` when
  the run ends. The reader prefers Parquet when it is present and complete.

JSON-lines files are append-only: every call of the writer is one ``write`` of whole lines
followed by ``flush`` and ``fsync``, so a crash can only leave a *torn tail* (a last line without
its newline, or garbage after the last newline). The reader reports a torn tail as a
:class:`LogProblem` and never uses it; :class:`RunLogWriter` with ``resume=True`` reports it and
truncates it before appending again.

One writer per run: :class:`RunLock` holds an OS lock on ``.writer.lock`` in the run folder for
as long as the writer lives (the trainer takes it before it reads anything of the run), and notes
its holder in ``.writer.json``. A second writer is refused with :class:`RunBusyError`, naming the
holder; the kernel drops the lock when its process dies, and the note a crashed writer left
behind is reported as a stale lock when the run is next opened. Locking is :mod:`filelock`'s.
Across machines the note is a lease (``token``, ``heartbeat`` renewed every ``PREREG_LEASE_S``/6 s):
another host's fresh lease refuses a writer where the OS lock does not reach, and a writer whose
lease was taken over writes nothing more.

Numbers in a run log are finite: ``inf`` or ``nan`` where a value is required is an error naming
the file, line and field. Parquet files are written with page checksums, verified on read.

Modules: :mod:`.schema` (file names, columns, metadata, problems), :mod:`.folder` (where a run
lives, metadata written atomically), :mod:`.writerlock` (one writer per run), :mod:`.jobrecord` (the executor job behind a run), :mod:`.reader` (one
run), :mod:`.writer` (the crash-safe appender and compaction), :mod:`.study` (a study's runs).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# Names resolve on first use, so that ``prereg lock``/``verify`` (which need only the file names)
# do not pay for pandas/pyarrow, which the reader and writer import.
_LAZY = {
    "STAGES": "..stages", "Stage": "..stages",
    **dict.fromkeys(["check_inside", "find_runs", "read_meta", "run_dir", "write_meta"], ".folder"),
    **dict.fromkeys(["JOB_RECORD", "read_job_record", "record_exited", "record_started", "record_submitted",
                     "write_job_record"], ".jobrecord"),
    **dict.fromkeys(["RunLog", "add_derived", "check_consistency", "read_run", "read_table"], ".reader"),
    **dict.fromkeys(["EVAL_COLUMNS", "EVALS", "ELECTION_FILE", "FORMAT", "ITERATION_COLUMNS", "ITERATIONS", "KINDS",
                     "META_FILE", "PROGRESS_COLUMNS", "SAFE_NAME", "SCHEMAS", "STAGE_SECONDS", "STATUSES", "STEP_SECONDS",
                     "TOKEN_KINDS", "TRACKER_RECORD", "WRITER_LOCK", "WRITER_NOTE", "Column", "LogProblem", "RunBusyError", "RunLogError",
                     "RunLogWarning", "RunMeta", "Status", "election_sha256", "uses_elected_anchor", "utc_now",
                     "validate_frame"], ".schema"),
    "StudyRuns": ".study", "load_study": ".study", "unreadable": ".study",
    "RunLogWriter": ".writer", "finalize": ".writer",
    "RunLock": ".writerlock", "run_busy": ".writerlock",
}


def __getattr__(name: str) -> Any:
    """Import the submodule that defines ``name`` on first access (and keep the name here)."""
    try:
        module = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


if TYPE_CHECKING:
    from ..stages import STAGES, Stage
    from .folder import check_inside, find_runs, read_meta, run_dir, write_meta
    from .jobrecord import (
        JOB_RECORD,
        read_job_record,
        record_exited,
        record_started,
        record_submitted,
        write_job_record,
    )
    from .reader import RunLog, add_derived, check_consistency, read_run, read_table
    from .schema import (
        ELECTION_FILE,
        EVAL_COLUMNS,
        EVALS,
        FORMAT,
        ITERATION_COLUMNS,
        ITERATIONS,
        KINDS,
        META_FILE,
        PROGRESS_COLUMNS,
        SAFE_NAME,
        SCHEMAS,
        STAGE_SECONDS,
        STATUSES,
        STEP_SECONDS,
        TOKEN_KINDS,
        TRACKER_RECORD,
        WRITER_LOCK,
        WRITER_NOTE,
        Column,
        LogProblem,
        RunBusyError,
        RunLogError,
        RunLogWarning,
        RunMeta,
        Status,
        election_sha256,
        uses_elected_anchor,
        utc_now,
        validate_frame,
    )
    from .study import StudyRuns, load_study, unreadable
    from .writer import RunLogWriter, finalize
    from .writerlock import RunLock, run_busy

__all__ = [
    "JOB_RECORD", "read_job_record", "record_exited", "record_started", "record_submitted", "write_job_record",
    "EVAL_COLUMNS", "EVALS", "ELECTION_FILE", "uses_elected_anchor", "FORMAT", "ITERATION_COLUMNS", "ITERATIONS", "KINDS", "META_FILE",
    "PROGRESS_COLUMNS", "SAFE_NAME", "SCHEMAS", "STAGE_SECONDS", "STAGES", "STATUSES", "STEP_SECONDS", "TOKEN_KINDS",
    "TRACKER_RECORD", "WRITER_LOCK", "WRITER_NOTE",
    "Column", "LogProblem", "RunBusyError", "RunLock", "RunLog", "RunLogError", "RunLogWarning", "RunLogWriter",
    "RunMeta", "Stage", "Status", "StudyRuns", "add_derived", "check_consistency", "check_inside", "election_sha256", "finalize",
    "find_runs", "load_study", "read_meta", "read_run", "read_table", "run_busy", "run_dir", "unreadable", "utc_now",
    "validate_frame", "write_meta",
]
