"""`prereg lock`, `amend` and `verify` refuse recipe keys the plan's trainer does not know: each
problem on the line where the plan writes the key, with the closest valid name. Plans are copies
of registry/cpu-grpo edited in a temporary folder; the trainer is the real built-in one or a
stand-in registered through a patched `installed_runners`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from paths import ROOT
from typer.testing import CliRunner

import prereg_kit.cli.recipecheck as rc
import prereg_kit.cli.runners as runners
from prereg_kit.chain.lock import lock_plan, read_chain
from prereg_kit.cli import app
from prereg_kit.errors import PlanError
from prereg_kit.plan import load_plan

CPU = ROOT / "registry" / "cpu-grpo"
FROZEN = "overrides = { learning_rate = 0.0 }"


def _plan(tmp_path: Path, *, recipe: str = "", frozen: str = FROZEN, study: str = "") -> Path:
    """registry/cpu-grpo's plan with ``recipe`` after its [recipe] keys, ``frozen`` as the frozen
    configuration's overrides line and ``study`` added to [study]."""
    text = (CPU / "plan.toml").read_text()
    if recipe:
        text = text.replace('threads = 2                             # torch threads per run process\n',
                            "threads = 2\n" + recipe, 1)
    text = text.replace(FROZEN, frozen, 1)
    text = text.replace('comparator = "frozen"\n', 'comparator = "frozen"\n' + study, 1)
    folder = tmp_path / "study"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plan.toml").write_text(text)
    return folder / "plan.toml"


