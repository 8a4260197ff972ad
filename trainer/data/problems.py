"""Problem pools: loading, filters, near-duplicate removal and the per-seed prompt stream.

Rules (dense-rewards paper §2.3, §C.1 "Pools and evaluation" and "Prompt filters"):

* Pools hold MATH problems with plain numeric answers, filtered by level, or code problems with
  stdin/stdout tests (``task = "code"``; the multi-reward paper's DeepCoder-RT, App. C.4): a
  record with ``tests`` is judged by the program sandbox, not the math verifier.
* **Near duplicates** of the evaluation sets are removed: exact match after normalization, or
  8-gram Jaccard similarity ≥ 0.6 on word tokens (§C.1 "Pools and evaluation"). Exact, not MinHash: an inverted
  index over the evaluation shingles with prefix filtering finds every pair at or above the
  threshold (``trainer.data.duplicates.find_near_duplicates``).
* **Prompt stream.** The pool is shuffled once per epoch and consumed in order; the stream is a
  function of (seed, position) only (§C.1 "Prompt filters"), so a resumed run, a filter and its
  random-choice control all see the same candidates.

No torch here; ``datasets`` is imported only by ``load_hub``.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from prereg_kit.errors import MissingExtraError, needs_extra
from trainer.data.duplicates import DuplicateMatch, find_near_duplicates, normalize_text, shingles, word_tokens
from trainer.data.verifiers import canonical_answer, extract_boxed, normalize_answer, parse_number

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DataError",
    "HubUnavailableError",
    "ProgramTest",
    "DuplicateMatch",
    "code_problem",
    "epoch_permutation",
    "problem_from_record",
    "Problem",
    "ProblemPool",
    "RemovalReport",
    "find_near_duplicates",
    "load_hub",
    "load_problems",
    "normalize_text",
    "parse_level",
    "prompt_stream_batch",
    "prompt_stream_positions",
    "read_records",
    "shingles",
    "word_tokens",
]

Layout = Literal["auto", "math", "gsm8k", "code"]
Size = Literal["small", "mid", "large"]
TEST_SIZES: tuple[Size, ...] = ("small", "mid", "large")


@dataclass(frozen=True)
class ProgramTest:
    """One stdin/stdout test of a code problem. ``size`` picks the judge's timeout; "large" runs
    last, only after a pass.

    Only ``input`` reaches the program (on stdin); ``expected`` stays in the judge's process."""

    input: str
    expected: str
    size: Size = "small"


class DataError(ValueError):
    """A problem file or record that cannot be used; the message names the file and field."""


class HubUnavailableError(MissingExtraError, DataError):
    """``datasets`` (the extra ``hub``) is not installed: a hub name cannot be loaded."""


@dataclass(frozen=True)
class Problem:
    """One prompt with its gold answer, or (code problems) its tests.

    ``answer`` is the canonical answer text (``verify.canonical_answer``; MATH: the last
    ``\\boxed{}`` of the solution, GSM8K: the text after ``####``); "" for a code problem.
    ``level`` is the MATH level as an int, None when absent. ``tests`` (last, so positional
    construction of math problems is unchanged) are a code problem's stdin/stdout tests, judged by
    ``trainer/rewards/sandbox/``; () for math.
    """

    id: str
    prompt: str
    answer: str
    level: int | None = None
    source: str = ""
    solution: str | None = None
    tests: tuple[ProgramTest, ...] = ()

    @property
    def is_code(self) -> bool:
        return bool(self.tests)

    @property
    def numeric_answer(self) -> float | None:
        return parse_number(normalize_answer(self.answer))


# ---------------------------------------------------------------------------------------------
# Loading.
# ---------------------------------------------------------------------------------------------
_LEVEL = re.compile(r"\s*(?:level\s*)?([0-9]+)\s*", re.IGNORECASE)


