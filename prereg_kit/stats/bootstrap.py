"""Bootstraps over seeds (paper H.2) and over seeds × problems (paper §2.3, §C.1).

Percentiles are non-interpolating (the inverse of the empirical CDF, numpy's
``"inverted_cdf"``): the q-quantile is the smallest resampled mean whose cumulative share reaches
q. This reproduces the paper's remark (H.2) that at n = 3 the 95% interval is the observed minimum
and maximum, since an all-one-seed resample has probability 3⁻³ = 0.037 > 0.025.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ._checks import (
    Result,
    check_confidence,
    equivalence_bounds,
    make_rng,
    paired_differences,
    positive_int,
    safe_ratio,
)
from .bootstrap_ci import METHODS, bca, studentized, weighted_quantile
from .paired import spread

#: Largest n enumerated exactly when ``exhaustive="auto"`` (paper H.2: every paired row with n ≤ 7).
EXHAUSTIVE_AUTO_MAX_N = 7
#: Largest n accepted with ``exhaustive=True`` (C(19, 10) = 92,378 distinct resamples).
EXHAUSTIVE_MAX_N = 10


@dataclass(slots=True, frozen=True)
class SeedBootstrap(Result):
    """Result of :func:`seed_bootstrap`.

    ``exhaustive`` says whether every one of the ``n**n`` equally likely resamples was enumerated
    (then ``n_resamples == n**n`` and ``n_distinct`` counts the distinct multisets); otherwise
    ``n_resamples`` Monte-Carlo resamples were drawn. ``p_tost``, ``p_tost_lower`` and
    ``p_tost_upper`` are set only when a margin was given. ``note`` says what a p of 0 means
    (:func:`zero_p_note`), None otherwise.
    """

    n: int
    n_dropped: int
    mean: float
    sd: float
    dz: float
    ci_low: float
    ci_high: float
    p: float
    confidence: float
    exhaustive: bool
    n_resamples: int
    n_distinct: int | None
    low: float | None
    high: float | None
    p_tost_lower: float | None
    p_tost_upper: float | None
    p_tost: float | None
    zero_sd: bool
    method: str = "percentile"
    note: str | None = None


@dataclass(slots=True, frozen=True)
class CrossedBootstrap(Result):
    """Result of :func:`crossed_bootstrap` (mean paired difference over seeds × problems)."""

    n_seeds: int
    n_problems: int
    mean: float
    ci_low: float
    ci_high: float
    p: float
    confidence: float
    n_resamples: int


# --------------------------------------------------------------------------- distribution helpers


def _summarize(means: np.ndarray, weights: np.ndarray | None, observed: float, confidence: float,
               zero_tol: float) -> tuple[float, float, float, np.ndarray, np.ndarray, int]:
    """Percentile interval and two-sided bootstrap p from a (weighted) set of resampled means."""
    order = np.argsort(means, kind="stable")
    values = means[order]
    w = np.ones(values.size, dtype=np.int64) if weights is None else weights[order]
    cum = np.cumsum(w)
    total = int(cum[-1])
    a = (1.0 - confidence) / 2.0
    lo = weighted_quantile(values, cum, total, a)
    hi = weighted_quantile(values, cum, total, 1.0 - a)
    # Twice the share of resampled means on the opposite side of zero (H.2); a mean at zero
    # (within float residue) counts as opposite, which keeps the p-value conservative.
    if observed > zero_tol:
        share = w[values <= zero_tol].sum() / total
    elif observed < -zero_tol:
        share = w[values >= -zero_tol].sum() / total
    else:
        share = 0.5
    return lo, hi, float(min(1.0, 2.0 * share)), values, w, total


@lru_cache(maxsize=EXHAUSTIVE_MAX_N + 1)
def multiset_resamples(n: int) -> tuple[np.ndarray, np.ndarray]:
    """All distinct bootstrap resamples of n items as (counts, weights).

    A resample is a multiset of n indices drawn with replacement; there are C(2n−1, n) of them,
    and the multiset with counts ``c_1..c_n`` arises from ``n!/∏ c_i!`` of the ``n**n`` ordered
    draws (its multinomial weight). Weights are exact integers summing to ``n**n``.
    """
    combos = np.fromiter(itertools.chain.from_iterable(itertools.combinations_with_replacement(range(n), n)),
                         dtype=np.int64)
    m = combos.size // n
    rows = np.repeat(np.arange(m, dtype=np.int64) * n, n)
    counts = np.bincount(rows + combos, minlength=m * n).reshape(m, n)
    fact = np.array([math.factorial(k) for k in range(n + 1)], dtype=np.int64)
    weights = fact[n] // np.prod(fact[counts], axis=1)
    counts.setflags(write=False)
    weights.setflags(write=False)
    return counts, weights


# --------------------------------------------------------------------------- seed bootstrap


def seed_bootstrap(
    differences: Any,
    *,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: Any = 0,
    exhaustive: bool | str = "auto",
    margin: Any = None,
    method: str = "percentile",
) -> SeedBootstrap:
    """Percentile bootstrap of the mean paired difference over seeds (paper H.2).

    Resamples the per-seed differences with replacement and takes the mean of each resample.
    The interval is the (1−confidence)/2 and (1+confidence)/2 inverse-CDF percentiles of the
    resampled means; the p-value is "twice the proportion of resampled means on the opposite side
    of zero" (capped at 1). With ``margin`` (±m or ``(low, high)``) the bootstrap TOST p is
    ``max(P*(mean* ≤ low), P*(mean* ≥ high))``, i.e. equivalence at α exactly when the 1−2α
    percentile interval lies inside the bounds.

    ``exhaustive="auto"`` enumerates all ``n**n`` resamples exactly when n ≤ 7 (H.2: "exhaustive
    enumeration … for the other paired rows with n ≤ 7"), as C(2n−1, n) multisets with
    multinomial weights; ``True`` forces it (n ≤ 10), ``False`` draws ``n_resamples`` with
    ``seed``. NaN differences are dropped (``n_dropped``).

    ``method="bca"`` or ``"studentized"`` replaces the percentile interval, p and TOST by the
    bias-corrected and accelerated or the bootstrap-t ones over the same resamples
    (:mod:`prereg_kit.stats.bootstrap_ci`); the default ``"percentile"`` is the paper's.
    """
    confidence = check_confidence(confidence)
    n_resamples = positive_int(n_resamples, "n_resamples")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    if exhaustive not in ("auto", True, False):
        raise ValueError(f"exhaustive must be 'auto', True or False, got {exhaustive!r}")
    bounds = equivalence_bounds(margin) if margin is not None else None
    x, n_dropped = paired_differences(differences)
    n = x.size
    if exhaustive is True and n > EXHAUSTIVE_MAX_N:
        raise ValueError(f"exhaustive enumeration supports n ≤ {EXHAUSTIVE_MAX_N}, got n = {n}")
    enumerate_all = exhaustive is True or (exhaustive == "auto" and n <= EXHAUSTIVE_AUTO_MAX_N)
    rng = make_rng(seed)  # validated even when enumeration makes it unused

    if enumerate_all:
        counts, weights = multiset_resamples(n)
        means = (counts / n) @ x  # a one-seed resample gives that seed exactly (n/n = 1)
        sq_means = (counts / n) @ (x * x) if method == "studentized" else None
        n_used, n_distinct = n**n, int(weights.size)
    else:
        means = np.empty(n_resamples)
        sq_means = np.empty(n_resamples) if method == "studentized" else None
        chunk = max(1, (1 << 20) // n)  # memory: chunk × n indices
        for start in range(0, n_resamples, chunk):
            stop = min(n_resamples, start + chunk)
            idx = rng.integers(0, n, size=(stop - start, n))
            means[start:stop] = x[idx].mean(axis=1)
            if sq_means is not None:
                sq_means[start:stop] = (x[idx] ** 2).mean(axis=1)
        weights, n_used, n_distinct = None, n_resamples, None

    observed = float(x.mean())
    zero_tol = 1e-12 * float(np.abs(x).max())
    lo, hi, p, values, w, total = _summarize(means, weights, observed, confidence, zero_tol)
    low = high = p_l = p_u = p_tost = None
    if bounds is not None:
        low, high = bounds
        p_l = float(w[values <= low + zero_tol].sum() / total)
        p_u = float(w[values >= high - zero_tol].sum() / total)
        p_tost = max(p_l, p_u)
    if method != "percentile":
        if method == "bca":
            lo, hi, p, p_l, p_u = bca(x, means, weights, confidence, bounds)
        else:
            lo, hi, p, p_l, p_u = studentized(x, means, sq_means, weights, confidence, bounds)
        p_tost = None if bounds is None else max(p_l, p_u)
    sd = spread(x)
    return SeedBootstrap(n=n, n_dropped=n_dropped, mean=observed, sd=sd, dz=safe_ratio(observed, sd),
                         ci_low=lo, ci_high=hi, p=p, confidence=confidence, exhaustive=enumerate_all,
                         n_resamples=n_used, n_distinct=n_distinct, low=low, high=high, p_tost_lower=p_l,
                         p_tost_upper=p_u, p_tost=p_tost, zero_sd=sd == 0, method=method,
                         note=zero_p_note(p, n, enumerate_all, n_used))


def zero_p_note(p: float, n: int, exhaustive: bool, n_resamples: int) -> str | None:
    """What a bootstrap p of 0 means, or None for any other p.

    p is twice the share of resampled means on the other side of zero, so it is 0 whenever no
    resample lands there. Enumerated exactly, that happens exactly when every difference has the
    same sign, and the next value p can take is ``2/n^n`` (one seed of the other sign, drawn n
    times): 0.5 at n = 2, 0.074 at n = 3. Drawn, it bounds p below ``2/B``.
    """
    if p != 0:
        return None
    if exhaustive:
        return (f"bootstrap p = 0 only says that all {n} differences have the same sign: over the {n}^{n} "
                f"equally likely resamples of {n} seeds the next value p can take is {2 / n**n:.2g}; "
                "it is not certainty")
    return (f"bootstrap p = 0: none of the {n_resamples:,} resampled means lies on the other side of zero; "
            f"read it as p < {2 / n_resamples:.2g}, not as certainty")


# --------------------------------------------------------------------------- crossed bootstrap


def _as_matrix(x: Any, name: str) -> np.ndarray:
    try:
        m = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numeric") from None
    if m.ndim != 2:
        raise ValueError(f"{name} must be a seeds × problems matrix, got shape {m.shape}")
    if not np.isfinite(m).all():
        bad = int((~np.isfinite(m)).sum())
        raise ValueError(f"{name} has {bad} NaN/infinite cell(s); the crossed bootstrap needs a complete matrix")
    return m


def crossed_differences(treatment: Any, control: Any = None) -> np.ndarray:
    """The seeds × problems matrix of paired differences, validated."""
    t = _as_matrix(treatment, "treatment" if control is not None else "differences")
    if control is not None:
        c = _as_matrix(control, "control")
        if c.shape != t.shape:
            raise ValueError(f"treatment and control have different shapes ({t.shape} vs {c.shape}); "
                             "rows are seeds and columns problems in both")
        t = t - c
    s, p = t.shape
    if s < 2 or p < 2:
        raise ValueError(f"need at least 2 seeds and 2 problems, got {s} × {p}")
    return t


def _counts_into(out: np.ndarray, rng: np.random.Generator, offsets: np.ndarray) -> None:
    """Fill ``out`` (rows × k) with bootstrap count vectors: how often each of k items is drawn in k draws.

    One ``integers`` call draws every row; the draws of row r are offset by r·k so that a
    ``bincount`` counts many rows at once. It counts half the rows per call: its result and the
    indices then stay under the size at which the allocator hands freed memory back to the
    system, so the next block reuses it without page faults.
    """
    rows, k = out.shape
    idx = rng.integers(0, k, size=(rows, k), dtype=np.int64)
    half = (rows + 1) // 2
    for a in range(0, rows, half):
        r = min(half, rows - a)
        part = idx[a:a + r]
        part += offsets[:r]
        out[a:a + r] = np.bincount(part.ravel(), minlength=r * k).reshape(r, k)


def crossed_means(d: np.ndarray, seed_counts: np.ndarray, problem_counts: np.ndarray) -> np.ndarray:
    """Mean of the resampled cells for each row of counts: ``a_bᵀ D b_b / (S·P)``.

    Drawing seeds ``i_1..i_S`` and problems ``j_1..j_P`` and averaging ``D[i, j]`` over the
    S×P resampled cells equals the count-weighted sum, so no resample × S × P array is built.
    ``problem_counts @ Dᵀ`` (one BLAS product, chunk × S) is dotted row-wise with the seed counts.
    """
    s, p = d.shape
    return np.einsum("bs,bs->b", seed_counts, problem_counts @ d.T) / (s * p)


#: Resamples per matrix product in :func:`crossed_bootstrap`: small enough that the block's count
#: matrices stay in cache and its buffers are reused without page faults, large enough for BLAS.
PRODUCT_ROWS = 64


@lru_cache(maxsize=1)
def _blas_controller() -> Any:
    """threadpoolctl's view of the BLAS libraries loaded (found once: finding them takes milliseconds)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return None
    return ThreadpoolController()


def _one_blas_thread() -> Any:
    """Context: BLAS on one thread, the caller's setting restored on exit.

    The products are 64 × P by P × S, too small to gain from threads; on shared cores a second
    BLAS thread waiting for a core made the bootstrap 1.2–13× slower (docs/performance.md).
    BLAS has one setting per process, so other threads' BLAS calls meanwhile run on one thread too.
    Without threadpoolctl installed nothing is limited.
    """
    ctl = _blas_controller()
    return contextlib.nullcontext() if ctl is None else ctl.limit(limits=1, user_api="blas")


def _crossed_resample_means(means: np.ndarray, d: np.ndarray, rng: np.random.Generator, chunk: int) -> None:
    """Fill ``means`` with ``a_bᵀ D b_b`` (the resampled sums, not yet divided by S·P).

    Per chunk the seed counts of all its resamples are drawn first, then its problem counts block
    by block; splitting one ``integers`` call into several consecutive ones of the same bound
    yields the same numbers, so the draws equal those of one call per chunk.
    """
    s, p = d.shape
    block = min(PRODUCT_ROWS, chunk)
    seed_counts = np.empty((chunk, s))
    problem_counts = np.empty((block, p))
    sums = np.empty((block, s))
    seed_offsets = (np.arange(block, dtype=np.int64) * s)[:, None]
    problem_offsets = (np.arange(block, dtype=np.int64) * p)[:, None]
    dt = d.T
    n = means.size
    for start in range(0, n, chunk):
        rows = min(chunk, n - start)
        for a in range(0, rows, block):
            _counts_into(seed_counts[a:a + min(block, rows - a)], rng, seed_offsets)
        for a in range(0, rows, block):
            r = min(block, rows - a)
            _counts_into(problem_counts[:r], rng, problem_offsets)
            np.matmul(problem_counts[:r], dt, out=sums[:r])
            np.einsum("bs,bs->b", seed_counts[a:a + r], sums[:r], out=means[start + a:start + a + r])


def crossed_bootstrap(
    treatment: Any,
    control: Any = None,
    *,
    n_resamples: int = 10_000,
    confidence: float = 0.95,
    seed: Any = 0,
    chunk_size: int | None = None,
) -> CrossedBootstrap:
    """Crossed seed-by-problem percentile bootstrap of the mean paired difference.

    Input: seeds × problems matrices of per-problem accuracy (each cell the mean over that
    problem's samples) for both arms, or one matrix of their differences ``D``. Each resample
    draws S seeds and P problems independently with replacement — the same indices for both
    arms, which keeps the pairing — and records the mean of ``D`` over the resampled cells.
    The paper (§2.3, §C.1) "resamples seeds and test problems together" as a robustness check
    of every primary contrast; it states neither the count nor the scheme, so this is the
    standard two-way (Brennan/Owen) bootstrap. Interval and p as in :func:`seed_bootstrap`.

    Vectorized: for each block of ``PRODUCT_ROWS`` resamples, seed and problem counts (one
    ``bincount`` each) and one matrix product, in buffers reused across blocks, so the cost is
    close to that of drawing the indices, counting them and the product alone
    (docs/performance.md). Seed indices are drawn for ``chunk_size`` resamples, then their problem
    indices; the default chunk keeps the draws (and so the results for a given seed) of earlier
    versions. Memory O(chunk × S + PRODUCT_ROWS × P + S × P). NaN cells are an error.
    """
    confidence = check_confidence(confidence)
    n_resamples = positive_int(n_resamples, "n_resamples")
    d = crossed_differences(treatment, control)
    s, p = d.shape
    if chunk_size is None:
        chunk_size = max(1, (1 << 20) // (s + p))  # the draw order of earlier versions
    chunk_size = positive_int(chunk_size, "chunk_size")
    rng = make_rng(seed)
    means = np.empty(n_resamples)
    with _one_blas_thread():
        _crossed_resample_means(means, d, rng, min(chunk_size, n_resamples))
    means /= s * p
    observed = float(d.mean())
    zero_tol = 1e-12 * float(np.abs(d).max())
    lo, hi, pval, *_ = _summarize(means, None, observed, confidence, zero_tol)
    return CrossedBootstrap(n_seeds=s, n_problems=p, mean=observed, ci_low=lo, ci_high=hi, p=pval,
                            confidence=confidence, n_resamples=n_resamples)


def _crossed_bootstrap_loop(treatment: Any, control: Any = None, *, n_resamples: int = 10_000,
                            confidence: float = 0.95, seed: Any = 0) -> CrossedBootstrap:
    """Plain-loop reference for :func:`crossed_bootstrap` (tests and benchmark only; slow)."""
    confidence = check_confidence(confidence)
    t = _as_matrix(treatment, "treatment")
    c = _as_matrix(control, "control") if control is not None else np.zeros_like(t)
    s, p = t.shape
    rng = make_rng(seed)
    means = np.empty(n_resamples)
    for b in range(n_resamples):
        si = rng.integers(0, s, size=s)
        pj = rng.integers(0, p, size=p)
        means[b] = t[np.ix_(si, pj)].mean() - c[np.ix_(si, pj)].mean()
    observed = float((t - c).mean())
    lo, hi, pval, *_ = _summarize(means, None, observed, confidence, 1e-12 * float(np.abs(t - c).max()))
    return CrossedBootstrap(n_seeds=s, n_problems=p, mean=observed, ci_low=lo, ci_high=hi, p=pval,
                            confidence=confidence, n_resamples=n_resamples)
