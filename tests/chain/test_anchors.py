"""The outside anchors of the lock chain against the determined author, who rewrites the chain
consistently (every hash) so that the file alone is a valid chain: git's history of ``plan.lock``
(every committed version a prefix of the next and of the file) and the head a reader holds
(``prereg verify --head``)."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from plans import SMALL_PLAN, clock_at, lock_at
from test_integrity import _rewrite_parquet, _study
from typer.testing import CliRunner

from prereg_kit.chain.anchors import check_shared_head, parse_head
from prereg_kit.chain.lock import append_entries, entry_hash, read_chain, serialize
from prereg_kit.chain.look_chain import look_chain_problems, record_look
from prereg_kit.chain.seal import run_files, seal_runs
from prereg_kit.cli import app
from prereg_kit.errors import PreregError
from prereg_kit.plan.canonical import content_hash
from prereg_kit.study.verify import verify_study

ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
       "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin:/usr/local/bin"}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env={**ENV, "HOME": str(repo)}).stdout.strip()


def _commit(repo: Path, *paths: str, msg: str = "chain") -> str:
    _git(repo, "add", *paths)
    _git(repo, "commit", "-q", "-m", msg)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A locked study with 8 sealed runs (built once; each test copies it into a git repository of its own)."""
    return _study(tmp_path_factory.mktemp("anchors-template"))


@pytest.fixture
def repo(template, tmp_path) -> Path:
    """``repo/study``: a copy of the sealed study in a fresh git repository, nothing committed."""
    r = tmp_path / "repo"
    shutil.copytree(template, r / "study", symlinks=True)
    _git(r, "init", "-q")
    return r


def _rehash(lock: Path, entries: list[dict]) -> None:
    """What a forger does after editing entries: renumber, rechain and rehash them all."""
    prev = None
    for i, e in enumerate(entries):
        e["index"], e["prev"] = i, prev
        e["hash"] = entry_hash(e)
        prev = e["hash"]
    lock.write_text(serialize({"format": "prereg-lock/1", "entries": entries}))


def _rewrite_a_seal(study: Path) -> None:
    """The attack: one more correct answer in a treatment run, its seal rewritten, the chain rehashed."""
    _rewrite_parquet(study / "runs" / "trt" / "seed-0" / "evals.parquet", lambda df: df.assign(correct=df["samples"]))
    entries = json.loads((study / "plan.lock").read_text())["entries"]
    for e in entries:
        if e.get("run") == "runs/trt/seed-0":
            e["files"] = run_files(study / e["run"])
    _rehash(study / "plan.lock", entries)
    read_chain(study)  # a valid chain: the file alone cannot tell


def test_a_consistent_seal_rewrite_is_caught_where_the_chain_was_committed(repo):
    study = repo / "study"
    sha = _commit(repo, "study/plan.toml", "study/plan.lock")
    rep = verify_study(study)
    assert rep.exit_code == 0, rep.violations
    assert any(line.startswith("git: plan.lock in 1 commit(s)") and "entries 0–8" in line for line in rep.info)
    _rewrite_a_seal(study)
    v = verify_study(study).violations
    bad = [line for line in v if "as committed in" in line]
    assert len(bad) == 1 and bad[0].startswith(f"{study / 'plan.lock'}: entry ")
    assert f"(seal) as committed in {sha[:12]} (" in bad[0] and bad[0].endswith(
        "differs in the working file: a committed entry was rewritten (the chain may only grow)")
    # committing the rewrite does not help: the earlier commit still holds the original entries
    new = _commit(repo, "study/plan.lock", msg="rewrite")
    bad = [line for line in verify_study(study).violations if "as committed in" in line]
    assert len(bad) == 1 and f"as committed in {sha[:12]}" in bad[0] and f"differs in commit {new[:12]} (" in bad[0]


def test_without_a_commit_git_says_it_does_not_anchor_the_chain(repo):
    study = repo / "study"
    _commit(repo, "study/plan.toml")  # the plan, but never plan.lock
    _rewrite_a_seal(study)
    rep = verify_study(study)
    assert rep.exit_code == 0, rep.violations  # what the issue found: nothing else can tell
    assert "git: plan.lock was never committed: git does not anchor the chain (commit it, and push it where others see it)" in rep.info


