"""Segments of a completion and the credit of value differences across them (dense-rewards paper
§2.2 "Monte-Carlo reward", §C.1 "Monte-Carlo reward"): what the Monte-Carlo reward, the learned
critic and the VinePPO-style values share.
 A completion of limit L_max is cut at interior offsets b_1 < … < b_C (tokens), default
b_i = round(i·L_max/S) for i = 1 … S−1 with S = ``mc_segments`` = 6 (128 … 640 at 768, the
paper's offsets; 63 … 317 at 380; 7 … 33 at 40). Segment s covers token positions
[b_{s−1}, b_s), b_0 = 0, b_{C+1} = ∞. Given values V at the boundaries — V(b_0) the prompt value,
V(b_s) the value of the prefix of b_s tokens, V(end) the value at the completion's end — segment
s's credit is V(b_s) − V(b_{s−1}) on each of its tokens. **A completion of length ℓ ≤ b_s has
ended before cut s**: its prefix is the whole completion, whose value is known (V = V(end)), so
no continuation is drawn there, and the segment holding its last token ends at V(end).
"""

from __future__ import annotations

from typing import Sequence

import torch

from trainer.config import TrainerConfig


def cut_offsets(cfg: TrainerConfig) -> list[int]:
    """Interior cut offsets: ``mc_cuts``, or round(i·L_max/S), i = 1 … S−1 (128 … 640 at 768)."""
    if cfg.credit.mc_cuts:
        return list(cfg.credit.mc_cuts)
    L, S = cfg.rollout.completion_limit, cfg.credit.mc_segments
    cuts = sorted({int(i * L / S + 0.5) for i in range(1, S)})  # round half up, no duplicates
    return [b for b in cuts if 0 < b < L]


def segment_index(cuts: Sequence[int], width: int) -> torch.Tensor:
    """[T] segment of each token position h: the number of cuts b ≤ h (0 … C)."""
    return torch.bucketize(torch.arange(width), torch.tensor(list(cuts), dtype=torch.long), right=True)


def boundary_values(v0: torch.Tensor, interior: torch.Tensor, end: torch.Tensor, cuts: Sequence[int],
                    lengths: torch.Tensor) -> torch.Tensor:
    """V at boundaries b_0 … b_C and the end: [N, C+2]. A cut at or past the completion's length
    takes the end value (the completion has ended there)."""
    ended = torch.tensor(list(cuts))[None, :] >= lengths[:, None]  # [N, C]
    mid = torch.where(ended, end[:, None], interior)
    return torch.cat([v0[:, None], mid, end[:, None]], 1).double()


def last_start_value(values: torch.Tensor, cuts: Sequence[int], lengths: torch.Tensor) -> torch.Tensor:
    """V at the start of the segment that holds each completion's last token."""
    idx = (torch.tensor(list(cuts))[None, :] < lengths[:, None]).sum(1)  # cuts strictly inside
    return values.gather(1, idx[:, None]).squeeze(1)


def segment_credit(values: torch.Tensor, cuts: Sequence[int], mask: torch.Tensor) -> torch.Tensor:
    """w_{n,h} = V(b_s) − V(b_{s−1}) for token h in segment s: [N, T] (0 on padding)."""
    seg = values[:, 1:] - values[:, :-1]  # [N, C+1]
    idx = segment_index(cuts, mask.shape[1])
    return seg[:, idx].to(mask) * mask


def baseline_credit(values: torch.Tensor, outcome: torch.Tensor, cuts: Sequence[int],
                    mask: torch.Tensor) -> torch.Tensor:
    """w_{n,h} = R_n − V(b_{s−1}) for token h in segment s (the critic's baseline form)."""
    start = values[:, :-1]  # [N, C+1]: the value at each segment's start
    idx = segment_index(cuts, mask.shape[1])
    return (outcome.double()[:, None] - start)[:, idx].to(mask) * mask
