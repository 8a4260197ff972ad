"""The extrapolation heuristic (dense-rewards paper §3.3): the control's curve read at e·t
against hand-computed interpolation, the usable-evaluations rule (11B/16 at e = 1.36, 13B/16 at
e = 1.15), readings of synthetic run logs with a known answer, the contrast through the paired
statistics (scipy) to its verdict, the dry run and report, and hostile plans refused."""

from __future__ import annotations

import json
import tomllib
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from paths import ROOT
from plans import SMALL_PLAN
from scipy import stats as sps

from analyses.extrapolation import extrapolated_accuracy
from prereg_kit.analysis.verdicts import adjust_and_read, contrast_statistics
from prereg_kit.errors import PlanError, PreregError
from prereg_kit.plan import parse_reading_point, validate_plan
from prereg_kit.readings import ReadingError, accuracy_curve
from prereg_kit.readings.extrapolation import (
    contrast_efficiency,
    evaluation_label,
    nominal_tokens,
    read_extrapolated,
    usable,
)
from prereg_kit.runlog import load_study
from prereg_kit.simulate.synth import generate_study

# ------------------------------------------------------------------------------ the curve at e·t

X, Y = [0, 100, 200, 300], [0.1, 0.3, 0.4, 0.7]


def test_extrapolated_accuracy_is_linear_interpolation_at_e_t():
    # e > 1: 1.5·[50, 100, 200, 250] = [75, 150, 300, 375]; 375 lies past the last evaluation
    got = extrapolated_accuracy(X, Y, 1.5, [50, 100, 200, 250])
    np.testing.assert_allclose(got[:3], [0.1 + 0.75 * 0.2, 0.3 + 0.5 * 0.1, 0.7], rtol=0, atol=1e-15)
    assert np.isnan(got[3])
    # e < 1: 0.5·[100, 300] = [50, 150]
    np.testing.assert_allclose(extrapolated_accuracy(X, Y, 0.5, [100, 300]), [0.2, 0.35], atol=1e-15)
    # e = 1 at the curve's own tokens is the curve itself
    np.testing.assert_array_equal(extrapolated_accuracy(X, Y, 1.0, X), Y)
    assert np.isnan(extrapolated_accuracy(X, Y, 1.0, [300.5])[0])


@pytest.mark.parametrize("e", [0.0, -1.0, float("nan"), float("inf")])
def test_extrapolated_accuracy_refuses_a_non_positive_or_non_finite_e(e):
    with pytest.raises(ValueError, match="positive"):
        extrapolated_accuracy(X, Y, e, [100])


# ------------------------------------------------------------------------------ usable evaluations

@pytest.mark.parametrize("e, n", [(1.36, 11), (1.15, 13), (1.0, 16), (0.5, 16), (1.6, 10), (16 / 11, 11), (16.0, 1), (16.5, 0)])
def test_the_usable_evaluations_are_those_with_e_t_at_most_B(e, n):
    B = 12_250_000.0
    t = nominal_tokens(B, B / 16)
    assert len(t) == 16
    assert int(usable(t, e, B).sum()) == n  # the paper: 11B/16 at e = 1.36, 13B/16 at e = 1.15


def test_evaluation_labels_are_the_papers():
    assert evaluation_label(11, "B/16", 1600.0, 100.0) == "11B/16"
    assert evaluation_label(16, "B/16", 1600.0, 100.0) == "B"
    assert evaluation_label(3, "500K", 4e6, 5e5) == "1,500,000 tokens"


# ------------------------------------------------------------------------------ synthetic run logs

BUDGET, EVERY, E = 1_600_000, 100_000, 1.36


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """Curves of synthetic run logs: control "outcome", treatment "critic", 5 seeds, B/16."""
    path = tmp_path_factory.mktemp("extrap")
    generate_study(path, configurations={"outcome": 0.0, "critic": 0.03}, seeds=range(5), budget_tokens=BUDGET,
                   eval_every=EVERY, eval_sets={"math": 40}, samples=4, rng=3)
    return accuracy_curve(load_study(path, progress=False).evals, eval_set="math")


