"""Answer checking: the default and the strict verifier (dense-rewards paper §2.3, H.1).

Rules (paper L2454-2458, L6031-6036; extract §3.11):

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
windows, and nothing here backtracks. ``docs/verifiers.md`` lists every normalization.

No torch here: this module is imported by the core-side analyses as well as the trainer.
"""

from __future__ import annotations

import functools
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
# Characters. Before anything is read, invisible characters are dropped (so "4<U+200B>2" reads 42,
# as it displays) and minus-like dashes become '-' (so "–5" reads -5).
# ---------------------------------------------------------------------------------------------
# Format (Cf) and default-ignorable code points (Unicode 15.1 DerivedCoreProperties): they render
# as nothing, or as a mark over the digits, never as a digit, a sign or a space. Bidi embeddings,
# overrides and isolates are kept apart: they can show digits in another order than they are read.
_INVISIBLE_RANGES = (
    (0x00AD, 0x00AD), (0x034F, 0x034F), (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD),
    (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x115F, 0x1160), (0x17B4, 0x17B5),
    (0x180B, 0x180F), (0x200B, 0x200F), (0x2060, 0x2065), (0x206A, 0x206F), (0x3164, 0x3164),
    (0xFE00, 0xFE0F), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFFB), (0x110BD, 0x110BD),
    (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
_BIDI_RANGES = ((0x202A, 0x202E), (0x2066, 0x2069))
# Minus sign, hyphens, figure/en/em dashes, heavy minus, small and fullwidth hyphen-minus.
MINUS_SIGNS = "\u02d7\u2010\u2011\u2012\u2013\u2014\u2212\u2796\ufe58\ufe63\uff0d"


def _char_class(ranges: tuple[tuple[int, int], ...]) -> str:
    return "".join(chr(a) if a == b else f"{chr(a)}-{chr(b)}" for a, b in ranges)


_INVISIBLE_CLASS = _char_class(_INVISIBLE_RANGES)
_DROP_CHAR, _MINUS_CHAR, _BIDI_CHAR = 1, 2, 3  # 0: keep


@functools.cache
def _char_kinds() -> np.ndarray:
    """Kind of every code point (keep, drop, minus, bidi control): one table lookup per character
    instead of a regex scan, which is ~10x slower on long non-ASCII text."""
    kinds = np.zeros(0x110000, dtype=np.uint8)
    for lo, hi in _INVISIBLE_RANGES:
        kinds[lo:hi + 1] = _DROP_CHAR
    for lo, hi in _BIDI_RANGES:
        kinds[lo:hi + 1] = _BIDI_CHAR
    kinds[[ord(c) for c in MINUS_SIGNS]] = _MINUS_CHAR
    return kinds


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def canonical_chars(text: str, *, keep_bidi: bool = False) -> str:
    """``text`` with invisible format characters removed and Unicode minus signs/dashes as '-'.

    With ``keep_bidi=True`` the bidi embedding/override/isolate controls (U+202A–U+202E,
    U+2066–U+2069) stay, so that the caller can refuse the text; otherwise they are dropped too.
    """
    if text.isascii():
        return text
    codes = _code_points(text)
    kinds = _char_kinds()[codes]
    if not kinds.any():
        return text
    drop = kinds == _DROP_CHAR
    if not keep_bidi:
        drop |= kinds == _BIDI_CHAR
    codes = np.where(kinds == _MINUS_CHAR, np.uint32(ord("-")), codes)[~drop]
    return codes.tobytes().decode("utf-32-le", "surrogatepass")


def _has_bidi_control(text: str) -> bool:
    return not text.isascii() and bool((_char_kinds()[_code_points(text)] == _BIDI_CHAR).any())


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
    m = _last_token(canonical_chars(text))
    return None if m is None else _token_text_value(m)[0]


# ---------------------------------------------------------------------------------------------
# Normalization of an answer string (box content or gold).
# ---------------------------------------------------------------------------------------------
# A \text{…}-style group, with the exponent of a unit (cm^2, m^{3}).
_TEXT_GROUP = re.compile(
    r"\\(?:text|textrm|textbf|textit|mbox|mathrm|mathbf|operatorname)\s*\{([^{}]*)\}(\^(?:\{[0-9]\}|[0-9]))?"
)
_DROP = re.compile(r"\\left(?![a-z])|\\right(?![a-z])|\\displaystyle|\^\{?\\circ\}?|\\circ|\\degree")
_DROP_LITERAL = ("\\$", "$", "\\%", "%")  # str.replace: no per-match cost on a long run of them
# Digit grouping: 10\,000 and 10,\!000 are one number (a thin or negative thin space before a
# group of exactly three digits); any other LaTeX space is a space.
_THIN_GROUP = re.compile(r"\\[,!](?:(?<=[0-9]\\[,!])|(?<=[0-9],\\[,!]))(?=[0-9]{3}(?![0-9]))")
_LATEX_SPACES = ("\\!", "\\,", "\\;", "\\:", "\\ ", "~")
_MARK = "\u2063"  # an invisible character: never in the text after canonical_chars


def _remove_spaces(s: str) -> str:
    """Remove whitespace, except one space where removing it would join two numbers: between
    digits (``5 7``), before a decimal point (``5 .5``), after one (``5. 7``) and after a comma
    before a three-digit group (``1, 234``, not 1234). Vectorized over the code points: a regex
    substitution costs ~0.5 µs per match, seconds on megabytes of ``"1 1 1 …"``."""
    parts = s.split()
    if len(parts) <= 1:
        return "".join(parts)
    codes = _code_points(" ".join(parts))
    n = codes.size
    pad = np.zeros(n + 6, dtype=np.uint32)  # two before, four after: neighbours of every position
    pad[2:n + 2] = codes
    dig = (pad >= ord("0")) & (pad <= ord("9"))

    def d(offset: int) -> np.ndarray:  # "is a digit" at position + offset, for every position
        return dig[2 + offset:n + 2 + offset]

    def c(offset: int) -> np.ndarray:
        return pad[2 + offset:n + 2 + offset]

    keep = d(-1) & (d(1) | ((c(1) == ord(".")) & d(2)))
    keep |= (c(-1) == ord(".")) & d(-2) & d(1)
    keep |= (c(-1) == ord(",")) & d(-2) & d(1) & d(2) & d(3) & ~d(4)
    return codes[(codes != ord(" ")) | keep].tobytes().decode("utf-32-le", "surrogatepass")


def _text_groups(s: str) -> str:
    """Resolve ``\\text{…}``-style groups: a group after the last number is a unit and goes
    (``10\\text{ cm}`` → ``10``); a group before a number keeps its text (``5\\text{ and }7`` →
    ``5 and 7``, two numbers); when no digit is outside the groups, they keep their text."""
    parts = _TEXT_GROUP.split(s)  # piece, inner text, exponent, piece, …, piece
    if len(parts) == 1:
        return s
    parts[2::3] = [e or "" for e in parts[2::3]]
    pieces = parts[0::3]
    joined = "".join(pieces)
    pos = max(joined.rfind(c) for c in "0123456789")
    if pos < 0:  # no number outside the groups: every group keeps its text
        return "".join(parts)
    # The piece holding the last digit: groups before it keep their text, groups after it go.
    last = int(np.searchsorted(np.cumsum([len(p) for p in pieces]), pos, side="right"))
    return "".join(parts[:3 * last + 1]) + "".join(parts[3 * last + 3::3])


def normalize_answer(s: str) -> str:
    """Normalize an answer string for comparison (the rules of ``docs/verifiers.md``).

    Invisible format characters dropped, Unicode minus signs and dashes → '-';
    ``\\dfrac``/``\\tfrac`` → ``\\frac``, ``{,}`` → ``,``; ``\\text{…}``-style groups after the last
    number dropped as units (with an exponent: ``\\text{ cm}^2``), others replaced by their text;
    drop ``$``, ``\\left``/``\\right``, degrees, ``%``/``\\%``, ``\\$`` and empty groups ``{}``;
    ``10\\,000`` and ``10,\\!000`` are digit groups, other LaTeX spaces (``\\! \\, \\; \\: \\ ``,
    ``~``) are spaces; remove whitespace except where it separates two numbers (``5 7`` stays
    two numbers); drop one trailing period; strip matching outer braces.
    """
    s = canonical_chars(s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("{,}", ",")
    s = _text_groups(s)
    for lit in _DROP_LITERAL:
        s = s.replace(lit, "")
    s = _THIN_GROUP.sub("", _DROP.sub("", s)).replace("{}", "")
    s = s.replace("\\\\", _MARK)  # a LaTeX line break, whose second backslash opens no space
    for space in _LATEX_SPACES:
        s = s.replace(space, " ")
    s = _remove_spaces(s).replace(_MARK, "\\\\")
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
    One vectorized pass over the bytes: brace depth by cumsum, "does it close?" by
    a suffix minimum, then a search for the close of each box looked at.
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
