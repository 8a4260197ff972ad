"""Attacks on the run side of a study, each of which must fail loudly with a one-line reason.

A sealed synthetic study (2 configurations × 4 seeds, written the way a trainer writes them and
sealed into the lock chain) is edited the way a careless or dishonest author would: run logs
edited, bits flipped, seeds added or dropped, metadata rewritten, runs evaluated on fewer problems,
non-finite values, two writers on one run, a chain dated backwards, a lock dated before its git
commit. ``prereg verify`` and ``prereg analyze`` must refuse each, naming the real cause first.
"""

from __future__ import annotations

import functools
import json
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from plans import clock_at, lock_at, plan_text
from typer.testing import CliRunner

from prereg_kit.analysis.analyze import analyze_study
from prereg_kit.chain.lock import (
    amend_plan,
    append_entries,
    entry_hash,
    lock_plan,
    parse_time,
    read_chain,
    serialize,
    utc_now,
)
from prereg_kit.chain.seal import seal_runs
from prereg_kit.cli import app
from prereg_kit.errors import PreregError, ViolationError
from prereg_kit.plan import load_plan
from prereg_kit.runlog import RunBusyError, RunLock, RunLogError, RunLogWriter, RunMeta, read_run, run_busy, run_dir
from prereg_kit.simulate.synth import generate_study
from prereg_kit.study.verify import verify_study

PLAN = plan_text(id="trust", comparator="ctl", treatment="trt", seeds='"0-3"', tokens=100_000, eval_every="B/4",
                 configurations="[configurations.ctl]\n[configurations.trt]\noverrides = { learning_rate = 2e-6 }\n",
                 evaluation="samples = 4\n", n_problems=16)


def _write_runs(study: Path, *, seeds=range(4), configs=("ctl", "trt"), n_problems: int = 16, rng: int = 1,
                started=None) -> None:
    pf = load_plan(study)
    generate_study(study, study="trust", plan_hash=pf.content_sha256, configurations={c: 0.05 * (c == "trt") for c in configs},
                   seeds=seeds, budget_tokens=100_000, eval_every=25_000, eval_sets={"heldout": n_problems}, samples=4,
                   rng=rng, started_at=started or utc_now(), spacing=timedelta(microseconds=1), fsync=False)


def _study(tmp_path: Path, *, seal: bool = True) -> Path:
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(PLAN)
    lock_plan(d)
    _write_runs(d)
    if seal:
        res = seal_runs(d)
        assert len(res.sealed) == 8 and not res.refused
    return d


def _copy(template: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(template, tmp_path / "study", symlinks=True))


@pytest.fixture(scope="module")
def unsealed_template(tmp_path_factory) -> Path:
    """One locked study with its 8 runs written, not sealed, built once for the module; never
    touched: each test gets a copy (``unsealed``)."""
    return _study(tmp_path_factory.mktemp("unsealed-template"), seal=False)


@pytest.fixture(scope="module")
def sealed_template(unsealed_template, tmp_path_factory) -> Path:
    """The unsealed template's copy with its 8 runs sealed; never touched: each test gets a copy
    (``sealed``), since most tamper with theirs."""
    d = _copy(unsealed_template, tmp_path_factory.mktemp("sealed-template"))
    res = seal_runs(d)
    assert len(res.sealed) == 8 and not res.refused
    return d


@pytest.fixture
def sealed(sealed_template, tmp_path) -> Path:
    """A locked, sealed study of its own (a copy of the module's template, file times kept)."""
    return _copy(sealed_template, tmp_path)


@pytest.fixture
def unsealed(unsealed_template, tmp_path) -> Path:
    """A locked study with 8 complete runs not yet sealed, of its own (a copy of the template)."""
    return _copy(unsealed_template, tmp_path)


def _refusal(study: Path) -> list[str]:
    """The lines with which `prereg analyze` refuses the study (it must refuse)."""
    with pytest.raises(PreregError) as ei:
        analyze_study(study, n_resamples=50, progress=False)
    assert ei.value.exit_code in (1, 2)
    return ei.value.lines


