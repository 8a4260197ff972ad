"""A plan that reads configurations of other locked studies (``[[sources]]``): pooled over their
seeds, each source pinned by its lock at this plan's lock, verified with its own chain at verify
and analyze; and the attacks each check is there to stop (a source locked again or amended after
the pin, a source run altered or missing, a configuration it does not have, a path out of the
studies' folder, a cycle of studies reading each other, a source without a lock)."""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import tomli_w
from scipy import stats

from prereg_kit.analysis.analyze import analyze_study
from prereg_kit.chain.lock import amend_plan, lock_plan, read_chain, serialize
from prereg_kit.errors import PreregError
from prereg_kit.plan import validate_plan
from prereg_kit.readings import first_crossing, shared_budget
from prereg_kit.simulate.dryrun import dry_run
from prereg_kit.study.verify import verify_study

SOURCE = """\
[study]
id = "{id}"
title = "Source {id}"
question = "Does B beat A?"
comparator = "A"
seeds = "{seeds}"

[configurations.A]
description = "control"
[configurations.B]
overrides = {{ lr = 2 }}

[budget]
tokens = "1M"
eval_every = "B/8"

[evaluation]
samples = 4
sets = [{{ name = "test", n_problems = 12 }}]

[[contrasts]]
id = "C1"
treatment = "B"
control = "A"
tier = "exploratory"
"""

POOLED = {
    "study": {"id": "P", "title": "Pooled", "question": "Over both studies' seeds?", "comparator": "SA/A", "seeds": "0-5"},
    "sources": [{"study": "../SA", "configurations": ["A", "B"]}, {"study": "../SB", "configurations": ["A", "B"]}],
    "budget": {"tokens": "1M", "eval_every": "B/8"},
    "evaluation": {"samples": 4, "sets": [{"name": "test", "n_problems": 12}]},
    "contrasts": [
        {"id": "X1", "design": "pooled", "pairs": [["SA/B", "SA/A"], ["SB/B", "SB/A"]], "tier": "exploratory"},
        {"id": "X2", "design": "pooled", "pairs": [["SA/B", "SA/A"], ["SB/B", "SB/A"]], "tier": "exploratory",
         "at": "to_target"},
    ],
    "statistics": {"bootstrap_resamples": 200},
}


def _write(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plan.toml").write_text(text)
    return folder


def _sources(root: Path) -> None:
    _write(root / "SA", SOURCE.format(id="SA", seeds="0-2"))
    _write(root / "SB", SOURCE.format(id="SB", seeds="3-5"))


def _pooled(root: Path, **changes) -> Path:
    return _write(root / "P", tomli_w.dumps({**POOLED, **changes}))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A pooled study with its two sources simulated, locked and analyzed by `prereg dry-run`:
    ``dr/`` holds P's copy, locked, and ``dr/sources/SA``, ``dr/sources/SB``, locked with runs."""
    root = tmp_path_factory.mktemp("sources")
    _sources(root)
    _pooled(root)
    dry_run(root / "P", {"X1": 0.05}, out=root / "dr", n_resamples=200, progress=False)
    return root / "dr"


@pytest.fixture
def study(built, tmp_path) -> Path:
    """A fresh copy of the built pooled study, to attack."""
    return Path(shutil.copytree(built, tmp_path / "dr"))


def _refusal(study: Path) -> str:
    with pytest.raises(PreregError) as e:
        analyze_study(study, n_resamples=50, progress=False)
    return " ".join(e.value.lines)


# ---------------------------------------------------------------------------------- reading


def test_a_pooled_contrast_reads_each_source_study_on_its_own_seeds(built):
    a = analyze_study(built, n_resamples=200, progress=False)
    x1 = a.contrasts.set_index("contrast").loc["X1"]
    assert x1["n"] == 6 and x1["status"] == "read"
    ps = a.per_seed[a.per_seed["contrast"] == "X1"]
    assert sorted(ps.loc[ps["unit"] == "SA/B − SA/A", "seed"]) == [0, 1, 2]
    assert sorted(ps.loc[ps["unit"] == "SB/B − SB/A", "seed"]) == [3, 4, 5]
    # independent reference: each source analyzed as a study of its own, its paired differences
    # pooled by hand, then the paired t of scipy
    own = [analyze_study(built / "sources" / s, n_resamples=50, progress=False).per_seed for s in ("SA", "SB")]
    d = np.concatenate([p.loc[p["contrast"] == "C1", "difference"].to_numpy() for p in own])
    assert np.allclose(np.sort(d), np.sort(ps["difference"].to_numpy()))
    ci = stats.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=stats.sem(d))
    assert x1["mean"] == pytest.approx(d.mean()) and (x1["ci_low"], x1["ci_high"]) == pytest.approx(ci)


