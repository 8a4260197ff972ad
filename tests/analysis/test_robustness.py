"""A contrast's named test, its robustness rows and the flag when they disagree; minimal-effect
contrasts; a family's adjustment method; effect sizes in the contrasts table."""

from __future__ import annotations

import json
import tomllib

import numpy as np
import pandas as pd
import pytest
from plans import ANALYSIS_PLAN
from statsmodels.stats.multitest import multipletests

from prereg_kit import stats
from prereg_kit.analysis.robustness import MARK, reading_of, robust_columns, robustness_table
from prereg_kit.analysis.verdicts import adjust_and_read, contrast_statistics
from prereg_kit.plan import validate_plan
from prereg_kit.plan.load import PlanError
from prereg_kit.report import console_table, printed_test, render_markdown
from prereg_kit.simulate.dryrun import dry_run


def _plan(extra: str = "", *, p1: str = "", family: str = ""):
    text = ANALYSIS_PLAN.replace('tier = "primary"\nprediction = "gain"\n', f'tier = "primary"\nprediction = "gain"\n{p1}\n', 1)
    text = text.replace('members = ["P1", "P2"]\n', f'members = ["P1", "P2"]\n{family}\n')
    return validate_plan(tomllib.loads(text + extra))


WELCH = """
[[contrasts]]
id = "W1"
treatment = "big"
control = "ctl"
design = "welch"
tier = "secondary"
"""


def test_plan_accepts_tests_robustness_minimal_effect_and_methods():
    plan = _plan(p1='test = "wilcoxon"\nrobustness = ["t", "sign-flip", "bootstrap-bca"]', family='method = "hochberg"')
    c = plan.contrast("P1")
    assert c.test == "wilcoxon" and c.robustness == ["t", "sign-flip", "bootstrap-bca"]
    assert plan.families[0].method == "hochberg"
    assert plan.contrast("P2").test == "t" and plan.contrast("P2").robustness == []
    met = _plan('\n[[contrasts]]\nid = "M1"\ntreatment = "big"\ncontrol = "ctl"\ntier = "secondary"\n'
                'kind = "minimal-effect"\nmargin = 0.01\nrobustness = ["wilcoxon", "sign-flip"]\n')
    assert met.contrast("M1").kind == "minimal-effect"
    for method in ("holm", "hommel", "bh", "bonferroni"):
        assert _plan(family=f'method = "{method}"').families[0].method == method


@pytest.mark.parametrize("p1, family, extra, match", [
    ('test = "anova"', "", "", "test"),
    ('robustness = ["median"]', "", "", "robustness"),
    ("", 'method = "sidak"', "", "method"),
    ('test = "wilcoxon"\nrobustness = ["wilcoxon"]', "", "", "P1: robustness 'wilcoxon' is already the contrast's test"),
    ('robustness = ["sign-flip", "sign-flip"]', "", "", "P1: robustness names 'sign-flip' twice"),
    ('alternative = "greater"\nrobustness = ["bootstrap-bca"]', "", "", "P1: robustness 'bootstrap-bca' gives a two-sided p"),
    ("", "", WELCH.replace('tier = "secondary"', 'tier = "secondary"\nrobustness = ["wilcoxon"]'),
     "W1: robustness 'wilcoxon': a welch contrast"),
    ("", "", WELCH.replace('tier = "secondary"', 'tier = "secondary"\ntest = "bootstrap-bca"'),
     "W1: test 'bootstrap-bca': a welch contrast"),
    ("", "", WELCH.replace('tier = "secondary"', 'tier = "secondary"\nkind = "minimal-effect"'),
     "W1: kind minimal-effect tests paired differences"),
    ("", "", '\n[[contrasts]]\nid = "M1"\ntreatment = "big"\ncontrol = "ctl"\ntier = "secondary"\n'
     'kind = "minimal-effect"\ntest = "bootstrap-studentized"\n', "M1: test 'bootstrap-studentized' has no minimal-effect test"),
    ("", "", '\n[[contrasts]]\nid = "T1"\ntreatment = "big"\ncontrol = "ctl"\ntier = "exploratory"\n'
     'at = "to_target"\nrobustness = ["wilcoxon"]\n', "T1: robustness 'wilcoxon': a to_target reading"),
])
def test_plan_refuses_unsupported_combinations(p1, family, extra, match):
    with pytest.raises(PlanError, match=match):
        _plan(extra, p1=p1, family=family)


