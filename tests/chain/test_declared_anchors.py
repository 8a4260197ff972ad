"""The anchors a plan declares (``[integrity]``), applied as the chain is written and held by
``prereg verify``, against the determined author: receipts deleted, swapped, their folder removed;
a chain rewritten consistently (and even re-stamped) against the receipts a reader kept; a
committed chain rewritten under ``commit = true``. Each attack is a violation with a one-line
reason. Receipts come from a local RFC 3161 TSA (``tests/tsa.py``: ``openssl ts -reply``)."""

from __future__ import annotations

import json
import secrets
import shutil
from pathlib import Path

import pytest
from plans import SMALL_PLAN
from test_anchors import ENV, SEQ, _git, _rewrite_a_seal
from test_integrity import PLAN, _write_runs
from tsa import LocalTSA
from typer.testing import CliRunner

from prereg_kit.chain.anchors import NOT_PROVEN
from prereg_kit.chain.integrity import in_force
from prereg_kit.chain.lock import amend_plan, append_entries, lock_plan, read_chain
from prereg_kit.chain.look_chain import record_look
from prereg_kit.chain.seal import seal_runs
from prereg_kit.chain.timestamp import build_request, digest_of, receipt_name
from prereg_kit.cli import app
from prereg_kit.errors import PreregError
from prereg_kit.plan import validate_plan
from prereg_kit.plan.load import parse_toml
from prereg_kit.study.verify import verify_study

pytest.importorskip("rfc3161_client")


def _integrity(tsa: LocalTSA | None = None, *, git: bool = False, commit: bool = False) -> str:
    anchors = (["git"] if git else []) + (["rfc3161"] if tsa else [])
    lines = ["", "[integrity]", f"anchors = {json.dumps(anchors)}"]
    if commit:
        lines.append("commit = true")
    if tsa:
        lines += [f'tsa_url = "{tsa.url}"', 'tsa_ca = "tsa-ca.pem"']
    return "\n".join(lines) + "\n"


def _stamped_study(root: Path, tsa: LocalTSA, *, seal: bool = True) -> Path:
    d = root / "study"
    d.mkdir(parents=True)
    shutil.copyfile(tsa.ca_pem_path, d / "tsa-ca.pem")
    (d / "plan.toml").write_text(PLAN + _integrity(tsa))
    lock_plan(d)
    _write_runs(d)
    if seal:
        assert len(seal_runs(d).sealed) == 8
    return d


@pytest.fixture(scope="module")
def module_tsa(tmp_path_factory):
    t = LocalTSA(tmp_path_factory.mktemp("tsa"), "Module TSA")
    yield t
    t.close()


@pytest.fixture(scope="module")
def stamped_template(tmp_path_factory, module_tsa) -> Path:
    """A locked study declaring rfc3161, with 8 runs sealed: 9 entries, each stamped as written."""
    return _stamped_study(tmp_path_factory.mktemp("stamped"), module_tsa)


@pytest.fixture
def stamped(stamped_template, tmp_path) -> Path:
    return Path(shutil.copytree(stamped_template, tmp_path / "study", symlinks=True))


def _receipts(study: Path) -> list[str]:
    return sorted(p.name for p in (study / "timestamps").glob("*.tsr"))


def _local_stamper(tsa: LocalTSA):
    """An injected stamper: the TSA's ``openssl ts -reply`` answer, with no HTTP in between."""
    return lambda entry_hash: tsa.reply(build_request(digest_of(entry_hash), secrets.randbelow(2**62) + 1))


# ------------------------------------------------------------------ the table


