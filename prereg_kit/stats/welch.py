"""Unpaired (Welch) contrasts: arms on different seeds, runs or pools (dense-rewards paper S21's
primary, §C.5.2: "unpaired Welch t … because the two sides use different runs, pools, and
test sets").

With group means ``x̄₁, x̄₂``, SDs ``s₁, s₂`` (n−1 denominators) and sizes ``n₁, n₂``:
``Δ = x̄₁ − x̄₂``, ``se = √(s₁²/n₁ + s₂²/n₂)``, ``t = Δ/se`` on the Welch–Satterthwaite
``df = se⁴ / ((s₁²/n₁)²/(n₁−1) + (s₂²/n₂)²/(n₂−1))``; the interval and the p-values are those of
the paired machinery with this ``se`` and ``df`` (TOST and non-inferiority at the margin as in
``equivalence``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._checks import (
    Result,
    check_alpha,
    check_alternative,
    check_confidence,
    deprecated,
    equivalence_bounds,
    positive_margin,
    safe_ratio,
)
from .equivalence import TwoOneSided, two_one_sided_test
from .paired import spread, t_interval, t_pvalue
from .tdist import t_ppf, t_sf


@dataclass(slots=True, frozen=True)
class WelchT(Result):
    """Result of :func:`welch_t`; ``df`` is the Welch–Satterthwaite df (not an integer)."""

    n1: int
    n2: int
    mean1: float
    mean2: float
    sd1: float
    sd2: float
    mean: float
    se: float
    t: float
    df: float
    p: float
    ci_low: float
    ci_high: float
    confidence: float
    alternative: str
    zero_sd: bool


@dataclass(slots=True, frozen=True)
class WelchNonInferiority(Result):
    """Result of :func:`noninferiority_welch`; ``lower`` is the lower end of the 1−2α interval."""

    mean: float
    se: float
    df: float
    margin: float
    t: float
    p: float
    lower: float
    alpha: float
    holds: bool


def _groups(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    """Both groups as float arrays, NaNs dropped; each needs at least 2 values."""
    out = []
    for name, x in (("first", a), ("second", b)):
        v = np.asarray(x, dtype="float64").ravel()
        if np.isinf(v).any():
            raise ValueError(f"the {name} group holds an infinite value")
        v = v[~np.isnan(v)]
        if v.size < 2:
            raise ValueError(f"the {name} group needs at least 2 values, got {v.size}")
        out.append(v)
    return out[0], out[1]


def _moments(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """Δ, its Welch standard error and the Welch–Satterthwaite df (df = n₁+n₂−2 when both SDs are 0)."""
    v1, v2 = spread(a) ** 2 / a.size, spread(b) ** 2 / b.size
    se = math.sqrt(v1 + v2)
    den = v1 ** 2 / (a.size - 1) + v2 ** 2 / (b.size - 1)
    df = (v1 + v2) ** 2 / den if den > 0 else float(a.size + b.size - 2)
    return float(a.mean() - b.mean()), se, df


def welch_t(first: Any, second: Any, *, confidence: float = 0.95, alternative: str = "two-sided") -> WelchT:
    """Welch's t-test of ``mean(first) − mean(second)`` against 0, with its interval
    (``Δ ± t_{(1+confidence)/2, df}·se`` two-sided, the matching one-sided bound otherwise).
    Equal to ``scipy.stats.ttest_ind(first, second, equal_var=False)``."""
    alternative = check_alternative(alternative)
    confidence = check_confidence(confidence)
    a, b = _groups(first, second)
    mean, se, df = _moments(a, b)
    t = safe_ratio(mean, se)
    lo, hi = t_interval(mean, se, df, confidence, alternative)
    return WelchT(n1=a.size, n2=b.size, mean1=float(a.mean()), mean2=float(b.mean()), sd1=spread(a), sd2=spread(b),
                  mean=mean, se=se, t=t, df=df, p=t_pvalue(t, df, alternative), ci_low=lo, ci_high=hi,
                  confidence=confidence, alternative=alternative, zero_sd=bool(se == 0))


def tost_welch(first: Any, second: Any, *, margin: Any, alpha: float = 0.05) -> TwoOneSided:
    """Two one-sided Welch t-tests for equivalence of the group means within ``(low, high)``
    (``margin=m`` is ``(−m, +m)``): ``p = max(P(T ≥ (Δ−low)/se), P(T ≤ (Δ−high)/se))`` on the
    Welch df; ``n = n₁ + n₂``, ``n_dropped`` the NaNs left out, no single ``sd``. Equal to
    statsmodels' ``ttost_ind(first, second, low, high, usevar="unequal")``."""
    alpha = check_alpha(alpha)
    low, high = equivalence_bounds(margin)
    a, b = _groups(first, second)
    mean, se, df = _moments(a, b)
    given = sum(np.asarray(x, dtype="float64").size for x in (first, second))
    return two_one_sided_test("equivalence", n=a.size + b.size, n_dropped=given - a.size - b.size, mean=mean,
                              sd=None, se=se, df=df, low=low, high=high, alpha=alpha)


def noninferiority_welch(first: Any, second: Any, *, margin: float, alpha: float = 0.05) -> WelchNonInferiority:
    """One-sided Welch t-test of H0: Δ ≤ −margin: ``t = (Δ + margin)/se``, ``p = P(T ≥ t)``;
    ``holds`` when the lower end of the 1−2α interval exceeds −margin (paper §C.1's rule)."""
    alpha = check_alpha(alpha)
    m = positive_margin(margin)
    a, b = _groups(first, second)
    mean, se, df = _moments(a, b)
    t = safe_ratio(mean + m, se)
    lower = mean - t_ppf(1.0 - alpha, df) * se
    return WelchNonInferiority(mean=mean, se=se, df=df, margin=m, t=t, p=t_sf(t, df), lower=lower,
                               alpha=alpha, holds=bool(lower > -m))


def __getattr__(name: str) -> Any:
    if name == "WelchTost":  # the old result type: one TwoOneSided for every two one-sided test
        deprecated("WelchTost", "TwoOneSided")
        return TwoOneSided
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
