"""Locking, amendments and the hash chain: every edit of the plan or the lock is detected."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone

import pytest
from plans import SMALL_PLAN, amend_at, lock_at

from prereg_kit.chain.lock import amend_plan, check_plan, entry_hash, lock_plan, read_chain, serialize
from prereg_kit.errors import LockError, PlanError, PreregError, ViolationError

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)


def test_lock_writes_entry(study):
    res = lock_at(study / "plan.toml", T0)
    assert res.status == "locked" and res.path == study / "plan.lock"
    chain = read_chain(study / "plan.toml")
    e = chain.last
    assert e["kind"] == "lock" and e["index"] == 0 and e["prev"] is None
    assert e["time"] == "2026-01-05T12:00:00Z" and e["tool_version"]
    assert e["raw_sha256"].startswith("sha256:") and e["content_sha256"].startswith("sha256:")
    assert e["content"]["study"]["id"] == "t1"
    assert "git" in e


def test_relock_unchanged_is_noop(study):
    lock_at(study, T0)
    before = (study / "plan.lock").read_bytes()
    assert lock_at(study, T0 + timedelta(days=1)).status == "unchanged"
    assert (study / "plan.lock").read_bytes() == before


def test_lock_refuses_changed_plan(study):
    lock_at(study, T0)
    (study / "plan.toml").write_text(SMALL_PLAN.replace("group_size = 8", "group_size = 16"))
    with pytest.raises(ViolationError, match="prereg amend"):
        lock_plan(study)


def test_lock_refuses_invalid_plan(study):
    (study / "plan.toml").write_text(SMALL_PLAN.replace("margin = 0.02", "margin = 0"))
    with pytest.raises(PlanError):
        lock_plan(study)
    assert not (study / "plan.lock").exists()


def test_amendment_chain(study):
    plan = study / "plan.toml"
    lock_at(plan, T0)
    plan.write_text(SMALL_PLAN.replace("group_size = 8", "group_size = 16"))
    a1 = amend_at(plan, "pilot showed 8 is too few", T0 + timedelta(hours=1)).entry
    assert a1["changes"] == [{"key": "recipe.group_size", "old": 8, "new": 16}]
    assert a1["reason"] == "pilot showed 8 is too few" and not a1["comment_only"]
    plan.write_text(SMALL_PLAN.replace("group_size = 8", "group_size = 16").replace("seeds = [0, 1, 2]", "seeds = [0, 1, 2, 3]"))
    a2 = amend_at(plan, "one more seed", T0 + timedelta(hours=2)).entry
    assert a2["changes"] == [{"key": "study.seeds", "old": [0, 1, 2], "new": [0, 1, 2, 3]}]
    chain = read_chain(plan)
    assert [e["index"] for e in chain.entries] == [0, 1, 2]
    assert chain.entries[1]["prev"] == chain.entries[0]["hash"]
    assert chain.entries[2]["prev"] == chain.entries[1]["hash"]
    assert check_plan(plan, chain).state == "clean"


def test_amend_refusals(study):
    plan = study / "plan.toml"
    with pytest.raises(LockError, match="not locked"):
        amend_plan(plan, "why")
    lock_at(plan, T0)
    with pytest.raises(PreregError, match="needs a reason") as ei:
        amend_plan(plan, "   ")
    assert ei.value.exit_code == 2
    with pytest.raises(ViolationError, match="nothing to amend"):
        amend_plan(plan, "no change")


def test_comment_and_layout_edits_are_comment_only(study):
    plan = study / "plan.toml"
    lock_at(plan, T0)
    chain = read_chain(plan)
    edits = [
        SMALL_PLAN + "\n# a note added later\n",
        SMALL_PLAN.replace("# the shared recipe", "# the recipe shared by all configurations"),
        SMALL_PLAN.replace("group_size = 8", "group_size    =    8"),
        SMALL_PLAN.replace('learning_rate = 1e-6   # the shared recipe\ngroup_size = 8',
                           'group_size = 8\nlearning_rate = 1e-6'),  # key order
        SMALL_PLAN.replace('id = "t1"', "id = 't1'"),  # quoting style
    ]
    for text in edits:
        plan.write_text(text)
        assert check_plan(plan, chain).state == "comment-only", text
    plan.write_text(SMALL_PLAN.replace("1e-6", "1e-5"))
    pc = check_plan(plan, chain)
    assert pc.state == "changed" and pc.changes[0]["key"] == "recipe.learning_rate"


def _comment_spans(text: str) -> set[int]:
    """Byte offsets inside comments (the small plan has no '#' inside strings)."""
    spans, pos = set(), 0
    for line in text.splitlines(keepends=True):
        if "#" in line:
            start = pos + line.index("#")
            spans.update(range(start, pos + len(line.rstrip("\n"))))
        pos += len(line)
    return spans


def test_every_single_byte_change_to_a_locked_plan_is_detected(study):
    plan = study / "plan.toml"
    lock_at(plan, T0)
    chain = read_chain(plan)
    raw = SMALL_PLAN.encode()
    comments = _comment_spans(SMALL_PLAN)
    seen = {"comment-only": 0, "changed": 0, "syntax": 0}
    for i in range(len(raw)):
        b = bytearray(raw)
        b[i] = ord("x") if raw[i] != ord("x") else ord("y")
        plan.write_bytes(bytes(b))
        try:
            state = check_plan(plan, chain).state
        except PlanError:
            state = "syntax"
        assert state != "clean", i
        if state == "comment-only":
            assert i in comments, (i, SMALL_PLAN[max(0, i - 20): i + 20])
        seen[state] += 1
    assert all(seen.values()), seen


def test_every_single_byte_edit_of_the_lock_is_detected(study):
    plan = study / "plan.toml"
    lock_at(plan, T0)
    (study / "plan.toml").write_text(SMALL_PLAN.replace("group_size = 8", "group_size = 16"))
    amend_at(plan, "bigger groups", T0 + timedelta(hours=1))
    lock = study / "plan.lock"
    raw = lock.read_bytes()
    for i in range(len(raw)):
        b = bytearray(raw)
        b[i] = ord("1") if raw[i] != ord("1") else ord("2")
        lock.write_bytes(bytes(b))
        with pytest.raises(ViolationError):
            read_chain(plan)
    lock.write_bytes(raw)
    assert len(read_chain(plan).entries) == 2


def test_rewritten_earlier_entry_breaks_the_chain(study):
    plan = study / "plan.toml"
    lock_at(plan, T0)
    plan.write_text(SMALL_PLAN.replace("group_size = 8", "group_size = 16"))
    amend_at(plan, "bigger groups", T0 + timedelta(hours=1))
    lock = study / "plan.lock"
    doc = json.loads(lock.read_text())
    # a careful forger re-hashes entry 0 after back-dating it: entry 1 no longer chains to it
    doc["entries"][0]["time"] = "2025-12-01T00:00:00Z"
    doc["entries"][0]["hash"] = entry_hash(doc["entries"][0])
    lock.write_text(serialize(doc))
    with pytest.raises(ViolationError, match="does not chain"):
        read_chain(plan)
    # white space alone is an edit too
    doc = json.loads(lock.read_text())
    lock.write_text(json.dumps(doc, indent=4, sort_keys=True) + "\n")
    with pytest.raises(ViolationError, match="canonical"):
        read_chain(plan)


def test_git_status_recorded(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin:/usr/local/bin"}
    run = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True, env=env)  # noqa: E731
    run("init", "-q")
    (repo / "plan.toml").write_text(SMALL_PLAN)
    run("add", "plan.toml")
    run("commit", "-q", "-m", "plan")
    git = lock_at(repo / "plan.toml", T0).entry["git"]
    assert git["tracked"] and git["clean"] and len(git["commit"]) == 40
    (repo / "plan.toml").write_text(SMALL_PLAN + "# edited\n")
    amended = amend_at(repo / "plan.toml", "comment", T0 + timedelta(minutes=1)).entry
    assert amended["git"]["tracked"] and not amended["git"]["clean"] and amended["comment_only"]