def _as_extrapolation(curves: pd.DataFrame, shortfall: dict[int, float]) -> pd.DataFrame:
    """The treatment's evaluation i replaced by the control's curve at e·t_i (same seed), minus
    ``shortfall[seed]`` (np.interp directly, not the code under test)."""
    out = curves.copy()
    for s in sorted(out["seed"].unique()):
        c = out[(out["configuration"] == "outcome") & (out["seed"] == s)].sort_values("eval_index")
        t_rows = (out["configuration"] == "critic") & (out["seed"] == s) & (out["eval_index"] >= 1)
        i = out.loc[t_rows, "eval_index"].to_numpy()
        out.loc[t_rows, "accuracy"] = np.interp(E * i * EVERY, c["tokens"], c["accuracy"]) - shortfall.get(s, 0.0)
    return out


def test_a_treatment_on_the_controls_curve_at_e_t_reads_zero(logged):
    x = read_extrapolated(_as_extrapolation(logged, {}), "critic", "outcome", E, BUDGET, EVERY)
    assert (x.n_usable, x.last_usable, x.last_tokens) == (11, 11, 11 * EVERY)
    assert len(x.per_seed) == 5
    np.testing.assert_allclose(x.per_seed["difference"], 0.0, atol=1e-12)
    # the predicted and observed leads are then equal: both are extrapolated − control
    np.testing.assert_allclose(x.per_seed["predicted_lead"], x.per_seed["observed_lead"], atol=1e-12)


def test_a_shortfall_reads_its_mean_and_earns_a_deficit(logged):
    short = {0: 0.02, 1: 0.03, 2: 0.025, 3: 0.035, 4: 0.04}
    curves = _as_extrapolation(logged, short)
    x = read_extrapolated(curves, "critic", "outcome", E, BUDGET, EVERY)
    d = x.per_seed.set_index("seed")["difference"]
    np.testing.assert_allclose(d.to_numpy(), [-short[s] for s in range(5)], atol=1e-12)
    # the observed lead by hand: mean over i ≤ 11 of (treatment − control at its evaluation i)
    s0t = curves[(curves["configuration"] == "critic") & (curves["seed"] == 0)].sort_values("eval_index")
    s0c = curves[(curves["configuration"] == "outcome") & (curves["seed"] == 0)].sort_values("eval_index")
    lead = (s0t["accuracy"].to_numpy()[1:12] - s0c["accuracy"].to_numpy()[1:12]).mean()
    assert x.per_seed.set_index("seed").loc[0, "observed_lead"] == pytest.approx(lead, abs=1e-12)
    plan = _validate(_plan('at = "extrapolated"\nefficiency = 1.36\ntier = "primary"\nprediction = "deficit"')
                     .replace('members = ["C1"]', 'members = ["C1", "X"]'))
    c = plan.contrast("X")
    row = contrast_statistics(d.to_numpy(), c, plan, n_resamples=500)
    ref = sps.ttest_1samp(d.to_numpy(), 0.0)
    assert row["mean"] == pytest.approx(-np.mean(list(short.values())), abs=1e-12)
    assert row["p"] == pytest.approx(ref.pvalue, rel=1e-9)
    out = adjust_and_read(pd.DataFrame([{"contrast": "X", "tier": "primary", "kind": "superiority",
                                         "prediction": "deficit", **row}]), plan, exploratory=False)
    assert out.loc[0, "verdict"] == "deficit" and bool(out.loc[0, "prediction_met"])


def test_no_usable_evaluation_and_runs_that_stop_short_are_refused(logged):
    with pytest.raises(ReadingError, match="no usable evaluation"):
        read_extrapolated(logged, "critic", "outcome", 17.0, BUDGET, EVERY)
    short = logged[~((logged["configuration"] == "critic") & (logged["seed"] == 2) & (logged["eval_index"] > 5))]
    with pytest.raises(ReadingError, match=r"'critic' seed 2: no evaluation at or after 1,100,000 tokens"):
        read_extrapolated(short, "critic", "outcome", E, BUDGET, EVERY)
    x = read_extrapolated(short, "critic", "outcome", E, BUDGET, EVERY, allow_unpaired=True)
    assert sorted(x.per_seed["seed"]) == [0, 1, 3, 4]
    lone = logged[~((logged["configuration"] == "outcome") & (logged["seed"] == 4))]
    with pytest.raises(ReadingError, match="seed 4: configuration 'critic' has evaluations, 'outcome' has none"):
        read_extrapolated(lone, "critic", "outcome", E, BUDGET, EVERY)


def test_a_string_efficiency_without_gradient_results_names_the_command(tmp_path):
    assert contrast_efficiency(tmp_path, None, 1.36) == (1.36, "plan")
    with pytest.raises(PreregError, match=r"TEST a \[\[gradient_tests\]\] id \(have: none\)"):
        contrast_efficiency(tmp_path, SimpleNamespace(gradient_tests=[]), "G1:critic_td")


