"""Tests for trainer.data.verifiers: the case table, properties, and adversarial time bounds."""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
import unicodedata

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from trainer.data.normalize import _has_bidi_control
from trainer.data.verifiers import (
    _MAX_SKIPPED,
    MINUS_SIGNS,
    MathVerifyVerifier,
    UnknownVerifierError,
    Verifier,
    VerifierLike,
    VerifierUnavailableError,
    canonical_chars,
    extract_answer,
    extract_boxed,
    get_verifier,
    has_boxed,
    is_correct,
    is_placeholder_box,
    normalize_answer,
    parse_number,
    strip_think,
)

B = "\\boxed"

# (completion, gold, default verdict, strict verdict)
CASES = [
    # boxed answers
    (f"The answer is {B}{{12}}.", "12", True, True),
    (f"{B}{{12}}", "13", False, False),
    (f"{B} {{7}}", "7", True, True),  # space before the brace
    ("\\fbox{9}", "9", True, True),
    (f"{B}{{x = 5}}", "5", True, True),  # last number in the box
    (f"{B}{{{{12}}}}", "12", True, True),  # redundant braces
    (f"{B}{{\\frac{{1}}{{2}}}}", "0.5", True, True),  # nested braces: fraction
    (f"{B}{{\\dfrac{{3}}{{4}}}}", "0.75", True, True),
    (f"{B}{{\\tfrac{{3}}{{4}}}}", "\\frac{3}{4}", True, True),
    (f"{B}{{\\frac12}}", "1/2", True, True),
    (f"{B}{{1/2}}", "0.5", True, True),
    (f"{B}{{-\\frac{{1}}{{3}}}}", "-0.33333", True, True),
    # multiple boxes: the final one counts
    (f"{B}{{3}} then {B}{{4}}", "4", True, True),
    (f"{B}{{3}} then {B}{{4}}", "3", False, False),
    (f"{B}{{{B}{{8}}}}", "8", True, True),  # a box in a box
    (f"{B}{{3}} and finally {B}{{5", "3", True, True),  # unclosed last box is not a box
    (f"{B}{{3}} and finally {B}{{5", "5", False, False),
    # GSM8K ####
    ("She has 3 apples.\n#### 18", "18", True, False),
    ("#### 1,234", "1234", True, False),
    ("#### 18\nThen 20 more.", "20", True, False),  # the last number *after* the last ####
    ("12 then\n#### 18\nok.", "18", True, False),
    ("#### none", "7", False, False),
    (f"#### 5 but {B}{{6}}", "6", True, True),  # a box beats ####
    # last number in the completion
    ("So the total is 42.", "42", True, False),
    ("Answer: 42 apples", "42", True, False),
    ("No numbers here.", "0", False, False),
    ("", "0", False, False),
    ("5-3 = 2", "2", True, False),
    ("The value is 5-3", "3", True, False),  # '-' after a digit is an operator
    ("It is -3.", "-3", True, False),
    # think prefix
    (f"<think>maybe 7</think> {B}{{8}}", "8", True, True),
    ("<think>maybe 7</think> so 8", "7", False, False),
    ("<think>so it is 7", "7", False, False),  # unfinished reasoning: no answer
    (f"<think>{B}{{7}}</think> 9", "7", False, False),
    # numbers
    (f"{B}{{-3}}", "-3", True, True),
    (f"{B}{{-3}}", "3", False, False),
    (f"{B}{{3.50}}", "3.5", True, True),
    (f"{B}{{1,234}}", "1234", True, True),
    (f"{B}{{1,234,567}}", "1234567", True, True),
    (f"{B}{{$5$}}", "5", True, True),
    ("The cost is $\\$12.00$.", "12", True, False),
    (f"{B}{{10\\text{{ cm}}}}", "10", True, True),  # units stripped
    (f"{B}{{50\\%}}", "50", True, True),
    (f"{B}{{90^\\circ}}", "90", True, True),
    (f"{B}{{\u22124}}", "-4", True, True),  # unicode minus
    (f"{B}{{.5}}", "0.5", True, True),
    # tolerance edges (absolute 1e-4)
    (f"{B}{{0.33333}}", "\\frac{1}{3}", True, True),
    (f"{B}{{0.3333}}", "1/3", True, True),
    (f"{B}{{0.333}}", "1/3", False, False),
    (f"{B}{{1.00005}}", "1", True, True),
    (f"{B}{{1.0002}}", "1", False, False),
    (f"{B}{{100000}}", "100001", False, False),  # absolute, not relative
    # non-numeric: exact string after normalization
    (f"{B}{{\\text{{yes}}}}", "yes", True, True),
    (f"{B}{{x}}", "y", False, False),
    (f"{B}{{(1, 2)}}", "(1,2)", True, True),  # the whole box, not its last number
    (f"{B}{{x + 1}}", "x+1", True, True),
    (f"{B}{{x + 1}}", "1", True, True),  # a numeric gold reads the last number
    (f"{B}{{}}", "0", False, False),
    # strict rejects unboxed answers
    ("The answer is 12", "12", True, False),
    ("12", "12", True, False),
    # several numbers in one box: a list, not one number (and never the numbers glued together)
    (f"{B}{{5 \\text{{ and }} 7}}", "57", False, False),
    (f"{B}{{5 \\text{{ and }} 7}}", "7", False, False),
    (f"{B}{{5 \\text{{ and }} 7}}", "5", False, False),
    (f"{B}{{5 \\text{{ and }} 7}}", "5 and 7", True, True),  # the whole box as a string
    (f"{B}{{5 \\mbox{{ or }} 7}}", "57", False, False),
    (f"{B}{{\\text{{5 and 7}}}}", "7", False, False),
    (f"{B}{{5 and 7}}", "7", False, False),
    (f"{B}{{5 7}}", "57", False, False),
    (f"{B}{{5 7}}", "7", False, False),
    (f"{B}{{5\\ 7}}", "57", False, False),
    (f"{B}{{5~7}}", "57", False, False),
    (f"{B}{{5\\,7}}", "57", False, False),
    (f"{B}{{5\\!7}}", "57", False, False),
    (f"{B}{{5\\text{{ }}7}}", "57", False, False),
    (f"{B}{{5 \\quad 7}}", "7", False, False),
    (f"{B}{{5, 7}}", "7", False, False),
    (f"{B}{{1, 234}}", "1234", False, False),  # a comma and a space: a list, not 1,234
    (f"{B}{{5; 7}}", "7", False, False),
    (f"{B}{{5. 7}}", "5.7", False, False),
    (f"{B}{{x = 5 \\text{{ or }} x = 7}}", "7", False, False),
    (f"{B}{{1 < x < 5}}", "5", False, False),
    (f"{B}{{3 \\pm 2}}", "2", False, False),
    (f"{B}{{5 \\\\ 7}}", "7", False, False),  # a LaTeX line break
    (f"{B}{{5 \\& 7}}", "7", False, False),
    (f"{B}{{\\mathbf{{5}} \\text{{ and }} \\mathbf{{7}}}}", "7", False, False),
    (f"{B}{{5\u00a07}}", "57", False, False),  # a no-break space is a space
    (f"{B}{{5{{}}7}}", "57", True, True),  # an empty group joins nothing: shown and read as 57
    # one expression: still its last number
    (f"{B}{{2 + 3 = 5}}", "5", True, True),
    (f"{B}{{f(2) = 7}}", "7", True, True),
    (f"{B}{{a_{{10}} = 55}}", "55", True, True),
    (f"{B}{{\\text{{Area}} = 12}}", "12", True, True),
    (f"{B}{{12\\text{{ cm}}^2}}", "12", True, True),  # a unit with an exponent
    # digit grouping stays one number
    (f"{B}{{10\\,000}}", "10000", True, True),
    (f"{B}{{10,\\!000}}", "10000", True, True),
    (f"{B}{{1{{,}}000}}", "1000", True, True),
    (f"{B}{{1\\,2345}}", "12345", False, False),  # not a group of three
    # invisible characters inside a number
    (f"{B}{{4\u200b2}}", "42", True, True),
    (f"{B}{{4\u200b2}}", "2", False, False),
    (f"{B}{{4\u200c2}}", "42", True, True),
    (f"{B}{{4\u200d2}}", "42", True, True),
    (f"{B}{{4\u20602}}", "42", True, True),
    (f"{B}{{4\ufeff2}}", "42", True, True),
    (f"{B}{{4\u00ad2}}", "42", True, True),  # soft hyphen
    (f"{B}{{\ufeff-\u200b4\u200b2}}", "-42", True, True),
    ("The answer is 4\u200b2.", "42", True, False),
    ("The answer is 4\u200b2.", "2", False, False),
    ("#### 4\u2060,\u2060000", "4000", True, False),
    (f"{B}{{42}}", "4\u200b2", True, True),  # in the gold too
    (f"{B}{{\u202e24\u202c}}", "24", False, False),  # bidi override: shows 42, reads 24: refused
    (f"{B}{{\u202e24\u202c}}", "42", False, False),
    ("The answer is \u206724\u2069", "24", False, False),  # bidi isolate: refused
    # Unicode minus signs and dashes
    (f"{B}{{\u20135}}", "-5", True, True),  # en dash
    (f"{B}{{\u20135}}", "5", False, False),
    (f"{B}{{\u22125}}", "-5", True, True),  # minus sign
    (f"{B}{{\u20145}}", "-5", True, True),  # em dash
    (f"{B}{{\ufe635}}", "-5", True, True),  # small hyphen-minus
    (f"{B}{{\uff0d5}}", "-5", True, True),  # fullwidth hyphen-minus
    (f"{B}{{\u20125}}", "-5", True, True),  # figure dash
    (f"{B}{{\u2013\\frac{{1}}{{2}}}}", "-0.5", True, True),
    ("It is \u20135.", "-5", True, False),
    ("It is \u20135.", "5", False, False),
    ("#### \u20141,234", "-1234", True, False),
    ("The value is 5\u20133", "3", True, False),  # after a digit a dash is an operator, as '-'
    (f"{B}{{-5}}", "\u20135", True, True),  # in the gold too
    # echoed placeholder boxes after the answer do not replace it
    (f"{B}{{12}}. Put your final answer in {B}{{}}.", "12", True, True),
    (f"{B}{{12}} {B}{{ }}", "12", True, True),
    (f"{B}{{12}} {B} {{}}", "12", True, True),
    (f"{B}{{12}} \\fbox{{}}", "12", True, True),
    (f"{B}{{12}} {B}{{\\,}}", "12", True, True),
    (f"{B}{{12}} {B}{{$ $}}", "12", True, True),
    (f"{B}{{12}} {B}{{{{}}}}", "12", True, True),
    (f"{B}{{12}} {B}{{\u200b}}", "12", True, True),
    (f"{B}{{12}} {B}{{{B}{{}}}}", "12", True, True),
    (f"{B}{{12}} {B}{{...}}", "12", True, True),
    (f"{B}{{12}} {B}{{\\ldots}}", "12", True, True),
    (f"{B}{{12}} {B}{{\u2026}}", "12", True, True),
    (f"{B}{{12}} {B}{{?}}", "12", True, True),
    (f"{B}{{12}} {B}{{\\_\\_}}", "12", True, True),
    (f"{B}{{12}} {B}{{answer}}", "12", True, True),
    (f"{B}{{12}} {B}{{Your Final Answer}}", "12", True, True),
    (f"{B}{{12}} {B}{{\\text{{the answer}}}}", "12", True, True),
    (f"{B}{{12}} {B}{{$\\text{{answer here}}$}}", "12", True, True),
    (f"{B}{{12}} {B}{{}} {B}{{5", "12", True, True),  # then an unclosed box
    # ... but a box with an answer in it still replaces an earlier one
    (f"{B}{{12}} {B}{{13}}", "12", False, False),
    (f"{B}{{12}} {B}{{0}}", "12", False, False),
    (f"{B}{{12}} {B}{{x}}", "12", False, False),
    (f"{B}{{12}} {B}{{N}}", "12", False, False),
    (f"{B}{{12}} {B}{{answer = 13}}", "12", False, False),
    (f"{B}{{12}} {B}{{\\text{{answers}}}}", "12", False, False),
    (f"{B}{{12}} {B}{{{B}{{13}}}}", "12", False, False),
    # only placeholders: no answer, and no fallback past them
    (f"The answer is 12. {B}{{}}", "12", False, False),
    (f"The answer is 12. {B}{{answer}}", "12", False, False),
    (f"<think>{B}{{12}}</think> {B}{{}}", "12", False, False),  # a box in the reasoning is not one
]


