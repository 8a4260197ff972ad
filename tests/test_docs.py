"""Examples in the docs are real: the plan-format example validates and locks."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from prereg_kit.lock import lock_plan, read_chain
from prereg_kit.plan import validate_plan

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _toml_blocks(name: str) -> list[str]:
    return re.findall(r"```toml\n(.*?)```", (DOCS / name).read_text(), flags=re.S)


def test_plan_format_example_is_s25_and_locks(tmp_path):
    text = _toml_blocks("plan-format.md")[0]
    plan = validate_plan(tomllib.loads(text), source="docs", text=text)
    assert plan.study.seeds == list(range(5, 17))
    assert plan.budget.tokens == 12_250_000 and plan.budget.eval_interval_tokens() == 765_625
    assert len(plan.configurations) == 4 and plan.families[0].members == ["P1", "P2"]
    assert plan.train_to("outcome", "smoke") == 0.0625
    (tmp_path / "plan.toml").write_text(text)
    lock_plan(tmp_path / "plan.toml")
    assert read_chain(tmp_path / "plan.toml").last["content"]["study"]["id"] == "S25"
