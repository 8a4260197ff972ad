"""Credit assignment: group advantages, per-token credit and the policy-gradient loss.

Paper 1 §2.1 eq. (1)-(2) and §2.3 "Implementation" (extract §3.1):

* Eq. (1): A_g = (R_g − R̄) / (σ + ε), R̄ the group mean and σ the group's **population**
  standard deviation (divide by G). ε = ``advantage_eps`` (default 1e-6; the paper does not state
  its value). With 0/1 rewards a mixed group has σ ≥ √((G−1))/G, so ε changes A by < 1e-5
  relative; a uniform group has R_g − R̄ = 0 and so A_g = 0 exactly, whatever ε.
* Eq. (2): the update is Σ_g Σ_h c_{g,h} ∇ log π(a_{g,h}); outcome-only GRPO uses
  c_{g,h} = A_g on every token of completion g; a dense reward adds a per-token term,
  c_{g,h} = A_g + w_{g,h} (the extension point: :func:`token_credit` takes ``dense``, and
  :data:`CREDIT_RULES` maps a recipe's ``credit`` name to the function that computes it).
* Loss: −Σ_g Σ_h c_{g,h} log π(a_{g,h}) divided by the number of completions in the iteration,
  no per-token length normalization.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float) -> torch.Tensor:
    """Eq. (1) per group: ``rewards`` [N] laid out group by group (G consecutive completions)."""
    r = rewards.double().view(-1, group_size)
    mean = r.mean(dim=1, keepdim=True)
    sd = r.std(dim=1, keepdim=True, correction=0)  # population SD (paper: divide by G)
    return ((r - mean) / (sd + eps)).view(-1).float()


def token_credit(advantages: torch.Tensor, completion_mask: torch.Tensor,
                 dense: torch.Tensor | None = None) -> torch.Tensor:
    """c_{g,h} = A_g (+ w_{g,h} when a dense reward gives one) on generated tokens, 0 elsewhere."""
    c = advantages[:, None].to(completion_mask) * completion_mask
    if dense is not None:
        c = c + dense.to(c) * completion_mask
    return c


def policy_loss(logp: torch.Tensor, credit: torch.Tensor, completion_mask: torch.Tensor,
                n_completions: int) -> torch.Tensor:
    """−Σ c_{g,h} log π(a_{g,h}) / N over the given completions (a micro-batch or all of them).

    Its gradient is −(1/N) Σ_g Σ_h c_{g,h} ∇ log π(a_{g,h}): the credit-weighted sum of token
    score functions of eq. (2), scaled by 1/N; micro-batch losses add up to the full loss.
    """
    return -(credit * logp * completion_mask).sum() / n_completions


@dataclass
class Credit:
    """What a credit rule returns: per-token credit [N, T] and the group advantages [N]."""

    tokens: torch.Tensor
    advantages: torch.Tensor
    continuation_tokens: int = 0  # tokens generated for credit (e.g. Monte-Carlo continuations)


def outcome_credit(rewards: torch.Tensor, completion_mask: torch.Tensor, *, group_size: int,
                   eps: float, advantages: torch.Tensor | None = None, **_: object) -> Credit:
    """Outcome-only GRPO: every token of completion g gets A_g (paper eq. 2 with w = 0).

    ``advantages``: sequence-level advantages computed elsewhere (a multi-reward aggregation
    rule such as MO-GRPO or Dr.GRPO, paper 2 §5) used instead of eq. (1).
    """
    adv = group_advantages(rewards, group_size, eps) if advantages is None else advantages.float()
    return Credit(token_credit(adv, completion_mask), adv)


# The extension point for dense rewards: name → rule(rewards, completion_mask, group_size=, eps=,
# **context) → Credit. A dense rule computes w_{g,h} (generating continuations through the
# context's engine if it needs them, counting them in ``continuation_tokens``) and returns
# token_credit(A, mask, dense=w).
CREDIT_RULES: dict[str, Callable[..., Credit]] = {"outcome": outcome_credit}


def _lazy(module: str, name: str) -> Callable[..., Credit]:
    """A rule defined in a module that imports this one (imported on first use: no cycle)."""
    def rule(*args: object, **kwargs: object) -> Credit:
        import importlib  # noqa: PLC0415

        return getattr(importlib.import_module(module), name)(*args, **kwargs)
    rule.__name__ = name
    return rule


# Dense rewards (docs/interventions.md "Dense rewards"). Their context: cfg, engine,
# policy, rollouts, prompts, answers, iteration, seed, verifier, state (trainer.interventions.monte_carlo.DenseState).
CREDIT_RULES.update({
    "monte_carlo": _lazy("trainer.interventions.monte_carlo", "monte_carlo_credit"),  # c = A + (p̂_s − p̂_{s−1}), §3.6
    "equal_iteration": _lazy("trainer.interventions.monte_carlo", "equal_iteration_credit"),  # c = A + α·w, MC-within, §1.E
    "shuffled": _lazy("trainer.interventions.monte_carlo", "shuffled_credit"),  # MC-within, credit permuted per completion
    "implicit": _lazy("trainer.interventions.monte_carlo", "implicit_credit"),  # w = log π_θ − log π_ref, MC-within pipeline
    "critic_td": _lazy("trainer.interventions.critic", "critic_td_credit"),  # ridge critic, V̂(b_s) − V̂(b_{s−1}), §3.7
    "critic_baseline": _lazy("trainer.interventions.critic", "critic_baseline_credit"),  # R − V̂(b_{s−1}), §3.7
    # Reuse variants (§3.10; trainer/interventions/reuse.py; the update: reuse.reuse_update)
    "vineppo": _lazy("trainer.interventions.reuse", "vineppo_credit"),  # V(b_s) − V(b_{s−1}), V(b_0) leave-one-out mean
    "continuation_reuse": _lazy("trainer.interventions.reuse", "continuation_reuse_credit"),  # MC reward + continuation sequences
})


def compute_credit(rule: str, rewards: torch.Tensor, completion_mask: torch.Tensor, *, group_size: int,
                   eps: float, **context: object) -> Credit:
    try:
        fn = CREDIT_RULES[rule]
    except KeyError:
        raise ValueError(f"unknown credit rule {rule!r} (have: {', '.join(CREDIT_RULES)})") from None
    return fn(rewards, completion_mask, group_size=group_size, eps=eps, **context)
