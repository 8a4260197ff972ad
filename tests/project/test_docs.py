"""Examples in the docs are real: the plan-format example validates and locks."""

from __future__ import annotations

import re
import tomllib

from paths import ROOT

from prereg_kit.chain.lock import lock_plan, read_chain
from prereg_kit.plan import validate_plan

DOCS = ROOT / "docs"


def _toml_blocks(name: str) -> list[str]:
    return re.findall(r"```toml\n(.*?)```", (DOCS / name).read_text(), flags=re.S)


def test_plan_format_example_is_s25_and_locks(tmp_path):
    text = next(b for b in _toml_blocks("plan-format.md") if "id = \"S25\"" in b)
    plan = validate_plan(tomllib.loads(text), source="docs", text=text)
    assert plan.study.seeds == list(range(5, 17))
    assert plan.budget.tokens == 12_250_000 and plan.budget.eval_interval_tokens() == 765_625
    assert len(plan.configurations) == 4 and plan.families[0].members == ["P1", "P2"]
    assert plan.train_to("outcome", "smoke") == 0.0625
    (tmp_path / "plan.toml").write_text(text)
    lock_plan(tmp_path / "plan.toml")
    assert read_chain(tmp_path / "plan.toml").last["content"]["study"]["id"] == "S25"


def test_recipes_in_the_docs_are_trainer_settings():
    """The recipes the docs show are what the trainer accepts: the S25 example's configurations,
    the aggregation grid of plan-format.md and the sectioned example of trainer.md."""
    import pytest

    pytest.importorskip("pydantic")
    from trainer.config import config_of, merge_recipe, parse_config, plan_flat_keys

    text = next(b for b in _toml_blocks("plan-format.md") if "id = \"S25\"" in b)
    plan = validate_plan(tomllib.loads(text), source="docs", text=text)
    assert plan_flat_keys(plan) == []  # the docs show the sectioned form
    cfgs = {name: config_of(plan, name) for name in plan.configurations}
    assert cfgs["mc_k2"].credit.rule == "monte_carlo" and cfgs["mc_k2"].credit.mc_k == 2
    assert cfgs["outcome"].update.learning_rate == 1e-6 and cfgs["outcome"].rollout.completion_limit == 380
    grid = next(b for b in _toml_blocks("plan-format.md") if "[configurations.tag]" in b)
    for name, c in tomllib.loads(grid)["configurations"].items():
        cfg = parse_config(merge_recipe({}, c["overrides"]), where=name)
        assert cfg.rewards.channels == ["correct", "brief"]
    trainer_md = next(b for b in _toml_blocks("trainer.md") if "[recipe.credit]" in b)
    data = tomllib.loads(trainer_md)
    c = parse_config(merge_recipe(data["recipe"], data["configurations"]["mc_k1"]["overrides"]))
    assert (c.credit.rule, c.credit.mc_k, c.rollout.group_size) == ("monte_carlo", 1, 8)


def test_the_readme_command_table_has_a_row_for_every_command():
    """Every command `prereg --help` lists (entry-point commands such as `import` included) has a
    row in the README's command table, and the table names no command that does not exist."""
    import typer.main

    from prereg_kit.cli import app

    listed = set(typer.main.get_command(app).list_commands(None))  # what `prereg --help` shows
    readme = (DOCS.parent / "README.md").read_text()
    rows = set(re.findall(r"^\| `prereg ([a-z][a-z-]*)[ `{]", readme, flags=re.MULTILINE))
    assert listed - rows == set(), f"commands without a README row: {sorted(listed - rows)}"
    assert rows - listed == set(), f"README rows of no command: {sorted(rows - listed)}"
