"""Token and time accounting, the evaluation schedule, seeds and the prompt stream."""

from __future__ import annotations

import pytest
from paths import ROOT

from trainer.config import TrainerConfig, derive_seed
from trainer.core.budget import TRAIN_STAGES, Counters, Schedule, StageClock
from trainer.data.problems import prompt_stream_batch


def _evaluations(per_iteration: list[int], interval: int, stop: int) -> list[tuple[int, int]]:
    """(iterations done, tokens) of each evaluation, driving Schedule the way the loop does."""
    sched, tokens, out = Schedule(interval, stop), 0, [(0, 0)]
    for i, n in enumerate(per_iteration):
        before, tokens = tokens, tokens + n
        if sched.eval_due(before, tokens):
            out.append((i + 1, tokens))
            if sched.finished(tokens):
                break
    return out


def test_schedule_first_iteration_at_or_after_each_multiple_then_stop_at_B():
    B = 1600
    per = [37, 41, 29, 55, 33, 48] * 40
    evals = _evaluations(per, B // 16, B)
    cum = [sum(per[:k]) for k in range(len(per) + 1)]
    # brute force: for each multiple m·B/16 ≤ B, the first iteration whose running total reaches it
    want = sorted({next(k for k in range(1, len(cum)) if cum[k] >= m * (B // 16)) for m in range(1, 17)})
    assert [k for k, _ in evals[1:]] == want
    assert evals[0] == (0, 0)  # an evaluation at the start
    assert evals[-1][1] >= B and evals[-2][1] < B  # stops after the evaluation at or after B
    assert len(evals) == 17  # iterations smaller than B/16: one evaluation per multiple


def test_schedule_iteration_crossing_two_multiples_evaluates_once_and_exact_hits():
    s = Schedule(100, 1000)
    assert not s.eval_due(0, 99) and s.eval_due(99, 100) and s.eval_due(150, 320) and not s.eval_due(210, 290)
    assert _evaluations([250] * 10, 100, 1000) == [(0, 0), (1, 250), (2, 500), (3, 750), (4, 1000)]
    # a budget that is not a multiple of the interval still ends with an evaluation at or after k·B
    ev = _evaluations([30] * 100, 100, 1050)
    assert ev[-1][1] >= 1050 and ev[-2][1] < 1050
    # 2B runs continue past B: 33 evaluations with small iterations
    assert len(_evaluations([7] * 2000, 100, 3200)) == 33


def test_counters_account_tokens_by_kind_and_training_seconds():
    c = Counters()
    row = c.add_iteration({"rollout": 100, "continuation": 20}, {"generation": 1.5, "update": 0.25}, updates=1)
    assert row == {"iteration": 0, "tokens_rollout": 100, "tokens_continuation": 20, "tokens_discarded": 0,
                   "seconds_selection": 0.0, "seconds_generation": 1.5, "seconds_credit": 0.0,
                   "seconds_update": 0.25, "seconds_weight_sync": 0.0, "updates": 1}
    row = c.add_iteration({"rollout": 50, "discarded": 30}, {s: 0.5 for s in TRAIN_STAGES}, updates=1)
    assert row["iteration"] == 1 and row["updates"] == 2
    assert c.total_tokens == 200 and c.tokens == {"rollout": 150, "continuation": 20, "discarded": 30}
    assert c.train_seconds == pytest.approx(1.75 + 2.5)
    assert c.excluded_seconds == {"evaluation": 0.0, "logging": 0.0, "checkpoint": 0.0}
    assert Counters.from_dict(c.to_dict()) == c


def test_stage_clock_times_each_stage_and_synchronizes():
    ticks = iter([0.0, 1.0, 1.0, 3.5, 10.0, 10.25])
    synced = []
    clock = StageClock(sync=lambda: synced.append(1), clock=lambda: next(ticks))
    clock.reset()
    with clock.stage("generation"):
        pass
    with clock.stage("update"):
        pass
    with clock.stage("generation"):
        pass
    assert clock.seconds["generation"] == 1.25 and clock.seconds["update"] == 2.5 and clock.seconds["credit"] == 0.0
    assert len(synced) == 3


def test_learning_rate_schedules():
    from trainer.core.update import learning_rate_at

    c = TrainerConfig(learning_rate=2e-6)
    assert learning_rate_at(c, 500, 1000) == 2e-6
    lin = TrainerConfig(learning_rate=2e-6, lr_schedule="linear")
    assert learning_rate_at(lin, 0, 1000) == 2e-6
    assert learning_rate_at(lin, 250, 1000) == pytest.approx(1.5e-6)
    assert learning_rate_at(lin, 1200, 1000) == 0.0


def test_seeds_derive_from_run_seed_index_and_purpose_only():
    assert derive_seed(3, 10, "rollout") == derive_seed(3, 10, "rollout")
    seen = {derive_seed(s, i, p) for s in range(3) for i in range(3) for p in ("rollout", "eval:heldout")}
    assert len(seen) == 18 and all(0 <= x < 2**63 for x in seen)


def test_prompt_stream_depends_on_seed_and_iteration_only():
    a = prompt_stream_batch(50, 1, 7, 8)
    # the same batch whatever was drawn before, and however it is asked for
    prompt_stream_batch(50, 1, 3, 8)
    assert (prompt_stream_batch(50, 1, 7, 8) == a).all()
    assert not (prompt_stream_batch(50, 2, 7, 8) == a).all()
    assert not (prompt_stream_batch(50, 1, 8, 8) == a).all()
    # one epoch visits every pool problem once
    epoch = [int(i) for it in range(5) for i in prompt_stream_batch(40, 1, it, 8)]
    assert sorted(epoch) == list(range(40))


def test_common_random_numbers_do_not_depend_on_batch_layout():
    torch = pytest.importorskip("torch")
    from trainer.core.engines import request_uniforms, sample_tokens

    u = request_uniforms(123, [0, 1, 2, 3], 5)
    assert torch.equal(u[2:], request_uniforms(123, [2, 3], 5))
    scores = torch.log(torch.tensor([[0.1, 0.2, 0.3, 0.4]] * 4))
    tok = sample_tokens(scores, torch.tensor([0.05, 0.15, 0.55, 0.95]), 1.0, 1.0)
    assert tok.tolist() == [0, 1, 2, 3]  # inverse CDF in vocabulary order
    # top-p 0.5 keeps {3, 2} (0.4 + 0.3): renormalized CDF over ids 2, 3 is 3/7, 1
    tok = sample_tokens(scores, torch.tensor([0.0, 0.4, 0.5, 0.99]), 1.0, 0.5)
    assert tok.tolist() == [2, 2, 3, 3]
    assert sample_tokens(scores, torch.zeros(4), 0.0, 1.0).tolist() == [3, 3, 3, 3]


def test_template_and_registry_recipes_are_trainer_configs():
    from importlib import resources

    from prereg_kit.plan import load_plan
    from trainer.config import ConfigError, config_of, parse_config

    root = ROOT
    with resources.as_file(resources.files("prereg_kit") / "templates" / "plan.toml") as tpl:
        plans = [load_plan(tpl).plan, load_plan(root / "registry" / "cpu-grpo" / "plan.toml").plan]
    for plan in plans:
        for name in plan.configurations:
            config_of(plan, name)
    cpu = plans[1]
    assert config_of(cpu, "frozen").update.learning_rate == 0.0
    with pytest.raises(ConfigError) as e:
        parse_config({"learning_rate": 1e-6, "lerning_rate": 2e-6, "tiny": {"layers": 0}})
    assert sorted(e.value.lines) == ["recipe: lerning_rate: unknown key; did you mean 'update.learning_rate'?", "recipe: tiny.layers: Input should be greater than 0"]