def _rewrite_parquet(path: Path, edit) -> None:
    t = pq.read_table(path)
    df = edit(t.to_pandas())
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(t.schema.metadata), path)


# ------------------------------------------------------------------ sealed runs


def test_a_sealed_study_verifies_and_analyzes(sealed):
    rep = verify_study(sealed)
    assert rep.exit_code == 0, rep.violations
    assert any("8 sealed run(s): every file matches its seal" in line for line in rep.info)
    a = analyze_study(sealed, n_resamples=50, progress=False)
    assert a.contrasts.loc[0, "n"] == 4 and not len(a.exclusions)
    chain = read_chain(sealed)
    s = chain.seals[0]
    assert s["run"] == "runs/ctl/seed-0" and s["plan_entry"] == 0 and s["prev"] == chain.entries[0]["hash"]
    assert set(s["files"]) == {"meta.json", "iterations.parquet", "evals.parquet"}


def test_edited_evals_are_refused_naming_the_file(sealed):
    target = sealed / "runs" / "trt" / "seed-0" / "evals.parquet"
    _rewrite_parquet(target, lambda df: df.assign(correct=np.minimum(df["correct"] + 1, df["samples"])))
    rep = verify_study(sealed)
    assert rep.exit_code == 1
    assert rep.violations[0].startswith("runs/trt/seed-0/evals.parquet: changed (sealed sha256:")
    lines = _refusal(sealed)
    assert "runs/trt/seed-0/evals.parquet: changed" in lines[0]
    res = CliRunner().invoke(app, ["analyze", str(sealed)])
    assert res.exit_code == 1 and "runs/trt/seed-0/evals.parquet: changed" in res.output.splitlines()[0]
    assert "Traceback" not in res.output


def test_rewritten_meta_with_another_plan_hash_and_start_is_refused(sealed):
    meta = sealed / "runs" / "ctl" / "seed-2" / "meta.json"
    doc = json.loads(meta.read_text())
    doc["started_at"] = "2020-01-01T00:00:00Z"
    doc["plan_hash"] = "sha256:" + "0" * 64
    meta.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    lines = _refusal(sealed)
    assert "runs/ctl/seed-2/meta.json: changed" in lines[0]


