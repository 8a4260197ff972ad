"""The plan loader's limits: size, nesting, finite numbers, 64-bit integers, seeds, safe names.

Each hostile plan must end in one line per problem (exit 2) in the library and in every command
that loads a plan, never a traceback.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest
import typer.main
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from plans import SMALL_PLAN

from prereg_kit.cli import app
from prereg_kit.cli import base as cli_base
from prereg_kit.errors import PlanError
from prereg_kit.plan import (
    MAX_DEPTH,
    MAX_NAME,
    MAX_PLAN_BYTES,
    MAX_SEEDS,
    check_name,
    load_plan,
    parse_toml,
    validate_plan,
)
from prereg_kit.runlog import run_dir

runner = CliRunner()
COMMAND = typer.main.get_command(app)  # built once: typer rebuilds it on every invoke of the app


def _errors(text: str, source: str = "plan.toml") -> list[str]:
    """The lines of the PlanError that loading ``text`` raises (parse and validate, as load_plan)."""
    with pytest.raises(PlanError) as ei:
        validate_plan(parse_toml(text.encode("utf-8"), source=source), source=source, text=text)
    assert ei.value.exit_code == 2
    lines = ei.value.lines
    assert lines and all(ln and "\n" not in ln and "\r" not in ln for ln in lines), lines
    return lines


def _line_of(text: str, marker: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if marker in ln)


def _loads(text: str):
    return validate_plan(parse_toml(text.encode("utf-8")), text=text)


# --------------------------------------------------------------------------- finite numbers


NONFINITE = {
    "recipe value": ("group_size = 8", "group_size = nan", "recipe.group_size"),
    "recipe inf": ("group_size = 8", "group_size = -inf", "recipe.group_size"),
    "nested override": ("overrides = { learning_rate = 2e-6 }", "overrides = { learning_rate = inf }",
                        "configurations.B.overrides.learning_rate"),
    "in an array": ("learning_rate = 1e-6", "learning_rate = [1e-6, +inf]", "recipe.learning_rate[1]"),
    "contrast margin": ("margin = 0.02", "margin = nan", "contrasts[1].margin"),
    "asymmetric margin": ("margin = 0.02", "margin = [-0.02, inf]", "contrasts[1].margin[1]"),
    "time budget": ('eval_every = "B/16"', 'eval_every = "B/16"\ntime_hours = inf', "budget.time_hours"),
}


@pytest.mark.parametrize("name", list(NONFINITE))
def test_nan_and_inf_name_key_and_line(name):
    old, new, key = NONFINITE[name]
    assert old in SMALL_PLAN
    text = SMALL_PLAN.replace(old, new, 1)
    lines = _errors(text)
    assert len(lines) == 1, lines
    marker = new.splitlines()[-1]
    assert lines[0].startswith(f"plan.toml:{_line_of(text, marker)}: {key}: "), lines
    assert "not a finite number" in lines[0]


def test_every_nonfinite_value_is_reported():
    text = SMALL_PLAN.replace("group_size = 8", "group_size = nan\nx = inf\ny = [1.0, -inf]")
    lines = _errors(text)
    assert [ln.split(": ")[1] for ln in lines] == ["recipe.group_size", "recipe.x", "recipe.y[1]"]


def test_nan_never_reaches_the_lock(tmp_path):
    """Before: nan passed validation and `prereg lock` crashed in canonical JSON (exit 1, traceback)."""
    p = tmp_path / "plan.toml"
    p.write_text(SMALL_PLAN.replace("group_size = 8", "group_size = nan"))
    res = _cli("lock", p, code=2)
    assert len(_error_lines(res)) == 1 and "recipe.group_size" in res.output
    assert not (tmp_path / "plan.lock").exists()


def test_integers_are_64_bit():
    for value in ("9223372036854775808", "-9223372036854775809", "1" + "0" * 30):
        lines = _errors(SMALL_PLAN.replace("group_size = 8", f"group_size = {value}"))
        assert len(lines) == 1 and ": recipe.group_size: " in lines[0] and "64-bit" in lines[0], lines
    assert _loads(SMALL_PLAN.replace("group_size = 8", "group_size = 9223372036854775807")).recipe["group_size"] == 2**63 - 1


def test_validate_plan_checks_parsed_data_too():
    """validate_plan on data that did not come from a file (the dry run, tests) refuses nan as well."""
    data = tomllib.loads(SMALL_PLAN)
    data["statistics"] = {"alpha": float("nan")}
    with pytest.raises(PlanError, match=r"^plan: statistics.alpha: nan is not a finite number"):
        validate_plan(data)


# --------------------------------------------------------------------------- numbers inside strings


@pytest.mark.parametrize("old,new,key,words", [
    ('tokens = "1M"', 'tokens = "' + "9" * 400 + 'M"', "budget.tokens", "below 2^63"),
    ('tokens = "1M"', "tokens = 9223372036854775807", None, None),
    ('eval_every = "B/16"', 'eval_every = "B/0"', "budget.eval_every", "B/n needs n from 1"),
    ('eval_every = "B/16"', 'eval_every = "B/' + "9" * 5000 + '"', "budget.eval_every", "token count"),
    ('at = "time"', 'at = "' + "9" * 400 + 'B"', "contrasts[1].at", "reading point"),
    ('eval_every = "B/16"', 'eval_every = "B/16"\ntrain_to = "' + "9" * 400 + 'B"', "budget.train_to", "at most"),
])
def test_numbers_in_strings_are_bounded(old, new, key, words):
    """Before: "999…9M" overflowed float→int (a traceback), "B/0" divided by zero at analysis time."""
    text = SMALL_PLAN.replace(old, new, 1)
    if key is None:
        assert _loads(text).budget.tokens == 2**63 - 1
        return
    lines = _errors(text)
    hit = [ln for ln in lines if f": {key}: " in ln]
    assert hit and words in hit[0] and len(hit[0]) < 400, lines


# --------------------------------------------------------------------------- nesting


def _deep(kind: str, n: int) -> str:
    return {"array": "x = " + "[" * n + "]" * n,
            "inline": "x = " + "{ a = " * n + "1" + " }" * n,
            "mixed": "x = " + "[{ a = " * (n // 2) + "1" + "}]" * (n // 2),
            "dotted": "x" + ".a" * n + " = 1",
            "header": "[" + ".".join(["t"] * n) + "]\nq = 1",
            "array header": "[[" + ".".join(["t"] * n) + "]]\nq = 1"}[kind]


@pytest.mark.parametrize("kind", ["array", "inline", "mixed", "dotted", "header", "array header"])
@pytest.mark.parametrize("n", [500, 100_000])
def test_deep_nesting_is_one_line_not_recursion(kind, n):
    """Before: 500 levels gave RecursionError; dotted keys took time quadratic in their length."""
    text = SMALL_PLAN.replace("group_size = 8", "group_size = 8\n" + _deep(kind, n))
    lines = _errors(text)
    assert len(lines) == 1 and lines[0].startswith(f"plan.toml:{_line_of(text, _deep(kind, n)[:12])}: "), lines
    assert f"more than {MAX_DEPTH}" in lines[0] or f"more than {MAX_DEPTH + 1} parts" in lines[0]


@pytest.mark.parametrize("kind", ["array", "inline", "dotted"])
def test_nesting_limit_is_exact(kind):
    """MAX_DEPTH tables/arrays inside one another parse; one more is refused (checked on the parse only:
    the schema has no deep keys at top level)."""
    parse_toml(_deep(kind, MAX_DEPTH).encode())
    too = _deep(kind, MAX_DEPTH + 1)
    with pytest.raises(PlanError, match="nested more than|parts"):
        parse_toml(too.encode())


# Text that must not count as nesting (inside strings and comments), and text crafted to make the
# pre-scan lose track of a string so that real nesting after it goes unseen.
HIDDEN = {
    "basic string": 'note = "' + "[" * 1000 + '"',
    "literal string": "note = '" + "{" * 1000 + "'",
    "multi-line basic": 'note = """\n' + "[" * 1000 + '\n"""',
    "multi-line literal": "note = '''\n" + "[" * 1000 + "\n'''",
    "comment": "# " + "[" * 1000,
    "dots in a string": 'note = "' + "a." * 1000 + '"',
    "dots in a comment": "# " + "a." * 1000,
    "floats": "fs = [" + ", ".join(["1.5"] * 2000) + "]",
}
BYPASS = {
    "escaped quote": 'note = "a\\"["',
    "escaped backslash": 'note = "a\\\\"',
    "backslash in a literal": "note = 'C:\\'",
    "quotes ending a multi-line": 'note = """a""""',
    "quote in a comment": '# a " quote',
    "triple quote in a comment": "# '''",
    "crlf": "note = 'x'\r",
    "quoted dotted key": '"a"."b" = 1',
}


@pytest.mark.parametrize("name", list(HIDDEN))
def test_brackets_in_strings_and_comments_are_not_nesting(name):
    text = SMALL_PLAN.replace("group_size = 8", "group_size = 8\n" + HIDDEN[name])
    assert _loads(text).recipe["group_size"] == 8


@pytest.mark.parametrize("name", list(BYPASS))
def test_strings_cannot_hide_nesting_after_them(name):
    text = SMALL_PLAN.replace("group_size = 8", "group_size = 8\n" + BYPASS[name] + "\ndeep = " + "[" * 600 + "]" * 600)
    data = tomllib.loads(text.replace("[" * 600 + "]" * 600, "1"))  # the prefix is valid TOML
    assert data["recipe"]["deep"] == 1
    lines = _errors(text)
    assert len(lines) == 1 and "nested more than" in lines[0] and f":{_line_of(text, 'deep = ')}:" in lines[0], lines


# --------------------------------------------------------------------------- size


def test_file_size_is_bounded(tmp_path):
    p = tmp_path / "plan.toml"
    pad = "\n# " + "x" * (MAX_PLAN_BYTES - len(SMALL_PLAN.encode()) - 4)
    p.write_text(SMALL_PLAN + pad)
    assert p.stat().st_size == MAX_PLAN_BYTES - 1
    assert load_plan(p).plan.study.id == "t1"
    p.write_text(SMALL_PLAN + pad + "xx")
    with pytest.raises(PlanError, match=rf"^{re.escape(str(p))}: larger than {MAX_PLAN_BYTES} bytes"):
        load_plan(p)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_endless_file_is_not_read_to_the_end():
    res = _cli("lock", "/dev/zero", code=2)  # an endless read would never return
    assert "larger than" in res.output


# --------------------------------------------------------------------------- seeds


def test_huge_seed_range_is_refused_without_expanding_it():
    """Before: "0-999999999" raised MemoryError."""
    lines = _errors(SMALL_PLAN.replace("seeds = [0, 1, 2]", 'seeds = "0-999999999"'))
    assert len(lines) == 1 and ": study.seeds: " in lines[0] and f"at most {MAX_SEEDS}" in lines[0]


def test_seed_range_100k_is_refused_and_the_maximum_loads():
    """Before: "0-99999" took 110 s (a quadratic duplicate check); the times against a plain
    load of the plan are measured by benchmarks/bench_guards.py."""
    text = SMALL_PLAN.replace("seeds = [0, 1, 2]", 'seeds = "0-99999"')
    lines = _errors(text)
    assert "100000 seeds" in lines[0]
    big = f"[{', '.join(map(str, range(MAX_SEEDS)))}]"
    assert len(_loads(SMALL_PLAN.replace("seeds = [0, 1, 2]", f'seeds = "0-{MAX_SEEDS - 1}"')).study.seeds) == MAX_SEEDS
    assert len(_loads(SMALL_PLAN.replace("seeds = [0, 1, 2]", f"seeds = {big}")).study.seeds) == MAX_SEEDS


@pytest.mark.parametrize("form,words", [
    (f'"0-{MAX_SEEDS}"', f"holds {MAX_SEEDS + 1} seeds"),
    ("{ first = 0, last = 9223372036854775807 }", f"at most {MAX_SEEDS}"),
    ('"0-' + "9" * 30 + '"', "expected a list of seeds"),
    (f"[{', '.join(map(str, range(MAX_SEEDS + 1)))}]", f"{MAX_SEEDS + 1} seeds"),
    (f"[{', '.join(map(str, range(MAX_SEEDS - 2)))}, 7, 5]", "duplicate seeds: 5, 7"),
    ('"5-4"', "last >= first"),
], ids=["range over the maximum", "table over the maximum", "30 digits", "list over the maximum", "duplicates",
        "reversed"])
def test_seed_bounds(form, words):
    lines = _errors(SMALL_PLAN.replace("seeds = [0, 1, 2]", f"seeds = {form}"))
    assert len(lines) == 1 and ": study.seeds: " in lines[0] and words in lines[0], lines


def test_stage_seeds_are_bounded_too():
    text = SMALL_PLAN + '\n[[stages]]\nname = "main"\nseeds = "0-123456"\n'
    lines = _errors(text)
    assert len(lines) == 1 and ": stages[0].seeds: " in lines[0] and "123457 seeds" in lines[0], lines


# --------------------------------------------------------------------------- names


BAD_NAMES = {
    "../../x": "contains '/'",
    "/etc": "contains '/'",
    "a/b": "contains '/'",
    "a\\\\b": "contains '\\\\'",
    ".hidden": "starts with '.'",
    "..": "starts with '.'",
    "a..b": "contains '..'",
    "": "is empty",
    "x" * (MAX_NAME + 1): f"is {MAX_NAME + 1} characters long",
    "a b": "contains ' '",
    "é": "contains 'é'",
    "a\\u0000b": "contains '\\x00'",
    "-x": "starts with '-'",
}


@pytest.mark.parametrize("name", list(BAD_NAMES))
def test_unsafe_configuration_names_are_refused(name):
    """Configuration names build run folders: runs/<configuration>/seed-<n>."""
    text = SMALL_PLAN.replace("[configurations.B]", f'[configurations."{name}"]')
    lines = _errors(text)
    hit = [ln for ln in lines if ": configurations." in ln]
    assert len(hit) == 1, lines
    header = f'[configurations."{name}"]'  # escaped keys too: the line is found after decoding
    assert hit[0].startswith(f"plan.toml:{_line_of(text, header)}: "), hit
    assert "is not a safe name" in hit[0] and BAD_NAMES[name] in hit[0] and "without '..'" in hit[0], hit


@pytest.mark.parametrize("old,new,key", [
    ('id = "t1"', 'id = "../t1"', "study.id"),
    ('id = "C1"', 'id = "C/1"', "contrasts[0].id"),
    ('name = "test"', 'name = ".test"', "evaluation.sets[0].name"),
    ('name = "primary"', 'name = "a..b"', "families[0].name"),
    ('id = "H1"', 'id = "H 1"', "hypotheses[0].id"),
])
def test_other_names_follow_the_same_rule(old, new, key):
    lines = _errors(SMALL_PLAN.replace(old, new, 1))
    assert any(f": {key}: " in ln and "is not a safe name" in ln for ln in lines), lines


def test_safe_names_load():
    text = SMALL_PLAN.replace("[configurations.B]", '[configurations."mc_k4.v2+x-1"]').replace('"B"', '"mc_k4.v2+x-1"')
    assert "mc_k4.v2+x-1" in _loads(text).configurations


def test_names_differing_only_in_case_are_refused():
    text = SMALL_PLAN.replace("[configurations.B]", "[configurations.a]\n[configurations.B]")
    lines = _errors(text)
    assert len(lines) == 1 and ": configurations.a: " in lines[0] and "only in case" in lines[0], lines


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(st.text(max_size=12))
def test_an_accepted_name_never_leaves_the_runs_folder(name):
    try:
        check_name(name)
    except ValueError as e:
        assert "\n" not in str(e) and "is not a safe name" in str(e)
        return
    base = Path("/study")
    d = run_dir(base, name, 0)
    assert d.parent.parent == base / "runs" and d.parent.name == name and os.sep not in name
    assert os.path.normpath(d) == str(d)  # no '.' or '..' component


def test_error_location_keeps_keys_that_look_like_type_tags():
    """pydantic's location mixes in tags such as 'int' and 'list'; a configuration so named keeps its key."""
    text = SMALL_PLAN.replace("[configurations.B]", '[configurations.int]\ncolour = 1\n[configurations.B]')
    lines = _errors(text)
    assert any(": configurations.int.colour: unknown key" in ln for ln in lines), lines


