"""The crash-safe appender of one run folder and its compaction to Parquet."""

from __future__ import annotations

import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import PreregError, writing
from .folder import _atomic_write, _atomic_write_bytes, _fsync_dir, read_meta, write_meta
from .reader import _jsonl_path, _load_jsonl, _parquet_path, _read_parquet
from .schema import (
    _PARQUET_KEY,
    EVALS,
    FORMAT,
    ITERATIONS,
    KINDS,
    META_FILE,
    SCHEMAS,
    STATUSES,
    WRITER_NOTE,
    LogProblem,
    RunLogError,
    RunLogWarning,
    RunMeta,
    Status,
    _first_bad,
    utc_now,
    validate_frame,
)
from .text import radix_key, repeats, text_codes
from .writerlock import RunLock

_log = logging.getLogger(__name__)


def _to_jsonl(df: pd.DataFrame) -> bytes:
    if not len(df):
        return b""
    text = df.to_json(orient="records", lines=True, double_precision=15, date_format="iso")
    if not text.endswith("\n"):
        text += "\n"
    return text.encode()


def _write_parquet(folder: Path, kind: str, df: pd.DataFrame, jsonl_bytes: int, *, fsync: bool, kept: str) -> Path:
    """Write one table as ``<kind>.parquet``: to a temp name, fsynced, renamed. Its metadata records
    the row count and the size of the JSON lines it stands for, so that a later append makes it
    stale rather than wrong."""
    pp = _parquet_path(folder, kind)
    # one run's table is small: Arrow's thread pool costs it about 3x the CPU of one thread
    table = pa.Table.from_pandas(df, preserve_index=False, nthreads=1)
    info = {"format": FORMAT, "rows": len(df), "jsonl_bytes": jsonl_bytes}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), _PARQUET_KEY: json.dumps(info).encode()})
    _atomic_write(pp, lambda tmp: pq.write_table(table, tmp, compression="zstd", write_page_checksum=True),
                  fsync=fsync, kept=kept)
    return pp


def finalize(folder: str | Path, *, keep_jsonl: bool = False, fsync: bool = True) -> list[Path]:
    """Compact a run's JSON lines into ``iterations.parquet`` and ``evals.parquet``.

    Each Parquet file is written to a temp name, fsynced and renamed, and records in its metadata
    the row count and the size of the JSON-lines file it came from (so a later append makes it
    stale rather than wrong). The JSON lines are removed afterwards unless ``keep_jsonl``.
    A torn tail is an error here: resume the run (which truncates it) or repair it first.
    """
    folder = Path(folder)
    written = []
    for kind in KINDS:
        jp, pp = _jsonl_path(folder, kind), _parquet_path(folder, kind)
        if not jp.exists():
            if pp.exists():
                continue  # already compacted
            jp.touch()
        df, lines = _load_jsonl(jp, kind)
        if lines.torn is not None:
            raise RunLogError(f"cannot finalize: {lines.torn}")
        written.append(_write_parquet(folder, kind, df, len(lines.data), fsync=fsync,
                                      kept=f"{jp.name} is kept: the run can be finished again"))
        if not keep_jsonl and jp.exists():
            jp.unlink()
    if fsync:
        _fsync_dir(folder)
    return written


