"""The per-batch vector work of a gradient test (dense-rewards paper §2.4, Appendix A
"Alignment"/"Efficiency", §H.3 "Gradient probes", Theorem 3 of App. I): flattened
gradients of the trainer's loss, the completion score sums q_g that span V, the reference
gradient ĥ, and the reduction of each configuration's update to inner products.

* **Update direction** u = −∇(trainer loss at ρ = 1) = (1/n) Σ_sequences Σ_h c_h ∇ log π(a_h),
  n the number of sequences the update divides by (the batch's completions; for continuation
  reuse also its continuation sequences, whose clipped loss at ρ = 1 has the plain gradient,
  ``trainer.core.update.clipped_loss``). Before gradient clipping and Adam (the unclipped score
  contribution), flattened over all trainable parameters in float32.
* **V** = span{q_g}, q_g = Σ_h ∇ log π(a_{g,h}) of the first ``subspace`` completions (one
  backward pass each); the **dense update** d is u restricted to those completions (same 1/n).
* **Reference gradient** ĥ = (1/N_ref) Σ w ∇ log π with the Monte-Carlo progress credit w
  (p̂_s − p̂_{s−1}, p̂_0 = prior, R at the end), no group advantage added.

Everything leaves as float64 inner products (``analyses.gradient``'s ``*_gram`` functions), so a
P-vector is never copied to the host. Vectors of P float32 numbers are counted in a
:class:`Held` tally (the memory record of ``meta.json``).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from analyses.gradient import RCOND, perp_cosine_gram, perp_inner_gram
from trainer.core.policy import Policy, token_logprobs
from trainer.core.update import policy_loss
from trainer.interventions.monte_carlo import mc_values, monte_carlo_values
from trainer.interventions.segments import segment_credit

CHUNK = 1 << 22  # columns per float64 block of an inner product (bounds the temporary memory)


class Held:
    """A tally of the P-float vectors a gradient test holds at once: ``now``/``peak`` bytes."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0

    def add(self, t: torch.Tensor) -> torch.Tensor:
        self.now += t.numel() * t.element_size()
        self.peak = max(self.peak, self.now)
        return t

    def drop(self, t: torch.Tensor | None) -> None:
        if t is not None:
            self.now -= t.numel() * t.element_size()


def trainable(policy: Policy) -> list[torch.nn.Parameter]:
    return [p for p in policy.model.parameters() if p.requires_grad]


def n_parameters(policy: Policy) -> int:
    return sum(p.numel() for p in trainable(policy))


def _add_grads(out: torch.Tensor, params: list[torch.nn.Parameter], sign: float) -> torch.Tensor:
    """out += sign · (every parameter's ``.grad``, flattened in parameter order), in place: no
    second P-vector is built."""
    at = 0
    for p in params:
        n = p.numel()
        if p.grad is not None:
            out[at:at + n].add_(p.grad.reshape(-1).float(), alpha=sign)
        at += n
    return out


def loss_gradient(policy: Policy, parts, n: int, sign: float = -1.0, out: torch.Tensor | None = None) -> torch.Tensor:
    """``sign`` · ∇ Σ_parts policy_loss(log π, credit, mask, n) as a flat float32 vector: with
    sign −1 the update direction (1/n) Σ c ∇ log π. ``parts``: (sequences, attention mask,
    prompt length, completion mask, credit) tuples, each one forward/backward pass (micro-batched
    by ``update.micro_batch_size`` as ``update_step`` does). Rows without credit are skipped.
    ``out``: add into this vector in place instead of a new one. Besides it, only the parameters'
    own ``.grad`` buffers (P floats) exist during the call."""
    params = trainable(policy)
    policy.model.train()  # as update_step computes it
    for p in params:
        p.grad = None
    mb = policy.cfg.update.micro_batch_size
    dev = policy.device
    for seqs, attn, plen, cmask, credit in parts:
        credit, cmask = credit.to(dev).float(), cmask.to(dev).float()
        live = ((credit * cmask).abs().sum(1) > 0).nonzero().view(-1)
        step = mb or max(1, len(live))
        for s in range(0, len(live), step):
            r = live[s:s + step]
            logp = token_logprobs(policy, seqs.to(dev)[r], attn.to(dev)[r], plen)
            policy_loss(logp, credit[r], cmask[r], n_completions=n).backward()
    if out is None:
        out = torch.zeros(sum(p.numel() for p in params), dtype=torch.float32, device=dev)
    _add_grads(out, params, sign)
    for p in params:
        p.grad = None
    return out


def rollout_part(roll, credit: torch.Tensor, rows: slice | None = None) -> tuple:
    rows = rows or slice(None)
    return (roll.sequences[rows], roll.attention_mask[rows], roll.prompt_len, roll.completion_mask[rows],
            credit[rows])


