"""Unbiased pass@k estimator (paper §C.6.7; Chen et al., 2021)."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import binom, gammaln


def pass_at_k(n: Any, c: Any, k: Any) -> np.ndarray | float:
    """Unbiased pass@k from n samples of which c are correct: ``1 − C(n−c, k)/C(n, k)``.

    Vectorized over broadcastable ``n, c, k`` (integers with ``0 ≤ c ≤ n`` and ``1 ≤ k ≤ n``).
    The paper averages it over problems with n = 8 samples and reports the paired difference at
    B; pass@n is 1 if any sample is correct. The ratio is taken of floating binomial
    coefficients (exact for c = 0, so pass@k is then exactly 0), falling back to
    ``exp(lnΓ(n−c+1) + lnΓ(n−k+1) − lnΓ(n−c−k+1) − lnΓ(n+1))`` where they overflow (n ≳ 1000).
    Returns a float for scalar input.
    """
    n_a, c_a, k_a = (np.asarray(v) for v in (n, c, k))
    for name, arr in (("n", n_a), ("c", c_a), ("k", k_a)):
        if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "f" and np.all(arr == np.round(arr))):
            raise ValueError(f"{name} must hold integers")
    n_a, c_a, k_a = np.broadcast_arrays(n_a.astype(np.int64), c_a.astype(np.int64), k_a.astype(np.int64))
    if (c_a < 0).any() or (c_a > n_a).any():
        raise ValueError("need 0 ≤ c ≤ n")
    if (k_a < 1).any() or (k_a > n_a).any():
        raise ValueError("need 1 ≤ k ≤ n")
    fail_all = n_a - c_a >= k_a  # some k-subset has no correct sample
    m = np.where(fail_all, n_a - c_a - k_a, 0)
    with np.errstate(over="ignore", invalid="ignore"):
        ratio = binom(n_a - c_a, k_a) / binom(n_a, k_a)
    overflow = ~np.isfinite(ratio)
    if overflow.any():
        log_ratio = gammaln(n_a - c_a + 1.0) + gammaln(n_a - k_a + 1.0) - gammaln(m + 1.0) - gammaln(n_a + 1.0)
        ratio = np.where(overflow, np.exp(np.where(fail_all, log_ratio, -np.inf)), ratio)
    out = np.where(fail_all, 1.0 - ratio, 1.0)
    out = np.where(c_a == 0, 0.0, out)  # no correct sample: exactly 0, whatever the float path
    return float(out) if out.ndim == 0 else out