def test_pooled_and_difference_of_differences_take_robust_tests():
    extra = ('\n[[contrasts]]\nid = "D1"\ntreatment = "big"\ncontrol = "ctl"\nminus_treatment = "same"\n'
             'minus_control = "ctl"\ndesign = "difference_of_differences"\ntier = "secondary"\nrobustness = ["wilcoxon"]\n'
             '\n[[contrasts]]\nid = "Q1"\ndesign = "pooled"\npairs = [["big", "ctl"], ["same", "ctl"]]\n'
             'tier = "secondary"\ntest = "sign-flip"\n')
    plan = _plan(extra)
    assert plan.contrast("D1").robustness == ["wilcoxon"] and plan.contrast("Q1").test == "sign-flip"


AGREE = np.array([0.05, 0.06, 0.04, 0.07, 0.05, 0.06, 0.055, 0.045])
# six seeds: five consistent gains and one seed a hair below zero. The t reads a gain; with six
# seeds neither the signed-rank nor the sign-flip test can reach p < .05 unless every seed gains
FEW = np.array([0.03, 0.031, 0.029, 0.03, 0.032, -0.001])
# eleven consistent gains and one huge negative outlier seed: the outlier drags the mean below
# zero (t inconclusive) but is one rank among twelve (Wilcoxon reads a gain)
OUTLIER = np.r_[0.03 + 0.003 * np.arange(-5, 6) / 5, -0.5]


def _read(plan, diffs: dict[str, np.ndarray]) -> pd.DataFrame:
    rows = []
    for cid, d in diffs.items():
        c = plan.contrast(cid)
        row = {"contrast": cid, "tier": c.tier, "kind": c.kind, "prediction": c.prediction}
        row.update(contrast_statistics(d, c, plan, n_resamples=500))
        row.update(robust_columns(d, c, plan, n_resamples=500))
        rows.append(row)
    return adjust_and_read(pd.DataFrame(rows), plan, exploratory=False).set_index("contrast")


def test_t_gain_not_shown_by_robust_tests_is_flagged():
    plan = _plan(p1='robustness = ["wilcoxon", "sign-flip"]')
    df = _read(plan, {"P1": FEW, "P2": AGREE})
    r = df.loc["P1"]
    assert r["verdict"] == "gain"
    wil = stats.wilcoxon_paired(FEW)
    assert np.isclose(r["robust_wilcoxon_p"], wil.p) and np.isclose(r["robust_wilcoxon_estimate"], wil.hl)
    assert np.isclose(r["robust_sign_flip_p"], stats.sign_flip_test(FEW).p)
    # the robust p takes the contrast's place in its Holm family
    assert np.isclose(r["robust_wilcoxon_p_adjusted"], stats.holm([wil.p, df.loc["P2", "tested_p"]])[0])
    assert r["robust_wilcoxon_verdict"] == r["robust_sign_flip_verdict"] == "inconclusive"
    assert r["verdict_changes_under"] == "wilcoxon; sign-flip"
    assert df.loc["P2", "verdict_changes_under"] == ""  # P2 names no robustness rows


def test_outlier_seed_flags_wilcoxon_against_the_t():
    plan = _plan(p1='robustness = ["wilcoxon", "sign-flip"]')
    r = _read(plan, {"P1": OUTLIER, "P2": AGREE}).loc["P1"]
    assert r["verdict"] == "inconclusive" and r["robust_wilcoxon_verdict"] == "gain"
    assert r["robust_sign_flip_verdict"] == "inconclusive"
    assert r["verdict_changes_under"] == "wilcoxon"


def test_no_flag_when_the_tests_agree():
    plan = _plan(p1='robustness = ["wilcoxon", "sign-flip", "bootstrap-bca", "bootstrap-studentized"]')
    df = _read(plan, {"P1": AGREE, "P2": AGREE / 10})
    r = df.loc["P1"]
    assert r["verdict"] == "gain" and r["verdict_changes_under"] == ""
    for t in ("wilcoxon", "sign_flip", "bootstrap_bca", "bootstrap_studentized"):
        assert r[f"robust_{t}_verdict"] == "gain"
    assert r["d_z"] == pytest.approx(stats.effect_size_paired(AGREE).d_z)
    assert r["g_z_ci_low"] == pytest.approx(stats.effect_size_paired(AGREE).g_z_ci[0])
    assert r["result_in_words"] == stats.describe(stats.paired_t(AGREE))


