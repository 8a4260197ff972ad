"""Aggregate metrics over runs × tasks with stratified bootstrap intervals, following rliable
(Agarwal et al. 2021, "Deep RL at the edge of the statistical precipice"; google-research/rliable
``metrics.py`` and ``library.py``): the interquartile mean, the probability of improvement and
performance profiles.

A task is a test set, level or model; a run is a seed. The stratified bootstrap resamples runs
with replacement independently within each task (rliable's ``StratifiedBootstrap``), and two
algorithms independently of each other (``StratifiedIndependentBootstrap``). Intervals are the
kit's non-interpolating percentiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._checks import Result, check_confidence, make_rng, positive_int
from .bootstrap_ci import Resamples


@dataclass(slots=True, frozen=True)
class Aggregate(Result):
    """An aggregate metric with its stratified-bootstrap interval; ``n_runs_y`` only for POI."""

    metric: str
    value: float
    ci_low: float
    ci_high: float
    confidence: float
    n_tasks: int
    n_runs: int
    n_runs_y: int | None
    n_resamples: int


@dataclass(slots=True, frozen=True)
class PerformanceProfile(Result):
    """Share of run × task scores above each threshold, with pointwise bootstrap intervals."""

    taus: tuple[float, ...]
    fraction: tuple[float, ...]
    ci_low: tuple[float, ...]
    ci_high: tuple[float, ...]
    confidence: float
    n_tasks: int
    n_runs: int
    n_resamples: int


def as_scores(x: Any, name: str) -> np.ndarray:
    """A complete runs × tasks float matrix (a 1-D array is one task)."""
    try:
        m = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numeric") from None
    if m.ndim == 1:
        m = m[:, None]
    if m.ndim != 2:
        raise ValueError(f"{name} must be a runs × tasks matrix, got shape {m.shape}")
    if not np.isfinite(m).all():
        bad = int((~np.isfinite(m)).sum())
        raise ValueError(f"{name} has {bad} NaN/infinite score(s); aggregates need every run of every task")
    if m.shape[0] < 2 or m.shape[1] < 1:
        raise ValueError(f"{name} needs at least 2 runs and 1 task, got {m.shape[0]} × {m.shape[1]}")
    return m


def _chunks(n_resamples: int, cells: int):
    chunk = max(1, (1 << 20) // max(1, cells))  # memory: chunk × cells draws
    for start in range(0, n_resamples, chunk):
        yield start, min(n_resamples, start + chunk)


def _stratified(m: np.ndarray, rows: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` stratified resamples of m: for every task its runs drawn with replacement."""
    r, t = m.shape
    idx = rng.integers(0, r, size=(rows, r, t))
    return m[idx, np.arange(t)[None, None, :]]


def _interval(stats: np.ndarray, confidence: float) -> tuple[float, float]:
    boot = Resamples(stats, None)
    a = (1.0 - confidence) / 2.0
    return boot.quantile(a), boot.quantile(1.0 - a)


def interquartile_mean(values: np.ndarray) -> np.ndarray:
    """25% trimmed mean along the last axis: ``int(N/4)`` values cut from each end of the N
    sorted ones, the rest averaged (``scipy.stats.trim_mean(…, 0.25)``)."""
    n = values.shape[-1]
    k = int(0.25 * n)
    s = np.sort(values, axis=-1)
    return s[..., k:n - k].mean(axis=-1)


def iqm(scores: Any, *, confidence: float = 0.95, n_resamples: int = 10_000, seed: Any = 0) -> Aggregate:
    """Interquartile mean of all run × task scores, with a stratified bootstrap interval.

    rliable's ``aggregate_iqm``: ``scipy.stats.trim_mean(scores, 0.25, axis=None)`` — the mean of
    the middle half of the pooled scores, robust to outlier runs and tasks yet using more data
    than the median. The interval comes from ``n_resamples`` stratified resamples (seeded).
    """
    confidence = check_confidence(confidence)
    n_resamples = positive_int(n_resamples, "n_resamples")
    m = as_scores(scores, "scores")
    rng = make_rng(seed)
    stats = np.empty(n_resamples)
    for start, stop in _chunks(n_resamples, m.size):
        stats[start:stop] = interquartile_mean(_stratified(m, stop - start, rng).reshape(stop - start, -1))
    lo, hi = _interval(stats, confidence)
    return Aggregate(metric="iqm", value=float(interquartile_mean(m.ravel())), ci_low=lo, ci_high=hi,
                     confidence=confidence, n_tasks=m.shape[1], n_runs=m.shape[0], n_runs_y=None,
                     n_resamples=n_resamples)


