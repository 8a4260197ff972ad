"""Run-log format: one folder per run, ``runs/<configuration>/seed-<n>/``.

This module owns the contract between the trainer (writer) and the analysis (reader).
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

Numbers in a run log are finite: ``inf`` or ``nan`` where a value is required is an error naming
the file, line and field. Parquet files are written with page checksums, verified on read.
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import sys
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq
from filelock import FileLock, Timeout
from pydantic import BaseModel, ConfigDict, Field, field_validator

FORMAT = "prereg-runlog/1"
META_FILE = "meta.json"
ITERATIONS = "iterations"
EVALS = "evals"
KINDS = (ITERATIONS, EVALS)
STAGES = ("calibration", "pilot", "smoke", "main")
STATUSES = ("running", "complete", "failed", "stopped")
Stage = Literal["calibration", "pilot", "smoke", "main"]
Status = Literal["running", "complete", "failed", "stopped"]
_PARQUET_KEY = b"prereg_runlog"
ELECTION_FILE = "election.json"  # written by `prereg elect` (trainer/elect.py) in the study folder
WRITER_LOCK = ".writer.lock"
WRITER_NOTE = ".writer.json"
# Names that become folders: no separators, no leading dot, so a run folder stays inside its study.
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,79}$")


class RunLogError(ValueError):
    """A run log that cannot be used: missing, malformed or torn files."""


class RunLogWarning(UserWarning):
    """A run-log problem that was reported and worked around (e.g. a torn last line dropped)."""


class RunBusyError(RunLogError):
    """Another writer holds the run folder."""


class RunMeta(BaseModel):
    """Metadata of one run (``meta.json``)."""

    model_config = ConfigDict(extra="allow")

    format: str = FORMAT
    study: str
    configuration: str
    seed: int
    stage: Stage = "main"
    plan_hash: str = Field(description="canonical content hash of the plan the run was launched under")
    config: dict[str, Any] = Field(default_factory=dict)
    started_at: datetime
    ended_at: datetime | None = None
    device: str = "cpu"
    status: Status = "running"
    tool_version: str = ""
    election_sha256: str = Field("", description="sha256 of <study>/election.json as the run read it "
                                 "(anchor = 'elected' runs; '' otherwise); the audit compares it with the file")

    @field_validator("started_at", "ended_at")
    @classmethod
    def _utc(cls, v: datetime | None) -> datetime | None:
        if v is not None and v.tzinfo is None:
            raise ValueError("times must carry a UTC offset (e.g. 2026-01-31T12:00:00Z)")
        return v.astimezone(timezone.utc) if v is not None else None


def election_sha256(study_dir: str | Path) -> str:
    """``sha256:<hex>`` of the bytes of ``<study_dir>/election.json``, or ``""`` when there is none.

    A run with ``anchor = "elected"`` records it in :attr:`RunMeta.election_sha256` when it starts
    (multi-reward paper §4.5: the anchor is fixed before joint training); ``prereg verify`` flags a
    main run whose recorded hash differs from the file's (``prereg_kit.audit``).
    """
    import hashlib  # noqa: PLC0415

    try:
        data = (Path(study_dir) / ELECTION_FILE).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return ""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def utc_now() -> datetime:
    """The current time in UTC (what ``started_at`` / ``ended_at`` hold)."""
    return datetime.now(timezone.utc)


def run_dir(study_dir: str | Path, configuration: str, seed: int, stage: str = "main") -> Path:
    """The folder of one run.

    Main-stage runs: ``<study_dir>/runs/<configuration>/seed-<seed>``, the runs the analysis
    reads. Calibration, pilot and smoke runs: ``<study_dir>/stages/<stage>/<configuration>/seed-<seed>``,
    so that a smoke run never collides with, or is mistaken for, the main run of the same seed.
    """
    if stage not in STAGES:
        raise RunLogError(f"unknown stage {stage!r} (one of {', '.join(STAGES)})")
    if not isinstance(configuration, str) or not SAFE_NAME.match(configuration) or ".." in configuration:
        raise RunLogError(f"configuration name {configuration!r} cannot name a run folder "
                          "(letters, digits and _ . + - only, starting with a letter or digit, no '..', at most 80)")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise RunLogError(f"seed {seed!r} cannot name a run folder (a non-negative integer)")
    base = Path(study_dir) / "runs" if stage == "main" else Path(study_dir) / "stages" / stage
    return base / configuration / f"seed-{seed}"


class RunLock:
    """The one-writer lock of a run folder (``.writer.lock``), held from :meth:`acquire` to :meth:`release`.

    Not blocking: a second writer gets :class:`RunBusyError` at once, naming the holder from its
    note (``.writer.json``: pid, host, start time, command). ``stale``: the note of an earlier
    holder that ended without releasing (killed or crashed) — its OS lock died with it, so this
    writer takes over and reports it.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.stale: str | None = None
        self._lock: FileLock | None = None

    @property
    def held(self) -> bool:
        return self._lock is not None and self._lock.is_locked

    def acquire(self) -> "RunLock":
        if self.held:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(self.folder / WRITER_LOCK, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise RunBusyError(f"{self.folder}: another writer holds this run ({_holder(self.folder)}); "
                               "nothing was written — wait for it or stop it") from None
        self._lock = lock
        note = self.folder / WRITER_NOTE
        if note.exists():
            self.stale = f"stale writer lock of {_holder(self.folder)}: it ended without releasing (killed or crashed)"
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": utc_now().isoformat(), "argv": sys.argv[:4]}
        _atomic_write_bytes(note, (json.dumps(me) + "\n").encode(), fsync=False)
        return self

    def release(self) -> None:
        if not self.held:
            return
        (self.folder / WRITER_NOTE).unlink(missing_ok=True)
        assert self._lock is not None
        self._lock.release()
        self._lock = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _holder(folder: Path) -> str:
    try:
        h = json.loads((folder / WRITER_NOTE).read_text())
        return f"pid {h['pid']} on {h['host']} since {h['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"


def run_busy(folder: str | Path) -> str | None:
    """Who writes ``folder`` now (one line), or None when no writer holds it. A probe: it takes the
    lock and lets it go at once, so it never blocks a writer for longer than that."""
    folder = Path(folder)
    if not (folder / WRITER_LOCK).exists():
        return None
    lock = FileLock(folder / WRITER_LOCK, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return _holder(folder)
    lock.release()
    return None


def _fsync_dir(folder: Path) -> None:
    # Make a rename or a file creation durable; not every platform can open a directory.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write_bytes(target: Path, data: bytes, fsync: bool = True) -> None:
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        if fsync:
            os.fsync(fh.fileno())
    tmp.replace(target)
    if fsync:
        _fsync_dir(target.parent)


def write_meta(path: str | Path, meta: RunMeta, *, fsync: bool = True) -> Path:
    """Write ``meta.json`` atomically (temp file + fsync + rename) into run folder ``path``."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / META_FILE
    text = json.dumps(meta.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
    _atomic_write_bytes(target, text.encode(), fsync)
    return target


def read_meta(path: str | Path) -> RunMeta:
    """Read and validate ``meta.json`` of run folder ``path``."""
    f = Path(path) / META_FILE
    try:
        raw = json.loads(f.read_text())
    except FileNotFoundError:
        raise RunLogError(f"{f}: no run metadata") from None
    except json.JSONDecodeError as e:
        raise RunLogError(f"{f}: line {e.lineno}: not valid JSON ({e.msg})") from None
    try:
        return RunMeta.model_validate(raw)
    except Exception as e:  # pydantic.ValidationError: keep one line
        first = str(e).splitlines()
        raise RunLogError(f"{f}: invalid run metadata: {' '.join(first[1:3]).strip()}") from None


def find_runs(study_dir: str | Path, *, all_stages: bool = False) -> list[Path]:
    """Every run folder (one holding ``meta.json``) under ``<study_dir>/runs``, sorted.

    ``all_stages``: also the calibration, pilot and smoke runs under ``<study_dir>/stages/``.
    """
    study = Path(study_dir)
    found = list((study / "runs").glob(f"*/seed-*/{META_FILE}"))
    if all_stages:
        found += list((study / "stages").glob(f"*/*/seed-*/{META_FILE}"))
    return sorted(p.parent for p in found)


# --------------------------------------------------------------------------------------------
# Column schemas
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One column of a run-log table: its JSON type, whether it is required, and its range.

    ``max_col`` names another column this one may not exceed (e.g. ``correct <= samples``).
    Optional columns may be absent or null; the reader fills them with null.
    """

    name: str
    kind: Literal["int", "float", "str", "bool"]
    doc: str
    required: bool = True
    min: float | None = None
    max: float | None = None
    max_col: str | None = None

    def describe(self) -> str:
        parts = {"int": "an integer", "float": "a finite number", "str": "a string", "bool": "true/false"}
        d = parts[self.kind]
        if self.min is not None:
            d += f" >= {self.min:g}"
        if self.max is not None:
            d += f" <= {self.max:g}"
        if self.max_col is not None:
            d += f" <= {self.max_col}"
        return d


ITERATION_COLUMNS: tuple[Column, ...] = (
    Column("iteration", "int", "0-based iteration index, strictly increasing", min=0),
    Column("tokens_rollout", "int", "tokens generated in rollouts this iteration (kept groups)", min=0),
    Column("tokens_continuation", "int", "tokens generated in continuations (e.g. Monte-Carlo credit) this iteration", min=0),
    Column("tokens_discarded", "int", "tokens generated in groups discarded this iteration (e.g. dynamic sampling)", min=0),
    Column("seconds_selection", "float", "seconds of prompt selection, incl. the prompt critic's prefill", min=0),
    Column("seconds_generation", "float", "seconds of rollout generation", min=0),
    Column("seconds_credit", "float", "seconds of credit assignment, incl. continuations and critic features/fits", min=0),
    Column("seconds_update", "float", "seconds of the optimizer update(s)", min=0),
    Column("seconds_weight_sync", "float", "seconds copying updated weights into the generation engine", min=0),
    Column("updates", "int", "cumulative optimizer updates after this iteration", min=0),
    Column("reward_mean", "float", "mean training reward of the kept rollouts", required=False),
    Column("mixed_share", "float", "share of groups with both correct and incorrect completions", required=False, min=0, max=1),
    Column("length_mean", "float", "mean completion length in tokens", required=False, min=0),
    Column("truncation_rate", "float", "share of completions cut at the generation limit", required=False, min=0, max=1),
)

EVAL_COLUMNS: tuple[Column, ...] = (
    Column("eval_index", "int", "0-based evaluation index (0 = before training); non-decreasing in the file", min=0),
    Column("iteration", "int", "iterations completed before this evaluation (0 for the initial one)", min=0),
    Column("eval_set", "str", "evaluation set name, e.g. 'math200'"),
    Column("problem_id", "str", "problem identifier, stable across runs"),
    Column("eval_seed", "int", "sampling seed of this evaluation (common random numbers: same across configurations of a seed)"),
    Column("tokens", "int", "cumulative generated tokens (all kinds) at this evaluation", min=0),
    Column("train_seconds", "float", "cumulative training seconds (sum of the five stages) at this evaluation", min=0),
    Column("updates", "int", "cumulative optimizer updates at this evaluation", min=0),
    Column("samples", "int", "completions sampled for this problem", min=1),
    Column("correct", "int", "completions correct under the default verifier", min=0, max_col="samples"),
    Column("correct_strict", "int", "completions correct under the strict (boxed-only) verifier", min=0, max_col="samples"),
    Column("boxed", "int", "completions with a boxed answer", min=0, max_col="samples"),
    Column("greedy_correct", "bool", "greedy completion correct under the default verifier (null if not logged)", required=False),
)

SCHEMAS: dict[str, tuple[Column, ...]] = {ITERATIONS: ITERATION_COLUMNS, EVALS: EVAL_COLUMNS}
STAGE_SECONDS = tuple(c.name for c in ITERATION_COLUMNS if c.name.startswith("seconds_"))
TOKEN_KINDS = ("tokens_rollout", "tokens_continuation", "tokens_discarded")


def _arrow_schema(columns: Sequence[Column]) -> pa.Schema:
    types = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_()}
    return pa.schema([(c.name, types[c.kind]) for c in columns])


def _show(v: Any) -> str:
    """A value as the JSON file would show it (numpy scalars unwrapped)."""
    if isinstance(v, np.generic):
        v = v.item()
    return repr(v)


def _first_bad(mask: np.ndarray) -> int | None:
    idx = np.flatnonzero(mask)
    return int(idx[0]) if idx.size else None


def validate_frame(df: pd.DataFrame, columns: Sequence[Column], *, where: str, first_line: int = 1) -> pd.DataFrame:
    """Check and coerce ``df`` to a column spec; return a new frame (spec columns first, extras after).

    Raises :class:`RunLogError` with one line naming ``where`` (the file), the line of the first
    offending row (row ``i`` is line ``first_line + i``), the field and what was expected.
    Extra columns are kept as they are.
    """
    out: dict[str, Any] = {}
    errors: list[tuple[int, str]] = []
    n = len(df)
    for col in columns:
        if col.name not in df.columns:
            if col.required and n:
                errors.append((0, f"field '{col.name}': missing (expected {col.describe()})"))
                continue
            dtype = {"int": "Int64" if n else "int64", "float": "float64", "str": "str", "bool": "boolean"}[col.kind]
            out[col.name] = pd.Series(pd.array([None] * n, dtype=dtype), index=df.index)
            continue
        s = df[col.name]
        null = s.isna().to_numpy()
        bad = null.copy() if col.required else np.zeros(n, dtype=bool)
        if col.kind in ("int", "float"):
            if col.kind == "int" and s.dtype == np.int64:
                # Common case (already int64): only the range needs checking.
                v = s.to_numpy()
                if col.min is not None:
                    bad |= v < col.min
                if col.max is not None:
                    bad |= v > col.max
                out[col.name] = s
                i = _first_bad(bad)
                if i is not None:
                    errors.append((i, f"field '{col.name}': expected {col.describe()}, got {_show(s.iloc[i])}"))
                continue
            if s.dtype == object or pd.api.types.is_bool_dtype(s.dtype) or pd.api.types.is_string_dtype(s.dtype):
                # Mixed or textual values: anything that is not a real number is an error.
                is_num = s.map(lambda v: isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))).to_numpy(dtype=bool)
                bad |= ~is_num & ~null
                v = pd.to_numeric(s.where(is_num), errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
            else:
                v = s.to_numpy(dtype="float64", na_value=np.nan)
            bad |= np.isinf(v)  # a non-finite number is never a reading
            if col.kind == "int":
                bad |= ~null & ~np.isnan(v) & (np.mod(np.nan_to_num(v), 1) != 0)
            with np.errstate(invalid="ignore"):
                if col.min is not None:
                    bad |= v < col.min
                if col.max is not None:
                    bad |= v > col.max
            conv = s if s.dtype == np.float64 else pd.Series(v, index=df.index)
            if col.kind == "int" and not bad.any():
                conv = conv.astype("Int64" if np.isnan(v).any() else "int64")
        elif col.kind == "str":
            if pd.api.types.is_string_dtype(s.dtype) and s.dtype != object:
                conv = s.astype("str")
            else:
                ok = s.map(lambda v: isinstance(v, (str, int, np.integer)) and not isinstance(v, (bool, np.bool_))).to_numpy(dtype=bool)
                bad |= ~ok & ~null
                conv = s.map(lambda v: v if isinstance(v, str) or v is None or (isinstance(v, float) and np.isnan(v)) else str(v)).astype("str")
        else:  # bool
            if pd.api.types.is_bool_dtype(s.dtype):
                conv = s.astype("boolean")
            else:
                ok = s.map(lambda v: v is None or isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, float, np.integer, np.floating)) and (v in (0, 1) or np.isnan(v)))).to_numpy(dtype=bool)
                bad |= ~ok & ~null
                conv = s
                if not bad.any():
                    conv = pd.Series([None if v is None or (isinstance(v, float) and np.isnan(v)) else bool(v) for v in s],
                                     index=df.index, dtype="boolean")
        i = _first_bad(bad)
        if i is not None:
            got = s.iloc[i]
            what = "missing or null" if (col.required and null[i]) else f"got {_show(got)}"
            errors.append((i, f"field '{col.name}': expected {col.describe()}, {what}"))
        out[col.name] = conv
    # Cross-column bounds, once each column has its type.
    for col in columns:
        if col.max_col and col.name in out and col.max_col in out and not errors:
            a = pd.to_numeric(out[col.name]).to_numpy(dtype="float64")
            b = pd.to_numeric(out[col.max_col]).to_numpy(dtype="float64")
            i = _first_bad(a > b)
            if i is not None:
                errors.append((i, f"field '{col.name}': {int(a[i])} exceeds {col.max_col}={int(b[i])}"))
    if errors:
        i, msg = min(errors, key=lambda e: e[0])
        raise RunLogError(f"{where}: line {first_line + i}: {msg}")
    names = {c.name for c in columns}
    for extra in df.columns:
        if extra not in names:
            out[extra] = df[extra]
            if pd.api.types.is_float_dtype(df[extra].dtype):
                i = _first_bad(np.isinf(df[extra].to_numpy(dtype="float64", na_value=np.nan)))
                if i is not None:
                    raise RunLogError(f"{where}: line {first_line + i}: field '{extra}': expected a finite number, got {_show(df[extra].iloc[i])}")
    res = pd.DataFrame(out, index=df.index)
    return res.reset_index(drop=True)


