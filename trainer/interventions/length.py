"""The group-relative length reward (dense-rewards paper §C.1 "Length reward"): −λ(L_i − m_g)/L_max
on the tokens of each correct completion, added to any credit rule's token credit."""

from __future__ import annotations

import torch

from trainer.config import TrainerConfig
from trainer.core.credit import Credit


def length_credit(rewards: torch.Tensor, lengths: torch.Tensor, mask: torch.Tensor, group_size: int,
                  lam: float, limit: int) -> torch.Tensor:
    """−λ(L_i − m_g)/L_max on every token of a correct completion, m_g the mean length of the
    group's correct completions; wrong completions get 0. Sums to 0 over each group's completions."""
    ok = (rewards > 0).double().view(-1, group_size)
    L = lengths.double().view(-1, group_size)
    m = (L * ok).sum(1, keepdim=True) / ok.sum(1, keepdim=True).clamp(min=1)
    per = (-lam * (L - m) / limit * ok).view(-1)
    return per[:, None].to(mask) * mask


def with_length_reward(credit: Credit, rewards: torch.Tensor, rollouts, group_size: int, cfg: TrainerConfig) -> Credit:
    """Add the length term to any rule's token credit (no-op at ``length_lambda = 0``)."""
    if not cfg.credit.length_lambda:
        return credit
    w = length_credit(rewards, rollouts.lengths, rollouts.completion_mask, group_size, cfg.credit.length_lambda,
                      cfg.rollout.completion_limit)
    return Credit(credit.tokens + w.to(credit.tokens), credit.advantages, credit.continuation_tokens)
