"""Reward channels of the multi-reward studies (multi-reward paper §6.1, App. C.1–C.4).

A channel maps one completion (and its problem) to a 0/1 reward. The built-ins:

* ``correct``: R_P = 1 iff the final answer matches gold, by the trainer's verifier
  (``trainer/data/verifiers.py``: "default", "strict" or "math_verify").
* ``brief``: R_A = 1[|y| < threshold tokens] (200 for Qwen at cap 512; 128 for Llama; 512 for
  Qwen3-30B-A3B at cap 4096; §6.1, App. C.3).
* ``negative``: R_A = 1[final answer < 0]: the answer the verifier reads parses to a number
  below zero (``extract_answer`` then ``parse_number``; no number, no reward).
* ``program_correct``: R_P = 1 iff every test passes in the sandbox (``trainer/rewards/sandbox/``).
* ``program_fast``: R_A = 1[T < threshold], T the largest CPU time over the executed tests,
  a timeout counting as slow; 60 ms is "Correct & fast", 3 ms "Correct & no-op" (§6, App. C.4).
  Speed is judged alone: the joint outcome "correct and fast" is the aggregation's business.

Program channels read a ``sandbox.ProgramResult`` judged once per completion and shared by both
(``score_channels`` runs the sandbox when given one; ``judge_programs`` judges each distinct
(program, tests) pair once, with the sandbox's bounded concurrency). The program is the last
fenced code block of the completion (```` ```python ```` or a bare fence); no block, no program
(it fails). In training (``task = "code"``, ``trainer/core/reward_step.py``) the problems' ``tests`` come
from ``trainer.data.problems.Problem.tests``.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from trainer.data.verifiers import DEFAULT_TOL, extract_answer, get_verifier, normalize_answer, parse_number
from trainer.rewards.sandbox import ProgramResult, ProgramTest, Sandbox

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "CHANNELS",
    "Brief",
    "Channel",
    "Completion",
    "Correct",
    "Negative",
    "ProgramCorrect",
    "ProgramFast",
    "extract_program",
    "get_channel",
    "has_program",
    "judge_programs",
    "problem_tests",
    "score_channels",
]


@runtime_checkable
class Channel(Protocol):
    """A reward channel: ``score`` returns 0.0 or 1.0."""

    name: str
    needs_program: bool

    def score(self, completion_text: str, completion_tokens: int | Sequence[int], problem: Any,
              program: ProgramResult | None = None) -> float: ...


@dataclass(frozen=True)
class Completion:
    """A completion's text and its generated-token count |y| (or its token ids)."""

    text: str
    tokens: int | Sequence[int] = 0


def _n_tokens(tokens: int | Sequence[int]) -> int:
    return int(tokens) if isinstance(tokens, numbers.Integral) else len(tokens)


def _has(problem: Any, name: str) -> bool:
    return name in problem if isinstance(problem, Mapping) else hasattr(problem, name)


def _field(problem: Any, *names: str) -> Any:
    """The first of ``names`` that ``problem`` has, as a key or an attribute."""
    for n in names:
        if isinstance(problem, Mapping) and n in problem:
            return problem[n]
        if not isinstance(problem, Mapping) and hasattr(problem, n):
            return getattr(problem, n)
    raise KeyError(f"problem has none of {', '.join(names)}")


# ---------------------------------------------------------------------------------------------
# Math channels
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Correct:
    """R_P: the verifier's 0/1 decision against the problem's gold answer (``answer``/``gold``)."""

    verifier: str = "default"
    tol: float = DEFAULT_TOL
    name: str = "correct"
    needs_program: bool = False

    def score(self, completion_text, completion_tokens, problem, program=None) -> float:
        gold = _field(problem, "answer", "gold")
        return float(bool(get_verifier(self.verifier, tol=self.tol)(completion_text, gold)))


@dataclass(frozen=True)
class Brief:
    """R_A = 1[|y| < threshold] with |y| the generated-token count (§6.1)."""

    threshold: int = 200
    name: str = "brief"
    needs_program: bool = False

    def score(self, completion_text, completion_tokens, problem, program=None) -> float:
        return float(_n_tokens(completion_tokens) < self.threshold)


@dataclass(frozen=True)
class Negative:
    """R_A = 1[final answer < 0], the answer read by the verifier's extraction rule (App. C)."""

    strict: bool = False
    name: str = "negative"
    needs_program: bool = False

    def score(self, completion_text, completion_tokens, problem, program=None) -> float:
        answer = extract_answer(completion_text, strict=self.strict)
        value = None if answer is None else parse_number(normalize_answer(answer))
        return float(value is not None and math.isfinite(value) and value < 0)


# ---------------------------------------------------------------------------------------------
# Program channels
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProgramCorrect:
    """R_P = 1 iff every test passes in the sandbox (App. C.4)."""

    name: str = "program_correct"
    needs_program: bool = True

    def score(self, completion_text, completion_tokens, problem, program=None) -> float:
        if program is None:
            raise ValueError("channel 'program_correct' needs the program's sandbox result")
        return float(program.passed)