def test_a_pooled_share_to_target_is_the_mean_curve_over_every_unit(built):
    a = analyze_study(built, n_resamples=200, progress=False)
    x2 = a.contrasts.set_index("contrast").loc["X2"]
    c = a.curves.sort_values(["configuration", "seed", "eval_index"])
    treat = c[c["configuration"].isin(["SA/B", "SB/B"])]
    ctl = c[c["configuration"].isin(["SA/A", "SB/A"])]
    target = ctl[ctl["tokens"] >= 1_000_000].groupby(["configuration", "seed"])["accuracy"].first().mean()
    mean = treat.groupby("eval_index")[["tokens", "accuracy"]].mean()
    share = first_crossing(mean["tokens"].to_numpy(), mean["accuracy"].to_numpy(), target) / 1_000_000
    assert x2["n"] == 6 and x2["target"] == pytest.approx(target) and x2["mean"] == pytest.approx(share)
    units = a.per_seed.loc[a.per_seed["contrast"] == "X2", "unit"]
    assert set(units) == {"SA/B − SA/A", "SB/B − SB/A"}


def test_the_report_says_which_runs_came_from_which_study_under_which_lock(built):
    rec = json.loads((built / "report" / "results.json").read_text())
    by = {s["name"]: s for s in rec["sources"]}
    for name, seeds in (("SA", "0-2"), ("SB", "3-5")):
        chain = read_chain(built / "sources" / name / "plan.toml")
        assert by[name]["lock"] == chain.entries[0]["hash"] and by[name]["study_id"] == name
        assert by[name]["configurations"][f"{name}/B"] == {"configuration": "B", "runs": 3, "seeds": seeds,
                                                           "planned_seeds": seeds}
    pinned = read_chain(built / "plan.toml").entries[0]["sources"]
    assert [(p["name"], p["lock"]) for p in pinned] == [(n, by[n]["lock"]) for n in ("SA", "SB")]
    assert "runs of SA/A, SA/B from study SA" in (built / "report" / "report.md").read_text()
    rep = verify_study(built)
    assert rep.exit_code == 0 and sum(line.startswith("source S") for line in rep.info) == 2


# ---------------------------------------------------------------------------------- attacks


def test_a_source_locked_again_after_the_pin_is_refused(study):
    src = study / "sources" / "SA"
    (src / "plan.lock").unlink()
    lock_plan(src / "plan.toml")  # a new chain: its lock entry is not the one pinned
    line = _refusal(study)
    assert line.startswith("source SA (sources/SA): locked again since this plan pinned it")


def test_a_source_amended_after_the_pin_is_refused_until_this_plan_is_amended(study):
    src = study / "sources" / "SA"  # even an amendment of comments only: the pinned entry is no longer its last
    (src / "plan.toml").write_text("# a comment\n" + (src / "plan.toml").read_text())
    amend_plan(src / "plan.toml", "a comment")
    assert "source SA (sources/SA): amended since this plan pinned it" in _refusal(study)
    res = amend_plan(study / "plan.toml", "read SA as amended")  # the file is unchanged: the pin is what changes
    assert [c["key"] for c in res.entry["changes"]] == ["sources.SA (its plan entry)"]
    assert verify_study(study).exit_code == 0


def test_an_altered_source_run_is_refused_naming_the_source(study):
    meta = study / "sources" / "SB" / "runs" / "B" / "seed-4" / "meta.json"
    meta.write_text(meta.read_text().replace('"seed": 4', '"seed": 4 '))
    rep = verify_study(study)
    assert rep.exit_code == 1
    assert any(v.startswith("source SB (sources/SB): runs/B/seed-4/meta.json: changed") for v in rep.violations)
    assert "source SB (sources/SB): runs/B/seed-4/meta.json: changed" in _refusal(study)