# --------------------------------------------------------------------------------------------
# Problems and raw reading of one table
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogProblem:
    """Something wrong with a run log that was reported rather than silently used.

    ``kind``: ``torn`` (torn tail, rows dropped), ``missing`` (file absent), ``corrupt`` (run
    unusable), ``stale`` (Parquet older than its JSON lines, ignored), ``status`` (run not
    complete), ``inconsistent`` (eval rows disagree with iteration rows).
    """

    path: str
    line: int | None
    kind: str
    message: str

    def __str__(self) -> str:
        loc = f"{self.path}: line {self.line}" if self.line is not None else self.path
        return f"{loc}: {self.message}"


@dataclass
class _Lines:
    data: bytes  # the usable prefix (whole, valid lines)
    n_lines: int
    torn: LogProblem | None
    last_good_end: int  # byte offset where the usable prefix ends
    line_starts: list[int] = field(default_factory=list)


def _scan_full(path: Path, data: bytes) -> _Lines:
    """Parse every line: a bad suffix is a torn tail, a bad line followed by good ones is corruption."""
    starts: list[int] = []
    pos = 0
    good_end = 0
    n = 0
    bad_at: tuple[int, int] | None = None  # (line number, byte offset) of the first bad line
    L = len(data)
    while pos < L:
        nl = data.find(b"\n", pos)
        end = L if nl < 0 else nl
        line = data[pos:end]
        n += 1
        ok = nl >= 0 and line.strip() != b""
        if ok:
            try:
                ok = isinstance(json.loads(line), dict)
            except (ValueError, UnicodeDecodeError):
                ok = False
        if ok:
            if bad_at is not None:
                raise RunLogError(f"{path}: line {bad_at[0]}: not a valid JSON object, and valid lines follow it (corrupt, not a torn tail)")
            starts.append(pos)
            good_end = end + 1
        elif bad_at is None:
            bad_at = (n, pos)
        pos = end + 1
    torn = None
    if bad_at is not None:
        torn = LogProblem(str(path), bad_at[0], "torn", f"torn last line ({L - bad_at[1]} bytes) ignored")
    return _Lines(data[:good_end], len(starts), torn, good_end, starts)


