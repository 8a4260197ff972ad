"""What the trainer logs for the readings: all-wrong / all-correct group shares beside the mixed
share, the problem's level and the mean log completion length on eval rows, and sets scored only
at the start and at B (a fake engine: no model is trained)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("torch")

import torch

from trainer.config import EvalSetSpec, RunSpec, TrainerConfig
from trainer.core.budget import Counters
from trainer.core.evaluate import EvalSet, evaluate, log_length, scored_now
from trainer.data.problems import Problem
from trainer.loop import group_stats


def test_group_shares_split_every_group_once():
    rewards = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0], dtype=torch.float32)
    roll = SimpleNamespace(lengths=torch.tensor([5] * 16), truncated=torch.zeros(16, dtype=torch.bool))
    s = group_stats(rewards, roll, 4)
    assert (s["all_wrong_share"], s["mixed_share"], s["all_correct_share"]) == (0.5, 0.25, 0.25)
    assert s["all_wrong_share"] + s["mixed_share"] + s["all_correct_share"] == 1


def test_log_length_counts_an_empty_completion_as_one_token():
    assert log_length([10, 100]) == pytest.approx((math.log(10) + math.log(100)) / 2)
    assert log_length([0, 1]) == 0.0


@pytest.mark.parametrize("at,e0,mid,atb", [(None, True, True, True), (("start", "B"), True, False, True),
                                           (("B",), False, False, True), (("start",), True, False, False)])
def test_scored_now(at, e0, mid, atb):
    assert (scored_now(at, 0, False), scored_now(at, 3, False), scored_now(at, 5, True)) == (e0, mid, atb)


class _Engine:
    """Every completion is "\\boxed{1}" with a length that depends on the sample's position."""

    def generate(self, prompts, *, noise_seed, keys, limit, temperature, top_p, batch_size=None):
        n = len(prompts)
        return SimpleNamespace(texts=["\\boxed{1}"] * n, lengths=np.array([3 + (k % 2) * 5 for k in range(n)]))


def _spec(budget: int) -> RunSpec:
    return RunSpec(study="s", configuration="c", seed=0, plan_hash="0" * 64, study_dir=".", run_dir=".", cache_dir=".",
                   budget_tokens=budget, eval_interval=budget // 4, eval_sets=[EvalSetSpec(name="main")],
                   eval_samples=2, config=TrainerConfig())


def test_evaluate_scores_a_start_and_B_set_only_there_and_logs_levels_and_log_length():
    probs = (Problem("p1", "1?", "1", 5), Problem("p2", "2?", "2", None))
    sets = [EvalSet("main", probs), EvalSet("extra", probs[:1], ("start", "B"))]
    policy = SimpleNamespace(render=lambda p: p)
    c = Counters()
    seen = []
    for tokens in (0, 25, 50, 100, 125):  # evaluations at 0, B/4, B/2, B (first at or after), 1.25B
        c.tokens["rollout"] = tokens
        rows = evaluate(_Engine(), policy, sets, c, _spec(100))
        seen.append(sorted({r["eval_set"] for r in rows}))
        c.eval_index += 1
        if tokens == 0:
            first = {r["problem_id"]: r for r in rows if r["eval_set"] == "main"}
    assert seen == [["extra", "main"], ["main"], ["main"], ["extra", "main"], ["main"]]  # B scored once
    assert first["p1"]["level"] == 5 and "level" not in first["p2"]  # a problem without a level logs none
    assert first["p1"]["log_length"] == pytest.approx((math.log(3) + math.log(8)) / 2)
    assert first["p1"]["correct"] == 2 and first["p2"]["correct"] == 0


def test_evaluate_hands_each_problems_samples_to_record():
    """``record``: each scored problem's sampled completions, in order (the TRL callback keeps them
    as an outputs file); sets not scored at this evaluation are not recorded."""
    probs = (Problem("p1", "1?", "1", 5), Problem("p2", "2?", "2", None))
    sets = [EvalSet("main", probs), EvalSet("extra", probs[:1], ("B",))]
    kept = []
    rows = evaluate(_Engine(), SimpleNamespace(render=lambda p: p), sets, Counters(), _spec(100),
                    record=lambda name, p, texts: kept.append((name, p.id, list(texts))))
    assert kept == [("main", "p1", ["\\boxed{1}"] * 2), ("main", "p2", ["\\boxed{1}"] * 2)]
    assert [r["problem_id"] for r in rows] == ["p1", "p2"]
