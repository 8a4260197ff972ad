"""Gradient tests at one fixed policy: the projection of Theorem 3, alignment outside V and
gradient efficiency (dense-rewards paper §2.4, Appendix A "Alignment"/"Efficiency", Section I,
Theorem 3 L7164-7187; extract §3.14).

Notation (paper Table 27): a batch of G completions with token scores s_{g,h} = ∇ log π(a_{g,h});
q_g = Σ_h s_{g,h} the completion score sum; Q the G × P matrix whose rows are the q_g (Q = B S);
V = span{q_1..q_G}, P_V its orthogonal projector and P⊥ = I − P_V. Any reweighting of whole
completions updates inside V; a dense update d can improve on P_V d, to first order, only through
⟨h, d − P_V d⟩ = ⟨P⊥h, P⊥d⟩ (eq. 3, Proposition 1).

**Projection (Theorem 3).** The projection of x onto V is Qᵀc with (Q Qᵀ) c = Q x; for a token
credit ω, x = Sᵀω and this is (B K Bᵀ) c = B K ω with K = S Sᵀ. The Moore–Penrose solution is
used when Q Qᵀ is singular (the projected vector is unique even when c is not). Everything goes
through G × G Gram matrices and inner products: a P × P projector is never formed, and the
functions ending in ``_gram`` take only the inner products, so a caller holding gradients of a
real model on a device reduces them to a few numbers per batch before anything reaches here.

**Efficiency.** (E⟨u, ĥ⟩)² / E‖u‖² for update directions u_b and reference gradients ĥ_b on
batches b; for a smoothness constant L it equals 2L times the best expected one-step SGD gain
max_η [η E⟨u, ĥ⟩ − (L/2) η² E‖u‖²] (Appendix A, L1950-1956; :func:`best_sgd_gain`).

numpy only, no project imports: the core (``prereg_kit``), the trainer and the figures all use it.
"""

from __future__ import annotations

import numpy as np

RCOND = 1e-10  # relative cut-off of the Moore–Penrose inverse of the G × G Gram matrix


def _pinv_solve(K: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The minimum-norm solution c of K c = b (K symmetric PSD; b a vector or columns)."""
    return np.linalg.pinv(K, rcond=RCOND, hermitian=True) @ b


def project_out(x, Q) -> np.ndarray:
    """x − P_V x, V the row space of Q (G × P, rows the completion score sums q_g), by Theorem 3:
    c solves (Q Qᵀ) c = Q x (Moore–Penrose when singular) and P_V x = Qᵀ c."""
    x, Q = np.asarray(x, dtype=np.float64), np.atleast_2d(np.asarray(Q, dtype=np.float64))
    if Q.shape[1] != x.shape[-1]:
        raise ValueError(f"Q has {Q.shape[1]} columns but x has {x.shape[-1]} entries")
    c = _pinv_solve(Q @ Q.T, Q @ x)
    return x - Q.T @ c


def perp_inner_gram(K, Qx, Qy, xy: float) -> float:
    """⟨P⊥x, P⊥y⟩ from inner products only: ⟨x, y⟩ − (Q x)ᵀ (Q Qᵀ)⁺ (Q y).

    ``K`` = Q Qᵀ (G × G), ``Qx`` and ``Qy`` the G inner products ⟨q_g, x⟩ and ⟨q_g, y⟩."""
    K, Qx, Qy = (np.asarray(a, dtype=np.float64) for a in (K, Qx, Qy))
    return float(xy - Qx @ _pinv_solve(K, Qy))


def perp_cosine_gram(K, Qd, Qh, dd: float, hh: float, dh: float) -> float:
    """cos(P⊥d, P⊥h) from inner products (see :func:`perp_inner_gram`); NaN when either component
    outside V is zero (an update that only reweights whole completions, such as outcome-only GRPO's,
    has no alignment)."""
    pdh = perp_inner_gram(K, Qd, Qh, dh)
    pdd = max(perp_inner_gram(K, Qd, Qd, dd), 0.0)
    phh = max(perp_inner_gram(K, Qh, Qh, hh), 0.0)
    scale = max(abs(dd), abs(hh), 1e-300)
    if pdd <= 1e-12 * scale or phh <= 1e-12 * scale:
        return float("nan")
    return float(np.clip(pdh / np.sqrt(pdd * phh), -1.0, 1.0))


def perp_cosine(d, h, Q) -> float:
    """cos(P⊥d, P⊥h): the alignment of a dense update d with a gradient (estimate) h outside
    V = row space of Q (paper §2.4, eq. 3); NaN when either has no component outside V."""
    d, h = np.asarray(d, dtype=np.float64), np.asarray(h, dtype=np.float64)
    Q = np.atleast_2d(np.asarray(Q, dtype=np.float64))
    return perp_cosine_gram(Q @ Q.T, Q @ d, Q @ h, float(d @ d), float(h @ h), float(d @ h))


def efficiency_moments(dot_uh, uu) -> float:
    """(mean_b ⟨u_b, ĥ_b⟩)² / mean_b ‖u_b‖² from the per-batch inner products."""
    dot_uh, uu = np.asarray(dot_uh, dtype=np.float64), np.asarray(uu, dtype=np.float64)
    if dot_uh.shape != uu.shape or dot_uh.ndim != 1 or dot_uh.size == 0:
        raise ValueError("efficiency needs one ⟨u, ĥ⟩ and one ‖u‖² per batch")
    second = uu.mean()
    return float(dot_uh.mean() ** 2 / second) if second > 0 else float("nan")


def efficiency(U, H) -> float:
    """(mean_b ⟨u_b, h_b⟩)² / mean_b ‖u_b‖² over batches b, the rows of U and H (B × P)."""
    U, H = np.atleast_2d(np.asarray(U, dtype=np.float64)), np.atleast_2d(np.asarray(H, dtype=np.float64))
    if U.shape != H.shape:
        raise ValueError(f"U {U.shape} and H {H.shape} need one row per batch each")
    return efficiency_moments(np.einsum("bp,bp->b", U, H), np.einsum("bp,bp->b", U, U))


def best_sgd_gain(mean_dot: float, mean_sq: float, L: float) -> float:
    """max_η η·E⟨u, ĥ⟩ − (L/2)·η²·E‖u‖², at η* = E⟨u, ĥ⟩ / (L E‖u‖²): (E⟨u, ĥ⟩)² / (2 L E‖u‖²)."""
    eta = mean_dot / (L * mean_sq)
    return float(eta * mean_dot - 0.5 * L * eta ** 2 * mean_sq)
