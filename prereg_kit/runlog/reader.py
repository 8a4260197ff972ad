"""Reading one run: JSON lines with torn tails reported (never used), Parquet with checked pages."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from .folder import read_meta
from .schema import (
    _PARQUET_KEY,
    EVALS,
    ITERATIONS,
    KINDS,
    META_FILE,
    SCHEMAS,
    STAGE_SECONDS,
    STEP_SECONDS,
    TOKEN_KINDS,
    LogProblem,
    RunLogError,
    RunMeta,
    _arrow_schema,
    _first_bad,
    validate_frame,
)


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


def parquet_table(path: Path, read_dictionary: list[str] | None = None) -> pa.Table:
    """One run's Parquet file as an Arrow table, every page's checksum verified. Read through
    ``ParquetFile`` in the calling thread: ``pq.read_table`` builds a dataset per file, which
    took half the time of reading a run's small files."""
    with pq.ParquetFile(path, page_checksum_verification=True, read_dictionary=read_dictionary) as f:
        return f.read(use_threads=False)


def _read_parquet(path: Path, kind: str) -> tuple[pd.DataFrame, dict]:
    table = parquet_table(path)
    info = json.loads((table.schema.metadata or {}).get(_PARQUET_KEY, b"{}"))
    if info.get("rows") != table.num_rows:
        raise RunLogError(f"{path}: incomplete Parquet file (rows {table.num_rows}, recorded {info.get('rows')})")
    df = table.replace_schema_metadata(None).to_pandas(use_threads=False)  # one run's table: threads cost more
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

    ``tokens_total`` (rollout + continuation + discarded: everything the budget B counts, dense-rewards
    paper §2.3 "Two budgets"), ``seconds_total`` (the five stages: training time, Appendix D; a row of a trainer that
    does not split its stages gives its unsplit ``seconds_step``), ``cum_tokens`` and
    ``cum_train_seconds``.
    """
    it = iterations.copy()
    it["tokens_total"] = it[list(TOKEN_KINDS)].sum(axis=1).astype("int64")
    stages = it[list(STAGE_SECONDS)].astype("float64")
    split = stages.notna().all(axis=1).to_numpy()
    if split.all():
        it["seconds_total"] = stages.sum(axis=1).astype("float64")
    else:
        step = it[STEP_SECONDS] if STEP_SECONDS in it else pd.Series(np.nan, index=it.index)
        it["seconds_total"] = np.where(split, stages.sum(axis=1).to_numpy(), step.to_numpy(dtype="float64", na_value=np.nan))
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

