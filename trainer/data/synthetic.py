"""A small synthetic arithmetic task and a locally built tokenizer, for CPU-sized GRPO runs.

The task stands in for MATH in tests and CPU studies: numeric answers, three difficulty
levels, worked solutions that end in ``\\boxed{N}`` (the layout the paper's pools use, §2.3),
written as MATH-layout JSONL so that the real loader, filters and dedup run on it.

* Level 1: ``a+b`` with single digits (100 distinct problems).
* Level 2: ``a+b`` or ``a-b`` with two-digit numbers; a minority (``p_negative``) of the level-2
  problems have a negative answer, so a study can see some negative gold answers.
* Level 3: ``a*b+c`` (single-digit a, b; two-digit c) or a sum of three two-digit numbers.

The tokenizer is word-level over a fixed vocabulary: one token per digit (so arithmetic is
learnable), one per operator/ASCII character, a few whole words, ``\\boxed{`` as one token, the
special tokens and a chat template. ``tokenizers``/``transformers`` are imported lazily.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer.data.problems import DataError, Problem, ProblemPool, find_near_duplicates

if TYPE_CHECKING:  # pragma: no cover
    from transformers import PreTrainedTokenizerFast

__all__ = [
    "LEVEL_CAPACITY",
    "SFTExample",
    "TaskError",
    "as_pool",
    "render_prompt",
    "build_tokenizer",
    "load_tokenizer",
    "make_problems",
    "sft_examples",
    "write_splits",
    "write_task",
]

LEVELS = (1, 2, 3)
# Distinct problems per level (level 1 is small: every pair of digits).
LEVEL_CAPACITY = {1: 100, 2: 2 * 90 * 90, 3: 8 * 8 * 90 + 90 * 90 * 90}
_MAX_TRIES_PER_PROBLEM = 200


class TaskError(ValueError):
    """A synthetic-task request that cannot be met (unknown level, too many distinct problems)."""


# ---------------------------------------------------------------------------------------------
# Problems.
# ---------------------------------------------------------------------------------------------
def _draw(level: int, rng: np.random.Generator, p_negative: float) -> tuple[str, str, int]:
    """One problem of level 2 or 3: (expression, worked steps, answer). Level 1 is enumerated
    (``_level1_all``)."""
    if level == 2:
        a, b = (int(x) for x in rng.integers(10, 100, size=2))
        if rng.random() < 0.5:
            return f"{a}+{b}", f"{a}+{b}={a + b}.", a + b
        # Subtraction: a negative answer only in a p_negative share of level-2 problems overall.
        negative = rng.random() < 2 * p_negative
        if (a < b) != negative and a != b:
            a, b = b, a
        return f"{a}-{b}", f"{a}-{b}={a - b}.", a - b
    if level == 3:
        if rng.random() < 0.5:
            a, b = (int(x) for x in rng.integers(2, 10, size=2))
            c = int(rng.integers(10, 100))
            return f"{a}*{b}+{c}", f"{a}*{b}={a * b}. {a * b}+{c}={a * b + c}.", a * b + c
        a, b, c = (int(x) for x in rng.integers(10, 100, size=3))
        return f"{a}+{b}+{c}", f"{a}+{b}={a + b}. {a + b}+{c}={a + b + c}.", a + b + c
    raise TaskError(f"unknown synthetic level {level!r}; levels are {LEVELS}")


def _prompt(expr: str) -> str:
    return f"Compute {expr}."


def _solution(steps: str, answer: int) -> str:
    return f"{steps} The answer is \\boxed{{{answer}}}"


def _generate(
    n: int,
    levels: Sequence[int],
    rng: np.random.Generator,
    *,
    id_prefix: str,
    exclude: Iterable[str] = (),
    unique: bool = True,
    p_negative: float = 0.1,
) -> list[Problem]:
    if n < 0:
        raise TaskError(f"number of problems must be >= 0, got {n}")
    levels = tuple(int(x) for x in levels)
    if not levels:
        raise TaskError("levels must not be empty")
    for lv in levels:
        if lv not in LEVELS:
            raise TaskError(f"unknown synthetic level {lv!r}; levels are {LEVELS}")
    if not 0.0 <= p_negative <= 0.5:
        raise TaskError(f"p_negative must be in [0, 0.5], got {p_negative}")
    excluded = set(exclude)
    seen: set[str] = set()
    # Level 1 is small: draw from the explicit list of what is left, so that asking for all of
    # it never depends on rejection sampling luck.
    level1 = [d for d in _level1_all() if _prompt(d[0]) not in excluded]
    out: list[Problem] = []
    for i in range(n):
        level = levels[i % len(levels)]  # round robin: equal shares of the levels
        if level == 1:
            if not level1:
                raise _capacity_error(n, levels, level)
            k = int(rng.integers(len(level1)))
            expr, steps, answer = level1.pop(k) if unique else level1[k]
            prompt = _prompt(expr)
        else:
            for _ in range(_MAX_TRIES_PER_PROBLEM):
                expr, steps, answer = _draw(level, rng, p_negative)
                prompt = _prompt(expr)
                if prompt not in excluded and not (unique and prompt in seen):
                    break
            else:
                raise _capacity_error(n, levels, level)
        seen.add(prompt)
        out.append(Problem(f"{id_prefix}-{i:06d}", prompt, str(answer), level, "synthetic",
                           _solution(steps, answer)))
    return out


def _level1_all() -> list[tuple[str, str, int]]:
    """Every level-1 problem: a+b with single digits."""
    return [(f"{a}+{b}", f"{a}+{b}={a + b}.", a + b) for a in range(10) for b in range(10)]


def _capacity_error(n: int, levels: Sequence[int], level: int) -> TaskError:
    return TaskError(
        f"cannot draw {n} problems of levels {tuple(levels)}: level {level} has only "
        f"{LEVEL_CAPACITY[level]} distinct problems (minus excluded ones)"
    )


def make_problems(
    n: int,
    *,
    levels: Sequence[int] = LEVELS,
    seed: int,
    exclude: Iterable[str] = (),
    unique: bool = True,
    p_negative: float = 0.1,
) -> list[Problem]:
    """``n`` problems, levels in equal shares (round robin), deterministic given ``seed``.

    ``unique`` forbids repeated prompts (level 1 then caps at 100 problems); ``exclude`` is a
    set of prompt texts never to draw (a held-out set). ``p_negative`` is the expected share of
    level-2 problems whose answer is negative.
    """
    rng = np.random.default_rng([int(seed), 0])
    return _generate(n, levels, rng, id_prefix=f"synth-s{seed}", exclude=exclude,
                     unique=unique, p_negative=p_negative)


def _math_record(p: Problem) -> dict[str, Any]:
    return {"problem": p.prompt, "solution": p.solution, "level": f"Level {p.level}",
            "type": "Arithmetic", "unique_id": p.id}


def write_task(
    directory: str | Path,
    *,
    n_train: int,
    n_eval: int,
    seed: int,
    levels: Sequence[int] = LEVELS,
    p_negative: float = 0.1,
) -> tuple[Path, Path]:
    """Write ``train.jsonl`` and ``eval.jsonl`` (MATH layout) and return their paths.

    The evaluation set is drawn first with distinct prompts; the training set excludes every
    evaluation prompt but may repeat its own (level 1 has only 100 problems). Disjointness is
    then checked with the pools' near-duplicate rule; a hit is an error.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    eval_set = _generate(n_eval, levels, np.random.default_rng([int(seed), 1]),
                         id_prefix=f"synth-s{seed}-eval", unique=True, p_negative=p_negative)
    train_set = _generate(n_train, levels, np.random.default_rng([int(seed), 2]),
                          id_prefix=f"synth-s{seed}-train", exclude={p.prompt for p in eval_set},
                          unique=False, p_negative=p_negative)
    return write_splits(directory, train_set, eval_set, _math_record)


