"""Grouping evaluation rows by run and evaluation without hashing every row.

A study's rows hold each run's rows together, in evaluation order (the loader checks it), so the
groups of ``rows.groupby(["configuration", "seed", "eval_index"], sort=True)`` are blocks of
neighbouring rows: where a key changes is found with one comparison per row, and only the blocks'
keys (a row per evaluation, not per problem) are sorted. Rows that are not so (a caller's own
frame, a shuffled one) get pandas' grouping; the results are the same either way. numpy and
pandas are imported when called: ``prereg lock`` and ``verify`` import the design check, which
names these functions, and start without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .text import text_codes

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


def _key_codes(rows: pd.DataFrame, keys: list[str]) -> list[np.ndarray] | None:
    """Each key column as int64 codes ordered as its values sort (text in text order), or
    ``None`` when a column is neither text nor integers, or holds a missing value."""
    import numpy as np
    import pandas as pd

    out = []
    for k in keys:
        s = rows[k]
        if isinstance(s.dtype, pd.CategoricalDtype) or pd.api.types.is_string_dtype(s.dtype):
            if s.isna().any():
                return None
            out.append(text_codes(s)[0])
        elif isinstance(s.dtype, np.dtype) and s.dtype.kind in "iu":
            out.append(s.to_numpy(dtype=np.int64))
        else:
            return None
    return out


def group_numbers(rows: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """``rows.groupby(keys, sort=True).ngroup()`` as an array: each row's group number in sorted
    key order. From the blocks of neighbouring rows with equal keys when every group is one
    block; otherwise from pandas."""
    import numpy as np

    n = len(rows)
    cols = _key_codes(rows, keys) if n else None
    if cols is not None:
        change = np.zeros(n - 1, dtype=bool)
        for c in cols:
            change |= c[1:] != c[:-1]
        starts = np.flatnonzero(np.r_[True, change])
        block = [c[starts] for c in cols]
        order = np.lexsort(block[::-1])
        same = np.ones(len(starts) - 1, dtype=bool)
        for b in block:
            sb = b[order]
            same &= sb[1:] == sb[:-1]
        if not same.any():  # every group is one block
            rank = np.empty(len(starts), dtype=np.int64)
            rank[order] = np.arange(len(starts))
            return np.repeat(rank, np.diff(np.r_[starts, n]))
    return rows.groupby(keys, sort=True).ngroup().to_numpy()


def rows_by_group(gid: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """``np.lexsort((codes, gid))``: the rows ordered by group, then by code (ties in row order).
    When each group is one block of rows with codes already ascending, the blocks are put in
    group order without sorting the rows."""
    import numpy as np

    n = len(gid)
    if n:
        starts = np.flatnonzero(np.r_[True, gid[1:] != gid[:-1]])
        within = gid[1:] == gid[:-1]
        if len(np.unique(gid[starts])) == len(starts) and not np.any(within & (codes[1:] < codes[:-1])):
            bo = np.argsort(gid[starts], kind="stable")
            lens = np.diff(np.r_[starts, n])[bo]
            shift = starts[bo] - np.r_[0, np.cumsum(lens)[:-1]]
            return np.repeat(shift, lens) + np.arange(n)
    return np.lexsort((codes, gid))


__all__ = ["group_numbers", "rows_by_group"]
