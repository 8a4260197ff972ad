"""Reading an answer's text (dense-rewards paper §C.1 "Verifiers", §H.1): Unicode
canonicalization (invisible characters dropped, minus-like dashes read as '-', bidi controls
detected), numbers (the last number of a text, a token's value) and the normalization under which
two answers compare as strings. ``trainer.data.verifiers`` builds the verifiers on it;
``docs/verifiers.md`` lists every normalization. Bounded time on adversarial text: numbers are
found with simple possessive regexes scanned backwards in growing windows; nothing backtracks.
"""

from __future__ import annotations

import functools
import math
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

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
    import numpy as np  # lock and verify start without numpy
    kinds = np.zeros(0x110000, dtype=np.uint8)
    for lo, hi in _INVISIBLE_RANGES:
        kinds[lo:hi + 1] = _DROP_CHAR
    for lo, hi in _BIDI_RANGES:
        kinds[lo:hi + 1] = _BIDI_CHAR
    kinds[[ord(c) for c in MINUS_SIGNS]] = _MINUS_CHAR
    return kinds


def _code_points(text: str) -> np.ndarray:
    import numpy as np  # lock and verify start without numpy
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def canonical_chars(text: str, *, keep_bidi: bool = False) -> str:
    """``text`` with invisible format characters removed and Unicode minus signs/dashes as '-'.

    With ``keep_bidi=True`` the bidi embedding/override/isolate controls (U+202A–U+202E,
    U+2066–U+2069) stay, so that the caller can refuse the text; otherwise they are dropped too.
    """
    import numpy as np  # lock and verify start without numpy
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
            for last in _TOKEN.finditer(text, start, end):  # noqa: B007 - the loop keeps the last match
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
    import numpy as np  # lock and verify start without numpy
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
    import numpy as np  # lock and verify start without numpy
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

