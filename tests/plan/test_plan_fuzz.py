"""Property test of the plan loader: whatever the bytes, a plan loads or fails in one line per problem.

Inputs are mutations of valid plans (values replaced with nan/inf/huge integers/odd strings/wrong
types/nested values, keys deleted, added or renamed; at the text level truncation, random bytes,
duplicated or deleted lines, deep nesting, unicode) and random TOML documents. In process, every
input either validates (and then everything that reads a plan works on it: canonical JSON, run
lengths, reading points) or raises :class:`PlanError` with non-empty one-line messages. Through the
CLI, ``prereg lock`` exits 0 or 2 and an invalid plan makes every command that loads it exit 2,
with no exception escaping. Deterministic (``derandomize``, no example database).
"""

from __future__ import annotations

import copy
import datetime as dt
import math
import os
import shutil
import tempfile
import tomllib
from collections import Counter
from importlib import resources
from pathlib import Path

import tomli_w
import typer.main
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plans import SMALL_PLAN

from prereg_kit.cli import app
from prereg_kit.errors import PlanError
from prereg_kit.plan import MAX_DEPTH, Plan, parse_toml, validate_plan
from prereg_kit.plan.canonical import canonical_json, content_hash
from prereg_kit.runlog import run_dir

TEMPLATE = (resources.files("prereg_kit") / "templates" / "plan.toml").read_text()
BASES = [SMALL_PLAN, TEMPLATE]
BASE_DATA = [tomllib.loads(t) for t in BASES]