def test_every_bit_flip_in_a_sealed_parquet_file_is_caught(sealed, monkeypatch):
    # git's answers about the study's folder (outside any repository) cannot change while bits are
    # flipped in its runs: each question is put to git once, not in each of the 120 verifications
    from prereg_kit.chain import gitinfo

    monkeypatch.setattr(gitinfo, "_git", functools.cache(gitinfo._git))
    rng = np.random.default_rng(7)
    files = sorted((sealed / "runs").glob("*/seed-*/*.parquet"))
    pristine = {f: f.read_bytes() for f in files}
    caught = 0
    for _ in range(120):
        f = files[rng.integers(len(files))]
        data = bytearray(pristine[f])
        bit = int(rng.integers(len(data) * 8))
        data[bit // 8] ^= 1 << (bit % 8)
        f.write_bytes(bytes(data))
        rep = verify_study(sealed)
        name = f.relative_to(sealed).as_posix()
        caught += rep.exit_code == 1 and rep.violations[0].startswith(f"{name}: changed")
        f.write_bytes(pristine[f])
    assert caught == 120


def test_added_removed_and_symlinked_files_are_caught(sealed):
    run = sealed / "runs" / "trt" / "seed-1"
    (run / "evals.jsonl").write_text("{}\n")  # a JSON-lines table beside the Parquet file
    assert verify_study(sealed).violations[0].startswith("runs/trt/seed-1/evals.jsonl: added since the run was sealed")
    (run / "evals.jsonl").unlink()
    data = (run / "iterations.parquet").read_bytes()
    (run / "iterations.parquet").unlink()
    assert verify_study(sealed).violations[0].startswith("runs/trt/seed-1/iterations.parquet: removed since")
    (run / "iterations.parquet").write_bytes(data)
    (run / "link").symlink_to(sealed / "plan.toml")
    assert "symbolic link" in verify_study(sealed).violations[0]


def test_working_files_are_not_sealed(sealed):
    run = sealed / "runs" / "trt" / "seed-1"
    (run / "train.log").write_text("launcher output\n")
    (run / "checkpoint").mkdir()
    (run / "checkpoint" / "checkpoint.pt").write_bytes(b"x")
    assert verify_study(sealed).exit_code == 0


def test_the_executor_record_written_after_the_seal_is_not_evidence_but_its_near_misses_are(sealed):
    """A launcher records how the attempt ended after the run sealed itself; that never breaks the seal."""
    from prereg_kit.runlog import record_exited, record_started

    run = sealed / "runs" / "trt" / "seed-1"
    record_started(run, "local", "pid 1")
    record_exited(run, 0, "complete")
    (run / "executor.json.77.1.tmp").write_text("{}")  # an update between its write and its rename
    assert verify_study(sealed).exit_code == 0
    for near in ("executor.jsonx", "executor.json.bak", "executor.json.tmp.x"):
        (run / near).write_text("{}")
        assert verify_study(sealed).violations[0].startswith(f"runs/trt/seed-1/{near}: added since the run was sealed")
        (run / near).unlink()


def test_a_deleted_sealed_run_is_named(sealed):
    for c in ("ctl", "trt"):
        shutil.rmtree(sealed / "runs" / c / "seed-3")
    lines = _refusal(sealed)
    assert ("runs/ctl/seed-3: sealed (entry 4, " + read_chain(sealed).entries[4]["time"] + ") but the run is gone") in lines[0]
    assert any("runs/trt/seed-3" in ln for ln in lines)


def test_resealing_is_a_no_op_and_a_changed_run_is_never_resealed(sealed):
    n = len(read_chain(sealed).entries)
    res = seal_runs(sealed)
    assert not res.sealed and len(res.already) == 8 and len(read_chain(sealed).entries) == n
    _rewrite_parquet(sealed / "runs" / "ctl" / "seed-0" / "evals.parquet", lambda df: df.assign(correct=0))
    res = seal_runs(sealed)
    assert res.refused and res.refused[0].startswith("runs/ctl/seed-0/evals.parquet: changed") and "not re-sealed" in res.refused[0]
    assert len(read_chain(sealed).entries) == n
    res = CliRunner().invoke(app, ["seal", str(sealed)])
    assert res.exit_code == 1 and "not re-sealed" in res.output


def test_a_second_seal_forged_into_the_chain_is_caught(sealed):
    """Someone appends a fresh seal of an edited run through the library (bypassing `prereg seal`)."""
    _rewrite_parquet(sealed / "runs" / "ctl" / "seed-0" / "evals.parquet", lambda df: df.assign(correct=df["samples"]))
    from prereg_kit.chain.seal import _seal_fields

    append_entries(sealed, lambda chain: [_seal_fields(sealed, sealed / "runs" / "ctl" / "seed-0", None)], what="a test")
    v = verify_study(sealed).violations
    assert v[0].startswith("runs/ctl/seed-0: sealed twice with different files (entries 1 and 9)")


def test_an_unsealed_complete_run_is_a_violation_until_sealed(unsealed):
    d = unsealed
    rep = verify_study(d)
    assert rep.exit_code == 1 and "complete but not sealed" in rep.violations[0] and "prereg seal" in rep.violations[0]
    res = CliRunner().invoke(app, ["seal", str(d)])
    assert res.exit_code == 0 and "8 run(s) sealed" in res.output
    assert verify_study(d).exit_code == 0


def test_an_unsealed_run_the_analysis_cannot_read_is_named_with_its_cause(unsealed):
    """verify reads the unsealed complete runs together (as the analysis does): the one whose rows
    contradict each other is named with the reader's own line, the readable ones only as unsealed;
    sealing refuses it with the same line."""
    run = unsealed / "runs" / "trt" / "seed-1"
    _rewrite_parquet(run / "evals.parquet", lambda df: df.assign(tokens=df["tokens"] + 5))
    v = verify_study(unsealed).violations
    (bad,) = [x for x in v if "cannot be sealed" in x]
    assert bad.startswith("runs/trt/seed-1: unreadable run log, so it cannot be sealed: ") and "tokens=" in bad
    (rest,) = [x for x in v if "complete but not sealed" in x]
    assert "runs/trt/seed-1" not in rest and rest.count("seed-") == 7
    res = seal_runs(unsealed)
    assert len(res.sealed) == 7 and res.refused == [f"{run}: not sealed: {bad.split('cannot be sealed: ', 1)[1]}"]


def test_seal_refuses_an_unreadable_or_incomplete_run(unsealed):
    d = unsealed
    (d / "runs" / "trt" / "seed-1" / "evals.parquet").write_bytes(b"PAR1 not really")
    meta = d / "runs" / "ctl" / "seed-1" / "meta.json"
    meta.write_text(meta.read_text().replace('"complete"', '"failed"'))
    res = seal_runs(d)
    assert len(res.sealed) == 6
    assert any("runs/trt/seed-1" in r and "not sealed" in r for r in res.refused)
    assert any("runs/ctl/seed-1" in r and "status is 'failed'" in r for r in res.refused)


def test_many_runs_sealing_at_once_lose_no_entry(unsealed):
    d = unsealed
    folders = sorted(str(p.parent) for p in (d / "runs").glob("*/seed-*/meta.json"))
    ctx = mp.get_context("fork")
    with ctx.Pool(4) as pool:
        pool.starmap(seal_runs, [(str(d), [f]) for f in folders])
    chain = read_chain(d)
    assert sorted(s["run"] for s in chain.seals) == sorted(Path(f).relative_to(d).as_posix() for f in folders)
    assert verify_study(d).exit_code == 0


# ------------------------------------------------------------------ the plan's design


def test_an_extra_seed_is_a_violation_by_name(sealed):
    _write_runs(sealed, seeds=[6], rng=9)  # seed 6 in both arms, as a trainer would write it
    rep = verify_study(sealed)
    assert rep.exit_code == 1
    assert any(v.startswith("runs/ctl/seed-6: seed 6 is not a seed of the plan's main stage (seeds 0-3)")
               for v in rep.violations)
    lines = _refusal(sealed)
    assert any("runs/trt/seed-6" in ln for ln in lines)


def test_unplanned_configuration_stage_and_renamed_runs_are_violations(sealed):
    shutil.copytree(sealed / "runs" / "trt" / "seed-0", sealed / "runs" / "other" / "seed-0")
    os.rename(sealed / "runs" / "ctl" / "seed-3", sealed / "runs" / "ctl" / "seed-9")
    (sealed / "stages" / "pilot").mkdir(parents=True)
    (sealed / "runs" / "notes.txt").write_text("x")
    v = verify_study(sealed).violations
    assert any(x.startswith("runs/other: configuration 'other' is not in the plan's main stage") for x in v)
    assert any(x.startswith("runs/ctl/seed-9: seed 9 is not a seed") for x in v)
    assert any(x.startswith("runs/ctl/seed-3: sealed") and x.endswith("but the run is gone") for x in v)
    assert any(x.startswith("stages/pilot: not a stage of the plan") for x in v)
    assert any(x.startswith("runs/notes.txt: a file") for x in v)


def test_a_run_whose_meta_names_another_seed_is_a_violation(unsealed):
    d = unsealed
    os.rename(d / "runs" / "ctl" / "seed-3", d / "runs" / "ctl" / "seed-3x")
    shutil.copytree(d / "runs" / "ctl" / "seed-2", d / "runs" / "ctl" / "seed-3")  # seed 2's log as seed 3
    shutil.rmtree(d / "runs" / "ctl" / "seed-3x")
    v = verify_study(d).violations
    assert any(x.startswith("runs/ctl/seed-3: meta.json says configuration 'ctl' seed 2") for x in v)


def test_a_missing_planned_run_is_a_violation_unless_the_plan_allows_it(unsealed):
    d = unsealed
    for c in ("ctl", "trt"):
        shutil.rmtree(d / "runs" / c / "seed-3")  # seed 3 was never run (nor sealed)
    seal_runs(d)
    assert verify_study(d).exit_code == 0  # verify runs during a study: runs still to come are no violation
    lines = _refusal(d)
    assert lines[0].startswith("design check failed: runs/ctl/seed-3: a planned run is missing")
    a = analyze_study(d, exploratory=True, n_resamples=50, progress=False)
    ex = a.exclusions
    assert set(zip(ex["configuration"], ex["seed"], ex["what"])) >= {("ctl", 3, "missing"), ("trt", 3, "missing")}
    assert (d / "plan.toml").read_text() == PLAN


def test_the_plan_may_allow_missing_seeds(tmp_path):
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(PLAN + "\n[admission]\nallow_missing_seeds = true\n")
    lock_plan(d)
    _write_runs(d, seeds=range(3))
    seal_runs(d)
    a = analyze_study(d, n_resamples=50, progress=False)
    assert a.contrasts.loc[0, "n"] == 3
    assert {"missing"} <= set(a.exclusions["what"]) and "no run log" in a.exclusions["reason"].iloc[0]


def test_a_run_evaluated_on_fewer_problems_is_a_violation(unsealed, tmp_path):
    d = unsealed
    other = tmp_path / "other"
    (other).mkdir()
    (other / "plan.toml").write_text(PLAN)
    _write_runs(other, seeds=[1], configs=("trt",), n_problems=8)  # 8 of the plan's 16 problems
    shutil.rmtree(d / "runs" / "trt" / "seed-1")
    shutil.copytree(other / "runs" / "trt" / "seed-1", d / "runs" / "trt" / "seed-1")
    seal_runs(d)
    lines = _refusal(d)
    assert lines[0] == "design check failed: runs/trt/seed-1: evaluation 0 of set 'heldout' has 8 problems, the plan names 16"


def test_non_finite_values_are_errors(tmp_path):
    meta = RunMeta(study="trust", configuration="ctl", seed=0, plan_hash="sha256:x", started_at=utc_now())
    w = RunLogWriter(run_dir(tmp_path, "ctl", 0), meta, fsync=False)
    row = {"iteration": 0, "tokens_rollout": 10, "tokens_continuation": 0, "tokens_discarded": 0,
           "seconds_selection": 0.0, "seconds_generation": float("inf"), "seconds_credit": 0.0, "seconds_update": 0.0,
           "seconds_weight_sync": 0.0, "updates": 1}
    with pytest.raises(RunLogError, match=r"line 1: field 'seconds_generation': expected a finite number >= 0, got inf"):
        w.log_iteration(row)
    with pytest.raises(RunLogError, match=r"field 'reward_mean': expected a finite number, got -inf"):
        w.log_iteration({**row, "seconds_generation": 1.0, "reward_mean": float("-inf")})
    with pytest.raises(RunLogError, match=r"field 'my_metric': expected a finite number, got inf"):
        w.log_iteration({**row, "seconds_generation": 1.0, "my_metric": float("inf")})


def test_an_inf_in_a_log_from_another_trainer_is_named_first(unsealed):
    d = unsealed
    _rewrite_parquet(d / "runs" / "trt" / "seed-2" / "evals.parquet",
                     lambda df: df.assign(train_seconds=np.where(df["eval_index"] == 2, np.inf, df["train_seconds"])))
    res = seal_runs(d)
    assert any("runs/trt/seed-2" in r and "train_seconds" in r and "finite" in r for r in res.refused)
    lines = _refusal(d)
    assert "runs/trt/seed-2/evals.parquet" in lines[0] and "train_seconds" in lines[0]


CORRUPTIONS = {
    "truncated parquet": lambda run: (run / "evals.parquet").write_bytes((run / "evals.parquet").read_bytes()[:300]),
    "garbage meta": lambda run: (run / "meta.json").write_text("{not json"),
    "missing evals": lambda run: (run / "evals.parquet").unlink(),
    "bad field": lambda run: _rewrite_parquet(run / "evals.parquet", lambda df: df.assign(correct=df["samples"] + 3)),
    "wrong type": lambda run: _rewrite_parquet(run / "iterations.parquet", lambda df: df.assign(updates="many")),
}


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
def test_the_first_line_of_a_refusal_names_the_corrupt_run(unsealed, how):
    """A log from another trainer, sealed as written, then read: the first line names the run and file."""
    d = unsealed
    run = d / "runs" / "trt" / "seed-0"
    seal_runs(d, [p.parent for p in (d / "runs").glob("*/seed-*/meta.json") if p.parent != run])
    CORRUPTIONS[how](run)
    lines = _refusal(d)
    assert "runs/trt/seed-0" in lines[0], lines
    assert "has a run" not in lines[0] and "has none" not in lines[0]


# ------------------------------------------------------------------ one writer per run


def _hold(folder: str, ready, release) -> None:
    with RunLock(folder):
        ready.set()
        release.wait(30)


def test_a_second_writer_is_refused_and_loses_nothing(tmp_path):
    folder = run_dir(tmp_path, "ctl", 0)
    meta = RunMeta(study="trust", configuration="ctl", seed=0, plan_hash="sha256:x", started_at=utc_now())
    w = RunLogWriter(folder, meta, fsync=False)
    w.log_iteration({"iteration": 0, "tokens_rollout": 10, "tokens_continuation": 0, "tokens_discarded": 0,
                     "seconds_selection": 0.0, "seconds_generation": 1.0, "seconds_credit": 0.0, "seconds_update": 0.0,
                     "seconds_weight_sync": 0.0, "updates": 1})
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    with pytest.raises(RunBusyError, match=rf"{folder}: another writer holds this run \(pid {os.getpid()} on "):
        RunLogWriter(folder, meta, resume=True, at_iteration=0, fsync=False)
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
    assert run_busy(folder) is not None
    w.finish("complete")
    assert run_busy(folder) is None
    assert len(read_run(folder).iterations) == 1


def test_the_lock_is_held_across_processes_and_released_on_exit(tmp_path):
    ctx = mp.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_hold, args=(str(tmp_path / "run"), ready, release))
    p.start()
    try:
        assert ready.wait(60)
        with pytest.raises(RunBusyError, match=rf"pid {p.pid} on "):
            RunLock(tmp_path / "run").acquire()
    finally:
        release.set()
        p.join(30)
    with RunLock(tmp_path / "run") as lock:
        assert lock.stale is None  # released cleanly: no stale note


