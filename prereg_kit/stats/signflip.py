"""The sign-flip permutation test of the mean paired difference and its interval by test
inversion: exact for few seeds whatever the shape of the differences (Fisher 1935; Good 2005, §3).

Under H0 (differences symmetric about ``null``) each ``x_i = d_i − null`` is as likely to have
come with the other sign. Flipping the signs of a subset S changes ``Σx`` to ``Σx − 2·Σ_S x``, so
a flipped sum reaches the observed one exactly when ``Σ_S x ≤ 0``: every p-value is a share of
subset sums, and the interval ends are order statistics of subset means (Hartigan 1969).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._checks import (
    Result,
    check_alternative,
    check_confidence,
    make_rng,
    paired_differences,
    positive_int,
)

#: Largest n enumerated exactly (2^20 ≈ 10^6 sign patterns).
EXACT_MAX_N = 20
#: Monte-Carlo sign patterns drawn above it when ``n_resamples`` is not given.
DEFAULT_RESAMPLES = 100_000


@dataclass(slots=True, frozen=True)
class SignFlip(Result):
    """Result of :func:`sign_flip_test`; ``n_resamples`` is 2^n when ``exact``."""

    n: int
    n_dropped: int
    mean: float
    null: float
    p: float
    alternative: str
    exact: bool
    n_resamples: int


@dataclass(slots=True, frozen=True)
class SignFlipInterval(Result):
    """Result of :func:`sign_flip_ci`: the shifts μ the two-sided test does not reject."""

    n: int
    n_dropped: int
    mean: float
    ci_low: float
    ci_high: float
    confidence: float
    exact: bool
    n_resamples: int


def subset_sums(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sums and sizes of all 2^n subsets of ``x`` (the empty one first), built one item at a time."""
    sums, sizes = np.zeros(1), np.zeros(1, dtype=np.int64)
    for v in x:
        sums = np.concatenate([sums, sums + v])
        sizes = np.concatenate([sizes, sizes + 1])
    return sums, sizes


def _random_subsets(x: np.ndarray, n_resamples: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Sums and sizes of ``n_resamples`` random subsets (each item in with probability ½)."""
    sums, sizes = np.empty(n_resamples), np.empty(n_resamples, dtype=np.int64)
    chunk = max(1, (1 << 20) // x.size)
    for start in range(0, n_resamples, chunk):
        stop = min(n_resamples, start + chunk)
        mask = rng.integers(0, 2, size=(stop - start, x.size)).astype(bool)
        sums[start:stop] = mask @ x
        sizes[start:stop] = mask.sum(axis=1)
    return sums, sizes


def _subsets(x: np.ndarray, n_resamples: int | None, seed: Any) -> tuple[np.ndarray, np.ndarray, bool, int]:
    rng = make_rng(seed)  # validated even when enumeration leaves it unused
    if x.size <= EXACT_MAX_N:
        sums, sizes = subset_sums(x)
        return sums, sizes, True, sums.size
    b = DEFAULT_RESAMPLES if n_resamples is None else positive_int(n_resamples, "n_resamples")
    sums, sizes = _random_subsets(x, b, rng)
    return sums, sizes, False, b


def sign_flip_test(diff: Any, null: float = 0.0, alternative: str = "two-sided", n_resamples: int | None = None,
                   seed: Any = 0) -> SignFlip:
    """Sign-flip permutation test of the mean paired difference against ``null``.

    With ``x = d − null``: ``P_greater`` is the share of sign patterns whose sum is at least the
    observed ``Σx`` (the patterns flipping a subset S with ``Σ_S x ≤ 0``, the identity included)
    and ``P_less`` the share at most it; ``greater``/``less`` report those and ``two-sided``
    ``min(1, 2·min)``, the definitions of ``scipy.stats.permutation_test``. Exact over all 2^n
    patterns for n ≤ 20; above, ``n_resamples`` seeded random patterns (default 100,000) with
    ``p = (count + 1)/(n_resamples + 1)``. Sums equal up to float residue count as equal.
    """
    alternative = check_alternative(alternative)
    d, n_dropped = paired_differences(diff)
    x = d - float(null)
    sums, _, exact, b = _subsets(x, n_resamples, seed)
    tol = 1e-9 * float(np.abs(x).sum())
    add = 0 if exact else 1
    p_greater = (int((sums <= tol).sum()) + add) / (sums.size + add)
    p_less = (int((sums >= -tol).sum()) + add) / (sums.size + add)
    p = {"greater": p_greater, "less": p_less}.get(alternative, min(1.0, 2.0 * min(p_greater, p_less)))
    return SignFlip(n=d.size, n_dropped=n_dropped, mean=float(d.mean()), null=float(null), p=float(p),
                    alternative=alternative, exact=exact, n_resamples=b)


def sign_flip_ci(diff: Any, confidence: float = 0.95, *, n_resamples: int | None = None,
                 seed: Any = 0) -> SignFlipInterval:
    """Interval for the centre of the differences: the shifts μ that the two-sided
    :func:`sign_flip_test` of ``d`` against ``μ`` does not reject at ``1 − confidence``.

    Flipping a non-empty subset S reaches the observed sum of ``d − μ`` exactly when the subset
    mean ``d̄_S ≤ μ``, so ``P_greater(μ) = (1 + #{S ≠ ∅: d̄_S ≤ μ})/N`` over the N patterns. With the
    m non-empty subset means sorted, the test does not reject (``2·P > 1 − confidence``) for
    ``d̄_(j) ≤ μ ≤ d̄_(m+1−j)``, j the smallest count with ``2(1 + j)/N > 1 − confidence`` — an
    exact interval for n ≤ 20 (infinite when n is too small to reject at all), and with the same
    seeded random patterns as the test above.
    """
    confidence = check_confidence(confidence)
    d, n_dropped = paired_differences(diff)
    sums, sizes, exact, b = _subsets(d, n_resamples, seed)
    keep = sizes > 0
    means = np.sort(sums[keep] / sizes[keep])
    total = sums.size if exact else sums.size + 1
    empties = int((~keep).sum()) + (0 if exact else 1)  # patterns that always reach the observed sum
    # smallest j with 2·(empties + j)/total > 1 − confidence
    j = max(0, math.floor((1.0 - confidence) * total / 2.0 - empties + 1e-9) + 1)
    m = means.size
    if j == 0:  # too few patterns to reject at this level: every shift is kept
        lo, hi = -math.inf, math.inf
    elif j - 1 >= m - j:  # a level so low that the two ends cross: the middle subset mean
        lo = hi = float(np.median(means))
    else:
        lo, hi = float(means[j - 1]), float(means[m - j])
    return SignFlipInterval(n=d.size, n_dropped=n_dropped, mean=float(d.mean()), ci_low=lo, ci_high=hi,
                            confidence=confidence, exact=exact, n_resamples=b)