# ------------------------------------------------------------------------------ plans

def _plan(extra: str = "", design: str = "") -> str:
    return SMALL_PLAN.replace("[[families]]", f"[[contrasts]]\nid = \"X\"\ntreatment = \"B\"\ncontrol = \"A\"\n"
                                              f"{design}{extra}\n\n[[families]]")


def _validate(text: str):
    return validate_plan(tomllib.loads(text), source="plan.toml", text=text)


def _errors(text: str) -> str:
    with pytest.raises(PlanError) as ei:
        _validate(text)
    return "\n".join(ei.value.lines)


def test_an_extrapolated_contrast_parses_with_a_number_or_a_test_reference():
    plan = _validate(_plan('at = "extrapolated"\nefficiency = 1.36\ntier = "secondary"'))
    c = plan.contrast("X")
    assert (c.reading_point.kind, c.efficiency, str(c.reading_point)) == ("extrapolated", 1.36, "extrapolated")
    assert parse_reading_point(str(c.reading_point)) == c.reading_point
    assert _validate(_plan('at = "extrapolated"\nefficiency = 2\ntier = "secondary"')).contrast("X").efficiency == 2
    # a reference needs the gradient test it names
    assert "unknown gradient test 'G1' (have: no [[gradient_tests]])" in _errors(
        _plan('at = "extrapolated"\nefficiency = "G1:critic_td"\ntier = "secondary"'))


@pytest.mark.parametrize("extra, key, why", [
    ('at = "extrapolated"', "at", "needs efficiency = e"),
    ('efficiency = 1.36', "efficiency", "this contrast is read at 'B'"),
    ('at = "extrapolated"\nefficiency = 0', "efficiency", "above 0"),
    ('at = "extrapolated"\nefficiency = -1.36', "efficiency", "above 0"),
    ('at = "extrapolated"\nefficiency = nan', "efficiency", "not a finite number"),
    ('at = "extrapolated"\nefficiency = inf', "efficiency", "not a finite number"),
    ('at = "extrapolated"\nefficiency = true', "efficiency", ""),
    ('at = "extrapolated"\nefficiency = "G1"', "efficiency", "TEST:configuration"),
    ('at = "extrapolated"\nefficiency = ":critic_td"', "efficiency", "TEST:configuration"),
    ('at = "extrapolated"\nefficiency = "G1:a:b"', "efficiency", "TEST:configuration"),
    ('at = "extrapolated:2B"\nefficiency = 1.36', "at", "expected a reading point"),
    ('at = "extrapolate"\nefficiency = 1.36', "at", "expected a reading point"),
])
def test_hostile_extrapolated_contrasts_are_refused_at_their_key(extra, key, why):
    err = _errors(_plan(extra + '\ntier = "secondary"'))
    assert f"contrasts[2].{key}:" in err and why in err, err
    assert "plan.toml:" in err


@pytest.mark.parametrize("design", ["welch", "pooled", "difference_of_differences"])
def test_an_extrapolated_contrast_is_paired_only(design):
    err = _errors(_plan('at = "extrapolated"\nefficiency = 1.36\ntier = "secondary"', design=f'design = "{design}"\n'))
    assert "contrasts[2].design: an extrapolated contrast is paired" in err, err


def test_an_extrapolated_contrast_needs_one_token_budget():
    text = _plan('at = "extrapolated"\nefficiency = 1.36\ntier = "secondary"').replace(
        'tokens = "1M"', 'iterations = 100')
    assert "needs one token budget B" in _errors(text)


class _Test:
    def __init__(self, id, configurations):
        self.id, self.configurations = id, configurations


def test_a_test_reference_names_a_gradient_test_and_one_of_its_configurations():
    from prereg_kit.plan.designs import extrapolation_problems

    def probs(ref: str, tests) -> list[str]:
        plan = _validate(_plan('at = "extrapolated"\nefficiency = 1.36\ntier = "secondary"'))
        object.__setattr__(plan.contrast("X"), "efficiency", ref)
        object.__setattr__(plan, "gradient_tests", tests)  # stand-ins for [[gradient_tests]] entries
        return [m for _, m in extrapolation_problems(plan, plan.contrast("X"), ("contrasts", 2))]

    tests = [_Test("G1", ["outcome", "critic_td"])]
    assert probs("G1:critic_td", tests) == []
    assert probs("G2:critic_td", tests) == ["unknown gradient test 'G2' (have: G1)"]
    assert probs("g1:critic_td", tests) == ["unknown gradient test 'g1' (have: G1)"]
    assert probs("G1:critic", tests) == ["gradient test 'G1' does not measure 'critic' (it measures outcome, critic_td)"]
    assert probs("G1:critic_td", []) == ["unknown gradient test 'G1' (have: no [[gradient_tests]])"]


