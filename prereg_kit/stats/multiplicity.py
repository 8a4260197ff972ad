"""Holm's step-down adjustment within a preregistered primary family (paper §2.3, §C.1).

"Holm's correction applies within each study, not across studies": call :func:`holm` once per
family.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


def holm(pvalues: Any) -> np.ndarray:
    """Holm-adjusted p-values, in input order.

    With the m non-NaN p-values sorted, ``p_(1) ≤ … ≤ p_(m)``, the adjusted value is
    ``p̃_(j) = min(1, max_{i ≤ j} (m − i + 1)·p_(i))`` (monotone step-down, capped at 1).
    NaNs stay NaN and are left out of the family (they do not count in m).
    Rejecting ``p̃ < α`` controls the family-wise error rate at α.
    """
    return adjusted_in_order(pvalues, holm_sorted)


def holm_sorted(p: np.ndarray) -> np.ndarray:
    """Sorted ascending: ``p̃_(j) = max_{i ≤ j} (m − i + 1)·p_(i)`` (Holm 1979)."""
    return np.maximum.accumulate((p.size - np.arange(p.size)) * p)


def adjusted_in_order(pvalues: Any, rule: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """A family's adjusted p-values in input order: ``rule`` maps the sorted non-NaN p-values to
    their adjusted values, which are capped at 1; NaNs stay NaN and do not count in the family;
    values outside [0, 1] or a non-vector are errors."""
    p = np.asarray(pvalues, dtype=float)
    p = p.reshape(-1) if p.ndim == 0 else p
    if p.ndim != 1:
        raise ValueError(f"pvalues must be one-dimensional, got shape {p.shape}")
    valid = ~np.isnan(p)
    pv = p[valid]
    if ((pv < 0) | (pv > 1)).any():
        raise ValueError("p-values must lie in [0, 1]")
    out = np.full(p.shape, np.nan)
    if pv.size == 0:
        return out
    order = np.argsort(pv, kind="stable")
    res = np.empty(pv.size)
    res[order] = np.minimum(1.0, rule(pv[order]))
    out[valid] = res
    return out
