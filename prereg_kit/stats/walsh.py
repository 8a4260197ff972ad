"""Order statistics of the Walsh averages ``(x_i + x_j)/2``, ``i ≤ j``, without building them.

The Hodges–Lehmann estimate and its distribution-free interval are order statistics of the
M = n(n+1)/2 Walsh averages (Hodges & Lehmann 1963; Hollander, Wolfe & Chicken 2014, §3.2–3.3).
Built and sorted, they take O(n² log n) time and O(n²) memory (274 s and about 1.6 GB at
n = 20,000). :func:`walsh_order_statistics` selects the k-th without them, in the manner of
Monahan (1984, ACM Algorithm 616) and of Floyd & Rivest (1975): with x sorted, the averages form
a matrix whose rows ``x_i + x_j`` (j ≥ i) are sorted, so the number of averages at or below a
value is a sum of per-row boundaries (one vectorized binary search, O(n log n)). A sample of
about n candidates gives two pivots that bracket the k-th one closely; counting at both keeps
only the averages between them (a factor ~√n fewer per pass), and once at most
:data:`MATERIALIZE` remain they are built and partitioned. Expected O(n log n) time, O(n) memory.

Comparisons use the floating sums ``fl(x_i + x_j)``, which are non-decreasing along each row,
and the value returned is ``fl(x_i + x_j)/2``: the result is bit-for-bit the k-th element of
``np.sort((x[i] + x[j]) / 2)`` (:func:`walsh_averages`).
"""

from __future__ import annotations

import math

import numpy as np

#: Candidates built and partitioned directly once at most this many remain (times n: O(n) memory).
MATERIALIZE = 4
#: Below this many averages the selection builds them all (a few MB at most).
SMALL = 1 << 18
#: Seed of the pivot samples: the result never depends on it, only the number of passes.
PIVOT_SEED = 20_240_616


def walsh_averages(x: np.ndarray) -> np.ndarray:
    """The n(n+1)/2 Walsh averages ``(x_i + x_j)/2`` for ``i ≤ j``, sorted (O(n²) memory: the
    exhaustive reference for small n)."""
    x = np.asarray(x, dtype=float)
    i, j = np.triu_indices(x.size)
    return np.sort((x[i] + x[j]) / 2.0)


def _boundary(xs: np.ndarray, t: float, strict: bool) -> np.ndarray:
    """Per row i, the number of j (all j, not only j ≥ i) with ``fl(xs_i + xs_j) < t`` (``strict``)
    or ``≤ t``: a binary search for ``t − xs_i``, then corrected where rounding put it a value off."""
    n = xs.size
    side = "left" if strict else "right"
    b = np.searchsorted(xs, t - xs, side=side)

    def inside(s: np.ndarray) -> np.ndarray:
        return s < t if strict else s <= t

    while True:
        right = b < n
        right[right] = inside(xs[right] + xs[b[right]])  # the next value still belongs to the prefix
        left = b > 0
        left[left] = ~inside(xs[left] + xs[b[left] - 1])  # the last value of the prefix does not
        if not (right.any() or left.any()):
            return b
        # jump over a run of equal values at once: equal values give equal sums
        b[right] = np.searchsorted(xs, xs[b[right]], side="right")
        b[left] = np.searchsorted(xs, xs[b[left] - 1], side="left")


def _count(xs: np.ndarray, t: float, strict: bool) -> tuple[np.ndarray, int]:
    """Row boundaries (columns j ≥ i) and the number of Walsh sums ``< t`` or ``≤ t``."""
    rows = np.arange(xs.size)
    b = np.maximum(_boundary(xs, t, strict), rows)
    return b, int((b - rows).sum())


def _of_candidates(xs: np.ndarray, lo: np.ndarray, hi: np.ndarray, ranks: list[int]) -> list[float]:
    """The sums of the given 0-based ranks among the candidate columns ``lo_i ≤ j < hi_i``."""
    sizes = hi - lo
    rows = np.repeat(np.arange(xs.size), sizes)
    start = np.cumsum(sizes) - sizes
    cols = lo[rows] + (np.arange(rows.size) - start[rows])
    sums = np.partition(xs[rows] + xs[cols], ranks)
    return [float(sums[r]) for r in ranks]


def walsh_order_statistics(xs: np.ndarray, ks: list[int]) -> list[float]:
    """The k-th smallest (1-based) Walsh averages of the **sorted** vector ``xs`` for each k of
    ``ks``, which should lie close together (the two middle ones of a median): one selection
    brackets them all. Equal to ``walsh_averages(xs)[k − 1]``; expected O(n log n) time and O(n)
    memory (module docstring).
    """
    n = xs.size
    m = n * (n + 1) // 2
    if not all(1 <= k <= m for k in ks):
        raise ValueError(f"every k must be in 1..{m}, got {ks}")
    k_lo, k_hi = min(ks), max(ks)
    rows = np.arange(n)
    lo, hi = rows.copy(), np.full(n, n)
    below = 0  # sums before the candidates (all smaller than, or equal to, every candidate)
    rng = np.random.default_rng(PIVOT_SEED)
    stalled = False
    while True:
        sizes = hi - lo
        total = int(sizes.sum())
        if total <= max(SMALL, MATERIALIZE * n):
            return [v / 2.0 for v in _of_candidates(xs, lo, hi, [k - below - 1 for k in ks])]
        # Two pivots around the targets' place in a sample of candidates (±3 sampling SDs).
        size = max(1024, n)
        pick = rng.integers(0, total, size=size)
        ends = np.cumsum(sizes)
        row = np.searchsorted(ends, pick, side="right")
        col = lo[row] + pick - (ends[row] - sizes[row])
        sample = np.sort(xs[row] + xs[col])
        spread = 0.0 if stalled else 3.0 * math.sqrt(size)
        a = float(sample[min(size - 1, max(0, int((k_lo - below - 0.5) / total * size - spread)))])
        b = float(sample[min(size - 1, max(0, int((k_hi - below - 0.5) / total * size + spread)))])
        lt_rows, lt = _count(xs, a, strict=True)
        if k_hi <= lt:  # below the lower pivot
            hi = np.minimum(hi, lt_rows)
        elif k_lo <= lt:  # the pivot falls between the targets (rare): one at a time
            return [walsh_order_statistics(xs, [k])[0] for k in ks]
        else:
            le_rows, le = _count(xs, b, strict=False)
            if k_lo > le:  # above the upper pivot
                lo, below = np.maximum(lo, le_rows), le
            elif k_hi > le:
                return [walsh_order_statistics(xs, [k])[0] for k in ks]
            elif a == b:  # the pivot itself
                return [a / 2.0 for _ in ks]
            else:
                lo, hi, below = np.maximum(lo, lt_rows), np.minimum(hi, le_rows), lt
        # With few distinct values both pivots can sit at the candidates' ends and keep them all;
        # one pivot then removes at least the candidates equal to it.
        stalled = int((hi - lo).sum()) == total


def walsh_order_statistic(xs: np.ndarray, k: int) -> float:
    """The k-th smallest (1-based) Walsh average of the **sorted** vector ``xs``
    (:func:`walsh_order_statistics`)."""
    return walsh_order_statistics(xs, [k])[0]


def walsh_median(xs: np.ndarray) -> float:
    """The median of the Walsh averages of the sorted ``xs`` (the mean of the two middle ones
    when their number is even), as ``np.median(walsh_averages(xs))``."""
    m = xs.size * (xs.size + 1) // 2
    if m % 2:
        return walsh_order_statistic(xs, (m + 1) // 2)
    return float(np.mean(walsh_order_statistics(xs, [m // 2, m // 2 + 1])))
