"""Loading a study's compacted runs column-wise: each table read once for all runs.

Reading run by run (:func:`.reader.read_run`) validates, checks and derives each run's frames
on their own; at hundreds of runs the per-run pandas work, not the reading, takes the time. Here
the Parquet files of every run whose compacted files are current are read with pyarrow (the
project's columnar library; DuckDB and polars are not dependencies), concatenated into one Arrow
table per kind, converted to pandas once, and validated, order-checked, consistency-checked and
derived vectorized over all runs with a run index column.

Every check of the per-run reader is kept. A check is computed over all rows at once; the runs
it fails on are then read again by :func:`.reader.read_run`, which names the run folder, file,
line and field exactly as before (and in strict mode raises). Runs that are not compacted,
whose Parquet is stale or unreadable, or whose metadata is bad take the per-run path from the
start. :func:`load_columnar` returns ``None`` when the per-run path must do the whole study
(strict mode with any such run: the per-run path raises at the first one, in folder order).
"""

from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from .folder import read_meta
from .reader import _jsonl_path, _parquet_path, check_consistency, parquet_table
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
    validate_frame,
)
from .text import radix_key, repeats, sorted_categories, text_codes

_RUN = "_run"  # the folder's index in find_runs order, while the tables are one
_LINE = re.compile(r": line (\d+): ")
_TEXT = ["eval_set", "problem_id"]  # repeated in every evaluation row: read as dictionaries, kept as categories


@dataclass
class Columnar:
    """The runs read column-wise: ``fast`` folder indices, their metadata, frames (with ``_run``)
    and problems by folder index; ``slow``: folder indices left to the per-run reader."""

    metas: dict[int, RunMeta]
    iterations: pd.DataFrame
    evals: pd.DataFrame
    problems: dict[int, list[LogProblem]]
    slow: set[int]


def _read_current(folder: Path) -> dict[str, pa.Table] | None:
    """Both tables of a run from Parquet when that is what :func:`.reader.read_table` would use
    without a problem (present, complete, not older than its JSON lines); else ``None``."""
    out = {}
    for kind in KINDS:
        pp, jp = _parquet_path(folder, kind), _jsonl_path(folder, kind)
        try:
            # Text columns as dictionaries: a few distinct values repeated, read as codes.
            table = parquet_table(pp, _TEXT if kind == EVALS else None)
        except (OSError, pa.ArrowException, KeyError):  # KeyError: a text column is missing
            return None
        info = json.loads((table.schema.metadata or {}).get(_PARQUET_KEY, b"{}"))
        if info.get("rows") != table.num_rows:
            return None
        if jp.exists() and jp.stat().st_size != info.get("jsonl_bytes"):
            return None
        out[kind] = table.replace_schema_metadata(None)
    return out


def _concat(tables: list[pa.Table], runs: list[int]) -> pa.Table:
    lengths = np.array([t.num_rows for t in tables], dtype=np.int64)
    cat = pa.concat_tables(tables, promote_options="default") if tables else pa.table({})
    return cat.append_column(_RUN, pa.array(np.repeat(np.array(runs, dtype=np.int64), lengths)))


def _to_pandas(handed: list[pa.Table]) -> pd.DataFrame:
    """The table in ``handed`` (one chunk per run; the list is emptied) as pandas, holding the rows about once: each column is made
    one contiguous array while its chunks are freed, so the numeric columns then convert without a
    copy (split_blocks: one pandas block per column, no consolidation), and self_destruct frees
    what does convert by copying (text codes, flags) column by column."""
    table = handed.pop().unify_dictionaries()  # one dictionary per text column across runs
    arrays = {}
    for name in list(table.column_names):
        chunked = table.column(name)
        table = table.drop_columns([name])  # the chunks' last reference goes with ``chunked``
        arrays[name] = chunked.combine_chunks() if chunked.num_chunks != 1 else chunked.chunk(0)
        del chunked
        pa.default_memory_pool().release_unused()
    table = pa.table(arrays)
    del arrays
    return table.to_pandas(self_destruct=True, split_blocks=True)


def _run_of_row(run: np.ndarray, err: RunLogError) -> int | None:
    m = _LINE.search(str(err))
    return int(run[int(m.group(1)) - 1]) if m and int(m.group(1)) - 1 < len(run) else None


