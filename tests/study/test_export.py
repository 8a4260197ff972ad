"""``prereg export osf|aspredicted``: the locked plan in a registry's template fields, with the
chain's head and the study's receipts, and the reader's check against it: after a rewrite of the
chain, ``verify --head`` and ``--receipts`` from the export fail."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from plans import SMALL_PLAN
from test_anchors import _rehash
from test_declared_anchors import _integrity
from tsa import LocalTSA
from typer.testing import CliRunner

from prereg_kit.chain.lock import amend_plan, lock_plan, read_chain
from prereg_kit.chain.timestamp import receipt_name
from prereg_kit.cli import app
from prereg_kit.plan.canonical import content_hash
from prereg_kit.study.export import REGISTRIES, export_registration

pytest.importorskip("rfc3161_client")

runner = CliRunner()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A study declaring rfc3161, locked and amended (two stamped entries), exported to OSF and
    AsPredicted from the command line (built once; tests copy what they tamper with)."""
    root = tmp_path_factory.mktemp("export")
    tsa = LocalTSA(root / "tsa", "Export TSA")
    d = root / "study"
    d.mkdir()
    shutil.copyfile(tsa.ca_pem_path, d / "tsa-ca.pem")
    (d / "plan.toml").write_text(SMALL_PLAN + _integrity(tsa))
    lock_plan(d)
    (d / "plan.toml").write_text((d / "plan.toml").read_text().replace("seeds = [0, 1, 2]", "seeds = [0, 1, 2, 3]"))
    amend_plan(d, "a fourth seed, before any run")
    for registry in REGISTRIES:
        res = runner.invoke(app, ["export", registry, str(d), "--out", str(root / "registration")])
        assert res.exit_code == 0, res.output
    tsa.close()
    return d, root / "registration"


def _doc(folder: Path, registry: str) -> dict:
    return json.loads((folder / f"{registry}-registration.json").read_text())


def test_the_osf_fields_hold_the_locked_plan_and_the_head(exported):
    study, reg = exported
    doc = _doc(reg, "osf")
    chain = read_chain(study)
    f = {k: v["answer"] for k, v in doc["fields"].items()}
    assert doc["template"] == "OSF Preregistration" and doc["head"]["hash"] == chain.head["hash"] and doc["head"]["index"] == 1
    assert list(f) == ["title", "description", "hypotheses", "study_type", "blinding", "study_design", "randomization",
                       "existing_data", "data_collection_procedures", "sample_size", "sample_size_rationale",
                       "stopping_rule", "manipulated_variables", "measured_variables", "statistical_models",
                       "transformations", "inference_criteria", "data_exclusion", "missing_data", "exploratory_analysis",
                       "other"]
    assert f["title"] == "Test study"
    assert f["hypotheses"] == "H1: B beats A. Prediction: B - A > 0. Tested by C1. Readings: deficit: B hurts; gain: B helps; inconclusive: no claim."  # the chain holds keys sorted
    assert f["sample_size"].startswith("2 configurations × 4 seeds (0-3) = 8 runs")  # as amended: the last plan entry
    assert "seeds × configurations = 8 main runs" in f["sample_size_rationale"]
    assert f["statistical_models"].splitlines() == [
        "C1 (primary, superiority): B vs A; design paired, test t, two-sided; read at B on accuracy (test); seeds 0-3; margin 0.02; prediction none.",
        "C2 (secondary, equivalence): B vs A; design paired, test t, two-sided; read at time on accuracy (test); seeds 0-3; margin 0.02; prediction none."]
    assert "alpha 0.05" in f["inference_criteria"] and "family primary (C1): holm at alpha 0.05" in f["inference_criteria"]
    assert f["manipulated_variables"] == 'A: control; the comparator; the shared recipe\nB: overrides {"learning_rate":2e-06}'
    assert f["existing_data"].startswith("Registration prior to creation of data: no main run is sealed")
    assert "entry 1 (" in f["other"] and "a fourth seed, before any run [study.seeds: [0, 1, 2] → [0, 1, 2, 3]]" in f["other"]
    assert chain.head["hash"] in f["other"] and "outside anchors declared: rfc3161" in f["other"]
    assert doc["receipts"] == sorted(receipt_name(e["hash"]) for e in chain.entries)
    assert all((reg / n).is_file() for n in doc["receipts"]) and list(reg.glob("tsa-ca-*.pem"))
    assert doc["verify"] == f"prereg verify STUDY --head {chain.head['hash']} --receipts {reg}"
    md = (reg / "osf-registration.md").read_text()
    assert md.startswith("# Test study\n") and f"`{chain.head['hash']}`" in md and "### Stopping rule" in md
    assert "H1: B beats A." in md and "## Analysis plan" in md