def _kernel(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``K[i, j] = [x_i > y_j] + ½·[x_i = y_j]`` (the Mann–Whitney kernel)."""
    return (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])


def _counts(rng: np.random.Generator, rows: int, k: int) -> np.ndarray:
    idx = rng.integers(0, k, size=(rows, k)) + (np.arange(rows) * k)[:, None]
    return np.bincount(idx.ravel(), minlength=rows * k).reshape(rows, k).astype(float)


def probability_of_improvement(x: Any, y: Any, *, confidence: float = 0.95, n_resamples: int = 10_000,
                               seed: Any = 0) -> Aggregate:
    """Average probability that a run of X beats a run of Y on the same task, with a stratified
    independent bootstrap interval.

    rliable's ``probability_of_improvement``: per task, ``P(X > Y) + ½·P(X = Y)`` over all
    run pairs, which is Mann–Whitney's ``U/(n·m)``; the value averages it over tasks. X (runs_x ×
    tasks) and Y (runs_y × tasks) may have different numbers of runs but must share the tasks.
    Each resample draws the runs of X and of Y independently within each task; with run counts
    ``c_x, c_y`` the resampled task probability is ``c_xᵀ K c_y / (n·m)`` (K the pairwise kernel),
    so no resampled matrices are built.
    """
    confidence = check_confidence(confidence)
    n_resamples = positive_int(n_resamples, "n_resamples")
    a, b = as_scores(x, "x"), as_scores(y, "y")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"x and y must cover the same tasks, got {a.shape[1]} and {b.shape[1]} columns")
    n, m, t = a.shape[0], b.shape[0], a.shape[1]
    kernels = [_kernel(a[:, j], b[:, j]) for j in range(t)]
    value = float(np.mean([k.mean() for k in kernels]))
    rng = make_rng(seed)
    stats = np.zeros(n_resamples)
    for start, stop in _chunks(n_resamples, (n + m) * t):
        rows = stop - start
        for k in kernels:
            cx, cy = _counts(rng, rows, n), _counts(rng, rows, m)
            stats[start:stop] += np.einsum("bj,bj->b", cx @ k, cy) / (n * m)
    stats /= t
    lo, hi = _interval(stats, confidence)
    return Aggregate(metric="probability_of_improvement", value=value, ci_low=lo, ci_high=hi,
                     confidence=confidence, n_tasks=t, n_runs=n, n_runs_y=m, n_resamples=n_resamples)


def performance_profile(scores: Any, taus: Any, *, confidence: float = 0.95, n_resamples: int = 2_000,
                        seed: Any = 0) -> PerformanceProfile:
    """Score distribution: for each threshold τ the share of run × task scores above it,
    ``F(τ) = mean(scores > τ)`` (rliable's ``run_score_deviation``, the default profile), with
    pointwise stratified-bootstrap intervals (rliable's default 2,000 resamples)."""
    confidence = check_confidence(confidence)
    n_resamples = positive_int(n_resamples, "n_resamples")
    m = as_scores(scores, "scores")
    tau = np.asarray(taus, dtype=float).reshape(-1)
    if tau.size == 0 or not np.isfinite(tau).all():
        raise ValueError("taus must be a non-empty list of finite thresholds")
    rng = make_rng(seed)
    stats = np.empty((n_resamples, tau.size))
    for start, stop in _chunks(n_resamples, m.size * tau.size):
        res = _stratified(m, stop - start, rng).reshape(stop - start, -1)
        stats[start:stop] = (res[:, :, None] > tau[None, None, :]).mean(axis=1)
    bounds = [_interval(stats[:, i], confidence) for i in range(tau.size)]
    return PerformanceProfile(taus=tuple(float(v) for v in tau),
                              fraction=tuple(float((m > v).mean()) for v in tau),
                              ci_low=tuple(b[0] for b in bounds), ci_high=tuple(b[1] for b in bounds),
                              confidence=confidence, n_tasks=m.shape[1], n_runs=m.shape[0], n_resamples=n_resamples)