@dataclass(frozen=True)
class ProgramFast:
    """R_A = 1[T < threshold_s]; a timeout counts as slow (§6, App. C.4). 0.06 s: fast; 0.003 s: no-op."""

    threshold_s: float = 0.060
    name: str = "program_fast"
    needs_program: bool = True

    def score(self, completion_text, completion_tokens, problem, program=None) -> float:
        if program is None:
            raise ValueError(f"channel {self.name!r} needs the program's sandbox result")
        return float(not program.timed_out and program.max_cpu_seconds < self.threshold_s)


CHANNELS: dict[str, Callable[..., Channel]] = {
    "correct": Correct,
    "brief": Brief,
    "negative": Negative,
    "program_correct": ProgramCorrect,
    "program_fast": ProgramFast,
}


def get_channel(name: str, **params: Any) -> Channel:
    """A built-in channel by name, e.g. ``get_channel("brief", threshold=128)``."""
    try:
        factory = CHANNELS[name]
    except KeyError:
        raise ValueError(f"unknown channel {name!r}; expected one of {', '.join(CHANNELS)}") from None
    try:
        return factory(**params)
    except TypeError:
        raise ValueError(f"channel {name!r}: bad parameters {sorted(params)}") from None


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.S)


def extract_program(text: str) -> str:
    """The last fenced code block (```` ```python ````, ```` ```py ```` or bare); "" if none."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    if not blocks:
        return ""
    py = [b for lang, b in blocks if lang in ("python", "py", "python3")]
    return (py or [b for _, b in blocks])[-1]


def has_program(text: str) -> bool:
    """Whether the completion has a fenced code block (the format the extractor reads)."""
    return _FENCE.search(text) is not None


def problem_tests(problem: Any) -> list[ProgramTest]:
    """The problem's tests (``tests``): ProgramTest values or mappings with input, output
    (or expected) and an optional size ("small", "mid", "large")."""
    out = []
    for t in _field(problem, "tests"):
        if isinstance(t, ProgramTest):
            out.append(t)
        else:
            out.append(ProgramTest(str(t["input"]), str(t.get("expected", t.get("output", ""))),
                                   t.get("size", "small")))
    return out


def judge_programs(sandbox: Sandbox, completions: Sequence[str | Completion],
                   problems: Sequence[Any]) -> list[ProgramResult]:
    """One ``ProgramResult`` per completion: its extracted program run on its problem's tests.

    Identical (program, tests) pairs are judged once (one sample of the CPU-time noise is then
    shared by the copies, as identical completions share one verifier call); the distinct ones go
    through ``Sandbox.run_programs`` (at most ``max_workers`` at a time), results in order.
    """
    if len(completions) != len(problems):
        raise ValueError(f"{len(completions)} completions for {len(problems)} problems")
    keys, first = [], {}
    for c, p in zip(completions, problems):
        tests = tuple(problem_tests(p))
        if not tests:  # no tests: every program would "pass"; never a reward
            raise ValueError(f"problem {_field(p, 'id') if _has(p, 'id') else '?'}: no tests to judge a program on")
        key = (extract_program(c.text if isinstance(c, Completion) else c), tests)
        keys.append(first.setdefault(key, len(first)))
    results = sandbox.run_programs(list(first)) if first else []
    return [results[k] for k in keys]


def score_channels(
    channels: Sequence[Channel],
    completions: Sequence[str | Completion],
    problems: Sequence[Any],
    *,
    programs: Sequence[ProgramResult] | None = None,
    sandbox: Sandbox | None = None,
) -> np.ndarray:
    """Scores (n_completions, n_channels): ``problems[i]`` is completion i's problem.

    Program channels use ``programs[i]`` when given, else judge each completion's program once
    with ``sandbox`` (bounded concurrency: ``Sandbox.run_programs``).
    """
    import numpy as np  # lock and verify start without numpy
    if len(completions) != len(problems):
        raise ValueError(f"{len(completions)} completions for {len(problems)} problems")
    comps = [c if isinstance(c, Completion) else Completion(c) for c in completions]
    if any(ch.needs_program for ch in channels) and programs is None:
        if sandbox is None:
            raise ValueError("program channels need programs= (sandbox results) or sandbox=")
        programs = judge_programs(sandbox, comps, problems)
    if programs is not None and len(programs) != len(comps):
        raise ValueError(f"{len(programs)} program results for {len(comps)} completions")
    out = np.zeros((len(comps), len(channels)), dtype=np.float64)
    for i, (c, p) in enumerate(zip(comps, problems)):
        prog = programs[i] if programs is not None else None
        for k, ch in enumerate(channels):
            out[i, k] = ch.score(c.text, c.tokens, p, prog)
    return out
