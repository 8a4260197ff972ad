"""``--json`` of verify, analyze, dry-run, registry and recheck: one JSON document on stdout, the
same records as the files written, the exit codes of the text output, errors on stderr only."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
from paths import ROOT
from plans import SMALL_PLAN
from typer.testing import CliRunner

from prereg_kit.cli import app


def _json(res) -> dict:
    """stdout parsed as exactly one JSON document (json.loads refuses anything after it)."""
    assert "\x1b[" not in res.stdout
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def dry(tmp_path_factory):
    """A synthetic study written by ``prereg dry-run --json --repeat 1`` and the document it printed."""
    d = tmp_path_factory.mktemp("json")
    (d / "plan.toml").write_text(SMALL_PLAN)
    res = CliRunner().invoke(app, ["dry-run", str(d), "-e", "C1=0.05", "--repeat", "1", "--resamples", "40", "--json"])
    assert res.exit_code == 0, res.output
    return d / "dry-run", _json(res)


def test_dry_run_json_is_the_written_records(dry):
    folder, doc = dry
    written = json.loads((folder / "report" / "results.json").read_text())
    assert {k: v for k, v in doc.items() if k not in ("effects", "power")} == written
    assert doc["effects"] == {"A": 0.0, "B": 0.05}
    power = pd.read_csv(folder / "report" / "power.csv").drop(columns="synthetic")  # the CSV's mark, not a record
    assert doc["power"] == power.to_dict(orient="records") and len(doc["power"]) == 2
    assert any("SYNTHETIC" in n for n in doc["notes"])


def test_analyze_json_equals_results_json(dry, tmp_path):
    folder, _ = dry
    res = CliRunner().invoke(app, ["analyze", str(folder), "--resamples", "40", "--out", str(tmp_path / "r"), "--json"])
    assert res.exit_code == 0, res.output
    doc = _json(res)
    assert doc == json.loads((tmp_path / "r" / "results.json").read_text())  # the report is still written
    assert doc["format"] == "prereg-results/1" and {r["contrast"] for r in doc["contrasts"]} == {"C1", "C2"}


def test_verify_into_a_pipe_prints_no_colour(dry):
    # the quick variant: the same console in a fresh process, without the analysis (the slow step runs analyze)
    folder, _ = dry
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    env["PYTHONPATH"] = str(ROOT)
    res = subprocess.run([sys.executable, "-m", "prereg_kit", "verify", str(folder)],
                         capture_output=True, text=True, env=env, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert "OK" in res.stdout
    assert "\x1b[" not in res.stdout and "\x1b[" not in res.stderr  # no colour


@pytest.mark.slow
def test_analyze_into_a_pipe_prints_no_colour(dry, tmp_path):
    folder, _ = dry
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    env["PYTHONPATH"] = str(ROOT)
    res = subprocess.run([sys.executable, "-m", "prereg_kit", "analyze", str(folder), "--resamples", "40",
                          "--out", str(tmp_path / "r")], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "C1" in res.stdout and "report:" in res.stdout
    assert "\x1b[" not in res.stdout and "\x1b[" not in res.stderr  # no colour, no progress bar


def test_verify_json_holds_every_line_and_keeps_the_exit_code(dry):
    folder, _ = dry
    res = CliRunner().invoke(app, ["verify", str(folder), "--json"])
    doc = _json(res)
    assert res.exit_code == 0 and doc["ok"] and doc["verdict"] == "OK" and doc["violations"] == []
    assert doc["lock"]["amendments"] == 0 and doc["lock"]["head"]["hash"] and doc["runs"] == 6
    text = CliRunner().invoke(app, ["verify", str(folder)])
    shown = [ln.strip() for ln in text.stdout.splitlines()[:-1]]
    assert shown and all(ln in doc["info"] for ln in shown)  # every line the text shows is in the document
    plan = folder / "plan.toml"
    before = plan.read_text()
    try:
        plan.write_text(before.replace('title = "Test study"', 'title = "Changed after the lock"'))
        res = CliRunner().invoke(app, ["verify", str(folder), "--json"])
        doc = _json(res)
        assert res.exit_code == 1 and not doc["ok"] and doc["verdict"] == "VIOLATIONS"
        text = CliRunner().invoke(app, ["verify", str(folder)])
        assert text.exit_code == 1
        for ln in text.stderr.splitlines():  # each violation line the text shows, in the document
            assert ln.removeprefix("violation: ") in doc["violations"], ln
    finally:
        plan.write_text(before)


@pytest.mark.parametrize("args", [["verify", "studies/nope"], ["analyze", "studies/nope"], ["dry-run", "studies/nope"],
                                  ["status", "studies/nope"], ["registry", "--root", "studies/nope"],
                                  ["recheck", "studies/nope"]])
def test_an_error_with_json_leaves_stdout_empty(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 2 and res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: studies/nope: no such") and "Traceback" not in res.stderr


class _Checker:
    """A stand-in trainer that can run every configuration except ``B``."""

    name = "alpha"

    def check_configuration(self, plan, configuration):
        return ["recipe: x: unknown key", "recipe: y: unknown key"] if configuration == "B" else []

    def load(self):
        return self


def test_registry_json_has_the_table_columns_and_reasons(tmp_path, monkeypatch):
    import prereg_kit.cli.runners as rn

    monkeypatch.setattr(rn, "entry_points", lambda group: [_Checker()] if group == rn.GROUP else [])
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "plan.toml").write_text(SMALL_PLAN.replace('id = "t1"', f'id = "{name}"'))
    res = CliRunner().invoke(app, ["registry", "--root", str(tmp_path), "--json", "--why"])
    assert res.exit_code == 0, res.output
    doc = _json(res)
    assert [s["study"] for s in doc["studies"]] == ["one", "two"] and doc["trainer"] == "alpha"
    one = doc["studies"][0]
    assert set(one) >= {"study", "id", "title", "plan_valid", "locked", "runs", "report", "reported_rows", "runnable"}
    assert (one["id"], one["plan_valid"], one["locked"], one["runnable"], one["configurations"]) == ("one", True, "no", 1, 2)
    assert one["reasons"] == {"B": ["recipe: x: unknown key", "recipe: y: unknown key"]}
    assert doc["totals"] == {"studies": 2, "valid_plans": 2, "reported_records": 0, "with_errors": 0,
                             "configurations": 4, "runnable": 2}
    (tmp_path / "two" / "plan.toml").write_text("not toml [")
    res = CliRunner().invoke(app, ["registry", "--root", str(tmp_path), "--json"])
    doc = _json(res)  # a study with errors: the document, then the exit code of the table
    assert res.exit_code == 2 and doc["totals"]["with_errors"] == 1 and doc["studies"][1]["plan_error"]
    assert "reasons" not in doc["studies"][0]


def test_recheck_json_one_record_per_printed_test(monkeypatch):
    monkeypatch.chdir(ROOT)
    res = CliRunner().invoke(app, ["recheck", "S01", "--json"])
    text = CliRunner().invoke(app, ["recheck", "S01"], terminal_width=400)
    assert res.exit_code == text.exit_code
    doc = _json(res)
    assert doc["tests"] and len(doc["rows"]) == sum(doc["counts"].values())
    for t in doc["tests"]:
        assert set(t) >= {"study", "row", "label", "test", "printed", "recomputed", "match", "explanation"}
        lo, hi = t["recomputed"]
        assert 0 <= lo <= hi <= 1 and isinstance(t["match"], bool)
    n_printed = sum(len(r["checks"]) for r in doc["rows"] if r["status"] in ("consistent", "inconsistent", "explained"))
    assert len(doc["tests"]) <= n_printed
    assert all(r["row"] in text.stdout for r in doc["rows"])
    only = _json(CliRunner().invoke(app, ["recheck", "S01", "--json", "--mismatches"]))
    assert all(r["mismatch"] for r in only["rows"]) and only["counts"] == doc["counts"]


def test_verify_json_of_an_unlocked_plan_is_a_document_with_exit_2(tmp_path):
    """What verify finds, unusable input included, is its document; only a path to no plan is an error."""
    (tmp_path / "plan.toml").write_text(SMALL_PLAN)
    res = CliRunner().invoke(app, ["verify", str(tmp_path), "--json"])
    doc = _json(res)
    assert res.exit_code == 2 and doc["verdict"] == "UNUSABLE INPUT" and doc["lock"] is None and not doc["ok"]
    assert doc["problems"][0].startswith(f"{tmp_path / 'plan.lock'}: no lock file")
