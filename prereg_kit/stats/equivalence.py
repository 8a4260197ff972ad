"""Equivalence (TOST) and non-inferiority on paired differences (paper §2.3, §C.1).

The paper: "two one-sided tests for equivalence within ±0.02 (±0.01 in S28 and S31–S33)";
"Non-inferiority means that the lower bound of the 90% interval exceeds −0.02."
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ._checks import (
    Result,
    check_alpha,
    deprecated,
    equivalence_bounds,
    paired_differences,
    positive_margin,
    safe_ratio,
)
from .paired import spread
from .tdist import t_cdf, t_ppf, t_sf

TWO_ONE_SIDED_KINDS = ("equivalence", "minimal-effect")


@dataclass(slots=True, frozen=True)
class TwoOneSided(Result):
    """Two one-sided t-tests of a mean difference against the bounds ``(low, high)``.

    ``kind`` ``"equivalence"`` (TOST; H0: the mean lies outside the bounds, ``p = max(p_lower,
    p_upper)``) or ``"minimal-effect"`` (H0: it lies inside, ``p = min``); ``holds`` is ``p < α``
    (equivalent within the bounds, or an effect shown outside them); ``ci_low, ci_high`` is the
    1−2α interval. The result of :func:`tost_paired`, :func:`tost_from_stats`,
    :func:`~prereg_kit.stats.welch.tost_welch` and
    :func:`~prereg_kit.stats.minimal_effect.minimal_effect_paired`; a Welch result has ``n = n₁ + n₂``,
    ``df`` the Welch–Satterthwaite df and no single ``sd`` (``None``).
    """

    kind: str
    n: int
    n_dropped: int
    mean: float
    sd: float | None
    se: float
    df: float
    low: float
    high: float
    t_lower: float
    t_upper: float
    p_lower: float
    p_upper: float
    p: float
    ci_low: float
    ci_high: float
    alpha: float
    holds: bool
    zero_sd: bool

    @property
    def equivalent(self) -> bool:
        """An equivalence test that holds: the 1−2α interval inside the bounds."""
        return self.kind == "equivalence" and self.holds

    @property
    def shown(self) -> bool:
        """A minimal-effect test that holds: the 1−2α interval wholly outside the bounds."""
        return self.kind == "minimal-effect" and self.holds

    def to_dict(self) -> dict[str, Any]:
        """The fields, with the decision also under its name for the kind (``equivalent`` or
        ``shown``), as the tables and frames of these tests have always shown it."""
        out = Result.to_dict(self)
        out["equivalent" if self.kind == "equivalence" else "shown"] = self.holds
        return out


def two_one_sided_test(kind: str, *, n: int, n_dropped: int, mean: float, sd: float | None, se: float, df: float,
                       low: float, high: float, alpha: float) -> TwoOneSided:
    """The two one-sided t-tests of ``kind`` for a mean with standard error ``se`` on ``df`` degrees
    of freedom: equivalence ``p_lower = P(T ≥ (mean − low)/se)``, ``p_upper = P(T ≤ (mean − high)/se)``,
    ``p`` their maximum; minimal effect the opposite tails, ``p`` their minimum; the 1−2α interval
    ``mean ± t_{1−α, df}·se`` (shared by the paired and the Welch tests)."""
    if kind not in TWO_ONE_SIDED_KINDS:
        raise ValueError(f"kind must be one of {TWO_ONE_SIDED_KINDS}, got {kind!r}")
    t_lower, t_upper = safe_ratio(mean - low, se), safe_ratio(mean - high, se)
    if kind == "equivalence":
        p_lower, p_upper = t_sf(t_lower, df), t_cdf(t_upper, df)
        p = max(p_lower, p_upper)
    else:
        p_lower, p_upper = t_cdf(t_lower, df), t_sf(t_upper, df)
        p = min(p_lower, p_upper)
    half = t_ppf(1.0 - alpha, df) * se
    zero = se == 0 if sd is None else sd == 0
    return TwoOneSided(kind=kind, n=n, n_dropped=n_dropped, mean=mean, sd=sd, se=se, df=df, low=low, high=high,
                       t_lower=t_lower, t_upper=t_upper, p_lower=p_lower, p_upper=p_upper, p=p,
                       ci_low=mean - half, ci_high=mean + half, alpha=alpha, holds=bool(p < alpha),
                       zero_sd=bool(zero))


@dataclass(slots=True, frozen=True)
class NonInferiority(Result):
    """Result of :func:`noninferiority_paired`; ``lower`` is the lower end of the 1−2α interval."""

    n: int
    n_dropped: int
    mean: float
    sd: float
    se: float
    df: int
    margin: float
    t: float
    p: float
    lower: float
    alpha: float
    holds: bool
    zero_sd: bool


def tost_from_stats(n: int, mean: float, sd: float, *, margin: Any, alpha: float = 0.05,
                    n_dropped: int = 0) -> TwoOneSided:
    """:func:`tost_paired` from ``n``, the mean and the SD of the differences."""
    alpha = check_alpha(alpha)
    low, high = equivalence_bounds(margin)
    if n < 2:
        raise ValueError(f"need at least 2 pairs, got {n}")
    return two_one_sided_test("equivalence", n=n, n_dropped=n_dropped, mean=mean, sd=sd, se=sd / math.sqrt(n),
                              df=n - 1, low=low, high=high, alpha=alpha)


def tost_paired(treatment: Any, control: Any = None, *, margin: Any, alpha: float = 0.05) -> TwoOneSided:
    """Two one-sided paired t-tests for equivalence within ``(low, high)``.

    ``margin=m`` means the bounds ``(−m, +m)``; a ``(low, high)`` pair gives asymmetric bounds.
    With ``se = s_d/√n`` and ``df = n−1``:
    ``p_lower = P(T ≥ (d̄ − low)/se)`` (H0: μ ≤ low), ``p_upper = P(T ≤ (d̄ − high)/se)``
    (H0: μ ≥ high), ``p = max(p_lower, p_upper)``; ``equivalent`` is ``p < α``, which is the
    same as the 1−2α interval ``d̄ ± t_{1−α, n−1}·se`` lying inside the bounds (paper §C.1:
    equivalence at .05 ⇔ the 90% interval inside ±margin).
    """
    alpha = check_alpha(alpha)
    equivalence_bounds(margin)
    d, n_dropped = paired_differences(treatment, control)
    return tost_from_stats(d.size, float(d.mean()), spread(d), margin=margin, alpha=alpha,
                           n_dropped=n_dropped)


def noninferiority_from_stats(n: int, mean: float, sd: float, *, margin: float, alpha: float = 0.05,
                              n_dropped: int = 0) -> NonInferiority:
    """:func:`noninferiority_paired` from ``n``, the mean and the SD of the differences."""
    alpha = check_alpha(alpha)
    m = positive_margin(margin)
    if n < 2:
        raise ValueError(f"need at least 2 pairs, got {n}")
    df = n - 1
    se = sd / math.sqrt(n)
    t = safe_ratio(mean + m, se)
    p = t_sf(t, df)
    lower = mean - t_ppf(1.0 - alpha, df) * se
    return NonInferiority(n=n, n_dropped=n_dropped, mean=mean, sd=sd, se=se, df=df, margin=m, t=t, p=p,
                          lower=lower, alpha=alpha, holds=bool(lower > -m), zero_sd=bool(sd == 0))


def noninferiority_paired(treatment: Any, control: Any = None, *, margin: float, alpha: float = 0.05) -> NonInferiority:
    """One-sided paired t-test of H0: μ ≤ −margin (the paper's "NI at −0.02", §C.1).

    ``t = (d̄ + margin)/se`` on ``n−1`` df, ``p = P(T ≥ t)``; ``lower = d̄ − t_{1−α, n−1}·se``
    is the lower end of the 1−2α (90% at α=.05) interval, and ``holds`` is ``lower > −margin``
    — the paper's rule, equivalent to ``p < α``.
    """
    alpha = check_alpha(alpha)
    positive_margin(margin)
    d, n_dropped = paired_differences(treatment, control)
    return noninferiority_from_stats(d.size, float(d.mean()), spread(d), margin=margin, alpha=alpha,
                                     n_dropped=n_dropped)


def noninferiority(treatment: Any, control: Any = None, *, margin: float, alpha: float = 0.05) -> NonInferiority:
    """Deprecated name of :func:`noninferiority_paired` (kept for one release)."""
    deprecated("noninferiority", "noninferiority_paired")
    return noninferiority_paired(treatment, control, margin=margin, alpha=alpha)


def __getattr__(name: str) -> Any:
    if name == "Tost":  # the old result type: one TwoOneSided for every two one-sided test
        deprecated("Tost", "TwoOneSided")
        return TwoOneSided
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