def test_appends_after_a_commit_pass(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    study = _study(repo, seal=False)
    _commit(repo, "study/plan.toml", "study/plan.lock")
    assert len(seal_runs(study).sealed) == 8
    rep = verify_study(study)
    assert rep.exit_code == 0, rep.violations
    assert any("entries 0–0 as committed in" in line and "entries 1–8 not committed yet" in line for line in rep.info)
    _commit(repo, "study/plan.lock")
    rep = verify_study(study)
    assert rep.exit_code == 0 and any("plan.lock in 2 commit(s), each a prefix of the next; entries 0–8" in x for x in rep.info)


def test_the_shared_head_passes_on_the_chain_shared_and_fails_on_a_rewrite(repo):
    study = repo / "study"  # nothing committed: the reader's head is the only anchor
    runner = CliRunner()
    head = read_chain(study).head["hash"]
    res = runner.invoke(app, ["verify", str(study), "--head", head, "--json"])
    doc = json.loads(res.stdout)
    assert res.exit_code == 0, doc["violations"]
    assert doc["anchors"]["head"] == {"index": 8, "kind": "seal", "time": read_chain(study).head["time"], "hash": head}
    assert doc["anchors"]["shared_head"] == {"given": head, "found": True, "entry": doc["anchors"]["head"]}
    assert any(line.startswith(f"shared head {head[:19]}… is entry 8 (seal, ") for line in doc["info"])
    lock_hash = read_chain(study).entries[0]["hash"]  # an older shared head, as 64 hex without the prefix
    res = runner.invoke(app, ["verify", str(study), "--head", lock_hash.removeprefix("sha256:").upper()])
    assert res.exit_code == 0 and "is entry 0 (lock" in res.stdout and "8 entries appended since" in res.stdout
    _rewrite_a_seal(study)
    res = runner.invoke(app, ["verify", str(study), "--head", head])
    assert res.exit_code == 1
    assert f"the shared head {head[:19]}… is no entry of the chain (9 entries, head entry 8" in res.stderr
    assert "the chain was rewritten, or is not the one shared" in res.stderr
    res = runner.invoke(app, ["verify", str(study), "--head", "sha256:" + "ab" * 32, "--json"])
    doc = json.loads(res.stdout)
    assert res.exit_code == 1 and doc["anchors"]["shared_head"]["found"] is False
    res = runner.invoke(app, ["verify", str(study), "--head", "abc"])
    assert res.exit_code == 2 and "--head 'abc': not an entry hash" in res.stderr


def test_parse_head_refuses_what_is_not_a_hash():
    assert parse_head(" SHA256:" + "A" * 64) == "sha256:" + "a" * 64
    for bad in ("", "sha256:" + "a" * 63, "md5:" + "a" * 64, "g" * 64):
        with pytest.raises(PreregError, match="not an entry hash"):
            parse_head(bad)


T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
SEQ = SMALL_PLAN + '\n[sequential]\nlooks = [2, 3]\nfutility = { kind = "conditional-power", below = 0.1 }\n'


def test_deleted_look_entries_are_caught_by_git_and_by_the_shared_head(tmp_path):
    repo = tmp_path / "repo"
    (repo / "study").mkdir(parents=True)
    _git(repo, "init", "-q")
    plan = repo / "study" / "plan.toml"
    plan.write_text(SEQ)
    lock_at(plan, T0)
    with clock_at(T0 + timedelta(hours=1)):
        append_entries(plan, lambda c: [{"kind": "seal", "configuration": conf, "seed": s, "run": f"runs/{conf}/seed-{s}", "files": {}}
                                        for s in (0, 1) for conf in ("A", "B")], what="seal")
    chain = read_chain(plan)
    with clock_at(T0 + timedelta(hours=2)):
        record_look(plan, {"look": 1, "looks": [2, 3], "seeds": [0, 1], "configurations": ["A", "B"],
                           "decision": "continue to look 2", "plan_entry": 0, "plan_hash": chain.last["content_sha256"],
                           "contrasts": [{"contrast": "C1", "p": 0.2, "repeated_p": 0.5, "decision": "continue to look 2"}]})
    shared = read_chain(plan).head["hash"]
    sha = _commit(repo, "study/plan.toml", "study/plan.lock")
    # the forger drops look 1 and rehashes, so that look 1 can be read again with every seed run
    _rehash(repo / "study" / "plan.lock", [e for e in read_chain(plan).entries if e["kind"] != "look"])
    forged = read_chain(plan)
    assert look_chain_problems(forged) == []  # the file alone cannot tell
    rep = verify_study(plan, head=shared)
    git = [line for line in rep.violations if "as committed in" in line]
    assert git == [f"{plan.parent / 'plan.lock'}: entry 5 (look) as committed in {sha[:12]} "
                   f"({git[0].split('(')[2].split(')')[0]}) is gone from the working file: "
                   "a committed entry was rewritten (the chain may only grow)"]
    assert check_shared_head(forged, shared).entry is None
    assert any("the shared head" in line and "is no entry of the chain" in line for line in rep.violations)


def test_a_chain_started_again_from_a_later_lock_is_a_warning_and_a_rewritten_lock_a_violation(repo):
    """A study re-locked later under the same path (a new preregistration: its runs must start
    after the new lock) is shown on every verify with the commit that held the old chain; the lock
    entry rewritten with its own time (the plan edited, the chain rehashed) is a violation."""
    study = repo / "study"
    sha = _commit(repo, "study/plan.toml", "study/plan.lock")
    original = json.loads((study / "plan.lock").read_text())["entries"]
    later = (datetime.fromisoformat(original[-1]["time"].replace("Z", "+00:00")) + timedelta(days=1))
    restarted = [dict(original[0], time=later.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))]
    _rehash(study / "plan.lock", restarted)
    rep = verify_study(study)
    again = [w for w in rep.warnings if "the chain was started again from a new lock" in w]
    assert len(again) == 1 and f"as committed in {sha[:12]} (" in again[0]
    assert not [v for v in rep.violations if "as committed in" in v]
    content = {**original[0]["content"], "title": "edited after the runs"}
    edited = [dict(original[0], content=content, content_sha256=content_hash(content))] + original[1:]
    _rehash(study / "plan.lock", edited)
    v = verify_study(study).violations
    bad = [line for line in v if "as committed in" in line]
    assert len(bad) == 1 and "entry 0 (lock)" in bad[0] and "a committed entry was rewritten" in bad[0], v