def test_a_missing_source_run_is_refused_naming_its_folder(study):
    shutil.rmtree(study / "sources" / "SA" / "runs" / "A" / "seed-1")
    text = _refusal(study)
    assert "source SA (sources/SA):" in text and "runs/A/seed-1" in text


def test_a_source_without_a_lock_is_refused_at_lock_and_at_verify(tmp_path, study):
    _sources(tmp_path)
    with pytest.raises(PreregError, match=r"^source SA \(\.\./SA\): not locked"):
        lock_plan(_pooled(tmp_path) / "plan.toml")
    (study / "sources" / "SB" / "plan.lock").unlink()
    rep = verify_study(study)
    assert rep.exit_code == 2 and rep.problems[0].startswith("source SB (sources/SB): not locked")


def test_a_configuration_the_source_does_not_have_is_refused(tmp_path):
    _sources(tmp_path)
    for s in ("SA", "SB"):
        lock_plan(tmp_path / s / "plan.toml")
    sources = [{"study": "../SA", "configurations": ["A", "B", "C"]}, POOLED["sources"][1]]
    with pytest.raises(PreregError, match=r"source SA \(\.\./SA\): has no configuration 'C' \(its locked plan has: A, B\)"):
        lock_plan(_pooled(tmp_path, sources=sources) / "plan.toml")
    bad = {**POOLED, "contrasts": [{**POOLED["contrasts"][0], "pairs": [["SA/C", "SA/A"], ["SB/B", "SB/A"]]}]}
    with pytest.raises(PreregError, match="unknown configuration 'SA/C'"):  # a name no source declares
        validate_plan(bad)


@pytest.mark.parametrize("path, why", [
    ("../../outside", "outside"), ("../link", "outside"), ("../P", "is this study itself"),
    ("/abs/SA", "not a relative path"), ("../SA/../SB", "'..' after a folder name"), ("..", "names no study folder"),
])
def test_a_source_path_that_leaves_the_studies_folder_is_refused(tmp_path, path, why):
    root = tmp_path / "studies"
    _sources(root)
    _write(tmp_path / "outside", SOURCE.format(id="SA", seeds="0-2"))
    lock_plan(tmp_path / "outside" / "plan.toml")
    os.symlink(tmp_path / "outside", root / "link")  # a link beside the study, to a folder outside
    sources = [{"study": path, "configurations": ["A", "B"], "name": "SA"}, POOLED["sources"][1]]
    with pytest.raises(PreregError, match=why):
        lock_plan(_pooled(root, sources=sources) / "plan.toml")


def test_a_cycle_of_studies_reading_each_other_is_refused(tmp_path):
    x = _write(tmp_path / "X", SOURCE.format(id="X", seeds="0-2"))
    lock_plan(x / "plan.toml")
    y = _write(tmp_path / "Y", SOURCE.format(id="Y", seeds="0-2") + '\n[[sources]]\nstudy = "../X"\nconfigurations = ["B"]\n')
    lock_plan(y / "plan.toml")
    (x / "plan.toml").write_text((x / "plan.toml").read_text() + '\n[[sources]]\nstudy = "../Y"\nconfigurations = ["B"]\n')
    with pytest.raises(PreregError, match="lead back to a study they started from: X → Y → X"):
        amend_plan(x / "plan.toml", "read Y too")
    with mock.patch("prereg_kit.chain.sources.find_cycle", return_value=None):  # chains written past the lock's check
        amend_plan(x / "plan.toml", "read Y too")
        assert "source X (../X): amended since this plan pinned it" in " ".join(verify_study(x).violations)
        (y / "plan.toml").write_text("# pin X again\n" + (y / "plan.toml").read_text())
        amend_plan(y / "plan.toml", "pin X as amended")  # now each pins the other's last entry
    # a pin taken before the other study's last entry is stale: the pins of a cycle never all hold
    assert "source Y (../Y): amended since this plan pinned it" in " ".join(verify_study(x).violations)
    rep = verify_study(y, _within=(x.resolve(),))  # had they held, Y verified as X's source goes back to X: refused
    assert rep.exit_code == 2 and any("lead back to a study they started from: X → Y → X" in p for p in rep.problems)


