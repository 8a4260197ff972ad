"""Standardized effect sizes of paired differences with noncentral-t intervals.

``d_z`` (the paper's effect size, H.2) standardizes the mean difference by the SD of the
differences; Hedges' ``g_z`` removes its small-sample bias. For two arms measured on the same
seeds, ``d_av`` (average-SD standardizer, Cumming 2012) and ``d_rm`` (repeated-measures,
Lakens 2013 eq. 9) are comparable with between-subject d's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import special

from ._checks import Result, as_vector, check_confidence, paired_differences, safe_ratio
from .paired import spread
from .tdist import nct_cdf, nct_sf


@dataclass(slots=True, frozen=True)
class EffectSizePaired(Result):
    """Result of :func:`effect_size_paired`; intervals are two-sided at ``confidence``."""

    n: int
    n_dropped: int
    mean: float
    sd: float
    d_z: float
    g_z: float
    correction: float
    d_z_ci: tuple[float, float]
    g_z_ci: tuple[float, float]
    confidence: float
    zero_sd: bool


@dataclass(slots=True, frozen=True)
class EffectSizeArms(Result):
    """Result of :func:`effect_size_paired_arms`: the paired effect in three standardizations."""

    n: int
    n_dropped: int
    mean_difference: float
    sd_treatment: float
    sd_control: float
    r: float
    d_z: float
    d_av: float
    d_rm: float
    g_av: float
    g_rm: float


def hedges_correction(df: float) -> float:
    """Exact small-sample factor ``J(df) = Γ(df/2) / (√(df/2)·Γ((df−1)/2))`` (Hedges 1981).

    Computed on the log scale so large df do not overflow; ``J → 1`` as df grows and is close
    to the familiar approximation ``1 − 3/(4·df − 1)``.
    """
    if df <= 1:
        # Γ((df−1)/2) has a pole at df = 1: the correction is undefined, and so is g.
        return math.nan
    return math.exp(special.gammaln(df / 2.0) - special.gammaln((df - 1.0) / 2.0) - 0.5 * math.log(df / 2.0))


def nct_interval(t_obs: float, df: float, confidence: float) -> tuple[float, float]:
    """Interval for the noncentrality λ of a noncentral t by inversion (Steiger & Fouladi 1997).

    The lower end solves ``P(T_{df,λ} ≤ t_obs) = (1+c)/2`` and the upper end
    ``P(T_{df,λ} ≤ t_obs) = (1−c)/2``; the CDF decreases in λ, so each root is bracketed by
    stepping out from ``t_obs`` and found with Brent's method.
    """
    if not math.isfinite(t_obs):
        return t_obs, t_obs
    a = (1.0 - confidence) / 2.0
    # The SD of T around λ is about √(1 + t²/(2·df)); stepping by it keeps the bracket near t_obs,
    # where scipy's nct is accurate (far in the tails it can return NaN).
    step = math.sqrt(1.0 + t_obs * t_obs / (2.0 * df))

    def cdf(lam: float) -> float:
        v = nct_cdf(t_obs, df, lam)
        return v if math.isfinite(v) else 1.0 - nct_sf(t_obs, df, lam)

    def root(target: float) -> float:
        def f(lam: float) -> float:
            return cdf(lam) - target

        lo, hi = t_obs - 2.0 * step, t_obs + 2.0 * step
        while f(lo) < 0:
            lo -= step
        while f(hi) > 0:
            hi += step
        from scipy.optimize import brentq  # only here: importing scipy.optimize takes a second

        return float(brentq(f, lo, hi, xtol=1e-12, rtol=1e-12, maxiter=500))

    return root(1.0 - a), root(a)


def effect_size_paired(diff: Any, confidence: float = 0.95) -> EffectSizePaired:
    """Cohen's ``d_z`` and Hedges' ``g_z`` of paired differences, with noncentral-t intervals.

    ``d_z = d̄ / s_d`` (s_d with n−1), ``g_z = J(n−1)·d_z`` with the exact Hedges factor ``J``
    (:func:`hedges_correction`). Since ``t = d_z·√n`` follows a noncentral t on n−1 df with
    noncentrality ``δ·√n``, the interval for δ is the λ-interval of :func:`nct_interval` divided
    by ``√n`` (Cumming & Finch 2001; MBESS ``ci.sm``; TOSTER's ``"nct"`` method); the g_z interval
    is that interval times J. NaN differences are dropped; with zero spread d_z is ``±inf`` (or 0)
    and the intervals collapse to it. Needs n ≥ 3 (J is undefined at one degree of freedom).
    """
    confidence = check_confidence(confidence)
    d, n_dropped = paired_differences(diff, min_n=3)
    return effect_size_from_stats(d.size, float(d.mean()), spread(d), confidence=confidence, n_dropped=n_dropped)


def effect_size_from_stats(n: int, mean: float, sd: float, *, confidence: float = 0.95,
                           n_dropped: int = 0) -> EffectSizePaired:
    """:func:`effect_size_paired` from ``n``, the mean and the SD of the differences."""
    confidence = check_confidence(confidence)
    if n < 3:
        raise ValueError(f"need at least 3 pairs, got {n}")
    if not sd >= 0:
        raise ValueError(f"sd must be non-negative, got {sd!r}")
    dz = safe_ratio(mean, sd)
    j = hedges_correction(n - 1)
    if sd == 0:  # no spread: d_z is ±inf or 0 and its interval collapses to it (no sampling error seen)
        dz_ci = (dz, dz)
    else:
        lam_lo, lam_hi = nct_interval(dz * math.sqrt(n), n - 1, confidence)
        dz_ci = (lam_lo / math.sqrt(n), lam_hi / math.sqrt(n))
    return EffectSizePaired(n=n, n_dropped=n_dropped, mean=mean, sd=sd, d_z=dz, g_z=j * dz, correction=j,
                            d_z_ci=dz_ci, g_z_ci=(j * dz_ci[0], j * dz_ci[1]), confidence=confidence,
                            zero_sd=bool(sd == 0))


def effect_size_paired_arms(treatment: Any, control: Any) -> EffectSizeArms:
    """The paired effect standardized three ways, from both arms on the same seeds.

    With arm SDs ``s_t, s_c`` (n−1), their correlation ``r`` over seeds and ``M = mean(t − c)``:
    ``d_z = M / s_diff``; ``d_av = M / √((s_t² + s_c²)/2)`` (Cumming 2012; what pingouin's
    ``compute_effsize(paired=True)`` returns); ``d_rm = M·√(2(1−r)) / √(s_t² + s_c² − 2·r·s_t·s_c)``
    (Lakens 2013, eq. 9), which equals ``d_av`` when r = 0.5 and the SDs match. ``g_av`` and
    ``g_rm`` multiply by ``J(n−1)``. Seeds with a NaN in either arm are dropped.
    """
    t, c = as_vector(treatment, "treatment"), as_vector(control, "control")
    if t.shape != c.shape:
        raise ValueError(f"treatment and control have different lengths ({t.size} vs {c.size}); "
                         "pairs must match by seed")
    keep = ~(np.isnan(t) | np.isnan(c))
    n_dropped = int(t.size - keep.sum())
    t, c = t[keep], c[keep]
    if t.size < 3:
        raise ValueError(f"need at least 3 complete pairs, got {t.size}")
    n = t.size
    m = float((t - c).mean())
    st, sc = spread(t), spread(c)
    if st == 0 or sc == 0:
        raise ValueError("an arm has zero spread: d_av and d_rm need a non-zero SD in each arm")
    r = float(np.corrcoef(t, c)[0, 1])
    s_diff = math.sqrt(max(0.0, st**2 + sc**2 - 2.0 * r * st * sc))
    j = hedges_correction(n - 1)
    d_av = m / math.sqrt((st**2 + sc**2) / 2.0)
    d_rm = safe_ratio(m * math.sqrt(2.0 * (1.0 - r)), s_diff)
    return EffectSizeArms(n=n, n_dropped=n_dropped, mean_difference=m, sd_treatment=st, sd_control=sc, r=r,
                          d_z=safe_ratio(m, spread(t - c)), d_av=d_av, d_rm=d_rm, g_av=j * d_av, g_rm=j * d_rm)
