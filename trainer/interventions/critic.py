"""The learned critic (dense-rewards paper §C.1 "Learned critic (S2–S5, S26)").

A ridge regression on the policy's hidden states predicts a prefix's success probability. The
prefixes are the Monte-Carlo reward's: the prompt (cut 0) and the interior cuts b_1 … b_C
(``trainer.interventions.segments.cut_offsets``) that fall inside the completion; the target of each is the
completion's outcome R ∈ {0, 1}. Each iteration it is **refit on the rollouts of earlier
iterations only** (the last ``critic_window`` of them), scores the current rollouts, and only
then adds them to its buffer, so no iteration is scored by a critic fit on it. In use from
iteration index ``critic_start_iteration`` (4; 0-based, so four iterations of data); before that
the credit is outcome-only. Two forms, both added to the group advantage:

* TD: segment s gets V̂(b_s) − V̂(b_{s−1}), V̂(end) = R (``critic_td``);
* baseline: segment s gets R − V̂(b_{s−1}) (``critic_baseline``).

Choices the paper leaves open: features = the hidden state of layer
``critic_layer`` (−1: last, after the final norm) at the prefix's last token; features
standardized with the training rows' mean and SD; penalty ``critic_ridge`` on the standardized
weights, intercept unpenalized; predictions clipped to [0, 1]. Feature extraction (one forward
pass over the rollouts) and the fit run in the loop's credit stage, so they are charged to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from trainer.core.credit import Credit, CreditContext, token_credit
from trainer.core.policy import hidden_states
from trainer.interventions.ridge import Ridge
from trainer.interventions.segments import baseline_credit, boundary_values, cut_offsets, segment_credit


@dataclass
class CriticBuffer:
    """Prefix features and outcomes of earlier iterations: (iteration, X [M, d], y [M])."""

    window: int
    entries: list[tuple[int, torch.Tensor, torch.Tensor]] = field(default_factory=list)

    def add(self, iteration: int, x: torch.Tensor, y: torch.Tensor) -> None:
        self.entries = [e for e in self.entries if e[0] != iteration]  # a resumed iteration replaces itself
        self.entries.append((iteration, x.detach().cpu().float(), y.detach().cpu().float()))
        self.entries = sorted(self.entries, key=lambda e: e[0])[-self.window:]

    def fit(self, iteration: int, ridge: float) -> Ridge | None:
        """A ridge critic on iterations strictly before ``iteration`` (None: no data yet)."""
        rows = [e for e in self.entries if e[0] < iteration][-self.window:]
        if not rows:
            return None
        return Ridge.fit(torch.cat([e[1] for e in rows]), torch.cat([e[2] for e in rows]), ridge, standardize=True)

    def iterations(self) -> list[int]:
        return [e[0] for e in self.entries]

    def state_dict(self) -> dict:
        return {"window": self.window, "entries": [(i, x, y) for i, x, y in self.entries]}

    @classmethod
    def from_state_dict(cls, d: dict) -> "CriticBuffer":
        return cls(d["window"], [(int(i), x, y) for i, x, y in d["entries"]])


def prefix_features(policy, rollouts, cuts: Sequence[int], layer: int = -1) -> torch.Tensor:
    """[N, C+1, d]: hidden state at the last token of the prompt (cut 0) and of each prefix of
    b_i completion tokens (column prompt_len + b_i − 1; clamped for cuts past the batch's width,
    whose entries are not used)."""
    seqs, P = rollouts.sequences, rollouts.prompt_len
    cols = torch.tensor([P - 1] + [P + b - 1 for b in cuts]).clamp(max=seqs.shape[1] - 1)
    return hidden_states(policy, seqs, rollouts.attention_mask, cols, layer)


def valid_prefixes(cuts: Sequence[int], lengths: torch.Tensor) -> torch.Tensor:
    """[N, C+1] bool: the prompt, and the cuts strictly inside each completion."""
    inside = torch.tensor(list(cuts))[None, :] < lengths[:, None]
    return torch.cat([torch.ones_like(inside[:, :1]), inside], 1)


def critic_credit(ctx: CreditContext, form: str) -> Credit:
    """c = A_g + w with w the critic's TD or baseline credit (0 before ``critic_start_iteration``)."""
    cfg, rollouts, state, rewards, mask = ctx.cfg, ctx.rollouts, ctx.state, ctx.rewards, ctx.completion_mask
    cuts = cut_offsets(cfg)
    if state.critic is None:
        state.critic = CriticBuffer(cfg.credit.critic_window)
    feats = prefix_features(ctx.policy, rollouts, cuts, cfg.credit.critic_layer)  # [N, C+1, d]
    ok = valid_prefixes(cuts, rollouts.lengths)
    model = state.critic.fit(ctx.iteration, cfg.credit.critic_ridge) if ctx.iteration >= cfg.credit.critic_start_iteration else None
    w = None
    if model is not None:  # score with a critic fit on earlier iterations only
        v = model.predict(feats.reshape(-1, feats.shape[-1])).view(feats.shape[0], -1)
        values = boundary_values(v[:, 0], v[:, 1:], rewards.double(), cuts, rollouts.lengths)
        w = (segment_credit(values, cuts, mask) if form == "td"
             else baseline_credit(values, rewards, cuts, mask))
    # Only now does the current iteration join the buffer (targets: each prefix's outcome R).
    y = rewards.float()[:, None].expand_as(ok)
    state.critic.add(ctx.iteration, feats[ok], y[ok])
    return Credit(token_credit(ctx.advantages, mask, dense=w), ctx.advantages, 0)


def critic_td_credit(ctx: CreditContext) -> Credit:
    return critic_credit(ctx, "td")


def critic_baseline_credit(ctx: CreditContext) -> Credit:
    return critic_credit(ctx, "baseline")