def test_named_test_replaces_the_t_and_is_adjusted_in_its_family():
    plan = _plan(p1='test = "wilcoxon"')
    d = np.array([0.02, 0.021, 0.019, 0.02, 0.022, 0.018, -0.01, 0.30])
    df = _read(plan, {"P1": d, "P2": AGREE / 10})
    r = df.loc["P1"]
    wil = stats.wilcoxon_paired(d)
    assert r["test"] == "wilcoxon" and np.isclose(r["tested_p"], wil.p) and np.isclose(r["test_p"], wil.p)
    assert np.isclose(r["p_adjusted"], stats.holm([wil.p, df.loc["P2", "tested_p"]])[0])
    assert r["verdict_reason"].startswith("wilcoxon: ")
    assert "Holm wilcoxon p = " in printed_test(r)


def test_family_method_hochberg_matches_statsmodels():
    plan = _plan(family='method = "hochberg"')
    spread = np.array([1, -1, 2, -2, 1.5, 0.5, -0.5, 0.3]) * 0.01
    df = _read(plan, {"P1": spread + 0.010, "P2": spread + 0.009})  # p ≈ .035 and .048
    p = df.loc[["P1", "P2"], "tested_p"].to_numpy()
    want = multipletests(p, method="simes-hochberg")[1]
    assert np.allclose(df.loc[["P1", "P2"], "p_adjusted"], want)
    assert not np.allclose(want, multipletests(p, method="holm")[1])  # the method makes a difference here
    assert (df.loc[["P1", "P2"], "adjustment"] == "hochberg").all()
    assert (df.loc[["P1", "P2"], "verdict"] == "gain").all()  # Holm would read both inconclusive


def test_minimal_effect_reads_beyond_the_margin():
    extra = ('\n[[contrasts]]\nid = "M1"\ntreatment = "big"\ncontrol = "ctl"\ntier = "secondary"\n'
             'kind = "minimal-effect"\nmargin = 0.02\nrobustness = ["wilcoxon"]\n')
    plan = _plan(extra)
    df = _read(plan, {"P1": AGREE, "P2": AGREE, "M1": AGREE})
    met = stats.minimal_effect_paired(AGREE, margin=0.02, alpha=0.05)
    r = df.loc["M1"]
    assert np.isclose(r["tested_p"], met.p) and r["verdict"] == "gain" and r["robust_wilcoxon_verdict"] == "gain"
    small = _read(plan, {"P1": AGREE, "P2": AGREE, "M1": AGREE / 4}).loc["M1"]  # a gain, but not beyond 0.02
    assert small["verdict"] == "inconclusive"


def test_equivalence_and_noninferiority_readings_per_test():
    d = np.array([0.004, -0.003, 0.002, 0.001, -0.002, 0.003, 0.0, -0.001])
    kw = dict(low=-0.03, high=0.03, alpha=0.05, confidence=0.95, n_resamples=500, seed=0)
    for t in ("t", "wilcoxon", "sign-flip", "bootstrap-bca", "bootstrap-studentized"):
        eq = reading_of(t, d, "equivalence", **kw)
        ni = reading_of(t, d, "non-inferiority", **kw)
        assert eq["p"] < 0.05 and -0.03 < eq["ci_low"] < eq["ci_high"] < 0.03, t
        assert ni["p"] < 0.05 and ni["ci_low"] > -0.03, t
    assert np.isclose(reading_of("wilcoxon", d, "equivalence", **kw)["p"], stats.wilcoxon_tost(d, margin=0.03).p)


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    d = tmp_path_factory.mktemp("robust")
    text = ANALYSIS_PLAN.replace('tier = "primary"\nprediction = "gain"\n',
                                 'tier = "primary"\nprediction = "gain"\nrobustness = ["wilcoxon", "sign-flip"]\n', 1)
    (d / "plan.toml").write_text(text)
    return dry_run(d / "plan.toml", {"P1": 0.06, "P2": 0.0}, seed=3, progress=False, update_ratio={"big": 0.5},
                   time_ratio={"same": 1.5})


