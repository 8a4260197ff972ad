"""Answer checking: the default and the strict verifier (dense-rewards paper §2.3, H.1).

Rules (paper L2454-2458, L6031-6036; extract §3.11):

* **Default.** Strip a ``<think>…</think>`` prefix. If the rest holds a closed ``\\boxed{…}``
  (or ``\\fbox{…}``), the answer comes from the *final* one: the box whose opening comes last.
  Otherwise the answer is the last number after the last ``####``, else the last number in
  the completion.
* **Strict.** Only the final boxed expression counts; no box, no answer.
* **Comparison.** When gold and answer both read as numbers they match within an absolute
  tolerance (``|a − b| ≤ 1e-4``); otherwise the normalized strings must be equal.

Bounded time on adversarial text: the brace matching is one vectorized pass (numpy cumsum over
the bytes), numbers are found with simple possessive regexes scanned backwards in growing
windows, and nothing here backtracks. ``docs/verifiers.md`` lists every normalization.

No torch here: this module is imported by the core-side analyses as well as the trainer.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = [
    "DEFAULT_TOL",
    "Verifier",
    "VerifierLike",
    "MathVerifyVerifier",
    "UnknownVerifierError",
    "VerifierUnavailableError",
    "answers_match",
    "canonical_answer",
    "extract_answer",
    "extract_boxed",
    "has_boxed",
    "is_correct",
    "normalize_answer",
    "parse_number",
    "last_number",
    "strip_think",
    "get_verifier",
    "VERIFIER_NAMES",
]

DEFAULT_TOL = 1e-4

# ---------------------------------------------------------------------------------------------
# Numbers. One token grammar, used both on raw completions and on box contents.
#   integer / decimal (optional thousands commas in groups of three), \frac{a}{b}, \dfrac, \tfrac,
#   \frac12, and a/b. A leading '-' is a sign unless it follows a word character or a closing
#   bracket ("5-3" is 5 and 3, "= -3" is -3). Possessive quantifiers: no backtracking.
# ---------------------------------------------------------------------------------------------
_UNUM = r"(?:[0-9]{1,3}(?:,[0-9]{3})++(?![0-9])|[0-9]++)(?:\.[0-9]++)?+|\.[0-9]++"
_SNUM = rf"-?+(?:{_UNUM})"
_TOKEN = re.compile(
    r"(?P<neg>(?<![\w)\]}])-)?+"
    r"(?:\\[dt]?frac\{(?P<fn>" + _SNUM + r")\}\{(?P<fd>" + _SNUM + r")\}"
    r"|\\[dt]?frac(?P<sn>[0-9])(?P<sd>[0-9])"
    r"|(?P<pn>" + _UNUM + r")/(?P<pd>" + _UNUM + r")"
    r"|(?P<num>" + _UNUM + r"))",
    re.ASCII,
)
# Safe places to start a scan: positions that no token can contain (except as its first
# character), so a scan from there sees exactly the tokens of a scan from the start of the text.
_BOUNDARY = re.compile(
    r"[^0-9.,/\-\\{}dtfrac]"  # characters that never occur in a token
    r"|\\(?![dt]?frac)"  # a backslash that does not open \frac
    r"|,(?![0-9]{3}(?![0-9]))"  # a comma that is not a thousands separator
    r"|\.(?![0-9])|/(?![.0-9])|-(?![.0-9\\])"  # '.', '/', '-' not followed by a number
    r"|(?<!frac)\{(?!-?[.0-9])"  # a brace that opens neither \frac nor a denominator
    r"|(?<![0-9])\}"  # a brace that closes no number
    r"|\.[0-9]++(?P<after>)(?=\.)",  # the second dot of ".12." (restart *at* it, see below)
    re.ASCII,
)
# Why the last rule holds: the digits after a dot always end the token that holds that dot
# (a decimal part is the last piece of a number), so the next dot is never inside a token.


def _clean_num(s: str) -> str:
    return s.replace(",", "")


def _to_float(s: str) -> float | None:
    v = float(_clean_num(s))
    return v if math.isfinite(v) else None


def _ratio(num: str, den: str) -> float | None:
    a, b = _to_float(num), _to_float(den)
    if a is None or b is None or b == 0.0:
        return None
    v = a / b
    return v if math.isfinite(v) else None


def _token_text_value(m: re.Match[str]) -> tuple[str, float | None]:
    """Canonical text and value of one number token (commas dropped, fractions as a/b)."""
    sign = "-" if m.group("neg") else ""
    if m.group("num") is not None:
        text = _clean_num(m.group("num"))
        value = _to_float(text)
    elif m.group("fn") is not None:
        text = f"{_clean_num(m.group('fn'))}/{_clean_num(m.group('fd'))}"
        value = _ratio(m.group("fn"), m.group("fd"))
    elif m.group("sn") is not None:
        text = f"{m.group('sn')}/{m.group('sd')}"
        value = _ratio(m.group("sn"), m.group("sd"))
    else:
        text = f"{_clean_num(m.group('pn'))}/{_clean_num(m.group('pd'))}"
        value = _ratio(m.group("pn"), m.group("pd"))
    if sign:
        text = _negate_text(text)
        value = -value if value is not None else None
    return text, value


def _negate_text(text: str) -> str:
    return text[1:] if text.startswith("-") else "-" + text


def _last_token(text: str) -> re.Match[str] | None:
    """The last number token of ``text``, in time linear in ``len(text)``.

    Scanning the whole text would create one match object per number (millions on a megabyte
    of "1 1 1 ..."). The last token holds the last digit and ends at most one character after
    it, so scan a window that ends there and starts at a boundary (see ``_BOUNDARY``): from a
    boundary, the left-to-right scan sees exactly the tokens the full scan sees. The window
    grows geometrically until it holds a token or covers the text.
    """
    last_digit = max(text.rfind(c) for c in "0123456789")
    if last_digit < 0:
        return None
    end = min(len(text), last_digit + 2)
    size = 256
    while True:
        w = max(0, last_digit - size)
        start = 0
        if w > 0:
            b = _BOUNDARY.search(text, w, last_digit + 1)
            start = -1 if b is None else b.start("after") if b.group("after") is not None else b.start()
        if start >= 0:
            last = None
            for last in _TOKEN.finditer(text, start, end):
                pass
            if last is not None or start == 0:
                return last
        size *= 4


def last_number(text: str) -> str | None:
    """Canonical text of the last number in ``text`` (see the token grammar), or None."""
    m = _last_token(text.replace("\u2212", "-"))
    return None if m is None else _token_text_value(m)[0]


# ---------------------------------------------------------------------------------------------
# Normalization of an answer string (box content or gold).
# ---------------------------------------------------------------------------------------------
_TEXT_GROUP = re.compile(r"\\(?:text|textrm|textbf|textit|mbox|mathrm|mathbf|operatorname)\s*\{([^{}]*)\}")
_DROP = re.compile(
    r"\\left(?![a-z])|\\right(?![a-z])|\\displaystyle|\\[!,;: ]|~|\$|\\\$|"
    r"\^\{?\\circ\}?|\\circ|\\%|%|\\degree"
)
_WS = re.compile(r"\s+")


def normalize_answer(s: str) -> str:
    """Normalize an answer string for comparison (the rules of ``docs/verifiers.md``).

    Unicode minus → '-'; ``\\dfrac``/``\\tfrac`` → ``\\frac``; drop ``$``, ``\\left``/``\\right``,
    LaTeX spacing (``\\! \\, \\; \\:``, ``~``), degrees, ``%``/``\\%`` and ``\\$``; drop
    ``\\text{…}``-style unit groups when a digit remains, else keep their inner text; remove all
    whitespace; drop one trailing period; strip matching outer braces.
    """
    s = s.replace("\u2212", "-").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    stripped = _TEXT_GROUP.sub("", s)
    s = stripped if re.search(r"[0-9]", stripped) else _TEXT_GROUP.sub(r"\1", s)
    s = _DROP.sub("", s)
    s = _WS.sub("", s)
    if s.endswith("."):
        s = s[:-1]
    # Outer braces around a brace-free core ("{{12}}" -> "12"); one pass, no repeated peeling.
    lead = len(s) - len(s.lstrip("{"))
    trail = len(s) - len(s.rstrip("}"))
    k = min(lead, trail)
    if k and "{" not in s[k:-k] and "}" not in s[k:-k]:
        s = s[k:-k]
    return s


def _full_token(s: str) -> tuple[str, float | None] | None:
    """Canonical text and value of a normalized answer that is exactly one number token."""
    sign = ""
    if s[:1] in ("+", "-"):
        sign, s = s[0], s[1:]
    m = _TOKEN.fullmatch(s)
    if m is None or m.group("neg"):
        return None
    text, value = _token_text_value(m)
    if sign == "-":
        text = _negate_text(text)
        value = -value if value is not None else None
    return text, value


def parse_number(s: str) -> float | None:
    """Value of a *normalized* answer that is exactly one number, else None.

    Accepts ``-3``, ``+3``, ``3.50``, ``.5``, ``1,234`` (commas in groups of three),
    ``\\frac{1}{2}``, ``\\dfrac``/``\\tfrac``, ``\\frac12``, ``-\\frac{1}{2}`` and ``1/2``.
    Division by zero and non-finite values give None (the answer is then compared as a string).
    """
    t = _full_token(s)
    return None if t is None else t[1]


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


def extract_boxed(text: str) -> str | None:
    """Content of the final closed ``\\boxed{…}`` / ``\\fbox{…}`` (opening whitespace allowed:
    ``\\boxed {``), or None.

    "Final" is the box whose opening brace comes last among the boxes that close. An unclosed
    last box (a truncated completion) is not a boxed expression, so an earlier closed box counts.
    Braces escaped as ``\\{``/``\\}`` are literal. One vectorized pass over the bytes: brace
    depth by cumsum, "does it close?" by a suffix minimum, then one search for the close.
    """
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

    # Candidate openings: '{' whose previous non-space character ends "\boxed" or "\fbox".
    q = np.flatnonzero(opens)
    q = q[q >= 5]
    if q.size == 0:
        return None
    space = (b == 32) | ((b >= 9) & (b <= 13))  # ' ', \t \n \v \f \r
    nonspace_idx = np.where(space, -1, np.arange(n, dtype=np.int32))
    prev_ns = np.maximum.accumulate(nonspace_idx)
    e = prev_ns[q - 1]
    is_box = np.zeros(q.size, dtype=bool)
    for word in (b"\\boxed", b"\\fbox"):
        k = len(word)
        ok = e >= k - 1
        for j, ch in enumerate(reversed(word)):
            idx = np.clip(e - j, 0, n - 1)
            ok &= b[idx] == ch
        is_box |= ok
    q = q[is_box]
    if q.size == 0:
        return None

    # A box at q closes iff depth later drops below depth[q].
    suffix_min = np.minimum.accumulate(depth[::-1])[::-1]
    after = np.minimum(q + 1, n - 1)
    closed = (q + 1 < n) & (suffix_min[after] < depth[q])
    if not closed.any():
        return None
    start = int(q[np.flatnonzero(closed)[-1]])
    end = start + 1 + int(np.argmax(depth[start + 1:] < depth[start]))
    return data[start + 1:end].decode("utf-8", "surrogatepass")


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


def _answer_from_box(content: str) -> str | None:
    """Answer of a box: the whole content when it is one number, else its last number, else the
    normalized content as a string (empty box → None)."""
    norm = normalize_answer(content)
    if (tok := _full_token(norm)) is not None:
        return tok[0]
    if (num := last_number(content)) is not None:
        return num
    return norm or None


def _extract(text: str, strict: bool) -> tuple[str | None, str | None]:
    """(answer, normalized content of the final box or None)."""
    body = strip_think(text)
    box = extract_boxed(body)
    if box is not None:
        return _answer_from_box(box), normalize_answer(box)
    if strict:
        return None, None
    body = body.replace("\u2212", "-")
    i = body.rfind("####")
    if i >= 0 and (num := last_number(body[i + 4:])) is not None:
        return num, None
    return last_number(body), None


def extract_answer(text: str, *, strict: bool = False) -> str | None:
    """The answer the default (or, with ``strict=True``, the strict) verifier reads.

    Numbers come back canonical: thousands commas and '+' dropped, ``\\frac{a}{b}`` as ``a/b``;
    a box without a number gives its normalized content.
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


class VerifierUnavailableError(ImportError, ValueError):
    """The verifier's optional dependency (math-verify) is not installed."""


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

    The ``<think>`` prefix is stripped first, as for the built-in rules. Unlike the built-in
    verifiers it makes no time guarantee on adversarial text (math-verify has its own timeouts).
    """

    name = "math_verify"

    def __init__(self) -> None:
        try:
            import math_verify  # noqa: PLC0415 — optional extra, imported lazily
        except ImportError as exc:
            raise VerifierUnavailableError(
                "verifier 'math_verify' needs the math-verify package (pip install math-verify)"
            ) from exc
        self._mv = math_verify

    def __call__(self, completion: str, gold: str | int | float) -> bool:
        body = strip_think(completion)
        gold_s = gold if isinstance(gold, str) else str(gold)
        try:
            gold_parsed = self._mv.parse(gold_s if "$" in gold_s or "\\boxed" in gold_s else f"${gold_s}$")
            pred = self._mv.parse(body)
            return bool(self._mv.verify(gold_parsed, pred))
        except Exception:  # noqa: BLE001 — a parser failure is a wrong answer, never a crash
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
