"""The registry record of a study analyzed here (prereg_kit.registry.record): rows from `prereg analyze`,
rechecked like the papers' rows, and reproduced from the committed CPU studies' run logs."""

from __future__ import annotations

import math
import tomllib

import pytest
from paths import ROOT

from prereg_kit.registry import load_reported, recheck_study
from prereg_kit.registry.record import record_row, study_record, write_record

REGISTRY = ROOT / "registry"


def _row(**kw):
    base = {"contrast": "C1", "treatment": "a", "control": "b", "at": "B", "n": 5, "mean": 0.0123456,
            "ci_low": -0.001, "ci_high": 0.0257, "tier": "primary", "kind": "superiority", "metric": "accuracy",
            "family": "primary", "p": 0.0712, "p_adjusted": 0.1424, "tost_p": 0.2, "ni_p": 0.01, "t": 2.3, "zero_sd": False}
    return base | kw


def test_row_keys_follow_the_contrast_kind():
    r = record_row(_row(), source="s")
    assert (r["mean"], r["ci_low"], r["ci_high"]) == ("+0.0123", "-0.0010", "+0.0257")
    assert r["p"] == ".071" and r["holm_p"] == ".142" and "tost_p" not in r
    r = record_row(_row(kind="equivalence", family=""), source="s")
    assert r["tost_p"] == ".200" and "tost_holm_p" not in r and "p" not in r
    r = record_row(_row(kind="non-inferiority", tier="secondary", family=""), source="s")
    assert r["noninferiority_p"] == ".010"
    r = record_row(_row(metric="negative_rate"), source="s")
    assert r["label"] == "a − b (negative_rate)"



def test_a_results_file_written_before_the_column_was_renamed_is_read_alike():
    """Reports before 0.1.0 call the family-adjusted p ``p_holm`` (whatever the family's method);
    a record made from such a results.json is the same as one made from today's ``p_adjusted``."""
    old = {k if k != "p_adjusted" else "p_holm": v for k, v in _row().items()}
    assert record_row(old, source="s") == record_row(_row(), source="s")
    assert record_row(old, source="s")["holm_p"] == ".142"

def test_named_robust_test_and_minimal_effect_keep_their_p_out_of_the_checked_fields():
    # recheck rebuilds p from the paired-t interval; a Wilcoxon or minimal-effect p would fail it
    for kw in ({"kind": "minimal-effect", "test": "t", "test_p": 0.03}, {"test": "wilcoxon", "test_p": 0.0312}):
        r = record_row(_row(**kw), source="s")
        assert not {"p", "holm_p", "tost_p", "noninferiority_p"} & set(r)
        assert r["test"].endswith(f"({kw['test']})") and "p = .03" in r["note"] and "adjusted p = .142" in r["note"]
        assert (r["mean"], r["ci_low"]) == ("+0.0123", "-0.0010")
    from prereg_kit.registry import ReportedRow
    ReportedRow(**record_row(_row(kind="minimal-effect", test_p=0.03), source="s"))


def test_identical_runs_keep_the_mean_without_a_test():
    r = record_row(_row(mean=0.0, ci_low=0.0, ci_high=0.0, t=math.nan, zero_sd=True), source="s")
    assert r["ci_kind"] == "none" and "p" not in r and "holm_p" not in r


@pytest.mark.parametrize("study", ["cpu-grpo", "cpu-interventions", "cpu-multireward", "cpu-gradient"])
def test_committed_record_is_reproduced_from_the_committed_run_logs(study):
    """The CPU study's reported.toml equals a fresh analysis of its run logs (up to the date), and
    every printed p-value rechecks."""
    from prereg_kit.analysis.analyze import analyze_study

    committed = tomllib.loads((REGISTRY / study / "reported.toml").read_text())
    fresh = study_record(analyze_study(REGISTRY / study, progress=False))

    def strip(rows):
        return [{k: v for k, v in r.items() if k != "source"} for r in rows]

    assert strip(committed["rows"]) == strip(fresh["rows"])
    rows = recheck_study(REGISTRY / study)
    assert rows and all(r.status in ("consistent", "no test", "not checkable") for r in rows), \
        [(r.row, r.status, r.checks) for r in rows if r.status == "inconsistent"]


def test_write_record_on_a_synthetic_study(tmp_path):
    from datetime import datetime, timezone

    from plans import lock_at

    from prereg_kit.chain.seal import seal_runs
    from prereg_kit.plan import load_plan
    from prereg_kit.simulate.synth import generate_study

    d = tmp_path / "s"
    d.mkdir()
    (d / "plan.toml").write_text((REGISTRY / "cpu-grpo" / "plan.toml").read_text())
    lock_at(d / "plan.toml", datetime(2025, 1, 1, tzinfo=timezone.utc))
    pf = load_plan(d)
    generate_study(d, study="cpu-grpo", plan_hash=pf.content_sha256, configurations={"frozen": 0.0, "grpo": 0.05},
                   seeds=range(6), budget_tokens=30000, eval_every=3750, eval_sets={"heldout": 64}, rng=3)
    seal_runs(d)
    path = write_record(d)
    rep = load_reported(path)
    assert rep.paper == "prereg-kit" and [r.id for r in rep.rows] == ["C1", "C2"]
    assert all(r.status == "consistent" for r in recheck_study(d))
