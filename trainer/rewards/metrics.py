"""Sample-level metrics of the multi-reward studies (multi-reward paper §4.7; P2:L29-31, L101-113)
that the run-log readings do not compute (pass@k, accuracy relative to the R_P-only reference and
the collapse flag are ``prereg_kit.readings``'s: ``pass@K``, ``relative_accuracy_curves``,
``metric="collapse"``).

* Auxiliary rates: each channel's mean over all samples (short-response rate, negative-answer
  rate, fast rate) and its joint rate with the primary channel (correct-and-short, ...).
* Code latency (P2:L35, L113): "fast" at evaluation means correct and T < T_ref, the reference
  timed under the same judge; mean latencies exclude timeouts.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["aux_rates", "faster_than_reference", "mean_latency"]


def aux_rates(scores: np.ndarray, names: Sequence[str], *, primary: str | None = None) -> dict[str, float]:
    """Every channel's rate and, for each auxiliary channel, its joint rate with the primary.

    ``scores`` is (samples, K) of 0/1 (``channels.score_channels`` output); ``primary`` names
    the primary channel (default: the first). Keys: ``<name>`` and ``<primary>_and_<name>``
    (e.g. ``brief``, ``correct_and_brief``; the paper's short and correct-and-short rates).
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[1] != len(names):
        raise ValueError(f"scores must have shape (samples, {len(names)}), got {s.shape}")
    p_name = primary if primary is not None else names[0]
    if p_name not in names:
        raise ValueError(f"primary channel {p_name!r} is not among {list(names)}")
    p = s[:, list(names).index(p_name)]
    out: dict[str, float] = {}
    for k, name in enumerate(names):
        out[name] = float(s[:, k].mean()) if len(s) else float("nan")
        if name != p_name:
            out[f"{p_name}_and_{name}"] = float((p * s[:, k]).mean()) if len(s) else float("nan")
    return out


def mean_latency(cpu_seconds: Sequence[float], timed_out: Sequence[bool]) -> float:
    """Mean T over programs that did not time out (the paper's latencies exclude timeouts)."""
    t = np.asarray(cpu_seconds, dtype=np.float64)
    keep = ~np.asarray(timed_out, dtype=bool)
    return float(t[keep].mean()) if keep.any() else float("nan")


def faster_than_reference(results: Sequence[object], reference_cpu_seconds: Sequence[float] | float) -> np.ndarray:
    """Per program: correct and T < T_ref, a timeout never fast (evaluation "fast", P2:L35).

    ``results`` are ``sandbox.ProgramResult`` values (or anything with ``passed``,
    ``timed_out`` and ``max_cpu_seconds``); the reference is one T_ref per program or one for all.
    """
    ref = np.broadcast_to(np.asarray(reference_cpu_seconds, dtype=np.float64), (len(results),))
    return np.array([bool(r.passed) and not bool(r.timed_out) and r.max_cpu_seconds < t  # type: ignore[attr-defined]
                     for r, t in zip(results, ref)], dtype=bool)

