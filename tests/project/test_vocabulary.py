"""One vocabulary between plans and the trainer: the registry's paper plans parse with the
built-in trainer; near-miss keys are refused with the key they meant; per-configuration budgets
and seeds reach the launcher and the readings; ``runnable = false`` needs its reason."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pandas as pd
import pytest
from paths import ROOT
from plans import SMALL_PLAN

from prereg_kit.chain.lock import lock_plan
from prereg_kit.cli.runners import configuration_problems
from prereg_kit.errors import PlanError, PreregError
from prereg_kit.plan import load_plan, validate_plan
from prereg_kit.readings import ReadingPoint, accuracy_curve, paired_readings, read_at_tokens
from trainer.config import ConfigError, config_of, parse_config

REGISTRY = ROOT / "registry"
PAPER_PLANS = sorted(p.parent.name for p in REGISTRY.glob("*/plan.toml") if not p.parent.name.startswith("cpu-"))



def _plan(text: str):
    return validate_plan(tomllib.loads(text), source="t", text=text)


# --------------------------------------------------------------------------- the registry


@pytest.mark.parametrize("study", PAPER_PLANS)
def test_every_registry_configuration_parses_with_the_builtin_trainer(study):
    plan = load_plan(REGISTRY / study).plan
    for name, c in plan.configurations.items():
        if not c.runnable:
            assert len(c.not_runnable) > 20, (study, name)  # a reason, not a placeholder
            continue
        config_of(plan, name)  # a ConfigError names the configuration's first unknown key or bad value


def test_registry_is_at_least_95_percent_runnable_and_every_other_one_says_why():
    from trainer.plugin import RUNNER

    ok = total = 0
    for study in PAPER_PLANS + ["cpu-grpo", "cpu-interventions", "cpu-multireward"]:
        plan = load_plan(REGISTRY / study).plan
        for name, lines in configuration_problems(RUNNER, plan).items():
            total += 1
            ok += not lines
            if lines:
                assert lines[0].startswith("runnable = false: "), (study, name, lines)
    assert ok / total >= 0.95, (ok, total)


def test_registry_plans_use_no_deprecated_flat_keys():
    from trainer.config import plan_flat_keys

    for study in PAPER_PLANS:
        assert plan_flat_keys(load_plan(REGISTRY / study).plan) == [], study


def test_a_runnable_false_configuration_is_never_passed_to_the_check():
    plan = _plan(SMALL_PLAN.replace('[configurations.B]', '[configurations.B]\nrunnable = false\nnot_runnable = "no such rule"'))
    seen = []

    class Checker:
        def check_configuration(self, plan, name):
            seen.append(name)
            return []

    assert configuration_problems(Checker(), plan) == {"A": [], "B": ["runnable = false: no such rule"]}
    assert seen == ["A"]


# --------------------------------------------------------------------------- trainer keys


@pytest.mark.parametrize("recipe, line", [
    ({"credit": {"mc_kk": 4}}, "credit.mc_kk: unknown key; did you mean 'credit.mc_k'?"),
    ({"rollout": {"mc_k": 4}}, "rollout.mc_k: unknown key; did you mean 'credit.mc_k'?"),  # right key, wrong section
    ({"mc_kk": 4}, "mc_kk: unknown key; did you mean 'credit.mc_k'?"),  # a flat near miss: named by its section
    ({"update": {"learning_rat": 1e-6}}, "update.learning_rat: unknown key; did you mean 'update.learning_rate'?"),
    ({"rollout": {"group_sise": 8}}, "rollout.group_sise: unknown key; did you mean 'rollout.group_size'?"),
    ({"credit": {"rule": "outcome", "kl_coef": 0.0}}, "credit.kl_coef: unknown key"),  # nothing close: no guess
    ({"pool": "math-l4-5"}, "pool: unknown key"),
])
def test_near_miss_keys_are_refused_with_the_key_they_meant(recipe, line):
    with pytest.raises(ConfigError) as e:
        parse_config(recipe)
    assert e.value.lines == [f"recipe: {line}"]


def test_a_rule_name_is_shorthand_for_the_aggregation_table():
    base = {"rewards": {"channels": ["correct", "brief"]}}
    short = parse_config({"rewards": {**base["rewards"], "aggregation": "tag"}})
    table = parse_config({"rewards": {**base["rewards"], "aggregation": {"rule": "tag"}}})
    assert short == table and short.rewards.aggregation == {"rule": "tag"}
    for bad in ("tags", "TAG", "single"):  # near misses and the registry's old word are refused
        with pytest.raises(ConfigError, match="aggregation"):
            parse_config({"rewards": {**base["rewards"], "aggregation": bad}})
    with pytest.raises(ConfigError, match="aggregation"):
        parse_config({"rewards": {**base["rewards"], "aggregation": 3}})


def test_tasks_math_and_gsm8k_settings():
    cfg = parse_config({"task": {"name": "math", "levels": [4, 5]}, "model": {"name": "Qwen/Qwen3-0.6B"}})
    assert (cfg.task.name, cfg.task.levels) == ("math", [4, 5])
    assert parse_config({"task": {"name": "gsm8k"}, "model": {"name": "m"}}).task.name == "gsm8k"
    for levels in ([0, 4], [6], []):
        with pytest.raises(ConfigError, match="MATH levels are 1 to 5"):
            parse_config({"task": {"name": "math", "levels": levels}, "model": {"name": "m"}})
    with pytest.raises(ConfigError, match="warm start reads task.train_file"):
        parse_config({"task": {"name": "math", "levels": [4, 5]}})  # the tiny model, no file
    with pytest.raises(ConfigError, match="task.name"):
        parse_config({"task": {"name": "maths"}, "model": {"name": "m"}})


def test_task_pool_reads_a_local_training_split_and_keeps_the_levels(tmp_path):
    from trainer.data.problems import task_pool

    rows = [{"problem": f"Compute {i} + {i}.", "solution": f"\\boxed{{{2 * i}}}", "level": f"Level {1 + i % 5}"}
            for i in range(20)]
    f = tmp_path / "math.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pool = task_pool("math", f, [4, 5])
    assert sorted({p.level for p in pool}) == [4, 5] and len(pool) == 8
    evals = [p for p in task_pool("math", f, [1, 2, 3, 4, 5]) if p.level == 4][:1]
    assert len(pool.without_near_duplicates(evals)) == 7  # an evaluation problem leaves the pool (dense-rewards paper §C.1 "Pools and evaluation")
    g = tmp_path / "gsm8k.jsonl"
    g.write_text(json.dumps({"question": "How many?", "answer": "Two and two.\n#### 4"}) + "\n")
    assert [p.answer for p in task_pool("gsm8k", g, [4, 5])] == ["4"]  # GSM8K has no levels


# --------------------------------------------------------------------------- plan schema

CFG_BUDGETS = SMALL_PLAN.replace('[configurations.B]', '[configurations.B]\nbudget = "2M"\nseeds = "5-6"')


def test_configuration_budget_and_seeds():
    plan = _plan(CFG_BUDGETS)
    assert plan.budget_of("A").tokens == 1_000_000 and plan.budget_of("B").tokens == 2_000_000
    assert plan.seeds_for("main", "A") == [0, 1, 2] and plan.seeds_for("main", "B") == [5, 6]
    assert plan.budgets() == {"A": ("tokens", 1e6), "B": ("tokens", 2e6)}
    it = _plan(SMALL_PLAN.replace('[configurations.B]', '[configurations.B]\nbudget = { iterations = 30, eval_every = 3 }'))
    assert it.budget_of("B").iterations == 30 and it.budget_of("B").eval_interval_iterations() == 3
    assert _plan(SMALL_PLAN).budgets() == 1e6  # one shared token budget: one number, as before


@pytest.mark.parametrize("edit, message", [
    (('tokens = "1M"', 'tokens = "1M"\niterations = 10'), "exactly one of tokens"),
    (('tokens = "1M"', ''), "exactly one of tokens"),
    (('tokens = "1M"\neval_every = "B/16"', 'iterations = 10\neval_every = "100K"'), "integer number of iterations"),
    (('tokens = "1M"', 'iterations = 0'), "greater than 0"),
    (('[configurations.B]', '[configurations.B]\nrunnable = false'), "needs not_runnable"),
    (('[configurations.B]', '[configurations.B]\nrunnable = false\nnot_runnable = "  "'), "needs not_runnable"),
    (('[configurations.B]', '[configurations.B]\nnot_runnable = "x"'), "this configuration is runnable"),
    (('[configurations.B]', '[configurations.B]\nrunable = false'), "unknown key"),
    (('[configurations.B]', '[configurations.B]\nrunnable = "no"'), "valid boolean"),
    (('[configurations.B]', '[configurations.B]\nseeds = "2-1"'), "last >= first"),
    (('[configurations.B]', '[configurations.B]\nseeds = [1, 1]'), "duplicate seeds"),
    (('[configurations.B]', '[configurations.B]\nbudget = "-1M"'), "token count"),
    (('[configurations.B]', '[configurations.B]\nbudget = { iterations = 5, tokens = "1M" }'), "exactly one of tokens"),
    (('[configurations.B]', '[configurations.B]\nbudget = { iteration = 5 }'), "unknown key"),
])
def test_budget_seeds_and_runnable_are_checked(edit, message):
    with pytest.raises(PlanError, match=message):
        _plan(SMALL_PLAN.replace(*edit))


# --------------------------------------------------------------------------- launch


def _locked(tmp_path: Path, text: str) -> Path:
    study = tmp_path / "study"
    study.mkdir()
    (study / "plan.toml").write_text(text)
    lock_plan(study / "plan.toml")
    return study


def test_each_run_gets_its_configurations_budget_and_seeds(tmp_path):
    from prereg_kit.study.jobs import planned_runs
    from trainer.launch import plan_jobs

    study = _locked(tmp_path, CFG_BUDGETS)
    _, jobs = plan_jobs(study)
    got = sorted((j.configuration, j.seed, j.spec.budget_tokens, j.spec.eval_interval, j.spec.stop_tokens) for j in jobs)
    assert got == [("A", s, 1_000_000, 62_500, 1_000_000) for s in (0, 1, 2)] + \
                  [("B", s, 2_000_000, 125_000, 2_000_000) for s in (5, 6)]
    assert planned_runs(load_plan(study).plan) == [("A", 0), ("A", 1), ("A", 2), ("B", 5), ("B", 6)]
    with pytest.raises(PreregError, match="--seeds: 7"):
        plan_jobs(study, seeds=[7])


def test_an_iteration_budget_stops_after_n_iterations_and_evaluates_every_k(tmp_path):
    from trainer.core.budget import Counters, Schedule
    from trainer.launch import plan_jobs

    text = SMALL_PLAN.replace('tokens = "1M"\neval_every = "B/16"', 'iterations = 12\neval_every = 4')
    _, jobs = plan_jobs(_locked(tmp_path, text))
    spec = jobs[0].spec
    assert (spec.budget_tokens, spec.budget_iterations, spec.eval_interval) == (None, 12, 4)
    assert spec.stop_tokens is None and spec.iteration_stop == 12
    c = Counters()
    sched = Schedule(spec.eval_interval, spec.stop_tokens, spec.iteration_stop, c, by_iterations=True)
    evals = []
    for _ in range(12):
        c.iteration += 1
        if sched.eval_due(0, 10**12):  # tokens do not matter
            evals.append((c.iteration, sched.finished(10**12)))
    assert evals == [(4, False), (8, False), (12, True)]  # "B" is the evaluation after iteration 12
    assert spec.model_copy(update={"train_to": 2.0}).iteration_stop == 24


def test_a_runnable_false_configuration_is_refused_at_launch(tmp_path):
    from trainer.launch import plan_jobs

    text = SMALL_PLAN.replace('[configurations.B]', '[configurations.B]\nrunnable = false\nnot_runnable = "weights not stated"')
    with pytest.raises(PreregError, match="'B' is marked runnable = false: weights not stated"):
        plan_jobs(_locked(tmp_path, text))


# --------------------------------------------------------------------------- readings at each B


def _evals(config, seed, tokens, iterations, acc):
    return [dict(configuration=config, seed=seed, eval_index=e, iteration=it, eval_set="math", problem_id="p",
                 eval_seed=e, tokens=t, train_seconds=float(e), updates=it, samples=10, correct=round(a * 10),
                 correct_strict=round(a * 10), boxed=10, greedy_correct=pd.NA)
            for e, (t, it, a) in enumerate(zip(tokens, iterations, acc))]


def test_a_contrast_between_different_budgets_reads_each_at_its_own_b():
    rows = []
    for s in (0, 1):  # A: B = 100 tokens (its evaluation 2); B: B = 200 tokens (its evaluation 3)
        rows += _evals("A", s, [0, 60, 100, 160], [0, 1, 2, 3], [0.1, 0.2, 0.3 + s / 10, 0.9])
        rows += _evals("B", s, [0, 90, 150, 210], [0, 1, 2, 3], [0.1, 0.5, 0.6, 0.7 + s / 10])
    curves = accuracy_curve(pd.DataFrame(rows), eval_set="math")
    point = ReadingPoint("tokens").at_budget({"A": ("tokens", 100.0), "B": ("tokens", 200.0)})
    pr = paired_readings(curves, "B", "A", point)
    assert pr.table["treatment"].tolist() == pytest.approx([0.7, 0.8])
    assert pr.table["control"].tolist() == pytest.approx([0.3, 0.4])
    assert pr.table["treatment_eval_lo"].tolist() == [3, 3] and pr.table["control_eval_lo"].tolist() == [2, 2]
    # One shared B (the old reading) would read B at its evaluation 2 instead: a different answer.
    assert paired_readings(curves, "B", "A", ReadingPoint("tokens").at_budget(100.0)).table["treatment"].tolist() \
        == pytest.approx([0.6, 0.6])


def test_an_iteration_budget_is_read_at_the_first_evaluation_at_or_after_iteration_n():
    rows = _evals("A", 0, [0, 500, 900, 1500], [0, 4, 8, 12], [0.1, 0.2, 0.3, 0.4])
    curves = accuracy_curve(pd.DataFrame(rows), eval_set="math")
    r = read_at_tokens(curves, {"A": ("iteration", 8.0)}).iloc[0]
    assert (r["reached"], r["eval_lo"], r["accuracy"]) == (True, 2, pytest.approx(0.3))
    r = read_at_tokens(curves, {"A": ("iteration", 9.0)}).iloc[0]  # between evaluations: the next one
    assert r["eval_lo"] == 3
    r = read_at_tokens(curves, {"A": ("iteration", 13.0)}).iloc[0]
    assert not r["reached"] and "no evaluation at or after 13 iterations (last at 12)" in r["note"]
    two_b = ReadingPoint("tokens", 1.5).at_budget({"A": ("iteration", 8.0)})  # 1.5B = iteration 12
    assert read_at_tokens(curves, two_b.scaled).iloc[0]["eval_lo"] == 3


@pytest.mark.slow  # trains the tiny model for a few iterations
def test_a_real_run_with_an_iteration_budget_stops_at_n_and_evaluates_every_k(tmp_path):
    pytest.importorskip("torch")
    from plans import run_plan

    from prereg_kit.runlog import read_run
    from trainer.launch import plan_jobs
    from trainer.loop import train

    text = run_plan(id="it", title="Iteration budget", question="Does it stop at N?", comparator="grpo",
                    treatment="frozen", seeds="[0]", configurations="[configurations.grpo]\n[configurations.frozen]\n",
                    tokens=600, eval_every="B/4", samples=2, n_problems=4)
    text = text.replace('tokens = 600\neval_every = "B/4"', "iterations = 4\neval_every = 2")
    study = tmp_path / "study"
    study.mkdir()
    (study / "plan.toml").write_text(text)
    _, jobs = plan_jobs(study, "smoke", ["grpo"], [0])
    train(jobs[0].spec)
    run = read_run(jobs[0].spec.run_dir, strict=True)
    assert run.iterations["iteration"].tolist() == [0, 1, 2, 3]  # N = 4 iterations
    assert sorted(run.evals.groupby("eval_index")["iteration"].first().tolist()) == [0, 2, 4]