@pytest.mark.parametrize(("completion", "gold", "default", "strict"), CASES)
def test_case_table(completion: str, gold: str, default: bool, strict: bool) -> None:
    assert is_correct(completion, gold) is default
    assert is_correct(completion, gold, strict=True) is strict
    assert get_verifier("default")(completion, gold) is default
    assert get_verifier("strict")(completion, gold) is strict


def test_table_is_large_enough() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        (f"{B}{{1,234}}", "1234"),
        (f"{B}{{\\frac{{1}}{{2}}}}", "1/2"),
        (f"{B}{{+7}}", "7"),
        (f"{B}{{-0.50}}", "-0.50"),
        ("#### 3", "3"),
        ("no", None),
        (f"{B}{{}}", None),
        (f"{B}{{\\text{{yes}}}}", "yes"),
        (f"{B}{{\\{{1,2\\}}}}", "\\{1,2\\}"),  # escaped braces are literal; a list is no number
        (f"{B}{{\\{{2\\}}}}", "2"),
    ],
)
def test_extract_answer_canonical(text: str, answer: str | None) -> None:
    assert extract_answer(text) == answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        (f"{B}{{5 \\text{{ and }} 7}}", "5and7"),  # a list: the content, not 57 nor 7
        (f"{B}{{5 7}}", "5 7"),
        (f"{B}{{1, 234}}", "1, 234"),
        (f"{B}{{(1, 2)}}", "(1,2)"),
        (f"{B}{{x = 5}}", "5"),
        (f"{B}{{4\u200b2}}", "42"),
        ("so 4\u2060\u20602", "42"),
        (f"{B}{{\u20135}}", "-5"),
        ("It is \uff0d7", "-7"),
        (f"{B}{{12}} {B}{{}}", "12"),
        (f"{B}{{\u202e24\u202c}}", None),
    ],
)
def test_extract_answer_new_rules(text: str, answer: str | None) -> None:
    assert extract_answer(text) == answer
    if B in text:
        assert extract_answer(text, strict=True) == answer


