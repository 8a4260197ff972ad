"""The reuse variants of the dense-rewards paper (App. E "Rollout reuse and the
VinePPO-style advantage", "Continuation reuse at the gradient level", Table 16),
and the multi-step clipped update they need. docs/interventions.md, "Reuse variants".

* **VinePPO-style value differences** (``credit = "vineppo"``): token credit in segment s is
  V(b_s) − V(b_{s−1}) with V(b_0) = the leave-one-out group mean of the outcomes, V(b_s) = the
  Monte-Carlo continuations' p̂ at interior cut b_s, V(end) = R; no group advantage is added and
  nothing is normalized. A completion that ends before a cut takes V = R there (trainer/interventions/monte_carlo.py);
  each completion's segment differences sum to R_g − V(b_0), REINFORCE's leave-one-out advantage.
* **Continuation reuse** (``credit = "continuation_reuse"``): the rollouts get the Monte-Carlo
  reward (A_g + p̂_s − p̂_{s−1}); every continuation becomes a training sequence prompt + prefix +
  continuation whose continuation tokens get R_j − mean of the other k − 1 draws' outcomes at that
  cut, and whose prefix tokens get nothing ("shared prefixes trained once, in the rollout").
* **The clipped update** (``ppo_epochs`` × ``ppo_minibatches`` steps, ratio clip ``ppo_clip``):
  log-probs of the generating policy computed once, before the first step; each step minimizes
  −Σ_h min(ρ·c, clip(ρ, 1 − ε_low, 1 + ε_high)·c) / n over one minibatch of n sequences (ρ = π/π_old,
  c the token credit; ``update.clipped_loss``), the sum over tokens and the division by sequences as
  in ``update.policy_loss``.
  VinePPO-style with four steps per batch is ``ppo_epochs = 2, ppo_minibatches = 2, ppo_clip = 0.2``.

Continuation tokens count toward B once, as ``tokens_continuation`` (they are generated for the
credit); training on them generates nothing. Everything here runs in the loop's credit stage
(continuations, scoring, building sequences) or update stage (old log-probs, the steps).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from trainer.config import TrainerConfig, derive_seed
from trainer.core.credit import Credit, CreditContext
from trainer.core.policy import synchronize, token_logprobs
from trainer.core.update import clipped_loss, policy_loss  # clipped_loss: reuse's public name
from trainer.interventions.monte_carlo import mc_credit, monte_carlo_values
from trainer.interventions.segments import boundary_values, segment_credit


# --------------------------------------------------------------------------------------------
# Training sequences
# --------------------------------------------------------------------------------------------
@dataclass
class TrainBatch:
    """Sequences of one width for the update: ``prompt_len`` context columns (left-padded), then
    credited columns; ``completion_mask`` marks the generated tokens there, ``credit`` their credit."""

    sequences: torch.Tensor  # [n, P + T] token ids
    attention_mask: torch.Tensor  # [n, P + T]
    prompt_len: int
    completion_mask: torch.Tensor  # [n, T] float
    credit: torch.Tensor  # [n, T]

    @property
    def n(self) -> int:
        return int(self.sequences.shape[0])

    @classmethod
    def from_rollouts(cls, roll, credit: torch.Tensor) -> "TrainBatch":
        return cls(roll.sequences, roll.attention_mask, roll.prompt_len, roll.completion_mask, credit)


@dataclass
class ReuseCredit(Credit):
    """A rule's credit plus further training sequences (the continuations of continuation reuse)."""

    sequences: list[TrainBatch] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# VinePPO-style value differences (dense-rewards paper App. E; Table 16)
