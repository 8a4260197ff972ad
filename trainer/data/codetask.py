"""A tiny synthetic code task: stdin/stdout programs a tiny model can learn on a CPU.

It stands in for DeepCoder-RT (multi-reward paper App. C.4; ``docs/multi-reward.md``,
"Program channels in training") the way ``trainer/data/synthetic.py`` stands in for MATH: every
problem asks for a program that reads two integers a and b from one line of standard input and
prints an arithmetic expression of them; it carries three small tests and one large-input test
(run last, only after the others pass, as in the paper's judge); the worked solution is a short
fenced program that states the expression first::

    ```python
    f = lambda a, b: a*b+7
    print(f(*map(int, input().split())))
    ```

Expression first, because the tiny model must copy it from the prompt: measured on the
development machine (default tiny model, 1,500 warm-start steps, 48 held-out problems × 4
samples), this layout reached 0.36 held-out accuracy, the plainer ``a, b = map(int,
input().split())`` / ``print(a*b+7)`` (expression after the 33-character input line) 0.07; at
300 steps, 0.02 and 0.

* Level 1: ``a∘b∘k`` with k in 1–9 (∘ ∈ {+, −, ×}; 81 distinct problems).
* Level 2: ``a∘b∘k`` with k in 10–99 (810).
* Level 3: ``a∘k1∘b∘k2`` with k1 in 2–9, k2 in 10–99 (19,440).

Each level's expressions have one length (5, 6, 8 characters): the tiny model copies the
expression from the prompt into the program at a fixed offset, as the arithmetic task's models
copy ``a+b`` into their worked answer.

The large test draws a and b from [10^6, 10^7): a closed form is instant there, a loop over a
(``for _ in range(a)``) is not, so the speed channel has something to measure. Files are
written in the code layout (``trainer/data/problems.py``, ``code_problem``) so the real loader runs on
them. Prompts end in a short tail after the expression (" on one line."): a pair of distinct
problems then shares few 8-gram shingles (Jaccard < 0.6), and the trainer's near-duplicate
filter (the paper's rule for its pools) keeps the training pool. No torch, no global state.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trainer.data.problems import Problem, ProgramTest
from trainer.data.synthetic import TaskError, write_splits

__all__ = ["CODE_LEVELS", "CODE_TASK_VERSION", "CODE_LEVEL_CAPACITY", "code_prompt", "expected_output",
           "expression_of", "gold_program",
           "make_code_problems", "noisy_solution", "write_code_task"]

CODE_TASK_VERSION = 1  # part of the cached task files' key: bump when problems change
CODE_LEVELS = (1, 2, 3)
OPS = ("+", "-", "*")
CODE_LEVEL_CAPACITY = {1: 9 * 9, 2: 9 * 90, 3: 27 * 8 * 90}
SMALL_TESTS = 3
_MAX_TRIES_PER_PROBLEM = 200


_PROMPT = re.compile(r"Write a Python program that reads integers a and b and prints (\S+) on one line\.")


def code_prompt(expr: str) -> str:
    return f"Write a Python program that reads integers a and b and prints {expr} on one line."


def gold_program(expr: str) -> str:
    """The worked solution: a fenced program, the completion the warm start learns."""
    return f"```python\nf = lambda a, b: {expr}\nprint(f(*map(int, input().split())))\n```"


def expression_of(prompt: str) -> str | None:
    """The expression a synthetic code prompt asks for (None for any other text)."""
    m = _PROMPT.fullmatch(prompt)
    return m.group(1) if m else None


def expected_output(expr: str, a: int, b: int) -> str:
    # ``expr`` comes from the fixed grammar above (a, b, digits, + - *), never from data: eval
    # gives exactly what the gold program prints, Python's precedence included.
    return str(eval(expr, {"__builtins__": {}}, {"a": a, "b": b}))  # noqa: S307


def _level_all(level: int) -> list[str]:
    """Every expression of level 1 or 2 (small enough to enumerate)."""
    if level == 1:
        return [f"a{o1}b{o2}{k}" for o1 in OPS for o2 in OPS for k in range(1, 10)]
    if level == 2:
        return [f"a{o1}b{o2}{k}" for o1 in OPS for o2 in OPS for k in range(10, 100)]
    raise TaskError(f"level {level} is drawn, not enumerated")


def _draw3(rng: np.random.Generator) -> str:
    o1, o2, o3 = (OPS[int(i)] for i in rng.integers(3, size=3))
    return f"a{o1}{int(rng.integers(2, 10))}{o2}b{o3}{int(rng.integers(10, 100))}"


def _tests(expr: str, rng: np.random.Generator) -> tuple[ProgramTest, ...]:
    """Three small tests (a, b in −99…99) and one large-input test (a, b in [10^6, 10^7))."""
    pairs = [tuple(int(x) for x in rng.integers(-99, 100, size=2)) for _ in range(SMALL_TESTS)]
    out = [ProgramTest(f"{a} {b}\n", expected_output(expr, a, b) + "\n", "small") for a, b in pairs]
    a, b = (int(x) for x in rng.integers(10**6, 10**7, size=2))
    out.append(ProgramTest(f"{a} {b}\n", expected_output(expr, a, b) + "\n", "large"))
    return tuple(out)


def _generate(n: int, levels: Sequence[int], rng: np.random.Generator, *, id_prefix: str,
              exclude: Iterable[str] = (), unique: bool = True) -> list[Problem]:
    if n < 0:
        raise TaskError(f"number of problems must be >= 0, got {n}")
    levels = tuple(int(x) for x in levels)
    if not levels or any(lv not in CODE_LEVELS for lv in levels):
        raise TaskError(f"code levels must be a non-empty subset of {CODE_LEVELS}, got {levels}")
    excluded = set(exclude)
    left = {lv: [e for e in _level_all(lv) if code_prompt(e) not in excluded] for lv in levels if lv != 3}
    seen: set[str] = set()
    out: list[Problem] = []
    for i in range(n):
        level = levels[i % len(levels)]  # round robin: equal shares of the levels
        if level != 3:
            pool = left[level]
            if not pool:
                raise _capacity_error(n, levels, level)
            k = int(rng.integers(len(pool)))
            expr = pool.pop(k) if unique else pool[k]
        else:
            for _ in range(_MAX_TRIES_PER_PROBLEM):
                expr = _draw3(rng)
                if code_prompt(expr) not in excluded and not (unique and code_prompt(expr) in seen):
                    break
            else:
                raise _capacity_error(n, levels, level)
        seen.add(code_prompt(expr))
        out.append(Problem(f"{id_prefix}-{i:06d}", code_prompt(expr), "", level, "synthetic-code",
                           gold_program(expr), _tests(expr, rng)))
    return out


def _capacity_error(n: int, levels: Sequence[int], level: int) -> TaskError:
    return TaskError(f"cannot draw {n} code problems of levels {tuple(levels)}: level {level} has only "
                     f"{CODE_LEVEL_CAPACITY[level]} distinct problems (minus excluded ones)")


def make_code_problems(n: int, *, levels: Sequence[int] = CODE_LEVELS, seed: int, exclude: Iterable[str] = (),
                       unique: bool = True) -> list[Problem]:
    """``n`` code problems, levels in equal shares (round robin), deterministic given ``seed``."""
    return _generate(n, levels, np.random.default_rng([int(seed), 0, 7]), id_prefix=f"code-s{seed}",
                     exclude=exclude, unique=unique)


def _code_record(p: Problem) -> dict[str, Any]:
    return {"id": p.id, "prompt": p.prompt, "level": p.level, "solution": p.solution,
            "tests": [{"input": t.input, "output": t.expected, "size": t.size} for t in p.tests]}


def write_code_task(directory: str | Path, *, n_train: int, n_eval: int, seed: int,
                    levels: Sequence[int] = CODE_LEVELS) -> tuple[Path, Path]:
    """Write ``train.jsonl`` and ``eval.jsonl`` (code layout) and return their paths.

    As ``synthetic.write_task``: the evaluation set first (distinct prompts), then a training set
    that excludes every evaluation prompt and may repeat its own; disjointness under the
    near-duplicate rule is checked, a hit is an error.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    eval_set = _generate(n_eval, levels, np.random.default_rng([int(seed), 1, 7]), id_prefix=f"code-s{seed}-eval")
    train_set = _generate(n_train, levels, np.random.default_rng([int(seed), 2, 7]), id_prefix=f"code-s{seed}-train",
                          exclude={p.prompt for p in eval_set}, unique=False)
    return write_splits(directory, train_set, eval_set, _code_record)


def noisy_solution(solution: str, rng: np.random.Generator) -> str:
    """A wrong worked program for the warm start's ``answer_noise``: the printed value shifted by
    ±1 or ±2 (the code analogue of boxing N ± 1, 2); it fails every test."""
    cut = solution.rfind(")\n```")
    if cut < 0:
        return solution
    d = int(rng.choice([-2, -1, 1, 2]))
    return f"{solution[:cut]}{d:+d}{solution[cut:]}"
