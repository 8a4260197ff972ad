"""Answer checking: the default and the strict verifier (dense-rewards paper §2.3, H.1).

Rules (dense-rewards paper §C.1 "Verifiers", §H.1 "Training and evaluation"):

* **Characters.** Invisible format characters (zero-width spaces and joiners, word joiner, BOM,
  soft hyphen, …) are dropped and Unicode minus signs and dashes read as '-', before anything
  else. A completion whose answer part holds a bidi embedding/override/isolate control (it can
  show digits in another order than they are read) has no answer.
* **Default.** Strip a ``<think>…</think>`` prefix. If the rest holds a closed ``\\boxed{…}``
  (or ``\\fbox{…}``), the answer comes from the *final* one: the box whose opening comes last,
  skipping placeholder boxes (``\\boxed{}``, ``\\boxed{answer}``, … echoed from an instruction).
  Otherwise the answer is the last number after the last ``####``, else the last number in
  the completion.
* **Strict.** Only the final boxed expression counts; no box, no answer.
* **Answer of a box.** One number; or, when the box joins several numbers as a list or by words
  (``5\\text{ and }7``, ``1, 2``), no number (the content compares as a string); or its last
  number (``x = 5`` → 5).
* **Comparison.** When gold and answer both read as numbers they match within an absolute
  tolerance (``|a − b| ≤ 1e-4``); otherwise the normalized strings must be equal.

Bounded time on adversarial text: the brace matching is one vectorized pass (numpy cumsum over
the bytes), numbers are found with simple possessive regexes scanned backwards in growing
windows, and nothing here backtracks. ``docs/verifiers.md`` lists every normalization. The
reading of characters and numbers is ``trainer.data.normalize``'s.
"""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from prereg_kit.errors import MissingExtraError, needs_extra
from trainer.data.normalize import (
    _INVISIBLE_CLASS,
    _TOKEN,
    MINUS_SIGNS,
    _full_token,
    _has_bidi_control,
    _last_token,
    _token_text_value,
    canonical_chars,
    last_number,
    normalize_answer,
    parse_number,
)

if TYPE_CHECKING:
    pass

__all__ = [
    "DEFAULT_TOL",
    "Verifier",
    "VerifierLike",
    "MathVerifyVerifier",
    "UnknownVerifierError",
    "VerifierUnavailableError",
    "answers_match",
    "canonical_answer",
    "canonical_chars",
    "extract_answer",
    "extract_boxed",
    "has_boxed",
    "is_correct",
    "is_placeholder_box",
    "normalize_answer",
    "parse_number",
    "last_number",
    "MINUS_SIGNS",
    "strip_think",
    "get_verifier",
    "VERIFIER_NAMES",
]

DEFAULT_TOL = 1e-4

# ---------------------------------------------------------------------------------------------
# <think> prefix and boxes.
# ---------------------------------------------------------------------------------------------
_THINK_CLOSE = "</think>"


def strip_think(text: str) -> str:
    """Drop the reasoning prefix: everything up to the last ``</think>``.

    A completion that opens ``<think>`` and never closes it is all reasoning and has no answer
    (returns ""): a truncated chain of thought must not be scored by its last number.
    """
    i = text.rfind(_THINK_CLOSE)
    if i >= 0:
        return text[i + len(_THINK_CLOSE):]
    if text.lstrip().startswith("<think>"):
        return ""
    return text


