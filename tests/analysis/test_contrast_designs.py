"""Contrasts beyond one seed-paired pair: per-contrast seeds, difference of differences, pooled
pairs, Welch; manipulation checks. Each statistic is checked against scipy / statsmodels on the
per-unit values the report writes, and each plan check is tried with inputs it must refuse."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.weightstats import ttost_ind

from prereg_kit import stats
from prereg_kit.analysis.checks import read_checks
from prereg_kit.errors import PlanError, PreregError
from prereg_kit.plan import validate_plan
from prereg_kit.report import render_markdown
from prereg_kit.simulate.dryrun import configuration_effects, dry_run

HEAD = """\
[study]
id = "designs"
title = "Designs"
question = "Do the designs read?"
comparator = "A"
seeds = "0-23"

[configurations.A]
[configurations.B]
[configurations.C]
[configurations.D]

[budget]
tokens = "1M"

[evaluation]
sets = [{ name = "test", n_problems = 40 }]

[[families]]
name = "primary"
members = ["P1", "DD"]
"""

CONTRASTS = """
[[contrasts]]
id = "P1"
treatment = "B"
control = "A"
tier = "primary"
seeds = "0-5"

[[contrasts]]
id = "BA"
treatment = "B"
control = "A"
tier = "secondary"

[[contrasts]]
id = "DC"
treatment = "D"
control = "C"
tier = "secondary"

[[contrasts]]
id = "DD"
design = "difference_of_differences"
treatment = "B"
control = "A"
minus_treatment = "D"
minus_control = "C"
tier = "primary"

[[contrasts]]
id = "DD-eq"
design = "difference_of_differences"
treatment = "B"
control = "A"
minus_treatment = "D"
minus_control = "C"
tier = "secondary"
kind = "equivalence"
margin = 0.05

[[contrasts]]
id = "POOL"
design = "pooled"
pairs = [["B", "A"], ["D", "C"]]
tier = "secondary"
seeds = "0-11"

[[contrasts]]
id = "W"
design = "welch"
treatment = "B"
control = "A"
tier = "secondary"
kind = "equivalence"
margin = 0.05

[[contrasts]]
id = "W-ni"
design = "welch"
treatment = "B"
control = "A"
tier = "secondary"
kind = "non-inferiority"

[[contrasts]]
id = "W2"
design = "welch"
treatment = "B"
control = "A"
minus_treatment = "D"
minus_control = "C"
tier = "exploratory"

[[checks]]
id = "M-target"
configuration = "B"
metric = "selected_predicted_success"
expect = "closer_to_target"
target = 0.5
control = "A"
seeds = "0-9"

