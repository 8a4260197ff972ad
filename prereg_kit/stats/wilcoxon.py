"""Wilcoxon signed-rank test of paired differences, the Hodges–Lehmann estimate and its interval,
and the signed-rank TOST: a robust companion of the paired t for the few, non-normal seeds of a
contrast (Hollander, Wolfe & Chicken 2014, §3.1–3.3)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ._checks import (
    Result,
    check_alpha,
    check_alternative,
    check_confidence,
    equivalence_bounds,
    paired_differences,
)
from .tdist import norm_cdf, norm_ppf, norm_sf

#: Largest number of non-zero differences with an exact p-value (scipy's ``method="auto"`` rule).
EXACT_MAX_N = 50
#: Largest n whose interval uses exact signed-rank quantiles (above it: the normal quantile).
EXACT_CI_MAX_N = 200


@dataclass(slots=True, frozen=True)
class WilcoxonPaired(Result):
    """Result of :func:`wilcoxon_paired`.

    ``statistic`` is ``T+`` (the sum of the ranks of the positive differences, zeros dropped);
    ``exact`` says whether ``p`` comes from the exact null distribution (else the normal
    approximation, with ``z``). ``ci`` is the Walsh-average interval around ``hl`` and
    ``ci_level`` the confidence it attains exactly (at least ``confidence``).
    """

    n: int
    n_dropped: int
    n_zero: int
    statistic: float
    p: float
    z: float | None
    exact: bool
    hl: float
    ci: tuple[float, float]
    ci_level: float
    confidence: float
    alternative: str


@dataclass(slots=True, frozen=True)
class WilcoxonTost(Result):
    """Result of :func:`wilcoxon_tost`: two one-sided signed-rank tests at the bounds."""

    n: int
    n_dropped: int
    hl: float
    low: float
    high: float
    p_lower: float
    p_upper: float
    p: float
    ci: tuple[float, float]
    alpha: float
    equivalent: bool


@lru_cache(maxsize=64)
def signed_rank_counts(n: int) -> np.ndarray:
    """Exact null counts of ``T+`` for n untied non-zero differences: entry k counts the subsets
    of ``{1..n}`` whose sum is k (the coefficients of ``∏_{j≤n} (1 + x^j)``); they sum to 2^n."""
    counts = np.zeros(n * (n + 1) // 2 + 1, dtype=np.float64)  # exact integers below 2^53
    counts[0] = 1.0
    for j in range(1, n + 1):
        counts[j:] = counts[j:] + counts[:-j].copy()
    counts.setflags(write=False)
    return counts


def _signed_rank_p(x: np.ndarray, alternative: str) -> tuple[float, float, float | None, bool, int]:
    """``(T+, p, z, exact, n_zero)`` of the signed-rank test of ``x`` against 0.

    Zeros are dropped (Wilcoxon's rule, scipy's ``zero_method="wilcox"``). Exact when at most
    :data:`EXACT_MAX_N` non-zero values remain and there are neither ties nor zeros; otherwise
    ``z = (T+ − n(n+1)/4 − c) / √(n(n+1)(2n+1)/24 − Σ(t³−t)/48)`` with the continuity correction
    ``c = ±0.5`` toward the mean and the tie correction over tie groups of size t.
    """
    nz = x[x != 0]
    n_zero = int(x.size - nz.size)
    n = nz.size
    if n == 0:
        return 0.0, 1.0, None, False, n_zero
    from scipy.stats import rankdata  # only here: importing scipy.stats takes over a second

    ranks = rankdata(np.abs(nz))
    t_plus = float(ranks[nz > 0].sum())
    _, tie_sizes = np.unique(ranks, return_counts=True)
    ties = bool((tie_sizes > 1).any())
    if n <= EXACT_MAX_N and not ties and n_zero == 0:
        counts = signed_rank_counts(n)
        total = 2.0**n
        k = round(t_plus)
        p_less = counts[: k + 1].sum() / total
        p_greater = counts[k:].sum() / total
        p = {"greater": p_greater, "less": p_less}.get(alternative, min(1.0, 2.0 * min(p_less, p_greater)))
        return t_plus, float(p), None, True, n_zero
    mean = n * (n + 1) / 4.0
    var = n * (n + 1) * (2 * n + 1) / 24.0 - float((tie_sizes**3 - tie_sizes).sum()) / 48.0
    diff = t_plus - mean
    if alternative == "greater":
        c = 0.5
    elif alternative == "less":
        c = -0.5
    else:
        c = math.copysign(0.5, diff) if diff != 0 else 0.0
    z = (diff - c) / math.sqrt(var)
    if alternative == "greater":
        p = norm_sf(z)
    elif alternative == "less":
        p = norm_cdf(z)
    else:
        p = min(1.0, 2.0 * norm_sf(abs(z)))
    return t_plus, p, float(z), False, n_zero


def walsh_averages(x: np.ndarray) -> np.ndarray:
    """The n(n+1)/2 Walsh averages ``(x_i + x_j)/2`` for ``i ≤ j``, sorted."""
    i, j = np.triu_indices(x.size)
    return np.sort((x[i] + x[j]) / 2.0)


def walsh_interval(x: np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Distribution-free interval for the centre of symmetry: ``(w_(k), w_(M−k+1), level)``.

    With the M = n(n+1)/2 sorted Walsh averages and k the smallest integer with
    ``P(T+ ≤ k) ≥ (1−confidence)/2`` under the exact null (R's ``qsignrank``; at least 1), the
    interval ``[w_(k), w_(M−k+1)]`` attains ``level = 1 − 2·P(T+ ≤ k−1)`` (R's ``wilcox.test``,
    ``conf.int=TRUE``). Above :data:`EXACT_CI_MAX_N` k comes from the normal quantile.
    """
    n = x.size
    w = walsh_averages(x)
    m = w.size
    a = (1.0 - confidence) / 2.0
    if n <= EXACT_CI_MAX_N:
        cdf = np.cumsum(signed_rank_counts(n)) / 2.0**n
        k = max(1, int(np.searchsorted(cdf, a * (1 - 1e-12), side="left")))
        level = 1.0 - 2.0 * float(cdf[k - 1])
    else:
        sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
        k = max(1, math.floor(n * (n + 1) / 4.0 - norm_ppf(1 - a) * sd))
        level = confidence
    return float(w[k - 1]), float(w[m - k]), level


