"""rliable's aggregates read from run logs (prereg_kit.analysis.aggregates): the scores are the
contrasts' own readings at B, and the aggregates equal their definitions on those scores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from paths import ROOT
from scipy import stats as sps

from prereg_kit.analysis.aggregates import score_matrix, study_aggregates, task_scores
from prereg_kit.errors import PreregError

REGISTRY = ROOT / "registry"
SEEDS = 12


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    # S33's plan: three evaluation sets (one scored along the way, two further sets scored only at
    # the start and at B), a synthetic study from its plan. Smaller than the registry's (12 of its
    # 24 seeds, 60, 80 and 70 problems instead of 200, 1543 and 1319): the claims are about which
    # reading each score is and what each aggregate computes, not about sizes (a third of the time)
    from prereg_kit.simulate.dryrun import dry_run

    d = tmp_path_factory.mktemp("agg")
    text = (REGISTRY / "S33" / "plan.toml").read_text()
    for big, small in (('seeds = "36-59"', f'seeds = "36-{35 + SEEDS}"'), ("n_problems = 200,", "n_problems = 60,"),
                       ("n_problems = 1543,", "n_problems = 80,"), ("n_problems = 1319,", "n_problems = 70,")):
        assert big in text, big
        text = text.replace(big, small)
    (d / "plan.toml").write_text(text)
    dry_run(d / "plan.toml", {"P-further": 0.03}, out=d / "dry", n_resamples=100, progress=False)
    return d / "dry"


def test_scores_are_the_contrasts_readings_at_B(study):
    from prereg_kit.analysis.analyze import analyze_study

    s = task_scores(study)
    assert sorted(s["task"].unique()) == ["gsm8k-test", "math-further-1543", "math-l3-5-200"]
    assert len(s) == 3 * 2 * SEEDS and not s.duplicated(["configuration", "seed", "task"]).any()
    a = analyze_study(study, n_resamples=100, progress=False)
    ps = a.per_seed[a.per_seed["contrast"] == "P-further"].set_index("seed")
    mine = s[(s["task"] == "math-further-1543")].set_index(["configuration", "seed"])["score"]
    assert np.allclose(ps["treatment_value"], mine.loc["filter"].loc[ps.index], rtol=0, atol=1e-12)
    assert np.allclose(ps["control_value"], mine.loc["outcome"].loc[ps.index], rtol=0, atol=1e-12)


def test_aggregates_equal_their_definitions_on_the_scores(study):
    a = study_aggregates(study, n_resamples=400)
    x, y = score_matrix(a.scores, "filter"), score_matrix(a.scores, "outcome")
    assert x.shape == y.shape == (SEEDS, 3)
    row = a.iqm.set_index("configuration").loc["filter"]
    assert row["value"] == pytest.approx(sps.trim_mean(x, 0.25, axis=None), abs=1e-12)
    assert row["ci_low"] <= row["value"] <= row["ci_high"] and row["n_tasks"] == 3 and row["n_runs"] == SEEDS
    # P(X > Y): per task the Mann-Whitney share of (x, y) pairs with x > y (ties one half), averaged over tasks
    direct = np.mean([np.mean((x[:, t, None] > y[None, :, t]) + 0.5 * (x[:, t, None] == y[None, :, t]))
                      for t in range(3)])
    imp = a.improvement.iloc[0]
    assert (imp["x"], imp["y"]) == ("filter", "outcome") and imp["value"] == pytest.approx(direct, abs=1e-12)
    assert set(a.profiles) == {"filter", "outcome"}
    prof = a.profiles["filter"]
    assert np.allclose(prof.fraction, [(x > t).mean() for t in prof.taus])


def test_performance_profile_figure_from_the_study(study, tmp_path):
    from prereg_kit.report.aggregate_plots import performance_profile_figure

    a = study_aggregates(study, n_resamples=200)
    path = performance_profile_figure(a.profiles, tmp_path / "profile.png", title="S33 (synthetic)")
    assert Path(path).stat().st_size > 5_000


def test_unknown_task_and_configuration_are_refused_by_name(study):
    with pytest.raises(PreregError, match="'nope' is not an evaluation set"):
        task_scores(study, tasks=["nope"])
    with pytest.raises(PreregError, match="no scores for configuration 'ghost'"):
        score_matrix(task_scores(study, tasks=["gsm8k-test"]), "ghost")


def test_a_seed_missing_a_task_is_left_out_of_the_matrix(study):
    s = task_scores(study)
    s = s[~((s["configuration"] == "filter") & (s["seed"] == s["seed"].min()) & (s["task"] == "gsm8k-test"))]
    assert score_matrix(s, "filter").shape == (SEEDS - 1, 3)
