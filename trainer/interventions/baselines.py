"""Credit rules that replace the group-normalized advantage: REINFORCE with a leave-one-out
baseline, and a frozen process-reward model (PRM) as a reward or as a state-only baseline
(dense-rewards paper App. E; S4's pilots). docs/interventions.md.

* ``rloo`` — "REINFORCE with a leave-one-out baseline instead of the group-normalized advantage"
  (App. E): every token of completion i gets A_i = R_i − (1/(G−1)) Σ_{j≠i} R_j, with no
  division by the group's standard deviation (= G/(G−1)·(R_i − R̄)).
* ``prm_reward`` — "process-supervised GRPO (adapted from DeepSeekMath) with the frozen
  Qwen2.5-Math-PRM-7B and without the verifier reward" (App. E). DeepSeekMath §4.1.3: the
  step scores r of all completions of a group are normalized together, r̃ = (r − mean) / (SD + ε)
  (population SD, ε = ``advantage_eps``), and token h of completion g gets the sum of r̃ over
  g's steps that end at or after h. ``prm_add_outcome`` adds A_g of eq. (1) ("adding the outcome
  reward to the process rewards").
* ``prm_baseline`` — the PRM "as a baseline for the outcome reward that depends only on the
  state": token h of completion g gets R_g − V(s_{g,h}), V the PRM's score of the
  last step of g that ended before h (a function of the tokens before h only, so the estimator
  stays unbiased); tokens before the first step's end take V = the leave-one-out mean of the
  group's other outcomes, V(prompt) as in the VinePPO-style rule. Not normalized, like ``rloo``.

The PRM (``trainer.core.prm``) is loaded once per run, frozen, on first use; its forward passes
run in the credit stage, so their time is charged to it. It generates nothing, so it adds no tokens.
"""

from __future__ import annotations

import torch

from trainer.core.credit import Credit, CreditContext, token_credit
from trainer.core.prm import ProcessRewardModel, load_prm, split_steps, step_end_tokens


def leave_one_out_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """A_i = R_i − mean_{j≠i} R_j within each group of ``group_size`` consecutive completions."""
    r = rewards.detach().double().view(-1, group_size)
    loo = (r.sum(1, keepdim=True) - r) / (group_size - 1)
    return (r - loo).view(-1).float()


def rloo_credit(ctx: CreditContext) -> Credit:
    """REINFORCE-LOO: every token of completion i gets R_i − mean of the group's other outcomes."""
    adv = leave_one_out_advantages(ctx.rewards, ctx.group_size)
    return Credit(token_credit(adv, ctx.completion_mask), adv)


def completion_steps(ctx: CreditContext, prm: ProcessRewardModel) -> tuple[list[list[float]], list[list[int]]]:
    """Per completion, the PRM's step scores and the completion-token index where each step ends."""
    tok = ctx.policy.tokenizer
    sep = ctx.cfg.credit.prm_step_separator
    ids = ctx.rollouts.completion_ids.cpu()
    texts, ends = [], []
    for g in range(ctx.rollouts.n):
        n = int(ctx.completion_mask[g].sum())
        row = ids[g, :n].tolist()
        steps = split_steps(tok.decode(row, skip_special_tokens=True), sep) if n else []
        texts.append([s for s, _ in steps])
        ends.append(step_end_tokens(tok, row, [e for _, e in steps]))
    problems = list(ctx.problems) or list(ctx.prompts)
    scores = prm.score(problems, texts)
    return scores, ends


def process_advantages(scores: list[list[float]], ends: list[list[int]], group_size: int, width: int,
                       eps: float) -> torch.Tensor:
    """DeepSeekMath's process supervision: step scores normalized over the group, and token h of
    completion g credited with Σ r̃ over g's steps ending at or after h. [N, width]."""
    out = torch.zeros(len(scores), width, dtype=torch.float64)
    for start in range(0, len(scores), group_size):
        group = range(start, start + group_size)
        flat = torch.tensor([s for g in group for s in scores[g]], dtype=torch.float64)
        if flat.numel() == 0:
            continue
        mean, sd = flat.mean(), flat.std(unbiased=False)
        for g in group:
            for s, e in zip(scores[g], ends[g]):
                out[g, : e + 1] += (s - mean) / (sd + eps)  # the step's r̃ on every token up to its end
    return out.float()


def state_baseline(scores: list[list[float]], ends: list[list[int]], v0: torch.Tensor, width: int) -> torch.Tensor:
    """V(s_{g,h}): v0[g] up to and including the first step's end token, then the score of the
    last step that ended strictly before h. [N, width]."""
    v = v0.double()[:, None].repeat(1, width)
    for g, (sc, en) in enumerate(zip(scores, ends)):
        for s, e in zip(sc, en):
            v[g, e + 1:] = s
    return v.float()


def _prm(ctx: CreditContext) -> ProcessRewardModel:
    return ctx.state.prm(lambda: load_prm(ctx.cfg.credit.prm_model, ctx.study_dir, ctx.policy.device,
                                          ctx.cfg.credit.prm_step_token))


def prm_reward_credit(ctx: CreditContext) -> Credit:
    """Process-supervised GRPO: the PRM's normalized step scores as per-token reward-to-go
    (plus A_g when ``prm_add_outcome``)."""
    scores, ends = completion_steps(ctx, _prm(ctx))
    dense = process_advantages(scores, ends, ctx.group_size, ctx.completion_mask.shape[1], ctx.eps)
    adv = ctx.advantages if ctx.cfg.credit.prm_add_outcome else torch.zeros_like(ctx.advantages)
    return Credit(token_credit(adv, ctx.completion_mask, dense), adv)


def prm_baseline_credit(ctx: CreditContext) -> Credit:
    """R_g − V(s_{g,h}), V the PRM's score of the last finished step (state-only baseline)."""
    scores, ends = completion_steps(ctx, _prm(ctx))
    r = ctx.rewards.float()
    loo = leave_one_out_advantages(ctx.rewards, ctx.group_size)  # R − V(prompt)
    v = state_baseline(scores, ends, r - loo, ctx.completion_mask.shape[1])
    return Credit((r[:, None] - v) * ctx.completion_mask, loo)