def test_a_list_is_never_a_number() -> None:
    """What extract_answer gives for a list compares as a string: it never parses as a number,
    and normalizing it again keeps it a list (answers_match normalizes the answer once more)."""
    for content in ("5 \\text{ and } 7", "5 7", "5\\,7", "1, 234", "5. 7", "5 .5", "5; 7", "1 < x < 5"):
        a = extract_answer(f"{B}{{{content}}}")
        assert a is not None and parse_number(normalize_answer(a)) is None, content
        assert normalize_answer(a) == a, content


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("5 \\text{ and } 7", "5and7"), ("10\\text{ cm}", "10"), ("12\\text{ cm}^{2}", "12"),
        ("\\text{Area: }12\\text{ m}^2", "Area:12"), ("\\text{m}^2", "m^2"), ("\\text{yes}", "yes"),
        ("10\\,000", "10000"), ("10,\\!000", "10,000"), ("1{,}000", "1,000"), ("1\\,2345", "1 2345"),
        ("5 7", "5 7"), ("5\\;7", "5 7"), ("5 \n\t 7", "5 7"), ("(1, 2)", "(1,2)"), ("1, 234", "1, 234"),
        ("1, 2345", "1,2345"), ("5. 7", "5. 7"), ("5 .5", "5 .5"), (" x = - 3 ", "x=-3"),
        ("4\u200b2", "42"), ("\u2013\u20603", "-3"), ("\u202e24\u202c", "24"),
        ("5 \\\\ 7", "5\\\\7"), ("5{}7", "57"), ("5\u00a07", "5 7"),
    ],
)
def test_normalize_answer_new_rules(raw: str, norm: str) -> None:
    assert normalize_answer(raw) == norm
    assert normalize_answer(norm) == norm  # idempotent on these