def test_the_aspredicted_questions_hold_the_locked_plan(exported):
    study, reg = exported
    doc = _doc(reg, "aspredicted")
    f = {k: v["answer"] for k, v in doc["fields"].items()}
    assert list(f) == ["title", "data_collected", "hypothesis", "dependent_variable", "conditions", "analyses",
                       "outliers_exclusions", "sample_size", "other"]
    assert f["data_collected"].startswith("No. ")
    assert "H1: B beats A." in f["hypothesis"] and "Does B beat A?" in f["hypothesis"]
    assert "C1 (primary, superiority)" in f["analyses"] and "margin 0.02" in f["analyses"]
    assert f["sample_size"].startswith("2 configurations × 4 seeds (0-3) = 8 runs")
    assert f["conditions"].startswith("2 configurations") and doc["head"]["hash"] == read_chain(study).head["hash"]
    assert "## Question 8" in (reg / "aspredicted-registration.md").read_text()


def test_the_reader_checks_the_study_against_the_export_and_a_rewrite_fails(exported, tmp_path):
    study0, reg = exported
    study = Path(shutil.copytree(study0, tmp_path / "study"))
    head = _doc(reg, "osf")["head"]["hash"]
    res = runner.invoke(app, ["verify", str(study), "--head", head, "--receipts", str(reg), "--json"])
    doc = json.loads(res.stdout)
    assert res.exit_code == 0, doc["violations"]
    assert doc["anchors"]["latest_proven"]["index"] == 1
    assert {p["anchor"] for p in doc["anchors"]["latest_proven"]["proven_by"]} == {"head", "rfc3161", "receipts"}
    # the author rewrites the amendment (five seeds, not four) consistently and drops the receipts
    entries = read_chain(study).entries
    content = {**entries[1]["content"], "study": {**entries[1]["content"]["study"], "seeds": [0, 1, 2, 3, 4]}}
    entries[1] = {**entries[1], "content": content, "content_sha256": content_hash(content)}
    _rehash(study / "plan.lock", entries)
    shutil.rmtree(study / "timestamps")
    res = runner.invoke(app, ["verify", str(study), "--head", head, "--receipts", str(reg)])
    assert res.exit_code == 1
    err = " ".join(res.stderr.split())
    assert f"the shared head {head[:19]}… is no entry of the chain" in err
    bad = receipt_name(head)
    assert f"{reg / bad}: stamps {bad[:16]}… (at " in err and "the chain was rewritten after the receipt was made" in err
    assert "timestamps: gone, though the plan declares" in err


def test_an_unlocked_plan_is_not_exported(study, tmp_path):
    res = runner.invoke(app, ["export", "osf", str(study), "--out", str(tmp_path / "reg")])
    assert res.exit_code == 2 and not (tmp_path / "reg").exists()
    assert res.stderr.strip().splitlines() == [f"error: {study / 'plan.lock'}: no lock file: the plan is not locked "
                                               f"(run `prereg lock {study / 'plan.toml'}`)"]


def test_export_copies_no_receipt_of_another_chain(exported, tmp_path):
    study0, _ = exported
    study = Path(shutil.copytree(study0, tmp_path / "study"))
    stray = study / "timestamps" / ("ab" * 32 + ".tsr")
    shutil.copyfile(next((study / "timestamps").glob("*.tsr")), stray)
    res = export_registration(study, "aspredicted", tmp_path / "reg")
    assert stray.name not in {p.name for p in res.receipts} and len(res.receipts) == 2
