"""Summaries of a gradient test over its fixed batches: positivity, per-update and per-token
efficiency relative to a baseline, alignment outside V and the a + b/k fit of the update's second
moment, each with a percentile bootstrap over batches (dense-rewards paper §2.4,
App. A "Alignment" and "Efficiency", §C.3.1, §C.3.2).

Every function takes the per-batch numbers a gradient test writes (⟨u_b, ĥ_b⟩, ‖u_b‖², the
⟨P⊥d, P⊥ĥ⟩ family, tokens) and nothing else. The bootstrap resamples batch indices with
replacement from ``np.random.default_rng(seed)``; a configuration and its baseline use the same
indices (their batches are the same). Resamples whose statistic is undefined (a zero denominator)
are dropped and counted; the interval is the (1 − confidence)/2 and (1 + confidence)/2 quantiles
of the rest (``np.quantile``'s linear rule, as ``scipy.stats.bootstrap(method="percentile")``).

numpy only, no project imports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


class Positivity(NamedTuple):
    """mean_b ⟨u_b, ĥ_b⟩, its standard error sd/√B (ddof 1) and z = mean/SE; the paper's check
    is z ≥ 3 (§C.3.1: "at least three standard errors above zero")."""
    mean: float
    se: float
    z: float


@dataclass(frozen=True)
class Efficiency:
    """A configuration against its baseline on the same batches (Table 6 caption; §2.4).

    ``per_update`` = efficiency / baseline efficiency; ``per_token`` = (efficiency / mean tokens per
    update) / (baseline efficiency / baseline's mean tokens per update); ``dropped``: resamples
    with a zero denominator, left out of both intervals."""
    efficiency: float
    base_efficiency: float
    per_update: float
    per_update_ci: tuple[float, float]
    per_token: float
    per_token_ci: tuple[float, float]
    tokens_per_update: float
    base_tokens_per_update: float
    positivity: Positivity
    batches: int
    n_resamples: int
    dropped: int
    confidence: float


@dataclass(frozen=True)
class Alignment:
    """cos(P⊥d, P⊥ĥ) over batches (§2.4, eq. 3): ``mean`` of the per-batch cosines and the
    ``pooled`` cosine Σ⟨P⊥d,P⊥ĥ⟩ / √(Σ‖P⊥d‖² Σ‖P⊥ĥ‖²), each with its interval; over the
    ``batches`` where the cosine is defined (``undefined`` others); NaN when none is (an update
    that only reweights whole completions, e.g. outcome-only GRPO's)."""
    mean: float
    ci: tuple[float, float]
    pooled: float
    pooled_ci: tuple[float, float]
    batches: int
    undefined: int
    n_resamples: int
    dropped: int
    confidence: float


@dataclass(frozen=True)
class ContinuationFit:
    """E‖u_k‖² = a + b/k over the Monte-Carlo configurations (§C.3.2, S25): ``share`` =
    (b/k)/(a + b/k) at ``at_k``, the part of the second moment due to continuation sampling, and
    ``bound`` = 1/(1 − share), the most any reallocation of those continuations can raise the
    per-update efficiency (3.8% at k = 4 → 1.04)."""
    a: float
    b: float
    at_k: float
    share: float
    share_ci: tuple[float, float]
    bound: float
    bound_ci: tuple[float, float]
    batches: int
    n_resamples: int
    dropped: int
    confidence: float


def _vector(name: str, values, size: int | None = None) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be one number per batch, got shape {a.shape}")
    if size is not None and a.size != size:
        raise ValueError(f"{name} has {a.size} batches, expected {size}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} has a non-finite value at batch {int(np.flatnonzero(~np.isfinite(a))[0])}")
    return a


def _check_bootstrap(n_resamples: int, confidence: float) -> None:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")


def resample_indices(batches: int, n_resamples: int, seed: int) -> np.ndarray:
    """n_resamples × batches batch indices drawn with replacement (seeded; the same for every
    configuration of a test, which pairs them)."""
    return np.random.default_rng(seed).integers(0, batches, size=(n_resamples, batches))


def percentile_interval(stats, confidence: float) -> tuple[tuple[float, float], int]:
    """The percentile interval of the finite resample statistics and how many were not finite."""
    stats = np.asarray(stats, dtype=np.float64)
    finite = stats[np.isfinite(stats)]
    dropped = int(stats.size - finite.size)
    if finite.size == 0:
        return (float("nan"), float("nan")), dropped
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(finite, [alpha, 1.0 - alpha])
    return (float(lo), float(hi)), dropped


def _ratio(num, den):
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den != 0, num / np.where(den != 0, den, 1.0), np.nan)


def positivity(dot_uh) -> Positivity:
    """mean_b ⟨u_b, ĥ_b⟩ / (sd/√B) (ddof 1; §C.3.1, z ≥ 3 is the paper's check); SE and z are
    NaN with one batch, z is NaN when SE is 0 and the mean is 0 (±inf when only SE is 0)."""
    d = _vector("dot_uh", dot_uh)
    mean = float(d.mean())
    se = float(d.std(ddof=1) / np.sqrt(d.size)) if d.size > 1 else float("nan")
    if np.isnan(se):
        return Positivity(mean, se, float("nan"))
    z = float(np.sign(mean) * np.inf) if se == 0 and mean != 0 else float(_ratio(mean, se))
    return Positivity(mean, se, z)


def _efficiency(dot_mean, uu_mean):
    return _ratio(np.square(dot_mean), uu_mean)


def relative_efficiency(dot_uh, uu, tokens, base_dot_uh, base_uu, base_tokens, *, n_resamples: int,
                        seed: int, confidence: float = 0.95) -> Efficiency:
    """Per-update and per-token gradient efficiency of a configuration relative to its baseline on
    the same batches (efficiency (mean ⟨u,ĥ⟩)² / mean ‖u‖², App. A "Efficiency"; "per generated
    token ... divides by the tokens each update consumes", §2.4), with paired percentile
    bootstrap intervals over batches, and the configuration's positivity."""
    _check_bootstrap(n_resamples, confidence)
    dot_uh = _vector("dot_uh", dot_uh)
    n = dot_uh.size
    uu, tokens = _vector("uu", uu, n), _vector("tokens", tokens, n)
    base_dot, base_uu, base_tok = (_vector(k, v, n) for k, v in
                                   (("base_dot_uh", base_dot_uh), ("base_uu", base_uu), ("base_tokens", base_tokens)))
    for name, a in (("uu", uu), ("base_uu", base_uu), ("tokens", tokens), ("base_tokens", base_tok)):
        if (a < 0).any():
            raise ValueError(f"{name} is negative at batch {int(np.flatnonzero(a < 0)[0])}: squared norms and token counts are ≥ 0")

    def stats(ix):
        eff = _efficiency(dot_uh[ix].mean(-1), uu[ix].mean(-1))
        base = _efficiency(base_dot[ix].mean(-1), base_uu[ix].mean(-1))
        per_update = _ratio(eff, base)
        per_token = _ratio(_ratio(eff, tokens[ix].mean(-1)), _ratio(base, base_tok[ix].mean(-1)))
        return eff, base, per_update, per_token

    eff, base, per_update, per_token = (float(v) for v in stats(np.arange(n)))
    _, _, pu, pt = stats(resample_indices(n, n_resamples, seed))
    undefined = ~(np.isfinite(pu) & np.isfinite(pt))
    pu_ci, _ = percentile_interval(pu[~undefined], confidence)
    pt_ci, _ = percentile_interval(pt[~undefined], confidence)
    return Efficiency(eff, base, per_update, pu_ci, per_token, pt_ci, float(tokens.mean()),
                      float(base_tok.mean()), positivity(dot_uh), n, int(n_resamples),
                      int(undefined.sum()), float(confidence))


def _cosines(dh, dd, hh):
    return np.clip(_ratio(dh, np.sqrt(np.maximum(dd, 0.0) * np.maximum(hh, 0.0))), -1.0, 1.0)


def alignment_summary(perp_dh, perp_dd, perp_hh, *, n_resamples: int, seed: int, confidence: float = 0.95,
                      undefined=None) -> Alignment:
    """The alignment test over batches (§2.4, Appendix A eq. 3): per-batch cos(P⊥d_b, P⊥ĥ_b) =
    ⟨P⊥d,P⊥ĥ⟩/√(‖P⊥d‖²‖P⊥ĥ‖²), their mean, and the pooled cosine Σ⟨P⊥d,P⊥ĥ⟩/√(Σ‖P⊥d‖² Σ‖P⊥ĥ‖²),
    with percentile bootstrap intervals over batches. A batch's cosine is undefined when ‖P⊥d‖² or
    ‖P⊥ĥ‖² is ≤ 0 or where ``undefined`` (a per-batch mask, e.g. the NaN rows of the trainer's
    ``alignment`` column, whose tolerance is relative to ‖d‖²) is true; those batches are left out.
    """
    _check_bootstrap(n_resamples, confidence)
    dh = _vector("perp_dh", perp_dh)
    dd, hh = _vector("perp_dd", perp_dd, dh.size), _vector("perp_hh", perp_hh, dh.size)
    skip = (dd <= 0) | (hh <= 0)
    if undefined is not None:
        mask = np.asarray(undefined)
        if mask.shape != dh.shape or mask.dtype != bool:
            raise ValueError(f"undefined must be one boolean per batch ({dh.size}), got {mask.dtype} {mask.shape}")
        skip |= mask
    dh, dd, hh = dh[~skip], dd[~skip], hh[~skip]
    n, nan2 = dh.size, (float("nan"), float("nan"))
    if n == 0:
        return Alignment(float("nan"), nan2, float("nan"), nan2, 0, int(skip.sum()), int(n_resamples), 0,
                         float(confidence))
    cos = _cosines(dh, dd, hh)
    pooled = float(_cosines(dh.sum(), dd.sum(), hh.sum()))
    ix = resample_indices(n, n_resamples, seed)
    mean_ci, dropped = percentile_interval(cos[ix].mean(-1), confidence)
    pooled_ci, _ = percentile_interval(_cosines(dh[ix].sum(-1), dd[ix].sum(-1), hh[ix].sum(-1)), confidence)
    return Alignment(float(cos.mean()), mean_ci, pooled, pooled_ci, n, int(skip.sum()), int(n_resamples),
                     dropped, float(confidence))


def reallocation_bound(share):
    """1/(1 − share): with a fraction ``share`` of E‖u‖² due to continuation sampling, removing it
    entirely raises the efficiency (E⟨u,ĥ⟩)²/E‖u‖² by at most this factor (§C.3.2, S25);
    NaN when share ≥ 1 (a negative share, b < 0, gives a bound below 1: no reallocation helps)."""
    s = np.asarray(share, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(s < 1, 1.0 / np.where(s < 1, 1.0 - s, 1.0), np.nan)
    return float(out) if out.ndim == 0 else out


def _fit_ab(inv_k: np.ndarray, means: np.ndarray):
    """Least squares of means (… × C) on [1, 1/k]: a and b along the last axis."""
    X = np.column_stack([np.ones_like(inv_k), inv_k])
    coef = np.linalg.pinv(X) @ np.moveaxis(means, -1, 0)
    return coef[0], coef[1]


def continuation_fit(ks, uu_by_k, *, n_resamples: int, seed: int, confidence: float = 0.95,
                     at_k: float = 4) -> ContinuationFit:
    """E‖u_k‖² = a + b/k by least squares over the Monte-Carlo configurations (k = their
    continuations per cut; ``uu_by_k`` is batches × configurations, the same batches), the share
    (b/k)/(a + b/k) at ``at_k`` and the reallocation bound 1/(1 − share) (§C.3.2, S25), with
    percentile bootstrap intervals over batches (a resample with a + b/k ≤ 0 is dropped)."""
    _check_bootstrap(n_resamples, confidence)
    ks = np.asarray(ks, dtype=np.float64)
    uu = np.asarray(uu_by_k, dtype=np.float64)
    if ks.ndim != 1 or (ks <= 0).any() or not np.isfinite(ks).all():
        raise ValueError(f"ks must be positive continuation counts, got {ks.tolist()}")
    if np.unique(ks).size < 2:
        raise ValueError(f"the a + b/k fit needs at least two different k, got {ks.tolist()}")
    if uu.ndim != 2 or uu.shape[1] != ks.size or uu.shape[0] == 0:
        raise ValueError(f"uu_by_k must be batches × {ks.size} configurations, got shape {uu.shape}")
    if not np.isfinite(uu).all() or (uu < 0).any():
        raise ValueError("uu_by_k must hold finite squared norms ≥ 0")
    if not at_k > 0:
        raise ValueError(f"at_k must be positive, got {at_k!r}")

    def share_of(means):
        a, b = _fit_ab(1.0 / ks, means)
        total = a + b / at_k
        return a, b, np.where(total > 0, _ratio(b / at_k, total), np.nan)

    a, b, share = share_of(uu.mean(0))
    ix = resample_indices(uu.shape[0], n_resamples, seed)
    _, _, shares = share_of(uu[ix].mean(1))
    share_ci, dropped = percentile_interval(shares, confidence)
    bounds = reallocation_bound(shares[np.isfinite(shares)])
    bound_ci, _ = percentile_interval(bounds, confidence)
    return ContinuationFit(float(a), float(b), float(at_k), float(share), share_ci,
                           reallocation_bound(float(share)), bound_ci, int(uu.shape[0]), int(n_resamples),
                           dropped, float(confidence))
