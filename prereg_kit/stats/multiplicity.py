"""Holm's step-down adjustment within a preregistered primary family (paper §2.3, §C.1).

"Holm's correction applies within each study, not across studies": call :func:`holm` once per
family.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def holm(pvalues: Any) -> np.ndarray:
    """Holm-adjusted p-values, in input order.

    With the m non-NaN p-values sorted, ``p_(1) ≤ … ≤ p_(m)``, the adjusted value is
    ``p̃_(j) = min(1, max_{i ≤ j} (m − i + 1)·p_(i))`` (monotone step-down, capped at 1).
    NaNs stay NaN and are left out of the family (they do not count in m).
    Rejecting ``p̃ < α`` controls the family-wise error rate at α.
    """
    p = np.asarray(pvalues, dtype=float)
    if p.ndim != 1:
        p = p.reshape(-1) if p.ndim == 0 else p
        if p.ndim != 1:
            raise ValueError(f"pvalues must be one-dimensional, got shape {p.shape}")
    valid = ~np.isnan(p)
    pv = p[valid]
    if ((pv < 0) | (pv > 1)).any():
        raise ValueError("p-values must lie in [0, 1]")
    out = np.full(p.shape, np.nan)
    m = pv.size
    if m == 0:
        return out
    order = np.argsort(pv, kind="stable")
    factors = m - np.arange(m)
    adjusted = np.minimum(1.0, np.maximum.accumulate(factors * pv[order]))
    res = np.empty(m)
    res[order] = adjusted
    out[valid] = res
    return out
