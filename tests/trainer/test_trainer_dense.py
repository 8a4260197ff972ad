"""Dense rewards against hand computations on hand-built groups (dense-rewards paper §C.1 "Monte-Carlo reward" and "Length reward", App. G;
trainer/interventions/monte_carlo.py), continuation accounting, and a short real run of every credit configuration."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch
from plans import run_plan

from trainer.config import TrainerConfig, derive_seed
from trainer.core.credit import (
    CreditContext,
    group_advantages,
)
from trainer.interventions import equal_iteration, length, segments
from trainer.interventions.credit_rules import compute_credit
from trainer.interventions.monte_carlo import MAX_K
from trainer.interventions.state import DenseState


# --------------------------------------------------------------------------------------------
# Fakes: a tokenizer that writes ids as "i,", an engine whose continuations succeed by a table
# --------------------------------------------------------------------------------------------
class FakeTok:
    def decode(self, ids, skip_special_tokens=False):
        return "".join(f"{i}," for i in ids)

    def batch_decode(self, rows, skip_special_tokens=True):
        return [self.decode(r) for r in rows]


@dataclass
class FakeRoll:
    completion_ids: torch.Tensor
    lengths: torch.Tensor

    @property
    def n(self):
        return int(self.lengths.shape[0])

    @property
    def tokens(self):
        return int(self.lengths.sum())


class FakeEngine:
    """Continuation j from prefix text t succeeds (ends with token 9) iff j < successes[t]; it is
    ``run_to_limit`` tokens long (all of its limit) or 1 token."""

    def __init__(self, successes: dict[str, int], run_to_limit: bool = False):
        self.successes, self.run_to_limit, self.calls = successes, run_to_limit, []

    def generate(self, prompts, *, noise_seed, keys, limit, temperature, top_p, batch_size=None):
        self.calls.append((list(prompts), noise_seed, list(keys), limit))
        n = len(prompts)
        width = limit if self.run_to_limit else 1
        ids = torch.full((n, width), 8)
        for r, (t, k) in enumerate(zip(prompts, keys)):
            if k % MAX_K < self.successes.get(t, 0):
                ids[r, -1] = 9
        return FakeRoll(ids, torch.full((n,), width))


def verifier(text, answer):
    return text.endswith(f"{answer},")


def _group():
    """G = 2: completion 0 is 5 tokens long and wrong, completion 1 is 3 tokens long and right.
    Cuts at 2 and 4 (limit 6): completion 1 has ended before the cut at 4."""
    comp = torch.tensor([[1, 1, 1, 1, 1, 0], [2, 2, 2, 0, 0, 0]])
    lengths = torch.tensor([5, 3])
    mask = (torch.arange(6)[None, :] < lengths[:, None]).float()
    rewards = torch.tensor([0.0, 1.0])
    # p̂ of completion 0: 3/4 at cut 2 (above p̂_0 = 1/2), 1/4 at cut 4; completion 1: 2/4 at cut 2.
    engine = FakeEngine({"P0|1,1,": 3, "P0|1,1,1,1,": 1, "P1|2,2,": 2})
    return FakeRoll(comp, lengths), mask, rewards, engine


def _ctx(cfg, roll, engine, **kw):
    return dict(cfg=cfg, engine=engine, policy=type("P", (), {"tokenizer": FakeTok()})(), rollouts=roll,
                prompts=["P0|", "P1|"], answers=["9", "9"], iteration=3, seed=7, verifier=verifier, **kw)


def _cfg(**kw):
    return TrainerConfig(**{"completion_limit": 6, "mc_cuts": [2, 4], "mc_k": 4, **kw})


A = group_advantages(torch.tensor([0.0, 1.0]), 2, 1e-6)  # ≈ [−1, +1]


def test_cut_offsets_rule():
    assert segments.cut_offsets(TrainerConfig(completion_limit=768)) == [128, 256, 384, 512, 640]  # the paper's
    assert segments.cut_offsets(TrainerConfig(completion_limit=380)) == [63, 127, 190, 253, 317]
    assert segments.cut_offsets(TrainerConfig(completion_limit=40)) == [7, 13, 20, 27, 33]
    assert segments.cut_offsets(TrainerConfig(completion_limit=40, mc_segments=4)) == [10, 20, 30]
    assert segments.cut_offsets(_cfg()) == [2, 4]
    with pytest.raises(ValueError):
        TrainerConfig(completion_limit=6, mc_cuts=[4, 2])


def test_monte_carlo_credit_by_hand():
    roll, mask, rewards, engine = _group()
    out = compute_credit("monte_carlo", CreditContext.of(rewards, mask, group_size=2, eps=1e-6, **_ctx(_cfg(), roll, engine)))
    # values c0: p̂_0 = .5, .75, .25, R = 0 → segments +.25, −.5, −.25 on tokens [0,2), [2,4), [4,5)
    # values c1: .5, .5, then ended (R = 1) → segments 0, +.5 on tokens [0,2), [2,3)
    w = torch.tensor([[0.25, 0.25, -0.5, -0.5, -0.25, 0], [0, 0, 0.5, 0, 0, 0]])
    want = A[:, None] * mask + w
    assert torch.allclose(out.tokens, want, atol=1e-5)
    assert out.tokens[0, 0] - A[0] > 0  # the prefix's continuations beat its parent's value: positive credit
    # 4 draws at each cut inside a completion: 2 cuts in c0, 1 in c1 → 12 one-token continuations
    assert out.continuation_tokens == 12
    prompts, seed0, keys, limit = engine.calls[0]
    assert seed0 == derive_seed(7, 3, "mc/2") and keys == [0, 1, 2, 3, MAX_K, MAX_K + 1, MAX_K + 2, MAX_K + 3]
    assert limit == 4 and engine.calls[1][3] == 2  # the rest of the completion limit
    assert [c[0] for c in engine.calls][1] == ["P0|1,1,1,1,"] * 4  # c1 ended before cut 4: no draws


def test_monte_carlo_end_value_none_gives_no_credit_to_the_last_segment():
    roll, mask, rewards, engine = _group()
    out = compute_credit("monte_carlo", CreditContext.of(rewards, mask, group_size=2, eps=1e-6,
                         **_ctx(_cfg(mc_end_value="none"), roll, engine)))
    w = torch.tensor([[0.25, 0.25, -0.5, -0.5, 0, 0], [0, 0, 0, 0, 0, 0]])
    assert torch.allclose(out.tokens, A[:, None] * mask + w, atol=1e-5)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_continuation_tokens_against_k_and_cut_positions(k):
    roll, mask, rewards, _ = _group()
    engine = FakeEngine({}, run_to_limit=True)  # every continuation uses the rest of the limit
    out = compute_credit("monte_carlo", CreditContext.of(rewards, mask, group_size=2, eps=1e-6,
                         **_ctx(_cfg(mc_k=k), roll, engine)))
    # c0 (5 tokens): cuts 2 and 4 → (6−2) + (6−4); c1 (3 tokens): cut 2 only → 6−2
    assert out.continuation_tokens == k * ((6 - 2) + (6 - 4) + (6 - 2))
    share = out.continuation_tokens / (out.continuation_tokens + roll.tokens)
    assert share == pytest.approx(10 * k / (10 * k + 8))
    capped = compute_credit("monte_carlo", CreditContext.of(rewards, mask, group_size=2, eps=1e-6,
                            **_ctx(_cfg(mc_k=k, mc_continuation_limit=3), roll, FakeEngine({}, run_to_limit=True))))
    assert capped.continuation_tokens == k * (3 + 2 + 3)


def _equal(cfg, rule="equal_iteration"):
    roll, mask, rewards, engine = _group()
    return compute_credit(rule, CreditContext.of(rewards, mask, group_size=2, eps=1e-6, **_ctx(cfg, roll, engine))), mask


def test_equal_iteration_rule_by_hand():
    out, mask = _equal(_cfg(eq_alpha=2.0))
    # raw w: c0 [.25,.25,−.5,−.5,−.25] (mean −.15), c1 [0,0,.5] (mean 1/6); centered, then / max|w| = .4
    w = torch.tensor([[0.4, 0.4, -0.35, -0.35, -0.1, 0], [-1 / 6, -1 / 6, 1 / 3, 0, 0, 0]]) / 0.4
    assert torch.allclose(out.tokens, A[:, None] * mask + 2.0 * w * mask, atol=1e-5)
    assert (out.tokens - A[:, None] * mask).abs().max() == pytest.approx(2.0, abs=1e-5)
    assert out.continuation_tokens == 12


def test_gates_by_hand():
    out, mask = _equal(_cfg(eq_alpha=1.0, eq_gate="opposition"))
    # A0 < 0 keeps c0's positive entries [.25,.25,0,0,0]; A1 > 0 keeps c1's negative ones: none
    c0 = torch.tensor([0.25, 0.25, 0, 0, 0]) - 0.1
    w = torch.zeros(2, 6)
    w[0, :5] = c0 / 0.15
    assert torch.allclose(out.tokens, A[:, None] * mask + w, atol=1e-5)
    out, mask = _equal(_cfg(eq_alpha=1.0, eq_gate="disagreement"))
    # p(1−p) at each segment's end: c0 .75, .25 → .1875, .1875, end R = 0 → 0; c1: .5 → .25, then ended → 0
    g0 = torch.tensor([0.25, 0.25, -0.5, -0.5, -0.25]) * torch.tensor([0.1875, 0.1875, 0.1875, 0.1875, 0])
    g1 = torch.tensor([0.0, 0.0, 0.0])
    c0, c1 = g0 - g0.mean(), g1 - g1.mean()
    m = max(c0.abs().max(), c1.abs().max())
    w = torch.zeros(2, 6)
    w[0, :5], w[1, :3] = c0 / m, c1 / m
    assert torch.allclose(out.tokens, A[:, None] * mask + w, atol=1e-5)


def test_coequal_standardization_by_hand():
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1.0, 1, 1], [1, 0, 0]])
    w = torch.tensor([[1.0, -1, 0], [0, 0, 0]])
    c = equal_iteration.combine(adv, w, mask, alpha=0.5, norm="coequal")
    # A over the 4 tokens: [1,1,1,−1], mean .5, SD √.75; w over them: [1,−1,0,0], mean 0, SD √.5
    want = torch.tensor([[1, 1, 1], [-1, 0, 0]]) / 0.75 ** 0.5 + 0.5 * w / 0.5 ** 0.5
    assert torch.allclose(c, want * mask, atol=1e-6)


def test_shuffled_control_permutes_within_each_completion():
    coherent, mask = _equal(_cfg(eq_alpha=1.0))
    shuffled, _ = _equal(_cfg(eq_alpha=1.0), rule="shuffled")
    for i, n in enumerate([5, 3]):  # same multiset of credits per completion (centering and max commute)
        assert torch.allclose(coherent.tokens[i, :n].sort().values, shuffled.tokens[i, :n].sort().values, atol=1e-6)
    assert not torch.allclose(coherent.tokens, shuffled.tokens)
    again, _ = _equal(_cfg(eq_alpha=1.0), rule="shuffled")
    assert torch.equal(again.tokens, shuffled.tokens)  # seeded by (run seed, iteration, "shuffle")


def test_implicit_reward_by_hand():
    from test_trainer_credit import _rollouts, _tiny_policy

    from trainer.core.policy import token_logprobs

    pol, ref, roll = _tiny_policy(), _tiny_policy(), _rollouts()
    with torch.no_grad():
        for p in ref.model.parameters():
            p.mul_(0.9)
    state = DenseState(_reference=ref)
    rewards, mask = torch.tensor([1.0, 0, 0, 1]), roll.completion_mask
    out = compute_credit("implicit", CreditContext.of(rewards, mask, group_size=4, eps=1e-6, cfg=TrainerConfig(eq_alpha=0.5),
                         policy=pol, rollouts=roll, state=state))
    with torch.no_grad():
        w = (token_logprobs(pol, roll.sequences, roll.attention_mask, 3)
             - token_logprobs(ref, roll.sequences, roll.attention_mask, 3)) * mask
    w = (w - (w.sum(1, keepdim=True) / mask.sum(1, keepdim=True))) * mask
    want = group_advantages(rewards, 4, 1e-6)[:, None] * mask + 0.5 * w / w.abs().max()
    assert torch.allclose(out.tokens, want, atol=1e-5) and out.continuation_tokens == 0
    same = compute_credit("implicit", CreditContext.of(rewards, mask, group_size=4, eps=1e-6, cfg=TrainerConfig(),
                          policy=pol, rollouts=roll, state=DenseState(_reference=pol)))
    assert torch.allclose(same.tokens, group_advantages(rewards, 4, 1e-6)[:, None] * mask)  # π = π_ref: w = 0


def test_length_reward_by_hand():
    rewards = torch.tensor([1.0, 1, 0, 1])
    lengths = torch.tensor([4, 8, 5, 6])
    mask = (torch.arange(10)[None, :] < lengths[:, None]).float()
    w = length.length_credit(rewards, lengths, mask, 4, lam=0.5, limit=10)
    # m_g = (4 + 8 + 6)/3 = 6: −.5(4−6)/10 = +.1, −.5(8−6)/10 = −.1, wrong: 0, −.5(6−6)/10 = 0
    assert torch.allclose(w[:, 0], torch.tensor([0.1, -0.1, 0.0, 0.0]).to(w), atol=1e-7)
    assert torch.allclose(w, w[:, :1] * mask)
    assert w[:, 0].sum().abs() < 1e-7  # sums to zero over the group's completions


# --------------------------------------------------------------------------------------------
# A short real run of every configuration writes a valid run log
# --------------------------------------------------------------------------------------------
PLAN = run_plan(
    id="tiny-dense", title="Dense rewards on a tiny model", question="Do the dense-reward configurations run?",
    comparator="outcome", treatment="monte_carlo", recipe="mc_k = 2\ncritic_start_iteration = 1\n",
    configurations="""\
