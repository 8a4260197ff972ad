"""Solve the paired t-test's power equation for whichever of n, effect, α or power is missing
(like statsmodels' ``TTestPower.solve_power`` and pingouin's ``power_ttest``), with the continuous
n beside the rounded-up one."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._checks import Result, check_alternative
from .tdist import nct_cdf, nct_sf, norm_cdf, norm_sf, t_isf


@dataclass(slots=True, frozen=True)
class PowerSolution(Result):
    """Result of :func:`solve_power_paired`: all four quantities, ``solved_for`` naming the one
    computed. ``n`` is the seed count to run (``ceil(n_continuous)`` when n was solved for) and
    ``power`` is the power at the quantities given, or at that rounded n."""

    solved_for: str
    n: int
    n_continuous: float
    effect: float
    sd: float
    alpha: float
    power: float
    alternative: str


def _power(n: float, es: float, alpha: float, alternative: str) -> float:
    """Noncentral-t power of the paired t at a possibly fractional n (df = n − 1, λ = es·√n)."""
    df, nc = n - 1.0, es * math.sqrt(n)
    if alternative == "two-sided":
        crit = t_isf(alpha / 2.0, df)
        value = nct_sf(crit, df, nc) + nct_cdf(-crit, df, nc)
    else:
        crit = t_isf(alpha, df)
        value = nct_sf(crit, df, nc) if alternative == "greater" else nct_cdf(-crit, df, nc)
    if math.isfinite(value):
        return value
    # scipy's nct fails far in the tails (a huge critical value or noncentrality), where the
    # power is 0 or 1 to many digits: the normal limit of T' there is exact enough
    hi = norm_sf(crit - nc)
    lo = norm_cdf(-crit - nc)
    return {"two-sided": hi + lo, "greater": hi}.get(alternative, lo)


def _root(f, lo: float, hi: float, what: str) -> float:
    flo, fhi = f(lo), f(hi)
    if flo * fhi > 0:
        raise ValueError(f"no {what} solves the power equation for the values given")
    from scipy.optimize import brentq  # only here: importing scipy.optimize takes a second

    return float(brentq(f, lo, hi, xtol=1e-12, rtol=1e-12))


def solve_power_paired(*, n: float | None = None, effect: float | None = None, sd: float = 1.0,
                       alpha: float | None = 0.05, power: float | None = None,
                       alternative: str = "two-sided") -> PowerSolution:
    """Give all but one of ``n``, ``effect``, ``alpha`` and ``power`` (set that one to None).

    The power of the paired t with n seeds, mean difference ``effect`` and per-pair SD ``sd`` is
    the noncentral-t one of :func:`power_paired_t` (λ = effect·√n/sd, df = n − 1), continued to
    fractional n. The missing quantity is found with Brent's method:
    ``n`` — the continuous root ``n_continuous`` and ``n = ceil(n_continuous)`` with its power;
    ``effect`` — the smallest detectable effect (positive; for ``less`` negative);
    ``alpha`` — the level at which the design reaches ``power`` (a compromise analysis);
    ``power`` — the power. Refused: more or fewer than one missing, or no solution.
    """
    alternative = check_alternative(alternative)
    missing = [k for k, v in (("n", n), ("effect", effect), ("alpha", alpha), ("power", power)) if v is None]
    if len(missing) != 1:
        raise ValueError(f"leave exactly one of n, effect, alpha, power as None; got {missing or 'none'} missing")
    if not (math.isfinite(float(sd)) and sd > 0):
        raise ValueError(f"sd must be a positive number, got {sd!r}")
    if n is not None and not n >= 2:
        raise ValueError(f"n must be at least 2, got {n!r}")
    if alpha is not None and not 0 < alpha < 1:
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    if power is not None and not 0 < power < 1:
        raise ValueError(f"power must lie strictly between 0 and 1, got {power!r}")
    sign = -1.0 if alternative == "less" else 1.0
    what = missing[0]
    if what == "power":
        power = _power(n, effect / sd, alpha, alternative)
    elif what == "alpha":
        alpha = _root(lambda a: _power(n, effect / sd, a, alternative) - power, 1e-12, 1 - 1e-12, "alpha")
    elif what == "effect":
        def f(e: float) -> float:
            return _power(n, sign * e, alpha, alternative) - power

        hi = 0.5
        while f(hi) < 0 and hi < 1e3:
            hi *= 2.0
        es = _root(f, 1e-9, hi, "effect")
        effect = sign * es * sd
    else:
        es = effect / sd
        def f(k: float) -> float:
            return _power(k, es, alpha, alternative) - power

        hi = 4.0
        while f(hi) < 0:  # double rather than bracket wide: scipy's nct fails far out
            hi *= 2.0
            if hi > 1e7:
                raise ValueError(f"power {power} needs more than 10^7 seeds for effect {effect}")
        n_cont = _root(f, 2.0, hi, "n")
        n_int = max(2, math.ceil(n_cont - 1e-9))
        return PowerSolution(solved_for="n", n=n_int, n_continuous=n_cont, effect=float(effect), sd=float(sd),
                             alpha=float(alpha), power=_power(n_int, es, alpha, alternative), alternative=alternative)
    return PowerSolution(solved_for=what, n=math.ceil(n), n_continuous=float(n), effect=float(effect),
                         sd=float(sd), alpha=float(alpha), power=float(power), alternative=alternative)
