"""The run-timing audit of `prereg verify`, on run metadata the tests write."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from plans import SMALL_PLAN, amend_at, lock_at

from prereg_kit.chain.lock import read_chain
from prereg_kit.runlog import RunMeta, run_dir, write_meta
from prereg_kit.study.verify import verify_study

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
H = timedelta(hours=1)


def _run(study, config, seed, *, start, plan_hash, stage="main", study_id="t1"):
    # still running: a complete run would also need its seal (tests/chain/test_integrity.py); timing is the point here
    meta = RunMeta(study=study_id, configuration=config, seed=seed, stage=stage, plan_hash=plan_hash,
                   started_at=start, status="running")
    write_meta(run_dir(study, config, seed, stage), meta)


def test_clean_study_with_runs(study):
    (study / "plan.toml").write_text(SMALL_PLAN + '\n[[stages]]\nname = "smoke"\n[[stages]]\nname = "main"\n')
    h = lock_at(study, T0).entry["content_sha256"]
    _run(study, "A", 0, start=T0 - H, plan_hash="sha256:draft", stage="smoke")  # smoke may precede
    for cfg in "AB":
        _run(study, cfg, 0, start=T0 + H, plan_hash=h)
    rep = verify_study(study)
    assert rep.exit_code == 0, rep.violations
    assert rep.audit.n_runs == 3 and any("smoke run started before the lock (allowed)" in s for s in rep.info)


def test_main_run_before_lock_is_a_violation(study):
    h = lock_at(study, T0).entry["content_sha256"]
    _run(study, "A", 1, start=T0 - H, plan_hash=h)
    rep = verify_study(study)
    assert rep.exit_code == 1
    assert any(v.startswith("A/seed-1: main run started") and "before the plan was locked" in v for v in rep.violations)


def test_main_run_under_superseded_amendment(study):
    plan = study / "plan.toml"
    h0 = lock_at(plan, T0).entry["content_sha256"]
    _run(study, "A", 0, start=T0 + H, plan_hash=h0)
    plan.write_text(SMALL_PLAN.replace("group_size = 8", "group_size = 16"))
    amend_at(plan, "bigger groups", T0 + 2 * H)
    rep = verify_study(study)
    assert rep.exit_code == 1
    assert any("superseded entry 0" in v and "recipe.group_size" in v for v in rep.violations)


def test_amendment_of_another_configuration_does_not_touch_a_run(study):
    """S2: amendments that add rules for parts of the study before those parts ran."""
    plan = study / "plan.toml"
    h0 = lock_at(plan, T0).entry["content_sha256"]
    _run(study, "A", 0, start=T0 + H, plan_hash=h0)
    plan.write_text(SMALL_PLAN.replace("overrides = { learning_rate = 2e-6 }", "overrides = { learning_rate = 3e-6 }"))
    amend_at(plan, "B's rate fixed after its calibration", T0 + 2 * H)
    h1 = read_chain(plan).last["content_sha256"]
    _run(study, "B", 0, start=T0 + 3 * H, plan_hash=h1)
    assert verify_study(study).exit_code == 0
    _run(study, "B", 1, start=T0 + 1.5 * H, plan_hash=h0)  # B under the old B settings: flagged
    rep = verify_study(study)
    assert rep.exit_code == 1 and any(v.startswith("B/seed-1") for v in rep.violations)


def test_a_comments_only_amendment_after_the_runs_does_not_move_their_entry(study):
    """A run claims the plan entry in force when it started: an amendment that changes comments
    only has the same plan hash, and does not make the run 'start before the entry it claims'."""
    plan = study / "plan.toml"
    h0 = lock_at(plan, T0).entry["content_sha256"]
    _run(study, "A", 0, start=T0 + H, plan_hash=h0)
    plan.write_text("# a comment added after the runs\n" + SMALL_PLAN)
    amend_at(plan, "a comment", T0 + 2 * H)
    assert read_chain(plan).last["content_sha256"] == h0
    rep = verify_study(study)
    assert rep.exit_code == 0, rep.violations
    # the attack it must not let through: a run that started before the lock is still named
    _run(study, "B", 0, start=T0 - H, plan_hash=h0)
    rep = verify_study(study)
    assert rep.exit_code == 1 and any(v.startswith("B/seed-0") and "before the plan was locked" in v for v in rep.violations)


def test_unknown_hash_other_study_and_unreadable_meta(study):
    h = lock_at(study, T0).entry["content_sha256"]
    _run(study, "A", 0, start=T0 + H, plan_hash="sha256:" + "0" * 64)
    _run(study, "B", 0, start=T0 + H, plan_hash=h, study_id="other")
    rep = verify_study(study)
    assert any("which no lock entry has" in v for v in rep.violations)
    assert any("belongs to study 'other'" in v for v in rep.violations)
    bad = run_dir(study, "B", 2)
    bad.mkdir(parents=True)
    (bad / "meta.json").write_text("{not json")
    rep = verify_study(study)
    assert rep.exit_code == 2 and any("not valid JSON" in p for p in rep.problems)


def test_verify_reports_changed_plan_and_comment_only(study):
    plan = study / "plan.toml"
    lock_at(plan, T0)
    plan.write_text(SMALL_PLAN + "# later note\n")
    rep = verify_study(plan)
    assert rep.exit_code == 0 and rep.warnings and "comments or layout only" in rep.warnings[0]
    plan.write_text(SMALL_PLAN.replace('tokens = "1M"', 'tokens = "2M"'))
    rep = verify_study(plan)
    assert rep.exit_code == 1 and any("budget.tokens: '1M' → '2M'" in v for v in rep.violations)


def test_verify_unlocked_is_unusable(study):
    rep = verify_study(study)
    assert rep.exit_code == 2 and "not locked" in rep.problems[0]
