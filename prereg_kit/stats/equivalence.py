"""Equivalence (TOST) and non-inferiority on paired differences (paper §2.3, §C.1).

The paper: "two one-sided tests for equivalence within ±0.02 (±0.01 in S28 and S31–S33)";
"Non-inferiority means that the lower bound of the 90% interval exceeds −0.02."
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ._checks import Result, check_alpha, equivalence_bounds, paired_differences, positive_margin, safe_ratio
from .paired import spread
from .tdist import t_cdf, t_ppf, t_sf


@dataclass(slots=True, frozen=True)
class Tost(Result):
    """Result of :func:`tost_paired`; ``ci_low, ci_high`` is the 1−2α interval."""

    n: int
    n_dropped: int
    mean: float
    sd: float
    se: float
    df: int
    low: float
    high: float
    t_lower: float
    t_upper: float
    p_lower: float
    p_upper: float
    p: float
    ci_low: float
    ci_high: float
    alpha: float
    equivalent: bool
    zero_sd: bool


@dataclass(slots=True, frozen=True)
class NonInferiority(Result):
    """Result of :func:`noninferiority`; ``lower`` is the lower end of the 1−2α interval."""

    n: int
    n_dropped: int
    mean: float
    sd: float
    se: float
    df: int
    margin: float
    t: float
    p: float
    lower: float
    alpha: float
    holds: bool
    zero_sd: bool


def two_one_sided(mean: float, se: float, df: float, low: float, high: float,
                  alpha: float) -> tuple[float, float, float, float, float]:
    """The two one-sided t-tests of a mean with standard error ``se`` on ``df`` degrees of freedom:
    ``(p_lower, p_upper, p, ci_low, ci_high)`` with ``p_lower = P(T ≥ (mean − low)/se)`` (H0: μ ≤ low),
    ``p_upper = P(T ≤ (mean − high)/se)`` (H0: μ ≥ high), ``p`` their maximum and the 1−2α
    interval ``mean ± t_{1−α, df}·se`` (shared by the paired and the Welch TOST)."""
    p_lower = t_sf(safe_ratio(mean - low, se), df)
    p_upper = t_cdf(safe_ratio(mean - high, se), df)
    half = t_ppf(1.0 - alpha, df) * se
    return p_lower, p_upper, max(p_lower, p_upper), mean - half, mean + half


def tost_from_stats(n: int, mean: float, sd: float, *, margin: Any, alpha: float = 0.05,
                    n_dropped: int = 0) -> Tost:
    """:func:`tost_paired` from ``n``, the mean and the SD of the differences."""
    alpha = check_alpha(alpha)
    low, high = equivalence_bounds(margin)
    if n < 2:
        raise ValueError(f"need at least 2 pairs, got {n}")
    df = n - 1
    se = sd / math.sqrt(n)
    p_lower, p_upper, p, ci_low, ci_high = two_one_sided(mean, se, df, low, high, alpha)
    return Tost(n=n, n_dropped=n_dropped, mean=mean, sd=sd, se=se, df=df, low=low, high=high,
                t_lower=safe_ratio(mean - low, se), t_upper=safe_ratio(mean - high, se), p_lower=p_lower,
                p_upper=p_upper, p=p, ci_low=ci_low, ci_high=ci_high, alpha=alpha, equivalent=bool(p < alpha),
                zero_sd=bool(sd == 0))


def tost_paired(treatment: Any, control: Any = None, *, margin: Any, alpha: float = 0.05) -> Tost:
    """Two one-sided paired t-tests for equivalence within ``(low, high)``.

    ``margin=m`` means the bounds ``(−m, +m)``; a ``(low, high)`` pair gives asymmetric bounds.
    With ``se = s_d/√n`` and ``df = n−1``:
    ``p_lower = P(T ≥ (d̄ − low)/se)`` (H0: μ ≤ low), ``p_upper = P(T ≤ (d̄ − high)/se)``
    (H0: μ ≥ high), ``p = max(p_lower, p_upper)``; ``equivalent`` is ``p < α``, which is the
    same as the 1−2α interval ``d̄ ± t_{1−α, n−1}·se`` lying inside the bounds (paper §C.1:
    equivalence at .05 ⇔ the 90% interval inside ±margin).
    """
    alpha = check_alpha(alpha)
    equivalence_bounds(margin)
    d, n_dropped = paired_differences(treatment, control)
    return tost_from_stats(d.size, float(d.mean()), spread(d), margin=margin, alpha=alpha,
                           n_dropped=n_dropped)


def noninferiority_from_stats(n: int, mean: float, sd: float, *, margin: float, alpha: float = 0.05,
                              n_dropped: int = 0) -> NonInferiority:
    """:func:`noninferiority` from ``n``, the mean and the SD of the differences."""
    alpha = check_alpha(alpha)
    m = positive_margin(margin)
    if n < 2:
        raise ValueError(f"need at least 2 pairs, got {n}")
    df = n - 1
    se = sd / math.sqrt(n)
    t = safe_ratio(mean + m, se)
    p = t_sf(t, df)
    lower = mean - t_ppf(1.0 - alpha, df) * se
    return NonInferiority(n=n, n_dropped=n_dropped, mean=mean, sd=sd, se=se, df=df, margin=m, t=t, p=p,
                          lower=lower, alpha=alpha, holds=bool(lower > -m), zero_sd=bool(sd == 0))


def noninferiority(treatment: Any, control: Any = None, *, margin: float, alpha: float = 0.05) -> NonInferiority:
    """One-sided paired t-test of H0: μ ≤ −margin (the paper's "NI at −0.02", §C.1).

    ``t = (d̄ + margin)/se`` on ``n−1`` df, ``p = P(T ≥ t)``; ``lower = d̄ − t_{1−α, n−1}·se``
    is the lower end of the 1−2α (90% at α=.05) interval, and ``holds`` is ``lower > −margin``
    — the paper's rule, equivalent to ``p < α``.
    """
    alpha = check_alpha(alpha)
    positive_margin(margin)
    d, n_dropped = paired_differences(treatment, control)
    return noninferiority_from_stats(d.size, float(d.mean()), spread(d), margin=margin, alpha=alpha,
                                     n_dropped=n_dropped)