[[checks]]
id = "M-reward"
configuration = "B"
metric = "reward_mean"
expect = "greater"
control = "A"
"""
PLAN = HEAD + CONTRASTS
# the dry run's plan: 12 of the 24 seeds (each seed subset still a strict one: P1 0-5, POOL 0-7,
# M-target 0-9), 4 evaluations of 20 problems per run (the designs read each run once, at B)
DRY_PLAN = (PLAN.replace('seeds = "0-23"', 'seeds = "0-11"').replace('tokens = "1M"', 'tokens = "1M"\neval_every = "B/4"')
            .replace("n_problems = 40", "n_problems = 20")
            .replace('pairs = [["B", "A"], ["D", "C"]]\ntier = "secondary"\nseeds = "0-11"',
                     'pairs = [["B", "A"], ["D", "C"]]\ntier = "secondary"\nseeds = "0-7"'))


def _errors(text: str) -> list[str]:
    with pytest.raises(PlanError) as ei:
        validate_plan(tomllib.loads(text), source="plan.toml", text=text)
    return ei.value.lines


def _plan(text: str = PLAN):
    return validate_plan(tomllib.loads(text))


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    d = tmp_path_factory.mktemp("designs")
    (d / "plan.toml").write_text(DRY_PLAN)
    run = dry_run(d / "plan.toml", {"BA": 0.03, "DC": 0.01}, seed=5, progress=False, n_resamples=200)
    res = json.loads((run.folder / "report" / "results.json").read_text())
    per_seed = pd.read_csv(run.folder / "report" / "per_seed.csv")
    return run, res, per_seed


def _row(res, cid):
    return next(r for r in res["contrasts"] if r["contrast"] == cid)


def _diffs(per_seed, cid):
    g = per_seed[per_seed["contrast"] == cid].set_index("seed").sort_index()
    return g


# ------------------------------------------------------------------ seeds and n in results.json


def test_contrast_seeds_give_n_6_of_12(dry):
    _, res, per_seed = dry
    p1 = _row(res, "P1")
    assert p1["n"] == 6 and p1["seeds"] == "0-5"
    assert sorted(per_seed.loc[per_seed["contrast"] == "P1", "seed"]) == list(range(6))
    assert _row(res, "BA")["n"] == 12
    ba = _diffs(per_seed, "BA")["difference"]
    want = sps.ttest_1samp(ba.loc[0:5].to_numpy(), 0.0)
    assert p1["p"] == pytest.approx(want.pvalue, rel=1e-9)


# ------------------------------------------------------------------ difference of differences


def test_difference_of_differences_against_hand_and_scipy(dry):
    _, res, per_seed = dry
    ba, dc, dd = (_diffs(per_seed, c) for c in ("BA", "DC", "DD"))
    hand = ba["difference"] - dc["difference"]
    assert np.allclose(dd["difference"], hand.loc[dd.index], atol=1e-12)
    assert np.allclose(dd["treatment_value"], ba["difference"]) and np.allclose(dd["control_value"], dc["difference"])
    row = _row(res, "DD")
    ref = sps.ttest_1samp(hand.to_numpy(), 0.0)
    ci = ref.confidence_interval(0.95)
    assert row["n"] == 12 and row["design"] == "difference_of_differences"
    assert row["mean"] == pytest.approx(hand.mean(), abs=1e-12)
    assert row["t"] == pytest.approx(ref.statistic) and row["p"] == pytest.approx(ref.pvalue)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((ci.low, ci.high))
    eq = _row(res, "DD-eq")  # TOST on the per-seed values: max of two one-sided tests
    lo = sps.ttest_1samp(hand.to_numpy(), -0.05, alternative="greater").pvalue
    hi = sps.ttest_1samp(hand.to_numpy(), 0.05, alternative="less").pvalue
    assert eq["tost_p"] == pytest.approx(max(lo, hi)) and eq["tested_p"] == eq["tost_p"]


def test_pooled_units_are_pair_seed_differences(dry):
    _, res, per_seed = dry
    pool = per_seed[per_seed["contrast"] == "POOL"]
    assert sorted(pool["unit"].unique()) == ["B − A", "D − C"] and len(pool) == 16
    ba, dc = _diffs(per_seed, "BA")["difference"], _diffs(per_seed, "DC")["difference"]
    units = np.concatenate([ba.loc[0:7].to_numpy(), dc.loc[0:7].to_numpy()])
    ref = sps.ttest_1samp(units, 0.0)
    row = _row(res, "POOL")
    assert row["n"] == 16 and row["df"] == 15
    assert row["p"] == pytest.approx(ref.pvalue) and row["mean"] == pytest.approx(units.mean())
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(tuple(ref.confidence_interval(0.95)))


def test_welch_rows_against_scipy_and_statsmodels(dry):
    _, res, per_seed = dry
    ba = _diffs(per_seed, "BA")
    b, a = ba["treatment_value"].to_numpy(), ba["control_value"].to_numpy()
    ref = sps.ttest_ind(b, a, equal_var=False)
    w = _row(res, "W")
    assert (w["n"], w["n_treatment"], w["n_control"]) == (24, 12, 12)
    assert w["p"] == pytest.approx(ref.pvalue) and w["df"] == pytest.approx(ref.df)
    assert (w["ci_low"], w["ci_high"]) == pytest.approx(tuple(ref.confidence_interval(0.95)))
    assert w["tost_p"] == pytest.approx(ttost_ind(b, a, -0.05, 0.05, usevar="unequal")[0])
    assert w["tested_p"] == w["tost_p"] and w["boot_p"] is None
    ni = _row(res, "W-ni")
    assert ni["ni_p"] == pytest.approx(sps.ttest_ind(b + 0.02, a, equal_var=False, alternative="greater").pvalue)
    w2 = _row(res, "W2")
    dc = _diffs(per_seed, "DC")["difference"].to_numpy()
    assert w2["p"] == pytest.approx(sps.ttest_ind(ba["difference"].to_numpy(), dc, equal_var=False).pvalue)
    groups = per_seed[per_seed["contrast"] == "W"]
    assert groups["difference"].isna().all() and set(groups["unit"]) == {"A", "B"}


def test_report_shows_design_and_checks(dry):
    run, res, _ = dry
    md = (run.folder / "report" / "report.md").read_text()
    assert "| design |" in md and "| difference_of_differences | (B − A) − (D − C) |" in md
    assert "| welch | welch: B vs A | B | 12 + 12 |" in md
    assert "## Manipulation checks" in md and "manipulation checks: 2 of 2 passed" in md
    checks = {c["check"]: c for c in res["checks"]}
    assert checks["M-target"]["passed"] is True and checks["M-target"]["n"] == 10
    assert (run.folder / "report" / "checks.csv").exists()
    seeds = [s for s in res["check_seeds"] if s["check"] == "M-reward"]
    d = np.array([s["d"] for s in seeds])
    assert checks["M-reward"]["p"] == pytest.approx(sps.ttest_1samp(d, 0.0, alternative="greater").pvalue)
    failed = res["checks"][0] | {"passed": False, "verdict": "fail"}
    # as a real report shows it (a dry run's report bolds nothing)
    a = replace(run.analysis, checks=pd.DataFrame([failed, res["checks"][1]]), synthetic=False)
    assert "1 of 2 passed; **FAILED: M-target**" in render_markdown(a)


# ------------------------------------------------------------------ Welch statistics alone


def test_welch_functions_against_references():
    rng = np.random.default_rng(11)
    a, b = rng.normal(0.31, 0.02, 5), rng.normal(0.29, 0.06, 9)
    for alt in ("two-sided", "greater", "less"):
        w = stats.welch_t(a, b, alternative=alt)
        ref = sps.ttest_ind(a, b, equal_var=False, alternative=alt)
        assert (w.t, w.p, w.df) == pytest.approx((ref.statistic, ref.pvalue, ref.df))
        assert (w.ci_low, w.ci_high) == pytest.approx(tuple(ref.confidence_interval(0.95)))
    for lo, hi in ((-0.02, 0.02), (-0.01, 0.05)):
        assert stats.tost_welch(a, b, margin=(lo, hi)).p == pytest.approx(ttost_ind(a, b, lo, hi, usevar="unequal")[0])
    ni = stats.noninferiority_welch(a, b, margin=0.02)
    assert ni.p == pytest.approx(sps.ttest_ind(a + 0.02, b, equal_var=False, alternative="greater").pvalue)
    with pytest.raises(ValueError, match="at least 2"):
        stats.welch_t([0.3], b)
    with pytest.raises(ValueError, match="infinite"):
        stats.welch_t([0.3, np.inf], b)


# ------------------------------------------------------------------ checks on hand-made logs


def _iterations(values: dict[tuple[str, int], list[float]], column="selected_predicted_success"):
    rows = []
    for (cfg, seed), vals in values.items():
        for i, v in enumerate(vals):
            rows.append({"configuration": cfg, "seed": seed, "iteration": i, column: v,
                         "tokens_total": 250_000, "cum_tokens": 250_000 * (i + 1)})
    return pd.DataFrame(rows)


def test_check_reads_iterations_up_to_B_and_fails_the_wrong_way():
    plan = _plan(HEAD.replace('members = ["P1", "DD"]', 'members = ["P1"]') + """