# Placeholder boxes: what a completion echoes from an instruction ("put your final answer in
# \boxed{}") rather than an answer. Empty (spaces, LaTeX spaces, invisible characters, $ $, {}),
# dots (... \ldots \dots \cdots …), ?, blanks (___ \_ \square \Box), or the words "answer",
# "your answer", "the answer", "final answer", "your final answer" (any case, optionally
# "here"), bare or in \text{…}; or a box holding only such a box. No answer can look like these.
# extract_boxed skips at most _MAX_SKIPPED such boxes after the answer, each under
# _PLACEHOLDER_BYTES long, so its time stays linear in the text however many a completion echoes.
_MAX_SKIPPED = 256
_PLACEHOLDER_BYTES = 256
_SP = r"(?:\s|\\[,;:! ]|~|[" + _INVISIBLE_CLASS + r"])*+"
_PH_CORE = (
    r"(?:\.{2,}+|…++|\\[lc]?dots(?![A-Za-z])|\?++|_++|(?:\\_)++|\\(?:square|Box)(?![A-Za-z])"
    r"|(?i:(?:(?:your|the)\s++)?(?:final\s++)?answer(?:\s++here)?)|\{" + _SP + r"\})"
)
_PH_WRAP = r"\\(?:text|textrm|textbf|textit|mbox|mathrm|mathbf)\s*+\{" + _SP + _PH_CORE + r"?+" + _SP + r"\}"
_PH = _SP + r"\$?+" + _SP + r"(?:" + _PH_WRAP + r"|" + _PH_CORE + r")?+" + _SP + r"\$?+" + _SP
_BOX_WORD = r"\\(?:boxed|fbox)[ \t\n\v\f\r]*+"
_PH_CONTENT = re.compile(r"(?:" + _PH + r"|" + _SP + _BOX_WORD + r"\{" + _PH + r"\}" + _SP + r")")
_BOX_OPENING = re.compile((_BOX_WORD + r"\{").encode())  # over the UTF-8 bytes


def is_placeholder_box(content: str) -> bool:
    """Whether a box's content is a placeholder (empty, dots, "answer", …), not an answer."""
    return _PH_CONTENT.fullmatch(content) is not None


def extract_boxed(text: str) -> str | None:
    """Content of the final closed ``\\boxed{…}`` / ``\\fbox{…}`` (opening whitespace allowed:
    ``\\boxed {``), or None.

    "Final" is the box whose opening brace comes last among the boxes that close and are not
    placeholders (``is_placeholder_box``: an echoed ``\\boxed{}`` after the answer does not
    replace it), past at most 256 placeholders; when there is none, the final placeholder (its
    content has no answer). An unclosed last box (a truncated completion) is not a boxed
    expression, so an earlier closed box counts. Braces escaped as ``\\{``/``\\}`` are literal.
    Linear in the text: the box openings by one regular-expression scan of the bytes, brace depth
    by cumsum, "does it close?" by a suffix minimum, then a search for the close of each box looked at.
    """
    import numpy as np  # lock and verify start without numpy
    if "\\boxed" not in text and "\\fbox" not in text:
        return None
    data = text.encode("utf-8", "surrogatepass")  # ASCII braces never occur inside multibyte chars
    b = np.frombuffer(data, dtype=np.uint8)
    n = b.size
    escaped = np.zeros(n, dtype=bool)
    escaped[1:] = b[:-1] == ord("\\")
    opens = (b == ord("{")) & ~escaped
    closes = (b == ord("}")) & ~escaped
    depth = np.cumsum(opens.view(np.int8) - closes.view(np.int8), dtype=np.int32)

    # Box openings: a box word, spaces, '{' (never escaped: a letter or a space precedes it)
    q = np.array([m.end() - 1 for m in _BOX_OPENING.finditer(data)], dtype=np.int64)
    if q.size == 0:
        return None

    # A box at q closes iff depth later drops below depth[q].
    suffix_min = np.minimum.accumulate(depth[::-1])[::-1]
    after = np.minimum(q + 1, n - 1)
    closed = (q + 1 < n) & (suffix_min[after] < depth[q])
    if not closed.any():
        return None
    cq = q[closed]

    def content(start: int, limit: int | None = None) -> str | None:
        """The box's content; None when it is at least ``limit`` bytes long."""
        stop = n if limit is None else min(n, start + 1 + limit)
        inside = depth[start + 1:stop] >= depth[start]
        if inside.all():
            return None  # closes beyond the limit (a closed box always closes before n)
        end = start + 1 + int(np.argmin(inside))
        return data[start + 1:end].decode("utf-8", "surrogatepass")

    # The final box that is not a placeholder, past at most _MAX_SKIPPED placeholders; when there
    # is none, the final box (a placeholder: no answer).
    for start in cq[::-1][:_MAX_SKIPPED + 1]:
        short = content(int(start), _PLACEHOLDER_BYTES)
        if short is None or not is_placeholder_box(short):
            return short if short is not None else content(int(start))
    return content(int(cq[-1]))