def test_dry_run_writes_robustness_rows_and_effect_sizes(dry):
    rep = dry.folder / "report"
    cs = pd.read_csv(rep / "contrasts.csv").set_index("contrast")
    ps = pd.read_csv(rep / "per_seed.csv")
    d = ps.loc[ps.contrast == "P1", "difference"].to_numpy()
    assert np.isclose(cs.loc["P1", "robust_wilcoxon_p"], stats.wilcoxon_paired(d).p)
    assert np.isclose(cs.loc["P1", "d_z"], stats.effect_size_paired(d).d_z)
    res = json.loads((rep / "results.json").read_text())
    p1 = next(r for r in res["contrasts"] if r["contrast"] == "P1")
    assert isinstance(p1["verdict_changes_under"], list) and "robust_sign_flip_verdict" in p1
    md = (rep / "report.md").read_text()
    assert "### Robustness" in md and "| P1 | wilcoxon |" in md and "| P1 | t (the contrast's) |" in md
    assert np.isclose(cs.loc["P1", "robust_wilcoxon_ci_level"], stats.wilcoxon_paired(d).ci_level)
    assert "| estimate [interval] | level | verdict |" in md


def test_robustness_rows_show_the_level_the_interval_attains():
    # five seeds: the best two-sided Walsh interval covers 93.75%, not the 95% asked for; the t's
    # and the bootstrap's intervals are computed at 95%
    five = np.array([0.03, 0.031, 0.029, 0.033, 0.032])
    plan = _plan(p1='robustness = ["wilcoxon", "bootstrap-bca"]')
    df = _read(plan, {"P1": five, "P2": AGREE})
    r = df.loc["P1"]
    assert r["robust_wilcoxon_ci_level"] == stats.wilcoxon_paired(five).ci_level == 0.9375
    assert r["robust_bootstrap_bca_ci_level"] == 0.95
    rows = robustness_table(df.reset_index(), lambda p: f"{p:.3g}", confidence=0.95, alpha=0.05)
    assert "| level |" in rows[2]
    wil = next(line for line in rows if line.startswith("| P1 | wilcoxon |"))
    assert "| 93.8% |" in wil
    assert "| 95% |" in next(line for line in rows if line.startswith("| P1 | t (the contrast's) |"))
    # a contrast read by Wilcoxon itself shows its own attained level on its first row
    df = _read(_plan(p1='test = "wilcoxon"\nrobustness = ["t"]'), {"P1": five, "P2": AGREE})
    assert df.loc["P1", "test_ci_level"] == 0.9375
    rows = robustness_table(df.reset_index(), lambda p: f"{p:.3g}")
    assert "| 93.8% |" in next(line for line in rows if line.startswith("| P1 | wilcoxon (the contrast's) |"))


def test_a_bootstrap_p_of_zero_is_noted_for_the_report():
    plan = _plan()
    notes: list[str] = []
    row = contrast_statistics(np.array([0.01, 0.02]), plan.contrast("P1"), plan, n_resamples=500, notes=notes)
    assert row["boot_p"] == 0.0
    assert len(notes) == 1 and notes[0].startswith("contrast P1: bootstrap p = 0 only says that all 2 differences")
    contrast_statistics(np.array([0.01, -0.02, 0.03]), plan.contrast("P1"), plan, n_resamples=500, notes=notes)
    assert len(notes) == 1


def test_flag_shows_in_report_html_and_console(dry):
    a = dry.analysis
    c = a.contrasts.copy()
    i = c.index[c["contrast"] == "P1"][0]
    c.loc[i, "verdict_changes_under"] = "wilcoxon"
    c.loc[i, "robust_wilcoxon_verdict"] = "inconclusive"
    a2 = type(a)(**{**a.__dict__, "contrasts": c})
    md = render_markdown(a2)
    assert f"{MARK} The verdict changes under a robustness test named in the plan: P1 (wilcoxon: inconclusive)." in md
    row = next(line for line in md.splitlines() if line.startswith("| P1 "))
    assert MARK in row
    from prereg_kit.report.html import render_html
    page = render_html(md, {})  # a dry run's page: nothing bold
    assert "P1 (wilcoxon: inconclusive)" in page and f"<td>gain {MARK}</td>" in page
    from rich.console import Console
    con = Console(width=250, record=True)
    con.print(console_table(a2))
    assert "changes under wilcoxon" in con.export_text()
    # unflagged: no mark anywhere
    assert MARK not in render_markdown(a).split("### Robustness")[0]