[[contrasts]]
id = "P1"
treatment = "B"
control = "A"
tier = "primary"

[[checks]]
id = "M-less"
configuration = "B"
metric = "selected_predicted_success"
expect = "less"
threshold = 0.5
seeds = "0-2"
""")
    # iterations 0-3 begin before 1M tokens; the fifth (began at 1M) is past B and is not averaged
    its = _iterations({("B", s): [0.6 + 0.01 * s, 0.6, 0.6, 0.6, 0.0] for s in range(3)})
    checks, seeds = read_checks(plan, its)
    row = checks.iloc[0]
    assert list(seeds["value"]) == pytest.approx([0.6, 0.6025, 0.605])  # (0.6 + 0.01·s + 3·0.6) / 4
    assert row["verdict"] == "fail" and not row["passed"]
    ref = sps.ttest_1samp(seeds["value"].to_numpy(), 0.5, alternative="less")
    assert row["p"] == pytest.approx(ref.pvalue)
    with pytest.raises(PreregError, match="no per-iteration column 'selected_predicted_success'"):
        read_checks(plan, _iterations({("B", 0): [0.5]}, column="selected_predicted_sucess"))


# ------------------------------------------------------------------ plan checks that must refuse


def _with(block: str, head: str = HEAD) -> str:
    return head + """
