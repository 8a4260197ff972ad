"""Text columns of the evaluation rows as categories: a few distinct values, millions of rows.

``eval_set`` and ``problem_id`` repeat a handful of names (and ``problem_id`` some thousand ids)
in every evaluation row. Held as pandas categoricals whose categories are the distinct values in
sorted order, they take one small integer per row instead of a string, selecting, grouping and
sorting them works on the integers, and sorting by them gives the same order as sorting the text
(the categories are in text order). numpy and pandas are imported when a column is converted:
``prereg lock`` and ``verify`` import the design check, which names these functions, and start
without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

TEXT_COLUMNS = ("eval_set", "problem_id")


def sorted_categories(values: pd.Series) -> pd.Series:
    """``values`` as a categorical of ``str`` whose categories are its distinct values sorted
    (missing values stay missing); already such a categorical: returned as is."""
    import numpy as np
    import pandas as pd

    dtype = values.dtype
    if isinstance(dtype, pd.CategoricalDtype) and _sorted_text(dtype.categories):
        return values
    if isinstance(dtype, pd.CategoricalDtype):  # codes over the few categories, not the rows
        cats = pd.Index(np.asarray(dtype.categories, dtype=object), dtype="str")
        order = np.argsort(np.asarray(cats, dtype=object), kind="stable")
        new = np.empty(len(order), dtype=np.int64)
        new[order] = np.arange(len(order))
        codes = values.cat.codes.to_numpy()
        remapped = np.where(codes >= 0, new[np.maximum(codes, 0)], -1)
        cat = pd.Categorical.from_codes(remapped, categories=cats[order])
        return pd.Series(cat, index=values.index, name=values.name)
    codes, uniques = pd.factorize(values, sort=True)
    cat = pd.Categorical.from_codes(codes, categories=pd.Index(np.asarray(uniques, dtype=object), dtype="str"))
    return pd.Series(cat, index=values.index, name=values.name)


def _sorted_text(categories: "pd.Index") -> bool:
    return categories.dtype == "str" and categories.is_monotonic_increasing


def text_codes(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes of ``values`` in text order and the names they stand for (``names[code]``):
    equal codes, equal text; a smaller code, an earlier text. From the categories when ``values``
    is such a categorical (no string is touched), else from one sorted factorization."""
    import numpy as np
    import pandas as pd

    if isinstance(values.dtype, pd.CategoricalDtype) and _sorted_text(values.dtype.categories):
        return values.cat.codes.to_numpy().astype(np.int64), np.asarray(values.dtype.categories, dtype=object)
    codes, uniques = pd.factorize(values.astype("str"), sort=True)
    return codes.astype(np.int64), np.asarray(uniques, dtype=object)


def radix_key(cols: list[np.ndarray]) -> np.ndarray | None:
    """Rows of integer columns (codes, indices) as one int64 key: each column shifted to start at
    0 (a missing name's code is -1), then mixed radix over their ranges. Equal keys, equal rows;
    ``None`` when the key would not fit in 62 bits (compare the columns themselves then)."""
    import numpy as np

    cols = [c - c.min() for c in cols]
    sizes = [int(c.max()) + 1 for c in cols]
    if np.prod([float(k) for k in sizes]) >= 2.0 ** 62:
        return None
    key = cols[0]
    for c, k in zip(cols[1:], sizes[1:]):
        key = key * k + c
    return key


def repeats(key: np.ndarray) -> np.ndarray:
    """Which rows have a key an earlier row has (``pd.Series(key).duplicated()``), from one
    stable sort instead of hashing every row."""
    import numpy as np

    order = np.argsort(key, kind="stable")  # equal keys in row order: all but the first repeat it
    dup = np.zeros(len(key), dtype=bool)
    dup[order[1:][key[order[1:]] == key[order[:-1]]]] = True
    return dup


__all__ = ["TEXT_COLUMNS", "radix_key", "repeats", "sorted_categories", "text_codes"]
