"""Readings at matched compute on hand-made logs with known answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from prereg_kit.readings import (
    PairingError,
    ReadingError,
    ReadingPoint,
    accuracy_curve,
    admit_min_iteration,
    admit_status,
    apply_admission,
    check_pairing,
    drift_flags,
    drifted_at,
    exclude_drifted_evaluations,
    exclude_drifted_runs,
    paired_readings,
    problem_accuracy,
    read_at_control_time,
    read_at_time,
    read_at_tokens,
    read_at_updates,
)

B = 100
SAMPLES = 10


def run_rows(config, seed, tokens, seconds, updates, acc, *, strict_gap=0.0, problems=("a", "b"),
             eval_seed=None, greedy=True) -> list[dict]:
    """Eval rows of one run: every problem scores ``acc[e]`` (in tenths) at evaluation ``e``."""
    rows = []
    for e, (t, s, u, a) in enumerate(zip(tokens, seconds, updates, acc)):
        c = int(round(a * SAMPLES))
        cs = int(round((a - (strict_gap[e] if isinstance(strict_gap, list) else strict_gap)) * SAMPLES))
        for p in problems:
            rows.append(dict(configuration=config, seed=seed, eval_index=e, iteration=e * 3, eval_set="math",
                             problem_id=p, eval_seed=(eval_seed or {}).get(e, 100 * seed + e), tokens=t,
                             train_seconds=s, updates=u, samples=SAMPLES, correct=c, correct_strict=cs,
                             boxed=SAMPLES, greedy_correct=(a >= 0.5) if greedy else pd.NA))
    return rows


def frame(*runs) -> pd.DataFrame:
    df = pd.DataFrame([r for run in runs for r in run])
    df["greedy_correct"] = df["greedy_correct"].astype("boolean")
    return df


# Treatment: reaches B in 50 s with 10 updates. Control: reaches B in 80 s with 20 updates.
TRT = dict(tokens=[0, 40, 80, 104, 130], seconds=[0, 20, 40, 50, 60], updates=[0, 4, 8, 10, 13],
           acc=[0.1, 0.3, 0.5, 0.6, 0.7])
CTL = dict(tokens=[0, 30, 60, 90, 120], seconds=[0, 20, 40, 60, 80], updates=[0, 4, 8, 12, 20],
           acc=[0.1, 0.2, 0.3, 0.5, 0.6])


def study(seeds=(0, 1), trt=TRT, ctl=CTL) -> pd.DataFrame:
    return frame(*[run_rows("trt", s, **trt) for s in seeds], *[run_rows("ctl", s, **ctl) for s in seeds])


def curves(evals=None, verifier="default"):
    return accuracy_curve(study() if evals is None else evals, eval_set="math", verifier=verifier)


def test_accuracy_curve_columns_and_verifiers():
    ev = frame(run_rows("trt", 0, **TRT, strict_gap=0.1))
    c = accuracy_curve(ev, eval_set="math")
    assert list(c.columns) == ["configuration", "seed", "eval_index", "iteration", "tokens", "train_seconds",
                               "updates", "eval_seed", "n_problems", "problem_set", "eval_set", "verifier", "accuracy"]
    assert c["accuracy"].tolist() == pytest.approx(TRT["acc"])
    assert accuracy_curve(ev, eval_set="math", verifier="strict")["accuracy"].tolist() == pytest.approx(
        [a - 0.1 for a in TRT["acc"]])
    assert accuracy_curve(ev, eval_set="math", verifier="greedy")["accuracy"].tolist() == [0, 0, 1, 1, 1]
    with pytest.raises(ReadingError, match="no evaluation rows for set 'gsm8k'"):
        accuracy_curve(ev, eval_set="gsm8k")
    with pytest.raises(ReadingError, match="greedy correctness not logged"):
        accuracy_curve(frame(run_rows("trt", 0, **TRT, greedy=False)), eval_set="math", verifier="greedy")


def test_first_evaluation_at_or_after_budget():
    r = read_at_tokens(curves(), B).set_index(["configuration", "seed"])
    # Treatment's evaluations: 80 < B <= 104 -> evaluation 3; control's: 90 < B <= 120 -> evaluation 4.
    assert r.loc[("trt", 0), "eval_lo"] == 3 and r.loc[("trt", 0), "accuracy"] == pytest.approx(0.6)
    assert r.loc[("ctl", 0), "eval_lo"] == 4 and r.loc[("ctl", 0), "accuracy"] == pytest.approx(0.6)
    # Exactly at an evaluation is "at": 80 tokens reads evaluation 2, not 3.
    assert read_at_tokens(curves(), 80).set_index(["configuration", "seed"]).loc[("trt", 0), "eval_lo"] == 2
    # k x B beyond the last evaluation is not reached, with a note.
    r2 = read_at_tokens(curves(), 1.25 * B).set_index(["configuration", "seed"])
    assert bool(r2.loc[("trt", 0), "reached"]) and not bool(r2.loc[("ctl", 0), "reached"])
    assert "last at 120" in r2.loc[("ctl", 0), "note"]


def test_t_star_interpolation():
    r = read_at_time(curves(), "trt", "ctl", B).set_index(["configuration", "seed"])
    # T* = min(50, 80) = 50 s. Treatment (faster) is read at B; control between 40 s (0.3) and 60 s (0.5).
    assert r.loc[("trt", 0), "at"] == 50 == r.loc[("ctl", 0), "at"]
    assert r.loc[("trt", 0), "accuracy"] == pytest.approx(0.6) and r.loc[("trt", 0), "weight"] == 0
    assert (r.loc[("ctl", 0), "eval_lo"], r.loc[("ctl", 0), "eval_hi"]) == (2, 3)
    assert r.loc[("ctl", 0), "weight"] == pytest.approx(0.5)
    assert r.loc[("ctl", 0), "accuracy"] == pytest.approx(0.4)
    assert r.loc[("ctl", 0), "tokens"] == pytest.approx(75)


def test_faster_run_is_read_at_budget_even_with_equal_times_earlier():
    # The treatment's time stalls (same seconds at evaluations 2 and 3): it must still be read at B.
    trt = dict(TRT, seconds=[0, 20, 50, 50, 60])
    r = read_at_time(curves(study(trt=trt)), "trt", "ctl", B).set_index(["configuration", "seed"])
    assert r.loc[("trt", 0), "eval_lo"] == 3 and r.loc[("trt", 0), "accuracy"] == pytest.approx(0.6)


def test_control_time_rule_s35():
    # T_c = 80 s; the treatment is extended past B to 120 s.
    trt = dict(tokens=[0, 40, 80, 104, 130, 160], seconds=[0, 20, 40, 50, 60, 120],
               updates=[0, 4, 8, 10, 13, 16], acc=[0.1, 0.3, 0.5, 0.6, 0.7, 0.9])
    r = read_at_control_time(curves(study(trt=trt)), "trt", "ctl", B).set_index(["configuration", "seed"])
    assert r.loc[("ctl", 0), "at"] == 80 and r.loc[("ctl", 0), "eval_lo"] == 4
    assert r.loc[("trt", 0), "accuracy"] == pytest.approx(0.7 + (80 - 60) / 60 * 0.2)
    # Without the extension the treatment never reaches T_c.
    r2 = read_at_control_time(curves(), "trt", "ctl", B).set_index(["configuration", "seed"])
    assert not bool(r2.loc[("trt", 0), "reached"]) and "less than T_c" in r2.loc[("trt", 0), "note"]


def test_update_interpolation():
    r = read_at_updates(curves(), "trt", "ctl", B).set_index(["configuration", "seed"])
    # Treatment at B has 10 updates; control between 8 (0.3) and 12 (0.5) updates.
    assert r.loc[("trt", 0), "at"] == 10 and r.loc[("trt", 0), "accuracy"] == pytest.approx(0.6)
    assert r.loc[("ctl", 0), "weight"] == pytest.approx(0.5)
    assert r.loc[("ctl", 0), "accuracy"] == pytest.approx(0.4)


@pytest.mark.parametrize("kind,diff", [("tokens", 0.0), ("time", 0.2), ("updates", 0.2)])
def test_paired_readings_table_and_matrices(kind, diff):
    ev = study()
    pr = paired_readings(curves(ev), "trt", "ctl", ReadingPoint(kind, budget=B),
                         problem_acc=problem_accuracy(ev, eval_set="math"))
    t = pr.table
    assert t["seed"].tolist() == [0, 1]
    assert t["difference"].tolist() == pytest.approx([diff, diff])
    assert {"treatment_eval_lo", "control_weight", "control_train_seconds", "at"} <= set(t.columns)
    assert pr.problems == ["a", "b"] and pr.treatment_matrix.shape == (2, 2)
    np.testing.assert_allclose(pr.treatment_matrix.mean(axis=1), t["treatment"])
    np.testing.assert_allclose(pr.control_matrix.mean(axis=1), t["control"])
    assert pr.exclusions.empty


def test_matrices_interpolate_per_problem():
    ev = frame(run_rows("trt", 0, **TRT), run_rows("ctl", 0, **CTL))
    ev.loc[(ev["configuration"] == "ctl") & (ev["problem_id"] == "b") & (ev["eval_index"] == 3), "correct"] = 10
    pr = paired_readings(curves(ev), "trt", "ctl", ReadingPoint("time", budget=B), problem_acc=problem_accuracy(ev, eval_set="math"))
    # Control at T*: half of evaluation 2 (0.3, 0.3) and half of evaluation 3 (0.5, 1.0).
    np.testing.assert_allclose(pr.control_matrix[0], [0.4, 0.65])
    assert pr.table["control"].iloc[0] == pytest.approx(0.525)


def test_pairing_missing_seed():
    ev = frame(run_rows("trt", 0, **TRT), run_rows("trt", 1, **TRT), run_rows("ctl", 0, **CTL))
    with pytest.raises(PairingError, match=r"^seed 1: configuration 'trt' has evaluations, 'ctl' has none \(no run, or a run that logged no evaluations\)$"):
        paired_readings(curves(ev), "trt", "ctl", ReadingPoint("tokens", budget=B))
    pr = paired_readings(curves(ev), "trt", "ctl", ReadingPoint("tokens", budget=B), allow_unpaired=True)
    assert pr.table["seed"].tolist() == [0]
    assert set(pr.exclusions["rule"]) == {"unpaired"} and set(pr.exclusions["seed"]) == {1}


def test_pairing_unknown_configuration():
    with pytest.raises(PairingError, match="configuration 'dense' has no runs"):
        paired_readings(curves(), "dense", "ctl", ReadingPoint("tokens", budget=B), allow_unpaired=True)


def test_pairing_different_problems():
    ev = frame(run_rows("trt", 0, **TRT), run_rows("ctl", 0, **CTL, problems=("a", "c")))
    with pytest.raises(PairingError, match="seed 0: evaluation problems differ between 'trt'"):
        paired_readings(curves(ev), "trt", "ctl", ReadingPoint("tokens", budget=B))


def test_pairing_incomplete_evaluation():
    ev = study()
    drop = (ev["configuration"] == "ctl") & (ev["seed"] == 1) & (ev["eval_index"] == 2) & (ev["problem_id"] == "b")
    issues = check_pairing(curves(ev[~drop]), "trt", "ctl")
    assert len(issues) >= 1 and "configuration 'ctl' seed 1: evaluation 2 scored 1 problems" in issues["reason"].iloc[0]


def test_pairing_common_random_numbers():
    ev = frame(run_rows("trt", 0, **TRT), run_rows("ctl", 0, **CTL, eval_seed={4: 999}))
    with pytest.raises(PairingError, match=r"seed 0: evaluation 4 used sampling seed 4 in 'trt' but 999 in 'ctl' \(common random numbers broken\)"):
        paired_readings(curves(ev), "trt", "ctl", ReadingPoint("tokens", budget=B))


def test_run_that_never_reached_its_reading_point():
    short = {k: v[:4] for k, v in CTL.items()}  # control stops at 90 tokens < B
    ev = frame(run_rows("trt", 0, **TRT), run_rows("ctl", 0, **short), run_rows("trt", 1, **TRT), run_rows("ctl", 1, **CTL))
    with pytest.raises(PairingError, match=r"configuration 'ctl' seed 0 never reached its reading point \(tokens at B\)"):
        paired_readings(curves(ev), "trt", "ctl", ReadingPoint("tokens", budget=B))
    pr = paired_readings(curves(ev), "trt", "ctl", ReadingPoint("time", budget=B), allow_unpaired=True)
    assert pr.table["seed"].tolist() == [1]
    assert (pr.exclusions["rule"] == "not_reached").all() and set(pr.exclusions["seed"]) == {0}


def test_two_b_reading_point():
    pr = paired_readings(curves(), "trt", "ctl", ReadingPoint("tokens", multiple=2.0, budget=60))
    assert pr.table["treatment_tokens"].iloc[0] == 130 and pr.table["control_tokens"].iloc[0] == 120


def test_drift_flags_and_drifted_runs():
    # Gap 0.0, 0.1 (not > 0.1), 0.2, 0.2, 0.0 over the treatment's evaluations.
    ev = frame(run_rows("trt", 0, **TRT, strict_gap=[0.0, 0.1, 0.2, 0.2, 0.0]), run_rows("ctl", 0, **CTL))
    f = drift_flags(ev, eval_set="math")
    trt = f[f["configuration"] == "trt"]
    assert trt["drifted"].tolist() == [False, False, True, True, False]
    assert trt["gap"].tolist() == pytest.approx([0.0, 0.1, 0.2, 0.2, 0.0])
    d = drifted_at(f, B).set_index("configuration")
    assert bool(d.loc["trt", "drifted"]) and d.loc["trt", "eval_index"] == 3 and not bool(d.loc["ctl", "drifted"])
    c = curves(ev)
    a = exclude_drifted_evaluations(c, f)
    assert len(a.kept) == len(c) - 2
    assert a.exclusions["eval_index"].tolist() == [2, 3] and (a.exclusions["rule"] == "drifted_evaluation").all()
    # With evaluations 2-3 gone, the treatment's first evaluation at or after B is evaluation 4.
    assert read_at_tokens(a.kept, B).set_index("configuration").loc["trt", "eval_lo"] == 4
    r = exclude_drifted_runs(c, f, B)
    assert set(r.kept["configuration"]) == {"ctl"} and r.exclusions["rule"].tolist() == ["drifted_at_budget"]


def test_admission_rules_report_every_exclusion():
    c = curves()
    iterations = pd.DataFrame({"configuration": ["trt", "trt", "ctl", "ctl"], "seed": [0, 1, 0, 1],
                               "iteration": [31, 20, 31, 31]})
    a = admit_min_iteration(c, iterations, 28)
    assert a.exclusions[["configuration", "seed"]].values.tolist() == [["trt", 1]]
    assert "reached iteration 20, the admission rule requires 28" in a.exclusions["reason"].iloc[0]
    meta = pd.DataFrame({"configuration": ["trt", "trt", "ctl", "ctl"], "seed": [0, 1, 0, 1],
                         "status": ["complete", "complete", "failed", "complete"]})
    s = admit_status(c, meta)
    assert s.exclusions[["configuration", "seed"]].values.tolist() == [["ctl", 0]]
    both = apply_admission(c, iterations=iterations, min_iteration=28, meta=meta, statuses=("complete",))
    assert both.exclusions["rule"].tolist() == ["min_iteration", "status"]
    assert set(map(tuple, both.kept[["configuration", "seed"]].drop_duplicates().values.tolist())) == {("trt", 0), ("ctl", 1)}
    # The excluded runs then surface as unpaired seeds, never silently.
    with pytest.raises(PairingError, match="seed 0: configuration 'trt' has evaluations, 'ctl' has none"):
        paired_readings(both.kept, "trt", "ctl", ReadingPoint("tokens", budget=B))
    with pytest.raises(ReadingError, match="needs the iteration rows"):
        apply_admission(c, min_iteration=28)
    assert apply_admission(c).exclusions.empty


# ------------------------------------------------------------------ multi-reward metrics


def test_pass_at_k_and_channel_rate_metrics():
    from prereg_kit.stats import pass_at_k

    ev = frame(run_rows("trt", 0, **TRT))
    ev["ch_negative"] = (ev["eval_index"] * 2).clip(upper=SAMPLES)
    pa = problem_accuracy(ev, eval_set="math", metric="pass@4")
    want = [float(pass_at_k(SAMPLES, int(round(a * SAMPLES)), 4)) for a in TRT["acc"]]
    assert pa[pa["problem_id"] == "a"]["accuracy"].tolist() == pytest.approx(want)
    c = accuracy_curve(ev, eval_set="math", metric="pass@4")
    assert c["accuracy"].tolist() == pytest.approx(want)
    assert c["accuracy"].iloc[-1] > TRT["acc"][-1]  # pass@4 ≥ pass@1
    assert accuracy_curve(ev, eval_set="math", metric="pass@1")["accuracy"].tolist() == pytest.approx(TRT["acc"])
    rate = accuracy_curve(ev, eval_set="math", metric="negative_rate")
    assert rate["accuracy"].tolist() == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8])
    # a joint rate (correct and negative, Table 7's form) reads the joint count
    ev["ch_correct_negative"] = ev["eval_index"].clip(upper=SAMPLES)
    joint = accuracy_curve(ev, eval_set="math", metric="correct_negative_rate")
    assert joint["accuracy"].tolist() == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    # correct_rate falls back to the default verifier's count
    assert accuracy_curve(ev, eval_set="math", metric="correct_rate")["accuracy"].tolist() == pytest.approx(TRT["acc"])
    # the default metric is unchanged
    assert accuracy_curve(ev, eval_set="math")["accuracy"].tolist() == pytest.approx(TRT["acc"])
    with pytest.raises(ReadingError, match="ch_brief"):
        accuracy_curve(ev, eval_set="math", metric="brief_rate")
    with pytest.raises(ReadingError, match="samples"):
        accuracy_curve(ev, eval_set="math", metric="pass@11")
    with pytest.raises(ReadingError, match="unknown metric"):
        accuracy_curve(ev, eval_set="math", metric="bleu")


def test_analyze_metric_verifier_accepts_pass_at_k_and_rates():
    from types import SimpleNamespace

    from prereg_kit.analysis.analyze import _metric_verifier
    from prereg_kit.errors import PreregError

    plan = SimpleNamespace(evaluation=SimpleNamespace(metric="accuracy", verifier="default", samples=8))

    def c(metric, verifier=None):
        return SimpleNamespace(id="C1", metric=metric, verifier=verifier)

    assert _metric_verifier(plan, c(None)) == ("accuracy", "default")
    assert _metric_verifier(plan, c("pass@4")) == ("pass@4", "default")
    assert _metric_verifier(plan, c("pass@4", "strict")) == ("pass@4", "strict")
    assert _metric_verifier(plan, c("negative_rate")) == ("negative_rate", "default")
    assert _metric_verifier(plan, c("greedy_accuracy")) == ("greedy_accuracy", "greedy")
    with pytest.raises(PreregError, match="at least 16 samples"):
        _metric_verifier(plan, c("pass@16"))
