"""Student t, standard normal, chi-square and noncentral t distribution functions for the
statistics (paired t, TOST, Welch, power, sequential boundaries, effect sizes).

These call the special functions that ``scipy.stats`` itself calls for these distributions
(``t``: ``stdtr``, ``stdtrit``; ``norm``: ``ndtr``, ``ndtri``; ``chi2``: ``gammaincinv``,
``chdtri`` and the log-density formula; ``nct.cdf``: ``nctdtr``), so the values are the same to the
last bit. They skip the frozen-distribution machinery (argument broadcasting and checks), which was
most of the time of a paired t-test on 24 seeds, and importing ``scipy.stats`` (over a second at
start). The ends are handled as ``scipy.stats`` handles them: a probability of 0 or 1 maps to
∓inf/±inf, one outside [0, 1] to NaN, and ``df = inf`` is the normal distribution. The noncentral t
survival function has no public special function (scipy computes it with a private ufunc), so
:func:`nct_sf` imports ``scipy.stats`` when first called.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.special import chdtri, gammaincinv, gammaln, nctdtr, ndtr, ndtri, stdtr, stdtrit, xlogy


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


def t_isf(q: float, df: float) -> float:
    """The upper q-quantile of t(df), ``−t_ppf(q)`` (``scipy.stats.t.isf(q, df)``): inf at q = 0."""
    if not 0.0 < q < 1.0:
        return math.inf if q == 0.0 else -math.inf if q == 1.0 else math.nan
    return float(-ndtri(q)) if math.isinf(df) else float(-stdtrit(df, q))


def t_cdf_array(x: Any, df: float) -> Any:
    """Elementwise P(T ≤ x) for T ~ t(df), finite df (``scipy.stats.t.cdf(x, df)`` on an array)."""
    return stdtr(df, np.asarray(x, dtype=float))


def t_sf_array(x: Any, df: float) -> Any:
    """Elementwise P(T > x) for T ~ t(df), finite df (``scipy.stats.t.sf(x, df)`` on an array)."""
    return stdtr(df, -np.asarray(x, dtype=float))


def norm_cdf(x: float) -> float:
    """Φ(x) (``scipy.stats.norm.cdf(x)``)."""
    return float(ndtr(x))


def norm_sf(x: float) -> float:
    """1 − Φ(x) = Φ(−x) (``scipy.stats.norm.sf(x)``)."""
    return float(ndtr(-x))


def norm_sf_array(x: Any) -> Any:
    """Elementwise Φ(−x) (``scipy.stats.norm.sf(x)`` on an array; a 0-d array gives a scalar)."""
    return ndtr(-np.asarray(x, dtype=float))


def norm_ppf(q: float) -> float:
    """Φ⁻¹(q) (``scipy.stats.norm.ppf(q)``): −inf at q = 0, inf at q = 1, NaN outside [0, 1]."""
    return float(ndtri(q))


def norm_isf(q: float) -> float:
    """Φ⁻¹(1 − q) = −Φ⁻¹(q) (``scipy.stats.norm.isf(q)``): inf at q = 0, −inf at q = 1."""
    return float(-ndtri(q))


def chi2_pdf(x: float, df: float) -> float:
    """Density of χ²(df) at x (``scipy.stats.chi2.pdf(x, df)``, the same log-density formula)."""
    if math.isnan(x):
        return math.nan
    if x < 0:
        return 0.0
    return float(np.exp(xlogy(df / 2. - 1, x) - x / 2. - gammaln(df / 2.) - (np.log(2) * df) / 2.))


def chi2_ppf(q: float, df: float) -> float:
    """The q-quantile of χ²(df), ``2·P⁻¹(df/2, q)`` (``scipy.stats.chi2.ppf(q, df)``)."""
    if not 0.0 < q < 1.0:
        return 0.0 if q == 0.0 else math.inf if q == 1.0 else math.nan
    return float(2 * gammaincinv(df / 2, q))


def chi2_isf(q: float, df: float) -> float:
    """The upper q-quantile of χ²(df) (``scipy.stats.chi2.isf(q, df)``)."""
    if not 0.0 < q < 1.0:
        return math.inf if q == 0.0 else 0.0 if q == 1.0 else math.nan
    return float(chdtri(df, q))


def nct_cdf(x: float, df: float, nc: float) -> float:
    """P(T' ≤ x) for T' ~ noncentral t(df, nc) (``scipy.stats.nct.cdf(x, df, nc)``)."""
    if math.isinf(x):
        return 1.0 if x > 0 and nc == nc else 0.0 if nc == nc else math.nan
    return float(nctdtr(df, nc, x))


def nct_sf(x: float, df: float, nc: float) -> float:
    """P(T' > x) for T' ~ noncentral t(df, nc) (``scipy.stats.nct.sf``, called: scipy computes it
    with a private ufunc, so it is imported here, on first use, rather than at start)."""
    from scipy.stats import nct

    return float(nct.sf(x, df, nc))
