"""Minimal-effect test of paired differences: the effect lies outside the bounds (the opposite
of TOST; Murphy & Myors 1999, Lakens 2018 §"minimal effect tests", TOSTER ``hypothesis="MET"``)."""

from __future__ import annotations

import math
from typing import Any

from ._checks import check_alpha, deprecated, equivalence_bounds, paired_differences
from .equivalence import TwoOneSided, two_one_sided_test
from .paired import spread


def minimal_effect_paired(diff: Any, *, margin: Any, alpha: float = 0.05) -> TwoOneSided:
    """Two one-sided paired t-tests that the mean difference lies outside the bounds (``kind =
    "minimal-effect"``).

    ``margin=m`` means the bounds ``(−m, +m)``; a ``(low, high)`` pair gives asymmetric bounds.
    H0: ``low ≤ μ ≤ high`` against H1: ``μ < low`` or ``μ > high``. With ``se = s_d/√n`` on
    ``n−1`` df: ``p_lower = P(T ≤ (d̄ − low)/se)`` (below the lower bound), ``p_upper =
    P(T ≥ (d̄ − high)/se)`` (above the upper bound), ``p = min(p_lower, p_upper)``; ``holds``
    (``shown``) is ``p < α``, the same as the 1−2α interval ``d̄ ± t_{1−α}·se`` lying wholly
    outside the bounds (TOSTER's MET).
    """
    alpha = check_alpha(alpha)
    low, high = equivalence_bounds(margin)
    d, n_dropped = paired_differences(diff)
    sd = spread(d)
    return two_one_sided_test("minimal-effect", n=d.size, n_dropped=n_dropped, mean=float(d.mean()), sd=sd,
                              se=sd / math.sqrt(d.size), df=d.size - 1, low=low, high=high, alpha=alpha)


def minimal_effect_test(diff: Any, low: float, high: float | None = None, *, alpha: float = 0.05) -> TwoOneSided:
    """Deprecated name of :func:`minimal_effect_paired` with the bounds as positional arguments
    (``high=None``: ``low`` is the margin m); kept for one release."""
    deprecated("minimal_effect_test(diff, low, high)", "minimal_effect_paired(diff, margin=...)")
    return minimal_effect_paired(diff, margin=low if high is None else (low, high), alpha=alpha)


def __getattr__(name: str) -> Any:
    if name == "MinimalEffect":  # the old result type: one TwoOneSided for every two one-sided test
        deprecated("MinimalEffect", "TwoOneSided")
        return TwoOneSided
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