[[contrasts]]
id = "P1"
treatment = "B"
control = "A"
tier = "primary"

[[contrasts]]
id = "DD"
treatment = "B"
control = "A"
tier = "primary"
""" + block


@pytest.mark.parametrize("block, message", [
    ('[[contrasts]]\nid = "X"\ntreatment = "B"\ncontrol = "A"\ntier = "secondary"\nseeds = "20-30"\n',
     "seed(s) 24-30 are not run by configuration 'B'"),
    ('[[contrasts]]\nid = "X"\ndesign = "difference_of_differences"\ntreatment = "B"\ncontrol = "A"\n'
     'minus_treatment = "D"\ntier = "secondary"\n', "needs 'minus_control'"),
    ('[[contrasts]]\nid = "X"\ntreatment = "B"\ncontrol = "A"\nminus_treatment = "D"\nminus_control = "C"\n'
     'tier = "secondary"\n', "a paired contrast takes no 'minus_treatment'"),
    ('[[contrasts]]\nid = "X"\ndesign = "difference_of_differences"\ntreatment = "B"\ncontrol = "A"\n'
     'minus_treatment = "A"\nminus_control = "B"\ntier = "secondary"\n', "the two differences compare the same configurations"),
    ('[[contrasts]]\nid = "X"\ndesign = "pooled"\npairs = [["B", "A"]]\ntier = "secondary"\n', "at least 2 pairs"),
    ('[[contrasts]]\nid = "X"\ndesign = "pooled"\npairs = [["B", "A"], ["D", "C", "A"]]\ntier = "secondary"\n',
     "a pair is [treatment, control], got 3"),
    ('[[contrasts]]\nid = "X"\ndesign = "pooled"\npairs = [["B", "A"], ["B", "A"]]\ntier = "secondary"\n', "listed twice"),
    ('[[contrasts]]\nid = "X"\ndesign = "pooled"\npairs = [["B", "A"], ["Dd", "C"]]\ntier = "secondary"\n',
     "unknown configuration 'Dd'"),
    ('[[contrasts]]\nid = "X"\ndesign = "pooled"\ntreatment = "B"\npairs = [["B", "A"], ["D", "C"]]\ntier = "secondary"\n',
     "a pooled contrast takes no 'treatment'"),
    ('[[contrasts]]\nid = "X"\ntreatment = "B"\ncontrol = "A"\npairs = [["B", "A"], ["D", "C"]]\ntier = "secondary"\n',
     "takes no 'pairs'"),
    ('[[contrasts]]\nid = "X"\ndesign = "welch"\ntreatment = "B"\ncontrol = "A"\nat = "time"\ntier = "secondary"\n',
     "read at a token reading point"),
    ('[[contrasts]]\nid = "X"\ndesign = "Welch"\ntreatment = "B"\ncontrol = "A"\ntier = "secondary"\n', "design"),
    ('[[contrasts]]\nid = "X"\ndesign = "pool"\npairs = [["B", "A"], ["D", "C"]]\ntier = "secondary"\n', "design"),
    ('[[contrasts]]\nid = "X"\ndesign = "pooled"\npairs = [["B", "B"], ["D", "C"]]\ntier = "secondary"\n',
     "'B' is both treatment and control"),
    ('[[checks]]\nid = "M"\nconfiguration = "B"\nmetric = "p"\nexpect = "closer_to_target"\ncontrol = "A"\n', "needs a target"),
    ('[[checks]]\nid = "M"\nconfiguration = "B"\nmetric = "p"\nexpect = "closer_to_target"\ntarget = 0.5\n',
     "needs a control or a baseline column"),
    ('[[checks]]\nid = "M"\nconfiguration = "B"\nmetric = "p"\nexpect = "greater"\ntarget = 0.5\n', "a target is read only"),
    ('[[checks]]\nid = "M"\nconfiguration = "B"\nmetric = "p"\nexpect = "greater"\ncontrol = "A"\nbaseline = "q"\n', "not both"),
    ('[[checks]]\nid = "M"\nconfiguration = "b"\nmetric = "p"\nexpect = "greater"\n', "unknown configuration 'b'"),
    ('[[checks]]\nid = "P1"\nconfiguration = "B"\nmetric = "p"\nexpect = "greater"\n', "duplicate id 'P1'"),
    ('[[checks]]\nid = "M"\nconfiguration = "B"\nmetric = "p"\nexpect = "greater"\nat = "time"\n', "token reading point"),
    ('[[checks]]\nid = "M"\nconfiguration = "B"\nmetric = "p"\nexpect = "greater"\nseeds = "22-25"\n',
     "seed(s) 24-25 are not run"),
    ('[[checks]]\nid = "M"\nconfiguration = "B"\nmetric = "p"\nexpect = "more"\n', "expect"),
])
def test_plan_refuses(block, message):
    lines = _errors(_with(block))
    assert any(message in line for line in lines), lines
    assert all(line.startswith("plan.toml:") for line in lines)


def test_seed_subset_on_a_study_of_other_seeds():
    text = _with('[[contrasts]]\nid = "X"\ntreatment = "B"\ncontrol = "A"\ntier = "secondary"\nseeds = "0-5"\n',
                 HEAD.replace('seeds = "0-23"', 'seeds = "6-11"'))
    assert any("seed(s) 0-5 are not run by configuration 'B' (it runs 6-11)" in line for line in _errors(text))


def test_designs_validate_and_list_their_configurations():
    plan = _plan()
    c = {c.id: c for c in plan.contrasts}
    assert c["DD"].configuration_names() == ["B", "A", "D", "C"]
    assert c["POOL"].arm_pairs() == [("B", "A"), ("D", "C")]
    assert plan.contrast_seeds(c["P1"]) == list(range(6)) and len(plan.contrast_seeds(c["W"])) == 24


def test_effects_for_pooled_and_refused_for_two_differences():
    plan = _plan()
    eff = configuration_effects(plan, {"POOL": 0.02})
    assert eff["B"] == 0.02 and eff["D"] - eff["C"] == pytest.approx(0.02)
    with pytest.raises(PreregError, match="compares two differences"):
        configuration_effects(plan, {"DD": 0.01})