def test_a_killed_writer_leaves_a_stale_lock_that_is_reported(tmp_path):
    ctx = mp.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_hold, args=(str(tmp_path / "run"), ready, release))
    p.start()
    assert ready.wait(60)
    os.kill(p.pid, signal.SIGKILL)
    p.join(30)
    assert run_busy(tmp_path / "run") is None  # the kernel dropped the lock with the process
    with RunLock(tmp_path / "run") as lock:
        assert lock.stale and f"pid {p.pid}" in lock.stale and "killed or crashed" in lock.stale


# ------------------------------------------------------------------ the chain's times and git anchors


def test_lock_and_amend_take_no_time_from_the_caller(study):
    with pytest.raises(TypeError):
        lock_plan(study, now=utc_now() - timedelta(days=30))  # type: ignore[call-arg]
    lock_plan(study)
    (study / "plan.toml").write_text((study / "plan.toml").read_text() + "# note\n")
    with pytest.raises(TypeError):
        amend_plan(study, "note", now=utc_now())  # type: ignore[call-arg]


def test_an_amendment_is_refused_when_the_clock_reads_before_the_last_entry(study):
    t = lock_at(study, utc_now() + timedelta(days=1)).entry["time"]
    (study / "plan.toml").write_text((study / "plan.toml").read_text() + "# note\n")
    with pytest.raises(PreregError, match=rf"the clock reads .*, before the last entry \({t}\)"):
        amend_plan(study, "note")
    assert len(read_chain(study).entries) == 1


