"""Tests for trainer.verify: the case table, properties, and adversarial time bounds."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainer.verify import (
    MathVerifyVerifier,
    UnknownVerifierError,
    Verifier,
    VerifierLike,
    VerifierUnavailableError,
    extract_answer,
    extract_boxed,
    get_verifier,
    has_boxed,
    is_correct,
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
        (f"{B}{{\\{{1,2\\}}}}", "2"),  # escaped braces are literal
    ],
)
def test_extract_answer_canonical(text: str, answer: str | None) -> None:
    assert extract_answer(text) == answer


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
    code = "import sys, trainer.verify, trainer.data; assert 'torch' not in sys.modules"
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
    t = time.perf_counter()
    for strict in (False, True):
        a = extract_answer(text, strict=strict)
        assert a is None or isinstance(a, str)
        assert isinstance(is_correct(text, gold, strict=strict), bool)
    assert isinstance(has_boxed(text), bool)
    assert time.perf_counter() - t < 1.0


@_FAST
@given(n=st.integers(min_value=-10**15, max_value=10**15), prefix=st.text(max_size=50),
       space=st.sampled_from(["", " "]))
def test_boxed_integer_round_trips(n: int, prefix: str, space: str) -> None:
    text = f"{prefix} so {B}{space}{{{n}}}"
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


_PIECES = st.sampled_from(["1", "23", "456", ",", ".", "-", "/", "{", "}", "\\frac", "\\dfrac", " ",
                           "x", "a", "d", "\\", "(", "7,000", "\\frac{1}{2}", "12/5"])


@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(_PIECES, min_size=0, max_size=400))
def test_windowed_last_number_equals_full_scan(pieces: list[str]) -> None:
    """The backwards-growing window finds the same last token as scanning everything."""
    from trainer.verify import _TOKEN, _last_token, _token_text_value

    text = "".join(pieces) * 3  # long enough for the window to start mid-text
    full = None
    for full in _TOKEN.finditer(text):
        pass
    fast = _last_token(text)
    assert (None if full is None else _token_text_value(full)) == (
        None if fast is None else _token_text_value(fast))


def test_odd_characters() -> None:
    assert extract_answer(f"\ud800 {B}{{\ud800 5}} \x00") == "5"
    assert extract_answer("caf\u00e9 \u0663 7") == "7"  # only ASCII digits are digits


# ---------------------------------------------------------------------------------------------
# Adversarial inputs: each call must finish in well under a second; the bound is generous
# because CI machines are slow and shared.
# ---------------------------------------------------------------------------------------------
ADVERSARIAL = {
    "5MB prose": "lorem ipsum " * 420_000,
    "5MB numbers": "1 " * 2_500_000,
    "5MB 1+1": "1+" * 2_500_000,
    "1MB no boxes": "x" * 1_000_000,
    "100k nested braces, closed": B + "{" + "{" * 100_000 + "7" + "}" * 100_000 + "}",
    "100k nested braces, unclosed": B + "{" + "{" * 100_000 + "7",
    "1M digit run": "9" * 1_000_000,
    "1M digit run boxed": B + "{" + "9" * 1_000_000 + "}",
    "1M digits with commas": "1," * 500_000,
    "700k box openings": (B + "{") * 700_000,
    "600k spaced box openings": (B + " {") * 600_000 + B + "{3}",
    "500k closed boxes": (B + "{1}") * 500_000,
    "fraction openings": "\\frac{1}{" * 500_000,
    "think openings": "<think>" * 500_000,
    "#### runs": "####" * 1_000_000,
    "text groups": (B + "{\\text{") * 300_000 + "}",
    "minus run": "-" * 3_000_000 + "5",
    "braces then box": "{}" * 2_000_000 + B + "{4}",
    "dotted digits": "1." * 2_000_000,
}


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_adversarial_bounded_time(name: str) -> None:
    text = ADVERSARIAL[name]
    for strict in (False, True):
        t = time.perf_counter()
        extract_answer(text, strict=strict)
        assert time.perf_counter() - t < 2.0, f"{name}: extract_answer(strict={strict}) too slow"
    t = time.perf_counter()
    is_correct(text, "7")
    has_boxed(text)
    assert time.perf_counter() - t < 2.0


def test_adversarial_answers() -> None:
    assert extract_answer(ADVERSARIAL["100k nested braces, closed"]) == "7"
    assert extract_answer(ADVERSARIAL["100k nested braces, unclosed"], strict=True) is None
    assert extract_answer(ADVERSARIAL["1M digit run"]) == "9" * 1_000_000
    assert extract_answer(ADVERSARIAL["700k box openings"]) is None
    assert extract_answer(ADVERSARIAL["600k spaced box openings"], strict=True) == "3"
    assert extract_answer(ADVERSARIAL["braces then box"], strict=True) == "4"
    assert extract_answer(ADVERSARIAL["minus run"]) == "-5"
