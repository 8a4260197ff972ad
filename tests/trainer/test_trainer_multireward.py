"""Multi-reward wiring: recipe fields, per-iteration rewards and advantages, evaluation
counts, Lagrangian state through checkpoints, the additive_kl penalty, and a tiny real run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch
from plans import run_plan

from trainer.config import ConfigError, TrainerConfig, parse_config
from trainer.core.credit import CreditContext
from trainer.core.credit import group_advantages as eq1
from trainer.core.evaluate import eval_channel_counts, eval_channels
from trainer.core.reward_step import (
    make_rewarder,
    state_from_dict,
    state_to_dict,
)
from trainer.data.problems import Problem
from trainer.data.verifiers import get_verifier
from trainer.interventions.credit_rules import compute_credit
from trainer.rewards.aggregation import LagrangeState


def _problems(answers):
    return [Problem(f"p{i}", f"Compute {a}.", str(a)) for i, a in enumerate(answers)]


def _box(x):
    return f"so \\boxed{{{x}}}"


# group 0 (gold 5): correct, correct-negative impossible, negative wrong, wrong
# group 1 (gold -3): correct-and-negative, wrong positive, negative wrong, correct-and-negative
TEXTS = [_box(5), _box(5), _box(-2), _box(4), _box(-3), _box(7), _box(-9), _box(-3)]
LENGTHS = [10, 12, 8, 30, 5, 6, 7, 8]
PROBS = [p for p in _problems([5, -3]) for _ in range(4)]


def test_recipe_fields_validate_in_one_line():
    cfg = parse_config({"channels": ["correct", {"name": "brief", "threshold": 9}], "aggregation": {"rule": "tag"},
                        "anchor": "brief"})
    assert cfg.rewards.anchor == "brief" and cfg.rewards.channels[1] == {"name": "brief", "threshold": 9}
    assert TrainerConfig().rewards.channels == [] and TrainerConfig().rewards.aggregation == {} and TrainerConfig().rewards.anchor == ""
    bad = [({"channels": ["nope"]}, "unknown channel"),
           ({"channels": ["correct"], "anchor": "brief"}, "not one of the channels"),
           ({"channels": ["correct", "negative"], "aggregation": {"rule": "sum"}}, "aggregation: rule"),
           ({"channels": ["correct", "negative"], "aggregation": {"rule": "weighted", "weights": [1.0]}}, "2 weights"),
           ({"aggregation": {"rule": "tag"}}, "need rewards.channels"),
           ({"channels": ["correct", "correct"]}, "twice"),
           ({"channels": ["program_correct"]}, "needs task.name = 'code'")]
    for data, msg in bad:
        with pytest.raises(ConfigError) as e:
            parse_config(data)
        assert len(e.value.lines) == 1 and msg in e.value.lines[0], (data, e.value.lines)


def _run(cfg_data, state=None, rng=None):
    cfg = parse_config(cfg_data)
    rw = make_rewarder(cfg)
    return rw, rw(get_verifier("default"), TEXTS, LENGTHS, PROBS, 4, state=state,
                  rng=rng or np.random.default_rng(0), l_max=40, eps=1e-6)


def test_verifier_only_and_primary_give_eq1_advantages():
    rw, res = _run({})
    assert not rw.multi and res.advantages is None and res.log == {}
    assert res.rewards.tolist() == [1, 1, 0, 0, 1, 0, 0, 1]
    _, prim = _run({"channels": ["correct"], "aggregation": {"rule": "primary"}})
    torch.testing.assert_close(prim.advantages, eq1(res.rewards, 4, 1e-6), rtol=1e-6, atol=1e-7)
    assert prim.log["channel/correct"] == 0.5 and prim.log["mixed_share"] == 1.0
    # the credit rule uses the given advantages
    mask = torch.ones(8, 3)
    cr = compute_credit("outcome", CreditContext.of(prim.rewards, mask, group_size=4, eps=1e-6, advantages=prim.advantages))
    torch.testing.assert_close(cr.tokens[:, 0], prim.advantages)


def test_additive_tag_and_elected_anchor(tmp_path):
    _, add = _run({"channels": ["correct", "negative"], "aggregation": {"rule": "additive"}})
    assert add.rewards.tolist() == [0.5, 0.5, 0.5, 0.0, 1.0, 0.0, 0.5, 1.0]
    assert add.log["channel/negative"] == 0.5 and add.log["shaped_reward"] == pytest.approx(0.5)
    _, tag = _run({"channels": ["correct", "negative"], "aggregation": {"rule": "tag", "lam": 1.0}})
    assert tag.rewards.tolist() == [0.5, 0.5, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0]
    # anchor by name: the negative channel as the anchor of TAG
    _, neg = _run({"channels": ["correct", "negative"], "aggregation": {"rule": "tag"}, "anchor": "negative"})
    assert neg.rewards.tolist() == [0.0, 0.0, 0.5, 0.0, 1.0, 0.0, 0.5, 1.0]
    cfg = parse_config({"channels": ["correct", "negative"], "aggregation": {"rule": "tag"}, "anchor": "elected"})
    with pytest.raises(ConfigError, match="prereg elect"):
        make_rewarder(cfg, tmp_path)
    (tmp_path / "election.json").write_text(json.dumps({"elected": "correct"}))
    rw = make_rewarder(cfg, tmp_path)
    assert rw.agg.anchor == 0 and rw.anchor_name == "correct"
    (tmp_path / "election.json").write_text(json.dumps({"elected": "brief"}))
    with pytest.raises(ConfigError, match="not one of"):
        make_rewarder(cfg, tmp_path)


def test_rules_with_advantages_state_and_rng():
    data = {"channels": ["correct", "negative"]}
    _, mo = _run({**data, "aggregation": {"rule": "mo_grpo"}})
    assert mo.rewards.tolist() == [1, 1, 0, 0, 1, 0, 0, 1]  # no scalar: the anchor channel is logged
    assert "shaped_reward" not in mo.log
    _, dr = _run({**data, "aggregation": {"rule": "dr_grpo"}})
    want = (np.array([0.5, 0.5, 0.5, 0.0]) - 0.375) * np.array(LENGTHS[:4]) / 40
    assert dr.advantages[:4].tolist() == pytest.approx(want.tolist(), rel=1e-6)
    _, d1 = _run({**data, "aggregation": {"rule": "dropout"}}, rng=np.random.default_rng(3))
    _, d2 = _run({**data, "aggregation": {"rule": "dropout"}}, rng=np.random.default_rng(3))
    assert d1.rewards.tolist() == d2.rewards.tolist()
    _, lg = _run({**data, "aggregation": {"rule": "lagrangian"}})
    assert isinstance(lg.state, LagrangeState) and lg.log["lagrange/nu/negative"] == 0.5
    assert lg.state.nu == (pytest.approx(0.5 + 0.05 * (0.5 - 0.5)),)
    d = state_to_dict(LagrangeState(nu=(0.3,), steps=4))
    assert state_from_dict(json.loads(json.dumps(d))) == LagrangeState(nu=(0.3,), steps=4)
    assert state_to_dict(None) is None and state_from_dict(None) is None
    _, lg2 = _run({**data, "aggregation": {"rule": "lagrangian"}}, state=LagrangeState(nu=(0.3,), steps=4))
    assert lg2.log["lagrange/nu/negative"] == 0.3 and lg2.state.steps == 5


def test_eval_channel_counts():
    cfg = parse_config({"channels": ["correct", {"name": "brief", "threshold": 9}]})
    chans = eval_channels(cfg)
    assert [c.name for c in chans] == ["brief", "negative"]
    assert [c.name for c in eval_channels(TrainerConfig())] == ["negative"]
    p = _problems([-3])[0]
    texts = [_box(-3), _box(-4), _box(3), "none"]
    ok = [True, False, False, False]
    row = eval_channel_counts(chans, texts, [5, 12, 8, 20], p, ok)
    assert row == {"ch_brief": 2, "ch_correct_brief": 1, "ch_negative": 2, "ch_correct_negative": 1}


def test_checkpoint_extra_round_trip(tmp_path):
    from trainer.core.budget import Counters
    from trainer.core.checkpoint import load_checkpoint, save_checkpoint

    model = torch.nn.Linear(2, 2)
    opt = torch.optim.Adam(model.parameters())
    save_checkpoint(tmp_path, model, opt, Counters(), extra={"reward_state": state_to_dict(LagrangeState(nu=(0.2,)))})
    extra: dict = {}
    assert load_checkpoint(tmp_path, model, opt, extra=extra) is not None
    assert state_from_dict(extra["reward_state"]).nu == (0.2,)
    save_checkpoint(tmp_path, model, opt, Counters())  # the old call still works
    assert load_checkpoint(tmp_path, model, opt) is not None


def test_kl_penalty_to_reference():
    from test_trainer_credit import _rollouts, _tiny_policy

    from trainer.core.credit import token_credit
    from trainer.core.update import make_optimizer, update_step

    roll = _rollouts()
    credit = token_credit(torch.tensor([1.0, -1.0, 0.5, -0.5]), roll.completion_mask)
    grads = []
    for beta in (0.0, 1.0):
        pol, ref = _tiny_policy(), _tiny_policy()  # same init: KL 0, and so no gradient from it
        stats = update_step(pol, make_optimizer(pol), roll, credit, lr=1e-2, ref=ref, kl_beta=beta)
        grads.append([p.grad.clone() for p in pol.model.parameters()])
        assert ("kl" in stats) == (beta > 0)
    assert stats["kl"] == pytest.approx(0.0, abs=1e-7)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    pol, ref = _tiny_policy(), _tiny_policy()
    with torch.no_grad():
        for p in ref.model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    stats = update_step(pol, make_optimizer(pol), roll, credit, lr=1e-2, ref=ref, kl_beta=1.0)
    assert stats["kl"] > 0


def _plan(rule: str, tokens: int) -> str:
    return run_plan(
        id="tinymr", title="Tiny multi-reward test", question="Does the wiring run?", comparator="additive",
        treatment="tag", task_levels="[1, 2]", recipe='channels = ["correct", "negative"]\n',
        configurations=f"""\