def _scan_fast(path: Path, data: bytes) -> _Lines:
    """Split on newlines, checking only the tail; the full scan runs when anything looks wrong."""
    if not data:
        return _Lines(b"", 0, None, 0, [])
    nl = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    if not nl.size:
        return _scan_full(path, data)
    last_start = int(nl[-2]) + 1 if nl.size > 1 else 0
    try:
        ok = isinstance(json.loads(data[last_start : int(nl[-1])]), dict)
    except (ValueError, UnicodeDecodeError):
        ok = False
    if not ok:
        return _scan_full(path, data)
    good_end = int(nl[-1]) + 1
    starts = [0] + (nl[:-1] + 1).tolist()
    torn = None
    if good_end < len(data):
        torn = LogProblem(str(path), len(starts) + 1, "torn", f"torn last line ({len(data) - good_end} bytes) ignored")
    return _Lines(data[:good_end], len(starts), torn, good_end, starts)


def _frame_from_lines(path: Path, lines: _Lines, kind: str) -> pd.DataFrame:
    columns = SCHEMAS[kind]
    if lines.n_lines == 0:
        return validate_frame(pd.DataFrame({c.name: [] for c in columns}), columns, where=str(path))
    try:
        # Fast path: Arrow's JSON reader with the spec's types; extra fields are inferred.
        table = pa_json.read_json(
            io.BytesIO(lines.data),
            read_options=pa_json.ReadOptions(block_size=max(1 << 20, len(lines.data) + 1)),
            parse_options=pa_json.ParseOptions(
                explicit_schema=_arrow_schema(columns), unexpected_field_behavior="infer"
            ),
        )
        df = table.to_pandas()
        if len(df) != lines.n_lines:
            raise pa.ArrowInvalid("row count differs from line count")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # Slow path: plain json per line, so a type error names its line.
        rows = [json.loads(lines.data[s : lines.data.find(b"\n", s)]) for s in lines.line_starts]
        df = pd.DataFrame.from_records(rows)
    return validate_frame(df, columns, where=str(path))


