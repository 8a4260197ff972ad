"""Group-sequential boundaries for the paired (one-sample) t statistic, at each look's own degrees
of freedom: the two-sided ``|T_k|`` a look must reach so that the chance of ever crossing under H0
is the α-spending function's α, however few units each look has.

Why not the z boundaries. :mod:`.sequential` computes boundaries for statistics that are normal
with Brownian-motion correlation. A paired t on n units is not: comparing its p with the nominal p
``2·(1 − Φ(z_k))`` of a z boundary (the "significance level approach", Jennison & Turnbull 2000,
§11.2) gets each look's marginal level right but not the looks' joint law, since each look
estimates σ afresh from few units. With 2 to 4 seeds per look the family-wise error exceeds α
(up to 0.057 at α = .05 over 400,000 null studies per design; ``benchmarks/sequential_t_error.py``,
docs/statistics.md).

The law used here. With paired normal differences under H0 the statistics
``T_k = √n_k·x̄_k / s_k`` at the looks' unit counts ``n_1 < … < n_K`` are scale invariant, so
their joint law depends on the n's alone (σ = 1 below). Look k's boundary ``c_k`` solves
``P(|T_j| < c_j for j < k, |T_k| ≥ c_k) = α(t_k) − α(t_{k−1})`` with ``t_k = n_k/n_K`` and the
Lan–DeMets spending function α(t) of :func:`.sequential.spending_function`; the non-binding
futility rule of the looks does not enter (ignoring it keeps α). Look 1 is exact in closed form:
``c_1 = t_{n_1−1}`` upper quantile at ``α(t_1)/2``. Later looks are solved on a seeded Monte-Carlo
sample of the looks' joint law, drawn from the sufficient statistics block by block: a block of m
new units adds its sum ``√m·Z`` and its own sum of squares about its mean ``W ~ χ²_{m−1}``,
independent of each other and of the past (Cochran's theorem), and the running sum of squares
about the mean updates as ``SS' = SS + W + (n·m/(n + m))·(x̄ − ȳ)²`` (Chan, Golub & LeVeque 1983),
so a look costs two draws per path whatever its unit count. ``c_k`` is the value with exactly
``round((α(t_k) − α(t_{k−1}))·N)`` of the N paths that reach look k at or above it.

Error. Each boundary's crossing probability is then a binomial estimate from N paths: the
family-wise error of the boundaries is α up to a Monte-Carlo error with standard deviation at most
``√((α − α(t_1))·(1 − α)/N)`` (look 1 is exact), 0.00015 at α = .05 with the default N = 2²¹;
``mc_se`` reports it. An exact computation by recursive numerical integration over the
two-dimensional state (sum, sum of squares) exists (Jennison & Turnbull 1991, "Exact calculations
for sequential t, χ² and F tests", Biometrika 78:133–141); the simulation is chosen here because
its error is known in closed form, the same for every design, and needs no grid tuning for
increments of a single unit (whose sum-of-squares kernel is degenerate). The sample is a
deterministic function of the design, ``n_paths`` and ``seed`` (numpy's PCG64 stream drawn in
float64 in fixed chunks, kept as float32), so an analysis reproduces its boundaries; a design's
sample takes about 0.2 s per look and is kept for the next call (``functools.lru_cache``), as are
the boundaries of each α.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from ._checks import Result, check_alpha, positive_int
from .sequential import SPENDING, spending_function
from .tdist import t_isf, t_sf

#: Monte-Carlo paths behind every boundary after look 1 (binomial SD of the error ≤ 0.00015 at α = .05).
N_PATHS = 1 << 21
#: The seed of the sample: the boundaries are a fixed function of the design.
SEED = 20261207
#: Paths drawn at a time (bounds the working memory; part of the stream's definition).
CHUNK = 1 << 17


@dataclass(slots=True, frozen=True)
class SequentialTBoundaries(Result):
    """Result of :func:`sequential_t_boundaries`, one entry per look.

    ``t`` is the two-sided boundary on the t scale (stop when ``|T_k| ≥ t_k``; ``inf`` where the
    look spends nothing), ``df`` the look's degrees of freedom ``n_k − 1``, ``nominal_p`` the
    two-sided fixed-sample t p-value it corresponds to (``2·P(T_{df_k} ≥ t_k)``: a look stops when
    its ordinary paired-t p is at most this), ``cumulative_alpha`` ``α(t_k)``, ``alpha_spent`` its
    increments; ``n_paths`` and ``seed`` name the Monte-Carlo sample and ``mc_se`` the binomial SD
    of the family-wise error it leaves.
    """

    spending: str
    alpha: float
    rho: float | None
    units: tuple[int, ...]
    information: tuple[float, ...]
    df: tuple[int, ...]
    t: tuple[float, ...]
    nominal_p: tuple[float, ...]
    cumulative_alpha: tuple[float, ...]
    alpha_spent: tuple[float, ...]
    n_paths: int
    seed: int
    mc_se: float


def _units(units: Any) -> tuple[int, ...]:
    try:
        out = tuple(positive_int(u, "units", 2) for u in units)
    except TypeError:
        raise ValueError(f"units must be a sequence of unit counts, got {units!r}") from None
    if not out:
        raise ValueError("units must name at least one look")
    if any(b <= a for a, b in zip(out, out[1:])):
        raise ValueError(f"units must be strictly increasing, got {list(out)}")
    return out


@lru_cache(maxsize=2)
def _sample(units: tuple[int, ...], n_paths: int, seed: int) -> np.ndarray:
    """``|T_k|`` of ``n_paths`` null paths (rows) at the looks (columns), read-only float32."""
    rng = np.random.default_rng(seed)
    out = np.empty((n_paths, len(units)), dtype=np.float32, order="F")  # a look's column is contiguous
    for a in range(0, n_paths, CHUNK):
        m = min(n_paths, a + CHUNK) - a
        s = ss = np.zeros(m)
        prev = 0
        for k, n in enumerate(units):
            block = n - prev
            b = rng.standard_normal(m) * math.sqrt(block)  # the block's sum
            # χ²_{m−1} in float64: float32 draws put a visible atom at 0 for m = 2 (a uniform's 2⁻²⁴ grid)
            w = 2.0 * rng.standard_gamma((block - 1) / 2.0, m) if block > 1 else 0.0
            ss = ss + w + (prev * block / n) * (s / prev - b / block) ** 2 if prev else w
            s = s + b
            prev = n
            out[a:a + m, k] = np.abs(s) / np.sqrt(ss * (n / (n - 1)))
    out.flags.writeable = False
    return out


def t_look_sample(units: Any, n_paths: int = N_PATHS, seed: int = SEED) -> np.ndarray:
    """``|T_k|``, the two-sided paired-t statistics at unit counts ``units``, of ``n_paths``
    simulated null studies (rows; columns the looks), drawn from the sufficient statistics as the
    module says. Read-only; the same arrays for the same arguments."""
    return _sample(_units(units), positive_int(n_paths, "n_paths"), int(seed))


def _spent(units: tuple[int, ...], alpha: float, spending: str, rho: float) -> tuple[np.ndarray, np.ndarray]:
    cum = spending_function(np.asarray(units, dtype=float) / units[-1], alpha, spending, rho)
    cum[-1] = alpha  # α(1) = α exactly, whatever the rounding of the spending function
    return cum, np.diff(np.concatenate([[0.0], cum]))


def _first(spent: float, n: int) -> float:
    return t_isf(spent / 2.0, n - 1) if spent > 1e-15 else math.inf


@lru_cache(maxsize=4096)
def _boundaries(units: tuple[int, ...], alpha: float, spending: str, rho: float, n_paths: int, seed: int,
                upto: int) -> tuple[float, ...]:
    """The boundaries of looks 1..``upto`` (look 1 needs no sample)."""
    _, spent = _spent(units, alpha, spending, rho)
    c = [_first(spent[0], units[0])]
    if upto > 1:
        a = _sample(units, n_paths, seed)
        alive = a[:, 0] < c[0]
        for k in range(1, upto):
            vals = a[alive, k]
            r = int(round(spent[k] * n_paths))
            if r <= 0:
                ck = math.inf
            elif r >= vals.size:
                ck = 0.0
            else:  # the r-th largest: exactly r of the paths still going reach it
                j = vals.size - r
                ck = float(np.partition(vals, j)[j])
            c.append(ck)
            if k + 1 < upto:
                alive &= a[:, k] < ck
    return tuple(c)


def _check(units: Any, alpha: float, spending: str, rho: float, n_paths: int) -> tuple[tuple[int, ...], float, int]:
    u = _units(units)
    alpha = check_alpha(alpha)
    if spending not in SPENDING:
        raise ValueError(f"spending must be one of {', '.join(SPENDING)}; got {spending!r}")
    if spending == "power" and not (isinstance(rho, (int, float)) and rho > 0 and math.isfinite(rho)):
        raise ValueError(f"rho must be a positive number, got {rho!r}")
    return u, alpha, positive_int(n_paths, "n_paths", 1000)


def t_look_nominal_p(units: Any, alpha: float, look: int, spending: str = "obrien-fleming", *, rho: float = 2.0,
                     n_paths: int = N_PATHS, seed: int = SEED) -> float:
    """``nominal_p[look − 1]`` of :func:`sequential_t_boundaries` (look 1-based), computing only
    the looks up to ``look`` (look 1 in closed form, without the sample)."""
    u, alpha, n_paths = _check(units, alpha, spending, rho, n_paths)
    c = _boundaries(u, alpha, spending, float(rho), n_paths, int(seed), look)[look - 1]
    return min(1.0, 2.0 * t_sf(c, u[look - 1] - 1))


def t_repeated_alpha(t: float, units: Any, look: int, spending: str = "obrien-fleming", *, rho: float = 2.0,
                     n_paths: int = N_PATHS, seed: int = SEED) -> float:
    """The repeated p-value (Jennison & Turnbull 2000, §9.1) of a paired t statistic ``t`` at look
    ``look``: the smallest total α whose look boundary of :func:`sequential_t_boundaries` ``|t|``
    reaches (1 when none below one half does). At look 1 it solves ``α(t_1) = 2·P(T_{n_1−1} ≥ |t|)``;
    later, on the sample, the smallest α at which fewer than ``r = round(α-spent·N)`` of the paths
    still going at the look lie above ``|t|`` (so ``|t| ≥ c_look``), found by regula falsi with
    bisection steps to a relative 1e-7. The sample resolves α only down to about ``1/N``
    of a look's increment."""
    u, _, n_paths = _check(units, 0.05, spending, rho, n_paths)
    x, rho, seed = abs(float(t)), float(rho), int(seed)
    if math.isnan(x):
        return math.nan
    k = look - 1

    def excess(alpha: float) -> float:  # < 0 exactly where look k's boundary at this α is reached
        _, spent = _spent(u, alpha, spending, rho)
        if k == 0:
            return 0.5 - float(x >= _first(spent[0], u[0]))
        c = _boundaries(u, alpha, spending, rho, n_paths, seed, k)
        a = _sample(u, n_paths, seed)
        alive = a[:, 0] < c[0]
        for j in range(1, k):
            alive &= a[:, j] < c[j]
        above = np.count_nonzero(alive & (a[:, k] > np.float64(x)))  # compared in float64
        return above - round(spent[k] * n_paths) + 0.5

    lo, hi = 1e-12, 0.4999  # the spending functions take α below one half
    f_lo, f_hi = excess(lo), excess(hi)
    if f_hi > 0:
        return 1.0
    if f_lo < 0:
        return lo
    bisect = k == 0
    while hi - lo > 1e-7 * hi:
        width = hi - lo
        # the excess is close to linear in α (the spent α is), so regula falsi homes in; bisection
        # steps where it does not halve the bracket, on log α while the bracket spans decades
        if bisect:
            mid = math.sqrt(lo * hi) if hi > 4 * lo else 0.5 * (lo + hi)
        else:
            mid = lo + width * f_lo / (f_lo - f_hi)
        mid = min(max(mid, lo + 1e-4 * width), hi - 1e-4 * width)
        f_mid = excess(mid)
        if f_mid < 0:
            hi, f_hi = mid, f_mid
        else:
            lo, f_lo = mid, f_mid
        bisect = k == 0 or (not bisect and hi - lo > 0.5 * width)
    return hi


