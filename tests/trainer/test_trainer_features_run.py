"""Real runs of the tiny model with the features the papers ran: the calibration stage through
`prereg run` (budget written as an amendment), REINFORCE-LOO with the clip-higher multi-step update
on the code recipe's 32 × 8 batch, and the frozen PRM as a state-only baseline."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch
from plans import run_plan
from typer.testing import CliRunner

from prereg_kit.chain.lock import lock_plan, read_chain
from prereg_kit.cli import app
from prereg_kit.plan import load_plan
from prereg_kit.runlog import read_run
from trainer.launch import plan_jobs

STAGES = """
[[stages]]
name = "calibration"
configurations = ["mc"]
seeds = [0]

[[stages]]
name = "smoke"
seeds = [0]

[[stages]]
name = "main"
"""


def _study(tmp_path: Path, cache: Path, configurations: str, recipe: str = "") -> Path:
    d = tmp_path / "study"
    d.mkdir()
    text = run_plan(id="feat", title="Features", question="Do they run?", comparator="grpo", treatment="mc",
                    seeds="[0]", configurations=configurations, tokens=100_000, eval_every="B/2", samples=1,
                    n_problems=4, stages=False, recipe=recipe)
    (d / "plan.toml").write_text(text + STAGES)
    (d / ".cache").symlink_to(cache, target_is_directory=True)
    return d


@pytest.fixture(scope="module")
def cache(trainer_cache) -> Path:
    return trainer_cache  # conftest: one warm start per worker, shared with the other modules that train


def _train(spec):
    from trainer.loop import train

    threads = torch.get_num_threads()
    try:
        return train(spec)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow  # trains the tiny model
def test_calibration_stage_through_prereg_run_amends_the_budget(tmp_path, cache):
    d = _study(tmp_path, cache, '[configurations.grpo]\n[configurations.mc]\noverrides = { credit = "monte_carlo", mc_k = 2 }\n')
    lock_plan(d)
    res = CliRunner().invoke(app, ["run", str(d), "--stage", "calibration"])
    assert res.exit_code == 0, res.output
    log = read_run(d / "stages" / "calibration" / "mc" / "seed-0", strict=True)
    assert log.iterations["iteration"].tolist() == [0, 1, 2]  # the trainer stops after iterations 0-2
    mean = log.iterations["tokens_total"].sum() / 3
    assert log.iterations["tokens_continuation"].sum() > 0  # the Monte-Carlo reward's continuations count
    b = -(-48 * int(log.iterations["tokens_total"].sum()) // (3 * 250_000)) * 250_000
    assert load_plan(d).plan.budget.tokens == b
    assert f"rounded up to 250,000 = {b:,}" in res.output and "amendment 1 recorded" in res.output
    assert f"{mean:,.1f}" in read_chain(d).last["reason"]


@pytest.mark.slow  # trains the tiny model: 2 iterations of 32 prompts × 8 completions
def test_rloo_with_clip_higher_on_the_code_recipes_batch(tmp_path, cache):
    d = _study(tmp_path, cache, "[configurations.grpo]\n[configurations.mc]\noverrides = { credit.rule = \"rloo\", "
               "rollout = { prompts_per_iteration = 32, group_size = 8 }, "
               "update = { ppo_clip = [0.2, 0.28], ppo_epochs = 2, ppo_minibatches = 2 } }\n")
    _, jobs = plan_jobs(d, "smoke", ["mc"], [0])
    spec = jobs[0].spec.model_copy(update={"stop_iterations": 2})  # a run limited by its iterations
    assert spec.config.update.clip_range == (0.2, 0.28)
    _train(spec)
    it = read_run(spec.run_dir, strict=True).iterations
    assert it["iteration"].tolist() == [0, 1] and it["updates"].tolist() == [4, 8]  # 2 epochs × 2 minibatches
    assert (it["tokens_rollout"] <= 256 * 24).all() and (it["tokens_rollout"] >= 256).all()


@pytest.mark.slow  # trains the tiny model with a tiny frozen PRM
def test_prm_baseline_run_with_a_local_prm(tmp_path, cache):
    from test_trainer_baselines import _tiny_prm

    d = _study(tmp_path, cache, '[configurations.grpo]\n[configurations.mc]\noverrides = { credit.rule = "prm_baseline", '
               'credit.prm_model = "prm" }\n')
    _tiny_prm(d / "prm")
    _, jobs = plan_jobs(d, "smoke", ["mc"], [0])
    spec = jobs[0].spec.model_copy(update={"stop_iterations": 2})
    _train(spec)
    log = read_run(spec.run_dir, strict=True)
    assert log.meta.status == "complete" and log.iterations["tokens_continuation"].sum() == 0  # the PRM generates nothing