def parse_level(value: Any) -> int | None:
    """MATH level: "Level 3" or 3 → 3; "Level ?", "", None → None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    m = _LEVEL.fullmatch(str(value))
    return int(m.group(1)) if m else None


def read_records(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based record number, record) from a .jsonl/.ndjson, .json (a list) or .parquet file."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        with path.open(encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
                if not isinstance(rec, dict):
                    raise DataError(f"{path}:{lineno}: expected a JSON object")
                yield lineno, rec
    elif suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}: invalid JSON ({exc.msg}, line {exc.lineno})") from None
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise DataError(f"{path}: expected a JSON list of objects")
        yield from enumerate(data, 1)
    elif suffix == ".parquet":
        import pyarrow.parquet as pq  # only needed for Parquet input

        try:
            table = pq.read_table(path)
        except Exception as exc:  # noqa: BLE001 — any pyarrow failure is a bad file
            raise DataError(f"{path}: cannot read Parquet ({exc})") from None
        yield from enumerate(table.to_pylist(), 1)
    else:
        raise DataError(f"{path}: unsupported file type {suffix!r} (use .jsonl, .json or .parquet)")


def _detect_layout(rec: dict[str, Any], where: str) -> Literal["math", "gsm8k", "code"]:
    if "tests" in rec:  # first: a code record may also carry a problem statement and a solution
        return "code"
    if "problem" in rec and "solution" in rec:
        return "math"
    if "question" in rec and "answer" in rec:
        return "gsm8k"
    raise DataError(
        f"{where}: cannot tell the layout (MATH needs 'problem' and 'solution', "
        f"GSM8K needs 'question' and 'answer', code needs 'prompt' and 'tests')"
    )


def _field(rec: dict[str, Any], name: str, where: str) -> str:
    if name not in rec:
        raise DataError(f"{where}: missing field {name!r}")
    value = rec[name]
    if not isinstance(value, str):
        raise DataError(f"{where}: field {name!r} must be a string, got {type(value).__name__}")
    return value


def problem_from_record(
    rec: dict[str, Any], *, layout: Layout, source: str, index: int, where: str
) -> Problem:
    """One record in the MATH layout (problem, solution[, level, answer, unique_id]), the
    GSM8K layout (question, answer with ``#### N``) or the code layout (prompt, tests[, solution,
    level, id]; see ``code_problem``)."""
    kind = _detect_layout(rec, where) if layout == "auto" else layout
    rid = rec.get("unique_id", rec.get("id"))
    pid = str(rid) if rid is not None else f"{source}:{index}"
    if kind == "math":
        prompt = _field(rec, "problem", where)
        solution = _field(rec, "solution", where)
        if isinstance(rec.get("answer"), str) and rec["answer"].strip():
            answer = canonical_answer(rec["answer"])  # MATH-500 style: an explicit answer field
        else:
            box = extract_boxed(solution)
            if box is None:
                raise DataError(f"{where}: field 'solution' has no \\boxed{{}} answer")
            answer = canonical_answer(box)
        return Problem(pid, prompt, answer, parse_level(rec.get("level")), source, solution)
    if kind == "gsm8k":
        prompt = _field(rec, "question", where)
        full = _field(rec, "answer", where)
        i = full.rfind("####")
        if i < 0:
            raise DataError(f"{where}: field 'answer' has no '#### N' final answer")
        answer = canonical_answer(full[i + 4:])
        return Problem(pid, prompt, answer, parse_level(rec.get("level")), source, full)
    if kind == "code":
        return code_problem(rec, pid=pid, source=source, where=where)
    raise DataError(f"{where}: unknown layout {layout!r} (use 'auto', 'math', 'gsm8k' or 'code')")


def code_problem(rec: dict[str, Any], *, pid: str, source: str, where: str) -> Problem:
    """A code record: ``prompt`` (or ``problem``), ``tests`` = a list (or its JSON text) of
    ``{input, output | expected, size}`` stdin/stdout tests (size "small" | "mid" | "large",
    default "small"; a ``testtype`` other than "stdin" is refused: only stdin programs are
    judged), optional ``solution`` (a reference completion; a bare program is wrapped in a
    ```` ```python ```` fence so the channels' extractor reads it) and ``level``."""
    prompt = _field(rec, "prompt" if "prompt" in rec or "problem" not in rec else "problem", where)
    raw = rec["tests"]
    if isinstance(raw, str):  # Parquet datasets often store the tests as JSON text
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: field 'tests' is not valid JSON ({exc.msg})") from None
    if hasattr(raw, "tolist"):
        raw = raw.tolist()
    if not isinstance(raw, (list, tuple)) or not raw:
        raise DataError(f"{where}: field 'tests' must be a non-empty list of {{input, output}} tests")
    tests = []
    for j, t in enumerate(raw):
        at = f"{where}: tests[{j}]"
        if not isinstance(t, dict) or "input" not in t or not ("output" in t or "expected" in t):
            raise DataError(f"{at}: a test needs 'input' and 'output' (or 'expected')")
        if t.get("testtype", "stdin") != "stdin":
            raise DataError(f"{at}: testtype {t['testtype']!r}: only stdin/stdout tests are judged")
        size = t.get("size") or "small"
        if size not in TEST_SIZES:
            raise DataError(f"{at}: size {size!r} (use 'small', 'mid' or 'large')")
        expected = t["output"] if "output" in t else t["expected"]
        if not isinstance(t["input"], str) or not isinstance(expected, str):
            raise DataError(f"{at}: input and output must be strings")
        tests.append(ProgramTest(t["input"], expected, size))
    solution = rec.get("solution")
    if solution is not None and not isinstance(solution, str):
        raise DataError(f"{where}: field 'solution' must be a string, got {type(solution).__name__}")
    if solution and "```" not in solution:
        solution = f"```python\n{solution.rstrip()}\n```"
    return Problem(pid, prompt, "", parse_level(rec.get("level")), source, solution or None, tuple(tests))


def load_problems(
    path: str | Path, *, layout: Layout = "auto", source: str | None = None
) -> ProblemPool:
    """Problems from a local JSONL/JSON/Parquet file in the MATH, GSM8K or code layout.

    ``source`` defaults to the file's stem; ids are the record's ``unique_id``/``id`` or
    ``"<source>:<record number>"``. Duplicate ids are an error.
    """
    path = Path(path)
    src = source if source is not None else path.stem
    problems = [
        problem_from_record(rec, layout=layout, source=src, index=i, where=f"{path}:{i}")
        for i, rec in read_records(path)
    ]
    return ProblemPool.from_problems(problems, where=str(path))


def load_hub(
    name: str,
    *,
    split: str,
    config: str | None = None,
    layout: Layout = "auto",
    source: str | None = None,
) -> ProblemPool:
    """Problems from a ``datasets`` hub name, when ``datasets`` is installed and the hub reachable."""
    try:
        import datasets  # optional, and slow to import
    except ImportError:  # or download the data and pass a local .jsonl or .parquet file
        raise HubUnavailableError(needs_extra(f"dataset {name!r} from the hub", "datasets", "hub")) from None
    try:
        ds = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # noqa: BLE001 — offline, unknown name, bad split: one message
        raise DataError(
            f"dataset {name!r} (split {split!r}): cannot load from the hub ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); use a local file instead"
        ) from None
    src = source or f"{name}:{split}"
    problems = [
        problem_from_record(dict(rec), layout=layout, source=src, index=i, where=f"{name}[{split}]:{i}")
        for i, rec in enumerate(ds, 1)
    ]
    return ProblemPool.from_problems(problems, where=name)


# The training splits of tasks "math" and "gsm8k" on the hub, read when the recipe names no
# task.train_file: MATH (Hendrycks et al.) by subject, GSM8K's "main" configuration.
MATH_HUB = "EleutherAI/hendrycks_math"
MATH_SUBJECTS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory",
                 "prealgebra", "precalculus")
