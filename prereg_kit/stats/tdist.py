"""Student t and standard normal CDF, survival function and quantiles for the hot paths (paired t,
TOST, Welch).

These call the special functions that ``scipy.stats.t`` and ``scipy.stats.norm`` themselves call
(``stdtr``, ``stdtrit``, ``ndtr``, ``ndtri``), so the values are the same to the last bit; they skip
the frozen-distribution machinery (argument broadcasting and checks), which was most of the time
of a paired t-test on 24 seeds. The ends are handled as ``scipy.stats`` handles them: a
probability of 0 or 1 maps to ∓inf/±inf, one outside [0, 1] to NaN, and ``df = inf`` is the
normal distribution.
"""

from __future__ import annotations

import math

from scipy.special import ndtr, ndtri, stdtr, stdtrit


def t_cdf(x: float, df: float) -> float:
    """P(T ≤ x) for T ~ t(df) (``scipy.stats.t.cdf(x, df)``)."""
    return float(ndtr(x)) if math.isinf(df) else float(stdtr(df, x))


def t_sf(x: float, df: float) -> float:
    """P(T > x) = P(T ≤ −x) for T ~ t(df) (``scipy.stats.t.sf(x, df)``)."""
    return float(ndtr(-x)) if math.isinf(df) else float(stdtr(df, -x))


def t_ppf(q: float, df: float) -> float:
    """The q-quantile of t(df) (``scipy.stats.t.ppf(q, df)``): −inf at q = 0, inf at q = 1."""
    if not 0.0 < q < 1.0:
        return -math.inf if q == 0.0 else math.inf if q == 1.0 else math.nan
    return float(ndtri(q)) if math.isinf(df) else float(stdtrit(df, q))


def norm_cdf(x: float) -> float:
    """Φ(x) (``scipy.stats.norm.cdf(x)``)."""
    return float(ndtr(x))


def norm_ppf(q: float) -> float:
    """Φ⁻¹(q) (``scipy.stats.norm.ppf(q)``): −inf at q = 0, inf at q = 1, NaN outside [0, 1]."""
    return float(ndtri(q))