def test_the_integrity_table_validates_its_settings():
    base = SMALL_PLAN + "\n[integrity]\n"
    ok = validate_plan(parse_toml((base + 'anchors = ["git", "rfc3161"]\ncommit = true\ntsa_url = "https://tsa.example/tsr"\n').encode()))
    assert ok.integrity.stamped and ok.integrity.commits and ok.integrity.tsa_url == "https://tsa.example/tsr"
    assert not validate_plan(parse_toml(SMALL_PLAN.encode())).integrity.anchors  # optional: existing plans stay valid
    for body, why in [('anchors = ["rfc3161"]\n', "needs tsa_url"),
                      ('anchors = ["git"]\ntsa_url = "https://x/tsr"\n', "settings of the rfc3161 anchor"),
                      ('anchors = []\ncommit = true\n', "setting of the git anchor"),
                      ('anchors = ["git", "git"]\n', "each anchor once"),
                      ('anchors = ["rfc3161"]\ntsa_url = "ftp://x/tsr"\n', "http(s)://host"),
                      ('anchors = ["notary"]\n', "integrity.anchors"),
                      ('anchors = ["git"]\nsigned = true\n', "integrity.signed")]:
        with pytest.raises(PreregError, match=r"integrity") as ei:
            validate_plan(parse_toml((base + body).encode()))
        assert why in str(ei.value), (body, str(ei.value))


# ------------------------------------------------------------------ rfc3161: stamped as written


def test_every_entry_is_stamped_as_it_is_written_and_verify_names_the_latest_proven(stamped, module_tsa):
    chain = read_chain(stamped)
    assert len(chain.entries) == 9
    assert _receipts(stamped) == sorted(receipt_name(e["hash"]) for e in chain.entries)
    assert len(list((stamped / "timestamps").glob("tsa-ca-*.pem"))) == 1  # the plan's CA, kept for offline checks
    # every append site (seals, amendments, looks, gradient seals) goes through append_entries
    plan = stamped / "plan.toml"
    plan.write_text(plan.read_text().replace(f'tsa_url = "{module_tsa.url}"', f'tsa_url = "{module_tsa.url}?v=2"'))
    amend_plan(plan, "the TSA's address", stamper=_local_stamper(module_tsa))  # the stamping call injected
    chain = read_chain(stamped)
    assert _receipts(stamped) == sorted(receipt_name(e["hash"]) for e in chain.entries)
    rep = verify_study(stamped)
    assert rep.exit_code == 0, rep.violations
    proven = rep.anchors["latest_proven"]
    assert proven["index"] == 9 and proven["hash"] == chain.head["hash"] and rep.anchors["declared"] == ["rfc3161"]
    assert proven["proven_by"] == [{"anchor": "rfc3161", "by": f"timestamps/{receipt_name(chain.head['hash'])} "
                                                               "(TSA roots: certificates kept in timestamps/ by the author)"}]
    assert any(line.startswith("latest proven entry 9 (amendment, the head) by rfc3161: timestamps/") for line in rep.info)
    rep = verify_study(stamped, tsa_ca=module_tsa.ca_pem_path)  # the reader's own root
    assert rep.anchors["latest_proven"]["proven_by"][0]["by"].endswith("(TSA roots: --tsa-ca)")


def test_a_missing_receipt_is_a_violation(stamped):
    e = read_chain(stamped).entries[3]
    (stamped / "timestamps" / receipt_name(e["hash"])).unlink()
    rep = verify_study(stamped)
    assert rep.exit_code == 1
    assert rep.violations == [f"{stamped / 'plan.lock'}: entry 3 (seal, {e['time']}) has no receipt timestamps/"
                              f"{receipt_name(e['hash'])}, though the plan in force declares [integrity] anchors = "
                              "[\"rfc3161\"]: the receipt was deleted, or the entry was written (or rewritten) without its TSA"]


def test_a_receipt_whose_imprint_does_not_match_its_entry_is_a_violation(stamped):
    entries = read_chain(stamped).entries
    folder = stamped / "timestamps"
    shutil.copyfile(folder / receipt_name(entries[2]["hash"]), folder / receipt_name(entries[5]["hash"]))
    rep = verify_study(stamped)
    assert rep.exit_code == 1
    want = entries[5]["hash"].removeprefix("sha256:")
    assert len(rep.violations) == 1 and "\n" not in rep.violations[0], rep.violations
    assert rep.violations[0].startswith(f"timestamps/{want}.tsr stamps digest "
                                        f"{entries[2]['hash'].removeprefix('sha256:')[:16]}…, not {want[:16]}…")