@pytest.mark.parametrize("minus", list(MINUS_SIGNS))
def test_every_minus_sign(minus: str) -> None:
    assert extract_answer(f"{B}{{{minus}5}}") == "-5"
    assert extract_answer(f"{B}{{{minus}5}}", strict=True) == "-5"
    assert extract_answer(f"It is {minus}5.") == "-5"
    assert extract_answer(f"It is 7{minus}5.") == "5"  # after a digit: an operator
    assert is_correct(f"{B}{{{minus}\\frac{{1}}{{4}}}}", "-0.25")
    assert normalize_answer(f"{minus}3") == "-3"


def _format_chars() -> list[str]:
    return [chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"]


def test_every_format_character_inside_a_number() -> None:
    """Every format (Cf) character of this Python's Unicode inside 42 reads 42 or is refused,
    never another number; the same for the other invisible (default-ignorable) characters."""
    others = ["\u034f", "\u115f", "\u17b4", "\u180b", "\u3164", "\ufe0f", "\uffa0", "\U000e0100"]
    chars = _format_chars() + others
    assert len(chars) > 150
    for c in chars:
        for text, strict in ((f"{B}{{4{c}2}}", True), (f"{B}{{4{c}2}}", False), (f"so 4{c}2", False)):
            assert extract_answer(text, strict=strict) in ("42", None), (hex(ord(c)), text)
        assert normalize_answer(f"4{c}2") == "42", hex(ord(c))
    bidi = [c for c in chars if 0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069]
    assert len(bidi) == 9
    for c in bidi:
        assert extract_answer(f"{B}{{4{c}2}}") is None and extract_answer(f"so 4{c}2") is None


def test_canonical_chars() -> None:
    assert canonical_chars("a\u200bb\u2013c") == "ab-c"
    assert canonical_chars("x\u202ey") == "xy"
    assert canonical_chars("x\u202ey", keep_bidi=True) == "x\u202ey"
    assert canonical_chars("plain ascii") == "plain ascii"
    assert canonical_chars("caf\u00e9 \ud800") == "caf\u00e9 \ud800"  # other characters kept


@pytest.mark.parametrize(
    ("content", "placeholder"),
    [
        ("", True), ("  ", True), ("\\,\\;", True), ("$ $", True), ("{}", True), ("...", True),
        ("\\cdots", True), ("?", True), ("___", True), ("\\square", True), ("ANSWER", True),
        ("your answer", True), ("\\textbf{Final Answer}", True), (f"{B}{{}}", True),
        ("0", False), ("x", False), ("N", False), (".", False), ("answers", False),
        ("answer: 3", False), ("\\dotsb", False), (f"{B}{{3}}", False), ("\\text{yes}", False),
    ],
)
def test_is_placeholder_box(content: str, placeholder: bool) -> None:
    assert is_placeholder_box(content) is placeholder


def test_placeholder_skip_is_bounded() -> None:
    """At most 256 placeholder boxes after the answer are skipped; a placeholder is short."""
    assert extract_answer(f"{B}{{12}}" + f"{B}{{}}" * 256, strict=True) == "12"
    assert extract_answer(f"{B}{{12}}" + f"{B}{{}}" * 257, strict=True) is None
    assert extract_answer(f"{B}{{12}}" + f"{B}{{ answer}}" * 256) == "12"
    assert extract_answer(f"{B}{{12}}{B}{{" + " " * 300 + "}") is None  # too long: the final box


def test_gold_as_number() -> None:
    assert is_correct(f"{B}{{0.5}}", 0.5)
    assert is_correct(f"{B}{{-12}}", -12)
    assert not is_correct(f"{B}{{12}}", 13)
    with pytest.raises(TypeError):
        is_correct("1", True)  # type: ignore[arg-type]


def test_helpers() -> None:
    assert strip_think("<think>a</think>b") == "b"
    assert strip_think("plain") == "plain"
    assert has_boxed(f"x {B}{{1}}") and not has_boxed("x 1") and not has_boxed(f"{B}{{1")
    assert not has_boxed(f"<think>{B}{{1}}</think> 1")
    assert extract_boxed(f"{B}{{a{{b}}c}} {B}{{d") == "a{b}c"
    assert normalize_answer(" \\left( 3 \\right) ") == "(3)"
    assert parse_number("1,234.5") == 1234.5
    assert parse_number("1,23") is None
    assert parse_number("1/0") is None
    assert parse_number("abc") is None


def test_get_verifier() -> None:
    v = get_verifier("strict")
    assert isinstance(v, Verifier) and isinstance(v, VerifierLike)
    assert v.name == "strict" and v.strict
    assert get_verifier("default").name == "default"
    with pytest.raises(UnknownVerifierError, match="unknown verifier 'lenient'"):
        get_verifier("lenient")
    assert issubclass(UnknownVerifierError, ValueError)


@pytest.mark.skipif(importlib.util.find_spec("math_verify") is not None, reason="math-verify installed")
def test_math_verify_absent_gives_clear_error() -> None:
    with pytest.raises(VerifierUnavailableError, match="math-verify"):
        get_verifier("math_verify")


@pytest.mark.skipif(importlib.util.find_spec("math_verify") is None, reason="math-verify not installed")
def test_math_verify_backend() -> None:  # pragma: no cover - runs only where the extra is installed
    v = get_verifier("math_verify")
    assert isinstance(v, MathVerifyVerifier) and v.name == "math_verify"
    assert v(f"{B}{{\\frac{{1}}{{2}}}}", "0.5")
    assert not v(f"{B}{{3}}", "4")


def test_no_torch_import() -> None:
    code = "import sys, trainer.data.verifiers, trainer.data.problems; assert 'torch' not in sys.modules"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


# ---------------------------------------------------------------------------------------------
# Properties.
# ---------------------------------------------------------------------------------------------
_ALPHABET = st.sampled_from(list("0123456789{}\\-+.,/ $%#<>abcdefrxt") + ["\\boxed{", "\\frac{",
                                                                          "<think>", "</think>", "####"])
_TEXT = st.one_of(st.text(max_size=200), st.lists(_ALPHABET, max_size=80).map("".join))
_FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FAST
@given(text=_TEXT, gold=st.text(max_size=20))
def test_never_raises(text: str, gold: str) -> None:
    for strict in (False, True):
        a = extract_answer(text, strict=strict)
        assert a is None or isinstance(a, str)
        assert isinstance(is_correct(text, gold, strict=strict), bool)
    assert isinstance(has_boxed(text), bool)


@_FAST
@given(n=st.integers(min_value=-10**15, max_value=10**15), prefix=st.text(max_size=50),
       space=st.sampled_from(["", " "]))
@example(n=0, prefix="\u202a", space="")  # a left-to-right embedding before the box
def test_boxed_integer_round_trips(n: int, prefix: str, space: str) -> None:
    text = f"{prefix} so {B}{space}{{{n}}}"
    if _has_bidi_control(strip_think(canonical_chars(text, keep_bidi=True))):
        # shown in another order than it is read: refused, whatever the box holds
        assert extract_answer(text) is None and not is_correct(text, str(n))
        return
    assert extract_answer(text) == str(n)
    assert extract_answer(text, strict=True) == str(n)
    assert is_correct(text, str(n)) and is_correct(text, n)


@_FAST
@given(whole=st.integers(min_value=0, max_value=10**6), frac=st.integers(min_value=0, max_value=9999),
       neg=st.booleans())
def test_boxed_decimal_round_trips(whole: int, frac: int, neg: bool) -> None:
    s = f"{'-' if neg else ''}{whole}.{frac:04d}"
    assert extract_answer(f"{B}{{{s}}}") == s
    assert is_correct(f"{B}{{{s}}}", s)


@_FAST
@given(num=st.integers(min_value=-999, max_value=999), den=st.integers(min_value=1, max_value=999))
def test_fraction_value(num: int, den: int) -> None:
    assert is_correct(f"{B}{{\\frac{{{num}}}{{{den}}}}}", repr(num / den))
    assert is_correct(f"{B}{{{num}/{den}}}", f"\\dfrac{{{num}}}{{{den}}}")


@_FAST
@given(n=st.integers(min_value=0, max_value=10**12))
def test_thousands_commas(n: int) -> None:
    assert extract_answer(f"{B}{{{n:,}}}") == str(n)
    assert extract_answer(f"The total is {n:,} dollars.") == str(n)


_INVISIBLES = st.sampled_from(["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u2063"])


@_FAST
@given(n=st.integers(min_value=-10**9, max_value=10**9), data=st.data())
def test_invisible_characters_never_change_the_number(n: int, data: st.DataObject) -> None:
    digits = list(str(n))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        digits.insert(data.draw(st.integers(min_value=0, max_value=len(digits))), data.draw(_INVISIBLES))
    text = "".join(digits)
    assert extract_answer(f"{B}{{{text}}}", strict=True) == str(n)
    assert extract_answer(f"The answer is {text}.") == str(n)


_SEPARATORS = st.sampled_from([" ", "  ", "\\ ", "~", "\\,", "\\;", "\\quad ", ", ", ",", "; ", " and ",
                               "\\text{ and }", "\\text{ or }", "\\mbox{ and }", "\\text{ }", " \\text{or} "])


@_FAST
@given(nums=st.lists(st.integers(min_value=0, max_value=999), min_size=2, max_size=4), sep=_SEPARATORS)
def test_a_boxed_list_matches_no_single_number(nums: list[int], sep: str) -> None:
    # "5,100" and "5\\,100" are digit grouping (one number 5100), as documented
    assume(not (sep in (",", "\\,") and any(len(str(n)) == 3 for n in nums[1:])))
    text = f"{B}{{{sep.join(map(str, nums))}}}"
    for gold in {*map(str, nums), "".join(map(str, nums))}:
        assert not is_correct(text, gold), (text, gold)
        assert not is_correct(text, gold, strict=True), (text, gold)


_PLACEHOLDERS = st.sampled_from([f"{B}{{}}", f"{B}{{ }}", f"{B} {{}}", "\\fbox{}", f"{B}{{...}}",
                                 f"{B}{{answer}}", f"{B}{{\\text{{your answer}}}}", f"{B}{{{B}{{}}}}",
                                 f"{B}{{$\\,$}}"])


@_FAST
@given(n=st.integers(min_value=-10**6, max_value=10**6),
       echoes=st.lists(st.tuples(st.text(alphabet="abc .,\n", max_size=10), _PLACEHOLDERS),
                       min_size=1, max_size=5))
def test_echoed_placeholders_keep_the_answer(n: int, echoes: list[tuple[str, str]]) -> None:
    text = f"So {B}{{{n}}}" + "".join(filler + box for filler, box in echoes)
    assert extract_answer(text) == str(n)
    assert extract_answer(text, strict=True) == str(n)


def _final_box_by_scan(text: str) -> str | None:
    """extract_boxed's rule written as a plain scan, for comparison: each box word, spaces, an
    unescaped '{', its content up to the '}' that closes it (a brace after a backslash is literal);
    the last closed box that is not a placeholder, else the last closed box."""
    import re

    data = text.encode("utf-8", "surrogatepass")
    closed = []
    for m in re.finditer(rb"\\(?:boxed|fbox)[ \t\n\v\f\r]*\{", data):
        depth, i = 1, m.end()
        while i < len(data) and depth:
            if data[i] in b"{}" and data[i - 1:i] != b"\\":
                depth += 1 if data[i] == ord("{") else -1
            i += 1
        if depth == 0:
            closed.append(data[m.end():i - 1].decode("utf-8", "surrogatepass"))
    answers = [c for c in closed if not is_placeholder_box(c)]
    return answers[-1] if answers else closed[-1] if closed else None


_BOX_PIECES = st.sampled_from([B, "\\fbox", "\\box", "ed", "fbox", "{", "}", "\\{", "\\}", "\\", " ", "\n",
                               "\t", "x", "7", "...", "answer", "$", "\u00e9"])


@_FAST
@given(pieces=st.lists(_BOX_PIECES, max_size=16))
@example(pieces=["      ", "{", "7", "}", " ", B])  # a closed brace after spaces only: no box; a box word last
@example(pieces=[B, "{", B, "{", "}", "}"])  # a box holding only a placeholder box
@example(pieces=[B, " ", "{", "7", "}", "\\fbox", "{", "}"])
@example(pieces=[B, "\n", "\t", "{", "7", "}"])  # any ASCII whitespace between the word and its brace
def test_the_final_box_is_the_one_a_plain_scan_finds(pieces: list[str]) -> None:
    """The vectorized pass of extract_boxed against the same rule as a character scan."""
    text = "".join(pieces)
    assert extract_boxed(text) == _final_box_by_scan(text)


_PIECES = st.sampled_from(["1", "23", "456", ",", ".", "-", "/", "{", "}", "\\frac", "\\dfrac", " ",
                           "x", "a", "d", "\\", "(", "7,000", "\\frac{1}{2}", "12/5"])


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(_PIECES, min_size=0, max_size=400))
def test_windowed_last_number_equals_full_scan(pieces: list[str]) -> None:
    """The backwards-growing window finds the same last token as scanning everything."""
    from trainer.data.normalize import _TOKEN, _last_token, _token_text_value

    text = "".join(pieces) * 3  # long enough for the window to start mid-text
    matches = list(_TOKEN.finditer(text))
    full = matches[-1] if matches else None
    fast = _last_token(text)
    assert (None if full is None else _token_text_value(full)) == (
        None if fast is None else _token_text_value(fast))


