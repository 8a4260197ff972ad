"""The trainer's settings in sections, and the flat keys of older plans read into them."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
from paths import ROOT
from plans import SMALL_PLAN

from prereg_kit.plan import load_plan
from trainer.config import (
    FLAT_KEYS,
    SECTIONS,
    ConfigError,
    TrainerConfig,
    config_of,
    flat_keys,
    merge_recipe,
    parse_config,
    plan_flat_keys,
    sectioned,
    updated,
)


def test_every_setting_has_exactly_one_flat_key():
    targets = list(FLAT_KEYS.values())
    assert len(set(targets)) == len(targets)  # no two flat keys land on one setting
    every = {(name, key) for name, model in SECTIONS.items() for key in model.model_fields}
    assert set(targets) == every
    assert set(TrainerConfig.model_fields) == set(SECTIONS)


def test_flat_and_sectioned_recipes_give_the_same_settings():
    flat = {"credit": "monte_carlo", "mc_k": 2, "group_size": 4, "task": "synthetic", "threads": 1, "engine": "hf",
            "selection": "dynamic", "dynamic_max_groups": 16, "prompts_per_iteration": 4, "model_sha256": "",
            "eval_batch_size": 64, "reward_verifier": "strict", "task_levels": [1], "sandbox": {"memory_mb": 512}}
    nested = {"credit": {"rule": "monte_carlo", "mc_k": 2}, "rollout": {"group_size": 4, "prompts_per_iteration": 4},
              "task": {"name": "synthetic", "levels": [1]}, "engine": {"threads": 1, "name": "hf"},
              "selection": {"rule": "dynamic", "dynamic_max_groups": 16}, "model": {"sha256": ""},
              "evaluation": {"batch_size": 64}, "rewards": {"verifier": "strict", "sandbox": {"memory_mb": 512}}}
    a, b = parse_config(flat), parse_config(nested)
    assert a == b
    assert a.credit.rule == "monte_carlo" and a.credit.mc_k == 2 and a.rollout.group_size == 4
    assert a.rewards.sandbox.memory_mb == 512 and a.evaluation.batch_size == 64 and a.task.levels == [1]
    assert TrainerConfig(**flat) == a  # the Python API reads flat keys too


def test_names_that_became_sections_are_flat_only_when_they_hold_a_name():
    assert flat_keys({"credit": "outcome", "engine": {"threads": 1}, "model": "tiny", "mc_k": 3}) == [
        ("credit", "credit.rule"), ("model", "model.name"), ("mc_k", "credit.mc_k")]
    assert sectioned({"credit": {"rule": "outcome"}}) == {"credit": {"rule": "outcome"}}


def test_one_setting_given_both_ways_is_an_error():
    with pytest.raises(ConfigError) as e:
        parse_config({"mc_k": 2, "credit": {"mc_k": 3}})
    assert e.value.lines == ["recipe: mc_k: given twice, as 'mc_k' and as credit.mc_k; keep credit.mc_k"]


def test_errors_name_keys_as_the_recipe_wrote_them():
    with pytest.raises(ConfigError) as e:
        parse_config({"group_size": 0, "model_sha256": "abc", "lerning_rate": 1.0})
    got = sorted(line.split(": ")[1] for line in e.value.lines)
    assert got == ["group_size", "lerning_rate", "model_sha256"], e.value.lines
    with pytest.raises(ConfigError) as e:
        parse_config({"rollout": {"group_size": 0}})
    assert e.value.lines[0].startswith("recipe: rollout.group_size: ")


def test_overrides_merge_key_by_key_across_the_two_forms():
    """A flat recipe with a sectioned override (and the reverse) keeps the other keys of the section."""
    assert merge_recipe({"credit": "monte_carlo", "mc_k": 4}, {"credit": {"mc_k": 1}}) == {
        "credit": {"rule": "monte_carlo", "mc_k": 1}}
    assert merge_recipe({"credit": {"rule": "monte_carlo", "mc_k": 4}}, {"mc_k": 1}) == {
        "credit": {"rule": "monte_carlo", "mc_k": 1}}


def _plan(tmp: Path, recipe: str, overrides: str):
    text = SMALL_PLAN.replace("learning_rate = 1e-6   # the shared recipe\ngroup_size = 8\n", recipe)
    text = text.replace("overrides = { learning_rate = 2e-6 }", f"overrides = {{ {overrides} }}", 1)
    tmp.mkdir()
    (tmp / "plan.toml").write_text(text)
    return load_plan(tmp / "plan.toml").plan


def test_a_plan_with_flat_keys_and_its_sectioned_twin_resolve_alike(tmp_path):
    pf = _plan(tmp_path / "flat", 'learning_rate = 1e-6\ncredit = "monte_carlo"\nmc_k = 4\ngroup_size = 4\n',
               "mc_k = 1")
    pn = _plan(tmp_path / "nested", '[recipe.update]\nlearning_rate = 1e-6\n[recipe.credit]\nrule = "monte_carlo"\n'
               'mc_k = 4\n[recipe.rollout]\ngroup_size = 4\n', "credit = { mc_k = 1 }")
    for name in pf.configurations:
        assert config_of(pf, name) == config_of(pn, name)
    assert config_of(pf, "B").credit.mc_k == 1 and config_of(pf, "B").credit.rule == "monte_carlo"
    assert ("recipe.mc_k", "recipe.credit.mc_k") in plan_flat_keys(pf) and plan_flat_keys(pn) == []


def test_registry_recipes_still_resolve():
    for plan_file in sorted((ROOT / "registry").glob("cpu-*/plan.toml")):
        plan = load_plan(plan_file).plan
        for name in plan.configurations:
            cfg = config_of(plan, name)
            assert parse_config(cfg.model_dump(mode="json")) == cfg  # a run's recorded settings read back


def test_updated_validates_again():
    cfg = parse_config({})
    assert updated(cfg, {"engine": {"keep_checkpoint": True}}).engine.keep_checkpoint
    with pytest.raises(ConfigError):
        updated(cfg, {"rollout": {"group_size": 0}})


def test_rule_names_are_literals_of_the_sections():
    assert "monte_carlo" in typing.get_args(SECTIONS["credit"].model_fields["rule"].annotation)
    assert "dynamic" in typing.get_args(SECTIONS["selection"].model_fields["rule"].annotation)


def test_the_docs_describe_every_setting():
    text = (ROOT / "docs" / "trainer.md").read_text() + (ROOT / "docs" / "interventions.md").read_text()
    for name, model in SECTIONS.items():
        assert f"### `{name}`" in text, name
        for key in model.model_fields:
            short = key.split("_")[0] + "_*"
            assert f"`{key}`" in text or f"`{name}.{key}`" in text or f"`{short}`" in text, f"{name}.{key}"


def test_prereg_run_names_each_flat_key_with_its_new_place(tmp_path, monkeypatch):
    """`prereg run` on a plan that still uses flat keys prints one deprecation line naming them."""
    import io
    from types import SimpleNamespace

    from rich.console import Console

    import trainer.launch as launch

    plan = _plan(tmp_path / "p", 'learning_rate = 1e-6\ncredit = "monte_carlo"\n', "mc_k = 1")
    def no_runs(plan):  # the plan as loaded, and no runs to start
        return lambda *a, **k: (SimpleNamespace(plan=plan, path="plan.toml", content_sha256="0" * 64), [])

    monkeypatch.setattr(launch, "plan_jobs", no_runs(plan))
    out = io.StringIO()
    launch.run_study(tmp_path / "p", console=Console(file=out, width=300))
    lines = [ln for ln in out.getvalue().splitlines() if "deprecated" in ln]
    assert lines == ["plan.toml: deprecated: 3 recipe key(s) without sections, still read "
                     "(recipe.learning_rate → recipe.update.learning_rate, recipe.credit → recipe.credit.rule, "
                     "configurations.B.mc_k → configurations.B.credit.mc_k; docs/trainer.md, \"The recipe\")"], out.getvalue()
    sectioned_plan = _plan(tmp_path / "q", '[recipe.credit]\nrule = "monte_carlo"\n', "credit = { mc_k = 1 }")
    monkeypatch.setattr(launch, "plan_jobs", no_runs(sectioned_plan))
    out = io.StringIO()
    launch.run_study(tmp_path / "q", console=Console(file=out, width=300))
    assert "deprecated" not in out.getvalue()
