"""The reading of one contrast under its preregistered kind (dense-rewards paper §2.3, §C.1).

Each plan fixes "how each possible outcome would be read"; these are the readings the analysis
gives a contrast from its (Holm-adjusted, where it belongs to a primary family) p-value and its
interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ._checks import Result, check_alpha, equivalence_bounds, positive_margin
from .power import _normalize_kind

GAIN, DEFICIT, INCONCLUSIVE = "gain", "deficit", "inconclusive"
EQUIVALENT, NOT_EQUIVALENT = "equivalent", "not shown equivalent"
NON_INFERIOR, NOT_NON_INFERIOR = "non-inferior", "not shown non-inferior"


@dataclass(slots=True, frozen=True)
class Verdict(Result):
    """A contrast's reading: ``reading`` is one of the labels above; ``shown`` is True for a gain,
    a deficit, equivalence or non-inferiority; ``reason`` says why in one line."""

    kind: str
    reading: str
    shown: bool
    p: float
    alpha: float
    reason: str


def _p(p: Any) -> float:
    v = float(p)
    if math.isnan(v) or not 0 <= v <= 1:
        raise ValueError(f"p must lie in [0, 1], got {p!r}")
    return v


def verdict(kind: str, *, p: float, estimate: float | None = None, ci_low: float | None = None,
            ci_high: float | None = None, margin: Any = None, alpha: float = 0.05) -> Verdict:
    """Read one contrast.

    - ``superiority``: ``p`` is the (Holm-adjusted) two-sided paired-t p. ``p < α`` reads as a
      *gain* or a *deficit* by the sign of ``estimate`` (or, without it, of the interval's
      centre); otherwise *inconclusive*.
    - ``equivalence``: ``p`` is the (adjusted) TOST p; *equivalent* when ``p < α`` and, if the
      1−2α interval and ``margin`` are given, the interval lies inside the bounds; otherwise
      *not shown equivalent*.
    - ``non-inferiority``: ``p`` is the (adjusted) one-sided p against ``−margin``;
      *non-inferior* when ``p < α`` and, if given, ``ci_low`` (lower end of the 90% interval)
      exceeds ``−margin`` — the paper's rule; otherwise *not shown non-inferior*.
    """
    kind = _normalize_kind(kind)
    alpha = check_alpha(alpha)
    pv = _p(p)
    sig = pv < alpha
    vs = f"{pv:.3g} < {alpha}" if sig else f"{pv:.3g} ≥ {alpha}"

    def out(reading: str, shown: bool, reason: str) -> Verdict:
        return Verdict(kind=kind, reading=reading, shown=shown, p=pv, alpha=alpha, reason=reason)

    if kind == "superiority":
        if estimate is not None:
            direction = float(estimate)
        elif ci_low is not None and ci_high is not None:
            lo, hi = float(ci_low), float(ci_high)
            direction = lo if math.isinf(hi) else hi if math.isinf(lo) else (lo + hi) / 2
        else:
            raise ValueError("a superiority verdict needs estimate or ci_low and ci_high for its direction")
        if sig and direction != 0:
            side = "above" if direction > 0 else "below"
            return out(GAIN if direction > 0 else DEFICIT, True, f"p = {vs}; estimate {side} zero")
        return out(INCONCLUSIVE, False, f"p = {vs}" + ("; estimate is zero" if sig else ""))
    if kind == "equivalence":
        why = ""
        if margin is not None and ci_low is not None and ci_high is not None:
            low, high = equivalence_bounds(margin)
            if not (low < float(ci_low) and float(ci_high) < high):
                why = f"; interval [{float(ci_low):.4g}, {float(ci_high):.4g}] not inside ({low:g}, {high:g})"
        if sig and not why:
            return out(EQUIVALENT, True, f"TOST p = {vs}")
        return out(NOT_EQUIVALENT, False, f"TOST p = {vs}{why}")
    # non-inferiority
    why = ""
    if ci_low is not None:
        if margin is None:
            raise ValueError("a non-inferiority verdict with ci_low needs margin")
        m = positive_margin(margin)
        if not float(ci_low) > -m:
            why = f"; lower bound {float(ci_low):.4g} ≤ −{m:g}"
    if sig and not why:
        return out(NON_INFERIOR, True, f"one-sided p = {vs}")
    return out(NOT_NON_INFERIOR, False, f"one-sided p = {vs}{why}")