def test_a_chain_rewritten_with_a_back_dated_entry_breaks(study):
    """Times never go back along the chain, even when every hash is recomputed consistently."""
    lock_plan(study)
    (study / "plan.toml").write_text((study / "plan.toml").read_text() + "# note\n")
    amend_plan(study, "note")
    doc = json.loads((study / "plan.lock").read_text())
    doc["entries"][1]["time"] = "2020-01-01T00:00:00Z"
    doc["entries"][1]["hash"] = entry_hash(doc["entries"][1])
    (study / "plan.lock").write_text(serialize(doc))
    with pytest.raises(ViolationError, match="entry 1: dated 2020-01-01T00:00:00Z, before entry 0"):
        read_chain(study)


def _git(repo: Path, *args: str, date: str | None = None) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(repo)}
    if date:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env=env, text=True).stdout.strip()


def test_git_anchors_catch_a_back_dated_lock_and_a_false_clean_claim(tmp_path):
    repo = tmp_path / "repo"
    (repo / "study").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "study" / "plan.toml").write_text(PLAN)
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "plan", date="2026-03-01T12:00:00Z")
    study = repo / "study"
    lock_at(study, parse_time("2026-03-01T13:00:00Z"))  # after the commit: fine
    rep = verify_study(study)
    assert rep.exit_code == 0, rep.violations
    # the same lock, dated before the commit it records: back-dated
    (study / "plan.lock").unlink()
    lock_at(study, parse_time("2026-02-01T00:00:00Z"))
    v = verify_study(study).violations
    assert v and v[0].startswith(f"{study / 'plan.lock'}: entry 0 is dated 2026-02-01T00:00:00Z, before the git commit")
    assert "back-dated" in v[0]
    # an entry that claims the plan was committed and clean, but the commit holds another plan
    (study / "plan.lock").unlink()
    lock_plan(study)
    doc = json.loads((study / "plan.lock").read_text())
    e = doc["entries"][0]
    e["raw_sha256"] = "sha256:" + "1" * 64
    e["hash"] = entry_hash(e)
    (study / "plan.lock").write_text(serialize(doc))
    v = verify_study(study).violations
    assert any("says the plan was committed and clean at" in x and "study/plan.toml there hashes" in x for x in v)
    # a commit the repository does not have: a warning, not a violation
    e["git"]["commit"] = "f" * 40
    e["raw_sha256"] = load_plan(study).raw_sha256
    e["hash"] = entry_hash(e)
    (study / "plan.lock").write_text(serialize(doc))
    rep = verify_study(study)
    assert rep.exit_code == 0 and any("is not in this repository" in w for w in rep.warnings)


