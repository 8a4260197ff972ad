"""The update of one GRPO iteration (dense-rewards paper eq. (2); §C.1 "Implementation"):
the policy-gradient loss, the optimizer and the learning rate.

One Adam step per iteration (β = (0.9, 0.999), ε = 1e-8, no weight decay), gradient-norm clip 1,
no KL (the multi-reward rule ``additive_kl`` adds one), no ratio clipping; micro-batching changes
neither the update nor the token count. The loss is −Σ_g Σ_h c_{g,h} log π(a_{g,h}) divided by the
number of completions in the iteration, no per-token length normalization.
"""

from __future__ import annotations

import time

import torch

from trainer.config import TrainerConfig
from trainer.core.engines import Rollouts
from trainer.core.policy import Policy, synchronize, token_logprobs


def policy_loss(logp: torch.Tensor, credit: torch.Tensor, completion_mask: torch.Tensor,
                n_completions: int) -> torch.Tensor:
    """−Σ c_{g,h} log π(a_{g,h}) / N over the given completions (a micro-batch or all of them).

    Its gradient is −(1/N) Σ_g Σ_h c_{g,h} ∇ log π(a_{g,h}): the credit-weighted sum of token
    score functions of eq. (2), scaled by 1/N; micro-batch losses add up to the full loss.
    """
    return -(credit * logp * completion_mask).sum() / n_completions


def clipped_loss(logp: torch.Tensor, old_logp: torch.Tensor, credit: torch.Tensor, mask: torch.Tensor,
                 clip: float | tuple[float, float], n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate, −Σ_h min(ρ·c, clip(ρ, 1 − ε_low, 1 + ε_high)·c) / n with
    ρ = exp(log π − log π_old) (dense-rewards paper App. E: ε = 0.2; multi-reward paper App. C.4:
    the code recipe's clip-higher, ε_low = 0.2, ε_high = 0.28). ``clip``: ε, or (ε_low, ε_high); 0 on a side
    leaves that side unclipped. Also returns where the clip binds (its gradient is 0 there):
    c > 0 and ρ > 1 + ε_high, or c < 0 and ρ < 1 − ε_low. At ρ = 1 the gradient is policy_loss's."""
    lo, hi = clip if isinstance(clip, tuple) else (clip, clip)
    ratio = torch.exp(logp - old_logp)
    surr = ratio * credit
    binds = torch.zeros_like(mask, dtype=torch.bool)
    if hi > 0:  # the upper side only matters for positive credit: min(ρc, (1+ε_high)c)
        surr = torch.where(credit > 0, torch.minimum(surr, ratio.clamp(max=1 + hi) * credit), surr)
        binds = binds | ((credit > 0) & (ratio > 1 + hi))
    if lo > 0:  # the lower side only matters for negative credit: min(ρc, (1−ε_low)c)
        surr = torch.where(credit < 0, torch.minimum(surr, ratio.clamp(min=1 - lo) * credit), surr)
        binds = binds | ((credit < 0) & (ratio < 1 - lo))
    return -(surr * mask).sum() / n, binds & (mask > 0)


def make_optimizer(policy: Policy) -> torch.optim.Optimizer:
    """Adam, β = (0.9, 0.999), ε = 1e-8, no weight decay (a positive weight_decay uses AdamW)."""
    c = policy.cfg.update
    params = [p for p in policy.model.parameters() if p.requires_grad]
    kw = dict(lr=c.learning_rate, betas=(c.adam_beta1, c.adam_beta2), eps=c.adam_eps, foreach=False)
    if c.weight_decay > 0:
        return torch.optim.AdamW(params, weight_decay=c.weight_decay, **kw)
    return torch.optim.Adam(params, weight_decay=0.0, **kw)


def learning_rate_at(cfg: TrainerConfig, tokens_before: int, budget_tokens: int) -> float:
    """Constant (paper default), or ``linear``: lr·(1 − f), f the budget share generated before
    the iteration starts, reaching 0 at B (S32, dense-rewards paper §C.6.6; learning_rate is the peak). With an
    iteration budget the loop passes iterations done and N in place of tokens and B."""
    if cfg.update.lr_schedule == "linear":
        return cfg.update.learning_rate * max(0.0, 1.0 - tokens_before / budget_tokens)
    return cfg.update.learning_rate


def update_step(policy: Policy, optimizer: torch.optim.Optimizer, roll: Rollouts, credit: torch.Tensor,
                lr: float, *, ref: Policy | None = None, kl_beta: float = 0.0) -> dict[str, float]:
    """One on-policy optimizer step on all completions of the iteration (paper eq. 2).

    The loss is −Σ_g Σ_h c_{g,h} log π(a_{g,h}) / N, N the iteration's completions, computed in
    micro-batches of ``micro_batch_size`` completions whose gradients add up to the same sum.

    ``ref`` and ``kl_beta`` > 0 (multi-reward rule ``additive_kl``): the loss adds
    β·Σ_g Σ_h k3_{g,h} / N, k3 = exp(d) − d − 1 with d = log π_ref − log π_θ on the sampled
    tokens, the non-negative unbiased per-token estimator of KL(π_θ ‖ π_ref) (Schulman's k3, as in
    GRPO); ``kl`` (per generated token) is logged.
    """
    model = policy.model
    model.train()
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    n = roll.n
    mb = policy.cfg.update.micro_batch_size or n
    credit = credit.to(policy.device)
    cmask = roll.completion_mask.to(policy.device)
    total = 0.0
    use_kl = ref is not None and kl_beta > 0
    kl_sum = 0.0
    t0 = time.perf_counter()
    for s in range(0, n, mb):
        sl = slice(s, s + mb)
        logp = token_logprobs(policy, roll.sequences[sl], roll.attention_mask[sl], roll.prompt_len)
        loss = policy_loss(logp, credit[sl], cmask[sl], n_completions=n)
        if use_kl:
            with torch.no_grad():
                ref_logp = token_logprobs(ref, roll.sequences[sl], roll.attention_mask[sl], roll.prompt_len)
            d = ref_logp - logp
            k3 = (torch.exp(d) - d - 1.0) * cmask[sl]
            loss = loss + kl_beta * k3.sum() / n
            kl_sum += float(k3.detach().sum())
        loss.backward()
        total += float(loss.detach())
    synchronize(policy.device)
    fwd_bwd = time.perf_counter() - t0
    params = [p for p in model.parameters() if p.requires_grad]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, policy.cfg.update.grad_clip))
    optimizer.step()
    out = {"loss": total, "grad_norm": grad_norm, "lr": lr, "fwd_bwd_seconds": fwd_bwd}
    if use_kl:
        out["kl"] = kl_sum / max(1.0, float(cmask.sum()))
    return out
