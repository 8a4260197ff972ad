"""`prereg dry-run` never stops on a contrast the synthetic runs cannot give: that contrast is a
row with status "not read" and the reason, in the printed table, report.md and results.json;
and every registry plan dry-runs with its defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import ROOT
from typer.testing import CliRunner

from prereg_kit.analysis.analyze import analyze_study
from prereg_kit.cli import app
from prereg_kit.errors import PreregError
from prereg_kit.simulate.dryrun import dry_run

REGISTRY = ROOT / "registry"
UPDATES = '''
[[contrasts]]
id = "C3"
treatment = "grpo"
control = "frozen"
at = "updates"
tier = "exploratory"
'''


def _plan(tmp_path: Path) -> Path:
    """registry/cpu-grpo with a contrast at matched updates, smaller for speed."""
    text = (REGISTRY / "cpu-grpo" / "plan.toml").read_text() + UPDATES
    text = text.replace("seeds = { first = 0, last = 5 }", "seeds = { first = 0, last = 2 }")
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


def test_a_contrast_the_dry_run_cannot_read_is_a_row(tmp_path):
    path = _plan(tmp_path)
    # the control makes half the treatment's updates per token: it never reaches the treatment's count
    res = CliRunner().invoke(app, ["dry-run", str(path), "--update-ratio", "frozen=0.5", "--resamples", "50"])
    assert res.exit_code == 0, res.stderr
    assert "not read" in res.stdout and "never reached its reading point" in " ".join(res.stdout.split())
    folder = tmp_path / "dry-run" / "report"
    rows = {r["contrast"]: r for r in json.loads((folder / "results.json").read_text())["contrasts"]}
    assert rows["C3"]["status"] == "not read" and rows["C3"]["verdict"] == "not read"
    assert "never reached its reading point" in rows["C3"]["verdict_reason"] and rows["C3"]["n"] == 0
    assert rows["C3"]["p_adjusted"] is None and rows["C3"]["tested_p"] is None
    assert rows["C1"]["status"] == "read" and rows["C1"]["verdict"] != "not read"  # the others are read
    md = (folder / "report.md").read_text()
    assert "| C3 † | exploratory | grpo − frozen | updates | — | not read: contrast C3" in md
    # the real analysis of the same runs still refuses: only a dry run turns the error into a row
    with pytest.raises(PreregError, match="C3"):
        analyze_study(tmp_path / "dry-run", n_resamples=50, progress=False)


def test_a_primary_contrast_not_read_leaves_its_family_to_the_others(tmp_path):
    path = _plan(tmp_path)
    text = path.read_text().replace('tier = "exploratory"', 'tier = "primary"').replace('members = ["C1"]', 'members = ["C1", "C3"]')
    path.write_text(text)
    res = dry_run(path, {}, n_resamples=50, progress=False, update_ratio={"frozen": 0.5})
    c = res.analysis.contrasts.set_index("contrast")
    assert c.loc["C3", "status"] == "not read" and c.loc["C1", "status"] == "read"
    assert c.loc["C1", "p_adjusted"] == c.loc["C1", "tested_p"]  # a family of one read p: Holm leaves it
    assert res.analysis.hypotheses.set_index("id").loc["H1", "outcome"] != "not read"


def test_power_by_simulation_counts_not_read(tmp_path):
    res = dry_run(_plan(tmp_path), {}, repeat=2, n_resamples=50, progress=False, update_ratio={"frozen": 0.5})
    power = res.power.set_index("contrast")
    assert power.loc["C3", "share_not read"] == 1.0 and power.loc["C3", "shown"] == 0.0


PLANS = sorted(p.name for p in REGISTRY.iterdir() if (p / "plan.toml").is_file())


@pytest.mark.slow
@pytest.mark.parametrize("study", PLANS)
def test_every_registry_plan_dry_runs(study, tmp_path):
    """Each registry plan with the command's defaults (bootstrap cut to 200 resamples for time: the
    number of resamples changes no reading's success)."""
    res = CliRunner().invoke(app, ["dry-run", str(REGISTRY / study), "--out", str(tmp_path / "dr"), "--resamples", "200"])
    assert res.exit_code == 0, res.stderr
    rows = json.loads((tmp_path / "dr" / "report" / "results.json").read_text())["contrasts"]
    assert rows and all(r["status"] in ("read", "not read") for r in rows)
    assert all(r["verdict_reason"] for r in rows if r["status"] == "not read")


def test_per_configuration_budgets_and_seeds_are_simulated(tmp_path):
    """A configuration with its own B and seeds: its runs go to its own B on its own seeds, and a
    contrast reads the seeds both arms run, each arm at its own B."""
    text = (REGISTRY / "cpu-grpo" / "plan.toml").read_text().replace(
        'description = "No-update control: the same generation, evaluation and token accounting, learning rate 0."',
        'description = "No-update control on its own budget and seeds."\nbudget = "60K"\nseeds = "0-3"')
    path = tmp_path / "plan.toml"
    path.write_text(text)
    res = dry_run(path, {"C1": 0.04}, out=tmp_path / "dr", n_resamples=50, progress=False)
    runs = {(p.parent.name, p.name) for p in (tmp_path / "dr" / "runs").glob("*/seed-*")}
    assert {s for c, s in runs if c == "frozen"} == {f"seed-{i}" for i in range(4)}
    assert {s for c, s in runs if c == "grpo"} == {f"seed-{i}" for i in range(6)}
    c1 = res.analysis.contrasts.set_index("contrast").loc["C1"]
    assert c1["n"] == 4 and c1["status"] == "read"
    ps = res.analysis.per_seed[res.analysis.per_seed["contrast"] == "C1"]
    assert sorted(ps["seed"]) == [0, 1, 2, 3]


def test_an_iteration_budget_is_simulated_and_read_at_iteration_n(tmp_path):
    text = (REGISTRY / "cpu-grpo" / "plan.toml").read_text()
    text = text.replace('tokens = "30K"', 'iterations = 12').replace('eval_every = "B/8"', "eval_every = 3")
    text = text.replace("seeds = { first = 0, last = 5 }", "seeds = { first = 0, last = 3 }")
    path = tmp_path / "plan.toml"
    path.write_text(text)
    res = dry_run(path, {"C1": 0.04}, out=tmp_path / "dr", n_resamples=50, progress=False)
    c1 = res.analysis.contrasts.set_index("contrast").loc["C1"]
    assert c1["status"] == "read" and c1["n"] == 4
    ps = res.analysis.per_seed[res.analysis.per_seed["contrast"] == "C1"]
    assert set(ps["read_at"]) <= {12}  # the first evaluation at or after iteration 12
    evals = res.analysis.curves
    assert sorted(set(evals["iteration"]))[:5] == [0, 3, 6, 9, 12]