def write_splits(directory: Path, train_set: Sequence[Problem], eval_set: Sequence[Problem],
                 record: Callable[[Problem], dict[str, Any]]) -> tuple[Path, Path]:
    """Write ``train.jsonl`` and ``eval.jsonl`` in ``directory``, one ``record(p)`` a line, and
    return their paths; first check disjointness under the pools' near-duplicate rule (a training
    problem that duplicates an evaluation problem is a ``DataError``). Shared by ``write_task``
    and ``codetask.write_code_task``."""
    dups = find_near_duplicates(train_set, eval_set)
    if dups:
        raise DataError(f"{directory}: {len(dups)} training problems duplicate evaluation problems")
    paths = directory / "train.jsonl", directory / "eval.jsonl"
    for path, problems in zip(paths, (train_set, eval_set)):
        with path.open("w", encoding="utf-8") as fh:
            for p in problems:
                fh.write(json.dumps(record(p)) + "\n")
    return paths


def as_pool(problems: Iterable[Problem]) -> ProblemPool:
    return ProblemPool.from_problems(problems, where="synthetic problems")


# ---------------------------------------------------------------------------------------------
# Tokenizer.
# ---------------------------------------------------------------------------------------------
BOS, EOS, PAD, UNK = "<bos>", "<eos>", "<pad>", "<unk>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK, *ROLE_TOKENS)
BOXED = "\\boxed{"
# Whole-word tokens: the prompt and solution words. Anything else falls back to characters.
WORDS = ("Compute", "The", "answer", "is", "So", "the", "Let", "us", "compute", "What", "of",
         "Put", "final", "in", "step", "by", "First", "Then", "sum", "difference", "product")