def test_odd_characters() -> None:
    assert extract_answer(f"\ud800 {B}{{\ud800 5}} \x00") == "5"
    assert extract_answer("caf\u00e9 \u0663 7") == "7"  # only ASCII digits are digits


# ---------------------------------------------------------------------------------------------
# Adversarial inputs: each call must finish in well under a second; the bound is generous
# because CI machines are slow and shared. The default suite reads each input at a tenth of its
# named size (a backtracking or quadratic pass over 50k–500k characters still would not finish);
# the slow step reads them at full size.
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=2)
def adversarial(k: int = 1) -> dict[str, str]:
    """The adversarial inputs, each at 1/k of the size its name gives."""
    return {
        "5MB prose": "lorem ipsum " * (420_000 // k),
        "5MB numbers": "1 " * (2_500_000 // k),
        "5MB 1+1": "1+" * (2_500_000 // k),
        "1MB no boxes": "x" * (1_000_000 // k),
        "100k nested braces, closed": B + "{" + "{" * (100_000 // k) + "7" + "}" * (100_000 // k) + "}",
        "100k nested braces, unclosed": B + "{" + "{" * (100_000 // k) + "7",
        "1M digit run": "9" * (1_000_000 // k),
        "1M digit run boxed": B + "{" + "9" * (1_000_000 // k) + "}",
        "1M digits with commas": "1," * (500_000 // k),
        "700k box openings": (B + "{") * (700_000 // k),
        "600k spaced box openings": (B + " {") * (600_000 // k) + B + "{3}",
        "500k closed boxes": (B + "{1}") * (500_000 // k),
        "fraction openings": "\\frac{1}{" * (500_000 // k),
        "think openings": "<think>" * (500_000 // k),
        "#### runs": "####" * (1_000_000 // k),
        "text groups": (B + "{\\text{") * (300_000 // k) + "}",
        "minus run": "-" * (3_000_000 // k) + "5",
        "braces then box": "{}" * (2_000_000 // k) + B + "{4}",
        "dotted digits": "1." * (2_000_000 // k),
        "answer then 500k empty boxes": B + "{12}" + (B + "{}") * (500_000 // k),
        "answer then 300k placeholders": B + "{12}" + (B + "{ \\text{answer} }") * (300_000 // k),
        "250k nested placeholders": B + "{12}" + (B + "{" + B + "{}}") * (250_000 // k),
        "boxed spaced numbers": B + "{" + "1 " * (500_000 // k) + "}",
        "boxed 200k words between numbers": B + "{" + "5\\text{ and }" * (200_000 // k) + "7}",
        "boxed thin-space groups": B + "{1" + "\\,000" * (300_000 // k) + "}",
        "zero-width run": "4" + "\u200b" * (2_000_000 // k) + "2",
        "en-dash run": "\u2013" * (2_000_000 // k) + "5",
        "non-ASCII prose": "caf\u00e9 " * (800_000 // k) + B + "{3}",
        "bidi controls": "\u202e" * (1_000_000 // k) + "5",
    }


# a tenth of each size in the default suite, the full size in the slow step
SIZES = [pytest.param(10, id="tenth"), pytest.param(1, id="full", marks=pytest.mark.slow)]


@pytest.mark.parametrize("k", SIZES)
@pytest.mark.parametrize("name", list(adversarial(1000)))
def test_adversarial_inputs_finish(name: str, k: int) -> None:
    """Each multi-megabyte input is read to an answer or None (a backtracking pattern would not
    finish); the time against a linear pass over the text is measured by benchmarks/bench_guards.py."""
    text = adversarial(k)[name]
    for strict in (False, True):
        a = extract_answer(text, strict=strict)
        assert a is None or isinstance(a, str)
    assert isinstance(is_correct(text, "7"), bool) and isinstance(has_boxed(text), bool)


@pytest.mark.parametrize("k", SIZES)
def test_adversarial_answers(k: int) -> None:
    a = adversarial(k)
    assert extract_answer(a["100k nested braces, closed"]) == "7"
    assert extract_answer(a["100k nested braces, unclosed"], strict=True) is None
    assert extract_answer(a["1M digit run"]) == "9" * (1_000_000 // k)
    assert extract_answer(a["700k box openings"]) is None
    assert extract_answer(a["600k spaced box openings"], strict=True) == "3"
    assert extract_answer(a["braces then box"], strict=True) == "4"
    assert extract_answer(a["minus run"]) == "-5"
    assert 500_000 // k > 10 * _MAX_SKIPPED  # the empty boxes run past the skip bound at either size
    assert extract_answer(a["answer then 500k empty boxes"]) is None
    assert extract_answer(a["250k nested placeholders"], strict=True) is None
    assert extract_answer(a["boxed spaced numbers"]) == "1 " * (500_000 // k - 1) + "1"
    assert extract_answer(a["boxed 200k words between numbers"]) == "5and" * (200_000 // k) + "7"
    assert extract_answer(a["boxed thin-space groups"]) == "1" + "000" * (300_000 // k)
    assert extract_answer(a["zero-width run"]) == "42"
    assert extract_answer(a["en-dash run"]) == "-5"
    assert extract_answer(a["non-ASCII prose"], strict=True) == "3"
    assert extract_answer(a["bidi controls"]) is None


class _FakeMathVerify:
    """math-verify's thread behaviour without the package: with a timeout (its default) parse and
    verify use signal.alarm, so off the main thread they raise the ValueError math-verify raises."""

    MSG = ("Math-Verify 'parse' function doesn't support threaded environment due to usage of signal.alarm() in "
           "timeout mechanism.")

    def _alarm(self, timeout):
        import threading

        if timeout and threading.current_thread() is not threading.main_thread():
            raise ValueError(self.MSG)

    def parse(self, text, parsing_timeout=5):
        self._alarm(parsing_timeout)
        return [text.strip("$").replace("\\boxed{", "").rstrip("}").split()[-1]]

    def verify(self, gold, pred, timeout_seconds=5):
        self._alarm(timeout_seconds)
        return gold == pred


def _fake_verifier(fake=None) -> MathVerifyVerifier:
    v = MathVerifyVerifier.__new__(MathVerifyVerifier)
    v._mv = fake or _FakeMathVerify()
    return v


def test_math_verify_scores_a_correct_answer_correct_from_a_thread_pool() -> None:
    """The verifier once swallowed math-verify's refusal of a non-main thread and scored a correct
    answer wrong; from a pool it must agree with the main thread."""
    from concurrent.futures import ThreadPoolExecutor

    v = _fake_verifier()
    cases = [("so \\boxed{42}", "42", True), ("so \\boxed{41}", "42", False)] * 4
    main = [v(c, g) for c, g, _ in cases]
    with ThreadPoolExecutor(4) as pool:
        pooled = list(pool.map(lambda x: v(x[0], x[1]), cases))
    assert main == pooled == [want for _, _, want in cases]


def test_math_verify_never_takes_a_refused_thread_for_a_wrong_answer() -> None:
    """A math-verify whose refusal cannot be avoided (its timeouts always on) is an error, not 0."""
    from concurrent.futures import ThreadPoolExecutor

    class AlwaysAlarm(_FakeMathVerify):
        def parse(self, text, parsing_timeout=5):
            return super().parse(text, parsing_timeout=parsing_timeout or 5)

    v = _fake_verifier(AlwaysAlarm())
    assert v("so \\boxed{42}", "42") is True  # the main thread is fine
    with ThreadPoolExecutor(1) as pool, pytest.raises(VerifierUnavailableError, match="refused to run in thread"):
        pool.submit(v, "so \\boxed{42}", "42").result()


@pytest.mark.skipif(importlib.util.find_spec("math_verify") is None, reason="math-verify not installed")
def test_the_real_math_verify_from_a_thread_pool() -> None:  # pragma: no cover - runs only where the extra is installed
    from concurrent.futures import ThreadPoolExecutor

    v = get_verifier("math_verify")
    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(lambda g: v("The answer is $\\boxed{\\frac{1}{2}}$", g), ["0.5", "1/2", "3"])) == [True, True, False]
