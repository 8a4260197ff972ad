"""Plan files: parse, validate, round trip, and one clear line per error."""

from __future__ import annotations

import tomllib
from importlib import resources

import pytest
import tomli_w
from plans import SMALL_PLAN

from prereg_kit.errors import PlanError
from prereg_kit.plan import ReadingPoint, load_plan, parse_multiple, parse_reading_point, parse_tokens, validate_plan
from prereg_kit.plan.canonical import content_hash

TEMPLATE = (resources.files("prereg_kit") / "templates" / "plan.toml").read_text()


def _errors(text: str) -> list[str]:
    with pytest.raises(PlanError) as ei:
        validate_plan(tomllib.loads(text), source="plan.toml", text=text)
    assert ei.value.exit_code == 2
    return ei.value.lines


def test_template_validates_and_round_trips():
    data = tomllib.loads(TEMPLATE)
    plan = validate_plan(data)
    again = tomllib.loads(tomli_w.dumps(data))
    assert validate_plan(again) == plan
    assert content_hash(again) == content_hash(data)
    assert plan.seeds_for("main") == [0, 1, 2, 3]
    assert plan.seeds_for("smoke") == [0]
    assert plan.budget.tokens == 60_000 and plan.budget.eval_interval_tokens() == 3_750
    assert plan.resolved_config("lr2x")["update"]["learning_rate"] == 2e-4
    assert plan.resolved_config("baseline")["update"]["learning_rate"] == 1e-4


def test_small_plan_defaults(study):
    pf = load_plan(study)  # a folder resolves to its plan.toml
    p = pf.plan
    assert p.stages[0].name == "main" and p.statistics.margin == 0.02
    assert p.margin_of(p.contrast("C1")) == 0.02
    assert p.family_of("C1").name == "primary" and p.family_of("C2") is None
    assert p.contrast("C2").reading_point == ReadingPoint("time")
    assert p.evaluation.primary == "test"


@pytest.mark.parametrize("text,value", [("12.25M", 12_250_000), ("500K", 500_000), (1000, 1000),
                                        ("1_000", 1000), ("17.0M", 17_000_000), ("1.5G", 1_500_000_000)])
def test_parse_tokens(text, value):
    assert parse_tokens(text) == value


@pytest.mark.parametrize("bad", ["", "12.25X", -5, 0, True, "M"])
def test_parse_tokens_rejects(bad):
    with pytest.raises(ValueError):
        parse_tokens(bad)


def test_reading_points():
    assert parse_multiple("B") == 1 and parse_multiple("2B") == 2 and parse_multiple("1.25B") == 1.25
    assert parse_reading_point("2B") == ReadingPoint("tokens", 2.0)
    assert parse_reading_point("control-time").kind == "control_time"
    assert str(parse_reading_point("2B")) == "2B" and str(parse_reading_point("updates")) == "updates"
    with pytest.raises(ValueError):
        parse_reading_point("0B")


def test_seed_forms():
    for form in ['"3-5"', "{ first = 3, last = 5 }", "[3, 4, 5]"]:
        text = SMALL_PLAN.replace("seeds = [0, 1, 2]", f"seeds = {form}")
        assert validate_plan(tomllib.loads(text)).study.seeds == [3, 4, 5]


# (edit of the small plan, key path expected in the message, text on the expected line, words expected)
ERROR_CASES = {
    "unknown key": (("title = ", 'colour = "red"\ntitle = '), "study.colour", "colour", "unknown key"),
    "unknown nested key": (('description = "control"', 'description = "control"\nseed = 3'),
                           "configurations.A.seed", "seed = 3", "unknown key"),
    "wrong type": (('tokens = "1M"', "tokens = [1]"), "budget.tokens", "tokens = [1]", "token count"),
    "wrong type bool": (("group_size = 8", "group_size = 8\n[statistics]\ncrossed_bootstrap = \"yes\""),
                        "statistics.crossed_bootstrap", "crossed_bootstrap", "boolean"),
    "unknown configuration": (('treatment = "B"\ncontrol = "A"\ntier = "primary"',
                               'treatment = "Z"\ncontrol = "A"\ntier = "primary"'),
                              "contrasts[0].treatment", 'treatment = "Z"', "unknown configuration 'Z'"),
    "unknown comparator": (('comparator = "A"', 'comparator = "Q"'), "study.comparator", "comparator", "unknown configuration"),
    "primary in no family": (('tier = "secondary"', 'tier = "primary" # now'), "contrasts[1].tier", "# now", "in no Holm family"),
    "empty family": (('members = ["C1"]', "members = []"), "families[0].members", "members = []", "is empty"),
    "margin zero": (("margin = 0.02", "margin = 0.0"), "contrasts[1].margin", "margin = 0.0", "must be > 0"),
    "margin negative": (("margin = 0.02", "margin = -0.02"), "contrasts[1].margin", "margin = -0.02", "must be > 0"),
    "duplicate seeds": (("seeds = [0, 1, 2]", "seeds = [0, 1, 1]"), "study.seeds", "seeds =", "duplicate seeds: 1"),
    "missing budget": (('[budget]\ntokens = "1M"\neval_every = "B/16"\n', ""), "budget", None, "required key is missing"),
    "missing title": (('title = "Test study"\n', ""), "study.title", "[study]", "required key is missing"),
    "bad reading point": (('at = "time"', 'at = "later"'), "contrasts[1].at", 'at = "later"', "reading point"),
    "family of unknown contrast": (('members = ["C1"]', 'members = ["C1", "C9"]'), "families[0].members", "members =", "unknown contrast 'C9'"),
    "non-primary in family": (('members = ["C1"]', 'members = ["C1", "C2"]'), "families[0].members", "members =", "only primary"),
    "duplicate contrast id": (('id = "C2"', 'id = "C1" # dup'), "contrasts[1].id", "# dup", "duplicate contrast id"),
    "bad metric": (("[evaluation]", '[evaluation]\nmetric = "acc"'), "evaluation.metric", 'metric = "acc"', "unknown metric"),
}


@pytest.mark.parametrize("name", list(ERROR_CASES))
def test_validation_errors_name_key_and_line(name):
    (old, new), key, marker, words = ERROR_CASES[name]
    assert old in SMALL_PLAN
    text = SMALL_PLAN.replace(old, new, 1)
    lines = _errors(text)
    hit = [ln for ln in lines if f": {key}: " in ln]
    assert hit, lines
    assert words in hit[0]
    if marker is None:
        assert hit[0].startswith("plan.toml: "), hit[0]
    else:
        line = next(i for i, ln in enumerate(text.splitlines(), 1) if marker in ln)
        assert hit[0].startswith(f"plan.toml:{line}: "), hit[0]
    assert all("\n" not in ln and "Traceback" not in ln for ln in lines)


def test_syntax_error_names_line(tmp_path):
    p = tmp_path / "plan.toml"
    p.write_text(SMALL_PLAN.replace('title = "Test study"', "title = Test study"))
    with pytest.raises(PlanError) as ei:
        load_plan(p)
    assert ei.value.lines[0].startswith(f"{p}:4: TOML syntax error")


def test_missing_file(tmp_path):
    with pytest.raises(PlanError, match="no such plan file"):
        load_plan(tmp_path / "nope.toml")


def test_reading_past_run_length_is_an_error():
    text = SMALL_PLAN.replace('at = "time"', 'at = "2B"')
    assert any("trains only to 1B" in ln for ln in _errors(text))
    ok = text.replace('[budget]\ntokens = "1M"', '[budget]\ntrain_to = "2B"\ntokens = "1M"')
    assert validate_plan(tomllib.loads(ok)).train_to("B") == 2.0