def wilcoxon_paired(diff: Any, confidence: float = 0.95, *, alternative: str = "two-sided") -> WilcoxonPaired:
    """Wilcoxon signed-rank test of paired differences against 0, with the Hodges–Lehmann
    estimate and its interval.

    ``T+`` is the sum of the ranks of ``|d_i|`` over the positive ``d_i`` (zeros dropped, ties
    given average ranks). ``p`` is exact (the subset-sum distribution of ``{1..n}``, see
    :func:`signed_rank_counts`) for up to 50 non-zero differences without ties or zeros, else
    from the normal approximation with continuity and tie corrections — the rules of
    ``scipy.stats.wilcoxon``. Two-sided: ``p = min(1, 2·min(P(T+ ≤ t), P(T+ ≥ t)))``.
    ``hl`` is the median of the Walsh averages (Hodges & Lehmann 1963) and ``ci`` the
    Walsh-average interval of :func:`walsh_interval` (two-sided, at ``confidence``).
    NaN differences are dropped (``n_dropped``).
    """
    alternative = check_alternative(alternative)
    confidence = check_confidence(confidence)
    d, n_dropped = paired_differences(diff)
    t_plus, p, z, exact, n_zero = _signed_rank_p(d, alternative)
    lo, hi, level = walsh_interval(d, confidence)
    return WilcoxonPaired(n=d.size, n_dropped=n_dropped, n_zero=n_zero, statistic=t_plus, p=p, z=z, exact=exact,
                          hl=float(np.median(walsh_averages(d))), ci=(lo, hi), ci_level=level,
                          confidence=confidence, alternative=alternative)


def wilcoxon_tost(diff: Any, low: float, high: float | None = None, *, alpha: float = 0.05) -> WilcoxonTost:
    """Signed-rank equivalence test: two one-sided Wilcoxon tests at the bounds.

    ``p_lower`` tests H0: centre ≤ ``low`` (signed-rank test of ``d − low``, ``greater``),
    ``p_upper`` tests H0: centre ≥ ``high`` (``d − high``, ``less``); ``p = max`` and
    ``equivalent`` is ``p < α`` (TOSTER's ``wilcox_TOST``). ``high=None`` takes ``low`` as a
    margin m and uses ``(−m, +m)``. ``ci`` is the 1−2α Walsh-average interval around ``hl``.
    """
    alpha = check_alpha(alpha)
    low, high = equivalence_bounds(low if high is None else (low, high))
    d, n_dropped = paired_differences(diff)
    p_lower = _signed_rank_p(d - low, "greater")[1]
    p_upper = _signed_rank_p(d - high, "less")[1]
    lo, hi, _ = walsh_interval(d, 1.0 - 2.0 * alpha)
    p = max(p_lower, p_upper)
    return WilcoxonTost(n=d.size, n_dropped=n_dropped, hl=float(np.median(walsh_averages(d))), low=low, high=high,
                        p_lower=p_lower, p_upper=p_upper, p=p, ci=(lo, hi), alpha=alpha, equivalent=bool(p < alpha))