def test_seals_follow_the_lock_in_time_and_a_clock_behind_the_chain_seals_nothing(unsealed):
    d = unsealed
    lock_time = parse_time(read_chain(d).entries[0]["time"])
    with clock_at(lock_time - timedelta(seconds=1)):  # a machine whose clock runs behind the chain
        with pytest.raises(PreregError, match="the clock reads .* before the last entry"):
            seal_runs(d)
    assert len(read_chain(d).entries) == 1
    seal_runs(d)
    chain = read_chain(d)
    times = [parse_time(e["time"]) for e in chain.entries]
    assert times == sorted(times) and [e["kind"] for e in chain.entries] == ["lock"] + ["seal"] * 8


# ------------------------------------------------------------------ external timestamps


def test_lock_and_seal_timestamps_verify_offline(tmp_path, tsa):
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(PLAN)
    res = CliRunner().invoke(app, ["lock", str(d), "--timestamp", tsa.url, "--tsa-ca", str(tsa.ca_pem_path)])
    assert res.exit_code == 0, res.output
    assert "timestamp: entry 0 (lock) existed by" in res.output and tsa.subject in res.output
    _write_runs(d)
    seal_runs(d)
    res = CliRunner().invoke(app, ["timestamp", str(d), "--tsa", tsa.url, "--tsa-ca", str(tsa.ca_pem_path)])
    assert res.exit_code == 0 and "entry 8 (seal)" in res.output
    assert len(list((d / "timestamps").glob("*.tsr"))) == 2 and len(list((d / "timestamps").glob("*.pem"))) == 1
    rep = verify_study(d)
    assert rep.exit_code == 0, rep.violations
    assert any("2 timestamp receipt(s)" in line and "the head (entry 8) existed by" in line for line in rep.info)
    assert rep.timestamps.report.proven[0].info.chain_checked


