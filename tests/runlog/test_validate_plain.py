"""The row check's numpy path for columns in their usual types (int64/float64 numbers, str or
categorical text, bool) gives the frame and the one-line error the value-by-value check gave.

The reference below is the value-by-value ``validate_frame`` as it was before that path, kept
here only to compare with: random good and bad frames, in every column representation a reader
or writer hands over, must come out of both alike (same columns, types, values and index; or the
same :class:`RunLogError` text: file, line, field, what was expected, what was got).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from prereg_kit.runlog.schema import (
    EVAL_COLUMNS,
    ITERATION_COLUMNS,
    STAGE_SECONDS,
    STEP_SECONDS,
    RunLogError,
    _first_bad,
    _show,
    validate_frame,
)


def _reference_stage_rule(out: dict[str, Any], n: int) -> list[tuple[int, str]]:
    null = np.column_stack([pd.isna(out[c]).to_numpy() if c in out else np.ones(n, bool) for c in STAGE_SECONDS]) \
        if n else np.zeros((0, len(STAGE_SECONDS)), bool)
    step_null = pd.isna(out[STEP_SECONDS]).to_numpy() if STEP_SECONDS in out else np.ones(n, bool)
    split = ~null.any(axis=1)
    unsplit = null.all(axis=1) & ~step_null
    i = _first_bad(~(split | unsplit))
    if i is None:
        return []
    given = [c for c, miss in zip(STAGE_SECONDS, null[i]) if not miss]
    rule = "stage seconds: give the five seconds_* columns or seconds_step, not neither/a mix"
    if not given:
        return [(i, f"{rule} (got none)")]
    if step_null[i]:
        first = next(c for c, miss in zip(STAGE_SECONDS, null[i]) if miss)
        return [(i, f"field '{first}': missing or null ({rule})")]
    return [(i, f"{rule} (got {len(given)} of the five ({', '.join(given)}) and seconds_step)")]


def reference_validate_frame(df, columns, *, where, first_line=1):
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
                is_num = s.map(lambda v: isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))).to_numpy(dtype=bool)
                bad |= ~is_num & ~null
                v = pd.to_numeric(s.where(is_num), errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
            else:
                v = s.to_numpy(dtype="float64", na_value=np.nan)
            bad |= np.isinf(v)
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
            if isinstance(s.dtype, pd.CategoricalDtype) and s.dtype.categories.dtype == "str":
                conv = s
            elif pd.api.types.is_string_dtype(s.dtype) and s.dtype != object:
                conv = s.astype("str")
            else:
                ok = s.map(lambda v: isinstance(v, (str, int, np.integer)) and not isinstance(v, (bool, np.bool_))).to_numpy(dtype=bool)
                bad |= ~ok & ~null
                conv = s.map(lambda v: v if isinstance(v, str) or v is None or (isinstance(v, float) and np.isnan(v)) else str(v)).astype("str")
        else:
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
    for col in columns:
        if col.max_col and col.name in out and col.max_col in out and not errors:
            a = pd.to_numeric(out[col.name]).to_numpy(dtype="float64", na_value=np.nan)
            b = pd.to_numeric(out[col.max_col]).to_numpy(dtype="float64", na_value=np.nan)
            i = _first_bad(a > b)
            if i is not None:
                errors.append((i, f"field '{col.name}': {int(a[i])} exceeds {col.max_col}={int(b[i])}"))
    if not errors and any(c.name == STEP_SECONDS for c in columns):
        errors += _reference_stage_rule(out, n)
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
    res = pd.DataFrame(out, index=df.index, copy=False)
    return res.reset_index(drop=True)


# --- random frames --------------------------------------------------------------------------

# How a column's values are held (what readers and callers hand over), by column kind.
# The usual types come most often: theirs is the numpy path under test.
REPS = {"int": ["int64"] * 4 + ["float64"] * 2 + ["Int64", "object", "int32"],
        "float": ["float64"] * 4 + ["int64"] * 2 + ["Float64", "object", "float32"],
        "str": ["str"] * 3 + ["category"] * 3 + ["object", "string"],
        "bool": ["bool"] * 2 + ["boolean"] * 2 + ["object", "int64"]}


def _good(col, rep: str, n: int, rng: np.random.Generator) -> list:
    lo = 0 if col.min is None else int(col.min)
    if col.kind == "int" or rep == "int64":
        return rng.integers(lo, lo + (2 if col.max is not None else 5), n).tolist()
    if col.kind == "float":
        return np.round(rng.uniform(lo, 1.0 if col.max is not None else 50.0, n), 3).tolist()
    if col.kind == "str":
        return [f"p{k}" for k in rng.integers(0, 4, n)]
    return (rng.random(n) < 0.5).tolist()


def _bads(col, rep: str) -> list:
    """Values that break ``col`` and can be held as ``rep``."""
    below = [] if col.min is None else [int(col.min) - 1]
    if rep == "int64":
        return below + ([2] if col.kind == "bool" else [])
    if rep in ("float64", "float32"):
        return below + ([col.max + 0.5] if col.max is not None else []) + ([2.5] if col.kind == "int" else []) \
            + [np.inf, -np.inf] + ([np.nan] if col.required else [])
    if rep == "int32":
        return below
    if rep in ("Int64", "Float64", "boolean", "str", "category", "string"):
        return below + ([None] if col.required else [])
    if rep == "object":
        return below + {"int": [2.5, np.inf, "7", True, None], "float": [np.inf, "x", False, None],
                        "str": [None, 3, True, 1.5], "bool": [2, "yes", 1.0, 0, None]}[col.kind]
    return []


def _held(values: list, rep: str) -> pd.Series:
    if rep == "object":
        return pd.Series(values, dtype=object)
    if rep == "category":
        return pd.Series(pd.Categorical(pd.array(values, dtype="str")))
    if rep in ("int64", "int32") and any(v is True or v is False for v in values):
        return pd.Series(np.array(values, dtype=np.int64))
    return pd.Series(values, dtype=rep)


def _frame(columns, rng: np.random.Generator) -> pd.DataFrame:
    n = int(rng.choice([0, 1, 3, 12]))
    reps = {c.name: REPS[c.kind][rng.integers(len(REPS[c.kind]))] for c in columns}
    vals = {c.name: _good(c, reps[c.name], n, rng) for c in columns}
    if "samples" in vals:
        vals["samples"] = [v + 10 for v in vals["samples"]]
        if n and rng.random() < 0.15:
            vals["correct"][rng.integers(n)] = 30  # above samples
    if n and rng.random() < 0.6:  # a bad value somewhere, held as its column is
        c = columns[rng.integers(len(columns))]
        bads = _bads(c, reps[c.name])
        if bads:
            vals[c.name][rng.integers(n)] = bads[rng.integers(len(bads))]
    for c in columns:  # nulls where a column may have them
        if n and not c.required and reps[c.name] in ("float64", "Float64", "Int64", "boolean", "object") and rng.random() < 0.3:
            nan = np.nan if rng.random() < 0.5 or c.kind != "bool" else None  # Arrow's bool nulls are None
            vals[c.name][rng.integers(n)] = nan if reps[c.name] in ("float64", "object") else None
    if columns == ITERATION_COLUMNS and n and rng.random() < 0.2:  # one stage missing on one row
        c = STAGE_SECONDS[rng.integers(5)]
        if reps[c] in ("float64", "object", "Float64"):
            vals[c][rng.integers(n)] = None if reps[c] == "Float64" else np.nan
    data = {}
    for c in columns:
        if rng.random() < (0.03 if c.required else 0.2):
            continue  # a column left out
        data[c.name] = _held(vals[c.name], reps[c.name])
    if columns == ITERATION_COLUMNS and n and rng.random() < 0.4:
        data[STEP_SECONDS] = pd.Series(rng.uniform(1, 5, n))
        if rng.random() < 0.6:
            for c in STAGE_SECONDS:
                data.pop(c, None)
    if rng.random() < 0.3:
        data["extra_f"] = pd.Series(rng.normal(size=n))
        if n and rng.random() < 0.3:
            data["extra_f"].iloc[rng.integers(n)] = np.inf
    if rng.random() < 0.2:
        data["extra_s"] = pd.Series([f"e{k}" for k in range(n)], dtype=object)
    names = list(data)
    if rng.random() < 0.2:
        rng.shuffle(names)  # columns in another order
    df = pd.DataFrame({k: data[k] for k in names}, index=pd.RangeIndex(n))
    if n and rng.random() < 0.3:
        df.index = [rng.permutation(n) + 5, pd.RangeIndex(3, 3 + n), pd.RangeIndex(0, 2 * n, 2)][rng.integers(3)]
    return df


TRIALS = 80


def _outcome(fn, df, columns, where, first_line):
    try:
        return fn(df.copy(), columns, where=where, first_line=first_line)
    except RunLogError as e:
        return str(e)


@pytest.mark.parametrize("columns", [ITERATION_COLUMNS, EVAL_COLUMNS], ids=["iterations", "evals"])
def test_the_numpy_path_gives_the_frames_and_errors_of_the_value_by_value_check(columns):
    rng = np.random.default_rng(17)
    kinds = {"frame": 0, "error": 0}
    for trial in range(TRIALS):
        df = _frame(columns, rng)
        first = int(rng.integers(1, 50))
        want = _outcome(reference_validate_frame, df, columns, "f.jsonl", first)
        got = _outcome(validate_frame, df, columns, "f.jsonl", first)
        if isinstance(want, str):
            kinds["error"] += 1
            assert got == want, (trial, df.dtypes.to_dict())
            continue
        kinds["frame"] += 1
        assert not isinstance(got, str), (trial, got)
        assert list(got.columns) == list(want.columns)
        assert got.dtypes.to_dict() == want.dtypes.to_dict(), trial
        pd.testing.assert_frame_equal(got, want, check_exact=True, check_index_type=True, check_column_type=True)
    assert kinds["frame"] > TRIALS // 5 and kinds["error"] > TRIALS // 5, kinds  # both outcomes are tried often


@pytest.mark.parametrize("values", [[True, None, False], [None, None, None], [True, False, True], [np.True_, None, False],
                                    [True, 2, None], [True, "yes", None], [True, np.nan, None], [1, 0, None], [True, 1.0, None]])
def test_a_bool_column_of_python_objects_is_checked_as_before(values):
    """Arrow hands over a bool column with nulls as Python bools and None (the numpy path); any
    other object in it is checked value by value."""
    rng = np.random.default_rng(3)
    df = pd.DataFrame({c.name: _held(_good(c, "x", 3, rng), "object" if c.kind == "bool" else REPS[c.kind][0])
                       for c in EVAL_COLUMNS})
    df["samples"] += 10
    df["greedy_correct"] = pd.Series(values, dtype=object)
    want = _outcome(reference_validate_frame, df, EVAL_COLUMNS, "e.parquet", 1)
    got = _outcome(validate_frame, df, EVAL_COLUMNS, "e.parquet", 1)
    if isinstance(want, str):
        assert got == want
    else:
        pd.testing.assert_frame_equal(got, want, check_exact=True, check_index_type=True, check_column_type=True)
