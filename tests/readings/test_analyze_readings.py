"""`prereg dry-run` reads every new reading kind end to end: spans, tokens/time to the control's
accuracy, log length, per-level accuracy, a set scored only at the start and B, and the
training-dynamics table with all-wrong / all-correct group shares."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from plans import SMALL_PLAN

from prereg_kit import stats
from prereg_kit.simulate.dryrun import dry_run

CONTRASTS = [("FH", 'at = "first_half"', "secondary"), ("SH", 'at = "second_half"', "secondary"),
             ("ALL", 'at = "all_evals"', "secondary"), ("TT", 'at = "to_target"', "exploratory"),
             ("TTT", 'at = "time_to_target"', "exploratory"), ("LL", 'metric = "log_length"', "secondary"),
             ("L5", "levels = [5]", "secondary"), ("EX", 'eval_set = "extra"', "secondary")]


def _plan() -> str:
    text = SMALL_PLAN.replace("seeds = [0, 1, 2]", "seeds = [0, 1, 2, 3, 4, 5]").replace(
        'sets = [{ name = "test", n_problems = 10 }]',
        'sets = [{ name = "test", n_problems = 40 }, { name = "extra", n_problems = 30, at = ["start", "B"] }]')
    extra = "".join(f'[[contrasts]]\nid = "{cid}"\ntreatment = "B"\ncontrol = "A"\n{line}\ntier = "{tier}"\n\n'
                    for cid, line, tier in CONTRASTS)
    text = text.replace("[budget]", '[configurations.pilot]\ndescription = "a pilot-only arm"\n\n[budget]')
    # a configuration outside the main stage: the dry run writes only the main stage's runs
    return text.replace("[[families]]", extra + "[[families]]") + '\n[[stages]]\nname = "main"\nconfigurations = ["A", "B"]\n'



@pytest.fixture(scope="module", params=[0.05, -0.05], ids=["gain", "loss"])
def dry(request, tmp_path_factory):
    d = tmp_path_factory.mktemp("readings")
    (d / "plan.toml").write_text(_plan())
    return request.param, dry_run(d / "plan.toml", {"C1": request.param}, seed=2, n_resamples=400, progress=False)


def test_every_new_kind_is_read_and_reported(dry):
    effect, r = dry
    c = r.analysis.contrasts.set_index("contrast")
    assert set(c.index) >= {cid for cid, _, _ in CONTRASTS}
    assert set(r.analysis.configurations["configuration"]) == {"A", "B"}
    assert c.loc["FH", "at"] == "first_half" and c.loc["EX", "eval_set"] == "extra" and c.loc["L5", "levels"] == "5"
    ps = r.analysis.per_seed
    for cid in ("FH", "SH", "ALL", "LL", "L5", "EX"):  # paired-t on the per-seed differences (scipy reference)
        d = ps.loc[ps["contrast"] == cid, "difference"].to_numpy()
        ref = stats.paired_t(d)
        assert c.loc[cid, "mean"] == pytest.approx(d.mean()) and c.loc[cid, "p"] == pytest.approx(ref.p)
        assert np.sign(c.loc[cid, "mean"]) == np.sign(effect) or cid == "LL"
    assert c.loc["LL", "metric"] == "log_length" and c.loc["LL", "mean"] == pytest.approx(effect, abs=0.05)
    # a span's gain grows over training: the first half trails the second
    assert abs(c.loc["FH", "mean"]) < abs(c.loc["SH", "mean"])
    report = (r.folder / "report" / "report.md").read_text()
    assert "### Training dynamics to B" in report and "all-wrong groups" in report
    dyn = r.analysis.dynamics.set_index("configuration")
    assert dyn[["mixed_share", "all_wrong_share", "all_correct_share"]].sum(axis=1).to_numpy() == pytest.approx(1, abs=1e-9)


def test_to_target_is_a_share_or_not_reached(dry):
    effect, r = dry
    c = r.analysis.contrasts.set_index("contrast")
    js = {x["contrast"]: x for x in json.loads((r.folder / "report" / "results.json").read_text())["contrasts"]}
    report = (r.folder / "report" / "report.md").read_text()
    for cid in ("TT", "TTT"):
        if effect > 0:  # a gain: the treatment reaches the control's accuracy at B before B
            assert 0 < c.loc[cid, "mean"] < 1 and c.loc[cid, "verdict"] == "gain"
            assert js[cid]["mean"] == pytest.approx(c.loc[cid, "mean"])
        else:  # a loss: never reached, "n.r." in the files
            assert np.isinf(c.loc[cid, "mean"]) and c.loc[cid, "verdict"] == "inconclusive"
            assert js[cid]["mean"] == "n.r." and f"| {cid} † |" in report and "n.r. [" in report
        assert pd.isna(c.loc[cid, "p_adjusted"]) and c.loc[cid, "target"] > 0
