"""Exact power of the paired tests and a seed-count planner.

The paper reports power from a pilot's per-pair SD (S27: "At the per-pair spread observed
(0.012), the study had power 0.86 for a gain of +0.008"). All powers here are exact under normal
differences: the noncentral t distribution for the t-tests, and numerical integration over the
sampling distribution of the SD for TOST (the quantity Owen's Q computes); no normal
approximation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from ._checks import (
    Result,
    check_alpha,
    check_alternative,
    deprecated,
    equivalence_bounds,
    positive_int,
    positive_margin,
)
from .tdist import chi2_isf, chi2_pdf, chi2_ppf, nct_cdf, nct_sf, norm_cdf, t_ppf

KINDS = ("superiority", "equivalence", "non-inferiority")


def _check_sd(sd: float) -> float:
    s = float(sd)
    if not math.isfinite(s) or s <= 0:
        raise ValueError(f"sd must be a positive number, got {sd!r}")
    return s


def power_paired_t(n: int, effect: float, sd: float, *, alpha: float = 0.05,
                   alternative: str = "two-sided") -> float:
    """Power of the paired t-test with n pairs when the true mean difference is ``effect``.

    With ``df = n−1`` and noncentrality ``λ = effect·√n/sd``: two-sided
    ``P(T' > t_{1−α/2}) + P(T' < −t_{1−α/2})``; ``greater`` ``P(T' > t_{1−α})``; ``less``
    ``P(T' < −t_{1−α})``, where T' is noncentral t(df, λ).
    """
    n = positive_int(n, "n", 2)
    alpha = float(alpha)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    alternative = check_alternative(alternative)
    sd = _check_sd(sd)
    df = n - 1
    nc = float(effect) * math.sqrt(n) / sd
    if alternative == "two-sided":
        crit = t_ppf(1 - alpha / 2, df)
        return nct_sf(crit, df, nc) + nct_cdf(-crit, df, nc)
    crit = t_ppf(1 - alpha, df)
    if alternative == "greater":
        return nct_sf(crit, df, nc)
    return nct_cdf(-crit, df, nc)


def power_noninferiority_paired(n: int, effect: float, sd: float, *, margin: float, alpha: float = 0.05) -> float:
    """Power of the paired non-inferiority test (H0: μ ≤ −margin, one-sided at α).

    ``P(T' > t_{1−α, n−1})`` with noncentrality ``(effect + margin)·√n/sd``.
    """
    n = positive_int(n, "n", 2)
    alpha = check_alpha(alpha)
    m = positive_margin(margin)
    sd = _check_sd(sd)
    df = n - 1
    return nct_sf(t_ppf(1 - alpha, df), df, (float(effect) + m) * math.sqrt(n) / sd)


def power_tost_paired(n: int, effect: float, sd: float, *, margin: Any, alpha: float = 0.05) -> float:
    """Exact power of the paired TOST at level α with bounds ``(low, high)``.

    With ``se = sd/√n``, ``ν = n−1`` and ``c = t_{1−α, ν}``, TOST rejects when
    ``low + c·s/√n < d̄ < high − c·s/√n``. Conditioning on ``U = ν s²/sd² ~ χ²_ν`` (independent
    of d̄ ~ N(effect, se²)):
    ``power = ∫₀^{U*} [Φ((high−effect)/se − c√(U/ν)) − Φ((low−effect)/se + c√(U/ν))] f_{χ²_ν}(U) dU``,
    where ``U*`` is where the acceptance region closes. This is the integral that Owen's Q gives
    in closed form (as in TOSTER's ``power_t_TOST`` and PowerTOST's exact method).
    """
    n = positive_int(n, "n", 2)
    alpha = check_alpha(alpha)
    low, high = equivalence_bounds(margin)
    sd = _check_sd(sd)
    nu = n - 1
    se = sd / math.sqrt(n)
    c = t_ppf(1 - alpha, nu)
    a_hi = (high - float(effect)) / se
    a_lo = (low - float(effect)) / se
    u_star = nu * ((a_hi - a_lo) / (2 * c)) ** 2  # region empty beyond this U

    def integrand(u: float) -> float:
        k = c * math.sqrt(u / nu)
        return max(0.0, norm_cdf(a_hi - k) - norm_cdf(a_lo + k)) * chi2_pdf(u, nu)

    # Integrate only where the chi-square density is non-negligible.
    lo_u = chi2_ppf(1e-14, nu)
    hi_u = min(u_star, chi2_isf(1e-14, nu))
    if hi_u <= lo_u:
        return 0.0
    pts = [p for p in (float(nu), max(nu - 2.0, 0.0)) if lo_u < p < hi_u]
    from scipy.integrate import quad  # only here: importing scipy.integrate takes a second

    val, _ = quad(integrand, lo_u, hi_u, points=pts or None, limit=200, epsabs=1e-13, epsrel=1e-11)
    return float(min(1.0, max(0.0, val)))


@dataclass(slots=True, frozen=True)
class SeedsNeeded(Result):
    """Result of :func:`seeds_needed`: the smallest number of paired seeds reaching ``target_power``."""

    n: int
    power: float
    target_power: float
    kind: str
    effect: float
    sd: float
    alpha: float
    alternative: str | None
    low: float | None
    high: float | None


def _normalize_kind(kind: str) -> str:
    k = str(kind).lower().replace("_", "-")
    if k in ("noninferiority", "non-inferiority", "ni"):
        return "non-inferiority"
    if k in ("equivalence", "tost"):
        return "equivalence"
    if k == "superiority":
        return k
    raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")


def seeds_needed(effect: float, sd: float, *, power: float = 0.8, alpha: float = 0.05,
                 kind: str = "superiority", margin: Any = None, alternative: str = "two-sided",
                 max_n: int = 100_000) -> SeedsNeeded:
    """Smallest number of paired seeds n ≥ 2 whose exact power reaches ``power``.

    ``effect`` is the assumed true mean difference and ``sd`` the per-pair SD of differences from
    a pilot. ``kind``: ``superiority`` (paired t, :func:`power_paired_t` with ``alternative``),
    ``equivalence`` (TOST within ``margin``, :func:`power_tost_paired`) or ``non-inferiority``
    (bound ``−margin``, :func:`power_noninferiority_paired`). Power increases with n, so the search
    doubles n and then bisects. Raises ``ValueError`` when no n can reach the target (a zero or
    wrong-signed effect, an effect outside the equivalence bounds) or n would exceed ``max_n``.
    """
    kind = _normalize_kind(kind)
    target = float(power)
    if not 0 < target < 1:
        raise ValueError(f"power must lie strictly between 0 and 1, got {power!r}")
    sd = _check_sd(sd)
    effect = float(effect)
    max_n = positive_int(max_n, "max_n", 2)
    low = high = None
    alt: str | None = None
    f: Callable[[int], float]
    if kind == "superiority":
        alt = check_alternative(alternative)
        alpha = float(alpha)
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
        wrong_way = (alt == "greater" and effect <= 0) or (alt == "less" and effect >= 0)
        if effect == 0 or wrong_way or target <= alpha:
            raise ValueError(f"power {target} is not reachable for effect {effect} with a {alt} test")
        f = lambda k: power_paired_t(k, effect, sd, alpha=alpha, alternative=alt)  # noqa: E731
    elif kind == "equivalence":
        alpha = check_alpha(alpha)
        low, high = equivalence_bounds(margin)
        if not low < effect < high:
            raise ValueError(f"equivalence cannot be shown for effect {effect} outside the bounds ({low}, {high})")
        f = lambda k: power_tost_paired(k, effect, sd, margin=(low, high), alpha=alpha)  # noqa: E731
    else:
        alpha = check_alpha(alpha)
        m = positive_margin(margin)
        low = -m
        if effect <= -m:
            raise ValueError(f"non-inferiority cannot be shown for effect {effect} at or below −{m}")
        f = lambda k: power_noninferiority_paired(k, effect, sd, margin=m, alpha=alpha)  # noqa: E731

    lo, hi = 1, 2  # invariant: f(lo) < target (lo=1 stands for "no study"), f(hi) tested below
    p_hi = f(hi)
    while p_hi < target:
        lo, hi = hi, min(hi * 2, max_n)
        if lo == max_n:
            raise ValueError(f"power {target} needs more than max_n = {max_n} seeds")
        p_hi = f(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p_mid = f(mid)
        if p_mid >= target:
            hi, p_hi = mid, p_mid
        else:
            lo = mid
    return SeedsNeeded(n=hi, power=p_hi, target_power=target, kind=kind, effect=effect, sd=sd, alpha=float(alpha),
                       alternative=alt, low=low, high=high)


def power_noninferiority(n: int, effect: float, sd: float, *, margin: float, alpha: float = 0.05) -> float:
    """Deprecated name of :func:`power_noninferiority_paired` (kept for one release)."""
    deprecated("power_noninferiority", "power_noninferiority_paired")
    return power_noninferiority_paired(n, effect, sd, margin=margin, alpha=alpha)
