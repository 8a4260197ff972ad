"""Gradient tests at one fixed policy: the projection of Theorem 3, alignment outside V and
gradient efficiency (dense-rewards paper §2.4, Appendix A "Alignment"/"Efficiency", App. I,
Theorem 3).

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
max_η [η E⟨u, ĥ⟩ − (L/2) η² E‖u‖²] (Appendix A "Efficiency"; :func:`best_sgd_gain`).

**Reference credit.** :func:`segment_progress_credit` is the Monte-Carlo progress credit of the
reference gradient ĥ (§H.3). Summaries over batches and their bootstrap intervals are in
:mod:`analyses.gradient_stats`.

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


def completion_matrix(lengths) -> np.ndarray:
    """B (G × T): B[g, t] = 1 when token t (tokens stacked completion by completion) belongs to
    completion g, so that Q = B S and q_g = Σ_h s_{g,h} (paper Table 27)."""
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or lengths.size == 0 or not np.issubdtype(lengths.dtype, np.integer) or (lengths < 0).any():
        raise ValueError("lengths must be a non-empty list of non-negative token counts per completion")
    return np.repeat(np.eye(lengths.size), lengths, axis=1)


def theorem3_coefficients(K, B, omega) -> tuple[np.ndarray, float]:
    """Theorem 3 (dense-rewards paper App. I) from the token Gram matrix K = S Sᵀ (T × T) alone: the minimum-norm c
    of (B K Bᵀ) c = B K ω, and the fraction of ‖Sᵀω‖² that lies in V, cᵀ(B K Bᵀ)c / ωᵀKω (NaN when
    Sᵀω = 0). The projection is Sᵀ Bᵀ c; orthogonality (fraction 0) holds exactly when B K ω = 0.
    The least-squares argument of the proof does not use the theorem's premise Bω = 0, so any ω
    is accepted."""
    K, B, omega = (np.asarray(a, dtype=np.float64) for a in (K, B, omega))
    B = np.atleast_2d(B)
    if K.ndim != 2 or K.shape[0] != K.shape[1] or B.shape[1] != K.shape[0] or omega.shape != (K.shape[0],):
        raise ValueError(f"K {K.shape}, B {B.shape} and ω {omega.shape} do not describe the same T tokens")
    gram = B @ K @ B.T
    c = _pinv_solve(gram, B @ (K @ omega))
    total = float(omega @ K @ omega)
    inside = float(c @ gram @ c)
    scale = float(np.abs(K).max()) * float(omega @ omega) if K.size else 0.0
    fraction = float("nan") if total <= 1e-14 * max(scale, 1e-300) else inside / total
    return c, fraction


def project_out_tokens(S, omega, B) -> tuple[np.ndarray, float]:
    """Theorem 3 on token scores: for the token-score matrix S (T × P), token credit ω (T) and
    completion matrix B (G × T; :func:`completion_matrix`), Sᵀω − SᵀBᵀc with (B K Bᵀ) c = B K ω,
    K = S Sᵀ — the same vector as ``project_out(Sᵀω, B S)`` — and the fraction of ‖Sᵀω‖² in V."""
    S = np.atleast_2d(np.asarray(S, dtype=np.float64))
    B = np.atleast_2d(np.asarray(B, dtype=np.float64))
    omega = np.asarray(omega, dtype=np.float64)
    c, fraction = theorem3_coefficients(S @ S.T, B, omega)
    return S.T @ omega - S.T @ (B.T @ c), fraction


def segment_progress_credit(values_at_cuts, cuts, length: int, reward: float, prior: float = 0.5) -> np.ndarray:
    """The reference gradient's Monte-Carlo progress credit of one completion (dense-rewards
    paper §H.3): interior cuts 0 < c_1 < … < c_m < length split the completion into
    m + 1 segments; every token of segment s gets p̂_s − p̂_{s−1}, with p̂_0 = ``prior``, p̂_s the
    estimated success rate after the prefix ending at c_s (``values_at_cuts``) and p̂_{m+1} = R, the
    completion's reward. Returns the ``length`` token credits w_t; ĥ = mean over completions of
    Σ_t w_t ∇log π(a_t). With p̂ unbiased and independent of the completion's later tokens, each
    token's credit has the expectation Q(s_t, a_t) − (a function of the earlier tokens), so ĥ is an
    unbiased estimate of ∇J."""
    values = np.asarray(values_at_cuts, dtype=np.float64)
    cuts = np.asarray(cuts)
    if values.shape != cuts.shape or cuts.ndim != 1:
        raise ValueError(f"{values.size} values for {cuts.size} cuts: one success estimate per cut is needed")
    if cuts.size and (cuts[0] <= 0 or cuts[-1] >= length or (np.diff(cuts) <= 0).any()):
        raise ValueError(f"cuts {cuts.tolist()} must increase strictly inside (0, {length})")
    levels = np.concatenate([[prior], values, [reward]])
    bounds = np.concatenate([[0], cuts, [length]]).astype(int)
    return np.repeat(np.diff(levels), np.diff(bounds))
