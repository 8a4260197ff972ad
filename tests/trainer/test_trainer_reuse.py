"""The reuse variants (dense-rewards paper App. E, Table 16; trainer/interventions/reuse.py) against hand
computations, the clipped multi-step update, short real runs, and a kill-resume of the learned
critic's state (trainer/interventions/critic.py; the DenseState checkpoint)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from paths import ROOT

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch
from plans import run_plan
from test_trainer_credit import _rollouts, _tiny_policy
from test_trainer_dense import FakeTok, verifier
from test_trainer_run import _train

from trainer.config import ConfigError, TrainerConfig, parse_config
from trainer.core.credit import CreditContext
from trainer.core.engines import Rollouts
from trainer.core.policy import token_logprobs
from trainer.core.update import (
    make_optimizer,
    policy_loss,
)
from trainer.interventions import reuse
from trainer.interventions.credit_rules import compute_credit
from trainer.interventions.monte_carlo import MAX_K


# --------------------------------------------------------------------------------------------
# A hand-built group: G = 3, limit 8, cuts at 2 and 4
# --------------------------------------------------------------------------------------------
def _roll(comp: list[list[int]], lengths: list[int], prompt: list[list[int]]) -> Rollouts:
    c, p = torch.tensor(comp), torch.tensor(prompt)
    n = torch.tensor(lengths)
    cmask = (torch.arange(c.shape[1])[None, :] < n[:, None]).float()
    return Rollouts(torch.cat([p, c], 1), torch.cat([torch.ones_like(p), cmask.long()], 1), p.shape[1], cmask, n,
                    torch.zeros(len(n), dtype=torch.bool), [""] * len(n))


class FakeEngine:
    """Draw j from prefix text t succeeds iff j < successes[t]: a success is [8, 9] (2 tokens), a
    failure [8] (1 token); "9" read last means the answer 9."""

    def __init__(self, successes: dict[str, int]):
        self.successes, self.calls = successes, []

    def generate(self, prompts, *, noise_seed, keys, limit, temperature, top_p, batch_size=None):
        self.calls.append((list(prompts), noise_seed, list(keys), limit))
        ok = [k % MAX_K < self.successes.get(t, 0) for t, k in zip(prompts, keys)]
        return _roll([[8, 9] if s else [8, 0] for s in ok], [2 if s else 1 for s in ok], [[0]] * len(ok))


def _group():
    """c0: 5 tokens, wrong; c1: 3 tokens, right (ended before cut 4); c2: 2 tokens, right (ended at
    cut 2: no draws at all). p̂: c0 3/4 at 2, 1/4 at 4; c1 2/4 at 2."""
    roll = _roll([[1, 1, 1, 1, 1, 0], [2, 2, 2, 0, 0, 0], [3, 3, 0, 0, 0, 0]], [5, 3, 2], [[0, 4], [0, 5], [0, 6]])
    engine = FakeEngine({"P0|1,1,": 3, "P0|1,1,1,1,": 1, "P1|2,2,": 2})
    return roll, torch.tensor([0.0, 1.0, 1.0]), engine


def _ctx(cfg, roll, engine):
    return dict(cfg=cfg, engine=engine, policy=type("P", (), {"tokenizer": FakeTok()})(), rollouts=roll,
                prompts=["P0|", "P1|", "P2|"], answers=["9"] * 3, iteration=3, seed=7, verifier=verifier)


def _cfg(**kw):
    return TrainerConfig(**{"completion_limit": 8, "mc_cuts": [2, 4], "mc_k": 4, "group_size": 3, **kw})


def test_vineppo_value_differences_by_hand():
    roll, rewards, engine = _group()
    cfg = _cfg(credit="vineppo")
    out = compute_credit("vineppo", CreditContext.of(rewards, roll.completion_mask, group_size=3, eps=1e-6, **_ctx(cfg, roll, engine)))
    # V(prompt) leave-one-out: c0 (1+1)/2 = 1, c1 (0+1)/2 = .5, c2 .5
    assert torch.allclose(reuse.leave_one_out_mean(rewards, 3), torch.tensor([1.0, 0.5, 0.5], dtype=torch.float64))
    # c0: 1 → .75 → .25 → R = 0: −.25 on [0,2), −.5 on [2,4), −.25 on [4,5)
    # c1: .5 → .5 → ended at 4: V = R = 1: 0 on [0,2), +.5 on [2,3)
    # c2: .5 → ended at 2: V = R = 1: +.5 on [0,2)
    want = torch.tensor([[-0.25, -0.25, -0.5, -0.5, -0.25, 0], [0, 0, 0.5, 0, 0, 0], [0.5, 0.5, 0, 0, 0, 0]])
    assert torch.allclose(out.tokens, want, atol=1e-6)  # no group advantage added, not normalized
    assert torch.allclose(out.advantages, torch.tensor([-1.0, 0.5, 0.5]))  # segments sum to R − V(prompt)
    assert out.continuation_tokens == 7 + 6 + 5  # charged as the Monte-Carlo reward's: 2-token successes, 1-token failures
    assert [c[1] for c in engine.calls] == [reuse.derive_seed(7, 3, "mc/2"), reuse.derive_seed(7, 3, "mc/4")]


def test_reuse_configs_are_validated():
    for bad in [dict(credit="vineppo", group_size=1, prompts_per_iteration=2),
                dict(credit="vineppo", mc_end_value="none"),
                dict(credit="continuation_reuse", mc_k=1),
                dict(credit="continuation_reuse", length_lambda=0.1),
                dict(ppo_minibatches=65), dict(ppo_clip=1.0)]:
        with pytest.raises(ConfigError):
            parse_config(bad)
    assert reuse.steps_per_iteration(TrainerConfig(ppo_epochs=2, ppo_minibatches=2)) == 4
    assert not reuse.uses_reuse_update(TrainerConfig(credit="vineppo", ppo_clip=0.2))  # one step: update_step


def test_clipped_objective_gradient_is_zero_where_the_clip_binds():
    # tokens: (c, ρ) = (+1, 1.5) clip binds; (−1, 0.5) binds; (+1, 0.5) and (−1, 1.5) do not; (+1, 1.1) inside
    credit = torch.tensor([[1.0, -1.0, 1.0], [-1.0, 1.0, 0.0]])
    ratio = torch.tensor([[1.5, 0.5, 0.5], [1.5, 1.1, 1.0]])
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    old = torch.full((2, 3), -1.0)
    logp = (old + ratio.log()).requires_grad_(True)
    loss, binds = reuse.clipped_loss(logp, old, credit, mask, clip=0.2, n=2)
    (g,) = torch.autograd.grad(loss, logp)
    # d/dlogp of −ρc/n is −ρc/n where unclipped; 0 where the clip binds or off the mask
    want = torch.tensor([[0.0, 0.0, -0.5 / 2], [1.5 / 2, -1.1 / 2, 0.0]])
    assert torch.allclose(g, want, atol=1e-6)
    assert binds.tolist() == [[True, True, False], [False, False, False]]
    # ρ = 1: the same gradient as the on-policy loss (−c/n per token)
    lp = old.clone().requires_grad_(True)
    (g1,) = torch.autograd.grad(reuse.clipped_loss(lp, old, credit, mask, 0.2, 2)[0], lp)
    lp2 = old.clone().requires_grad_(True)
    (g2,) = torch.autograd.grad(policy_loss(lp2, credit, mask, 2), lp2)
    assert torch.allclose(g1, g2)


def test_four_clipped_steps_per_iteration():
    pol, roll = _tiny_policy(), _rollouts()
    pol.cfg = TrainerConfig(learning_rate=1e-2, ppo_epochs=2, ppo_minibatches=2, ppo_clip=0.2)
    opt = make_optimizer(pol)
    steps = []
    step = opt.step
    opt.step = lambda *a, **k: (steps.append(1), step(*a, **k))[1]
    before = [p.detach().clone() for p in pol.model.parameters()]
    credit = torch.tensor([1.5, -0.5, 0.0, 2.0])[:, None] * roll.completion_mask
    stats = reuse.reuse_update(pol, opt, roll, reuse.Credit(credit, credit[:, 0]), 1e-2, seed=0, iteration=0)
    assert len(steps) == 4 and 0 <= stats["clip_fraction"] <= 1 and stats["reuse_sequences"] == 0
    assert any(not torch.equal(a, b) for a, b in zip(before, pol.model.parameters()))
    p0 = next(pol.model.parameters())
    zero = torch.zeros_like(credit)  # uniform groups: still 4 (momentum-only) Adam steps, as update_step takes one
    reuse.reuse_update(pol, opt, roll, reuse.Credit(zero, zero[:, 0]), 1e-2, seed=0, iteration=1)
    assert len(steps) == 8 and int(opt.state[p0]["step"]) == 8
    parts = reuse.minibatch_order(4, 2, 2, seed=0, iteration=0)
    assert [len(p) for p in parts] == [2, 2, 2, 2]
    assert sorted(parts[0].tolist() + parts[1].tolist()) == [0, 1, 2, 3] == sorted(parts[2].tolist() + parts[3].tolist())


def test_continuation_reuse_by_hand():
    roll, rewards, engine = _group()
    cfg = _cfg(credit="continuation_reuse")
    out = compute_credit("continuation_reuse", CreditContext.of(rewards, roll.completion_mask, group_size=3, eps=1e-6,
                         **_ctx(cfg, roll, engine)))
    mc = compute_credit("monte_carlo", CreditContext.of(rewards, roll.completion_mask, group_size=3, eps=1e-6,
                        **_ctx(_cfg(), roll, FakeEngine(engine.successes))))
    assert torch.equal(out.tokens, mc.tokens)  # the rollouts keep the Monte-Carlo reward
    cut2, cut4 = out.sequences
    # leave-one-out among the 4 draws: [1,1,1,0] → 1/3 ×3, −1; [1,1,0,0] → 2/3, 2/3, −2/3, −2/3; [1,0,0,0] → 1, −1/3 ×3
    adv2 = torch.tensor([1 / 3, 1 / 3, 1 / 3, -1, 2 / 3, 2 / 3, -2 / 3, -2 / 3])
    adv4 = torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3])
    assert torch.allclose(reuse.leave_one_out_advantages(torch.tensor([[1.0, 1, 1, 0]])).float(), adv2[None, :4])
    for batch, cut, parents, adv in [(cut2, 2, [0] * 4 + [1] * 4, adv2), (cut4, 4, [0] * 4, adv4)]:
        P = roll.prompt_len + cut
        assert batch.prompt_len == P  # the prefix is context: no credit column exists for it
        assert torch.equal(batch.sequences[:, :P], roll.sequences[parents, :P])  # the parent's own prompt + prefix
        assert torch.allclose(batch.credit, adv[:, None] * batch.completion_mask, atol=1e-6)
        assert batch.completion_mask.sum(1).tolist() == [2.0 if a > 0 else 1.0 for a in adv]
    # continuation tokens: counted once, as generated; the sequences train on exactly those tokens
    trained = sum(int(b.completion_mask.sum()) for b in out.sequences)
    assert out.continuation_tokens == mc.continuation_tokens == trained == (3 * 2 + 1) + (2 * 2 + 2) + (2 + 3)


def test_continuation_reuse_loss_is_divided_by_rollouts_plus_continuations():
    pol, roll = _tiny_policy(), _rollouts()
    pol.cfg = TrainerConfig(learning_rate=1e-2, credit="continuation_reuse", mc_k=2, micro_batch_size=3)
    credit = torch.tensor([1.0, -1.0, 0.0, 0.5])[:, None] * roll.completion_mask
    cont = _roll([[5, 6], [7, 0]], [2, 1], [[0, 1]] * 2)
    seqs = reuse.continuation_batch(roll, 1, torch.tensor([0, 3]), cont, torch.tensor([0.5, -0.5]))
    with torch.no_grad():
        lp = token_logprobs(pol, roll.sequences, roll.attention_mask, roll.prompt_len)
        lc = token_logprobs(pol, seqs.sequences, seqs.attention_mask, seqs.prompt_len)
    want = -((credit * lp).sum() + (seqs.credit * lc * seqs.completion_mask).sum()) / (4 + 2)
    stats = reuse.reuse_update(pol, make_optimizer(pol), roll, reuse.ReuseCredit(credit, credit[:, 0], 3, [seqs]),
                               1e-2, seed=0, iteration=0)
    assert stats["loss"] == pytest.approx(float(want), rel=1e-5) and stats["reuse_sequences"] == 2


# --------------------------------------------------------------------------------------------
# Short real runs: every new configuration, and a kill-resume of the learned critic
# --------------------------------------------------------------------------------------------
PLAN = run_plan(
    id="tiny-reuse", title="Reuse variants on a tiny model", question="Do the reuse configurations run?",
    comparator="monte_carlo", treatment="vineppo4", recipe="mc_k = 2\ncritic_start_iteration = 1\n",
    configurations="""\
