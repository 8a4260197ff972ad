"""The reward step of one GRPO iteration: each completion's reward R_g and, for multi-reward runs,
the aggregation rule's sequence-level advantages.

A recipe without ``channels`` trains on the verifier reward (:func:`verify_rewards`; credit then
computes eq. 1). A recipe with ``channels`` (``trainer.rewards.spec``) scores every completion
on each channel (``trainer/rewards/channels.py``), shapes the group's rewards with the
``aggregation`` rule (``trainer/rewards/aggregation.py``) and hands the rule's advantages to the
credit rule in place of eq. 1 (docs/multi-reward.md, "Wiring in the trainer").

Code tasks (``task = "code"``; docs/multi-reward.md, "Program channels in training"): the
channels ``program_correct`` and ``program_fast`` read one sandbox result per completion,
judged once per iteration (``channels.judge_programs``: distinct (program, tests) pairs, at most
``sandbox.max_workers`` at a time) and shared by both; the rewarder owns the run's ``Sandbox``
(``trainer.core.program_judge``). A code task without ``channels`` trains on ``program_correct``
alone (rule ``primary``: eq. 1 on R_P); the verifier reward reads a math answer and is never
used for programs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from trainer.core.program_judge import make_sandbox
from trainer.errors import ConfigError
from trainer.rewards.aggregation import (
    AggregationConfig,
    LagrangeState,
    iteration_log,
    parse_aggregation,
    rule_advantages,
    rule_kl_beta,
)
from trainer.rewards.channels import Channel, Completion, judge_programs, score_channels
from trainer.rewards.sandbox import ProgramResult, Sandbox
from trainer.rewards.spec import ELECTION_FILE, build_channels, read_election

__all__ = ["IterationRewards", "Rewarder", "make_rewarder", "state_from_dict", "state_to_dict", "verify_rewards"]


def verify_rewards(verifier, texts: Sequence[str], answers: Sequence[str]) -> torch.Tensor:
    """R_g ∈ {0, 1}: the verifier on each completion (identical (text, answer) pairs checked once)."""
    seen: dict[tuple[str, str], float] = {}
    out = []
    for t, a in zip(texts, answers):
        if (t, a) not in seen:
            seen[(t, a)] = float(verifier(t, a))
        out.append(seen[(t, a)])
    return torch.tensor(out)


@dataclass(frozen=True)
class IterationRewards:
    """What the credit block gets: rewards [N] (the shaped scalar, or the anchor channel when the
    rule has none), advantages [N] (None: eq. 1 on the rewards), log columns, the rule's state."""

    rewards: Any  # torch.Tensor
    advantages: Any  # torch.Tensor | None
    log: dict[str, float] = field(default_factory=dict)
    state: Any = None


@dataclass
class Rewarder:
    """The per-iteration reward of one run (see the module docstring)."""

    channels: list[Channel]
    names: list[str]
    agg: AggregationConfig | None
    anchor_name: str = ""
    sandbox: Sandbox | None = None  # task = "code": the program judge (made once, at run start)

    @property
    def multi(self) -> bool:
        return self.agg is not None

    @property
    def kl_beta(self) -> float:
        return rule_kl_beta(self.agg) if self.agg is not None else 0.0

    def __call__(self, verifier, texts: Sequence[str], lengths: Sequence[int], problems: Sequence[Any],
                 group_size: int, *, state: Any = None, rng: np.random.Generator | None = None,
                 l_max: int | None = None, eps: float = 1e-6) -> IterationRewards:
        if self.agg is None:
            return IterationRewards(verify_rewards(verifier, list(texts), [p.answer for p in problems]), None, {}, state)
        comps = [Completion(t, int(n)) for t, n in zip(texts, lengths)]
        S, program_log = _score_memo(self.channels, comps, problems, self.sandbox)
        G = len(texts) // group_size
        R = S.reshape(G, group_size, len(self.channels))
        L = np.asarray(lengths, dtype=np.float64).reshape(G, group_size)
        res = rule_advantages(R, rule=self.agg, lengths=L, l_max=l_max, rng=rng, state=state, eps=eps)
        log = iteration_log(R, self.names, res, self.agg)
        shaped = res.rewards if res.rewards is not None else R[:, :, self.agg.anchor]
        adv = np.asarray(res.advantages, dtype=np.float64)
        # groups whose advantages carry a signal (the verifier path's "mixed" groups)
        log["mixed_share"] = float((np.abs(adv).max(axis=1) > 0).mean())
        log.update(program_log)
        return IterationRewards(torch.tensor(shaped.reshape(-1), dtype=torch.float32),
                                torch.tensor(adv.reshape(-1), dtype=torch.float32), log, res.state)