# --------------------------------------------------------------------------- through the commands


def _cli(*args, code: int, env: dict | None = None):
    res = runner.invoke(COMMAND, [str(a) for a in args], env=env)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == code, (res.exit_code, res.output)
    assert "Traceback" not in res.output
    return res


def _error_lines(res) -> list[str]:
    lines = res.output.splitlines()
    assert "internal error" not in res.output
    return [ln for ln in lines if ln.startswith("error:")]


HOSTILE = {
    "nan": SMALL_PLAN.replace("group_size = 8", "group_size = nan"),
    "deep": SMALL_PLAN.replace("group_size = 8", "group_size = " + "[" * 600 + "]" * 600),
    "dotted": SMALL_PLAN.replace("group_size = 8", "group_size" + ".a" * 5000 + " = 1"),
    "seeds": SMALL_PLAN.replace("seeds = [0, 1, 2]", 'seeds = "0-999999999"'),
    "path name": SMALL_PLAN.replace("[configurations.B]", '[configurations."../../x"]').replace('"B"', '"../../x"'),
    "B/0": SMALL_PLAN.replace('eval_every = "B/16"', 'eval_every = "B/0"'),
    "tokens overflow": SMALL_PLAN.replace('tokens = "1M"', 'tokens = "' + "9" * 400 + 'M"'),
    "markup": SMALL_PLAN.replace('comparator = "A"', 'comparator = "[/red]"'),
    "syntax": SMALL_PLAN.replace("group_size = 8", "group_size = "),
    "not utf-8": SMALL_PLAN.replace("group_size = 8", "group_size = '\udcff'"),
}


