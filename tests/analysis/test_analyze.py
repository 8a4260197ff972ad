"""`prereg analyze` and `prereg dry-run` end to end on synthetic logs with known effects."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from plans import ANALYSIS_PLAN, lock_at
from typer.testing import CliRunner

from prereg_kit import stats
from prereg_kit.analysis.analyze import analyze_study
from prereg_kit.cli import app
from prereg_kit.errors import PreregError, ViolationError
from prereg_kit.plan import load_plan
from prereg_kit.report import format_p
from prereg_kit.simulate.dryrun import MARKER, configuration_effects, dry_run

pytestmark = pytest.mark.figures  # reads the report's figures (tests/conftest.py)

EFFECTS = {"P1": 0.06, "P2": 0.0}


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    d = tmp_path_factory.mktemp("ana")
    (d / "plan.toml").write_text(ANALYSIS_PLAN)
    return dry_run(d / "plan.toml", EFFECTS, seed=3, progress=False, update_ratio={"big": 0.5}, time_ratio={"same": 1.5})


def test_effects_propagate_through_contrasts(tmp_path):
    (tmp_path / "plan.toml").write_text(ANALYSIS_PLAN)
    plan = load_plan(tmp_path / "plan.toml").plan
    assert configuration_effects(plan, {"P1": 0.05}) == {"ctl": 0.0, "big": 0.05, "same": 0.0}
    with pytest.raises(PreregError, match="no such contrast"):
        configuration_effects(plan, {"Q": 0.1})
    with pytest.raises(PreregError, match="contradicts"):
        configuration_effects(plan, {"P2": 0.01, "E1": 0.02})


def test_report_recovers_known_effects(dry):
    c = dry.analysis.contrasts.set_index("contrast")
    # big − ctl = +0.06: the estimate is within 4 standard errors, and the verdict is a gain
    assert abs(c.loc["P1", "mean"] - 0.06) < 4 * c.loc["P1", "se"] + 0.005
    assert c.loc["P1", "verdict"] == "gain" and c.loc["P1", "prediction_met"]
    assert c.loc["P2", "verdict"] == "inconclusive"
    assert c.loc["P1", "ci_low"] <= c.loc["P1", "crossed_mean"] <= c.loc["P1", "ci_high"]
    # crossed bootstrap only for primary contrasts
    assert not np.isnan(c.loc["P1", "crossed_ci_low"]) and np.isnan(c.loc["E1", "crossed_ci_low"])
    h = dry.analysis.hypotheses.set_index("id")
    assert h.loc["H1", "outcome"] == "gain" and h.loc["H1", "reading"] == "big helps"


def test_contrast_rows_match_per_seed_values(dry):
    """A reader can recompute every row of contrasts.csv from per_seed.csv."""
    rep = dry.folder / "report"
    cs = pd.read_csv(rep / "contrasts.csv").set_index("contrast")
    ps = pd.read_csv(rep / "per_seed.csv")
    for cid, g in ps.groupby("contrast"):
        d = g["difference"].to_numpy()
        assert np.allclose(g["treatment_value"] - g["control_value"], d)
        alt = cs.loc[cid, "alternative"]
        ref = stats.paired_t(d, alternative=alt)
        assert cs.loc[cid, "n"] == len(d) == 8
        assert np.isclose(cs.loc[cid, "mean"], d.mean()) and np.isclose(cs.loc[cid, "p"], ref.p)
        assert np.isclose(cs.loc[cid, "ci_low"], ref.ci_low) and np.isclose(cs.loc[cid, "ci_high"], ref.ci_high)
    fam = cs.loc[["P1", "P2"]]
    assert np.allclose(fam["p_adjusted"], stats.holm(fam["p"].to_numpy()))
    assert np.isnan(cs.loc["E1", "p_adjusted"])
    e1 = stats.tost_paired(ps.loc[ps.contrast == "E1", "difference"].to_numpy(), margin=0.03)
    assert np.isclose(cs.loc["E1", "tested_p"], e1.p) and cs.loc["E1", "margin_high"] == 0.03


def test_results_json_fields(dry):
    res = json.loads((dry.folder / "report" / "results.json").read_text())
    assert res["format"] == "prereg-results/1" and res["study"] == "ana" and res["exploratory"] is False
    row = res["contrasts"][0]
    for key in ("contrast", "tier", "kind", "family", "treatment", "control", "at", "n", "mean", "ci_low", "ci_high",
                "p", "p_adjusted", "tost_p", "ni_p", "ni_lower", "boot_ci_low", "crossed_ci_low", "verdict", "claim"):
        assert key in row, key
    assert {r["contrast"] for r in res["contrasts"]} == {"P1", "P2", "E1", "N1", "X1"}
    assert len(res["per_seed"]) == 5 * 8 and res["hypotheses"][0]["id"] == "H1"
    assert res["lock"]["exit_code"] == 0 and res["configurations"][0]["n_seeds"] == 8
    for name in ("report.md", "forest.png", "accuracy.png", "difference_vs_time.png", "contrasts.csv"):
        assert (dry.folder / "report" / name).stat().st_size > 0
    md = (dry.folder / "report" / "report.md").read_text()
    assert "| P1 | primary | big − ctl | B | 8 |" in md and "X1 †" in md and "SYNTHETIC" in md


def test_refuses_changed_plan_and_unpaired_runs(dry, tmp_path):
    study = tmp_path / "copy"
    shutil.copytree(dry.folder, study)
    plan = study / "plan.toml"
    plan.write_text(plan.read_text().replace("margin = 0.03", "margin = 0.05"))
    with pytest.raises(ViolationError) as ei:
        analyze_study(study, progress=False)
    assert ei.value.exit_code == 1 and any("contrasts[2].margin" in ln for ln in ei.value.lines)
    a = analyze_study(study, exploratory=True, n_resamples=50, progress=False)
    assert a.exploratory and set(a.contrasts["claim"]) == {"exploratory"}
    plan.write_text(ANALYSIS_PLAN)
    shutil.rmtree(study / "runs" / "big" / "seed-3")
    with pytest.raises(PreregError) as ei:  # a deleted run: a violation, named before any pairing
        analyze_study(study, progress=False)
    assert ei.value.exit_code == 1 and "runs/big/seed-3" in ei.value.lines[0] and "gone" in ei.value.lines[0]


def test_a_missing_run_analyzed_as_the_hint_says_gives_an_exploratory_report(dry, tmp_path, monkeypatch):
    """`prereg analyze` refuses a study with a run missing and suggests --exploratory; following the
    hint reads the runs that exist, drops the seed from the contrasts that lose it (and says so),
    lists the missing run, and labels every file it writes exploratory."""
    from prereg_kit import plots

    study = tmp_path / "copy"
    shutil.copytree(dry.folder, study)
    shutil.rmtree(study / "report")
    shutil.rmtree(study / "runs" / "big" / "seed-3")
    runner = CliRunner()
    res = runner.invoke(app, ["analyze", str(study)])
    assert res.exit_code == 1 and "--exploratory" in res.output
    titles = []  # every figure the report draws, by its titles

    def keep_titles(fig, path, **kw):
        titles.append((path.name, [t for t in [fig._suptitle.get_text() if fig._suptitle else ""]
                                   + [ax.get_title() for ax in fig.axes] if t]))
        return [path]

    monkeypatch.setattr(plots, "save_all", keep_titles)
    res = runner.invoke(app, ["analyze", str(study), "--exploratory", "--resamples", "50"])
    assert res.exit_code == 0, res.output
    rep = study / "report"
    cs = pd.read_csv(rep / "contrasts.csv", dtype={"seeds_left_out": str}).set_index("contrast")
    assert cs.loc["P1", "n"] == 7 and cs.loc["P1", "seeds_left_out"] == "3" and cs.loc["X1", "n"] == 7
    assert cs.loc["P2", "n"] == 8 and pd.isna(cs.loc["P2", "seeds_left_out"]) and set(cs["claim"]) == {"exploratory"}
    assert "contrast P1 (big − ctl): left out of its reading: seed 3: configuration 'ctl' has evaluations, 'big' has none" in res.output
    res_json = json.loads((rep / "results.json").read_text())
    assert res_json["exploratory"] is True and res_json["missing_runs"] == [{"configuration": "big", "seed": 3}]
    md = (rep / "report.md").read_text()
    assert md.startswith("# EXPLORATORY — ana:") and "`big/seed-3`" in md and "P1 without seed(s) 3; X1 without seed(s) 3" in md
    assert "EXPLORATORY — the preregistration checks failed" in (rep / "report.html").read_text()
    assert "\\textbf{EXPLORATORY}" in (rep / "contrasts.tex").read_text()
    for csv in rep.glob("*.csv"):
        assert pd.read_csv(csv)["exploratory"].all(), csv.name
    assert {name for name, _ in titles} == {"forest.png", "accuracy.png", "difference_vs_time.png"}
    assert all(any(t.startswith("EXPLORATORY") for t in ts) for _, ts in titles), titles

    for s in (0, 1, 2, 4, 5, 6):  # one of big's seeds left: its contrasts can no longer be read, and say why
        shutil.rmtree(study / "runs" / "big" / f"seed-{s}")
    a = analyze_study(study, exploratory=True, n_resamples=50, progress=False)
    c = a.contrasts.set_index("contrast")
    assert c.loc["P1", "status"] == "not read" and c.loc["P2", "verdict"] != "not read"
    assert "1 unit(s) on seeds 0-7 (seeds 0-6: configuration 'ctl' has evaluations, 'big' has none" in c.loc["P1", "verdict_reason"]
    assert "at least 2 are needed" in c.loc["X1", "verdict_reason"]
    h = a.hypotheses.set_index("id")
    assert h.loc["H1", "outcome"] == "not read" and "could not be read" in h.loc["H1", "reading"]


def test_allow_missing_seeds_excludes_and_reports(dry, tmp_path):
    study = tmp_path / "copy"
    shutil.copytree(dry.folder, study)
    shutil.rmtree(study / "runs" / "big" / "seed-3")
    text = ANALYSIS_PLAN + "\n[admission]\nallow_missing_seeds = true\n"
    (study / "plan.toml").write_text(text)
    (study / "plan.lock").unlink()
    from datetime import datetime, timezone

    lock_at(study / "plan.toml", datetime(2020, 1, 1, tzinfo=timezone.utc))
    (study / "plan.toml").write_text(text)
    a = analyze_study(study, exploratory=True, n_resamples=50, progress=False)  # hashes differ from the runs'
    c = a.contrasts.set_index("contrast")
    assert c.loc["P1", "n"] == 7 and c.loc["P2", "n"] == 8
    assert ((a.exclusions["seed"] == 3) & a.exclusions["what"].str.startswith("unpaired")).any()


def test_cli_dry_run_refuses_a_bad_effect_and_a_foreign_folder(tmp_path):
    # the quick part of the walkthrough below (slow step): both refusals come before any simulation
    runner = CliRunner()
    (tmp_path / "plan.toml").write_text(ANALYSIS_PLAN)
    res = runner.invoke(app, ["dry-run", str(tmp_path), "-e", "P1"])
    assert res.exit_code == 2 and "NAME=NUMBER" in res.output
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "precious.txt").write_text("keep")
    res = runner.invoke(app, ["dry-run", str(tmp_path), "--out", str(tmp_path / "other")])
    assert res.exit_code == 2 and (tmp_path / "other" / "precious.txt").exists()
    assert not (tmp_path / "other" / MARKER).exists()


@pytest.mark.slow
def test_cli_dry_run_then_analyze(tmp_path):
    runner = CliRunner()
    (tmp_path / "plan.toml").write_text(ANALYSIS_PLAN)
    res = runner.invoke(app, ["dry-run", str(tmp_path), "-e", "P1=0.05", "--repeat", "2", "--resamples", "50", "--update-ratio", "big=0.5"])
    assert res.exit_code == 0, res.output
    assert "verdicts over 2 simulated studies" in res.output
    power = pd.read_csv(tmp_path / "dry-run" / "report" / "power.csv")
    assert set(power["contrast"]) == {"P1", "P2", "E1", "N1", "X1"} and power["shown"].between(0, 1).all()
    res = runner.invoke(app, ["analyze", str(tmp_path / "dry-run"), "--resamples", "50"])
    assert res.exit_code == 0, res.output
    assert "report:" in res.output and "P1" in res.output
    res = runner.invoke(app, ["dry-run", str(tmp_path), "-e", "P1"])
    assert res.exit_code == 2 and "NAME=NUMBER" in res.output
    # a folder not written by dry-run is never overwritten
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "precious.txt").write_text("keep")
    res = runner.invoke(app, ["dry-run", str(tmp_path), "--out", str(tmp_path / "other")])
    assert res.exit_code == 2 and (tmp_path / "other" / "precious.txt").exists()
    assert (tmp_path / "dry-run" / MARKER).exists()


def test_analyze_unlocked_study_exit_2(tmp_path):
    (tmp_path / "plan.toml").write_text(ANALYSIS_PLAN)
    res = CliRunner().invoke(app, ["analyze", str(tmp_path)])
    assert res.exit_code == 2 and "not locked" in res.output and "Traceback" not in res.output


def test_format_p():
    assert format_p(0.0163) == ".016" and format_p(2e-4) == "2e-04" and format_p(float("nan")) == "n/a"
    assert format_p(1.0) == "1.00" and format_p(1e-12) == "<1e-10"
