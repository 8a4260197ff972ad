"""``[[gradient_tests]]`` in a plan: keys, defaults, and the checks against the rest of the plan,
tried with near-miss and hostile entries; a gradient test edited after the lock is a plan change."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from paths import ROOT

from prereg_kit.chain.lock import amend_plan, lock_plan
from prereg_kit.errors import PreregError
from prereg_kit.plan import load_plan, validate_plan
from prereg_kit.plan.gradient import resolved_spec
from prereg_kit.study.jobs import require_locked
from prereg_kit.study.verify import verify_study

BASE = """\
[study]
id = "g1"
title = "Gradient tests"
question = "Which credit rule gives the most efficient update?"
comparator = "outcome"
seeds = [0, 1]

[recipe]
rollout = { prompts_per_iteration = 4, group_size = 4, completion_limit = 64 }

[configurations.outcome]
[configurations.mc_k1]
overrides = { credit = { rule = "monte_carlo", mc_k = 1, mc_segments = 4 } }
[configurations.mc_k4]
overrides = { credit = { rule = "monte_carlo", mc_k = 4, mc_segments = 4 } }
[configurations.critic_td]
overrides = { credit = { rule = "critic_td" } }
[configurations.short]
overrides = { rollout = { completion_limit = 32 } }

[budget]
tokens = "1M"

[evaluation]
sets = [{ name = "test", n_problems = 10 }]