def _validated(tables: list[pa.Table], runs: list[int], kind: str, slow: set[int], where: str) -> pd.DataFrame | None:
    """Concatenate the runs' tables of one kind (``tables`` is emptied) and validate every run's
    rows at once; a run whose rows fail goes to ``slow`` (the per-run reader names its file, line
    and field) and the rest are validated again. ``None``: the failures are too many or not tied
    to a row (the per-run reader reads the study)."""
    handed = [_concat(tables, runs)]
    tables.clear()  # the concatenated table is the only reference left to the Arrow buffers
    df = _to_pandas(handed)  # handed over: no reference here keeps the runs' chunks alive
    run = df.pop(_RUN).to_numpy()
    for c in _TEXT:  # sorted categories, as :func:`.study._load` gives every path's rows
        if c in df:
            df[c] = sorted_categories(df[c])
    for _ in range(64):
        keep = ~np.isin(run, list(slow)) if slow else None
        sub = df[keep] if keep is not None else df
        try:
            out = validate_frame(sub, SCHEMAS[kind], where=where)
        except RunLogError as e:
            r = _run_of_row(run if keep is None else run[keep], e)
            if r is None:
                return None
            slow.add(r)
            continue
        out[_RUN] = run if keep is None else run[keep]
        return out
    return None


def _bad_runs(run: np.ndarray, bad_row: np.ndarray) -> set[int]:
    return set(np.unique(run[bad_row]).tolist())


def _order_failures(it: pd.DataFrame, ev: pd.DataFrame) -> set[int]:
    """Runs whose iterations do not strictly increase, whose eval indices go back, or with a
    duplicate (evaluation, set, problem) row: what the per-run reader refuses."""
    bad: set[int] = set()
    for df, col, strict in ((it, "iteration", True), (ev, "eval_index", False)):
        if len(df) > 1:
            r = df[_RUN].to_numpy()
            d = np.diff(df[col].to_numpy(dtype="int64"))
            same = r[1:] == r[:-1]
            bad |= _bad_runs(r[1:], same & ((d <= 0) if strict else (d < 0)))
    if len(ev):
        bad |= duplicate_runs(ev)
    return bad


def duplicate_runs(ev: pd.DataFrame) -> set[int]:
    """Runs holding two rows of the same (evaluation, set, problem): the four columns as one
    integer key (:func:`.text.radix_key`) and its repeats found by one sort. The runs of
    ``ev.duplicated([_RUN, "eval_index", "eval_set", "problem_id"])`` without hashing millions
    of rows; a key too wide for 62 bits is compared column by column after a lexsort."""
    run = ev[_RUN].to_numpy(dtype="int64")
    cols = [run, ev["eval_index"].to_numpy(dtype="int64"), text_codes(ev["eval_set"])[0],
            text_codes(ev["problem_id"])[0]]
    key = radix_key(cols)
    if key is not None:
        return set(np.unique(run[repeats(key)]).tolist())
    s = [c[np.lexsort(cols[::-1])] for c in cols]
    same = np.ones(max(len(run) - 1, 0), dtype=bool)
    for c in s:
        same &= c[1:] == c[:-1]
    return set(np.unique(s[0][1:][same]).tolist())


def _per_run_cumsum(values: np.ndarray, run: np.ndarray) -> np.ndarray:
    """Running sums restarting at each run, summed in the same order as one run's own cumsum
    (a grouped cumsum may compensate its float sums and differ in the last bits)."""
    out = np.empty_like(values)
    bounds = np.flatnonzero(np.r_[True, run[1:] != run[:-1], True])
    for a, b in zip(bounds[:-1], bounds[1:]):
        out[a:b] = np.cumsum(values[a:b])
    return out


def add_derived_runs(it: pd.DataFrame) -> pd.DataFrame:
    """:func:`.reader.add_derived` for the rows of many runs at once (``_run`` column, each run's
    rows together): totals per row, running sums per run."""
    it = it.copy()
    it["tokens_total"] = it[list(TOKEN_KINDS)].sum(axis=1).astype("int64")
    stages = it[list(STAGE_SECONDS)].astype("float64")
    split = stages.notna().all(axis=1).to_numpy()
    step = it[STEP_SECONDS] if STEP_SECONDS in it else pd.Series(np.nan, index=it.index)
    it["seconds_total"] = np.where(split, stages.sum(axis=1).to_numpy(), step.to_numpy(dtype="float64", na_value=np.nan))
    run = it[_RUN].to_numpy()
    it["cum_tokens"] = _per_run_cumsum(it["tokens_total"].to_numpy(), run)
    it["cum_train_seconds"] = _per_run_cumsum(it["seconds_total"].to_numpy(dtype="float64"), run)
    return it