def test_a_chain_rewritten_after_its_timestamp_is_caught(sealed, tsa):
    """The determined author: edit a run, then rewrite the whole chain consistently — every seal,
    every hash — so that the file alone is a valid chain. The receipt on the old head remains."""
    d = sealed
    CliRunner().invoke(app, ["timestamp", str(d), "--tsa", tsa.url])
    assert verify_study(d).exit_code == 0
    _rewrite_parquet(d / "runs" / "trt" / "seed-0" / "evals.parquet", lambda df: df.assign(correct=df["samples"]))
    from prereg_kit.chain.seal import run_files

    doc = json.loads((d / "plan.lock").read_text())
    prev = None
    for e in doc["entries"]:
        if e["kind"] == "seal":
            e["files"] = run_files(d / e["run"])
        e["prev"] = prev
        e["hash"] = entry_hash(e)
        prev = e["hash"]
    (d / "plan.lock").write_text(serialize(doc))
    read_chain(d)  # a valid chain
    v = verify_study(d).violations
    assert v[0].startswith("timestamps/") and "which is no entry of the chain: the chain was rewritten after it was stamped" in v[0]
    lines = _refusal(d)
    assert "the chain was rewritten after it was stamped" in lines[0]


def test_a_receipt_from_another_tsa_is_untrusted_and_a_late_stamp_proves_only_its_time(tmp_path, tsa, tsa_factory):
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(PLAN)
    lock_at(d, utc_now() - timedelta(days=30))  # locked a month ago, stamped only now
    other = tsa_factory("Another TSA")
    res = CliRunner().invoke(app, ["timestamp", str(d), "--tsa", other.url])
    assert res.exit_code == 0, res.output
    rep = verify_study(d)
    assert rep.exit_code == 0
    assert any("was first timestamped" in w and "only the later time is proven" in w for w in rep.warnings)
    rep = verify_study(d, tsa_ca=tsa.ca_pem_path)  # the reader trusts only the first TSA
    assert rep.exit_code == 1 and "untrusted" in rep.violations[0]
    res = CliRunner().invoke(app, ["verify", str(d), "--tsa-ca", str(tsa.ca_pem_path)])
    assert res.exit_code == 1 and "untrusted" in res.output


