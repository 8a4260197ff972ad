"""The equivalence and non-inferiority margin, read one way everywhere.

A plan's margin is a positive number ``m`` (the bounds ``−m`` and ``+m``: TOST equivalence inside
them, non-inferiority above ``−m``; dense-rewards paper C.1) or an asymmetric pair
``[low, high]``. Everything that reads a margin — plan validation, the statistics, the analysis,
the report and the registry recheck — turns it into bounds here.
"""

from __future__ import annotations

import math
from typing import Any


def _is_scalar(v: Any) -> bool:
    """``numpy.ndim(v) == 0``, without importing numpy (this module is read by every command):
    arrays and numpy scalars by their ``ndim``; lists and tuples are sequences; anything else a scalar."""
    nd = getattr(v, "ndim", None)
    if nd is not None:
        return nd == 0
    return not isinstance(v, (list, tuple))


def margin_bounds(margin: Any) -> tuple[float, float]:
    """``margin`` as equivalence bounds ``(low, high)``: a positive number ``m`` means ``(−m, +m)``."""
    if margin is None:
        raise ValueError("margin is required")
    if _is_scalar(margin):
        m = float(margin)
        if not math.isfinite(m) or m <= 0:
            raise ValueError(f"margin must be a positive number, got {margin!r}")
        return -m, m
    try:
        low, high = (float(v) for v in margin)
    except (TypeError, ValueError):
        raise ValueError(f"margin must be a positive number or a (low, high) pair, got {margin!r}") from None
    if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
        raise ValueError(f"equivalence bounds must satisfy low < high, got ({low!r}, {high!r})")
    return low, high


def noninferiority_margin(margin: Any) -> float:
    """The non-inferiority margin ``m > 0`` of ``margin`` (the bound is ``−m``): the number itself,
    or ``−low`` of a ``[low, high]`` pair."""
    low, _ = margin_bounds(margin)
    return positive_margin(-low)


def positive_margin(margin: Any) -> float:
    """A non-inferiority margin given as one positive number (the bound is ``−margin``)."""
    if margin is None or not _is_scalar(margin):
        raise ValueError(f"margin must be a positive number, got {margin!r}")
    m = float(margin)
    if not math.isfinite(m) or m <= 0:
        raise ValueError(f"margin must be a positive number, got {margin!r}")
    return m


def plan_margin(margin: Any) -> Any:
    """Check a plan's margin as written (a number > 0, or ``[low, high]`` with low < 0 < high) and
    return it unchanged; the messages name what the plan must hold."""
    if margin is None:
        return margin
    if isinstance(margin, list):
        if len(margin) != 2 or not (margin[0] < 0 < margin[1]):
            raise ValueError("an asymmetric margin is [low, high] with low < 0 < high")
    elif margin <= 0:
        raise ValueError(f"a margin must be > 0 (it is read as ±margin), got {margin}")
    return margin
