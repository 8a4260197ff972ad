"""``prereg registry --coverage``: the papers' tables and figures against the registry's plans,
contrasts and rechecked rows; every name is checked, and a wrong one is refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from paths import ROOT
from typer.testing import CliRunner

from prereg_kit.cli import app
from prereg_kit.errors import PreregError
from prereg_kit.registry.coverage import coverage, coverage_files, coverage_line

REGISTRY = ROOT / "registry"
runner = CliRunner()

SMALL = '''
paper = "dense-rewards"

[[item]]
id = "Table 3"
title = "k = 1"
plans = ["S25"]
contrasts = ["S25:P1"]
recheck = ["S25:T3-k1"]

[[item]]
id = "Table 9"
title = "calibration"

[[item]]
id = "Table 21"
title = "gradient measurements"
reason = "descriptive"
'''


@pytest.fixture(scope="module")
def registry_coverage():
    return coverage(REGISTRY)


@pytest.fixture
def small(tmp_path) -> Path:
    root = tmp_path / "registry"
    (root / "S25").mkdir(parents=True)
    for f in ("plan.toml", "reported.toml"):
        shutil.copyfile(REGISTRY / "S25" / f, root / "S25" / f)
    (root / "coverage").mkdir()
    (root / "coverage" / "dense-rewards.toml").write_text(SMALL)
    return root


def test_the_registry_coverage_files_load_and_name_only_what_exists(registry_coverage):
    papers = {p.paper: p for p in registry_coverage}
    assert "dense-rewards" in papers
    dense = {i.id: i for i in papers["dense-rewards"].items}
    assert {"Table 3", "Table 13", "Table 17", "Figure 7", "Figure 17"} <= set(dense)
    assert dense["Table 13"].status == "covered" and dense["Table 9"].status == "covered"
    assert dense["Table 9"].checks and not dense["Table 9"].contrasts  # read through manipulation checks
    assert dense["Table 26"].status == "reason" and all(i.covered for i in dense.values())
    assert coverage_line(registry_coverage).endswith("tables and figures covered")


def test_the_other_papers_file_loads_if_present(registry_coverage):
    other = REGISTRY / "coverage" / "multi-reward.toml"
    if not other.exists():
        pytest.skip("registry/coverage/multi-reward.toml is not in this checkout")
    papers = {p.paper: p for p in registry_coverage}
    assert papers["multi-reward"].items and all(i.status in ("covered", "reason", "partial", "not covered")
                                               for i in papers["multi-reward"].items)


def test_statuses_and_line(small):
    (p,) = coverage(small)
    st = {i.id: i.status for i in p.items}
    assert st == {"Table 3": "covered", "Table 9": "not covered", "Table 21": "reason"}
    assert coverage_line([p]) == "2 of 3 tables and figures covered"


@pytest.mark.parametrize("bad, says", [
    ('contrasts = ["S25:P1"]', "no contrast 'P9'"),
    ('recheck = ["S25:T3-k1"]', "no reported row 'nope'"),
    ('plans = ["S25"]', "unknown study 'S99'"),
])
def test_a_wrong_name_is_refused_naming_file_and_item(small, bad, says):
    f = small / "coverage" / "dense-rewards.toml"
    wrong = {'contrasts = ["S25:P1"]': 'contrasts = ["S25:P9"]', 'recheck = ["S25:T3-k1"]': 'recheck = ["S25:nope"]',
             'plans = ["S25"]': 'plans = ["S99"]'}[bad]
    f.write_text(SMALL.replace(bad, wrong))
    with pytest.raises(PreregError) as e:
        coverage(small)
    assert "dense-rewards.toml" in str(e.value) and "item 'Table 3'" in str(e.value) and says in str(e.value)
    res = runner.invoke(app, ["registry", "--coverage", "--root", str(small)])
    assert res.exit_code == 2 and "Traceback" not in res.output


def test_schema_attacks(small):
    f = small / "coverage" / "dense-rewards.toml"
    for text, says in ((SMALL.replace('paper = "dense-rewards"', 'paper = "paper 1"'), "not a paper"),
                       (SMALL + '\n[[item]]\nid = "Table 3"\ntitle = "again"\n', "listed twice"),
                       (SMALL.replace('title = "calibration"', 'title = "calibration"\nrows = []'), "unknown key"),
                       (SMALL.replace('contrasts = ["S25:P1"]', 'contrasts = ["P1"]'), "STUDY:CONTRAST")):
        f.write_text(text)
        with pytest.raises(PreregError, match=says):
            coverage(small)


def test_a_row_recheck_cannot_check_does_not_cover(small):
    rep = small / "S25" / "reported.toml"
    # T3-updates prints several means without an interval: recheck marks it "not checkable"
    (small / "coverage" / "dense-rewards.toml").write_text(SMALL.replace('recheck = ["S25:T3-k1"]', 'recheck = ["S25:T3-updates"]'))
    (p,) = coverage(small)
    assert p.items[0].status == "partial" and p.items[0].row_status == {"S25:T3-updates": "not checkable"}
    assert rep.exists()


def test_an_endpoint_covers_only_when_its_checks_hold(small):
    """An endpoint (a value printed without an interval) counts by what recheck found: one whose
    checks hold covers; a qualitative one ("below base") is "not checkable" and does not."""
    (small / "mr-code-fast").mkdir()
    for f in ("plan.toml", "plan.lock", "reported.toml"):
        shutil.copyfile(REGISTRY / "mr-code-fast" / f, small / "mr-code-fast" / f)
    f = small / "coverage" / "dense-rewards.toml"
    f.write_text(SMALL.replace('recheck = ["S25:T3-k1"]', 'recheck = ["mr-code-fast:tag-latency-4b"]'))
    (p,) = coverage(small)
    assert p.items[0].status == "covered" and p.items[0].row_status == {"mr-code-fast:tag-latency-4b": "consistent"}
    f.write_text(SMALL.replace('recheck = ["S25:T3-k1"]', 'recheck = ["mr-code-fast:symmetric"]'))
    (p,) = coverage(small)
    assert p.items[0].status == "partial" and p.items[0].row_status == {"mr-code-fast:symmetric": "not checkable"}
    f.write_text(SMALL.replace('recheck = ["S25:T3-k1"]', 'recheck = ["mr-code-fast:no-such-endpoint"]'))
    with pytest.raises(PreregError, match="no reported row 'no-such-endpoint'"):
        coverage(small)


def test_cli_table_and_json(small):
    res = runner.invoke(app, ["registry", "--coverage", "--root", str(small)])
    assert res.exit_code == 0 and "2 of 3 tables and figures covered" in res.output and "not covered" in res.output
    res = runner.invoke(app, ["registry", "--coverage", "--json", "--root", str(small)])
    doc = json.loads(res.output)
    assert (doc["covered"], doc["total"]) == (2, 3) and doc["papers"][0]["items"][0]["row_status"] == {"S25:T3-k1": "consistent"}
    assert coverage_files(small / "nowhere") == []


def test_a_manipulation_check_reads_in_place_of_a_contrast(small):
    """Table 9 (the critic's calibration) is a reading within one configuration: a [[checks]] entry."""
    (small / "S21").mkdir()
    for f in ("plan.toml", "reported.toml"):
        shutil.copyfile(REGISTRY / "S21" / f, small / "S21" / f)
    item = 'title = "calibration"\nplans = ["S21"]\nchecks = ["S21:C-calibration"]\nrecheck = ["S21:T9-calibration-filter"]'
    f = small / "coverage" / "dense-rewards.toml"
    f.write_text(SMALL.replace('title = "calibration"', item))
    (p,) = coverage(small)
    t9 = {i.id: i for i in p.items}["Table 9"]
    assert t9.status == "covered" and t9.checks == ["S21:C-calibration"]
    res = runner.invoke(app, ["registry", "--coverage", "--json", "--root", str(small)])
    assert json.loads(res.output)["papers"][0]["items"][1]["checks"] == ["S21:C-calibration"]
    # attacks: an unknown check, a contrast named as a check, a check without a checked row
    for bad, says in (('checks = ["S21:C-nope"]', "no manipulation check 'C-nope'"),
                      ('checks = ["S21:P1"]', "no manipulation check 'P1'"),
                      ('checks = ["C-calibration"]', "STUDY:CHECK")):
        f.write_text(SMALL.replace('title = "calibration"', item.replace('checks = ["S21:C-calibration"]', bad)))
        with pytest.raises(PreregError, match=says):
            coverage(small)
    f.write_text(SMALL.replace('title = "calibration"', item.replace('recheck = ["S21:T9-calibration-filter"]', "recheck = []")))
    (p,) = coverage(small)
    assert {i.id: i for i in p.items}["Table 9"].status == "partial"