[configurations.monte_carlo]
overrides = { credit = "monte_carlo" }
[configurations.vineppo]
overrides = { credit = "vineppo" }
[configurations.vineppo4]
overrides = { credit = "vineppo", ppo_epochs = 2, ppo_minibatches = 2, ppo_clip = 0.2 }
[configurations.reuse]
overrides = { credit = "continuation_reuse" }
[configurations.critic_td]
overrides = { credit = "critic_td", checkpoint_every = 2, keep_checkpoint = true }
""", tokens=2000, eval_every="B/1", samples=1, n_problems=4, stages=False)


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    from prereg_kit.chain.lock import lock_plan

    d = tmp_path_factory.mktemp("reuse") / "study"
    d.mkdir()
    (d / "plan.toml").write_text(PLAN)
    lock_plan(d / "plan.toml")
    return d


@pytest.mark.slow  # trains the tiny model
def test_short_runs_of_the_reuse_configurations_write_valid_run_logs(study):
    from prereg_kit.runlog import load_study
    from trainer.launch import plan_jobs

    _, jobs = plan_jobs(study, "main", ["monte_carlo", "vineppo", "vineppo4", "reuse"], [0])
    for job in jobs:
        _train(job.spec)
    runs = load_study(study, progress=False, strict=True)
    assert not runs.problems and set(runs.meta["status"]) == {"complete"}
    it = {name: df.reset_index(drop=True) for name, df in runs.iterations.groupby("configuration")}
    n = {k: len(v) for k, v in it.items()}
    assert it["vineppo4"]["updates"].tolist() == [4 * (i + 1) for i in range(n["vineppo4"])]  # 4 steps per batch
    assert it["vineppo"]["updates"].tolist() == list(range(1, n["vineppo"] + 1))
    assert (it["vineppo4"]["clip_fraction"].between(0, 1)).all()
    ev = runs.evals[runs.evals["configuration"] == "vineppo4"]
    assert ev.groupby("eval_index")["updates"].first().tolist()[-1] == it["vineppo4"]["updates"].iloc[-1]
    # iteration 0: same policy, same draws → the same rollout and continuation tokens; reuse trains on them
    # without generating more (tokens counted once, as continuations)
    for k in ("vineppo", "vineppo4", "reuse"):
        for col in ("tokens_rollout", "tokens_continuation"):
            assert it[k][col].iloc[0] == it["monte_carlo"][col].iloc[0], (k, col)
    assert (it["reuse"]["reuse_sequences"] > 0).all() and (it["reuse"]["tokens_continuation"] > 0).all()


def _rows(folder):
    from prereg_kit.runlog import read_run

    run = read_run(folder)
    it = run.iterations.drop(columns=[c for c in run.iterations.columns if "seconds" in c])
    return it, run.evals.drop(columns=["train_seconds"]), run


def _critic(folder) -> list:
    state = torch.load(Path(folder) / "checkpoint" / "checkpoint.pt", map_location="cpu", weights_only=False)
    return state["extra"]["dense"]["critic"]["entries"]


@pytest.mark.slow  # trains the tiny model
def test_learned_critic_state_survives_a_kill_and_resume(study, tmp_path):
    from trainer.launch import plan_jobs

    _, jobs = plan_jobs(study, "main", ["critic_td"], [0])
    ref = jobs[0].spec.model_copy(update={"run_dir": str(tmp_path / "ref")})
    _train(ref)
    spec = jobs[0].spec.model_copy(update={"run_dir": str(tmp_path / "killed")})
    Path(spec.run_dir).mkdir(parents=True)
    spec.save(Path(spec.run_dir) / "spec.json")
    proc = subprocess.Popen([sys.executable, "-m", "trainer", str(Path(spec.run_dir) / "spec.json")],
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    rows = Path(spec.run_dir) / "iterations.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:  # past iteration 3: the critic is in use
        if rows.exists() and rows.read_bytes().count(b"\n") >= 3:
            break
        time.sleep(0.002)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    _train(spec)  # resumes from the last checkpoint (every 2 iterations), critic buffer included
    it_ref, ev_ref, _ = _rows(ref.run_dir)
    it, ev, run = _rows(spec.run_dir)
    resumes = run.meta.model_extra["resumes"]
    assert len(resumes) == 1 and resumes[0]["at_iteration"] >= 2  # resumed mid-run, with a buffer to restore
    assert it.equals(it_ref) and ev.equals(ev_ref) and not run.problems
    a, b = _critic(ref.run_dir), _critic(spec.run_dir)
    assert [e[0] for e in a] == [e[0] for e in b] == list(range(len(it)))
    assert all(torch.equal(x, y) and torch.equal(u, v) for (_, x, u), (_, y, v) in zip(a, b))