def _load_jsonl(path: Path, kind: str) -> tuple[pd.DataFrame, _Lines]:
    """Read a JSON-lines table: ``(frame of the whole valid lines, scan with torn-tail info)``."""
    data = path.read_bytes()
    lines = _scan_fast(path, data)
    try:
        return _frame_from_lines(path, lines, kind), lines
    except (RunLogError, ValueError):
        full = _scan_full(path, data)  # raises, naming the line, if a middle line is bad
        if full.n_lines == lines.n_lines and full.torn == lines.torn:
            raise
        return _frame_from_lines(path, full, kind), full


def _jsonl_path(folder: Path, kind: str) -> Path:
    return folder / f"{kind}.jsonl"


def _parquet_path(folder: Path, kind: str) -> Path:
    return folder / f"{kind}.parquet"


def _read_parquet(path: Path, kind: str) -> tuple[pd.DataFrame, dict]:
    table = pq.read_table(path, page_checksum_verification=True)
    info = json.loads((table.schema.metadata or {}).get(_PARQUET_KEY, b"{}"))
    if info.get("rows") != table.num_rows:
        raise RunLogError(f"{path}: incomplete Parquet file (rows {table.num_rows}, recorded {info.get('rows')})")
    df = table.replace_schema_metadata(None).to_pandas()
    return validate_frame(df, SCHEMAS[kind], where=str(path)), info