def test_an_unreachable_tsa_is_one_line_and_locks_anyway(study):
    res = CliRunner().invoke(app, ["lock", str(study), "--timestamp", "http://127.0.0.1:9/tsr"])
    assert res.exit_code == 2 and "127.0.0.1:9" in res.output and "Traceback" not in res.output
    assert read_chain(study).entries[0]["kind"] == "lock" and not (study / "timestamps").exists()


def test_election_probes_are_expected_where_the_election_names_them(sealed):
    from prereg_kit.study.design import unexpected_runs

    plan = load_plan(sealed).plan
    probe = sealed / "stages" / "calibration" / "probe-correct" / "seed-0"
    probe.mkdir(parents=True)
    assert unexpected_runs(sealed, plan) == ["stages/calibration: not a stage of the plan (have: main only)"]
    (sealed / "election.json").write_text(json.dumps({"probes": [{"run_dir": "stages/calibration/probe-correct/seed-0"}]}))
    assert unexpected_runs(sealed, plan) == []
    (probe.parent / "seed-1").mkdir()  # a probe the election does not name
    (sealed / "stages" / "calibration" / "other" / "seed-0").mkdir(parents=True)
    v = unexpected_runs(sealed, plan)
    assert "stages/calibration/probe-correct/seed-1: not a probe run that election.json names" in v
    assert "stages/calibration/other: the plan has no calibration stage, and election.json names no probe run here" in v