[[contrasts]]
id = "C1"
treatment = "mc_k4"
control = "outcome"
tier = "secondary"
"""

TEST = """
[[gradient_tests]]
id = "G1"
description = "Table 6 at the initial policy"
configurations = ["outcome", "mc_k1", "mc_k4", "critic_td"]
batches = 8
fit = ["mc_k1", "mc_k4"]
conditions = [{ configuration = "mc_k4", metric = "per_token", at_least = 0.8 }]
"""


def plan_text(test: str = TEST) -> str:
    return BASE + test


def _load(tmp_path: Path, text: str):
    p = tmp_path / "plan.toml"
    p.write_text(text)
    return load_plan(p)


def _errors(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(PreregError) as e:
        _load(tmp_path, text)
    return e.value.lines


def test_defaults_resolve_from_the_study_and_recipe(tmp_path):
    pf = _load(tmp_path, plan_text())
    t = pf.plan.gradient_tests[0]
    assert (t.batches, t.subspace, t.seed, t.policy, t.reference.cuts, t.reference.prior) == (8, 24, 0, "initial", 3, 0.5)
    spec = resolved_spec(t, pf.plan)
    # baseline: the comparator; prompts/completions: the recipe's; warm-up 4 because critic_td keeps state
    assert (spec["baseline"], spec["prompts"], spec["completions"], spec["warmup"]) == ("outcome", 4, 4, 4)
    assert spec["reference"]["completions"] == 4 and spec["reference"]["on"] == "fresh_completions"
    no_critic = plan_text(TEST.replace(', "critic_td"]', "]"))
    assert resolved_spec(_load(tmp_path, no_critic).plan.gradient_tests[0], _load(tmp_path, no_critic).plan)["warmup"] == 0


def test_a_plan_without_gradient_tests_is_unchanged(tmp_path):
    assert _load(tmp_path, BASE).plan.gradient_tests == []


@pytest.mark.parametrize("edit, key, message", [
    (lambda s: s.replace('"critic_td"]', '"critic_tdd"]'), "gradient_tests[0].configurations",
     "unknown configuration 'critic_tdd'; did you mean 'critic_td'?"),
    (lambda s: s.replace('"critic_td"]', '"critic_td", "short"]'), "gradient_tests[0].configurations",
     "'short' differs from 'outcome' in rollout.completion_limit (32 vs 64)"),
    (lambda s: s.replace('configuration = "mc_k4"', 'configuration = "short"'), "gradient_tests[0].conditions[0].configuration",
     "'short' is not one of the test's configurations"),
    (lambda s: s.replace("batches = 8", "batches = -3"), "gradient_tests[0].batches", "greater than or equal to 2"),
    (lambda s: s.replace("batches = 8", "batches = 1"), "gradient_tests[0].batches", "greater than or equal to 2"),
    (lambda s: s.replace("batches = 8", "batches = 8\nsubspace = 0"), "gradient_tests[0].subspace", "greater than or equal to 1"),
    (lambda s: s.replace("batches = 8", "batches = 8\nreference = { cuts = 0 }"), "gradient_tests[0].reference.cuts",
     "greater than or equal to 1"),
    (lambda s: s.replace("batches = 8", "batches = 8\nreference = { cut = 3 }"), "gradient_tests[0].reference.cut", "unknown key"),
    (lambda s: s.replace("batches = 8", 'batches = 8\nbaseline = "short"'), "gradient_tests[0].baseline",
     "not one of the test's configurations"),
    (lambda s: s.replace('"outcome", "mc_k1"', '"mc_k1"'), "gradient_tests[0].configurations",
     "the baseline 'outcome' is not one of the test's configurations"),
    (lambda s: s.replace('fit = ["mc_k1", "mc_k4"]', 'fit = ["mc_k1", "critic_td"]'), "gradient_tests[0].fit",
     "credit rule 'critic_td'"),
    (lambda s: s.replace('fit = ["mc_k1", "mc_k4"]', 'fit = ["mc_k4"]'), "gradient_tests[0].fit", "at least two different k"),
    (lambda s: s.replace('fit = ["mc_k1", "mc_k4"]', 'fit = ["mc_k1", "mc_k1"]'), "gradient_tests[0].fit", "listed twice"),
    (lambda s: s.replace('metric = "per_token"', 'metric = "accuracy"'), "gradient_tests[0].conditions[0].metric",
     "'per_update', 'per_token' or 'alignment'"),
    (lambda s: s.replace("at_least = 0.8", "at_least = 0.8, at_most = 2.0"), "gradient_tests[0].conditions[0]",
     "exactly one of at_least and at_most"),
    (lambda s: s.replace('"per_token", at_least', '"per_token", on = "middle", at_least'), "gradient_tests[0].conditions[0].on",
     "'estimate', 'lower' or 'upper'"),
    (lambda s: s.replace("batches = 8", 'batches = 8\npolicy = "../other/model"'), "gradient_tests[0].policy", "inside it"),
    (lambda s: s.replace("batches = 8", 'batches = 8\npolicy = "/abs/model"'), "gradient_tests[0].policy", "relative to the study"),
    (lambda s: s.replace('id = "G1"', 'id = "C1"'), "gradient_tests[0].id", "a contrast id too"),
    (lambda s: s + s[s.index("\n[[gradient_tests]]"):], "gradient_tests[1].id", "duplicate gradient test id 'G1'"),
    (lambda s: s.replace("batches = 8", 'batches = 8\nreference = { on = "same_completions", completions = 4 }'),
     "gradient_tests[0].reference", "draws none of its own"),
    (lambda s: s.replace("batches = 8", "batches = 8\nbatch = 8"), "gradient_tests[0].batch", "unknown key"),
])
def test_hostile_entries_are_refused_at_file_line_key(tmp_path, edit, key, message):
    lines = _errors(tmp_path, edit(plan_text()))
    hit = [ln for ln in lines if f": {key}: " in ln]
    assert hit, lines
    assert message in hit[0], hit[0]
    assert re.match(rf"{re.escape(str(tmp_path / 'plan.toml'))}:\d+: ", hit[0])  # FILE:LINE: key: message


def test_flat_recipe_keys_count_as_their_section(tmp_path):
    # an older plan's flat completion_limit on one configuration still splits the batches
    text = plan_text().replace('[configurations.critic_td]\noverrides = { credit = { rule = "critic_td" } }',
                               '[configurations.critic_td]\noverrides = { credit = "critic_td", completion_limit = 80 }')
    lines = _errors(tmp_path, text)
    assert any("differs from 'outcome' in rollout.completion_limit (80 vs 64)" in ln for ln in lines), lines
    # the same value written flat or in its section is the same setting
    same = plan_text().replace('[configurations.critic_td]\noverrides = { credit = { rule = "critic_td" } }',
                               '[configurations.critic_td]\noverrides = { credit = "critic_td", completion_limit = 64 }')
    assert _load(tmp_path, same).plan.gradient_tests[0].configurations[-1] == "critic_td"


def test_editing_a_gradient_test_after_the_lock_is_a_plan_change(tmp_path):
    d = tmp_path / "study"
    d.mkdir()
    plan = d / "plan.toml"
    plan.write_text(plan_text())
    lock_plan(plan)
    require_locked(d)
    assert verify_study(d).exit_code == 0
    plan.write_text(plan_text().replace("batches = 8", "batches = 16"))
    rep = verify_study(d)
    assert rep.exit_code == 1 and any("gradient_tests" in v and "batches" in v for v in rep.violations), rep.violations
    with pytest.raises(PreregError) as e:
        require_locked(d)  # `prereg gradient-test` and `prereg run` refuse
    assert e.value.exit_code == 1
    res = amend_plan(plan, "pilot: 8 batches too few")
    assert any("gradient_tests" in str(c) for c in res.entry["changes"])
    assert verify_study(d).exit_code == 0
    require_locked(d)


def test_validate_plan_reports_every_gradient_problem_at_once(tmp_path):
    import tomllib

    text = plan_text().replace('"critic_td"]', '"nope", "short"]').replace('configuration = "mc_k4"', 'configuration = "x"')
    with pytest.raises(PreregError) as e:
        validate_plan(tomllib.loads(text), source="p.toml", text=text)
    joined = "\n".join(e.value.lines)
    assert "unknown configuration 'nope'" in joined and "'x' is not one of" in joined and "differs from" in joined


def test_the_docs_example_validates(tmp_path):
    docs = (ROOT / "docs" / "gradient-tests.md").read_text()
    section = docs[docs.index("## In a study"):]
    block = re.search(r"```toml\n(.*?)```", section, flags=re.S).group(1)
    t = _load(tmp_path, BASE + "\n" + block).plan.gradient_tests[0]
    assert (t.id, t.batches, t.fit, t.conditions[0].bound) == ("G1", 96, ["mc_k1", "mc_k4"], 0.8)


VARIANTS = TEST.replace('configurations = ["outcome", "mc_k1", "mc_k4", "critic_td"]',
                        'configurations = ["outcome", "mc_k1", "mc_k4", "mc_k16", "critic_td"]\n'
                        'variants = { mc_k16 = { credit = { rule = "monte_carlo", mc_k = 16, mc_segments = 4 } } }'
                        ).replace('fit = ["mc_k1", "mc_k4"]', 'fit = ["mc_k1", "mc_k4", "mc_k16"]')


def test_a_variant_is_measured_never_trained(tmp_path):
    """S25's k = 8 and 16: configurations of the gradient test only; the study's design is unchanged."""
    from prereg_kit.plan.gradient import with_variants

    plan = _load(tmp_path, BASE + VARIANTS).plan
    t = plan.gradient_tests[0]
    assert "mc_k16" not in plan.configurations  # no runs are asked for it
    assert with_variants(plan, t).resolved_config("mc_k16")["credit"]["mc_k"] == 16
    assert resolved_spec(t, plan)["variants"] == {"mc_k16": {"credit": {"rule": "monte_carlo", "mc_k": 16, "mc_segments": 4}}}


@pytest.mark.parametrize("edit, message", [
    # a variant may not shadow a configuration of the study
    (lambda s: s.replace("variants = { mc_k16 =", "variants = { mc_k4 ="), "'mc_k4' is a configuration of the study"),
    # a variant that changes the batches is refused like a configuration that does
    (lambda s: s.replace("mc_k = 16, mc_segments = 4 } }", "mc_k = 16, mc_segments = 4 }, rollout = { completion_limit = 32 } }"),
     "'mc_k16' differs from 'outcome' in rollout.completion_limit"),
    # the fit still needs Monte-Carlo configurations, variants included
    (lambda s: s.replace('{ rule = "monte_carlo", mc_k = 16, mc_segments = 4 }', '{ rule = "critic_td" }'),
     "'mc_k16' has credit rule 'critic_td'"),
])
def test_hostile_variants_are_refused(tmp_path, edit, message):
    assert any(message in line for line in _errors(tmp_path, BASE + edit(VARIANTS))), _errors(tmp_path, BASE + edit(VARIANTS))