def _write(path: Path, text: str) -> None:
    path.write_bytes(text.encode("utf-8", errors="surrogateescape"))


@pytest.mark.parametrize("name", list(HOSTILE))
def test_every_command_that_loads_a_plan_exits_2_with_one_line_per_problem(name, tmp_path):
    text = HOSTILE[name]
    study = tmp_path / "s"
    study.mkdir()
    plan = study / "plan.toml"
    with pytest.raises(PlanError) as ei:  # what the library says, line for line
        _write(plan, text)
        load_plan(plan)
    expected = ei.value.lines
    assert len(expected) == 1 or name == "path name", expected

    res = _cli("lock", plan, code=2)
    assert len(_error_lines(res)) == len(expected) and not (study / "plan.lock").exists()
    assert expected[0].split(": ")[-1][:40] in res.output.replace("\n", "")  # markup is printed literally
    _cli("dry-run", plan, "--out", tmp_path / "dry", code=2)
    # locked while valid, then edited: verify, amend and analyze report the plan as unusable (2)
    plan.write_text(SMALL_PLAN)
    _cli("lock", plan, code=0)
    _write(plan, text)
    for args in (("verify", study), ("amend", plan, "--reason", "edit"), ("analyze", study)):
        res = _cli(*args, code=2)
        assert set(expected) <= {ln.removeprefix("error: ").removesuffix(" (preregistration check failed)")
                                 for ln in _error_lines(res)}, res.output


