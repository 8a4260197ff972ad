"""The paired tests from summary statistics alone (n, mean and SD of the differences), like
TOSTER's ``tsum_TOST``: what a reader can recompute from a published table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._checks import Result, check_alpha, equivalence_bounds
from .effect_size import effect_size_from_stats
from .equivalence import tost_from_stats
from .paired import paired_t_from_stats


@dataclass(slots=True, frozen=True)
class TostSummary(Result):
    """Result of :func:`tost_summary`: the t-test against 0, the TOST at the bounds, g_z with its
    1−2α interval and the decision in words. ``ci_low, ci_high`` is the 1−2α interval."""

    n: int
    mean: float
    sd: float
    se: float
    df: int
    t: float
    p: float
    ci_low: float
    ci_high: float
    low: float
    high: float
    t_lower: float
    p_lower: float
    t_upper: float
    p_upper: float
    p_tost: float
    significant: bool
    equivalent: bool
    d_z: float
    g_z: float
    g_z_ci: tuple[float, float]
    alpha: float
    decision: str


def tost_summary(n: int, mean: float, sd: float, *, margin: Any, alpha: float = 0.05) -> TostSummary:
    """Paired t-test and TOST from ``n``, ``mean`` and ``sd`` of the differences (TOSTER's
    ``tsum_TOST(paired=TRUE)``): ``t = mean/(sd/√n)`` on n−1 df with its two-sided p; the two
    one-sided tests at ``margin`` (±m or ``(low, high)``) with ``p_tost = max``; the 1−2α interval;
    ``d_z`` and Hedges' ``g_z`` with the noncentral-t 1−2α interval (n ≥ 3); and the decision —
    equivalent or not, different from 0 or not, each at α.
    """
    alpha = check_alpha(alpha)
    equivalence_bounds(margin)
    t_test = paired_t_from_stats(n, float(mean), float(sd))
    tost = tost_from_stats(n, float(mean), float(sd), margin=margin, alpha=alpha)
    es = effect_size_from_stats(n, float(mean), float(sd), confidence=1.0 - 2.0 * alpha)
    significant = t_test.p < alpha
    decision = {
        (True, False): "equivalent and not different from 0",
        (True, True): "equivalent and different from 0 (a difference inside the bounds)",
        (False, True): "different from 0 and not equivalent",
        (False, False): "neither equivalent nor different from 0 (inconclusive)",
    }[(tost.equivalent, significant)]
    return TostSummary(n=n, mean=float(mean), sd=float(sd), se=t_test.se, df=t_test.df, t=t_test.t, p=t_test.p,
                       ci_low=tost.ci_low, ci_high=tost.ci_high, low=tost.low, high=tost.high,
                       t_lower=tost.t_lower, p_lower=tost.p_lower, t_upper=tost.t_upper, p_upper=tost.p_upper,
                       p_tost=tost.p, significant=bool(significant), equivalent=tost.equivalent, d_z=es.d_z,
                       g_z=es.g_z, g_z_ci=es.g_z_ci, alpha=alpha, decision=decision)