def _line(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def _lock(path: Path):
    res = CliRunner().invoke(app, ["lock", str(path)])
    return res.exit_code, res.stdout, res.stderr


def _refused(path: Path) -> list[str]:
    code, _, err = _lock(path)
    assert code == 2, err
    assert not path.with_suffix(".lock").exists()  # nothing written
    return [line.removeprefix("error: ") for line in err.splitlines()]


# --- the built-in trainer ----------------------------------------------------------------------

def test_the_cpu_plan_still_locks_to_the_same_hashes(tmp_path):
    path = _plan(tmp_path)
    assert path.read_bytes() == (CPU / "plan.toml").read_bytes()
    code, out, err = _lock(path)
    assert code == 0, err
    assert "recipe not checked" not in out
    mine, committed = read_chain(path).entries[0], read_chain(CPU / "plan.toml").entries[0]
    for key in ("raw_sha256", "content_sha256", "content"):
        assert mine[key] == committed[key]


def test_the_registry_cpu_study_still_verifies():
    res = CliRunner().invoke(app, ["verify", str(CPU)])
    assert res.exit_code == 0, res.stderr
    assert "recipe not checked" not in res.stdout


def test_a_near_miss_flat_key_in_recipe(tmp_path):
    path = _plan(tmp_path, recipe="mc_kk = 3\n")
    assert _refused(path) == [f"{path}:{_line(path, 'mc_kk')}: recipe.mc_kk: unknown key; did you mean 'credit.mc_k'?"]


def test_a_near_miss_in_a_sub_table(tmp_path):
    path = _plan(tmp_path, recipe="[recipe.credit]\nrule = \"monte_carlo\"\nmc_kk = 4\n")
    assert _refused(path) == [f"{path}:{_line(path, 'mc_kk')}: recipe.credit.mc_kk: unknown key; did you mean 'credit.mc_k'?"]


def test_a_near_miss_in_an_inline_override(tmp_path):
    path = _plan(tmp_path, recipe="\n\n", frozen="overrides = { learning_rate = 0.0, credit.mc_kk = 4 }")
    assert _refused(path) == [f"{path}:{_line(path, 'credit.mc_kk')}: configurations.frozen.overrides.credit.mc_kk: "
                              "unknown key; did you mean 'credit.mc_k'?"]


def test_an_override_sub_table_with_a_dotted_key(tmp_path):
    path = _plan(tmp_path, frozen="[configurations.frozen.overrides]\nlearning_rate = 0.0\nupdate.lr_schedul = \"linear\"\n")
    assert _refused(path) == [f"{path}:{_line(path, 'lr_schedul ')}: configurations.frozen.overrides.update.lr_schedul: "
                              "unknown key; did you mean 'update.lr_schedule'?"]


def test_a_flat_alias_written_inside_a_section(tmp_path):
    path = _plan(tmp_path, recipe="[recipe.rollout]\nmc_k = 4\n")
    assert _refused(path) == [f"{path}:{_line(path, 'mc_k = 4')}: recipe.rollout.mc_k: unknown key; did you mean 'credit.mc_k'?"]


def test_a_bad_value_is_placed_on_its_line(tmp_path):
    path = _plan(tmp_path, recipe="[recipe.update]\nweight_decay = -1.0\n")
    (line,) = _refused(path)
    assert line.startswith(f"{path}:{_line(path, 'weight_decay = -1.0')}: recipe.update.weight_decay: ")
    assert "greater than or equal to 0" in line
    # the flat key of a setting is named as written, on its own line
    text = path.read_text().replace("temperature = 1.0\n", "temperature = 0.0\n", 1).replace("weight_decay = -1.0", "")
    path.write_text(text)
    (line,) = _refused(path)
    assert line.startswith(f"{path}:{_line(path, 'temperature = 0.0')}: recipe.temperature: ")


def test_a_known_key_with_a_wrong_type(tmp_path):
    path = _plan(tmp_path, frozen='[configurations.frozen.overrides]\nlearning_rate = 0.0\n'
                                  '[configurations.frozen.overrides.credit]\nmc_k = "four"\n')
    (line,) = _refused(path)
    at = _line(path, "four")
    assert line.startswith(f"{path}:{at}: configurations.frozen.overrides.credit.mc_k: ")
    assert "valid integer" in line and "did you mean" not in line


def test_a_recipe_problem_is_given_once_for_all_configurations(tmp_path):
    path = _plan(tmp_path, recipe="[recipe.credit]\nmc_kk = 4\neq_alpha = \"x\"\n")
    lines = _refused(path)
    assert len(lines) == 2 and len(set(lines)) == 2
    assert [int(x.split(":")[1]) for x in lines] == sorted(int(x.split(":")[1]) for x in lines)  # file order


def test_a_huge_key_is_refused_in_one_short_line(tmp_path):
    key = "mc_" + "k" * 20_000
    path = _plan(tmp_path, recipe=f"[recipe.credit]\n{key} = 4\n")
    (line,) = _refused(path)
    assert line.startswith(f"{path}:{_line(path, key)}: recipe.credit.") and line.endswith(": unknown key")
    assert len(line) < 300


def test_a_unicode_look_alike_is_shown_escaped(tmp_path):
    path = _plan(tmp_path, frozen='overrides = { learning_rate = 0.0, credit."m\u0441_k" = 4 }')  # Cyrillic с
    (line,) = _refused(path)
    assert line == (f"{path}:{_line(path, 'credit.')}: configurations.frozen.overrides.credit.\"m\u0441_k\": unknown key "
                    "(not plain ASCII: \"credit.m\\u0441_k\"); did you mean 'credit.mc_k'?")


def test_a_near_miss_section_name(tmp_path):
    path = _plan(tmp_path, recipe="[recipe.credits]\nmc_k = 4\n")
    (line,) = _refused(path)
    assert line.startswith(f"{path}:{_line(path, '[recipe.credits]')}: recipe.credits: unknown key")


def test_a_rule_across_keys_names_the_configuration(tmp_path):
    path = _plan(tmp_path, frozen='overrides = { learning_rate = 0.0, selection.rule = "critic", selection.candidates = 4 }')
    (line,) = _refused(path)
    assert line.startswith(f"{path}:{_line(path, 'selection.rule')}: configurations.frozen")
    assert "selection.candidates" in line


def test_amend_refuses_a_bad_recipe_and_keeps_the_lock(tmp_path):
    path = _plan(tmp_path)
    assert _lock(path)[0] == 0
    before = path.with_suffix(".lock").read_bytes()
    path.write_text(path.read_text().replace(FROZEN, "overrides = { learning_rate = 0.0, credit.mc_kk = 4 }"))
    res = CliRunner().invoke(app, ["amend", str(path), "--reason", "typo"])
    assert res.exit_code == 2 and "credit.mc_kk: unknown key; did you mean 'credit.mc_k'?" in res.stderr
    assert path.with_suffix(".lock").read_bytes() == before


def test_verify_names_a_recipe_the_trainer_refuses(tmp_path, monkeypatch):
    path = _plan(tmp_path, recipe="mc_kk = 3\n")
    monkeypatch.setattr(rc, "installed_runners", lambda: {})
    code, out, _ = _lock(path)
    assert code == 0 and "recipe not checked: trainer 'builtin' is not installed" in out
    monkeypatch.undo()
    res = CliRunner().invoke(app, ["verify", str(path)])
    assert res.exit_code == 2 and "recipe.mc_kk: unknown key" in res.stderr


def test_the_builtin_recipe_keys_cover_every_setting():
    from trainer.config import FLAT_KEYS, SECTIONS
    from trainer.plugin import RUNNER

    keys = RUNNER.recipe_keys()
    assert len(keys) == len(set(keys))
    for section, model in SECTIONS.items():
        assert {f"{section}.{k}" for k in model.model_fields} <= set(keys)
    assert set(FLAT_KEYS) <= set(keys) and "model.tiny.layers" in keys and "rewards.sandbox.memory_mb" in keys


def test_locking_imports_no_torch(tmp_path):
    path = _plan(tmp_path)
    code = ("import sys\nfrom prereg_kit.cli import app\n"
            "try:\n    app([\"lock\", sys.argv[1]])\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'vllm'))\n"
            "assert 'trainer.plugin' in sys.modules and not bad, bad\nprint('ok')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env, timeout=180)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-2000:]


# --- which trainer, and a stand-in -------------------------------------------------------------

class _StandIn:
    """A runner that refuses one key and may or may not list its keys."""

    def __init__(self, lines: list[str], keys: list[str] | None):
        self.lines, self.calls = lines, []
        if keys is not None:
            self.recipe_keys = lambda: keys

    def check_configuration(self, plan, configuration):
        self.calls.append(configuration)
        return self.lines


def _install(monkeypatch, name: str, runner) -> None:
    found = {name: SimpleNamespace(name=name, load=lambda: runner)}
    monkeypatch.setattr(runners, "installed_runners", lambda: found)
    monkeypatch.setattr(rc, "installed_runners", lambda: found)


def test_a_stand_in_runner_without_recipe_keys_gives_no_suggestion(tmp_path, monkeypatch):
    standin = _StandIn(["recipe: mc_kk: unknown key"], None)
    _install(monkeypatch, "stand-in", standin)
    path = _plan(tmp_path, recipe="mc_kk = 3\n", study='trainer = "stand-in"\n')
    assert _refused(path) == [f"{path}:{_line(path, 'mc_kk')}: recipe.mc_kk: unknown key"]
    assert standin.calls == ["grpo", "frozen"]


def test_a_runner_suggestion_is_not_doubled(tmp_path, monkeypatch):
    _install(monkeypatch, "stand-in", _StandIn(["recipe: mc_kk: unknown key; did you mean 'credit.mc_k'?"], ["credit.mc_k"]))
    path = _plan(tmp_path, recipe="mc_kk = 3\n", study='trainer = "stand-in"\n')
    (line,) = _refused(path)
    assert line.count("did you mean") == 1


def test_the_stand_in_is_asked_only_for_its_own_plans(tmp_path, monkeypatch):
    _install(monkeypatch, "stand-in", _StandIn(["recipe: mc_kk: unknown key"], None))
    path = _plan(tmp_path, recipe="mc_kk = 3\n")  # trainer "builtin", not installed here
    code, out, err = _lock(path)
    assert code == 0, err
    assert out.splitlines()[0] == "recipe not checked: trainer 'builtin' is not installed"


def test_external_and_uninstalled_trainers_lock_without_a_check(tmp_path, monkeypatch):
    standin = _StandIn(["recipe: x: unknown key"], None)
    _install(monkeypatch, "stand-in", standin)
    for name, note in (("external", "trainer 'external' trains outside prereg-kit; its runs come in through `prereg import <tool>`"),
                       ("stand-out", "recipe not checked: trainer 'stand-out' is not installed")):
        path = _plan(tmp_path / name, recipe="mc_kk = 3\n", study=f'trainer = "{name}"\n')
        code, out, err = _lock(path)
        assert code == 0 and note in out, err
    assert standin.calls == []


@pytest.mark.parametrize("name, how", [("verl", "`prereg import verl`"), ("openrlhf", "`prereg import openrlhf`"),
                                       ("trl", "PreregCallback in TRL's GRPOTrainer")])
def test_a_plan_of_a_trainer_outside_says_what_is_checked_and_what_is_left_to_it(tmp_path, name, how):
    """Not "not installed": the lock says how the runs come in, what is checked now and then, and what
    the plan leaves to the trainer's own settings."""
    path = _plan(tmp_path, study=f'trainer = "{name}"\n')
    code, out, err = _lock(path)
    assert code == 0, err
    assert "not installed" not in out and "recipe not checked" not in out
    line = next(ln for ln in out.splitlines() if ln.startswith(f"trainer {name!r} trains outside prereg-kit"))
    assert f"its runs come in through {how}" in line and "Checked now: the plan" in line
    assert "Checked as runs come in: " in line and "started after the lock" in line or name == "trl"
    if name == "trl":  # PreregCallback reads the recipe as the built-in trainer's settings: checked as such
        assert "recipe keys against the built-in trainer's settings" in line and "Left to trl: the settings TRL has" in line
    else:
        assert f"Left to {name}: the recipe's settings ([recipe] and overrides) are what {name}'s own configuration sets" in line


def test_a_trl_plan_with_a_recipe_the_built_in_trainer_does_not_know_is_refused(tmp_path):
    path = _plan(tmp_path, recipe="mc_kk = 3\n", study='trainer = "trl"\n')
    assert any("mc_kk: unknown key" in ln for ln in _refused(path))


def test_a_runner_without_check_configuration_is_named(tmp_path, monkeypatch):
    _install(monkeypatch, "stand-in", SimpleNamespace())
    path = _plan(tmp_path, study='trainer = "stand-in"\n')
    code, out, _ = _lock(path)
    assert code == 0 and "recipe not checked: trainer 'stand-in' does not say which recipes it can run" in out


def test_configurations_marked_not_runnable_are_skipped(tmp_path):
    path = _plan(tmp_path, recipe="mc_kk = 3\n")
    pf = load_plan(path)
    standin = _StandIn(["recipe: mc_kk: unknown key"], None)
    confs = {name: SimpleNamespace(overrides=c.overrides, runnable=name != "frozen")
             for name, c in pf.plan.configurations.items()}
    plan = SimpleNamespace(configurations=confs, recipe=pf.plan.recipe)
    lines = rc.recipe_problems(SimpleNamespace(plan=plan, raw=pf.raw, data=pf.data, path=pf.path), standin, None)
    assert standin.calls == ["grpo"] and len(lines) == 1
    confs["grpo"] = SimpleNamespace(overrides={}, runnable=False)
    assert rc.recipe_problems(SimpleNamespace(plan=plan, raw=pf.raw, data=pf.data, path=pf.path), standin, None) == []


def test_the_trainer_name_is_bounded(tmp_path):
    path = _plan(tmp_path, study=f'trainer = "{"x" * 101}"\n')
    (line,) = _refused(path)
    assert line.startswith(f"{path}:{_line(path, 'trainer =')}: study.trainer: ")


def test_lock_plan_without_a_check_is_unchanged(tmp_path):
    """The library call (dry-run locks its synthetic copy this way) checks no recipe."""
    path = _plan(tmp_path, recipe="mc_kk = 3\n")
    assert lock_plan(path).status == "locked"
    with pytest.raises(PlanError):
        lock_plan(path, check=rc.gate([]))  # already locked unchanged, but the check runs first
    assert json.loads(path.with_suffix(".lock").read_text())["entries"][0]["kind"] == "lock"
