"""The synthetic run-log generator: realistic, consistent logs that recover their effects."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from prereg_kit.readings import (
    ReadingPoint,
    accuracy_curve,
    drift_flags,
    drifted_at,
    paired_readings,
    problem_accuracy,
)
from prereg_kit.runlog import load_study, read_run
from prereg_kit.simulate.synth import generate_study

B = 1_000_000


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth")
    info = generate_study(
        root, configurations={"control": 0.0, "plus3": 0.03, "minus2": -0.02}, seeds=range(16),
        budget_tokens=B, eval_sets={"math200": 200}, budget_sets={"math500": 500},
        time_per_token={"control": 1e-4, "plus3": 2e-4, "minus2": 1e-4},
        updates_per_token={"control": 64 / B, "plus3": 16 / B, "minus2": 64 / B},
        extend_to={"control": 1.25, "plus3": 1.0, "minus2": 1.0}, drift={"minus2": 0.4}, rng=7,
    )
    return info, load_study(root, progress=False)


def test_layout_and_schedule(synth):
    info, st = synth
    assert len(st.meta) == 48 and (st.meta["status"] == "complete").all()
    assert st.problems == []  # no torn lines, no inconsistencies between evals and iterations
    n_evals = st.evals[st.evals["eval_set"] == "math200"].groupby(["configuration", "seed"])["eval_index"].nunique()
    assert n_evals.loc["plus3"].eq(17).all() and n_evals.loc["control"].eq(21).all()  # B/16 schedule; 1.25B
    extra = st.evals[st.evals["eval_set"] == "math500"]
    assert sorted(extra["eval_index"].unique()) == [0, 16]  # further set: initial and at B only
    assert extra.groupby(["configuration", "seed", "eval_index"]).size().eq(500).all()
    # Evaluation e follows the first iteration reaching e * B/16 tokens.
    ev = st.evals.drop_duplicates(["configuration", "seed", "eval_index"])
    assert (ev["tokens"] >= ev["eval_index"] * B / 16).all()


def test_counts_and_common_random_numbers(synth):
    _, st = synth
    ev = st.evals
    assert (ev["correct_strict"] <= ev["correct"]).all() and (ev["correct_strict"] <= ev["boxed"]).all()
    assert (ev["correct"] <= ev["samples"]).all() and (ev["samples"] == 8).all()
    seeds = ev.groupby(["seed", "eval_set", "eval_index"])["eval_seed"].nunique()
    assert (seeds == 1).all()  # same sampling seed across configurations of a seed
    # Common random numbers: the same seed's configurations are strongly correlated per problem.
    key = ["seed", "eval_index", "problem_id"]
    at0 = ev[(ev["eval_index"] == 0) & (ev["eval_set"] == "math200")]
    c = at0[at0["configuration"] == "control"].set_index(key)["correct"]
    m = at0[at0["configuration"] == "minus2"].set_index(key)["correct"]
    assert np.corrcoef(c, m.loc[c.index])[0, 1] > 0.95


def test_iterations_consistent_with_evals(synth):
    info, _ = synth
    run = read_run(info.runs[0], strict=True)
    it, ev = run.iterations, run.evals.drop_duplicates("eval_index")
    last = ev.iloc[-1]
    row = it.loc[it["iteration"] == last["iteration"] - 1].iloc[0]
    assert last["tokens"] == row["cum_tokens"] and last["updates"] == row["updates"]
    assert last["train_seconds"] == pytest.approx(row["cum_train_seconds"], rel=1e-9)


@pytest.mark.parametrize("treatment,effect", [("plus3", 0.03), ("minus2", -0.02)])
def test_recovers_effect_at_budget(synth, treatment, effect):
    _, st = synth
    cur = accuracy_curve(st.evals, eval_set="math200")
    pr = paired_readings(cur, treatment, "control", ReadingPoint("tokens", budget=B),
                         problem_acc=problem_accuracy(st.evals, eval_set="math200"))
    d = pr.table["difference"]
    se = d.std(ddof=1) / np.sqrt(len(d))
    assert abs(d.mean() - effect) < 4 * se + 0.004, (d.mean(), se)
    assert pr.treatment_matrix.shape == (16, 200)
    # The further test set at B shows the same effect, within its own sampling error.
    cur2 = accuracy_curve(st.evals, eval_set="math500")
    d2 = paired_readings(cur2, treatment, "control", ReadingPoint("tokens", budget=B)).table["difference"]
    assert abs(d2.mean() - effect) < 4 * d2.std(ddof=1) / np.sqrt(len(d2)) + 0.005


def test_time_readings_differ_with_time_per_token(synth):
    _, st = synth
    cur = accuracy_curve(st.evals, eval_set="math200")
    t = paired_readings(cur, "plus3", "control", ReadingPoint("time", budget=B)).table
    # plus3 is twice as slow per token: T* is the control's time to B; plus3 is read about halfway.
    assert (t["control_weight"] == 0).all() and (t["at"] == t["control_train_seconds"]).all()
    assert t["treatment_tokens"].between(0.4 * B, 0.65 * B).all()
    assert t["difference"].mean() < 0  # half the tokens: behind
    u = paired_readings(cur, "plus3", "control", ReadingPoint("updates", budget=B)).table
    assert (u["control_updates"] == u["treatment_updates"]).all() and (u["control_tokens"] < 0.4 * B).all()
    c = paired_readings(cur, "minus2", "control", ReadingPoint("control_time", budget=B), allow_unpaired=True)
    assert len(c.table) + c.exclusions["seed"].nunique() == 16


def test_drift_option(synth):
    _, st = synth
    flags = drift_flags(st.evals, eval_set="math200")
    at_b = drifted_at(flags, B).groupby("configuration")["drifted"].mean()
    assert at_b["minus2"] > 0.8 and at_b["control"] == 0 and at_b["plus3"] == 0


def test_deterministic_and_rng_sensitive(tmp_path):
    kw = dict(configurations={"a": 0.0, "b": 0.05}, seeds=[3], budget_tokens=B, eval_sets={"s": 20})
    generate_study(tmp_path / "x", rng=1, **kw)
    generate_study(tmp_path / "y", rng=1, **kw)
    generate_study(tmp_path / "z", rng=2, **kw)
    x, y, z = (load_study(tmp_path / n, progress=False) for n in "xyz")
    pd.testing.assert_frame_equal(x.evals, y.evals)
    pd.testing.assert_frame_equal(x.iterations, y.iterations)
    assert not x.evals["correct"].equals(z.evals["correct"])


def test_configurations_with_one_effect_share_one_calibration(tmp_path, monkeypatch):
    """The accuracy curve is calibrated once per effect, not per configuration (a dry run without
    effects has one curve for all its configurations), and a configuration's runs are those it gets
    calibrated alone."""
    import prereg_kit.simulate.synth as synth_module

    calls = []
    real = synth_module._calibrate
    monkeypatch.setattr(synth_module, "_calibrate", lambda t, d: calls.append(t) or real(t, d))
    kw = dict(seeds=[0, 1], budget_tokens=B, eval_sets={"s": 30}, rng=4)
    generate_study(tmp_path / "x", configurations={"a": 0.0, "b": 0.0, "c": 0.05}, **kw)
    assert len(calls) == 2
    generate_study(tmp_path / "y", configurations={"b": 0.0, "c": 0.05}, **kw)
    x, y = (load_study(tmp_path / n, progress=False) for n in "xy")
    for kind in ("evals", "iterations"):
        bx, by = (getattr(st, kind).query("configuration == 'b'").reset_index(drop=True).drop(columns="configuration")
                  for st in (x, y))  # the configuration column's categories are the study's
        assert len(bx) and bx.equals(by)


def test_levels_log_lengths_and_group_shares(synth, tmp_path):
    from prereg_kit.simulate.synth import problem_levels

    info, st = synth
    ev = st.evals
    assert ev["level"].notna().all() and set(ev["level"].unique()) == {1, 2, 3, 4, 5}
    # harder problems get higher levels: every level-5 problem is harder than every level-1 problem
    d = np.array([3.0, -1.0, 0.5, 2.0, -2.0])
    assert problem_levels(d).tolist() == [5, 2, 3, 4, 1] and problem_levels(d, [4, 5]).tolist() == [5, 4, 4, 5, 4]
    one = ev[(ev["configuration"] == "control") & (ev["seed"] == 0) & (ev["eval_set"] == "math200")]
    assert one.groupby("problem_id")["level"].nunique().eq(1).all()  # a problem keeps its level
    assert ev["log_length"].between(np.log(300) - 2, np.log(300) + 2).all()
    it = st.iterations
    total = it["mixed_share"] + it["all_wrong_share"] + it["all_correct_share"]
    assert np.allclose(total, 1) and it["all_wrong_share"].between(0, 1).all()
    # a log-length effect shows at B; the accuracy columns are the same with or without it
    kw = dict(configurations={"a": 0.0, "b": 0.0}, seeds=range(6), budget_tokens=B, rng=3)
    r0, r1 = tmp_path / "r0", tmp_path / "r1"
    generate_study(r0, **kw)
    generate_study(r1, length_effects={"b": -0.2}, **kw)
    e0, e1 = load_study(r0, progress=False).evals, load_study(r1, progress=False).evals
    assert e0["correct"].equals(e1["correct"])
    at_b = e1[e1["eval_index"] == 16].groupby("configuration")["log_length"].mean()
    assert at_b["b"] - at_b["a"] == pytest.approx(-0.2, abs=0.06)
