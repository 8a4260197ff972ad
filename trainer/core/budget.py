"""Compute accounting: generated tokens by kind, training seconds by stage, and the schedule of
evaluations and of the run's end in generated tokens.

Dense-rewards paper §2.3 "Two budgets", §C.1 "Implementation" and "Pools and evaluation", App. D:

* The budget B counts **every token generated during training**: rollouts, continuations (e.g.
  Monte-Carlo credit) and the groups that dynamic sampling discards. A completion's tokens are
  the tokens it generated, EOS included; padding after EOS is not counted, and neither are
  evaluation samples or prompt tokens.
* **Training time** is the sum over iterations of five stages: prompt selection (incl. a prompt
  critic's prefill), generation, credit (incl. continuations and critic fits), update and weight
  sync, each timed with the GPU synchronized at its end. Evaluation, logging and checkpointing
  are timed separately and excluded.
* **Evaluations** at the start and at the first iteration at or after each multiple of the
  interval (B/16 by default); the run stops after the evaluation at or after k·B.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator

TRAIN_STAGES = ("selection", "generation", "credit", "update", "weight_sync")
EXCLUDED = ("evaluation", "logging", "checkpoint")
TOKEN_KINDS = ("rollout", "continuation", "discarded")


class StageClock:
    """Wall seconds per stage of the current iteration; ``sync`` waits for the GPU at each end."""

    def __init__(self, sync: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.perf_counter):
        self.sync, self.clock = sync, clock
        self.seconds: dict[str, float] = {}

    def reset(self) -> None:
        self.seconds = {s: 0.0 for s in TRAIN_STAGES}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = self.clock()
        try:
            yield
        finally:
            self.sync()
            self.seconds[name] = self.seconds.get(name, 0.0) + (self.clock() - t0)


@dataclass
class Counters:
    """Cumulative compute of a run: what checkpoints save and eval rows report."""

    iteration: int = 0  # iterations completed (= the next iteration's index)
    eval_index: int = 0  # evaluations logged (= the next evaluation's index)
    tokens: dict[str, int] = field(default_factory=lambda: {k: 0 for k in TOKEN_KINDS})
    train_seconds: float = 0.0
    updates: int = 0
    excluded_seconds: dict[str, float] = field(default_factory=lambda: {k: 0.0 for k in EXCLUDED})
    done: bool = False
    budget_evaluated: bool = False  # the evaluation at or after B has run (sets scored only at the start and B)

    @property
    def total_tokens(self) -> int:
        """Generated tokens of every kind so far: what the budget B counts."""
        return sum(self.tokens.values())

    def add_iteration(self, tokens: dict[str, int], seconds: dict[str, float], updates: int) -> dict:
        """Account one iteration; returns its row fields (tokens_*, seconds_*, cumulative updates)."""
        for k in TOKEN_KINDS:
            self.tokens[k] += int(tokens.get(k, 0))
        secs = {s: float(seconds.get(s, 0.0)) for s in TRAIN_STAGES}
        # Sum in the reader's order (rollout…weight sync) so eval rows match the log's running sums.
        self.train_seconds += sum(secs[s] for s in TRAIN_STAGES)
        self.updates += updates
        self.iteration += 1
        row = {"iteration": self.iteration - 1}
        row.update({f"tokens_{k}": int(tokens.get(k, 0)) for k in TOKEN_KINDS})
        row.update({f"seconds_{s}": secs[s] for s in TRAIN_STAGES})
        row["updates"] = self.updates
        return row

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Counters":
        return cls(**d)


@dataclass(frozen=True)
class Schedule:
    """When to evaluate and when to stop, in generated tokens (dense-rewards paper §2.3, §C.1)."""

    interval: int  # B/16 by default: tokens, or iterations when ``by_iterations``
    stop_tokens: int | None  # k·B; None for an iteration budget
    stop_iterations: int | None = None  # an iteration cap (k·N, or election probes' T steps), read from counters
    counters: Counters | None = None
    by_iterations: bool = False  # B and the interval count iterations (multi-reward paper: "500 steps")

    def eval_due(self, before: int, after: int) -> bool:
        """Whether the iteration that took the count from ``before`` to ``after`` tokens is the
        first at or after a multiple of the interval (or reaches the stop point). With an
        iteration budget: every ``interval`` iterations."""
        if self.by_iterations and self.counters is not None:
            return self.counters.iteration % self.interval == 0 or self.finished(after)
        return after // self.interval > before // self.interval or self.finished(after)

    def finished(self, tokens: int) -> bool:
        """The evaluation after this iteration is the last: the budget k·B is reached (or, with
        ``stop_iterations``, the counters' iterations reached it)."""
        if self.stop_iterations is not None and self.counters is not None and self.counters.iteration >= self.stop_iterations:
            return True
        return self.stop_tokens is not None and tokens >= self.stop_tokens
