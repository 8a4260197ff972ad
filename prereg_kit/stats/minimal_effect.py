"""Minimal-effect test of paired differences: the effect lies outside the bounds (the opposite
of TOST; Murphy & Myors 1999, Lakens 2018 §"minimal effect tests", TOSTER ``hypothesis="MET"``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ._checks import (
    Result,
    check_alpha,
    equivalence_bounds,
    paired_differences,
    safe_ratio,
)
from .paired import spread
from .tdist import t_cdf, t_ppf, t_sf


@dataclass(slots=True, frozen=True)
class MinimalEffect(Result):
    """Result of :func:`minimal_effect_test`; ``ci_low, ci_high`` is the 1−2α interval."""

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
    shown: bool
    zero_sd: bool


def minimal_effect_test(diff: Any, low: float, high: float | None = None, *, alpha: float = 0.05) -> MinimalEffect:
    """Two one-sided paired t-tests that the mean difference lies outside ``(low, high)``.

    H0: ``low ≤ μ ≤ high`` against H1: ``μ < low`` or ``μ > high``. With ``se = s_d/√n`` on
    ``n−1`` df: ``p_lower = P(T ≤ (d̄ − low)/se)`` (below the lower bound), ``p_upper =
    P(T ≥ (d̄ − high)/se)`` (above the upper bound), ``p = min(p_lower, p_upper)``; ``shown`` is
    ``p < α``, the same as the 1−2α interval ``d̄ ± t_{1−α}·se`` lying wholly outside the bounds
    (TOSTER's MET). ``high=None`` takes ``low`` as a margin m: bounds ``(−m, +m)``.
    """
    alpha = check_alpha(alpha)
    low, high = equivalence_bounds(low if high is None else (low, high))
    d, n_dropped = paired_differences(diff)
    n, mean, sd = d.size, float(d.mean()), spread(d)
    df = n - 1
    se = sd / math.sqrt(n)
    t_lower, t_upper = safe_ratio(mean - low, se), safe_ratio(mean - high, se)
    p_lower, p_upper = t_cdf(t_lower, df), t_sf(t_upper, df)
    half = t_ppf(1.0 - alpha, df) * se
    p = min(p_lower, p_upper)
    return MinimalEffect(n=n, n_dropped=n_dropped, mean=mean, sd=sd, se=se, df=df, low=low, high=high,
                         t_lower=t_lower, t_upper=t_upper, p_lower=p_lower, p_upper=p_upper, p=p,
                         ci_low=mean - half, ci_high=mean + half, alpha=alpha, shown=bool(p < alpha),
                         zero_sd=bool(sd == 0))