def test_verify_reports_an_invalid_edit_as_unusable_not_only_changed(tmp_path):
    """A plan changed after locking *and* invalid: the change is listed and the exit code is 2."""
    plan = tmp_path / "plan.toml"
    plan.write_text(SMALL_PLAN)
    _cli("lock", plan, code=0)
    plan.write_text(SMALL_PLAN.replace("margin = 0.02", "margin = -1.0"))
    res = _cli("verify", plan, code=2)
    assert "violation:" in res.output and "contrasts[1].margin: 0.02 → -1.0" in res.output
    assert any("contrasts[1].margin: a margin must be > 0" in ln for ln in _error_lines(res))


# --------------------------------------------------------------------------- the last line of defence


def test_unexpected_exception_is_one_line_exit_3(monkeypatch, tmp_path):
    import prereg_kit.chain.lock

    def broken(*a, **k):
        raise ValueError("boom\nsecond line")

    monkeypatch.setattr(prereg_kit.chain.lock, "lock_plan", broken)
    res = _cli("lock", tmp_path, code=cli_base.INTERNAL_ERROR)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: internal error in prereg-kit: ValueError: boom second line (a bug;")
    res = runner.invoke(COMMAND, ["lock", str(tmp_path)], env={cli_base.TRACEBACK_ENV: "1"})
    assert isinstance(res.exception, ValueError)  # on request, the real exception (and its traceback)


@pytest.mark.parametrize("exc", [MemoryError, RecursionError])
def test_exhausted_memory_or_stack_is_unusable_input(monkeypatch, tmp_path, exc):
    import prereg_kit.chain.lock

    def broken(*a, **k):
        raise exc()

    monkeypatch.setattr(prereg_kit.chain.lock, "lock_plan", broken)
    res = _cli("lock", tmp_path, code=2)
    assert "too large or nested too deep" in res.output and len(res.output.strip().splitlines()) == 1


def test_exit_codes_of_commands_pass_through(tmp_path):
    """The catch-all must not swallow a command's own typer.Exit (verify exits 1 on a violation)."""
    plan = tmp_path / "plan.toml"
    plan.write_text(SMALL_PLAN)
    _cli("lock", plan, code=0)
    plan.write_text(SMALL_PLAN.replace("margin = 0.02", "margin = 0.03"))
    assert _cli("verify", plan, code=1).exit_code == 1