def read_table(folder: str | Path, kind: str) -> tuple[pd.DataFrame | None, list[LogProblem]]:
    """Read one table (``"iterations"`` or ``"evals"``) of a run folder, raw columns only.

    Prefers ``<kind>.parquet`` when it is present, complete, and not older than the JSON lines
    beside it (its metadata records the JSON-lines size it was compacted from). Returns
    ``(frame, problems)``; ``frame`` is ``None`` when neither file exists (a ``missing`` problem).
    Raises :class:`RunLogError` for a corrupt file (bad line followed by good lines, bad field).
    """
    folder = Path(folder)
    jp, pp = _jsonl_path(folder, kind), _parquet_path(folder, kind)
    problems: list[LogProblem] = []
    if pp.exists():
        try:
            df, info = _read_parquet(pp, kind)
        except (OSError, pa.ArrowException) as e:
            if not jp.exists():
                raise RunLogError(f"{pp}: unreadable Parquet file ({type(e).__name__})") from None
            problems.append(LogProblem(str(pp), None, "stale", "unreadable Parquet file ignored; JSON lines used"))
        except RunLogError as e:
            if not jp.exists():
                raise
            problems.append(LogProblem(str(pp), None, "stale", f"{e}; JSON lines used"))
        else:
            if not jp.exists() or jp.stat().st_size == info.get("jsonl_bytes"):
                return df, problems
            problems.append(LogProblem(str(pp), None, "stale", "Parquet older than its JSON lines; JSON lines used"))
    if not jp.exists():
        problems.append(LogProblem(str(jp), None, "missing", f"no {kind} table: neither {kind}.parquet nor {kind}.jsonl is there"))
        return None, problems
    df, lines = _load_jsonl(jp, kind)
    if lines.torn is not None:
        problems.append(lines.torn)
    return df, problems


