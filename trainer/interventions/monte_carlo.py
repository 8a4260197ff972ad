"""The Monte-Carlo reward (dense-rewards paper §2.2 "Monte-Carlo reward", §C.1 "Monte-Carlo reward"): k
continuations from each interior cut of a completion estimate p̂ there, and segment s gets
p̂_s − p̂_{s−1} added to the group advantage. Registered as ``monte_carlo`` in
``trainer.interventions.credit_rules.CREDIT_RULES``; the segments are
``trainer.interventions.segments``. Every choice the paper leaves open is a ``TrainerConfig``
field (docs/interventions.md, "Dense rewards").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from trainer.config import TrainerConfig, derive_seed
from trainer.core.credit import Credit, CreditContext, token_credit
from trainer.core.reward_step import verify_rewards
from trainer.interventions.segments import boundary_values, cut_offsets, last_start_value, segment_credit

MAX_K = 1 << 20  # request keys n·MAX_K + j: draw j of completion n, whatever k (common random numbers)


@dataclass
class Draws:
    """The continuations drawn at one cut: k per parent completion, parent-major."""

    cut: int  # the cut offset b (tokens of the parent kept as prefix)
    parents: torch.Tensor  # [M] index of each draw's parent completion
    generated: Any  # the engine's output for the draws (completion_ids, lengths, completion_mask, ...)
    outcomes: torch.Tensor  # [M] verifier outcome of prefix + continuation (0/1)


@dataclass
class MonteCarlo:
    """p̂ at each interior cut, the draws behind it, and what the continuations cost."""

    cuts: list[int]
    p_hat: torch.Tensor  # [N, C] fraction of k continuations that succeed (NaN where the completion ended)
    drawn: torch.Tensor  # [N, C] bool: continuations were drawn (cut inside the completion)
    tokens: int  # continuation tokens generated (EOS included), what B counts as ``continuation``
    draws: list[Draws] = field(default_factory=list)  # discarded by the MC reward; continuation reuse trains on them


def monte_carlo_values(ctx: CreditContext) -> MonteCarlo:
    """k continuations from each prefix that ends at an interior cut inside its completion (§C.1 "Monte-Carlo reward").

    One batched ``engine.generate`` call per cut: prompt text + decoded prefix, limit = the rest
    of the completion limit (capped by ``mc_continuation_limit``). Seeds: noise seed
    derive_seed(run seed, iteration, "mc/<cut offset>"), request key n·MAX_K + j for draw j of
    completion n, so k = 1 and k = 4 share their first draw. Each continuation is scored on
    prefix + continuation by the training verifier; the draws are kept in ``MonteCarlo.draws``
    (the Monte-Carlo reward discards them, continuation reuse trains on them).
    """
    cfg, rollouts, prompts, answers = ctx.cfg, ctx.rollouts, ctx.prompts, ctx.answers
    cuts, k, tok = cut_offsets(cfg), cfg.credit.mc_k, ctx.policy.tokenizer
    comp = rollouts.completion_ids.cpu()
    lengths = rollouts.lengths
    n = rollouts.n
    p_hat = torch.full((n, len(cuts)), float("nan"), dtype=torch.float64)
    drawn = torch.zeros((n, len(cuts)), dtype=torch.bool)
    tokens, draws = 0, []
    for ci, b in enumerate(cuts):
        rows = [i for i in range(n) if int(lengths[i]) > b]  # completions still running after b tokens
        if not rows:
            continue
        prefixes = {i: comp[i, :b].tolist() for i in rows}
        texts = [prompts[i] + tok.decode(prefixes[i], skip_special_tokens=False) for i in rows for _ in range(k)]
        keys = [i * MAX_K + j for i in rows for j in range(k)]
        limit = cfg.rollout.completion_limit - b
        if cfg.credit.mc_continuation_limit:
            limit = min(limit, cfg.credit.mc_continuation_limit)
        cont = ctx.engine.generate(texts, noise_seed=derive_seed(ctx.seed, ctx.iteration, f"mc/{b}"), keys=keys, limit=limit,
                               temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)
        tokens += cont.tokens
        cids = cont.completion_ids.cpu()
        full = [prefixes[i] + cids[r, :int(cont.lengths[r])].tolist()
                for r, i in enumerate(i for i in rows for _ in range(k))]
        ok = verify_rewards(ctx.verifier, tok.batch_decode(full, skip_special_tokens=True), [answers[i] for i in rows for _ in range(k)])
        p_hat[rows, ci] = ok.view(len(rows), k).double().mean(1)
        drawn[rows, ci] = True
        draws.append(Draws(b, torch.tensor(rows).repeat_interleave(k), cont, ok))
    return MonteCarlo(cuts, p_hat, drawn, tokens, draws)


def mc_values(mc: MonteCarlo, cfg: TrainerConfig, rewards: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Boundary values of the Monte-Carlo reward: p̂_0 = ``mc_prompt_value``, p̂ at the cuts, and
    V(end) = R (``mc_end_value = "outcome"``) or the last segment's start (no credit on it)."""
    n = rewards.shape[0]
    v0 = torch.full((n,), cfg.credit.mc_prompt_value, dtype=torch.float64)
    end = rewards.double()
    values = boundary_values(v0, mc.p_hat.nan_to_num(0.0), end, mc.cuts, lengths)
    if cfg.credit.mc_end_value == "none":
        end = last_start_value(values, mc.cuts, lengths)
        values = boundary_values(v0, mc.p_hat.nan_to_num(0.0), end, mc.cuts, lengths)
    return values


def monte_carlo_credit(ctx: CreditContext) -> Credit:
    """The Monte-Carlo reward (S1, S25): c_{g,h} = A_g + (p̂_s − p̂_{s−1}) for h in segment s,
    the segment credit added to the group advantage **without centering** (§C.1 "Monte-Carlo reward")."""
    return mc_credit(monte_carlo_values(ctx), ctx)


def mc_credit(mc: MonteCarlo, ctx: CreditContext) -> Credit:
    """The Monte-Carlo reward's credit from drawn continuations ``mc`` (see ``monte_carlo_credit``)."""
    w = segment_credit(mc_values(mc, ctx.cfg, ctx.rewards, ctx.rollouts.lengths), mc.cuts, ctx.completion_mask)
    return Credit(token_credit(ctx.advantages, ctx.completion_mask, dense=w), ctx.advantages, mc.tokens)