GSM8K_HUB = ("openai/gsm8k", "main")


def task_pool(task: Literal["math", "gsm8k"], train_file: str | Path | None, levels: Iterable[int]) -> ProblemPool:
    """The training pool of task "math" or "gsm8k" (dense-rewards paper §C.1 "Pools and evaluation"): the MATH or
    GSM8K training split from ``train_file`` (MATH or GSM8K layout) when given, else from the hub;
    MATH keeps ``levels`` (1-5). Overlaps with the evaluation sets are removed by the caller,
    once the evaluation sets are loaded (``ProblemPool.without_near_duplicates``)."""
    if train_file:
        pool = load_problems(train_file, source=f"{task}-train")
    elif task == "math":
        parts = [load_hub(MATH_HUB, config=s, split="train", layout="math", source=f"math:{s}") for s in MATH_SUBJECTS]
        pool = ProblemPool.from_problems([p for part in parts for p in part], where=MATH_HUB)
    elif task == "gsm8k":
        pool = load_hub(GSM8K_HUB[0], config=GSM8K_HUB[1], split="train", layout="gsm8k", source="gsm8k:train")
    else:
        raise DataError(f"task {task!r}: task_pool reads the tasks 'math' and 'gsm8k'")
    return pool.with_levels(levels) if task == "math" else pool