# --------------------------------------------------------------------------------------------
def leave_one_out_mean(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """V(prompt) per completion: the mean of the other G − 1 outcomes of its group [N] (float64)."""
    r = rewards.double().view(-1, group_size)
    return ((r.sum(1, keepdim=True) - r) / (group_size - 1)).view(-1)


def vineppo_values(p_hat: torch.Tensor, rewards: torch.Tensor, cuts, lengths: torch.Tensor,
                   group_size: int) -> torch.Tensor:
    """Boundary values [N, C+2]: leave-one-out mean, p̂ at the cuts (V = R at cuts past the end), R."""
    return boundary_values(leave_one_out_mean(rewards, group_size), p_hat.nan_to_num(0.0), rewards.double(),
                           cuts, lengths)


def vineppo_credit(ctx: CreditContext) -> Credit:
    """c_{g,h} = V(b_s) − V(b_{s−1}) for h in segment s, alone (no A_g, not normalized); the
    continuations are the Monte-Carlo reward's (``mc_k`` per interior cut, trainer/interventions/monte_carlo.py).
    ``Credit.advantages`` holds the per-completion sum R_g − V(b_0)."""
    mc = monte_carlo_values(ctx)
    values = vineppo_values(mc.p_hat, ctx.rewards, mc.cuts, ctx.rollouts.lengths, ctx.group_size)
    w = segment_credit(values, mc.cuts, ctx.completion_mask)
    return Credit(w, (values[:, -1] - values[:, 0]).float(), mc.tokens)


# --------------------------------------------------------------------------------------------
# Continuation reuse (dense-rewards paper App. E; Table 16)
# --------------------------------------------------------------------------------------------
def leave_one_out_advantages(outcomes: torch.Tensor) -> torch.Tensor:
    """[M, k] → R_j − mean of the other k − 1 draws' outcomes from the same prefix (k ≥ 2)."""
    k = outcomes.shape[1]
    o = outcomes.double()
    return o - (o.sum(1, keepdim=True) - o) / (k - 1)


def continuation_batch(rollouts, cut: int, parents: torch.Tensor, cont, advantages: torch.Tensor) -> TrainBatch:
    """Continuation sequences from one cut: the parent's prompt and first ``cut`` completion tokens
    (its own token ids, as trained in the parent) as context, then the continuation; only the
    continuation's tokens carry credit (``advantages`` [M], one per draw)."""
    dev = rollouts.sequences.device
    P = rollouts.prompt_len + cut
    idx = parents.to(dev)
    cmask = cont.completion_mask.to(dev).float()
    seqs = torch.cat([rollouts.sequences[idx, :P], cont.completion_ids.to(dev)], 1)
    attn = torch.cat([rollouts.attention_mask[idx, :P], cmask.long()], 1)
    return TrainBatch(seqs, attn, P, cmask, advantages[:, None].to(cmask) * cmask)


def continuation_reuse_credit(ctx: CreditContext) -> ReuseCredit:
    """Rollouts: the Monte-Carlo reward, c = A_g + (p̂_s − p̂_{s−1}) (the k = ``mc_k`` reward).
    Continuations: one training sequence each, credit R_j − mean_{j'≠j} R_{j'} among the k draws
    from the same prefix on its continuation tokens, 0 on the prefix (trained once, in the rollout)."""
    mc = monte_carlo_values(ctx)
    base = mc_credit(mc, ctx)
    batches = [continuation_batch(ctx.rollouts, d.cut, d.parents, d.generated,
                                  leave_one_out_advantages(d.outcomes.view(-1, ctx.cfg.credit.mc_k)).view(-1))
               for d in mc.draws]
    return ReuseCredit(base.tokens, base.advantages, base.continuation_tokens, sequences=batches)


# --------------------------------------------------------------------------------------------
# The update: one on-policy step, or ppo_epochs × ppo_minibatches clipped steps
# --------------------------------------------------------------------------------------------
def steps_per_iteration(cfg: TrainerConfig) -> int:
    """Optimizer steps per iteration, what the run log's ``updates`` counts: epochs × minibatches."""
    return cfg.update.ppo_epochs * cfg.update.ppo_minibatches


def uses_reuse_update(cfg: TrainerConfig) -> bool:
    """True when the iteration's update is not ``update.update_step`` (several steps, or extra sequences)."""
    return steps_per_iteration(cfg) > 1 or cfg.credit.rule == "continuation_reuse"


def minibatch_order(n: int, epochs: int, minibatches: int, seed: int, iteration: int) -> list[np.ndarray]:
    """Sequence indices of each step: per epoch a permutation (seed derive_seed(run seed, iteration,
    "ppo/<epoch>")) cut into ``minibatches`` near-equal parts; no permutation with one minibatch."""
    steps = []
    for e in range(epochs):
        order = (np.random.default_rng(derive_seed(seed, iteration, f"ppo/{e}")).permutation(n) if minibatches > 1
                 else np.arange(n))
        steps.extend(np.array_split(order, minibatches))
    return steps


def _rows_by_batch(index: np.ndarray, starts: list[int]) -> list[tuple[int, torch.Tensor]]:
    """Global sequence indices → (batch, sorted row indices) pairs."""
    out = []
    for bi in range(len(starts) - 1):
        sel = np.sort(index[(index >= starts[bi]) & (index < starts[bi + 1])]) - starts[bi]
        if len(sel):
            out.append((bi, torch.as_tensor(sel, dtype=torch.long)))
    return out


def reuse_update(policy, optimizer: torch.optim.Optimizer, roll, credit: Credit, lr: float, *, seed: int,
                 iteration: int) -> dict[str, float]:
    """The update of the reuse variants: the rollouts (credit ``credit.tokens``) and any further
    sequences (``ReuseCredit.sequences``), in ``steps_per_iteration`` optimizer steps.

    One step: the on-policy loss −Σ c log π / n over all n sequences (continuation reuse: "the loss
    divided by their number"). Several: old log-probs once (no grad), then the clipped surrogate
    per minibatch. Each step clips the gradient norm to ``grad_clip`` and takes one Adam step at
    ``lr``. Sequences with no credited token contribute no gradient and are skipped in the forward
    pass, but count in n. Returns mean loss and pre-clip gradient norm over the steps, ``lr``,
    forward/backward seconds, the share of credited token-steps where the clip binds, and the
    number of continuation sequences (``reuse_sequences``).
    """
    cfg, dev = policy.cfg, policy.device
    batches = [TrainBatch.from_rollouts(roll, credit.tokens)] + list(getattr(credit, "sequences", []))
    batches = [_to(b, dev) for b in batches]
    starts = np.cumsum([0] + [b.n for b in batches]).tolist()
    live = [((b.credit * b.completion_mask).abs().sum(1) > 0).cpu() for b in batches]  # rows with any credit
    model = policy.model
    model.train()
    for group in optimizer.param_groups:
        group["lr"] = lr
    steps = minibatch_order(starts[-1], cfg.update.ppo_epochs, cfg.update.ppo_minibatches, seed, iteration)
    mb = cfg.update.micro_batch_size or starts[-1]
    t0 = time.perf_counter()
    old = _old_logprobs(policy, batches, live, mb) if len(steps) > 1 else None
    fwd_bwd = time.perf_counter() - t0
    losses, norms, binds, credited = [], [], 0, 0
    params = [p for p in model.parameters() if p.requires_grad]
    for part in steps:
        optimizer.zero_grad(set_to_none=True)
        total, n = 0.0, len(part)
        t0 = time.perf_counter()
        for bi, rows in _rows_by_batch(part, starts):
            b, rows = batches[bi], rows[live[bi][rows].cpu()]
            for s in range(0, len(rows), mb):
                r = rows[s:s + mb].to(dev)
                logp = _logp(policy, b, r)
                if old is None:
                    loss = policy_loss(logp, b.credit[r], b.completion_mask[r], n_completions=n)
                else:
                    loss, bind = clipped_loss(logp, old[bi][r], b.credit[r], b.completion_mask[r], cfg.update.clip_range, n)
                    binds += int(bind.sum())
                    credited += int(((b.credit[r] != 0) & (b.completion_mask[r] > 0)).sum())
                loss.backward()
                total += float(loss.detach())
        synchronize(dev)
        fwd_bwd += time.perf_counter() - t0
        if all(p.grad is None for p in params):  # nothing credited: a zero-gradient Adam step, as update_step takes
            for p in params:
                p.grad = torch.zeros_like(p)
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, cfg.update.grad_clip)))
        optimizer.step()
        losses.append(total)
    return {"loss": float(np.mean(losses)), "grad_norm": float(np.mean(norms)), "lr": lr, "fwd_bwd_seconds": fwd_bwd,
            "clip_fraction": binds / credited if credited else 0.0, "reuse_sequences": starts[-1] - starts[1]}


def _logp(policy, b: TrainBatch, rows: torch.Tensor) -> torch.Tensor:
    return token_logprobs(policy, b.sequences[rows], b.attention_mask[rows], b.prompt_len)


@torch.no_grad()
def _old_logprobs(policy, batches: list[TrainBatch], live: list[torch.Tensor], mb: int) -> list[torch.Tensor]:
    """log π_old on every credited row, from the weights that generated the batch (before any step)."""
    out = []
    for b, ok in zip(batches, live):
        lp = torch.zeros_like(b.credit, dtype=torch.float32)
        rows = ok.nonzero().view(-1).to(lp.device)
        for s in range(0, len(rows), mb):
            r = rows[s:s + mb]
            lp[r] = _logp(policy, b, r)
        out.append(lp)
    return out


def _to(b: TrainBatch, dev) -> TrainBatch:
    return TrainBatch(b.sequences.to(dev), b.attention_mask.to(dev), b.prompt_len, b.completion_mask.to(dev),
                      b.credit.to(dev).float())