# ------------------------------------------------------------------------------ dry run and report

EXTRA = '''
[[contrasts]]
id = "F1"
treatment = "grpo"
control = "frozen"
at = "extrapolated"
efficiency = 1.36
tier = "secondary"
prediction = "deficit"

[[contrasts]]
id = "F2"
treatment = "grpo"
control = "frozen"
at = "extrapolated"
efficiency = "G1:grpo"
tier = "exploratory"

[[gradient_tests]]
id = "G1"
configurations = ["frozen", "grpo"]
baseline = "frozen"
batches = 8
'''


@pytest.mark.figures
def test_the_dry_run_reads_a_numeric_e_and_a_synthetic_test_reference(tmp_path, lock_reads):

    from prereg_kit.simulate.dryrun import dry_run

    text = (ROOT / "registry" / "cpu-grpo" / "plan.toml").read_text()
    path = tmp_path / "plan.toml"
    path.write_text(text.replace("[[families]]", EXTRA.lstrip() + "\n[[families]]", 1))
    res = dry_run(path, {"C1": 0.04}, out=tmp_path / "dr", n_resamples=50, progress=False)
    a = res.analysis
    rows = a.contrasts.set_index("contrast")
    f1, f2 = rows.loc["F1"], rows.loc["F2"]
    assert (f1["status"], f1["efficiency"], f1["usable_evaluations"], f1["last_usable"]) == ("read", 1.36, 5, "5B/8")
    # the dry run synthesizes the gradient test's result and reads F2 at its (synthetic) estimate
    assert f2["status"] == "read" and f2["efficiency_source"] == "G1:grpo" and f2["efficiency"] > 0
    # an independent recomputation from the analysis's own curves (eval_every = "B/8": 1.36·5/8 ≤ 1 < 1.36·6/8)
    B = 30_000
    cv = a.curves
    diffs, pred = [], []
    for s in range(6):
        t = cv[(cv["configuration"] == "grpo") & (cv["seed"] == s)].sort_values("eval_index")
        c = cv[(cv["configuration"] == "frozen") & (cv["seed"] == s)].sort_values("eval_index")
        ti = np.arange(1, 6) * (B // 8)
        at = lambda run, x: run["accuracy"].to_numpy()[np.searchsorted(run["tokens"].to_numpy(), x)]  # noqa: E731
        ext = np.interp(1.36 * ti, c["tokens"], c["accuracy"])
        diffs.append(np.mean(at(t, ti) - ext))
        pred.append(np.mean(ext - at(c, ti)))
    assert f1["mean"] == pytest.approx(np.mean(diffs), abs=1e-12)
    assert f1["predicted_lead"] == pytest.approx(np.mean(pred), abs=1e-12)
    assert f1["p"] == pytest.approx(sps.ttest_1samp(diffs, 0.0).pvalue, rel=1e-9)
    report = tmp_path / "dr" / "report"
    md = (report / "report.md").read_text()
    assert "observed − extrapolated, e = 1.36, 5 evaluations to 5B/8; predicted lead" in md
    assert "a heuristic, not a derived prediction (dense-rewards paper §3.3)" in md
    assert (report / "extrapolated-F1.png").stat().st_size > 0 and (report / "extrapolated-F2.png").stat().st_size > 0
    js = {r["contrast"]: r for r in json.loads((report / "results.json").read_text())["contrasts"]}
    assert js["F1"]["usable_evaluations"] == 5 and js["F1"]["efficiency"] == 1.36
    assert {"predicted_lead", "observed_lead", "efficiency", "usable_evaluations"} <= set(pd.read_csv(report / "contrasts.csv").columns)
    # the analysis reads plan.lock once: F2's efficiency takes the chain verify read (it was read
    # twice more per extrapolated contrast that names a gradient test)
    from prereg_kit.analysis.analyze import analyze_study

    lock_reads.clear()
    again = analyze_study(tmp_path / "dr", n_resamples=50, progress=False)
    assert again.contrasts.set_index("contrast").loc["F2", "efficiency"] == f2["efficiency"]
    assert lock_reads == [tmp_path / "dr" / "plan.lock"]