def _score_memo(channels: Sequence[Channel], comps: Sequence[Completion], problems: Sequence[Any],
                sandbox: Sandbox | None = None) -> tuple[np.ndarray, dict[str, float]]:
    """score_channels with identical (text, length, answer, tests) quadruples scored once, and,
    when a channel judges programs, the judge's log columns (``program/*``)."""
    keys = [(c.text, int(c.tokens), getattr(p, "answer", None), tuple(getattr(p, "tests", ()) or ()))
            for c, p in zip(comps, problems)]
    first: dict[tuple, int] = {}
    idx = [first.setdefault(k, len(first)) for k in keys]
    uniq_c, uniq_p = [None] * len(first), [None] * len(first)
    for i, j in enumerate(idx):
        if uniq_c[j] is None:
            uniq_c[j], uniq_p[j] = comps[i], problems[i]
    programs, log = None, {}
    if any(ch.needs_program for ch in channels):
        if sandbox is None:
            raise ValueError("program channels need the run's sandbox (task = 'code')")
        programs, log = _judge(sandbox, uniq_c, uniq_p, idx)
    S = score_channels(channels, uniq_c, uniq_p, programs=programs)
    return (S[np.asarray(idx, dtype=int)] if len(idx) else np.zeros((0, len(channels)))), log


def _judge(sandbox: Sandbox, comps: Sequence[Completion], problems: Sequence[Any],
           idx: Sequence[int]) -> tuple[list[ProgramResult], dict[str, float]]:
    """Each distinct completion's program judged once; ``program/seconds`` (wall seconds of the
    judge: part of the credit stage), ``program/judged`` (distinct programs run),
    ``program/timeout_rate`` (over all completions) and ``program/start_errors`` (tests the
    machine could not start: EAGAIN, ENOMEM; a failure, not an exception)."""
    t0 = time.perf_counter()
    programs = judge_programs(sandbox, comps, problems)
    secs = time.perf_counter() - t0
    distinct = {id(r): r for r in programs}.values()
    log = {"program/seconds": secs, "program/judged": float(len(distinct)),
           "program/timeout_rate": float(np.mean([programs[j].timed_out for j in idx])) if len(idx) else 0.0,
           "program/start_errors": float(sum(t.detail.startswith("sandbox: could not start")
                                             for r in distinct for t in r.per_test))}
    return programs, log


def make_rewarder(cfg, study_dir: str | Path | None = None) -> Rewarder:
    """The run's rewarder; ``anchor = "elected"`` reads the election record now (run start). A code
    task gets the sandbox, and without channels trains on ``program_correct`` (rule ``primary``)."""
    code = cfg.task.name == "code"
    if not cfg.rewards.channels and not code:
        return Rewarder([], [], None)
    channels = build_channels(cfg)
    names = [c.name for c in channels]
    agg = parse_aggregation(cfg.rewards.aggregation if cfg.rewards.channels else {"rule": "primary"})
    anchor = cfg.rewards.anchor
    if anchor == "elected":
        if study_dir is None:
            raise ConfigError("anchor = 'elected' needs the study folder (its election.json)")
        anchor = read_election(study_dir)["elected"]
        if anchor not in names:
            raise ConfigError(f"{Path(study_dir) / ELECTION_FILE}: the elected channel {anchor!r} is not one of "
                              f"this configuration's channels ({', '.join(names)})")
    if anchor:
        agg = agg.model_copy(update={"anchor": names.index(anchor)})
    return Rewarder(channels, names, agg, names[agg.anchor], make_sandbox(cfg) if code else None)


def state_to_dict(state: Any) -> dict[str, Any] | None:
    """The aggregation state for a checkpoint (the Lagrangian ν; None for stateless rules)."""
    if isinstance(state, LagrangeState):
        return {"kind": "lagrange", "nu": list(state.nu), "steps": state.steps}
    return None


def state_from_dict(data: dict[str, Any] | None) -> Any:
    if data and data.get("kind") == "lagrange":
        return LagrangeState(nu=tuple(float(x) for x in data["nu"]), steps=int(data.get("steps", 0)))
    return None