def has_boxed(text: str) -> bool:
    """Whether the answer part (after the ``<think>`` prefix) holds a closed boxed expression."""
    return extract_boxed(strip_think(text)) is not None


# ---------------------------------------------------------------------------------------------
# Extraction and comparison.
# ---------------------------------------------------------------------------------------------
def canonical_answer(s: str) -> str:
    """``normalize_answer``, then, when the result is one number, its canonical text
    ("2,000" → "2000", "\\frac{1}{2}" → "1/2", "+3" → "3")."""
    norm = normalize_answer(s)
    tok = _full_token(norm)
    return norm if tok is None else tok[0]


# What joins several answers in one box rather than one expression: a space left between two
# numbers, ';', '&', a LaTeX line break, \quad, or/and/union/±, an inequality, a comma that is not
# a thousands separator, or a word of two or more letters (text, not a \command).
_LIST_SEP = re.compile(
    r"[ ;&<>≤≥≠±∪\\,A-Za-z](?:"
    r"(?<=[ ;&<>≤≥≠±∪])"
    r"|(?<=\\)(?:\\|(?:q?quad|lor|vee|land|wedge|cup|pm|mp|le|leq|ge|geq|lt|gt|ne|neq)(?![A-Za-z]))"
    r"|(?<=,)(?:(?<![0-9],)|(?![0-9]{3}(?![0-9])))"
    r"|(?<=[A-Za-z])[A-Za-z](?<![\\A-Za-z][A-Za-z]{2}))"
)


def _answer_from_box(norm: str) -> str | None:
    """Answer of a box: the normalized content when it is one number; else, when it holds
    several numbers joined as a list or by words (``5\\text{ and }7``, ``1, 2``, ``5 7``), the
    normalized content as a string, never one of its numbers; else its last number
    (``x = 5`` → 5); else the normalized content as a string (empty → None). ``norm`` is the
    box content after ``normalize_answer``."""
    if (tok := _full_token(norm)) is not None:
        return tok[0]
    first = _TOKEN.search(norm)
    if first is None:
        return norm or None
    last = _last_token(norm) or first
    if last.start() > first.start() and _LIST_SEP.search(norm, first.end(), last.start()):
        return norm
    return _token_text_value(last)[0]


def _extract(text: str, strict: bool) -> tuple[str | None, str | None]:
    """(answer, normalized content of the final box or None)."""
    body = strip_think(canonical_chars(text, keep_bidi=True))
    if _has_bidi_control(body):
        return None, None  # shown in another order than it is read: refused
    box = extract_boxed(body)
    if box is not None:
        norm = normalize_answer(box)
        return _answer_from_box(norm), norm
    if strict:
        return None, None
    i = body.rfind("####")
    if i >= 0 and (num := last_number(body[i + 4:])) is not None:
        return num, None
    return last_number(body), None


def extract_answer(text: str, *, strict: bool = False) -> str | None:
    """The answer the default (or, with ``strict=True``, the strict) verifier reads.

    Numbers come back canonical: thousands commas and '+' dropped, ``\\frac{a}{b}`` as ``a/b``;
    a box without a number, or with a list of numbers, gives its normalized content.
    """
    return _extract(text, strict)[0]


def answers_match(answer: str | None, gold: str | int | float, *, tol: float = DEFAULT_TOL) -> bool:
    """Numbers within ``tol`` (absolute: ``|a - g| <= tol``); otherwise exact equality of the
    normalized strings."""
    if isinstance(gold, bool) or not isinstance(gold, (str, int, float)):
        raise TypeError(f"gold answer must be str, int or float, got {type(gold).__name__}")
    if answer is None:
        return False
    a = parse_number(normalize_answer(answer))
    if isinstance(gold, str):
        g = parse_number(normalize_answer(gold))
    else:
        g = float(gold) if math.isfinite(float(gold)) else None
    if a is not None and g is not None:
        return abs(a - g) <= tol
    gold_s = gold if isinstance(gold, str) else str(gold)
    return normalize_answer(answer) == normalize_answer(gold_s)