def test_an_unreadable_receipt_is_a_violation(stamped):
    e = read_chain(stamped).entries[4]
    p = stamped / "timestamps" / receipt_name(e["hash"])
    p.unlink()
    p.mkdir()  # a folder where the receipt was: it cannot be read
    rep = verify_study(stamped)
    assert rep.exit_code == 1
    assert [v for v in rep.violations if p.name in v] == [f"timestamps/{p.name}: unreadable (Is a directory): it proves nothing"]


def test_deleting_the_timestamps_folder_is_one_violation(stamped):
    shutil.rmtree(stamped / "timestamps")
    rep = verify_study(stamped)
    assert rep.exit_code == 1
    assert rep.violations == [f"{stamped / 'timestamps'}: gone, though the plan declares [integrity] anchors = "
                              "[\"rfc3161\"]: entries 0–8 have no receipt (a receipt is kept as each entry is written)"]


def test_a_tsa_that_fails_refuses_the_append_and_writes_nothing(stamped, module_tsa, tsa_factory):
    before = (stamped / "plan.lock").read_bytes(), _receipts(stamped)
    plan = stamped / "plan.toml"
    plan.write_text(plan.read_text().replace('title = "', 'title = "Amended: ', 1))
    wrong = tsa_factory("Wrong TSA", mode="wrong_imprint")
    with pytest.raises(PreregError, match=r"^entry 9 \(amendment title\) could not be stamped, though the plan declares "
                                          r"\[integrity\] anchors = \[\"rfc3161\"\]: .*stamped another digest.*: nothing written$"):
        amend_plan(plan, "title", stamper=lambda h: _via(wrong, h))
    other = tsa_factory("Other TSA")  # a receipt from a TSA the plan's tsa_ca does not trust
    with pytest.raises(PreregError, match=r"could not be stamped.*untrusted.*nothing written$"):
        amend_plan(plan, "title", stamper=_local_stamper(other))
    text = plan.read_text()
    plan.write_text(text.replace(module_tsa.url, "http://127.0.0.1:9/tsr"))  # nothing listens there
    with pytest.raises(PreregError, match=r"could not be stamped.*unreachable.*nothing written$"):
        amend_plan(plan, "the TSA moved")
    assert ((stamped / "plan.lock").read_bytes(), _receipts(stamped)) == before


def _via(tsa: LocalTSA, entry_hash: str) -> bytes:
    from prereg_kit.chain.timestamp import request_timestamp

    return request_timestamp(digest_of(entry_hash), tsa.url)


def test_anchors_declared_by_amendment_apply_from_that_entry_on(tmp_path, module_tsa):
    d = tmp_path / "study"
    d.mkdir()
    shutil.copyfile(module_tsa.ca_pem_path, d / "tsa-ca.pem")
    (d / "plan.toml").write_text(SMALL_PLAN)
    lock_plan(d)
    assert not (d / "timestamps").exists()
    (d / "plan.toml").write_text(SMALL_PLAN + _integrity(module_tsa))
    res = amend_plan(d, "stamp every entry from now on")
    assert [c["key"] for c in res.entry["changes"]] == ["integrity.anchors", "integrity.tsa_ca", "integrity.tsa_url"]  # changing [integrity] is an amendment like any other
    chain = read_chain(d)
    assert [in_force(chain.entries, i).stamped for i in range(2)] == [False, True]
    assert _receipts(d) == [receipt_name(chain.entries[1]["hash"])]
    assert verify_study(d).exit_code == 0


def test_moving_to_another_tsa_after_the_runs_is_an_amendment_that_no_run_depends_on(stamped, tsa_factory):
    other = tsa_factory("Second TSA")
    shutil.copyfile(other.ca_pem_path, stamped / "tsa-ca-2.pem")
    plan = stamped / "plan.toml"
    text = plan.read_text()
    plan.write_text(text.replace(text[text.index('tsa_url = "'):text.index("\n", text.index('tsa_url = "'))],
                                 f'tsa_url = "{other.url}"').replace('"tsa-ca.pem"', '"tsa-ca-2.pem"'))
    res = amend_plan(plan, "the first TSA closed")
    assert [c["key"] for c in res.entry["changes"]] == ["integrity.tsa_ca", "integrity.tsa_url"]
    assert receipt_name(res.entry["hash"]) in _receipts(stamped)
    rep = verify_study(stamped)  # the 8 main runs are not "under a superseded entry": no run depends on [integrity]
    assert rep.exit_code == 0, rep.violations