# ---------------------------------------------------------------------------------------------
# Pools and filters.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RemovalReport:
    """What one filter removed: the rule, the ids and, for dedup, the matches."""

    rule: str
    before: int
    removed_ids: tuple[str, ...]
    matches: tuple[DuplicateMatch, ...] = ()

    @property
    def after(self) -> int:
        return self.before - len(self.removed_ids)

    def summary(self) -> str:
        extra = ""
        if self.matches:
            kinds = Counter(m.kind for m in self.matches)
            extra = f" ({kinds.get('exact', 0)} exact, {kinds.get('jaccard', 0)} by Jaccard)"
        return f"{self.rule}: removed {len(self.removed_ids)} of {self.before}{extra}, kept {self.after}"


@dataclass(frozen=True)
class ProblemPool:
    """An immutable, ordered pool of problems. Filters return a new pool whose ``reports`` end
    with the filter's ``RemovalReport``; the order of the kept problems is unchanged."""

    problems: tuple[Problem, ...]
    reports: tuple[RemovalReport, ...] = field(default=())

    @classmethod
    def from_problems(cls, problems: Iterable[Problem], *, where: str = "pool") -> ProblemPool:
        probs = tuple(problems)
        seen: set[str] = set()
        for p in probs:
            if p.id in seen:
                raise DataError(f"{where}: duplicate problem id {p.id!r}")
            seen.add(p.id)
        return cls(probs)

    def __len__(self) -> int:
        return len(self.problems)

    def __iter__(self) -> Iterator[Problem]:
        return iter(self.problems)

    def __getitem__(self, i: int) -> Problem:
        return self.problems[i]

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.problems)

    @property
    def last_report(self) -> RemovalReport | None:
        return self.reports[-1] if self.reports else None

    def concat(self, other: ProblemPool) -> ProblemPool:
        return ProblemPool.from_problems((*self.problems, *other.problems), where="concatenated pool")

    def _keep(self, rule: str, keep: Sequence[bool], matches: Sequence[DuplicateMatch] = ()) -> ProblemPool:
        kept = tuple(p for p, k in zip(self.problems, keep) if k)
        removed = tuple(p.id for p, k in zip(self.problems, keep) if not k)
        report = RemovalReport(rule, len(self.problems), removed, tuple(matches))
        return replace(self, problems=kept, reports=(*self.reports, report))

    def numeric_only(self) -> ProblemPool:
        """Keep problems whose answer is one plain number (integer, decimal, fraction)."""
        return self._keep("numeric answer", [p.numeric_answer is not None for p in self.problems])

    def with_levels(self, levels: Iterable[int]) -> ProblemPool:
        """Keep problems whose level is in ``levels`` (problems without a level are removed)."""
        wanted = frozenset(int(x) for x in levels)
        rule = f"level in {{{', '.join(map(str, sorted(wanted)))}}}"
        return self._keep(rule, [p.level in wanted for p in self.problems])

    def with_tests(self) -> ProblemPool:
        """Keep code problems (at least one test): what a code task's reward can judge."""
        return self._keep("has tests", [p.is_code for p in self.problems])

    def max_prompt_chars(self, limit: int) -> ProblemPool:
        """Keep problems whose prompt has at most ``limit`` characters."""
        return self._keep(f"prompt <= {limit} chars", [len(p.prompt) <= limit for p in self.problems])

    def without_near_duplicates(
        self, *references: ProblemPool | Sequence[Problem], n: int = 8, threshold: float = 0.6
    ) -> ProblemPool:
        """Remove near duplicates of the evaluation sets (exact after normalization, or n-gram
        Jaccard ≥ threshold); the report lists each removed problem's match."""
        refs = [p for ref in references for p in ref]
        matches = find_near_duplicates(self.problems, refs, n=n, threshold=threshold)
        hit = {m.query_id for m in matches}
        rule = f"near duplicate of evaluation sets ({n}-gram Jaccard >= {threshold:g} or exact)"
        return self._keep(rule, [p.id not in hit for p in self.problems], matches)

    def summary(self) -> str:
        return "\n".join([*(r.summary() for r in self.reports), f"pool: {len(self)} problems"])