# --------------------------------------------------------------------------------------------
# One run
# --------------------------------------------------------------------------------------------


@dataclass
class RunLog:
    """One run as read: metadata, the two tables (with derived columns) and the problems found."""

    path: Path
    meta: RunMeta
    iterations: pd.DataFrame
    evals: pd.DataFrame
    problems: list[LogProblem]


def add_derived(iterations: pd.DataFrame) -> pd.DataFrame:
    """Add per-iteration totals and running sums to raw iteration rows.

    ``tokens_total`` (rollout + continuation + discarded: everything the budget B counts, paper
    §3.3), ``seconds_total`` (the five stages: training time, Appendix D), ``cum_tokens`` and
    ``cum_train_seconds``.
    """
    it = iterations.copy()
    it["tokens_total"] = it[list(TOKEN_KINDS)].sum(axis=1).astype("int64")
    it["seconds_total"] = it[list(STAGE_SECONDS)].sum(axis=1).astype("float64")
    it["cum_tokens"] = it["tokens_total"].cumsum()
    it["cum_train_seconds"] = it["seconds_total"].cumsum()
    return it


def _check_order(path: Path, it: pd.DataFrame, ev: pd.DataFrame) -> None:
    if len(it):
        d = np.diff(it["iteration"].to_numpy())
        i = _first_bad(d <= 0)
        if i is not None:
            raise RunLogError(f"{path / 'iterations.jsonl'}: line {i + 2}: field 'iteration': {it['iteration'].iloc[i + 1]} not above previous {it['iteration'].iloc[i]} (duplicate or out of order)")
    if len(ev):
        d = np.diff(ev["eval_index"].to_numpy())
        i = _first_bad(d < 0)
        if i is not None:
            raise RunLogError(f"{path / 'evals.jsonl'}: line {i + 2}: field 'eval_index': goes back from {ev['eval_index'].iloc[i]} to {ev['eval_index'].iloc[i + 1]}")
        dup = ev.duplicated(["eval_index", "eval_set", "problem_id"]).to_numpy()
        i = _first_bad(dup)
        if i is not None:
            raise RunLogError(f"{path / 'evals.jsonl'}: line {i + 1}: duplicate row for evaluation {ev['eval_index'].iloc[i]}, set '{ev['eval_set'].iloc[i]}', problem '{ev['problem_id'].iloc[i]}'")


