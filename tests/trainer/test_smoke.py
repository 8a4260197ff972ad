"""The registry smoke run (``python -m trainer.smoke``): what it substitutes, what it keeps, and
that a substituted configuration trains one iteration."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from paths import ROOT

from prereg_kit.plan import load_plan
from trainer.config import parse_config
from trainer.smoke import SMOKE_CODE_PROMPTS, SMOKE_LIMIT, SmokeCase, cases, not_runnable, smoke_spec, substituted


def _cfg(**sections):
    return parse_config(sections)


def test_substitution_replaces_model_task_and_engine_but_keeps_the_rules():
    cfg = _cfg(model={"name": "Qwen/Qwen2.5-1.5B-Instruct"}, task={"name": "file", "train_file": "math.jsonl"},
               rollout={"prompts_per_iteration": 32, "group_size": 8, "completion_limit": 380},
               credit={"rule": "monte_carlo", "mc_k": 2}, selection={"rule": "critic", "keep_nearest": 24,
                                                                         "keep_random": 8, "candidates": 96},
               engine={"name": "vllm", "device": "cuda", "precision": "bf16-autocast"})
    s = substituted(cfg)
    assert (s.model.name, s.model.warm_start.steps, s.task.name, s.task.train_file) == ("tiny", 0, "synthetic", "")
    assert (s.engine.name, s.engine.device, s.engine.precision) == ("hf", "cpu", "float32")
    assert s.rollout.completion_limit == SMOKE_LIMIT
    # what the configuration chose is what the smoke run exercises
    assert (s.credit.rule, s.credit.mc_k, s.selection.rule, s.selection.keep_nearest) == ("monte_carlo", 2, "critic", 24)
    assert (s.rollout.prompts_per_iteration, s.rollout.group_size) == (32, 8)


def test_cut_offsets_and_continuation_cap_scale_with_the_shorter_completion():
    cfg = _cfg(rollout={"completion_limit": 380}, credit={"rule": "monte_carlo", "mc_cuts": [63, 127, 190, 253, 317],
                                                          "mc_continuation_limit": 200})
    s = substituted(cfg, limit=24)
    assert s.credit.mc_cuts == [4, 8, 12, 16, 20]
    assert all(1 <= c < 24 for c in s.credit.mc_cuts)
    assert s.credit.mc_continuation_limit == 24
    # a short recipe is left as it is
    short = substituted(_cfg(rollout={"completion_limit": 16}), limit=24)
    assert short.rollout.completion_limit == 16


def test_code_task_keeps_the_built_in_code_task_and_elected_anchor_becomes_the_first_channel():
    cfg = _cfg(task={"name": "code"}, rewards={"channels": ["program_correct", "program_fast"], "aggregation": {"rule": "tag"},
                                               "anchor": "elected"})
    s = substituted(cfg)
    assert (s.task.name, s.task.train_file) == ("code", "")
    assert s.rewards.anchor == "program_correct"
    assert s.rewards.aggregation["rule"] == "tag"


def test_a_code_task_trains_on_a_few_prompts_and_keeps_its_group():
    """Each completion's program runs in the sandbox: a code plan's 32 prompts become 4, its group
    size stays (the group-relative rules read it); a smaller count and other tasks are kept."""
    big = _cfg(task={"name": "code"}, rollout={"prompts_per_iteration": 32, "group_size": 8})
    s = substituted(big)
    assert (s.rollout.prompts_per_iteration, s.rollout.group_size) == (SMOKE_CODE_PROMPTS, 8)
    assert substituted(_cfg(task={"name": "code"}, rollout={"prompts_per_iteration": 2})).rollout.prompts_per_iteration == 2
    assert substituted(_cfg(rollout={"prompts_per_iteration": 32})).rollout.prompts_per_iteration == 32


def test_a_process_reward_model_becomes_the_tiny_one(tmp_path):
    cfg = _cfg(credit={"rule": "prm_baseline", "prm_model": "Qwen/Qwen2.5-Math-PRM-7B"})
    s = substituted(cfg, prm_path=str(tmp_path / "prm"))
    assert (s.credit.rule, s.credit.prm_model) == ("prm_baseline", str(tmp_path / "prm"))
    assert substituted(_cfg()).credit.prm_model == ""  # no PRM asked for, none given


def test_every_cpu_study_configuration_is_a_case_and_runnable():
    found = [(c.study, c.configuration) for c in cases(ROOT / "registry", ["cpu-grpo", "cpu-interventions"])]
    assert ("cpu-grpo", "frozen") in found and ("cpu-interventions", "mc_k4") in found
    assert all(not_runnable(c) == "" for c in cases(ROOT / "registry", ["cpu-grpo"]))


def test_a_configuration_the_trainer_refuses_is_skipped_with_its_reason(tmp_path):
    d = tmp_path / "study"
    d.mkdir()
    text = (ROOT / "registry/cpu-grpo/plan.toml").read_text()
    text = text.replace('overrides = { learning_rate = 0.0 }', 'overrides = { learning_rate = 0.0, credit = "no_such_rule" }')
    (d / "plan.toml").write_text(text)
    pf = load_plan(d / "plan.toml")
    assert not_runnable(SmokeCase("study", d, pf, "grpo")) == ""
    assert "credit" in not_runnable(SmokeCase("study", d, pf, "frozen"))


def test_smoke_spec_is_one_iteration_of_the_smoke_stage(tmp_path):
    case = next(cases(ROOT / "registry", ["cpu-grpo"]))
    spec = smoke_spec(case, tmp_path)
    assert (spec.stage, spec.stop_iterations, spec.eval_samples, len(spec.eval_sets)) == ("smoke", 1, 1, 1)
    assert Path(spec.run_dir) == tmp_path / "cpu-grpo" / "grpo"


def test_smoke_runs_go_one_per_cpu_by_default_and_each_worker_has_its_own_cache(tmp_path):
    from trainer.smoke import default_jobs

    assert 1 <= default_jobs() <= 8
    case = next(cases(ROOT / "registry", ["cpu-grpo"]))
    assert Path(smoke_spec(case, tmp_path).cache_dir) == tmp_path / ".cache"
    mine = smoke_spec(case, tmp_path, cache=tmp_path / ".cache" / "worker-1")
    assert Path(mine.cache_dir) == tmp_path / ".cache" / "worker-1"
    assert mine.run_dir == smoke_spec(case, tmp_path).run_dir  # only where it caches differs


@pytest.mark.slow
def test_a_substituted_configuration_trains_one_iteration(tmp_path, capsys):
    from trainer.smoke import main

    assert main(["cpu-interventions", "--registry", str(ROOT / "registry"), "--out", str(tmp_path), "--jobs", "2"]) == 0
    names = list(load_plan(ROOT / "registry/cpu-interventions/plan.toml").plan.configurations)
    logs = sorted(p.parent.name for p in tmp_path.glob("cpu-interventions/*/meta.json"))
    assert logs == sorted(names)
    # worker processes, each with its own cache (the pool hands out cases as workers come free);
    # the lines in registry order all the same
    workers = {p.name for p in (tmp_path / ".cache").glob("worker-*")}
    assert workers and workers <= {"worker-0", "worker-1"}
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[")]
    assert [ln.split("] ", 1)[1].split(":", 1)[0] for ln in lines] == [f"cpu-interventions/{n}" for n in names]
    shutil.rmtree(tmp_path, ignore_errors=True)
