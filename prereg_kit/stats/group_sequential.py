"""Decisions at one look of a group-sequential study with several primary contrasts: Holm inside
each family on the looks' spent α (Maurer & Bretz 2013, the group-sequential form of a graphical
Holm procedure; Ye et al. 2013), repeated p-values (Jennison & Turnbull 2000, §9.1) and conditional
power under the current trend (Lan & Wittes 1988).

The rule. A family with α and m members is tested at look k by Holm on the members' two-sided
p-values: the j-th smallest p (j = 1..m) is compared with the nominal two-sided p
``2·(1 − Φ(c_k(a_j)))`` of the look's boundary for the share ``a_j = α/(m − j + 1)``, where
``c_k(a)`` is the boundary of :func:`sequential_boundaries` with total α = a; Holm stops at the
first p above its threshold. A contrast rejected at an earlier look stays rejected (its share
passes on to the others, as Holm's does). Equivalently: Holm at α on the *repeated p-values*
(:func:`repeated_p`), the smallest total α whose look-k boundary the p crosses.

The boundary's scale. Given ``units`` (the paired t's unit counts at the looks), ``c_k(a)`` is the
t-scale boundary of :func:`.sequential_t.sequential_t_boundaries`, exact for the looks' joint law of
paired t statistics, and the nominal p is ``2·P(T_{n_k−1} ≥ c_k(a))``; the p compared with it must
then be the look's paired-t p. Without ``units`` the boundary is the z boundary above, right for a
statistic that is normal with Brownian-motion correlation; for a paired t on few units it is not
(the family-wise error exceeds α: docs/statistics.md, "Sequential looks").
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Sequence

import numpy as np

from .sequential import sequential_boundaries
from .sequential_t import t_look_nominal_p, t_repeated_alpha
from .tdist import norm_isf, norm_sf, t_isf

Units = Sequence[int] | None


@lru_cache(maxsize=4096)
def _nominal(alpha: float, information: tuple[float, ...], spending: str, rho: float) -> tuple[float, ...]:
    b = sequential_boundaries(len(information), alpha, spending, information, rho=rho)
    return b.nominal_p


def look_threshold(alpha: float, information: Sequence[float], look: int, spending: str = "obrien-fleming",
                   rho: float = 2.0, *, units: Units = None) -> float:
    """The nominal two-sided p that look ``look`` (1-based) must reach when the whole design spends
    ``alpha``: ``2·(1 − Φ(c_look))`` for the z boundary; with ``units`` (the paired t's unit
    counts at the looks, in proportion to ``information``) ``2·P(T_{n_look−1} ≥ c_look)`` for the
    exact t boundary (module docstring)."""
    if units is not None:
        return t_look_nominal_p(tuple(units), float(alpha), look, spending, rho=float(rho))
    info = tuple(float(x) for x in information)
    return _nominal(float(alpha), info, spending, float(rho))[look - 1]


def sequential_holm(p: Sequence[float], alpha: float, information: Sequence[float], look: int, *,
                    spending: str = "obrien-fleming", rho: float = 2.0,
                    already: Sequence[bool] | None = None, units: Sequence[Units] | None = None) -> np.ndarray:
    """Which of a family's hypotheses Holm rejects at look ``look`` on the spent α (module rule).

    ``p``: the members' two-sided p at this look (NaN: not read, never rejected); ``already``:
    members rejected at an earlier look (they count as rejected and pass their share on);
    ``units``: per member, its paired t's unit counts at the looks (:func:`look_threshold`; None,
    or ``units`` None: the member's p is compared with the z boundary)."""
    p = np.asarray(p, dtype=float)
    m = p.size
    rejected = np.zeros(m, bool) if already is None else np.asarray(already, bool).copy()
    order = [i for i in np.argsort(np.where(np.isnan(p), np.inf, p), kind="stable") if not rejected[i]]
    j = int(rejected.sum())
    per = _per_member(units, m)
    for i in order:
        if np.isnan(p[i]) or p[i] > look_threshold(alpha / (m - j), information, look, spending, rho, units=per[i]):
            break
        rejected[i] = True
        j += 1
    return rejected


def _per_member(units: Sequence[Units] | None, m: int) -> list[Units]:
    if units is None:
        return [None] * m
    if len(units) != m:
        raise ValueError(f"units has {len(units)} entries for {m} members")
    return list(units)


def repeated_p(p: float, information: Sequence[float], look: int, *, spending: str = "obrien-fleming",
               rho: float = 2.0, units: Units = None) -> float:
    """The repeated p-value of a two-sided ``p`` at look ``look``: the smallest total α whose
    look boundary it reaches (1 when none below one half does); with ``units`` the t boundary
    (:func:`look_threshold`). Holm at α on these is :func:`sequential_holm`."""
    if not math.isfinite(p):
        return math.nan
    if units is not None:  # the t statistic of the p at the look's degrees of freedom
        return t_repeated_alpha(t_isf(min(p, 1.0) / 2.0, int(units[look - 1]) - 1), tuple(units), look,
                                spending, rho=float(rho))
    lo, hi = 1e-12, 0.4999  # the boundaries take α below one half

    def gap(a: float) -> float:
        return look_threshold(a, information, look, spending, rho, units=units) - p

    if gap(hi) < 0:
        return 1.0
    if gap(lo) >= 0:
        return lo
    from scipy.optimize import brentq

    return float(brentq(gap, lo, hi, xtol=1e-10))


def z_of_p(p: float) -> float:
    """|Z| of a two-sided p: ``Φ⁻¹(1 − p/2)``."""
    return norm_isf(p / 2.0)


def conditional_power(z: float, information: Sequence[float], look: int, final_boundary: float) -> float:
    """Conditional power under the current trend (Lan & Wittes 1988): the chance that |Z| at the
    last look reaches ``final_boundary`` when the drift is the one estimated now, ``θ̂ = Z_k/√t_k``:
    ``1 − Φ((c_K − Z_k/√t_k)/√(1 − t_k))`` with ``Z_k = |z|`` (the looks between are ignored)."""
    info = np.asarray(information, dtype=float)
    t = float(info[look - 1] / info[-1])
    if t >= 1.0:
        return float(abs(z) >= final_boundary)
    return norm_sf((final_boundary - abs(z) / math.sqrt(t)) / math.sqrt(1.0 - t))


def final_boundary(alpha: float, information: Sequence[float], spending: str = "obrien-fleming", rho: float = 2.0,
                   *, units: Units = None) -> float:
    """|Z| the last look must reach when the design spends ``alpha``: the z boundary, or with
    ``units`` the z of the t boundary's nominal p (``z_of_p``), the scale of :func:`conditional_power`."""
    return z_of_p(look_threshold(alpha, information, len(information), spending, rho, units=units))


__all__ = ["conditional_power", "final_boundary", "look_threshold", "repeated_p", "sequential_holm", "z_of_p"]


