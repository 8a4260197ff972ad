"""p-value adjustment within a family: Holm (the papers' default, paper §2.3, §C.1) and its
relatives, Hochberg's and Hommel's step-up procedures and Benjamini–Hochberg's false-discovery rate."""

from __future__ import annotations

from typing import Any

import numpy as np

from .multiplicity import adjusted_in_order, holm_sorted


def _hochberg(p: np.ndarray) -> np.ndarray:
    """Sorted ascending: ``p̃_(i) = min_{j ≥ i} (m − j + 1)·p_(j)`` (Hochberg 1988)."""
    m = p.size
    return np.minimum.accumulate(((m - np.arange(m)) * p)[::-1])[::-1]


def _bh(p: np.ndarray) -> np.ndarray:
    """Sorted ascending: ``p̃_(i) = min_{j ≥ i} m·p_(j)/j`` (Benjamini & Hochberg 1995)."""
    m = p.size
    return np.minimum.accumulate((m * p / np.arange(1, m + 1))[::-1])[::-1]


def _hommel(p: np.ndarray) -> np.ndarray:
    """Sorted ascending: Hommel's (1988) closed procedure with Simes tests on every subfamily.

    For each subfamily size k = m…2, ``c_k = min_{j ≤ k} k·p_(m−k+j)/j`` (the Simes p of the k
    largest); the k largest are raised to at least ``c_k`` and every other to at least
    ``min(k·p_(i), c_k)`` (Wright 1992, the algorithm of R's ``p.adjust`` and statsmodels).
    """
    m = p.size
    a = p.copy()
    for k in range(m, 1, -1):
        c = float(np.min(k * p[m - k:] / np.arange(1, k + 1)))
        a[m - k:] = np.maximum(a[m - k:], c)
        a[: m - k] = np.maximum(a[: m - k], np.minimum(k * p[: m - k], c))
    return a


def adjust(pvalues: Any, method: str = "holm") -> np.ndarray:
    """Adjusted p-values of one family, in input order; reject ``p̃ < α``.

    ``holm`` (default; :func:`holm`) and ``hochberg``, ``hommel`` and ``bonferroni`` control the
    family-wise error at α — Hochberg and Hommel, uniformly more powerful than Holm, need the
    tests to be independent or positively dependent (Sarkar 1998); ``bh`` controls the false-
    discovery rate instead. NaNs stay NaN and do not count in the family; values outside [0, 1]
    are errors. All are capped at 1.
    """
    if method not in RULES:
        raise ValueError(f"method must be one of {', '.join(RULES)}; got {method!r}")
    return adjusted_in_order(pvalues, RULES[method])


# the adjustments by name, each on the sorted p-values of one family (holm: the papers' default)
RULES = {"holm": holm_sorted, "hochberg": _hochberg, "hommel": _hommel, "bh": _bh,
         "bonferroni": lambda p: p * p.size}
METHODS = tuple(RULES)