[configurations.outcome]
[configurations.monte_carlo]
overrides = { credit = "monte_carlo" }
[configurations.equal_iteration]
overrides = { credit = "equal_iteration", eq_alpha = 2.0, eq_gate = "disagreement", eq_norm = "coequal" }
[configurations.shuffled]
overrides = { credit = "shuffled", eq_gate = "opposition" }
[configurations.implicit]
overrides = { credit = "implicit", eq_alpha = 0.5 }
[configurations.critic_td]
overrides = { credit = "critic_td" }
[configurations.critic_baseline]
overrides = { credit = "critic_baseline" }
[configurations.length]
overrides = { length_lambda = 0.5 }
""", tokens=900, eval_every="B/1", samples=1, n_problems=4)

CONFIGS = ["outcome", "monte_carlo", "equal_iteration", "shuffled", "implicit", "critic_td", "critic_baseline", "length"]


@pytest.mark.slow  # trains the tiny model
def test_short_run_of_every_configuration_writes_a_valid_run_log(tmp_path):
    from prereg_kit.runlog import read_run
    from trainer.launch import plan_jobs
    from trainer.loop import train

    study = tmp_path / "study"
    study.mkdir()
    (study / "plan.toml").write_text(PLAN)
    _, jobs = plan_jobs(study, "smoke", CONFIGS, [0])
    threads = torch.get_num_threads()
    shares = {}
    try:
        for job in jobs:
            c = train(job.spec)
            run = read_run(job.spec.run_dir, strict=True)
            assert run.meta.status == "complete" and not run.problems, (job.spec.configuration, run.problems)
            it = run.iterations
            assert it["updates"].tolist() == list(range(1, len(it) + 1))
            assert c.total_tokens == it["tokens_total"].sum() >= job.spec.stop_tokens
            shares[job.spec.configuration] = it["tokens_continuation"].sum() / it["tokens_total"].sum()
            assert (it["seconds_credit"] > 0).all()
    finally:
        torch.set_num_threads(threads)
    mc = {"monte_carlo", "equal_iteration", "shuffled"}
    assert all(shares[k] > 0 for k in mc), shares
    assert all(shares[k] == 0 for k in set(CONFIGS) - mc), shares


def test_the_cores_copy_of_the_trainers_rule_sets_and_defaults_is_the_trainers():
    """The core names no trainer, so the gradient plan check and the synthetic gradient rows keep
    their own copy of which credit rules draw continuations and of the recipe defaults where a plan
    is silent; here they are held to the trainer's (a copy without ``shuffled`` once gave its
    synthetic rows mc_k = 0 where the real gradient test records k)."""
    from prereg_kit.plan.gradient import CONTINUATION_RULES as CORE_RULES
    from prereg_kit.plan.gradient import RECIPE_DEFAULTS
    from trainer.interventions.credit_rules import CONTINUATION_RULES, CREDIT_RULES

    assert set(CORE_RULES) == CONTINUATION_RULES <= set(CREDIT_RULES)
    cfg = TrainerConfig()
    for key, value in RECIPE_DEFAULTS.items():
        section, name = key.split(".")
        assert getattr(getattr(cfg, section), name) == value, key
    # the rules that run on these fakes: continuations drawn exactly by the rules the set names
    for rule in ("outcome", "rloo", "monte_carlo", "equal_iteration", "shuffled", "vineppo"):
        roll, mask, rewards, engine = _group()
        out = compute_credit(rule, CreditContext.of(rewards, mask, group_size=2, eps=1e-6, **_ctx(_cfg(), roll, engine)))
        assert (out.continuation_tokens > 0) == (rule in CONTINUATION_RULES), rule
