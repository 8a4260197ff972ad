"""Aggregation rules (trainer/rewards/aggregation.py) against hand computations on small groups."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prereg_kit.readings import ReadingError, accuracy_curve, relative_accuracy_curves
from trainer.config import ConfigError
from trainer.rewards.aggregation import (
    RULES,
    AggregationConfig,
    LagrangeState,
    channel_means,
    grpo_advantage,
    iteration_log,
    pareto_front,
    parse_aggregation,
    rule_advantages,
    rule_kl_beta,
    shaped_reward,
    tag_reward,
    zscore,
)

# One group of n = 4, channels (R_P, R_A): joint, primary-only, auxiliary-only, neither.
G4 = np.array([[[1, 1], [1, 0], [0, 1], [0, 0]]], dtype=float)


def z(x):
    x = np.asarray(x, float)
    return (x - x.mean()) / x.std()


def adv(rule, R=G4, **kw):
    return rule_advantages(R, rule=rule, **kw).advantages


# ---------------------------------------------------------------------------------------------
# GRPO advantage
# ---------------------------------------------------------------------------------------------
def test_grpo_advantage_population_sd_and_uniform_groups():
    r = np.array([[1.0, 0, 0, 0], [0.3, 0.3, 0.3, 0.3]])
    a = grpo_advantage(r, eps=0.0 + 1e-12)
    assert np.allclose(a[0], [math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3)])
    assert (a[1] == 0).all()  # uniform group: exactly zero, whatever the float mean


def test_zscore_zero_for_uniform_channel():
    Z = zscore(np.array([[[1, 0], [1, 1]]], float), axis=1)
    assert (Z[0, :, 0] == 0).all() and np.allclose(Z[0, :, 1], [-1, 1], atol=1e-5)


# ---------------------------------------------------------------------------------------------
# The rules, one by one
# ---------------------------------------------------------------------------------------------
def test_primary_additive_and_weighted():
    assert np.allclose(rule_advantages(G4, rule="primary").rewards, [[1, 1, 0, 0]])
    res = rule_advantages(G4, rule="additive")
    assert np.allclose(res.rewards, [[1, 0.5, 0.5, 0]])
    assert np.allclose(res.advantages, [z([1, 0.5, 0.5, 0])], atol=1e-5)
    assert np.allclose(res.advantages, [[math.sqrt(2), 0, 0, -math.sqrt(2)]], atol=1e-5)
    w = rule_advantages(G4, rule="weighted", params={"weights": [0.8, 0.2]})
    assert np.allclose(w.rewards, [[1.0, 0.8, 0.2, 0.0]])


def test_and_is_min():
    res = rule_advantages(G4, rule="and")
    assert np.allclose(res.rewards, [[1, 0, 0, 0]])
    assert np.allclose(res.advantages, [[math.sqrt(3)] + [-1 / math.sqrt(3)] * 3], atol=1e-5)


def test_lsc_equals_additive_sample_by_sample_on_binary_groups():
    # every 2-channel binary group of n = 4 (256 of them): LSC is affine in R_A + R_P (multi-reward paper App. C "Baseline ports")
    outcomes = [(0, 0), (0, 1), (1, 0), (1, 1)]
    R = np.array(list(itertools.product(outcomes, repeat=4)), dtype=float)
    a_add, a_lsc = adv("additive", R), adv("lsc", R)
    assert np.allclose(a_add, a_lsc, atol=1e-5)
    r = rule_advantages(G4, rule="lsc").rewards[0]
    ls = lambda x: -math.log1p(math.exp(-x))  # noqa: E731
    assert r[0] == pytest.approx(2 * ls(2)) and r[3] == pytest.approx(2 * ls(-2))
    assert r[1] == pytest.approx(ls(2) + ls(-2)) == r[2]


def test_tag_four_outcomes_and_lambda_zero():
    for lam in (0.25, 0.5, 1.0, 2.0, 4.0):
        assert np.allclose(tag_reward(G4, lam=lam), [[1, 1 / (1 + lam), 0, 0]])
    assert np.allclose(tag_reward(G4, lam=0.0), G4[..., 0])  # λ = 0: the anchor alone
    res = rule_advantages(G4, rule="tag", params={"lam": 1.0})
    assert np.allclose(res.rewards, [[1, 0.5, 0, 0]])
    assert np.allclose(res.advantages, [z([1, 0.5, 0, 0])], atol=1e-5)
    assert res.advantages[0, 2] < 0  # auxiliary-only never gets a positive advantage (multi-reward paper App. A.2)


def test_tag_multichannel_and_anchor_index():
    R = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0], [0, 1, 1]], float)
    # λ = (1, 3): (1 + R_1 + 3 R_2)/5
    assert np.allclose(tag_reward(R, anchor=0, lam=[1, 3]), [1, 2 / 5, 1 / 5, 0])
    # anchor is channel 2; auxiliaries (0, 1) with λ = 1 each
    assert np.allclose(tag_reward(R, anchor=2, lam=1), [1, 0, 0, (1 + 0 + 1) / 3])
    with pytest.raises(ValueError, match="λ"):
        tag_reward(R, lam=-1)


def test_mo_grpo_sums_per_channel_z_scores():
    res = rule_advantages(G4, rule="mo_grpo")
    assert res.rewards is None
    expect = z([1, 1, 0, 0]) + z([1, 0, 1, 0])  # = [2, 0, 0, -2]
    assert np.allclose(res.advantages[0], expect, atol=1e-5)
    # a uniform channel contributes nothing
    R = np.array([[[1, 1], [1, 0], [1, 0], [1, 1]]], float)
    assert np.allclose(adv("mo_grpo", R)[0], z([1, 0, 0, 1]), atol=1e-5)


def test_dr_grpo_no_sd_and_length_scaling():
    lengths = np.array([[100, 200, 50, 400]])
    res = rule_advantages(G4, rule="dr_grpo", lengths=lengths, l_max=400)
    d = np.array([1, 0.5, 0.5, 0]) - 0.5
    assert np.allclose(res.advantages[0], d * lengths[0] / 400)
    assert np.allclose(res.advantages[0], [0.125, 0, 0, -0.5])
    with pytest.raises(ValueError, match="lengths"):
        rule_advantages(G4, rule="dr_grpo")


def test_lagrangian_shaping_update_and_decay_within_twenty_steps():
    res = rule_advantages(G4, rule="lagrangian")
    assert np.allclose(res.rewards, [[1.5, 1, 0.5, 0]])  # R_P + 0.5 R_A
    st_ = res.state
    assert isinstance(st_, LagrangeState) and st_.nu_used == (0.5,) and st_.aux_rate == (0.5,)
    assert st_.nu == (0.5,)  # R̄_A = τ: no change
    # auxiliary rate 1 > τ: ν falls by 0.05·0.5 = 0.025 a batch, reaching 0 after 20 batches
    all_aux = np.array([[[1, 1], [0, 1], [0, 1], [1, 1]]], float)
    state, nus = None, []
    for _ in range(25):
        res = rule_advantages(all_aux, rule="lagrangian", state=state)
        state = res.state
        nus.append(state.nu[0])
    assert nus[0] == pytest.approx(0.475)
    assert nus[18] > 0 and nus[19] == pytest.approx(0.0, abs=1e-12) and min(nus) >= 0
    # once ν = 0 the arm trains on R_P alone
    assert np.allclose(res.rewards, all_aux[..., 0]) and state.steps == 25
    # auxiliary rate 0 < τ: ν grows by 0.025 a batch
    none_aux = np.zeros((2, 4, 2))
    assert rule_advantages(none_aux, rule="lagrangian").state.nu == (pytest.approx(0.525),)


def test_pg_ot_front_points_score_zero():
    res = rule_advantages(G4, rule="pg_ot")
    r = res.rewards[0]
    # front = {(1,1)}; standardized channels are ±1, so (1,0), (0,1) are at squared distance 4
    # and (0,0) at 8
    assert r[0] == 0 and np.allclose(r, [0, -4, -4, -8], atol=1e-6)
    # no joint success: the front is {(1,0), (0,1)} and both score 0
    R = np.array([[[1, 0], [0, 1], [0, 0], [0, 0]]], float)
    r = shaped_reward(R, AggregationConfig(rule="pg_ot"))[0]
    assert r[0] == 0 and r[1] == 0 and (r[2:] < 0).all()
    zp, za = z([1, 0, 0, 0]), z([0, 1, 0, 0])
    d2 = min((zp[2] - zp[0]) ** 2 + (za[2] - za[0]) ** 2, (zp[2] - zp[1]) ** 2 + (za[2] - za[1]) ** 2)
    assert r[2] == pytest.approx(-d2)


def test_pareto_front():
    p = np.array([[1, 0], [0, 1], [0, 0], [1, 0], [0.5, 0.5]])
    assert pareto_front(p).tolist() == [True, True, False, True, True]


def test_dropout_seeded_and_per_group():
    R = np.repeat(G4, 64, axis=0)
    a1 = rule_advantages(R, rule="dropout", rng=np.random.default_rng(7))
    a2 = rule_advantages(R, rule="dropout", rng=np.random.default_rng(7))
    assert np.array_equal(a1.advantages, a2.advantages)
    keep = np.random.default_rng(7).random((64, 1)) >= 0.5  # the same draws, one per group
    dropped = np.all(a1.rewards == R[..., 0], axis=1)
    additive = np.all(a1.rewards == R.mean(axis=2), axis=1)
    assert np.array_equal(dropped, ~keep[:, 0]) and np.array_equal(additive, keep[:, 0])
    assert 15 < dropped.sum() < 49
    assert (rule_advantages(R, rule="dropout", params={"dropout_p": 1.0},
                             rng=np.random.default_rng(0)).rewards == R[..., 0]).all()
    with pytest.raises(ValueError, match="rng"):
        rule_advantages(R, rule="dropout")


def test_additive_kl_beta_interface():
    cfg = AggregationConfig(rule="additive_kl", beta=1.0)
    assert rule_kl_beta(cfg) == 1.0 and rule_kl_beta(AggregationConfig(rule="additive")) == 0.0
    assert np.allclose(adv(cfg), adv("additive"))
    assert iteration_log(G4, ["correct", "brief"], rule_advantages(G4, rule=cfg), cfg)["kl_beta"] == 1.0


def test_weight_immaterial_in_two_level_groups():
    # "under the z-score a weight is immaterial in two-level groups" (multi-reward paper App. C "Baseline ports")
    R = np.array([[[1, 1], [1, 1], [0, 0], [0, 0]]], float)
    assert np.allclose(adv("weighted", R, params={"weights": [0.9, 0.1]}), adv("additive", R), atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([(0, 0), (0, 1), (1, 0), (1, 1)]), min_size=2, max_size=8),
       st.sampled_from([r for r in RULES if r not in ("dropout", "dr_grpo", "weighted")]))
def test_every_rule_centered_finite_and_zero_on_uniform(group, rule):
    R = np.array([group], float)
    a = adv(rule, R)
    assert a.shape == (1, len(group)) and np.isfinite(a).all()
    assert abs(a.sum()) < 1e-6  # group-centered
    uniform = np.array([[group[0]] * len(group)], float)
    assert (adv(rule, uniform) == 0).all()


# ---------------------------------------------------------------------------------------------
# Config and logging
# ---------------------------------------------------------------------------------------------
def test_config_errors_are_one_line_each():
    with pytest.raises(ConfigError) as e:
        parse_aggregation({"rule": "weighted"})
    assert e.value.lines == ["aggregation: (table): rule 'weighted' needs weights (one per channel)"]
    with pytest.raises(ConfigError) as e:
        parse_aggregation({"rule": "nope", "dropout_p": 2, "colour": 1})
    assert len(e.value.lines) == 3 and all(ln.startswith("aggregation: ") for ln in e.value.lines)
    assert "colour: unknown key" in str(e.value)
    with pytest.raises(ConfigError, match="lam"):
        parse_aggregation({"rule": "tag", "lam": -1})
    with pytest.raises(ValueError, match="needs 2 weights"):
        rule_advantages(G4, rule="weighted", params={"weights": [1, 1, 1]})
    with pytest.raises(ValueError, match="anchor"):
        rule_advantages(G4, rule="tag", params={"anchor": 2})
    with pytest.raises(ValueError, match="shape"):
        rule_advantages(np.zeros((4, 2)), rule="additive")


def test_logs_channel_means_and_nu():
    assert channel_means(G4, ["correct", "brief"]) == {"channel/correct": 0.5, "channel/brief": 0.5}
    cfg = AggregationConfig(rule="lagrangian")
    res = rule_advantages(np.array([[[1, 1], [0, 1]]], float), rule=cfg)
    log = iteration_log(np.array([[[1, 1], [0, 1]]], float), ["correct", "brief"], res, cfg)
    assert log["lagrange/nu/brief"] == 0.5 and log["lagrange/nu_next/brief"] == pytest.approx(0.475)
    assert log["channel/brief"] == 1.0 and "shaped_reward" in log


# ---------------------------------------------------------------------------------------------
# Evaluation metrics
# ---------------------------------------------------------------------------------------------
def _evals(rows):
    """Evaluation rows (one per configuration, seed, evaluation, problem) as the run log has them."""
    import pandas as pd

    return pd.DataFrame([{"configuration": c, "seed": 0, "eval_index": e, "eval_set": "held", "problem_id": f"p{i}",
                          "samples": 8, "correct": k, "correct_strict": k, "iteration": e, "tokens": 100 * e,
                          "train_seconds": 1.0 * e, "updates": e, "eval_seed": 7}
                         for c, e, counts in rows for i, k in enumerate(counts)])


def test_pass_at_4_from_8_and_collapse():
    # c = 1: pass@4 = 1 − C(7,4)/C(8,4) = 1/2; c = 8: 1
    ev = _evals([("a", 0, [1, 8]), ("a", 1, [1, 8]), ("a", 2, [0, 8])])
    assert accuracy_curve(ev, eval_set="held", metric="pass@4")["accuracy"].tolist() == pytest.approx(
        [(0.5 + 1.0) / 2, (0.5 + 1.0) / 2, (0.0 + 1.0) / 2])
    # collapse: pass@4 strictly below the base model's (evaluation 0); equal is not collapse
    assert accuracy_curve(ev, eval_set="held", metric="collapse")["accuracy"].tolist() == [0.0, 0.0, 1.0]


def test_relative_accuracy():
    # accuracy 0.455 against the R_P-only reference's 0.5: 0.91× (multi-reward paper App. C.1)
    ev = _evals([("ref", 1, [4] * 200), ("arm", 1, [4] * 182 + [0] * 18)])
    curves = accuracy_curve(ev, eval_set="held")
    rel = relative_accuracy_curves(curves, "ref", budget=100).kept.set_index("configuration")["accuracy"]
    assert rel["arm"] == pytest.approx(0.91) and rel["ref"] == 1.0
    with pytest.raises(ReadingError, match="ratio is undefined"):  # a reference accuracy of 0
        relative_accuracy_curves(accuracy_curve(_evals([("ref", 1, [0]), ("arm", 1, [4])]), eval_set="held"),
                                 "ref", budget=100)


def test_rule_table_matches_the_allowed_names():
    """Every name an aggregation table may give has exactly one rule in ``RULES``, and back."""
    import typing

    from trainer.rewards.aggregation import RuleName

    assert tuple(RULES) == typing.get_args(RuleName)
