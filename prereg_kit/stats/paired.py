"""Paired t-test over seeds (paper §2.3 "Preregistration and statistics", §C.1 "Statistics").

The unit of analysis is a seed (or a (model size, seed) pair when sizes are pooled); each
contrast is the mean of the per-seed differences ``treatment - control`` with a paired-t
interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._checks import Result, check_alternative, check_confidence, paired_differences, safe_ratio
from .tdist import t_cdf, t_ppf, t_sf


@dataclass(slots=True, frozen=True)
class PairedT(Result):
    """Result of :func:`paired_t`.

    ``zero_sd`` flags all-equal differences: the spread is 0, so ``t`` and ``dz`` take their
    limits (``±inf``, or 0 when the mean is 0 too) and the interval collapses to the mean.
    """

    n: int
    n_dropped: int
    mean: float
    sd: float
    se: float
    t: float
    df: int
    p: float
    ci_low: float
    ci_high: float
    dz: float
    confidence: float
    alternative: str
    zero_sd: bool


def t_pvalue(t: float, df: float, alternative: str) -> float:
    """p-value of a t statistic (``t`` may be ±inf in the zero-spread limit)."""
    if alternative == "greater":
        return t_sf(t, df)
    if alternative == "less":
        return t_cdf(t, df)
    return float(min(1.0, 2.0 * t_sf(abs(t), df)))


def t_interval(mean: float, se: float, df: float, confidence: float, alternative: str) -> tuple[float, float]:
    """Paired-t interval; one-sided alternatives give a one-sided bound (the other end infinite)."""
    if alternative == "two-sided":
        half = t_ppf(0.5 + confidence / 2.0, df) * se
        return mean - half, mean + half
    crit = t_ppf(confidence, df) * se
    if alternative == "greater":
        return mean - crit, math.inf
    return -math.inf, mean + crit


def paired_t(
    treatment: Any,
    control: Any = None,
    *,
    confidence: float = 0.95,
    alternative: str = "two-sided",
) -> PairedT:
    """Paired t-test of the mean per-seed difference against 0.

    With ``d_i = treatment_i - control_i`` (or ``treatment`` itself when ``control`` is None),
    ``mean = d̄``, ``sd = s_d`` (n−1 denominator), ``se = s_d/√n``, ``t = d̄/se`` on
    ``df = n−1``; ``dz = d̄/s_d`` without small-sample correction (paper H.2). The interval is
    ``d̄ ± t_{(1+confidence)/2, n−1}·se`` for a two-sided test (the paper's "95% paired-t
    intervals over seeds", §2.3, §C.1) and the matching one-sided bound for ``greater``/``less``.

    NaN rule: pairs with a NaN in either arm are dropped (``n_dropped``).
    """
    alternative = check_alternative(alternative)
    confidence = check_confidence(confidence)
    d, n_dropped = paired_differences(treatment, control)
    return paired_t_from_stats(d.size, float(d.mean()), spread(d), confidence=confidence,
                               alternative=alternative, n_dropped=n_dropped)


def spread(d: np.ndarray) -> float:
    """SD with n−1 denominator; exactly 0 when all values are equal (no rounding residue)."""
    return 0.0 if np.ptp(d) == 0 else float(d.std(ddof=1))


def paired_t_from_stats(n: int, mean: float, sd: float, *, confidence: float = 0.95,
                        alternative: str = "two-sided", n_dropped: int = 0) -> PairedT:
    """:func:`paired_t` from ``n``, the mean and the SD of the differences."""
    alternative = check_alternative(alternative)
    confidence = check_confidence(confidence)
    if n < 2:
        raise ValueError(f"need at least 2 pairs, got {n}")
    if not sd >= 0:
        raise ValueError(f"sd must be non-negative, got {sd!r}")
    df = n - 1
    zero_sd = sd == 0
    se = sd / math.sqrt(n)
    t = safe_ratio(mean, se)
    p = t_pvalue(t, df, alternative)
    ci_low, ci_high = t_interval(mean, se, df, confidence, alternative)
    return PairedT(n=n, n_dropped=n_dropped, mean=mean, sd=sd, se=se, t=t, df=df, p=p,
                   ci_low=ci_low, ci_high=ci_high, dz=safe_ratio(mean, sd), confidence=confidence,
                   alternative=alternative, zero_sd=bool(zero_sd))
