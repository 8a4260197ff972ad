"""The credit rules by name: ``TrainerConfig.credit.rule`` → the function that computes an iteration's
token credit from its :class:`~trainer.core.credit.CreditContext` (docs/interventions.md).

Outcome-only GRPO gives every token A_g (dense-rewards paper eq. (2) with w = 0); a dense rule adds a
per-token w_{g,h}, generating continuations through the context's engine when it needs them and
counting them in ``Credit.continuation_tokens``.
"""

from __future__ import annotations

from typing import Callable

from trainer.core.credit import Credit, CreditContext, outcome_credit
from trainer.interventions.baselines import prm_baseline_credit, prm_reward_credit, rloo_credit
from trainer.interventions.critic import critic_baseline_credit, critic_td_credit
from trainer.interventions.equal_iteration import equal_iteration_credit, implicit_credit, shuffled_credit
from trainer.interventions.monte_carlo import monte_carlo_credit
from trainer.interventions.reuse import continuation_reuse_credit, vineppo_credit

# Keys = the names ``TrainerConfig.credit.rule`` allows (a test holds the two together).
CREDIT_RULES: dict[str, Callable[[CreditContext], Credit]] = {
    "outcome": outcome_credit,  # c = A_g
    "monte_carlo": monte_carlo_credit,  # c = A + (p̂_s − p̂_{s−1}), §C.1 "Monte-Carlo reward"
    "equal_iteration": equal_iteration_credit,  # c = A + α·w, MC-within, App. G
    "shuffled": shuffled_credit,  # MC-within, credit permuted per completion
    "implicit": implicit_credit,  # w = log π_θ − log π_ref, MC-within pipeline
    "critic_td": critic_td_credit,  # ridge critic, V̂(b_s) − V̂(b_{s−1}), §C.1 "Learned critic"
    "critic_baseline": critic_baseline_credit,  # R − V̂(b_{s−1}), §C.1 "Learned critic"
    "vineppo": vineppo_credit,  # V(b_s) − V(b_{s−1}), V(b_0) leave-one-out mean, App. E
    "continuation_reuse": continuation_reuse_credit,  # MC reward + continuation sequences, App. E
    "rloo": rloo_credit,  # R_i − mean_{j≠i} R_j, no SD (REINFORCE-LOO, App. E)
    "prm_reward": prm_reward_credit,  # frozen PRM's normalized step scores as reward-to-go (App. E)
    "prm_baseline": prm_baseline_credit,  # R − V_PRM(last finished step), state-only baseline (App. E)
}

#: The rules whose credit draws continuations from cut points (their update has a Monte-Carlo k,
#: ``credit.mc_k``): what the gradient test records as ``mc_k`` and the core's synthetic gradient
#: rows assume (``prereg_kit.plan.gradient.CONTINUATION_RULES``, held equal by a test).
CONTINUATION_RULES = frozenset({"monte_carlo", "equal_iteration", "shuffled", "vineppo", "continuation_reuse"})


def compute_credit(rule: str, ctx: CreditContext) -> Credit:
    """The iteration's credit under the named rule."""
    try:
        fn = CREDIT_RULES[rule]
    except KeyError:
        raise ValueError(f"unknown credit rule {rule!r} (have: {', '.join(CREDIT_RULES)})") from None
    return fn(ctx)
