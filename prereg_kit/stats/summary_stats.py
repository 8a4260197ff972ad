"""The paired tests from summary statistics alone (n, mean and SD of the differences), like
TOSTER's ``tsum_TOST``: what a reader can recompute from a published table; and a printed paired-t
p recomputed from the printed effect size d_z and n (:func:`p_from_dz`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._checks import Result, check_alpha, equivalence_bounds, positive_int
from .effect_size import effect_size_from_stats
from .equivalence import tost_from_stats
from .paired import paired_t_from_stats
from .summary import parse_number, parse_p
from .tdist import t_cdf_array, t_sf_array

DZ_TESTS = ("two-sided", "greater", "less", "tost")


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


@dataclass(slots=True, frozen=True)
class DzPCheck(Result):
    """Result of :func:`p_from_dz`: the p-value range the printed d_z and n (and, for TOST, the
    printed mean) allow over their rounding, against the printed p's own rounding interval."""

    test: str
    n: int
    df: int
    t_low: float
    t_high: float
    p_low: float
    p_high: float
    reported: str
    reported_low: float
    reported_high: float
    consistent: bool


def _dz_p(t: np.ndarray, df: int, test: str) -> np.ndarray:
    if test == "greater":
        return t_sf_array(t, df)
    if test == "less":
        return t_cdf_array(t, df)
    return np.minimum(1.0, 2.0 * t_sf_array(np.abs(t), df))


def p_from_dz(d_z: Any, n: int, reported: Any, *, test: str = "two-sided", mean: Any = None,
              margin: float | None = None, df: int | None = None) -> DzPCheck:
    """Recompute a printed paired-t p from the printed paired effect size and n.

    With d_z = Δ/s_Δ (the SD with the n − 1 denominator; dense-rewards paper §H.2) the paired t
    statistic is t = Δ/(s_Δ/√n) = d_z·√n on df = n − 1. ``test``: ``two-sided`` (p = 2·P(T ≥ |t|)),
    ``greater`` / ``less`` (one-sided, H₁: Δ > 0 / Δ < 0, as the paper's "one-sided paired-t p"
    of a harm test is ``less``), or ``tost`` (the two one-sided tests at ±``margin``, §C.1: with
    s_Δ = |Δ|/|d_z| the statistics are (Δ ± m)·√n/s_Δ and p = the larger one-sided p; needs the
    printed ``mean`` Δ, not rounding to 0). Every printed number varies over its rounding interval
    (half a unit of its last printed digit): the superiority p is monotone in d_z, so its range is
    that of the interval's ends; the TOST p is evaluated over a 101 × 101 grid of (Δ, d_z) with the
    corners. ``consistent`` when the printed p's own rounding interval meets the range.
    """
    if test not in DZ_TESTS:
        raise ValueError(f"test must be one of {', '.join(DZ_TESTS)}, got {test!r}")
    n = positive_int(n, "n")
    if n < 2:
        raise ValueError(f"a paired t needs n >= 2, got {n}")
    df = n - 1 if df is None else positive_int(df, "df")
    d, hd = parse_number(d_z)
    dz = np.linspace(d - hd, d + hd, 101)
    if test == "tost":
        if mean is None or margin is None or not margin > 0:
            raise ValueError("a TOST p from d_z needs the printed mean and a positive margin")
        m, hm = parse_number(mean)
        if abs(m) <= hm or abs(d) <= hd:
            raise ValueError(f"mean {mean!r} or d_z {d_z!r} rounds to 0: the SD cannot be recovered from them")
        delta = np.linspace(m - hm, m + hm, 101)
        dd, zz = np.meshgrid(delta, np.abs(dz))
        se = np.abs(dd) / zz / math.sqrt(n)
        t_lo, t_hi = (dd + margin) / se, (dd - margin) / se
        p = np.maximum(t_sf_array(t_lo, df), t_cdf_array(t_hi, df))
        t = np.concatenate([t_lo.ravel(), t_hi.ravel()])
    else:
        t = dz * math.sqrt(n)
        p = _dz_p(t, df, test)
    r_lo, r_hi, text = parse_p(reported)
    p_lo, p_hi = float(np.min(p)), float(np.max(p))
    ok = r_lo <= p_hi * (1 + 1e-9) and p_lo * (1 - 1e-9) <= r_hi
    return DzPCheck(test=test, n=n, df=df, t_low=float(np.min(t)), t_high=float(np.max(t)), p_low=p_lo, p_high=p_hi,
                    reported=text, reported_low=r_lo, reported_high=r_hi, consistent=bool(ok))
