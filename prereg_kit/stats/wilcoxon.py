"""Wilcoxon signed-rank test of paired differences, the Hodges–Lehmann estimate and its interval,
and the signed-rank TOST: a robust companion of the paired t for the few, non-normal seeds of a
contrast (Hollander, Wolfe & Chicken 2014, §3.1–3.3).

The rules are those of R's ``wilcox.test(d, conf.int = TRUE, correct = TRUE)`` (R 4.2,
``stats:::wilcox.test.default``), not scipy's defaults:

- **Zeros** are dropped before ranking (Wilcoxon's rule; scipy's ``zero_method="wilcox"``) and
  n counts the non-zero differences; the estimate and interval are computed from the non-zero
  differences too.
- **p** is exact when n < 50 and there are neither ties nor zeros; otherwise it is normal with
  the tie correction and the continuity correction (scipy 1.17's default switches the
  correction off, is exact up to n = 50, and with ties or zeros at n ≤ 13 runs a permutation
  test, which moves p by up to 0.18 with zeros).
- **Estimate and interval**: without ties or zeros, order statistics of the Walsh averages (the
  Hodges–Lehmann estimate and the exact signed-rank interval, R's exact branch); with ties or
  zeros, R's asymptotic inversion: the shifts μ at which the normal statistic of ``d − μ`` crosses
  0 (the estimate, no continuity correction) or the normal quantiles (the interval, with it),
  found by Brent's root finder as R's ``uniroot`` runs it (tolerance ``tol.root = 1e-4``).
- **Where it is not R**: from n = 50 without ties or zeros R inverts the normal approximation
  too; the kit keeps the exact Hodges–Lehmann estimate and Walsh interval, selected in
  O(n log n) (:mod:`prereg_kit.stats.walsh`). With no non-zero difference the estimate is 0
  (R: NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from ._checks import (
    Result,
    check_alpha,
    check_alternative,
    check_confidence,
    deprecated,
    equivalence_bounds,
    paired_differences,
)
from .tdist import norm_cdf, norm_isf, norm_ppf, norm_sf
from .walsh import walsh_averages, walsh_median, walsh_order_statistic  # noqa: F401  (walsh_averages: API)

#: Largest number of non-zero differences with an exact p-value (R's ``wilcox.test``: n < 50).
EXACT_MAX_N = 49
#: Largest n whose Walsh interval uses exact signed-rank quantiles (above it: the normal quantile).
EXACT_CI_MAX_N = 200
#: R's ``tol.root``: the absolute tolerance of the root finder in the asymptotic inversion.
TOL_ROOT = 1e-4
#: R's ``uniroot`` iteration limit.
MAX_ITER = 1000


@dataclass(slots=True, frozen=True)
class WilcoxonPaired(Result):
    """Result of :func:`wilcoxon_paired`.

    ``statistic`` is ``T+`` (the sum of the ranks of the positive differences, zeros dropped);
    ``exact`` says whether ``p`` comes from the exact null distribution (else the normal
    approximation, with ``z``). ``hl`` is the estimate and ``ci`` its interval (one-sided for a
    one-sided ``alternative``); ``ci_level`` is the confidence the interval attains: exactly, for
    Walsh order statistics (at least ``confidence``, less only where n is too small to reach
    it), or R's reduced level where the normal inversion cannot reach ``confidence``.
    ``ci_method`` says how they were found: ``exact`` (Walsh order statistics at exact
    signed-rank quantiles), ``normal`` (the same at the normal quantile, n > 200) or
    ``inversion`` (R's asymptotic inversion, with ties or zeros).
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
    ci_method: str = "exact"


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

    Zeros are dropped (R's rule). Exact when at most :data:`EXACT_MAX_N` non-zero values remain
    and there are neither ties nor zeros; otherwise
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


# --------------------------------------------------------------------------- Walsh averages


def _walsh_rank(n: int, a: float) -> tuple[int, float]:
    """``(k, P(T+ ≤ k−1))``: k the smallest integer with ``P(T+ ≤ k) ≥ a`` under the exact null
    (R's ``qsignrank``; at least 1), or ``⌊n(n+1)/4 − z_{1−a}·σ⌋`` above :data:`EXACT_CI_MAX_N`
    (then the tail is taken as ``a``)."""
    if n <= EXACT_CI_MAX_N:
        cdf = np.cumsum(signed_rank_counts(n)) / 2.0**n
        k = max(1, int(np.searchsorted(cdf, a * (1 - 1e-12), side="left")))
        return k, float(cdf[k - 1])
    sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
    return max(1, math.floor(n * (n + 1) / 4.0 - norm_isf(a) * sd)), a


def walsh_interval(x: np.ndarray, confidence: float, alternative: str = "two-sided") -> tuple[float, float, float]:
    """Distribution-free interval for the centre of symmetry: ``(low, high, level)``.

    With the M = n(n+1)/2 Walsh averages ``w_(1) ≤ … ≤ w_(M)`` and k the smallest integer with
    ``P(T+ ≤ k) ≥ a`` under the exact null (R's ``qsignrank``; at least 1), ``a = (1−c)/2``
    two-sided and ``1−c`` one-sided: ``[w_(k), w_(M−k+1)]``, ``[w_(k), +∞)`` (``greater``) or
    ``(−∞, w_(M−k+1)]`` (``less``), attaining ``level = 1 − 2·P(T+ ≤ k−1)`` (one-sided
    ``1 − P(T+ ≤ k−1)``) — R's ``wilcox.test(conf.int=TRUE)`` without ties or zeros. Above
    :data:`EXACT_CI_MAX_N` k comes from the normal quantile and the level is ``confidence``.
    The order statistics are selected in O(n log n) (:mod:`prereg_kit.stats.walsh`).
    """
    xs = np.sort(np.asarray(x, dtype=float))
    n = xs.size
    m = n * (n + 1) // 2
    two = alternative == "two-sided"
    k, tail = _walsh_rank(n, (1.0 - confidence) / (2.0 if two else 1.0))
    lo = walsh_order_statistic(xs, k) if alternative != "less" else -math.inf
    hi = walsh_order_statistic(xs, m - k + 1) if alternative != "greater" else math.inf
    return float(lo), float(hi), 1.0 - (2.0 if two else 1.0) * tail


# --------------------------------------------------------------------------- R's asymptotic inversion


def _shifted_statistic(xs: np.ndarray, correction: str | None) -> Callable[[float], float]:
    """R's ``W(μ)`` for the sorted non-zero differences ``xs``: the normal signed-rank statistic
    of ``xs − μ`` with the values equal to μ dropped, ties ranked by their average,
    ``(T+ − n_μ(n_μ+1)/4 − c) / √(n_μ(n_μ+1)(2n_μ+1)/24 − Σ(t³−t)/48)``, with ``c`` the
    continuity correction of ``correction`` (``sign(·)·½`` two-sided, ``±½`` one-sided, none
    for None). O(n log n) per call: the sorted ``xs − μ`` splits into the negative and the
    positive values, each sorted by absolute value, and a binary search of one in the other
    ranks them, with the same floating values R ranks.
    """

    def w(mu: float) -> float:
        y = xs - mu
        z0, z1 = int(np.searchsorted(y, 0.0, side="left")), int(np.searchsorted(y, 0.0, side="right"))
        neg = -y[:z0][::-1]  # |negative values|, ascending
        pos = y[z1:]
        nx = neg.size + pos.size
        # the runs of equal positive values: their start and length
        starts_p = np.flatnonzero(np.r_[True, pos[1:] != pos[:-1]]) if pos.size else np.zeros(0, dtype=np.int64)
        len_p = np.diff(np.r_[starts_p, pos.size])
        vals_p = pos[starts_p]
        lt_n = np.searchsorted(neg, vals_p, side="left")
        eq_n = np.searchsorted(neg, vals_p, side="right") - lt_n
        # each run of length t of value v: ranks #{<v} + (t_all + 1)/2, t_all counting equal |negatives|
        twice = len_p * (2 * (lt_n + starts_p) + eq_n + len_p + 1)
        t_plus = float(int(twice.sum())) / 2.0
        ties = len_p + eq_n
        tie_sum = int((ties**3 - ties).sum())
        if neg.size:  # runs of the negatives whose value no positive value shares
            starts_n = np.flatnonzero(np.r_[True, neg[1:] != neg[:-1]])
            len_n = np.diff(np.r_[starts_n, neg.size])
            vals_n = neg[starts_n]
            at = np.searchsorted(vals_p, vals_n)
            shared = (at < vals_p.size) & (vals_p[np.minimum(at, max(vals_p.size - 1, 0))] == vals_n) \
                if vals_p.size else np.zeros(vals_n.size, dtype=bool)
            alone = len_n[~shared]
            tie_sum += int((alone**3 - alone).sum())
        zd = t_plus - nx * (nx + 1) / 4
        sigma = math.sqrt(nx * (nx + 1) * (2 * nx + 1) / 24 - tie_sum / 48)
        c = 0.0 if correction is None else 0.5 if correction == "greater" else -0.5 if correction == "less" \
            else (0.5 if zd > 0 else -0.5 if zd < 0 else 0.0)
        num = zd - c
        if sigma == 0:  # nothing left to rank (R divides by 0: NaN or ±Inf)
            return math.nan if num == 0 else math.copysign(math.inf, num)
        return num / sigma

    return w


def uniroot(f: Callable[[float], float], lower: float, upper: float, f_lower: float, f_upper: float,
            tol: float = TOL_ROOT, max_iter: int = MAX_ITER) -> float:
    """A zero of ``f`` in ``[lower, upper]`` by Brent's method (Brent 1973, ch. 4; the ``zeroin``
    of Forsythe, Malcolm & Moler 1977): inverse quadratic or linear interpolation, bisection when
    it does not shrink the bracket fast enough; stops when half the bracket is within
    ``2ε|b| + tol/2`` or ``f(b) = 0``. Step for step the algorithm of R's ``uniroot`` (its C
    ``R_zeroin2``), so on the same function it returns R's number, to the last bit where ``f``
    agrees. On a step function such as :func:`_shifted_statistic` it returns a point within
    ``tol`` of the jump, or, where ``f`` is 0 on a stretch, the first point of the stretch it
    meets.
    """
    eps = 2.220446049250313e-16
    a, b, fa, fb = lower, upper, f_lower, f_upper
    c, fc = a, fa
    if fa == 0.0:
        return a
    if fb == 0.0:
        return b
    for _ in range(max_iter + 1):
        prev_step = b - a
        if abs(fc) < abs(fb):  # b the best approximation so far
            a, b, c = b, c, b
            fa, fb, fc = fb, fc, fb
        tol_act = 2 * eps * abs(b) + tol / 2
        new_step = (c - b) / 2
        if abs(new_step) <= tol_act or fb == 0.0:
            return b
        if abs(prev_step) >= tol_act and abs(fa) > abs(fb):  # interpolation may be tried
            cb = c - b
            if a == c:  # two distinct points: the secant
                t1 = fb / fa
                p = cb * t1
                q = 1.0 - t1
            else:  # inverse quadratic interpolation
                q, t1, t2 = fa / fc, fb / fc, fb / fa
                p = t2 * (cb * q * (q - t1) - (b - a) * (t1 - 1.0))
                q = (q - 1.0) * (t1 - 1.0) * (t2 - 1.0)
            if p > 0:
                q = -q
            else:
                p = -p
            if p < (0.75 * cb * q - abs(tol_act * q) / 2) and p < abs(prev_step * q / 2):
                new_step = p / q
        if abs(new_step) < tol_act:
            new_step = tol_act if new_step > 0 else -tol_act
        a, fa = b, fb
        b += new_step
        fb = f(b)
        if (fb > 0 and fc > 0) or (fb < 0 and fc < 0):  # keep the root between b and c
            c, fc = a, fa
    return b


def inversion_interval(x: np.ndarray, confidence: float, alternative: str = "two-sided",
                       tol: float = TOL_ROOT) -> tuple[float, float, float, float]:
    """R's asymptotic estimate and interval for the non-zero differences ``x`` (ties or zeros):
    ``(estimate, low, high, level)``, as ``wilcox.test(x, conf.int=TRUE, correct=TRUE)``.

    With ``W(μ)`` of :func:`_shifted_statistic` (non-increasing in μ between the Walsh
    averages): the estimate is the root of ``W(μ) = 0`` without the continuity correction; the
    interval ends solve ``W(μ) = z_{1−α/2}`` and ``W(μ) = z_{α/2}`` (one-sided: ``z_{1−α}``,
    ``z_α``) with it, all by :func:`uniroot` on ``[min x, max x]`` with ``tol``. Where the
    bracket cannot hold a quantile (too few differences), α is doubled until it does and
    ``level = 1 − min(1, α)`` (R's reduced ``conf.level``); at α ≥ 1 the end is the median of
    ``x``. No interval (NaN; ±∞ on a one-sided open side) and level 0 when no non-zero
    difference or only equal ones remain; the estimate is then their common value (0 when none).
    """
    xs = np.sort(np.asarray(x, dtype=float))
    n = xs.size
    inf_lo = -math.inf if alternative == "less" else math.nan
    inf_hi = math.inf if alternative == "greater" else math.nan
    if n == 0:
        return 0.0, inf_lo, inf_hi, 0.0
    mumin, mumax = float(xs[0]), float(xs[-1])
    w = _shifted_statistic(xs, alternative)
    w_min = w(mumin)
    w_max = w(mumax) if math.isfinite(w_min) else math.nan
    if not math.isfinite(w_max):  # every non-zero difference equal: R's midrange, no interval
        return (mumin + mumax) / 2, inf_lo, inf_hi, 0.0
    alpha = 1.0 - confidence

    def root(zq: float) -> float:
        return uniroot(lambda mu: w(mu) - zq, mumin, mumax, w_min - zq, w_max - zq, tol)

    if alternative == "two-sided":
        while w_min - norm_isf(alpha / 2) < 0 or w_max - norm_ppf(alpha / 2) > 0:
            alpha *= 2
    elif alternative == "greater":
        while w_min - norm_isf(alpha) < 0:
            alpha *= 2
    else:
        while w_max - norm_ppf(alpha / 2) > 0:  # R tests α/2 here and solves at α below
            alpha *= 2
    level = 1.0 - min(1.0, alpha) if (alpha >= 1 or 1 - confidence < alpha * 0.75) else confidence
    med = float(np.median(xs))
    if alternative == "two-sided":
        lo, hi = (root(norm_isf(alpha / 2)), root(norm_ppf(alpha / 2))) if alpha < 1 else (med, med)
    elif alternative == "greater":
        lo, hi = (root(norm_isf(alpha)) if alpha < 1 else med), math.inf
    else:
        lo, hi = -math.inf, (root(norm_ppf(alpha)) if alpha < 1 else med)
    w0 = _shifted_statistic(xs, None)  # R estimates with the continuity correction switched off
    estimate = uniroot(w0, mumin, mumax, w0(mumin), w0(mumax), tol)
    return float(estimate), float(lo), float(hi), float(level)


# --------------------------------------------------------------------------- the tests


def _estimate_interval(d: np.ndarray, confidence: float, alternative: str) -> tuple[float, tuple[float, float],
                                                                                    float, str]:
    """``(hl, ci, ci_level, ci_method)`` of :func:`wilcoxon_paired` (module docstring)."""
    nz = np.sort(d[d != 0])
    if nz.size and nz.size == d.size and np.unique(np.abs(nz)).size == nz.size:
        lo, hi, level = walsh_interval(nz, confidence, alternative)
        return walsh_median(nz), (lo, hi), level, "exact" if nz.size <= EXACT_CI_MAX_N else "normal"
    est, lo, hi, level = inversion_interval(nz, confidence, alternative)
    return est, (lo, hi), level, "inversion"


def wilcoxon_paired(diff: Any, confidence: float = 0.95, *, alternative: str = "two-sided") -> WilcoxonPaired:
    """Wilcoxon signed-rank test of paired differences against 0, with the Hodges–Lehmann
    estimate and its interval — R's ``wilcox.test(d, conf.int=TRUE, conf.level=confidence,
    alternative=…)`` (module docstring: the zero and tie rules).

    ``T+`` is the sum of the ranks of ``|d_i|`` over the positive ``d_i`` (zeros dropped, ties
    given average ranks). ``p`` is exact (the subset-sum distribution of ``{1..n}``, see
    :func:`signed_rank_counts`) for fewer than 50 non-zero differences without ties or zeros,
    else from the normal approximation with continuity and tie corrections. Two-sided:
    ``p = min(1, 2·min(P(T+ ≤ t), P(T+ ≥ t)))``.

    Without ties or zeros ``hl`` is the median of the n(n+1)/2 Walsh averages (Hodges & Lehmann
    1963) and ``ci`` the Walsh-average interval of :func:`walsh_interval`, both selected in
    O(n log n) time and O(n) memory. With ties or zeros they are R's asymptotic inversion
    (:func:`inversion_interval`), each evaluation of the statistic O(n log n). ``ci`` is
    two-sided at ``confidence``, or one-sided for a one-sided ``alternative``; ``ci_level`` is
    the level it attains. NaN differences are dropped (``n_dropped``).
    """
    alternative = check_alternative(alternative)
    confidence = check_confidence(confidence)
    d, n_dropped = paired_differences(diff)
    t_plus, p, z, exact, n_zero = _signed_rank_p(d, alternative)
    hl, ci, level, how = _estimate_interval(d, confidence, alternative)
    return WilcoxonPaired(n=d.size, n_dropped=n_dropped, n_zero=n_zero, statistic=t_plus, p=p, z=z, exact=exact,
                          hl=hl, ci=ci, ci_level=level, confidence=confidence, alternative=alternative,
                          ci_method=how)


def wilcoxon_tost(diff: Any, *bounds: float | None, margin: Any = None, alpha: float = 0.05) -> WilcoxonTost:
    """Signed-rank equivalence test: two one-sided Wilcoxon tests at the bounds.

    ``margin=m`` means the bounds ``(−m, +m)``; a ``(low, high)`` pair gives asymmetric bounds.
    ``p_lower`` tests H0: centre ≤ ``low`` (signed-rank test of ``d − low``, ``greater``),
    ``p_upper`` tests H0: centre ≥ ``high`` (``d − high``, ``less``); ``p = max`` and
    ``equivalent`` is ``p < α`` (TOSTER's ``wilcox_TOST``). ``hl`` and ``ci`` are those of
    :func:`wilcoxon_paired` at confidence 1−2α (two-sided). The bounds given as positional
    arguments (``low, high``, or a margin alone) are deprecated, kept for one release.
    """
    if bounds:
        if margin is not None or len(bounds) > 2:
            raise TypeError("wilcoxon_tost takes the bounds as margin=m or margin=(low, high)")
        deprecated("wilcoxon_tost(diff, low, high)", "wilcoxon_tost(diff, margin=...)")
        margin = bounds[0] if len(bounds) == 1 or bounds[1] is None else tuple(bounds)
    alpha = check_alpha(alpha)
    low, high = equivalence_bounds(margin)
    d, n_dropped = paired_differences(diff)
    p_lower = _signed_rank_p(d - low, "greater")[1]
    p_upper = _signed_rank_p(d - high, "less")[1]
    hl, ci, _, _ = _estimate_interval(d, 1.0 - 2.0 * alpha, "two-sided")
    p = max(p_lower, p_upper)
    return WilcoxonTost(n=d.size, n_dropped=n_dropped, hl=hl, low=low, high=high,
                        p_lower=p_lower, p_upper=p_upper, p=p, ci=ci, alpha=alpha, equivalent=bool(p < alpha))