def test_a_reading_the_source_cannot_give_is_refused_at_lock(tmp_path):
    _sources(tmp_path)
    for s in ("SA", "SB"):
        lock_plan(tmp_path / s / "plan.toml")
    late = [{**POOLED["contrasts"][0], "at": "2B"}]  # the sources train to B
    with pytest.raises(PreregError, match=r"read at 2B but 'SA/B' trains only to 1B"):
        lock_plan(_pooled(tmp_path, contrasts=late) / "plan.toml")
    other = {**POOLED["evaluation"], "sets": [{"name": "other", "n_problems": 12}]}
    with pytest.raises(PreregError, match="source SA \\(\\.\\./SA\\): has no evaluation set 'other'"):
        lock_plan(_pooled(tmp_path, evaluation=other) / "plan.toml")


def test_the_pin_is_part_of_the_chain(study):
    lock = study / "plan.lock"
    doc = json.loads(lock.read_text())
    doc["entries"][0]["sources"][0]["lock"] = "sha256:" + "0" * 64  # point the pin at another lock
    lock.write_text(serialize(doc))
    assert "entry 0: its hash does not match its content" in " ".join(verify_study(study).violations)


def test_a_source_run_copied_into_this_studys_runs_is_not_one_of_its_runs(study):
    shutil.copytree(study / "sources" / "SA" / "runs" / "A", study / "runs" / "SA" / "A")
    assert any("configuration 'SA' is not in the plan's main stage" in v for v in verify_study(study).violations)


# ---------------------------------------------------------------------------------- the plan alone


def test_what_a_plan_file_alone_checks_of_its_sources():
    dup = {**POOLED, "sources": [POOLED["sources"][0], {**POOLED["sources"][1], "name": "SA"}]}
    with pytest.raises(PreregError, match="source name 'SA' is used by sources\\[0\\] too"):
        validate_plan(dup)
    seq = {**POOLED, "sequential": {"looks": [3, 6]}}
    with pytest.raises(PreregError, match="a plan with \\[\\[sources\\]\\] takes no \\[sequential\\]"):
        validate_plan(seq)
    stage = {**POOLED, "stages": [{"name": "main"}, {"name": "pilot", "configurations": ["SA/A"]}]}
    with pytest.raises(PreregError, match="a source's configuration runs in its own study"):
        validate_plan(stage)
    none = {k: v for k, v in POOLED.items() if k != "sources"}
    with pytest.raises(PreregError, match="a plan needs configurations"):
        validate_plan({**none, "study": {**POOLED["study"], "comparator": "A"}, "contrasts": POOLED["contrasts"][:0] + [
            {"id": "C", "treatment": "A", "control": "B", "tier": "exploratory"}]})


def test_a_pooled_contrast_reads_the_seeds_each_pair_runs():
    plan = validate_plan(POOLED)  # names only: the sources' seeds are known once they are opened
    assert plan.contrast_seeds(plan.contrasts[0]) == []
    data = tomllib.loads(SOURCE.format(id="Q", seeds="0-5"))  # a plan of its own, its pairs on different seeds
    data["configurations"].update({"A2": {"seeds": "6-8"}, "B2": {"seeds": "6-8"}})
    data["contrasts"] = [{"id": "X", "design": "pooled", "pairs": [["B", "A"], ["B2", "A2"]], "tier": "exploratory"}]
    plan = validate_plan(data)
    assert plan.contrast_seeds(plan.contrasts[0]) == list(range(9))
    data["contrasts"][0]["seeds"] = [9]
    with pytest.raises(PreregError, match="seed\\(s\\) 9 are run by no pair of the pooled contrast"):
        validate_plan(data)


def test_a_span_or_target_reads_the_arms_own_budget_when_they_share_one():
    budgets = {"a": ("tokens", 12e6), "b": ("tokens", 12e6), "c": ("tokens", 17e6), "d": ("iteration", 12e6)}
    assert shared_budget(budgets, ["a", "b"]) == 12e6
    assert shared_budget(budgets, ["a", "c"]) is budgets and shared_budget(budgets, ["b", "d"]) is budgets
    assert shared_budget(17e6, ["a"]) == 17e6
