"""BCa and studentized (bootstrap-t) intervals, p-values and TOST for the seed bootstrap
(Efron & Tibshirani 1993, §12.5, §14.3, §15.4; DiCiccio & Efron 1996).

Both work on a (weighted) set of resampled means — all n**n resamples as weighted multisets when
the seed bootstrap enumerates them, or the Monte-Carlo draws — so small n stays exact. Quantiles
are the kit's non-interpolating ones (:func:`weighted_quantile`).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr, ndtri

METHODS = ("percentile", "bca", "studentized")


def weighted_quantile(sorted_values: np.ndarray, cum_weights: np.ndarray, total: int, q: float) -> float:
    """Inverse-CDF quantile: the smallest value whose cumulative (integer) weight reaches ``q·total``."""
    target = q * total
    nearest = round(target)
    if abs(target - nearest) <= 1e-9 * max(1.0, target):
        target = nearest  # q·total is an integer up to float error (e.g. 0.025 × 10,000)
    i = int(np.searchsorted(cum_weights, target, side="left"))
    return float(sorted_values[min(i, sorted_values.size - 1)])


class Resamples:
    """Sorted resampled statistics with integer weights; shares and quantiles of their CDF."""

    def __init__(self, values: np.ndarray, weights: np.ndarray | None):
        order = np.argsort(values, kind="stable")
        self.values = values[order]
        w = np.ones(values.size, dtype=np.int64) if weights is None else np.asarray(weights)[order]
        self.cum = np.cumsum(w)
        self.total = int(self.cum[-1])

    def share_le(self, v: float) -> float:
        i = int(np.searchsorted(self.values, v, side="right"))
        return float(self.cum[i - 1]) / self.total if i else 0.0

    def share_lt(self, v: float) -> float:
        i = int(np.searchsorted(self.values, v, side="left"))
        return float(self.cum[i - 1]) / self.total if i else 0.0

    def quantile(self, q: float) -> float:
        return weighted_quantile(self.values, self.cum, self.total, q)


# --------------------------------------------------------------------------- BCa


def bca_constants(x: np.ndarray, boot: Resamples, observed: float) -> tuple[float, float]:
    """Bias correction ``z0 = Φ⁻¹((#{θ* < θ̂} + #{θ* ≤ θ̂}) / 2B)`` (mid-rank, as scipy) and the
    jackknife acceleration ``a = Σ U_i³ / (6·(Σ U_i²)^{3/2})`` with ``U_i = θ̄_(·) − θ_(i)``,
    θ_(i) the mean without seed i (Efron & Tibshirani eq. 14.15)."""
    # resamples that are permutations of the seeds have mean θ̂ up to float residue: they tie
    tol = 1e-12 * float(np.abs(x).max())
    share = (boot.share_lt(observed - tol) + boot.share_le(observed + tol)) / 2.0
    z0 = float(ndtri(share))
    n = x.size
    jack = (x.sum() - x) / (n - 1)
    u = jack.mean() - jack
    den = float((u * u).sum())
    a = float((u**3).sum()) / (6.0 * den**1.5) if den > 0 else 0.0
    return z0, a


def bca_level(z0: float, a: float, q: float) -> float:
    """The adjusted percentile level ``Φ(z0 + (z0 + z_q)/(1 − a(z0 + z_q)))`` of nominal level q."""
    u = z0 + float(ndtri(q))
    return float(ndtr(z0 + u / (1.0 - a * u)))


def bca_one_sided(share: float, z0: float, a: float) -> float:
    """The nominal level whose BCa bound sits where the bootstrap CDF equals ``share``
    (the inverse of :func:`bca_level`): ``Φ(w/(1 + a·w) − z0)`` with ``w = Φ⁻¹(share) − z0``."""
    if share <= 0.0:
        return 0.0
    if share >= 1.0:
        return 1.0
    w = float(ndtri(share)) - z0
    den = 1.0 + a * w
    if den <= 0.0:  # past the pole of the BCa map: the far tail
        return 0.0 if w < 0 else 1.0
    return float(ndtr(w / den - z0))


def bca(x: np.ndarray, means: np.ndarray, weights: np.ndarray | None, confidence: float,
        bounds: tuple[float, float] | None) -> tuple[float, float, float, float | None, float | None]:
    """BCa ``(ci_low, ci_high, p, p_tost_lower, p_tost_upper)`` from resampled means.

    Interval: the bootstrap quantiles at ``bca_level((1∓c)/2)``. One-sided p at a value v:
    ``P_≤(v) = bca_one_sided(G(v))`` (H0: μ ≤ v) and ``P_≥(v) = 1 − bca_one_sided(G⁻(v))`` with
    G the bootstrap CDF (G⁻ its left limit); both reduce to the percentile shares when z0 = a = 0.
    ``p = min(1, 2·min(P_≤(0), P_≥(0)))``; the TOST halves are ``P_≤(low)`` and ``P_≥(high)``.
    """
    boot = Resamples(means, weights)
    observed = float(x.mean())
    z0, a = bca_constants(x, boot, observed)
    if not math.isfinite(z0):  # every resample on one side of θ̂: no bias correction possible
        z0 = 0.0
    half = (1.0 - confidence) / 2.0
    lo = boot.quantile(bca_level(z0, a, half))
    hi = boot.quantile(bca_level(z0, a, 1.0 - half))

    def p_le(v: float) -> float:
        return bca_one_sided(boot.share_le(v), z0, a)

    def p_ge(v: float) -> float:
        return 1.0 - bca_one_sided(boot.share_lt(v), z0, a)

    p = min(1.0, 2.0 * min(p_le(0.0), p_ge(0.0)))
    if bounds is None:
        return lo, hi, p, None, None
    return lo, hi, p, p_le(bounds[0]), p_ge(bounds[1])


# --------------------------------------------------------------------------- studentized


def studentized(x: np.ndarray, means: np.ndarray, sq_means: np.ndarray, weights: np.ndarray | None,
                confidence: float, bounds: tuple[float, float] | None
                ) -> tuple[float, float, float, float | None, float | None]:
    """Bootstrap-t ``(ci_low, ci_high, p, p_tost_lower, p_tost_upper)``.

    Each resample gives ``t* = (m* − d̄)/(s*/√n)`` (s* with n−1 from the resample's mean of squares;
    a resample of one repeated seed has s* = 0 and t* = ±inf, or 0 at d̄). Interval:
    ``[d̄ − q*_{1−α/2}·se, d̄ − q*_{α/2}·se]`` with ``se = s_d/√n`` and q* the t* quantiles.
    One-sided p at v: ``P*(t* ≥ (d̄ − v)/se)`` (H0: μ ≤ v) and ``P*(t* ≤ (d̄ − v)/se)`` (H0: μ ≥ v).
    """
    n = x.size
    observed = float(x.mean())
    se = float(x.std(ddof=1)) / math.sqrt(n) if np.ptp(x) else 0.0
    var = (sq_means - means * means) * n / (n - 1)
    var[var <= 1e-12 * float(np.mean(x * x))] = 0.0  # float residue of an all-equal resample
    se_b = np.sqrt(var) / math.sqrt(n)
    num = means - observed
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se_b > 0, num / np.where(se_b > 0, se_b, 1.0), np.sign(num) * np.inf)
    t = np.nan_to_num(t, nan=0.0, posinf=np.inf, neginf=-np.inf)
    boot = Resamples(t, weights)
    half = (1.0 - confidence) / 2.0
    if se == 0:
        lo = hi = observed
    else:
        lo = observed - boot.quantile(1.0 - half) * se
        hi = observed - boot.quantile(half) * se

    def t_at(v: float) -> float:
        return (observed - v) / se if se > 0 else math.copysign(math.inf, observed - v) if observed != v else 0.0

    def p_le(v: float) -> float:
        return 1.0 - boot.share_lt(t_at(v))

    def p_ge(v: float) -> float:
        return boot.share_le(t_at(v))

    p = min(1.0, 2.0 * min(p_le(0.0), p_ge(0.0)))
    if bounds is None:
        return lo, hi, p, None, None
    return lo, hi, p, p_le(bounds[0]), p_ge(bounds[1])