def _inconsistent_runs(it: pd.DataFrame, ev: pd.DataFrame) -> set[int]:
    """Runs with an evaluation whose cumulative tokens, updates or training seconds disagree with
    the iteration before it (:func:`.reader.check_consistency`, all runs at once)."""
    if not len(it) or not len(ev):
        return set()
    g = ev.drop_duplicates([_RUN, "eval_index"])
    g = g[g["iteration"] > 0]
    ref = it[[_RUN, "iteration", "cum_tokens", "updates", "cum_train_seconds"]]
    m = g[[_RUN, "iteration", "tokens", "updates", "train_seconds"]].assign(iteration=g["iteration"] - 1).merge(
        ref, on=[_RUN, "iteration"], suffixes=("", "_it"))
    bad = np.zeros(len(m), dtype=bool)
    for col, icol, rtol in (("tokens", "cum_tokens", 0), ("updates", "updates_it", 0), ("train_seconds", "cum_train_seconds", 1e-6)):
        want = m[icol].to_numpy(dtype="float64")
        have = m[col].to_numpy(dtype="float64")
        bad |= np.abs(have - want) > rtol * np.maximum(np.abs(want), 1.0)
    return _bad_runs(m[_RUN].to_numpy(), bad)


def load_columnar(folders: list[Path], *, strict: bool, where: str) -> Columnar | None:
    """Read the runs of ``folders`` column-wise (see the module); ``None``: read every run with
    the per-run reader instead (strict mode and some run needs it)."""
    # Arrow's default allocator keeps what many small per-run tables free (about half again the
    # rows' size at hundreds of runs); the system allocator hands it back. Restored on return.
    previous = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        return _load_columnar(folders, strict=strict, where=where)
    finally:
        pa.set_memory_pool(previous)


# Runs read at once: one per core (pyarrow decodes a file without holding the GIL), at most 8.
_READERS = min(8, os.cpu_count() or 1)


def _read_run(folder: Path) -> tuple[RunMeta | None, dict[str, pa.Table] | None]:
    """A run's metadata and both tables (:func:`_read_current`); ``None`` in place of either
    when the run must take the per-run path."""
    try:
        meta = read_meta(folder)
    except RunLogError:
        return None, None
    return meta, _read_current(folder)


def _load_columnar(folders: list[Path], *, strict: bool, where: str) -> Columnar | None:
    metas: dict[int, RunMeta] = {}
    tables: dict[str, list[pa.Table]] = {k: [] for k in KINDS}
    fast: list[int] = []
    slow: set[int] = set()
    with ThreadPoolExecutor(max_workers=_READERS) as pool:  # pyarrow reads a file without the GIL
        read = list(pool.map(_read_run, folders))
    for i, (meta, got) in enumerate(read):
        if meta is None or got is None:
            slow.add(i)
            continue
        metas[i] = meta
        fast.append(i)
        for k in KINDS:
            tables[k].append(got[k])
    read.clear()  # the tables lists must hold the only references: _validated frees each run's chunks as it converts
    got = None
    if (strict and slow) or not fast:
        return None
    try:
        it = _validated(tables.pop(ITERATIONS), fast, ITERATIONS, slow, where)
        ev = _validated(tables.pop(EVALS), fast, EVALS, slow, where)
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # runs whose extra columns disagree in type
        return None
    if it is None or ev is None or (strict and slow):
        return None
    slow |= _order_failures(it, ev)
    if slow:  # a boolean mask copies the frame: only when some run is left out
        it, ev = it[~it[_RUN].isin(list(slow))], ev[~ev[_RUN].isin(list(slow))]
    it = add_derived_runs(it)
    odd = _inconsistent_runs(it, ev)
    problems: dict[int, list[LogProblem]] = {i: [] for i in fast if i not in slow}
    for i in sorted(odd):  # the per-run check names the first mismatch of each kind
        problems[i] += check_consistency(folders[i], it[it[_RUN] == i].drop(columns=_RUN),
                                         ev[ev[_RUN] == i].drop(columns=_RUN).reset_index(drop=True))
    for i in problems:
        if metas[i].status != "complete":
            problems[i].append(LogProblem(str(folders[i] / META_FILE), None, "status", f"run status is '{metas[i].status}'"))
    if strict and (slow or odd):
        return None
    keep = {i: metas[i] for i in problems}
    return Columnar(keep, it.reset_index(drop=True), ev.reset_index(drop=True), problems, slow)
