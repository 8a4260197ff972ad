"""The extrapolation heuristic (dense-rewards paper §3.3, §C.3.2 "A heuristic extrapolation"): a reward
with per-token efficiency e is supposed to reach, after t tokens, the accuracy that outcome-only
GRPO reaches after e·t tokens, "read off outcome-only GRPO's curve on the same seed". The paper
calls it "a heuristic, not a derived prediction".

numpy only, no project imports: the core's extrapolation reading uses it.
"""

from __future__ import annotations

import numpy as np


def extrapolated_accuracy(tokens, accuracy, e: float, at_tokens) -> np.ndarray:
    """Outcome-only's curve (``tokens``, ``accuracy``: its evaluations, tokens increasing) read at
    e·t for each t in ``at_tokens`` by linear interpolation; NaN where e·t lies past the curve's last
    evaluation (or before its first)."""
    x, y = np.asarray(tokens, dtype=np.float64), np.asarray(accuracy, dtype=np.float64)
    t = np.asarray(at_tokens, dtype=np.float64)
    if x.ndim != 1 or x.shape != y.shape or x.size == 0:
        raise ValueError("the outcome-only curve needs one accuracy per evaluation")
    if np.any(np.diff(x) <= 0):
        raise ValueError("the outcome-only curve's tokens must increase")
    if not np.isfinite(e) or e <= 0:
        raise ValueError(f"the per-token efficiency e must be a positive number, got {e!r}")
    q = e * t
    out = np.interp(q, x, y)
    return np.where((q < x[0]) | (q > x[-1]), np.nan, out)