FUZZ = settings(derandomize=True, database=None, deadline=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _paths(node, path=()):
    if path:
        yield path
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        yield from _paths(v, path + (k,))


PATHS = [(b, p) for b, data in enumerate(BASE_DATA) for p in _paths(data)]

ODD_STRINGS = [
    "", " ", "../../x", "/etc/passwd", "C:\\x", "a/b", ".hidden", "..", "a..b", "x" * 81, "é", "名前", "\u202e",
    "a\nb", "a\x00b", "[red]x[/red]", "[/red]", "0-999999999", "0-99999", "0-9", "99999999999999999999-1", "5-4",
    "B/0", "B/-1", "B/16", "9" * 400 + "M", "1e400", "12.25M", "nan", "inf", "-B", "0B", "2B", "1e3B",
    "9" * 400 + "B", "time", "control-time", "updates", "primary", "holm", "pass@0", "pass@4", "x_rate",
    "relative_accuracy", "collapse", "A", "B", "C1", "main", "smoke",
]
FREE_TEXT = {"title", "question", "description", "statement", "prediction", "source", "model", "gain", "deficit",
             "inconclusive", "equivalent"}  # text keys: markup, newlines and unicode must print as text

EXTREMES = [math.nan, math.inf, -math.inf, 2**63, -(2**63) - 1, 10**30, 2**63 - 1, -(2**63), -1, 0, 1, 1e308,
            -0.0, 5e-324, 0.5, 2.0, True, False]
scalars = st.one_of(
    st.sampled_from(EXTREMES), st.sampled_from(ODD_STRINGS), st.integers(), st.floats(), st.text(max_size=20),
    st.booleans(), st.datetimes(min_value=dt.datetime(1, 1, 1)), st.dates(),
)
keys = st.one_of(st.sampled_from(ODD_STRINGS), st.text(max_size=8),
                 st.sampled_from(["id", "seeds", "margin", "tier", "at", "first", "last", "name"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
                      max_leaves=10)


@st.composite
def data_mutations(draw, ops=("replace", "replace", "plausible", "delete", "add", "rename")) -> bytes:
    """A valid plan with one to three edits of its parsed tables, written back as TOML."""
    base = draw(st.integers(0, len(BASES) - 1))
    data = copy.deepcopy(BASE_DATA[base])
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from([p for b, p in PATHS if b == base]))
        parent = data
        try:
            for k in path[:-1]:
                parent = parent[k]
            parent[path[-1]]
        except (KeyError, IndexError, TypeError):  # an earlier edit removed or replaced it
            continue
        key, op = path[-1], draw(st.sampled_from(ops))
        if op == "replace":
            parent[key] = draw(values)
        elif op == "plausible":  # a value of the same type, so that more mutants stay valid
            old = parent[key]
            parent[key] = (draw(st.booleans()) if isinstance(old, bool) else draw(st.integers(1, 64)) if isinstance(old, int)
                           else draw(st.floats(0.001, 0.999)) if isinstance(old, float)
                           else draw(st.text(max_size=30) | st.sampled_from(ODD_STRINGS)) if key in FREE_TEXT
                           else old)
        elif op == "delete":
            del parent[key]
        elif op == "add" and isinstance(parent, dict):
            parent[draw(keys)] = draw(values)
        elif op == "add":
            parent.append(draw(values))
        elif isinstance(parent, dict):  # rename
            parent[draw(keys)] = parent.pop(key)
    return tomli_w.dumps(data).encode("utf-8")


DEEP = {
    "array": lambda n: "x = " + "[" * n + "]" * n,
    "inline": lambda n: "x = " + "{a=" * n + "1" + "}" * n,
    "dotted": lambda n: "x" + ".a" * n + " = 1",
    "header": lambda n: "[" + ".".join(["t"] * n) + "]",
    "open": lambda n: "x = " + "[" * n,
}
RAW_VALUES = ["nan", "+nan", "-inf", "inf", "99999999999999999999", "-99999999999999999999", "1e999", "0x7FFFFFFFFFFFFFFF",
              '"0-999999999"', '"0-99999"', '"../../x"', '"B/0"', "[", "{", '"""', "'''", "1979-05-27T07:32:00Z",
              "[1, 2", "{ first = 0, last = 999999999 }", '"\\u0000"', "true", "[nan, inf]", "{ a = nan }", ""]


@st.composite
def text_mutations(draw) -> bytes:
    """A valid plan with one edit of its bytes."""
    raw = draw(st.sampled_from(BASES)).encode("utf-8")
    lines = raw.splitlines(keepends=True)
    at = draw(st.integers(0, len(raw)))
    line = draw(st.integers(0, len(lines) - 1))
    op = draw(st.sampled_from(["truncate", "insert", "flip", "dup", "drop", "deep", "value", "unicode"]))
    if op == "truncate":
        return raw[:at]
    if op == "insert":
        return raw[:at] + draw(st.binary(min_size=1, max_size=8)) + raw[at:]
    if op == "flip":
        return raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1:]
    if op == "dup":
        return b"".join(lines[: line + 1] + [lines[line]] + lines[line + 1:])
    if op == "drop":
        return b"".join(lines[:line] + lines[line + 1:])
    if op == "deep":
        n = draw(st.sampled_from([MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 500, 5000]))
        deep = DEEP[draw(st.sampled_from(sorted(DEEP)))](n)
        return b"".join(lines[:line] + [deep.encode() + b"\n"] + lines[line:])
    if op == "value":  # the right-hand side of a key line
        keyed = [i for i, ln in enumerate(lines) if b" = " in ln and not ln.lstrip().startswith(b"#")]
        i = keyed[line % len(keyed)]
        k = lines[i].split(b" = ", 1)[0]
        return b"".join(lines[:i] + [k + b" = " + draw(st.sampled_from(RAW_VALUES)).encode() + b"\n"] + lines[i + 1:])
    return raw[:at] + draw(st.text(min_size=1, max_size=4)).encode("utf-8") + raw[at:]


random_documents = st.one_of(
    st.dictionaries(keys, values, max_size=6).map(lambda d: tomli_w.dumps(d).encode("utf-8")),
    st.binary(max_size=200),
    st.text(max_size=200).map(lambda t: t.encode("utf-8")),
)
plan_bytes = st.one_of(data_mutations(), data_mutations(), text_mutations(), text_mutations(), random_documents)


def _load(raw: bytes) -> Plan | PlanError:
    """The loader's verdict on ``raw``; anything but a plan or a well-formed PlanError fails the test."""
    try:
        data = parse_toml(raw, source="fuzz.toml")
        plan = validate_plan(data, source="fuzz.toml", text=raw.decode("utf-8"))
    except PlanError as e:
        assert e.exit_code == 2 and e.lines, e.lines
        for ln in e.lines:
            assert ln.startswith("fuzz.toml") and ln.strip() and "\n" not in ln and "\r" not in ln, ln
            assert len(ln) < 3000, ln[:200]
        return e
    # a valid plan: what lock, run and analyze read from it must work
    content_hash(data)
    canonical_json(data)
    plan.budget.eval_interval_tokens()
    for stage in plan.stages:
        plan.seeds_for(stage.name)
        for name in plan.configurations_for(stage.name):
            assert math.isfinite(plan.train_to(name, stage.name))
    for name in plan.configurations:
        plan.resolved_config(name)
        d = run_dir(STUDY, name, 0)  # the run folder stays inside runs/, whatever the name
        assert d.parent.parent == STUDY / "runs" and os.path.normpath(d) == str(d), name
    for c in plan.contrasts:
        plan.margin_of(c)
        plan.family_of(c.id)
        str(c.reading_point)
    return plan


STUDY = Path("/study")
OUTCOMES: Counter = Counter()


@settings(FUZZ, max_examples=400)
@given(plan_bytes)
def _fuzz_loader(raw: bytes) -> None:
    OUTCOMES["valid" if isinstance(_load(raw), Plan) else "invalid"] += 1


def test_fuzz_loader_valid_or_one_line_errors():
    OUTCOMES.clear()
    _fuzz_loader()
    print(f"\n[fuzz loader] {sum(OUTCOMES.values())} examples: {dict(OUTCOMES)}")
    assert OUTCOMES["valid"] >= 10 and OUTCOMES["invalid"] >= 100, OUTCOMES  # both paths exercised


runner = CliRunner()
COMMAND = typer.main.get_command(app)  # built once: typer rebuilds it on every invoke of the app


def _cli(*args) -> tuple[int, str]:
    res = runner.invoke(COMMAND, [str(a) for a in args])
    assert res.exception is None or isinstance(res.exception, SystemExit), f"{args[0]}: {res.exception!r}"
    assert "Traceback" not in res.output and "internal error" not in res.output, res.output
    return res.exit_code, res.output


CLI_OUTCOMES: Counter = Counter()
LOCKED: list[Path] = []  # a study folder holding SMALL_PLAN and its plan.lock


@settings(FUZZ, max_examples=50)
@given(st.one_of(data_mutations(ops=("plausible",)), plan_bytes))
def _fuzz_cli(raw: bytes) -> None:
    expected = _load(raw)
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "fresh"
        fresh.mkdir()
        (fresh / "plan.toml").write_bytes(raw)
        code, out = _cli("lock", fresh)
        if isinstance(expected, PlanError):
            assert code == 2 and sum(ln.startswith("error:") for ln in out.splitlines()) == len(expected.lines), out
            assert not (fresh / "plan.lock").exists()
            CLI_OUTCOMES["invalid"] += 1
        else:
            assert code == 0 and (fresh / "plan.lock").exists(), out
            assert _cli("verify", fresh)[0] == 0
            CLI_OUTCOMES["valid"] += 1
            return  # dry-run and analyze of a valid plan simulate and bootstrap: too slow for a fuzz
        # an invalid edit of a locked plan: every command that loads it says so (exit 2)
        study = Path(tmp) / "study"
        shutil.copytree(LOCKED[0], study)
        (study / "plan.toml").write_bytes(raw)
        for args in (("verify", study), ("amend", study, "-r", "edit"), ("analyze", study),
                     ("dry-run", study, "--out", Path(tmp) / "dry")):
            code, out = _cli(*args)
            assert code == 2, (args[0], code, out)


def test_fuzz_cli_exit_0_or_2_without_traceback(tmp_path):
    CLI_OUTCOMES.clear()
    LOCKED[:] = [tmp_path / "locked"]  # locked once: each example edits a copy
    LOCKED[0].mkdir()
    (LOCKED[0] / "plan.toml").write_text(SMALL_PLAN)
    assert _cli("lock", LOCKED[0])[0] == 0
    _fuzz_cli()
    print(f"\n[fuzz cli] {sum(CLI_OUTCOMES.values())} examples: {dict(CLI_OUTCOMES)}")
    assert CLI_OUTCOMES["valid"] >= 3 and CLI_OUTCOMES["invalid"] >= 20, CLI_OUTCOMES