def sequential_t_boundaries(units: Any, alpha: float = 0.05, spending: str = "obrien-fleming", *,
                            rho: float = 2.0, n_paths: int = N_PATHS, seed: int = SEED) -> SequentialTBoundaries:
    """Two-sided boundaries on the t scale for a paired t read at unit counts ``units`` (e.g. seeds
    ``(2, 4)``, or seeds × pairs of a pooled contrast), spending ``alpha`` over the looks with
    ``spending`` (``obrien-fleming``, ``pocock`` or ``power`` with ``rho``; information fractions
    ``n_k/n_K``). Each look's boundary solves its crossing equation on the joint null law of the
    looks' t statistics (module docstring: look 1 exactly, later looks on ``n_paths`` seeded
    Monte-Carlo paths). One look gives the fixed-sample ``t_{n−1, 1−α/2}``.
    """
    u, alpha, n_paths = _check(units, alpha, spending, rho, n_paths)
    c = _boundaries(u, alpha, spending, float(rho), n_paths, int(seed), len(u))
    cum, spent = _spent(u, alpha, spending, float(rho))
    df = tuple(n - 1 for n in u)
    return SequentialTBoundaries(
        spending=spending, alpha=alpha, rho=float(rho) if spending == "power" else None, units=u,
        information=tuple(n / u[-1] for n in u), df=df, t=c,
        nominal_p=tuple(min(1.0, 2.0 * t_sf(x, d)) for x, d in zip(c, df)),
        cumulative_alpha=tuple(float(x) for x in cum), alpha_spent=tuple(float(x) for x in spent),
        n_paths=n_paths, seed=int(seed), mc_se=math.sqrt(max(alpha - spent[0], 0.0) * (1.0 - alpha) / n_paths))


def t_crossing_probabilities(t: Any, units: Any, *, n_paths: int = 200_000, seed: int = 1) -> np.ndarray:
    """The chance of stopping first at each look under H0 with two-sided t boundaries ``t`` at
    ``units``, estimated on ``n_paths`` null paths of :func:`t_look_sample` with ``seed`` (choose a
    seed other than the boundaries' own for an independent check); the entries add up to the
    family-wise error, each with binomial error."""
    c = np.asarray(t, dtype=float).reshape(-1)
    a = t_look_sample(units, n_paths, seed)
    if c.size != a.shape[1]:
        raise ValueError(f"{c.size} boundaries for {a.shape[1]} looks")
    crossed = a >= c
    first = crossed & (np.cumsum(crossed, axis=1) == 1)
    return first.mean(axis=0)


__all__ = ["N_PATHS", "SEED", "SequentialTBoundaries", "sequential_t_boundaries", "t_crossing_probabilities",
           "t_look_nominal_p", "t_look_sample", "t_repeated_alpha"]
