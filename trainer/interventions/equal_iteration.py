"""The equal-iteration rule, its controls and its gates (dense-rewards paper §3.1, App. G, §H.1):
MC-within (the Monte-Carlo segment credit, gated, centered within each completion, normalized and
added to the group advantage: c = A + α·w), the shuffled control (the same credit permuted within
each completion) and the implicit-reward control (w = log π_θ − log π_ref, no continuations).
Every choice the paper leaves open is a ``TrainerConfig`` field (docs/interventions.md, "Dense
rewards").
"""

from __future__ import annotations

import torch

from trainer.config import derive_seed
from trainer.core.credit import Credit, CreditContext
from trainer.core.policy import token_logprobs
from trainer.interventions.monte_carlo import MonteCarlo, mc_values, monte_carlo_values
from trainer.interventions.segments import segment_credit, segment_index


def gate(w: torch.Tensor, kind: str, *, advantages: torch.Tensor, disagreement: torch.Tensor | None = None) -> torch.Tensor:
    """§G gates, applied to the raw credit before centering and normalization.

    ``opposition``: keep the entries whose sign is opposite to A_g (w·A_g < 0), zero the rest.
    ``disagreement``: multiply each segment's credit by p(1 − p), p the fraction of continuations
    that succeed from the segment's end (``disagreement`` = p(1 − p) per token; 0 on the last
    segment, whose end value is the 0/1 outcome).
    """
    if kind == "opposition":
        return torch.where(w * advantages[:, None].to(w) < 0, w, torch.zeros_like(w))
    if kind == "disagreement":
        return w * disagreement.to(w)
    return w


def end_disagreement(mc: MonteCarlo, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[N, T]: p(1 − p) with p the value at the end of each token's segment."""
    p = values[:, 1:]  # end of segment s = boundary s
    return (p * (1 - p))[:, segment_index(mc.cuts, mask.shape[1])].to(mask) * mask


def center_within(w: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Subtract each completion's mean credit over its tokens (per-token centering; the paper does
    not say whether per token or per segment)."""
    n_tok = mask.sum(1, keepdim=True).clamp(min=1)
    return (w - (w * mask).sum(1, keepdim=True) / n_tok) * mask


def _token_sd(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    n = mask.sum().clamp(min=1)
    mean = (x * mask).sum() / n
    return (((x - mean) ** 2 * mask).sum() / n).sqrt()


def combine(adv: torch.Tensor, w: torch.Tensor, mask: torch.Tensor, alpha: float, norm: str) -> torch.Tensor:
    """c = A + α·w (max-normalized: w / max|w| over the batch) or, co-equal, A/sd(A) + α·w/sd(w),
    both SDs population SDs over the batch's generated tokens. A zero w stays zero."""
    a_tok = adv[:, None].to(mask) * mask
    if norm == "coequal":
        sa, sw = _token_sd(a_tok, mask), _token_sd(w, mask)
        a_tok = a_tok / sa if sa > 0 else a_tok
        w = w / sw if sw > 0 else w
    else:
        m = (w * mask).abs().max()
        w = w / m if m > 0 else w
    return (a_tok + alpha * w) * mask


def shuffle_within(w: torch.Tensor, mask: torch.Tensor, seed: int) -> torch.Tensor:
    """Permute each completion's token credits among its own tokens (the shuffled control, §3.1)."""
    g = torch.Generator().manual_seed(seed)
    out = w.clone()
    for i in range(w.shape[0]):
        n = int(mask[i].sum())
        out[i, :n] = w[i, :n][torch.randperm(n, generator=g)]
    return out


def _mc_within(ctx: CreditContext, shuffle_seed: int | None = None) -> Credit:
    cfg, mask, adv = ctx.cfg, ctx.completion_mask, ctx.advantages
    mc = monte_carlo_values(ctx)
    values = mc_values(mc, cfg, ctx.rewards, ctx.rollouts.lengths)
    w = segment_credit(values, mc.cuts, mask)
    w = gate(w, cfg.credit.eq_gate, advantages=adv, disagreement=end_disagreement(mc, values, mask))
    if shuffle_seed is not None:
        w = shuffle_within(w, mask, shuffle_seed)
    return Credit(combine(adv, center_within(w, mask), mask, cfg.credit.eq_alpha, cfg.credit.eq_norm), adv, mc.tokens)


def equal_iteration_credit(ctx: CreditContext) -> Credit:
    """MC-within (equal-iteration study): the Monte-Carlo segment credit, gated (``eq_gate``),
    centered within each completion, normalized (``eq_norm``): c = A_g + α·w (``eq_alpha``)."""
    return _mc_within(ctx)


def shuffled_credit(ctx: CreditContext) -> Credit:
    """The shuffled control: MC-within with the (gated) credit permuted within each completion;
    permutation seed derive_seed(run seed, iteration, "shuffle")."""
    return _mc_within(ctx, shuffle_seed=derive_seed(ctx.seed, ctx.iteration, "shuffle"))


def implicit_credit(ctx: CreditContext) -> Credit:
    """The implicit-reward control: w = log π_θ(a) − log π_ref(a), π_ref the initial policy (the
    warm start / the model the run started from), then gated, centered and normalized like
    MC-within. No continuations; two forward passes charged to the credit stage."""
    cfg, policy, rollouts, adv = ctx.cfg, ctx.policy, ctx.rollouts, ctx.advantages
    ref = ctx.state.reference(policy)
    seqs, attn = rollouts.sequences, rollouts.attention_mask
    with torch.no_grad():
        lp = token_logprobs(policy, seqs, attn, rollouts.prompt_len)
        lr = token_logprobs(ref, seqs, attn, rollouts.prompt_len)
    mask = ctx.completion_mask
    w = (lp - lr).to(mask) * mask
    w = gate(w, cfg.credit.eq_gate, advantages=adv)
    return Credit(combine(adv, center_within(w, mask), mask, cfg.credit.eq_alpha, cfg.credit.eq_norm), adv, 0)