# Printable ASCII plus newline and tab, one token each: any ASCII text round-trips exactly.
CHARS = tuple(chr(c) for c in range(32, 127)) + ("\n", "\t")
TOKENIZER_VERSION = "synthetic-tokenizer-v1"

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}<|system|>\n{{ message['content'] }}\n"
    "{% elif message['role'] == 'user' %}<|user|>\n{{ message['content'] }}\n"
    "{% elif message['role'] == 'assistant' %}<|assistant|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% else %}{{ raise_exception('unknown role: ' + message['role']) }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def _vocab() -> dict[str, int]:
    tokens = [*SPECIAL_TOKENS, BOXED, *WORDS, *CHARS]
    return {t: i for i, t in enumerate(dict.fromkeys(tokens))}


def _split_pattern() -> str:
    import re

    # Longest words first so that "The" never shadows a longer word; digits one by one.
    words = "|".join(re.escape(w) for w in sorted(WORDS, key=len, reverse=True))
    return r"\\boxed\{|(?:" + words + r")(?![A-Za-z])|[\s\S]"


def build_tokenizer(cache_dir: str | Path | None = None) -> PreTrainedTokenizerFast:
    """The task's tokenizer, built with ``tokenizers`` (no hub), cached in ``cache_dir``.

    When ``cache_dir`` holds a tokenizer of the same version it is loaded; otherwise one is
    built and, if ``cache_dir`` is given, saved there (``save_pretrained`` layout).
    """
    if cache_dir is not None:
        cache = Path(cache_dir)
        marker = cache / "synthetic_tokenizer.json"
        if marker.is_file():
            try:
                meta = json.loads(marker.read_text(encoding="utf-8"))
            except json.JSONDecodeError:
                meta = {}
            if meta.get("version") == TOKENIZER_VERSION:
                return load_tokenizer(cache)
    tok = _build()
    if cache_dir is not None:
        cache = Path(cache_dir)
        tok.save_pretrained(str(cache))
        (cache / "synthetic_tokenizer.json").write_text(
            json.dumps({"version": TOKENIZER_VERSION}), encoding="utf-8"
        )
    return tok


def _build() -> PreTrainedTokenizerFast:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab=_vocab(), unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(_split_pattern()), behavior="isolated")
    core.decoder = decoders.Fuse()  # concatenate: no spaces inserted between tokens
    core.add_special_tokens(list(SPECIAL_TOKENS))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        additional_special_tokens=list(ROLE_TOKENS),
        clean_up_tokenization_spaces=False,
        padding_side="left",  # generation pads on the left
        model_max_length=512,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def load_tokenizer(directory: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer saved by ``build_tokenizer(cache_dir)``."""
    from transformers import PreTrainedTokenizerFast

    directory = Path(directory)
    if not (directory / "tokenizer.json").is_file():
        raise DataError(f"{directory}: no tokenizer.json (build it with build_tokenizer(cache_dir))")
    return PreTrainedTokenizerFast.from_pretrained(str(directory))


# ---------------------------------------------------------------------------------------------
# Supervised warm-start examples.
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SFTExample:
    """One warm-start pair: the chat-rendered prompt and the completion (worked answer + eos)."""

    problem_id: str
    prompt: str
    completion: str
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]


def render_prompt(tokenizer: PreTrainedTokenizerFast, problem_text: str) -> str:
    """The prompt as the trainer sends it: the user turn plus the assistant header."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": problem_text}], tokenize=False, add_generation_prompt=True
    )


def sft_examples(problems: Iterable[Problem], tokenizer: PreTrainedTokenizerFast) -> list[SFTExample]:
    """Prompt/completion pairs for the warm start; completions end in ``\\boxed{N}`` + eos."""
    out = []
    for p in problems:
        if not p.solution:
            raise DataError(f"problem {p.id}: no solution to build a warm-start completion from")
        prompt = render_prompt(tokenizer, p.prompt)
        completion = p.solution + tokenizer.eos_token
        out.append(SFTExample(
            p.id, prompt, completion,
            tuple(tokenizer.encode(prompt, add_special_tokens=False)),
            tuple(tokenizer.encode(completion, add_special_tokens=False)),
        ))
    return out