# ------------------------------------------------------------------ receipts the reader keeps


def test_a_readers_receipt_catches_a_rewrite_the_author_restamped(stamped, module_tsa, tmp_path):
    kept = tmp_path / "reader"
    kept.mkdir()
    head = read_chain(stamped).head
    shutil.copyfile(stamped / "timestamps" / receipt_name(head["hash"]), kept / "from-the-registration.tsr")
    shutil.copyfile(module_tsa.ca_pem_path, kept / "tsa-root.pem")
    rep = verify_study(stamped, receipts=kept)
    assert rep.exit_code == 0, rep.violations
    assert rep.anchors["latest_proven"]["proven_by"][-1] == {"anchor": "receipts", "by": str(kept / "from-the-registration.tsr")}
    # the determined author: a seal rewritten, the chain rehashed, old receipts deleted, new ones stamped
    _rewrite_a_seal(stamped)
    shutil.rmtree(stamped / "timestamps")
    stamp = _local_stamper(module_tsa)
    (stamped / "timestamps").mkdir()
    for e in read_chain(stamped).entries:
        (stamped / "timestamps" / receipt_name(e["hash"])).write_bytes(stamp(e["hash"]))
    assert verify_study(stamped).exit_code == 0  # the author's folder alone is consistent again
    rep = verify_study(stamped, receipts=kept)
    assert rep.exit_code == 1
    assert len(rep.violations) == 1 and rep.violations[0].startswith(
        f"{kept / 'from-the-registration.tsr'}: stamps {head['hash'][7:23]}… (at ")
    assert rep.violations[0].endswith(f"which is no entry of {stamped / 'plan.lock'}: the chain was rewritten after "
                                      "the receipt was made (or it is another study's)")


def test_receipts_folder_problems_are_unusable_input(stamped, tmp_path):
    assert verify_study(stamped, receipts=tmp_path / "none").problems == [f"--receipts {tmp_path / 'none'}: no such folder"]
    (tmp_path / "empty").mkdir()
    assert verify_study(stamped, receipts=tmp_path / "empty").exit_code == 2
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x.tsr").write_bytes(b"not a receipt")
    rep = verify_study(stamped, receipts=tmp_path / "junk")
    assert rep.exit_code == 1 and len(rep.violations) == 1 and "is not an RFC 3161 timestamp response" in rep.violations[0]


# ------------------------------------------------------------------ git: committed after every append


@pytest.fixture
def git_env(monkeypatch, tmp_path):
    for k, v in ENV.items():
        if k != "PATH":
            monkeypatch.setenv(k, v)
    monkeypatch.setenv("HOME", str(tmp_path))


def test_commit_true_commits_every_append_and_a_rewrite_names_the_commit(tmp_path, git_env):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    d = repo / "study"
    d.mkdir()
    (d / "plan.toml").write_text(PLAN + _integrity(git=True, commit=True))
    (repo / "other.txt").write_text("staged, not ours")
    _git(repo, "add", "other.txt")
    lock_plan(d)
    _write_runs(d)
    assert len(seal_runs(d).sealed) == 8
    log = _git(repo, "log", "--format=%s", "--name-only")
    assert log.splitlines()[0] == "plan.lock: entries 1–8 (seal)" and "study/plan.lock" in log
    assert "plan.lock: entry 0 (lock)" in log and "other.txt" not in log  # plan.lock alone is committed
    assert "other.txt" in _git(repo, "diff", "--cached", "--name-only")  # what else was staged stays staged
    rep = verify_study(d)
    assert rep.exit_code == 0, rep.violations
    assert rep.anchors["latest_proven"]["index"] == 8 and rep.anchors["latest_proven"]["proven_by"][0]["anchor"] == "git"
    sha = _git(repo, "rev-parse", "HEAD")
    _rewrite_a_seal(d)  # consistent: every hash recomputed
    v = verify_study(d).violations
    assert len(v) == 1 and f"(seal) as committed in {sha[:12]} (" in v[0] and v[0].endswith(
        "differs in the working file: a committed entry was rewritten (the chain may only grow)"), v


