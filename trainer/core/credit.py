"""Credit assignment: group advantages and per-token credit, and the context every credit rule reads.

Dense-rewards paper §2.1 eq. (1)-(2) and §C.1 "Implementation":

* Eq. (1): A_g = (R_g − R̄) / (σ + ε), R̄ the group mean and σ the group's **population**
  standard deviation (divide by G). ε = ``advantage_eps`` (default 1e-6; the paper does not state
  its value). With 0/1 rewards a mixed group has σ ≥ √((G−1))/G, so ε changes A by < 1e-5
  relative; a uniform group has A_g = 0 exactly, whatever ε. The arithmetic is the aggregation
  rules' (``trainer.rewards.aggregation.grpo_advantage``): one definition of the z-score.
* Eq. (2): the update is Σ_g Σ_h c_{g,h} ∇ log π(a_{g,h}); outcome-only GRPO uses
  c_{g,h} = A_g on every token of completion g; a dense reward adds a per-token term,
  c_{g,h} = A_g + w_{g,h} (:func:`token_credit` takes ``dense``). A credit rule maps a
  :class:`CreditContext` to a :class:`Credit`; the rules by name are
  ``trainer.interventions.credit_rules.CREDIT_RULES``. The loss is ``trainer.core.update``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from trainer.config import TrainerConfig
from trainer.rewards.aggregation import grpo_advantage


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float) -> torch.Tensor:
    """Eq. (1) per group: ``rewards`` [N] laid out group by group (G consecutive completions);
    float64 arithmetic, float32 result."""
    r = rewards.detach().cpu().double().view(-1, group_size).numpy()
    return torch.from_numpy(grpo_advantage(r, eps=eps)).view(-1).float()


def token_credit(advantages: torch.Tensor, completion_mask: torch.Tensor,
                 dense: torch.Tensor | None = None) -> torch.Tensor:
    """c_{g,h} = A_g (+ w_{g,h} when a dense reward gives one) on generated tokens, 0 elsewhere."""
    c = advantages[:, None].to(completion_mask) * completion_mask
    if dense is not None:
        c = c + dense.to(c) * completion_mask
    return c


@dataclass
class Credit:
    """What a credit rule returns: per-token credit [N, T] and the group advantages [N]."""

    tokens: torch.Tensor
    advantages: torch.Tensor
    continuation_tokens: int = 0  # tokens generated for credit (e.g. Monte-Carlo continuations)


@dataclass(frozen=True)
class CreditContext:
    """What a credit rule reads about one iteration.

    ``advantages`` are A_g: the aggregation rule's sequence-level advantages in a multi-reward run
    (multi-reward paper §3.1–3.2, App. C: MO-GRPO, Dr.GRPO, ...), else eq. (1) on ``rewards`` (:meth:`of` computes them).
    Dense rules also read the rollouts, each completion's rendered prompt and gold answer, the
    policy and the generation engine (continuations, forward passes), the training verifier,
    the run seed and iteration (their random streams) and ``state``, what they keep across
    iterations (``trainer.interventions.state.DenseState``)."""

    rewards: torch.Tensor  # R_g [N], group by group
    advantages: torch.Tensor  # A_g [N]
    completion_mask: torch.Tensor  # [N, T]: 1 on generated tokens
    group_size: int
    eps: float
    cfg: TrainerConfig | None = None
    rollouts: Any = None  # trainer.core.engines.Rollouts
    prompts: Sequence[str] = ()
    answers: Sequence[str] = ()
    iteration: int = 0
    seed: int = 0
    policy: Any = None  # trainer.core.policy.Policy
    engine: Any = None  # trainer.core.engines.Engine
    verifier: Callable[[str, str], bool] | None = None
    state: Any = None  # trainer.interventions.state.DenseState
    problems: Sequence[str] = ()  # each completion's problem text, unrendered (the PRM renders its own)
    study_dir: str = ""  # where relative model folders (credit.prm_model) are found

    @classmethod
    def of(cls, rewards: torch.Tensor, completion_mask: torch.Tensor, *, group_size: int, eps: float,
           advantages: torch.Tensor | None = None, **fields: Any) -> "CreditContext":
        """The context with A_g = ``advantages`` (an aggregation rule's) or, when None, eq. (1)."""
        adv = group_advantages(rewards, group_size, eps) if advantages is None else advantages.float()
        return cls(rewards, adv, completion_mask, group_size, eps, **fields)


def outcome_credit(ctx: CreditContext) -> Credit:
    """Outcome-only GRPO: every token of completion g gets A_g (paper eq. 2 with w = 0)."""
    return Credit(token_credit(ctx.advantages, ctx.completion_mask), ctx.advantages)