def update_direction(policy: Policy, roll, credit, rows_v: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(u, d) of one configuration on the batch: d over the first ``rows_v`` completions, u = d +
    the rest (other completions, then any continuation sequences of ``credit.sequences``), all with
    the update's 1/n. Two passes over the batch in all, never more than two P-vectors."""
    extra = list(getattr(credit, "sequences", []))
    n = roll.n + sum(b.n for b in extra)
    d = loss_gradient(policy, [rollout_part(roll, credit.tokens, slice(0, rows_v))], n)
    rest = [rollout_part(roll, credit.tokens, slice(rows_v, None))] if rows_v < roll.n else []
    rest += [(b.sequences, b.attention_mask, b.prompt_len, b.completion_mask, b.credit) for b in extra]
    u = d.clone()
    if rest:
        loss_gradient(policy, rest, n, out=u)
    return u, d


def score_sums(policy: Policy, roll, rows_v: int, held: Held) -> torch.Tensor:
    """Q [rows_v, P]: q_g = Σ_h ∇ log π(a_{g,h}), one backward pass per completion."""
    P = n_parameters(policy)
    Q = held.add(torch.empty((rows_v, P), dtype=torch.float32, device=policy.device))
    ones = roll.completion_mask.float()
    for g in range(rows_v):
        Q[g].zero_()
        loss_gradient(policy, [rollout_part(roll, ones, slice(g, g + 1))], 1, out=Q[g])
    return Q


def reference_credit(ref_cfg, ctx) -> tuple[torch.Tensor, int]:
    """The reference's Monte-Carlo progress credit w [N, T] (p̂_s − p̂_{s−1}, p̂_0 = prior, R at
    the end; no group advantage) and its continuation tokens (charged to no configuration)."""
    mc = monte_carlo_values(ctx)
    values = mc_values(mc, ref_cfg, ctx.rewards, ctx.rollouts.lengths)
    return segment_credit(values, mc.cuts, ctx.completion_mask), mc.tokens


def dots(Q: torch.Tensor, x: torch.Tensor) -> np.ndarray:
    """Q x in float64, block by block over the columns."""
    out = torch.zeros(Q.shape[0], dtype=torch.float64, device=Q.device)
    for s in range(0, Q.shape[1], CHUNK):
        out += Q[:, s:s + CHUNK].double() @ x[s:s + CHUNK].double()
    return out.cpu().numpy()


def dot(x: torch.Tensor, y: torch.Tensor) -> float:
    return float(dots(x[None, :], y)[0])


def gram(Q: torch.Tensor) -> np.ndarray:
    """K = Q Qᵀ in float64, block by block."""
    K = torch.zeros((Q.shape[0], Q.shape[0]), dtype=torch.float64, device=Q.device)
    for s in range(0, Q.shape[1], CHUNK):
        blk = Q[:, s:s + CHUNK].double()
        K += blk @ blk.T
    return K.cpu().numpy()


def v_rank(K: np.ndarray) -> int:
    """dim V: eigenvalues of K above the pseudo-inverse's relative cut-off."""
    if K.size == 0:
        return 0
    ev = np.linalg.eigvalsh(K)
    return int((ev > RCOND * max(ev.max(), 0.0)).sum()) if ev.max() > 0 else 0


def projection_residual(K: np.ndarray, Qd: np.ndarray, dd: float) -> float:
    """max_g |⟨q_g, P⊥d⟩| / (‖q_g‖ ‖d‖) with ⟨q_g, P⊥d⟩ = (Q d − K K⁺ Q d)_g: 0 up to rounding
    when the projection is right (0 when d = 0)."""
    if dd <= 0 or K.size == 0:
        return 0.0
    r = Qd - K @ (np.linalg.pinv(K, rcond=RCOND, hermitian=True) @ Qd)
    norms = np.sqrt(np.clip(np.diag(K), 0, None))
    ok = norms > 0
    return float(np.max(np.abs(r[ok]) / (norms[ok] * math.sqrt(dd)), initial=0.0))


def constant_within(credit: torch.Tensor, mask: torch.Tensor) -> bool:
    """True when each completion's credit is one number on all its tokens (its update lies in V)."""
    m = mask > 0
    c = credit.float()
    hi = torch.where(m, c, torch.full_like(c, -math.inf)).max(1).values
    lo = torch.where(m, c, torch.full_like(c, math.inf)).min(1).values
    live = m.any(1)
    return bool(((hi - lo)[live].abs() <= 1e-7 * hi[live].abs().clamp(min=1.0)).all())


def inner_products(K: np.ndarray, Qh: np.ndarray, hh: float, h: torch.Tensor, u: torch.Tensor, d: torch.Tensor,
                   Q: torch.Tensor, in_v: bool) -> dict:
    """One configuration's row numbers: ⟨u, ĥ⟩, ‖u‖², ‖ĥ‖², ⟨P⊥d, P⊥ĥ⟩, ‖P⊥d‖², ‖P⊥ĥ‖², the
    alignment cos(P⊥d, P⊥ĥ) (NaN when ``in_v``: credit constant within each completion, or when
    either part outside V is zero), dim V and the projection residual."""
    Qd = dots(Q, d)
    dd, dh = dot(d, d), dot(d, h)
    align = float("nan") if in_v else perp_cosine_gram(K, Qd, Qh, dd, hh, dh)
    return {"dot_uh": dot(u, h), "uu": dot(u, u), "hh": hh, "perp_dh": perp_inner_gram(K, Qd, Qh, dh),
            "perp_dd": perp_inner_gram(K, Qd, Qd, dd), "perp_hh": perp_inner_gram(K, Qh, Qh, hh),
            "alignment": align, "v_rank": v_rank(K), "projection_residual": projection_residual(K, Qd, dd)}