def is_correct(
    completion: str, gold: str | int | float, *, strict: bool = False, tol: float = DEFAULT_TOL
) -> bool:
    """Whether ``completion`` earns reward 1 against ``gold`` under the default/strict rule.

    A gold answer that is not one number (``(1,2)``, ``x+1``) is also matched against the whole
    normalized content of the final box, so "exact string match otherwise" sees the full answer
    rather than its last number.
    """
    answer, box = _extract(completion, strict)
    if answers_match(answer, gold, tol=tol):
        return True
    if box is not None and isinstance(gold, str) and parse_number(normalize_answer(gold)) is None:
        return box == normalize_answer(gold)
    return False


# ---------------------------------------------------------------------------------------------
# Verifier objects.
# ---------------------------------------------------------------------------------------------
@runtime_checkable
class VerifierLike(Protocol):
    """What the trainer needs from a verifier: a name for the run log and a 0/1 decision."""

    name: str

    def __call__(self, completion: str, gold: str) -> bool: ...


class UnknownVerifierError(ValueError):
    """A verifier name that is not one of VERIFIER_NAMES."""


class VerifierUnavailableError(MissingExtraError, ValueError):
    """The verifier's optional dependency (math-verify, the extra ``math``) is not installed."""


@dataclass(frozen=True)
class Verifier:
    """The built-in rule: default (``strict=False``) or strict (a boxed answer is required)."""

    name: str = "default"
    strict: bool = False
    tol: float = DEFAULT_TOL

    def __call__(self, completion: str, gold: str | int | float) -> bool:
        return is_correct(completion, gold, strict=self.strict, tol=self.tol)

    def extract(self, completion: str) -> str | None:
        return extract_answer(completion, strict=self.strict)


class MathVerifyVerifier:
    """HuggingFace math-verify as a backend (optional extra; imported on construction).

    The ``<think>`` prefix is stripped first, as for the built-in rules. math-verify bounds each
    parse and comparison with ``signal.alarm``, which works only in the main thread: anywhere else
    its own calls raise ``ValueError`` before scoring anything. So off the main thread (a thread
    pool of reward functions, a trainer's worker thread) the verifier calls it with its timeouts
    off, as math-verify's own message recommends, and a correct answer is scored correct there
    too; without the alarm nothing bounds its time on adversarial text. A parser failure is a
    wrong answer; math-verify's refusal of the thread is never taken for one.
    """

    name = "math_verify"

    def __init__(self) -> None:
        try:
            import math_verify  # optional extra, imported lazily
        except ImportError as exc:
            raise VerifierUnavailableError(needs_extra("verifier 'math_verify'", "math-verify", "math")) from exc
        self._mv = math_verify

    def __call__(self, completion: str, gold: str | int | float) -> bool:
        body = strip_think(completion)
        gold_s = gold if isinstance(gold, str) else str(gold)
        # signal.alarm exists only in the main thread: elsewhere, no timeout (None) rather than a refusal
        main = threading.current_thread() is threading.main_thread()
        parse_kw, verify_kw = ({}, {}) if main else ({"parsing_timeout": None}, {"timeout_seconds": None})
        try:
            gold_parsed = self._mv.parse(gold_s if "$" in gold_s or "\\boxed" in gold_s else f"${gold_s}$", **parse_kw)
            pred = self._mv.parse(body, **parse_kw)
            return bool(self._mv.verify(gold_parsed, pred, **verify_kw))
        except Exception as exc:  # a parser failure is a wrong answer, never a crash
            if "signal only works in main thread" in str(exc) or "threaded environment" in str(exc):
                raise VerifierUnavailableError(f"math-verify refused to run in thread {threading.current_thread().name!r}: "
                                               f"{exc}") from exc
            return False


VERIFIER_NAMES = ("default", "strict", "math_verify")


def get_verifier(name: str, *, tol: float = DEFAULT_TOL) -> VerifierLike:
    """The verifier a plan names: "default", "strict" or "math_verify"."""
    if name == "default":
        return Verifier("default", strict=False, tol=tol)
    if name == "strict":
        return Verifier("strict", strict=True, tol=tol)
    if name == "math_verify":
        return MathVerifyVerifier()
    raise UnknownVerifierError(f"unknown verifier {name!r}; expected one of {', '.join(VERIFIER_NAMES)}")