def test_commit_true_commits_looks_and_amendments_too(tmp_path, git_env):
    repo = tmp_path / "repo"
    (repo / "study").mkdir(parents=True)
    _git(repo, "init", "-q")
    plan = repo / "study" / "plan.toml"
    plan.write_text(SEQ + _integrity(git=True, commit=True))
    lock_plan(plan)
    append_entries(plan, lambda c: [{"kind": "seal", "configuration": conf, "seed": s, "run": f"runs/{conf}/seed-{s}", "files": {}}
                                    for s in (0, 1) for conf in ("A", "B")], what="seal")
    record_look(plan, {"look": 1, "looks": [2, 3], "seeds": [0, 1], "configurations": ["A", "B"],
                       "decision": "continue to look 2", "plan_entry": 0, "plan_hash": read_chain(plan).last["content_sha256"],
                       "contrasts": [{"contrast": "C1", "p": 0.2, "repeated_p": 0.5, "decision": "continue to look 2"}]})
    plan.write_text(plan.read_text() + "# a note\n")
    amend_plan(plan, "a note")
    assert _git(repo, "log", "--format=%s").splitlines() == [
        "plan.lock: entry 6 (amendment a note)", "plan.lock: entry 5 (look 1)", "plan.lock: entries 1–4 (seal)",
        "plan.lock: entry 0 (lock)"]
    assert _git(repo, "status", "--porcelain", "--", "study/plan.lock") == ""  # every entry committed


def test_commit_true_outside_a_work_tree_is_refused_before_anything_is_written(tmp_path, git_env):
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(SMALL_PLAN + _integrity(git=True, commit=True))
    with pytest.raises(PreregError, match=r"plan.lock: the plan declares \[integrity\] anchors = \[\"git\"\] with commit = true, "
                                          r"but .* is not in a git work tree: nothing written"):
        lock_plan(d)
    assert not (d / "plan.lock").exists()


def test_git_declared_but_never_committed_is_a_violation(tmp_path, git_env):
    repo = tmp_path / "repo"
    (repo / "study").mkdir(parents=True)
    _git(repo, "init", "-q")
    plan = repo / "study" / "plan.toml"
    plan.write_text(SMALL_PLAN + _integrity(git=True))
    lock_plan(plan)
    rep = verify_study(plan)
    assert rep.exit_code == 1 and rep.violations == [
        f"{repo / 'study' / 'plan.lock'}: the plan declares [integrity] anchors = [\"git\"], but plan.lock was never "
        "committed: git anchors nothing"]
    _git(repo, "add", "study/plan.lock")
    _git(repo, "commit", "-q", "-m", "lock")
    assert verify_study(plan).exit_code == 0


# ------------------------------------------------------------------ nothing declared


def test_verify_without_declared_anchors_says_what_is_not_proven(study):
    lock_plan(study)
    res = CliRunner().invoke(app, ["verify", str(study)])
    assert res.exit_code == 0, res.output
    assert NOT_PROVEN in " ".join(res.stdout.split())  # the terminal may wrap the line
    doc = json.loads(CliRunner().invoke(app, ["verify", str(study), "--json"]).stdout)
    assert doc["anchors"]["declared"] == [] and doc["anchors"]["latest_proven"] is None and NOT_PROVEN in doc["info"]
    head = read_chain(study).head["hash"]
    doc = json.loads(CliRunner().invoke(app, ["verify", str(study), "--json", "--head", head]).stdout)
    assert doc["anchors"]["latest_proven"] == {"index": 0, "kind": "lock", "time": read_chain(study).head["time"],
                                               "hash": head, "proven_by": [{"anchor": "head", "by": f"--head {head}"}]}
    assert NOT_PROVEN not in doc["info"]

