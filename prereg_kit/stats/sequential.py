"""Group-sequential boundaries from an α-spending function (Lan & DeMets 1983; Kim & DeMets
1987; Jennison & Turnbull 2000, ch. 7 and 19): the two-sided z a look must reach to stop, so that
the chance of ever crossing under H0 is α however many looks are taken.

The standardized statistics ``Z_k`` at information fractions ``t_1 < … < t_K = 1`` behave like a
Brownian motion: with ``S_k = Z_k·√t_k``, the increments ``S_k − S_{k−1}`` are independent
``N(θ·(t_k − t_{k−1}), t_k − t_{k−1})`` (θ the drift, 0 under H0). Look k spends
``α(t_k) − α(t_{k−1})``: its boundary ``c_k`` solves ``P(|Z_j| < c_j for j < k, |Z_k| ≥ c_k) = α(t_k) −
α(t_{k−1})``, computed by recursive numerical integration of the density of ``S_k`` on the
continuation region (Armitage, McPherson & Rowe 1969; Simpson's rule).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import ndtr

from ._checks import Result, check_alpha, positive_int
from .tdist import norm_isf, norm_sf, norm_sf_array

SPENDING = ("obrien-fleming", "pocock", "power")
#: Simpson intervals per look (2·GRID + 1 points); 100 already reproduces published boundaries to 1e-5.
GRID = 150
#: The largest boundary searched; a look that spends (almost) nothing gets an infinite one.
Z_MAX = 40.0


@dataclass(slots=True, frozen=True)
class SequentialBoundaries(Result):
    """Result of :func:`sequential_boundaries`, one entry per look.

    ``z`` is the two-sided boundary (stop when ``|Z_k| ≥ z_k``; ``inf`` where the look spends
    nothing), ``nominal_p`` the two-sided fixed-sample p-value it corresponds to
    (``2·(1 − Φ(z_k))``: a look stops when its ordinary p is at most this), ``cumulative_alpha``
    ``α(t_k)`` and ``alpha_spent`` its increments.
    """

    spending: str
    alpha: float
    rho: float | None
    information: tuple[float, ...]
    z: tuple[float, ...]
    nominal_p: tuple[float, ...]
    cumulative_alpha: tuple[float, ...]
    alpha_spent: tuple[float, ...]


def spending_function(t: np.ndarray, alpha: float, spending: str, rho: float = 2.0) -> np.ndarray:
    """Cumulative two-sided α spent by information fraction t.

    The test is symmetric, each side spending half: ``obrien-fleming`` spends
    ``α/2 · f(t)`` per side with Lan & DeMets' O'Brien–Fleming-type ``2·(1 − Φ(z_{1−α/4}/√t))/(α/2)``,
    i.e. ``4·(1 − Φ(z_{1−α/4}/√t))`` in all (gsDesign's ``sfLDOF`` and rpact's ``asOF`` for a
    two-sided design; Lan & DeMets' 1983 formula on the two-sided α, ``2·(1 − Φ(z_{1−α/2}/√t))``,
    spends more early); ``pocock``: ``α·ln(1 + (e − 1)·t)`` (Lan & DeMets 1983); ``power``:
    ``α·t^ρ`` (Kim & DeMets 1987; ρ = 1 spends linearly, ρ ≈ 3 resembles O'Brien–Fleming).
    """
    t = np.asarray(t, dtype=float)
    if spending == "obrien-fleming":
        with np.errstate(divide="ignore"):
            return 4.0 * norm_sf_array(norm_isf(alpha / 4.0) / np.sqrt(t))
    if spending == "pocock":
        return alpha * np.log1p((math.e - 1.0) * t)
    return alpha * t**rho


def _fractions(n_looks: int, information: Any) -> np.ndarray:
    if information is None:
        return np.arange(1, n_looks + 1) / n_looks
    info = np.asarray(information, dtype=float).reshape(-1)
    if info.size != n_looks:
        raise ValueError(f"information has {info.size} entries for {n_looks} looks")
    if not np.isfinite(info).all() or info[0] <= 0 or (np.diff(info) <= 0).any():
        raise ValueError(f"information must be positive and strictly increasing, got {info.tolist()}")
    # seed counts (6, 12, 24) or fractions (0.25, 0.5, 1): the last look is full information
    return info / info[-1]


def _pdf(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


class _Recursion:
    """The sub-density of ``S_k`` on the continuation region, look by look, on a Simpson grid."""

    def __init__(self, drift: float = 0.0):
        self.drift = drift
        self.t_prev = 0.0
        self.points: np.ndarray | None = None  # grid of S values
        self.mass: np.ndarray | None = None  # density × Simpson weight at each point

    def _moments(self, t: float) -> tuple[float, float]:
        return self.drift * (t - self.t_prev), math.sqrt(t - self.t_prev)

    def crossing(self, t: float, c: float) -> float:
        """P(continue to look k, then |Z_k| ≥ c) for the look at fraction t."""
        b = c * math.sqrt(t)
        mu, sd = self._moments(t)
        if self.points is None:
            return float(ndtr((mu - b) / sd) + ndtr((-b - mu) / sd))
        s = self.points + mu
        return float(self.mass @ (ndtr((s - b) / sd) + ndtr((-b - s) / sd)))

    def advance(self, t: float, c: float) -> None:
        """Move to look k with boundary c: keep the density of paths that did not stop."""
        mu, sd = self._moments(t)
        b = min(c, 8.0 + abs(self.drift) * math.sqrt(t)) * math.sqrt(t)  # beyond 8 SD the mass is nil
        grid = np.linspace(-b, b, 2 * GRID + 1)
        w = np.full(grid.size, 2.0)
        w[1::2] = 4.0
        w[0] = w[-1] = 1.0
        w *= (grid[1] - grid[0]) / 3.0
        if self.points is None:
            dens = _pdf((grid - mu) / sd) / sd
        else:
            dens = self.mass @ (_pdf((grid[None, :] - self.points[:, None] - mu) / sd) / sd)
        self.points, self.mass, self.t_prev = grid, dens * w, t


def sequential_boundaries(n_looks: int, alpha: float = 0.05, spending: str = "obrien-fleming",
                          information: Any = None, *, rho: float = 2.0) -> SequentialBoundaries:
    """Two-sided z boundaries of a group-sequential test with ``n_looks`` looks.

    ``information`` gives the looks' information (seed counts such as ``(6, 12, 24)``, or
    fractions); it is normalized by the last look, and ``None`` means equally spaced looks.
    ``spending`` is the Lan–DeMets ``obrien-fleming`` or ``pocock`` type, or the ``power`` family
    ``α·t^rho`` (:func:`spending_function`). Each boundary solves its look's crossing equation
    (Brent's method on the recursion of this module); the family-wise error over all looks is
    then α(1) = α. One look gives the fixed-sample ``z_{1−α/2}``.
    """
    n_looks = positive_int(n_looks, "n_looks")
    alpha = check_alpha(alpha)
    if spending not in SPENDING:
        raise ValueError(f"spending must be one of {', '.join(SPENDING)}; got {spending!r}")
    if spending == "power" and not (isinstance(rho, (int, float)) and rho > 0 and math.isfinite(rho)):
        raise ValueError(f"rho must be a positive number, got {rho!r}")
    t = _fractions(n_looks, information)
    cum = spending_function(t, alpha, spending, rho)
    cum[-1] = alpha  # α(1) = α exactly, whatever the rounding of the spending function
    spent = np.diff(np.concatenate([[0.0], cum]))
    rec = _Recursion()
    z = []
    for tk, inc in zip(t, spent):
        if inc <= 1e-15 or rec.crossing(tk, Z_MAX) >= inc:
            c = math.inf
        else:
            from scipy.optimize import brentq

            c = float(brentq(lambda x, tk=tk, inc=inc: rec.crossing(tk, x) - inc, 1e-6, Z_MAX, xtol=1e-10))
        z.append(c)
        rec.advance(tk, c)
    return SequentialBoundaries(spending=spending, alpha=alpha, rho=float(rho) if spending == "power" else None,
                                information=tuple(float(v) for v in t), z=tuple(z),
                                nominal_p=tuple(2.0 * norm_sf(c) for c in z),
                                cumulative_alpha=tuple(float(v) for v in cum),
                                alpha_spent=tuple(float(v) for v in spent))


def crossing_probabilities(z: Any, information: Any, drift: float = 0.0) -> np.ndarray:
    """Probability of stopping first at each look, given two-sided boundaries ``z`` at
    ``information`` (normalized by the last) when ``E[Z_k] = drift·√t_k``; under H0 (drift 0) the
    entries add up to the family-wise error, and their sum under a drift is the power."""
    zs = np.asarray(z, dtype=float).reshape(-1)
    t = _fractions(zs.size, information)
    rec = _Recursion(float(drift))
    out = np.empty(zs.size)
    for k, (tk, c) in enumerate(zip(t, zs)):
        out[k] = rec.crossing(tk, c) if math.isfinite(c) else 0.0
        rec.advance(tk, c)
    return out


def classical_boundaries(n_looks: int, alpha: float = 0.05, shape: str = "obrien-fleming",
                         information: Any = None) -> SequentialBoundaries:
    """The classical group-sequential designs with a boundary of fixed shape (no spending function):
    Pocock's (1977) constant ``z_k = C`` and O'Brien & Fleming's (1979) ``z_k = C·√(1/t_k)``, with C
    solving ``Σ_k P(stop first at k | H0) = α`` (:func:`crossing_probabilities`). For equally
    spaced looks at α = .05 these are the tabulated ``C_P(K)`` and ``C_B(K)`` (Jennison & Turnbull
    2000, Tables 2.1 and 2.3). ``cumulative_alpha`` is the error spent up to each look.
    """
    n_looks = positive_int(n_looks, "n_looks")
    alpha = check_alpha(alpha)
    if shape not in ("obrien-fleming", "pocock"):
        raise ValueError(f"shape must be 'obrien-fleming' or 'pocock'; got {shape!r}")
    t = _fractions(n_looks, information)
    scale = 1.0 / np.sqrt(t) if shape == "obrien-fleming" else np.ones(n_looks)
    from scipy.optimize import brentq

    c = float(brentq(lambda x: crossing_probabilities(x * scale, t).sum() - alpha, 1.0, Z_MAX, xtol=1e-10))
    z = c * scale
    spent = crossing_probabilities(z, t)
    return SequentialBoundaries(spending=f"classical-{shape}", alpha=alpha, rho=None,
                                information=tuple(float(v) for v in t), z=tuple(float(v) for v in z),
                                nominal_p=tuple(2.0 * norm_sf(v) for v in z),
                                cumulative_alpha=tuple(float(v) for v in np.cumsum(spent)),
                                alpha_spent=tuple(float(v) for v in spent))