def check_consistency(path: str | Path, iterations: pd.DataFrame, evals: pd.DataFrame) -> list[LogProblem]:
    """Eval rows' cumulative tokens/updates must match the iteration rows they follow.

    For an evaluation after ``iteration = k`` iterations, ``tokens`` must equal the running sum of
    tokens over iterations ``0..k-1`` and ``updates`` that iteration's cumulative updates; training
    seconds must agree within 1e-6 relative. Mismatches are reported (first one per run), not raised.
    """
    if not len(iterations) or not len(evals):
        return []
    it = iterations if "cum_tokens" in iterations else add_derived(iterations)
    g = evals.drop_duplicates("eval_index")
    g = g[g["iteration"] > 0]
    ref = it.set_index("iteration")
    probs = []
    for col, icol, rtol in (("tokens", "cum_tokens", 0), ("updates", "updates", 0), ("train_seconds", "cum_train_seconds", 1e-6)):
        known = g["iteration"].sub(1).isin(ref.index)
        if not known.any():
            continue
        gg = g[known]
        want = ref.loc[gg["iteration"] - 1, icol].to_numpy(dtype="float64")
        have = gg[col].to_numpy(dtype="float64")
        bad = np.abs(have - want) > rtol * np.maximum(np.abs(want), 1.0)
        i = _first_bad(bad)
        if i is not None:
            probs.append(LogProblem(str(Path(path) / "evals.jsonl"), None, "inconsistent",
                                    f"evaluation {int(gg['eval_index'].iloc[i])}: {col}={have[i]:g} but iterations give {want[i]:g} after iteration {int(gg['iteration'].iloc[i]) - 1}"))
    return probs


