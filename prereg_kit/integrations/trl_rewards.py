"""The preregistered reward as TRL reward functions, and the exact count of generated tokens.

Dense-rewards paper §2.1, §C.1 "Implementation": the training reward is the verifier's 0/1 decision on the
completion against the problem's gold answer (code tasks: 1 when the extracted program passes
every test in the sandbox, multi-reward paper App. C.4), and the budget B counts every generated
completion token, EOS included, prompts and padding not. TRL calls a reward function as
``f(prompts=…, completions=…, completion_ids=…, **columns)`` with the dataset's other columns
(here ``answer``, or ``tests`` for code) passed through by name, once per generation batch on
each process; the ``completion_ids`` it passes are the very lists whose lengths TRL logs as
``completions/mean_length``, so counting them here gives the batch's generated tokens exactly.

TRL names each function by ``__name__`` in its logs (``rewards/<name>/mean``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from prereg_kit.errors import PreregError
from prereg_kit.plan import load_plan
from trainer.config import config_of
from trainer.core.program_judge import make_sandbox
from trainer.data.verifiers import get_verifier
from trainer.rewards.channels import judge_programs

from .trl_outputs import completion_text

BINARY_PREFIX = "prereg_"  # our functions' names: 0/1 rewards (the callback reads mixed_share only then)


class TokenCounter:
    """Generated completion tokens seen by the reward functions on this process since the last
    ``take()`` (thread-safe: TRL may run reward functions from a pool)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens = 0
        self._completions = 0

    def add(self, completion_ids: Sequence[Sequence[int]]) -> None:
        with self._lock:
            self._tokens += sum(len(ids) for ids in completion_ids)
            self._completions += len(completion_ids)

    def take(self) -> tuple[int, int]:
        """(tokens, completions) counted since the last call, and reset."""
        with self._lock:
            out = (self._tokens, self._completions)
            self._tokens = self._completions = 0
            return out


class VerifierReward:
    """1.0 when the verifier accepts the completion's answer against the ``answer`` column, else 0.0.

    ``counter``: counts the generated tokens of every completion scored (one reward function
    per trainer should count; :func:`reward_functions` gives the counter to the first only).
    ``log_answer``: hand each completion's reference answer to TRL's ``log_extra`` (TRL 1.16,
    ``GRPOTrainer._calculate_rewards``), so that TRL's completions tables
    (``log_completions=True``) carry an ``answer`` column that :func:`.trl_outputs.trl_outputs`
    reads; one reward function per trainer may do so (TRL appends each call's values)."""

    def __init__(self, verifier: str = "default", counter: TokenCounter | None = None, *, log_answer: bool = False):
        self.verifier = get_verifier(verifier)
        self.counter = counter
        self.log_answer = log_answer
        self.__name__ = f"{BINARY_PREFIX}{verifier}"

    def __call__(self, prompts=None, completions=(), completion_ids=None, answer=None, **kwargs) -> list[float]:
        if answer is None:
            raise PreregError(f"reward {self.__name__}: the training dataset has no 'answer' column "
                              "(TRL passes dataset columns to reward functions by name)")
        if len(answer) != len(completions):
            raise PreregError(f"reward {self.__name__}: {len(completions)} completions for {len(answer)} answers")
        if self.counter is not None and completion_ids is not None:
            self.counter.add(completion_ids)
        log_extra = kwargs.get("log_extra")
        if self.log_answer and callable(log_extra):
            log_extra("answer", [str(a) for a in answer])
        return [1.0 if self.verifier(completion_text(c), str(a)) else 0.0 for c, a in zip(completions, answer)]


class ProgramReward:
    """1.0 when the completion's extracted program passes every test of its problem (the
    ``tests`` column: lists of {input, output}) in the recipe's sandbox, else 0.0."""

    def __init__(self, cfg, counter: TokenCounter | None = None):
        self.sandbox = make_sandbox(cfg)
        self.counter = counter
        self.__name__ = f"{BINARY_PREFIX}program"

    def __call__(self, prompts=None, completions=(), completion_ids=None, tests=None, **kwargs) -> list[float]:
        if tests is None:
            raise PreregError(f"reward {self.__name__}: the training dataset has no 'tests' column")
        if self.counter is not None and completion_ids is not None:
            self.counter.add(completion_ids)
        results = judge_programs(self.sandbox, [completion_text(c) for c in completions], [{"tests": t} for t in tests])
        return [1.0 if r.passed else 0.0 for r in results]


def unsupported(cfg) -> str:
    """Why TRL's GRPOTrainer cannot train this recipe as preregistered ("" when it can): TRL
    trains outcome-only GRPO on one reward, without our credit rules, prompt selection,
    length reward or reward channels."""
    if cfg.rewards.channels:
        return f"rewards.channels = {list(cfg.rewards.channels)} (a multi-reward recipe)"
    if cfg.credit.rule != "outcome":
        return f"credit.rule = {cfg.credit.rule!r} (TRL assigns outcome credit only)"
    if cfg.credit.length_lambda:
        return f"credit.length_lambda = {cfg.credit.length_lambda} (a length reward)"
    if cfg.selection.rule != "none":
        return f"selection.rule = {cfg.selection.rule!r} (TRL samples prompts uniformly)"
    return ""


def reward_functions(plan, configuration: str, counter: TokenCounter | None = None) -> list:
    """The configuration's preregistered reward as TRL reward functions: the recipe's verifier
    (math and synthetic tasks) or the program judge (``task = "code"``). ``plan``: a loaded
    :class:`~prereg_kit.plan.Plan`, a ``PlanFile``, or a study folder / plan path."""
    if isinstance(plan, (str, bytes)) or hasattr(plan, "__fspath__"):
        plan = load_plan(plan).plan
    plan = getattr(plan, "plan", plan)
    if configuration not in plan.configurations:
        raise PreregError(f"configuration {configuration!r} is not in the plan (have: {', '.join(plan.configurations)})")
    cfg = config_of(plan, configuration)
    why = unsupported(cfg)
    if why:
        raise PreregError(f"configuration {configuration!r}: {why} has no TRL reward function here; "
                          "train it with the built-in trainer")
    if cfg.task.name == "code":
        return [ProgramReward(cfg, counter)]
    return [VerifierReward(cfg.rewards.verifier, counter, log_answer=True)]


__all__ = ["BINARY_PREFIX", "ProgramReward", "TokenCounter", "VerifierReward",
           "reward_functions", "unsupported"]