[configurations.additive]
overrides = {{ aggregation = {{ rule = "{rule}" }} }}
[configurations.tag]
overrides = {{ aggregation = {{ rule = "tag" }}, anchor = "elected" }}
""", tokens=tokens, eval_every="B/2", samples=4, n_problems=4, smoke_configurations='["additive"]')


@pytest.fixture(scope="module")
def mr_cache(trainer_cache) -> Path:
    return trainer_cache  # conftest: shared with the other modules that train (its warm start has a key of its own)


def mr_study(tmp_path: Path, cache: Path, rule: str = "lagrangian", tokens: int = 300) -> Path:
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(_plan(rule, tokens))
    (d / ".cache").symlink_to(cache, target_is_directory=True)
    return d


@pytest.mark.slow  # trains the tiny model
def test_tiny_multireward_run_logs_channels(tmp_path, mr_cache):
    from prereg_kit.runlog import read_run
    from trainer.config import updated
    from trainer.launch import plan_jobs
    from trainer.loop import train

    study = mr_study(tmp_path, mr_cache)
    _, jobs = plan_jobs(study, "smoke", ["additive"], [0])
    spec = jobs[0].spec.model_copy(update={"config": updated(jobs[0].spec.config, {"engine": {"keep_checkpoint": True}})})
    threads = torch.get_num_threads()
    try:
        train(spec)
    finally:
        torch.set_num_threads(threads)
    run = read_run(spec.run_dir, strict=True)
    it, ev = run.iterations, run.evals
    assert not run.problems and run.meta.status == "complete"
    for col in ("channel/correct", "channel/negative", "shaped_reward", "lagrange/nu/negative", "lagrange/nu_next/negative"):
        assert col in it.columns and it[col].notna().all(), col
    nu = it["lagrange/nu/negative"].to_numpy()
    assert nu[0] == 0.5 and np.allclose(nu[1:], it["lagrange/nu_next/negative"].to_numpy()[:-1])
    assert {"ch_negative", "ch_correct_negative"} <= set(ev.columns)
    assert (ev["ch_negative"] <= ev["samples"]).all() and (ev["ch_correct_negative"] <= ev["correct"]).all()
    # the last checkpoint carries ν for a resume
    extra: dict = {}
    from trainer.core.checkpoint import checkpoint_path

    state = torch.load(checkpoint_path(spec.run_dir), map_location="cpu", weights_only=False)
    extra = state["extra"]["reward_state"]
    assert extra["kind"] == "lagrange" and extra["nu"][0] == pytest.approx(it["lagrange/nu_next/negative"].iloc[-1])