def _eval_keys(ev: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Checked eval rows' evaluation index and the codes of their set (with the names they stand
    for) and problem; ``None`` when a name is missing (pandas then groups the rows)."""
    if not len(ev):
        return None
    sets, names = text_codes(ev["eval_set"])
    problems, _ = text_codes(ev["problem_id"])
    if sets.min() < 0 or problems.min() < 0:
        return None
    return ev["eval_index"].to_numpy(dtype="int64"), sets, names, problems


def _groups(ev: pd.DataFrame, keys: tuple | None = None) -> set[tuple[int, str]]:
    """The (evaluation, set) pairs of eval rows."""
    keys = keys or _eval_keys(ev)
    key = radix_key([keys[0], keys[1]]) if keys else None
    if key is None:
        g = ev[["eval_index", "eval_set"]].drop_duplicates()
        return set(zip(g["eval_index"].astype(int).tolist(), g["eval_set"].astype(str).tolist()))
    first = np.unique(key, return_index=True)[1]
    return set(zip(keys[0][first].tolist(), [str(v) for v in keys[2][keys[1][first]]]))


def _duplicates(ev: pd.DataFrame, keys: tuple | None) -> np.ndarray:
    """``ev.duplicated(["eval_index", "eval_set", "problem_id"])``: rows whose (evaluation, set,
    problem) an earlier row has, from one sort of their integer key."""
    key = radix_key([keys[0], keys[1], keys[3]]) if keys else None
    if key is None:
        return ev.duplicated(["eval_index", "eval_set", "problem_id"]).to_numpy()
    return repeats(key)


class RunLogWriter:
    """Append-only, crash-safe writer of one run folder.

    Every ``log_*`` call validates its rows against the column spec, then appends them as whole
    JSON lines in **one** ``write``, followed by ``flush`` and ``os.fsync`` (``fsync=False``
    skips the fsync, for tests and synthetic logs only). A kill can therefore only tear the last
    line, which the reader reports and ignores.

    New run: ``RunLogWriter(folder, meta)`` (refuses a folder that already holds rows).
    Resume after a kill: ``RunLogWriter(folder, meta_or_None, resume=True, at_iteration=k,
    at_eval=e)``. The torn tail is reported (a :class:`RunLogWarning`, and ``self.repairs``) and
    truncated; iteration rows with ``iteration >= k`` and eval rows with ``eval_index >= e`` are
    dropped so the trainer re-logs them from its checkpoint without duplicates. When only
    ``at_iteration`` is given, evaluations of later policies (``iteration > k``) are dropped and
    the evaluation of the checkpoint itself is kept. When the eval file's tail was torn and
    ``at_eval`` is not given, the whole interrupted batch (the last evaluation x set) is dropped.
    A run compacted by :meth:`finish` is re-expanded to JSON lines when resumed.

    ``buffered=True`` is for a run logged in one go (the synthetic generator): the same checks,
    but the rows are kept in memory and :meth:`finish` writes them straight to Parquet, with no
    JSON lines to write and read back (and the floats as given, where JSON lines keep 15
    digits). Nothing is on disk before ``finish``: a crash loses the run, which its maker writes
    again; a run that ends in an error is written as JSON lines, as any other.
    """

    def __init__(
        self,
        folder: str | Path,
        meta: RunMeta | None = None,
        *,
        resume: bool = False,
        at_iteration: int | None = None,
        at_eval: int | None = None,
        fsync: bool = True,
        lock: RunLock | None = None,
        buffered: bool = False,
    ) -> None:
        if buffered and resume:
            raise ValueError("a buffered writer logs a new run in one go; it cannot resume one")
        self.folder = Path(folder)
        self.fsync = fsync
        self._buffer: dict[str, list[pd.DataFrame]] | None = {k: [] for k in KINDS} if buffered else None
        self.repairs: list[LogProblem] = []
        # One writer per run: the caller's lock (the trainer holds it for the whole run), else our own.
        self._owns_lock = lock is None
        self.lock = (lock or RunLock(self.folder)).acquire()
        if self.lock.stale and self._owns_lock:
            self._report(LogProblem(str(self.folder / WRITER_NOTE), None, "stale", self.lock.stale))
        try:
            self._open(meta, resume, at_iteration, at_eval)
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        if self._owns_lock:
            self.lock.release()

    def _open(self, meta: RunMeta | None, resume: bool, at_iteration: int | None, at_eval: int | None) -> None:
        fsync = self.fsync
        self._last_iteration = -1
        self._last_eval = -1
        self._eval_groups: set[tuple[int, str]] = set()
        self._lines = {k: 0 for k in KINDS}
        has_rows = any(_jsonl_path(self.folder, k).exists() or _parquet_path(self.folder, k).exists() for k in KINDS)
        if not resume:
            if meta is None:
                raise RunLogError(f"{self.folder}: a new run needs its RunMeta")
            if has_rows:
                raise RunLogError(f"{self.folder}: already holds a run log; pass resume=True to continue it")
            self.meta = meta.model_copy(update={"status": "running", "ended_at": None})
            self.folder.mkdir(parents=True, exist_ok=True)
            write_meta(self.folder, self.meta, fsync=fsync)
            for k in KINDS if self._buffer is None else ():
                _jsonl_path(self.folder, k).touch()
            if fsync:
                _fsync_dir(self.folder)
            return
        old = read_meta(self.folder)
        if meta is not None:
            # a run that read an election must resume under the same election.json, and on the same weights
            fields = ("study", "configuration", "seed", "plan_hash") + (("election_sha256",) if old.election_sha256 else ()) \
                + (("model_sha256",) if getattr(old, "model_sha256", "") else ())
            hints = {"election_sha256": " (election.json changed since the run started; restore it or move the run aside)",
                     "model_sha256": " (the model's weights differ from those the run started from; restore them or "
                                     "move the run aside)"}
            for f in fields:
                was, now = getattr(old, f), getattr(meta, f, "")
                if now != was:
                    raise RunLogError(f"{self.folder / META_FILE}: cannot resume: {f} is {was!r}, the resuming trainer has {now!r}{hints.get(f, '')}")
            base = meta.model_copy(update={"started_at": old.started_at})
        else:
            base = old
        resumes = list(getattr(old, "resumes", None) or [])
        resumes.append({"at": utc_now().isoformat(), "at_iteration": at_iteration, "at_eval": at_eval})
        self.meta = base.model_copy(update={"status": "running", "ended_at": None, "resumes": resumes})
        self._repair(at_iteration, at_eval)
        self.lock.check()
        write_meta(self.folder, self.meta, fsync=fsync)

    # -- resume ---------------------------------------------------------------------------

    def _report(self, problem: LogProblem) -> None:
        self.repairs.append(problem)
        warnings.warn(str(problem), RunLogWarning, stacklevel=3)

    def _expand_parquet(self, kind: str) -> None:
        # A finished run was compacted; bring back its JSON lines so appends stay plain appends.
        jp, pp = _jsonl_path(self.folder, kind), _parquet_path(self.folder, kind)
        if pp.exists():
            if not jp.exists():
                df, _ = _read_parquet(pp, kind)
                _atomic_write_bytes(jp, _to_jsonl(df))
            pp.unlink()  # would be stale after the next append
        elif not jp.exists():
            jp.touch()

    def _truncate(self, path: Path, offset: int, why: str, line: int | None) -> None:
        size = path.stat().st_size
        if offset >= size:
            return
        with open(path, "rb+") as fh:
            fh.truncate(offset)
            fh.flush()
            os.fsync(fh.fileno())
        self._report(LogProblem(str(path), line, "truncated", f"{why}: {size - offset} bytes from line {line} on removed"))

    def _repair(self, at_iteration: int | None, at_eval: int | None) -> None:
        for kind in KINDS:
            self._expand_parquet(kind)
        # iterations
        jp = _jsonl_path(self.folder, ITERATIONS)
        it, lines = _load_jsonl(jp, ITERATIONS)
        if lines.torn is not None:
            self._report(lines.torn)
            self._truncate(jp, lines.last_good_end, "torn tail", lines.torn.line)
        keep = len(it)
        if at_iteration is not None:
            drop = np.flatnonzero(it["iteration"].to_numpy() >= at_iteration)
            if drop.size:
                if drop[0] + drop.size != len(it):
                    raise RunLogError(f"{jp}: iteration rows out of order; cannot resume at iteration {at_iteration}")
                keep = int(drop[0])
                self._truncate(jp, lines.line_starts[keep], f"resume at iteration {at_iteration}", keep + 1)
        self._lines[ITERATIONS] = keep
        self._last_iteration = int(it["iteration"].iloc[keep - 1]) if keep else -1
        # evals
        jp = _jsonl_path(self.folder, EVALS)
        ev, lines = _load_jsonl(jp, EVALS)
        drop_mask = np.zeros(len(ev), dtype=bool)
        why = ""
        if lines.torn is not None:
            self._report(lines.torn)
            self._truncate(jp, lines.last_good_end, "torn tail", lines.torn.line)
            if at_eval is None and len(ev):
                # The torn line belonged to the last batch: drop that whole evaluation x set.
                last = ev.iloc[-1]
                drop_mask |= ((ev["eval_index"] == last["eval_index"]) & (ev["eval_set"] == last["eval_set"])).to_numpy()
                why = f"interrupted batch (evaluation {int(last['eval_index'])}, set '{last['eval_set']}')"
        if at_eval is not None:
            drop_mask |= ev["eval_index"].to_numpy() >= at_eval
            why = f"resume at evaluation {at_eval}"
        elif at_iteration is not None:
            drop_mask |= ev["iteration"].to_numpy() > at_iteration
            why = why or f"resume at iteration {at_iteration}"
        keep = len(ev)
        drop = np.flatnonzero(drop_mask)
        if drop.size:
            if drop[0] + drop.size != len(ev):
                raise RunLogError(f"{jp}: eval rows out of order; cannot resume ({why})")
            keep = int(drop[0])
            self._truncate(jp, lines.line_starts[keep], why, keep + 1)
        ev = ev.iloc[:keep]
        self._lines[EVALS] = keep
        self._last_eval = int(ev["eval_index"].max()) if keep else -1
        self._eval_groups = _groups(ev)

    # -- appending ------------------------------------------------------------------------

    @property
    def last_iteration(self) -> int:
        """Index of the last iteration logged (-1 if none)."""
        return self._last_iteration

    @property
    def last_eval(self) -> int:
        """Index of the last evaluation logged (-1 if none)."""
        return self._last_eval

    def _append(self, kind: str, df: pd.DataFrame) -> None:
        self.lock.check()  # fencing: a writer whose lease was taken over writes nothing more
        if self._buffer is not None:
            self._buffer[kind].append(df)
            self._lines[kind] += len(df)
            return
        data = _to_jsonl(df)
        path = _jsonl_path(self.folder, kind)
        with writing(path, "none of the rows were logged"):
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                end = os.fstat(fd).st_size
                try:
                    view = memoryview(data)
                    while view:  # one logical write; loop only on a short write
                        n = os.write(fd, view)
                        view = view[n:]
                    if self.fsync:
                        os.fsync(fd)
                except OSError:
                    os.ftruncate(fd, end)  # no part of the rows stays behind (a torn tail at worst, if this fails too)
                    raise
            finally:
                os.close(fd)
        self._lines[kind] += len(df)

    def _frame(self, rows: pd.DataFrame | Mapping[str, Any] | Iterable[Mapping[str, Any]], kind: str) -> pd.DataFrame:
        if isinstance(rows, pd.DataFrame):
            df = rows.reset_index(drop=True)
        elif isinstance(rows, Mapping):
            df = pd.DataFrame([dict(rows)])
        else:
            df = pd.DataFrame.from_records(list(rows))
        where = f"{_jsonl_path(self.folder, kind)} (not written)"
        return validate_frame(df, SCHEMAS[kind], where=where, first_line=self._lines[kind] + 1)

    def log_iteration(self, row: Mapping[str, Any]) -> None:
        """Append one iteration row (validated; extra keys kept)."""
        self.log_iterations([row])

    def log_iterations(self, rows: pd.DataFrame | Iterable[Mapping[str, Any]]) -> None:
        """Append many iteration rows in one write (e.g. a converter or the synthetic generator)."""
        df = self._frame(rows, ITERATIONS)
        if not len(df):
            return
        idx = df["iteration"].to_numpy()
        prev = np.concatenate([[self._last_iteration], idx[:-1]])
        i = _first_bad(idx <= prev)
        if i is not None:
            raise RunLogError(f"{_jsonl_path(self.folder, ITERATIONS)} (not written): line {self._lines[ITERATIONS] + 1 + i}: field 'iteration': {idx[i]} not above the last logged {prev[i]} (duplicate or out of order)")
        self._append(ITERATIONS, df)
        self._last_iteration = int(idx[-1])

    def log_eval_rows(self, rows: pd.DataFrame | Iterable[Mapping[str, Any]]) -> None:
        """Append the rows of one or more evaluations (one per problem) in one write.

        Refuses a batch that repeats an (evaluation, set) already logged or goes back to an
        earlier evaluation index, so a resumed trainer cannot duplicate rows.
        """
        df = self._frame(rows, EVALS)
        if not len(df):
            return
        where = f"{_jsonl_path(self.folder, EVALS)} (not written)"
        idx = df["eval_index"].to_numpy()
        prev = np.concatenate([[max(self._last_eval, 0)], idx[:-1]])
        i = _first_bad(idx < prev)
        if i is not None:
            raise RunLogError(f"{where}: line {self._lines[EVALS] + 1 + i}: field 'eval_index': {idx[i]} is below {prev[i]} (out of order)")
        keys = _eval_keys(df)
        groups = _groups(df, keys)
        again = sorted(groups & self._eval_groups)
        if again:
            raise RunLogError(f"{where}: evaluation {again[0][0]}, set '{again[0][1]}' already logged")
        dup = _duplicates(df, keys)
        i = _first_bad(dup)
        if i is not None:
            raise RunLogError(f"{where}: line {self._lines[EVALS] + 1 + i}: duplicate problem '{df['problem_id'].iloc[i]}' in evaluation {idx[i]}")
        self._append(EVALS, df)
        self._eval_groups |= groups
        self._last_eval = int(idx.max())

    def finish(self, status: Status = "complete", *, compact: bool = True, keep_jsonl: bool = False) -> None:
        """End the run: compact to Parquet (unless ``compact=False``), then record status and end time."""
        if status not in STATUSES:
            raise RunLogError(f"{self.folder}: unknown status {status!r} (one of {', '.join(STATUSES)})")
        try:
            self.lock.check()
            if self._buffer is not None:
                self._flush_buffer(parquet=compact)
            elif compact:
                finalize(self.folder, keep_jsonl=keep_jsonl, fsync=self.fsync)
            self.meta = self.meta.model_copy(update={"status": status, "ended_at": utc_now()})
            write_meta(self.folder, self.meta, fsync=self.fsync)
        finally:
            self._release()

    def _flush_buffer(self, *, parquet: bool) -> None:
        """A buffered run's rows to disk: as Parquet (a run that ends well), else as JSON lines."""
        buffer, self._buffer = self._buffer, None
        for kind in KINDS:
            frames = buffer[kind]
            if frames:
                df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
            else:  # no rows of this kind: an empty table, as finalize writes from an empty file
                df = validate_frame(pd.DataFrame({c.name: [] for c in SCHEMAS[kind]}), SCHEMAS[kind],
                                    where=str(_parquet_path(self.folder, kind)))
            if parquet:
                _write_parquet(self.folder, kind, df, 0, fsync=self.fsync, kept="the run was not written")
            else:
                _atomic_write_bytes(_jsonl_path(self.folder, kind), _to_jsonl(df))

    def __enter__(self) -> "RunLogWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self._release()
            return
        # Keep the JSON lines so the run can be resumed; only the status records what happened.
        status = "stopped" if issubclass(exc_type, KeyboardInterrupt) else "failed"
        try:
            self.finish(status, compact=False)
        except (OSError, PreregError, RunLogError) as e:  # e.g. the disk that failed the run is still full
            _log.warning("%s: the run's status '%s' could not be recorded (%s); it stays resumable", self.folder, status, e)


# --------------------------------------------------------------------------------------------