# ---------------------------------------------------------------------------------------------
# The per-seed prompt stream.
# ---------------------------------------------------------------------------------------------
def _check_stream_args(pool_size: int, seed: int) -> None:
    if isinstance(pool_size, bool) or not isinstance(pool_size, numbers.Integral) or pool_size < 1:
        raise ValueError(f"pool_size must be a positive integer, got {pool_size!r}")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")


def epoch_permutation(pool_size: int, seed: int, epoch: int) -> np.ndarray:
    """The order of the pool in one epoch: ``default_rng([seed, epoch]).permutation(pool_size)``."""
    import numpy as np  # lock and verify start without numpy
    _check_stream_args(pool_size, seed)
    return np.random.default_rng([int(seed), int(epoch)]).permutation(int(pool_size))


def prompt_stream_positions(pool_size: int, seed: int, start: int, stop: int) -> np.ndarray:
    """Pool indices at stream positions ``start … stop-1`` for one seed.

    Position k lies in epoch ``k // pool_size`` at offset ``k % pool_size`` of that epoch's
    permutation. A pure function: no state, so a resumed run gets the same prompts.
    """
    import numpy as np  # lock and verify start without numpy
    _check_stream_args(pool_size, seed)
    if start < 0 or stop < start:
        raise ValueError(f"stream positions must satisfy 0 <= start <= stop, got {start}, {stop}")
    out = np.empty(stop - start, dtype=np.int64)
    pos = start
    while pos < stop:
        epoch, offset = divmod(pos, pool_size)
        take = min(pool_size - offset, stop - pos)
        out[pos - start: pos - start + take] = epoch_permutation(pool_size, seed, epoch)[offset: offset + take]
        pos += take
    return out


def prompt_stream_batch(pool_size: int, seed: int, iteration: int, batch_size: int) -> np.ndarray:
    """The ``batch_size`` pool indices drawn at ``iteration`` (positions ``iteration·batch_size``
    onward). With 24 candidates per iteration a filter passes through the pool 3× as fast as
    outcome-only GRPO with 8, as in the paper."""
    if iteration < 0 or batch_size < 1:
        raise ValueError(f"need iteration >= 0 and batch_size >= 1, got {iteration}, {batch_size}")
    start = iteration * batch_size
    return prompt_stream_positions(pool_size, seed, start, start + batch_size)