def read_run(folder: str | Path, *, strict: bool = False) -> RunLog:
    """Read one run folder (metadata, iterations with derived columns, eval rows).

    Problems (torn tails, missing files, stale Parquet, status not complete, inconsistencies) are
    returned in ``RunLog.problems``; with ``strict=True`` any torn, missing or inconsistent table
    raises :class:`RunLogError` instead. A torn line is never part of the returned frames.
    """
    folder = Path(folder)
    meta = read_meta(folder)
    problems: list[LogProblem] = []
    frames = {}
    for kind in KINDS:
        df, probs = read_table(folder, kind)
        problems += probs
        frames[kind] = df if df is not None else validate_frame(pd.DataFrame(), SCHEMAS[kind], where=str(folder))
    it, ev = frames[ITERATIONS], frames[EVALS]
    _check_order(folder, it, ev)
    it = add_derived(it)
    problems += check_consistency(folder, it, ev)
    if meta.status != "complete":
        problems.append(LogProblem(str(folder / META_FILE), None, "status", f"run status is '{meta.status}'"))
    if strict:
        bad = [p for p in problems if p.kind in ("torn", "missing", "inconsistent")]
        if bad:
            raise RunLogError(str(bad[0]))
    return RunLog(folder, meta, it, ev, problems)


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def _to_jsonl(df: pd.DataFrame) -> bytes:
    if not len(df):
        return b""
    text = df.to_json(orient="records", lines=True, double_precision=15, date_format="iso")
    if not text.endswith("\n"):
        text += "\n"
    return text.encode()


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
        data = lines.data
        table = pa.Table.from_pandas(df, preserve_index=False)
        info = {"format": FORMAT, "rows": len(df), "jsonl_bytes": len(data)}
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), _PARQUET_KEY: json.dumps(info).encode()})
        tmp = pp.with_name(pp.name + ".tmp")
        pq.write_table(table, tmp, compression="zstd", write_page_checksum=True)
        if fsync:
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        tmp.replace(pp)
        if fsync:
            _fsync_dir(folder)
        written.append(pp)
        if not keep_jsonl and jp.exists():
            jp.unlink()
    if fsync:
        _fsync_dir(folder)
    return written


def _groups(ev: pd.DataFrame) -> set[tuple[int, str]]:
    g = ev[["eval_index", "eval_set"]].drop_duplicates()
    return set(zip(g["eval_index"].astype(int).tolist(), g["eval_set"].astype(str).tolist()))


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
    ) -> None:
        self.folder = Path(folder)
        self.fsync = fsync
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
            for k in KINDS:
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
        data = _to_jsonl(df)
        path = _jsonl_path(self.folder, kind)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:  # one logical write; loop only on a short write
                n = os.write(fd, view)
                view = view[n:]
            if self.fsync:
                os.fsync(fd)
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
        groups = _groups(df)
        again = sorted(groups & self._eval_groups)
        if again:
            raise RunLogError(f"{where}: evaluation {again[0][0]}, set '{again[0][1]}' already logged")
        dup = df.duplicated(["eval_index", "eval_set", "problem_id"]).to_numpy()
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
            if compact:
                finalize(self.folder, keep_jsonl=keep_jsonl, fsync=self.fsync)
            self.meta = self.meta.model_copy(update={"status": status, "ended_at": utc_now()})
            write_meta(self.folder, self.meta, fsync=self.fsync)
        finally:
            self._release()

    def __enter__(self) -> "RunLogWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self._release()
            return
        # Keep the JSON lines so the run can be resumed; only the status records what happened.
        status = "stopped" if issubclass(exc_type, KeyboardInterrupt) else "failed"
        self.finish(status, compact=False)


# --------------------------------------------------------------------------------------------
# A whole study
# --------------------------------------------------------------------------------------------


@dataclass
class Study:
    """Every run of a study folder, as tidy frames.

    ``meta``: one row per run (configuration, seed, study, stage, status, plan_hash, started_at,
    ended_at, device, tool_version, path, n_iterations, n_evals). ``iterations`` / ``evals``: all
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


def load_study(study_dir: str | Path, *, progress: bool | None = None, strict: bool = False) -> Study:
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
                 "device", "tool_version", "path", "n_iterations", "n_evals"]
    meta = pd.DataFrame(metas, columns=meta_cols)
    if len(meta):
        meta = meta.sort_values(["configuration", "seed"], ignore_index=True)
    return Study(meta, cat(its, ITERATIONS), cat(evs, EVALS), problems)
