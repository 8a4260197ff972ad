"""``prereg status``: every state, the numbers against hand computation, torn lines, --json,
--watch, and blindness during the main stage."""

from __future__ import annotations

import json
import multiprocessing as mp
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from paths import ROOT
from typer.testing import CliRunner

from prereg_kit.cli import app
from prereg_kit.runlog import (
    RunLock,
    RunLogWriter,
    RunMeta,
    record_exited,
    record_started,
    record_submitted,
    run_dir,
    utc_now,
)
from prereg_kit.study.status import BLIND_NOTE, StatusCache, study_status

PLAN = """\
[study]
id = "st"
title = "Status study"
question = "Does B beat A?"
comparator = "A"
seeds = [0, 1, 2, 3]

[[hypotheses]]
id = "H1"
statement = "B beats A"
prediction = "B - A > 0"
contrasts = ["C1"]
readings = { gain = "B helps", deficit = "B hurts", inconclusive = "no claim" }

[recipe]
learning_rate = 1e-6

[configurations.A]
description = "control"

[configurations.B]
overrides = { learning_rate = 2e-6 }

[budget]
tokens = "1M"
eval_every = "B/16"

[evaluation]
sets = [{ name = "test", n_problems = 4 }]

[[contrasts]]
id = "C1"
treatment = "B"
control = "A"
tier = "primary"

[[families]]
name = "primary"
members = ["C1"]

[[stages]]
name = "smoke"
seeds = [5]
configurations = ["A"]
train_to = "0.0625B"

[[stages]]
name = "main"
"""

SECS = {"seconds_selection": 0.1, "seconds_generation": 1.0, "seconds_credit": 0.2, "seconds_update": 0.3,
        "seconds_weight_sync": 0.05}  # 1.65 s an iteration
TOK = {"tokens_rollout": 1000, "tokens_continuation": 200, "tokens_discarded": 50}  # 1250 tokens an iteration


def _it(i: int) -> dict:
    return {"iteration": i, **TOK, **SECS, "updates": i + 1, "reward_mean": 0.5}


def _evals(e: int, it: int, correct: int = 3) -> list[dict]:
    return [{"eval_index": e, "iteration": it, "eval_set": "test", "problem_id": f"p{j}", "tokens": it * 1250,
             "train_seconds": it * 1.65, "updates": it, "samples": 8, "correct": correct} for j in range(4)]


def _meta(c: str, s: int, stage: str = "main", ago: float = 100.0) -> RunMeta:
    return RunMeta(study="st", configuration=c, seed=s, stage=stage, plan_hash="sha256:x",
                   started_at=utc_now() - timedelta(seconds=ago), device="cpu")


def write_run(folder: Path, n_it: int = 10, evals: int = 3, status: str | None = None, meta: RunMeta | None = None,
              correct: int = 3) -> RunLogWriter:
    """A run of ``n_it`` iterations and ``evals`` evaluations (0 at the start, then every 4 iterations)."""
    c, s = folder.parent.name, int(folder.name[5:])
    w = RunLogWriter(folder, meta or _meta(c, s), fsync=False)
    w.log_eval_rows(_evals(0, 0, correct))
    for i in range(n_it):
        w.log_iteration(_it(i))
        e = (i + 1) // 4
        if (i + 1) % 4 == 0 and e < evals:
            w.log_eval_rows(_evals(e, i + 1, correct))
    if status == "complete":
        w.finish("complete")
    elif status is not None:
        w.finish(status, compact=False)
    else:
        w.lock.release()  # the process went away: meta says running, nobody writes
    return w


@pytest.fixture
def study(tmp_path) -> Path:
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(PLAN)
    return d


def _hold(folder: str, ready, release) -> None:
    with RunLock(folder):
        ready.set()
        release.wait(30)


def test_every_state_and_the_numbers(study):
    write_run(run_dir(study, "A", 0), status="complete")
    write_run(run_dir(study, "A", 1))  # held by another process below: running
    write_run(run_dir(study, "A", 2))  # nobody writes it: stopped
    write_run(run_dir(study, "B", 0), status="failed")
    write_run(run_dir(study, "B", 1))
    record_started(run_dir(study, "B", 1), "slurm", "77_1")
    record_exited(run_dir(study, "B", 1), 2, "failed (exit 2: refused)")
    record_submitted(run_dir(study, "B", 2), "slurm", "77_2")  # no log yet: queued
    write_run(run_dir(study, "A", 9), status="complete")  # a folder the plan does not name
    ctx = mp.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_hold, args=(str(run_dir(study, "A", 1)), ready, release))
    p.start()
    try:
        assert ready.wait(60)
        st = study_status(study)
    finally:
        release.set()
        p.join(30)
    by = {(r.configuration, r.seed): r for r in st.runs}
    assert {k: r.state for k, r in by.items()} == {
        ("A", 0): "complete", ("A", 1): "running", ("A", 2): "stopped", ("A", 3): "pending", ("B", 0): "failed",
        ("B", 1): "failed", ("B", 2): "queued", ("B", 3): "pending", ("A", 9): "complete"}
    assert not by[("A", 9)].in_plan and "not in plan" in by[("A", 9)].note and by[("A", 9)].stop is None
    run = by[("A", 1)]
    assert run.holder == f"pid {p.pid} on {__import__('socket').gethostname()}" and run.heartbeat_age_s < 30
    # by hand: 10 iterations x 1250 tokens, 10 x 1.65 s; evaluations 0, 1, 2; B = 1M, k = 1
    assert (run.tokens, run.iteration, run.evaluations) == (12_500, 10, 3)
    assert run.train_s == pytest.approx(16.5)
    assert (run.budget, run.stop, run.fraction, run.b_multiple) == (1e6, 1e6, 0.0125, 0.0125)
    assert 99 < run.wall_s < 130
    assert run.eta_s == pytest.approx((1e6 - 12_500) * run.wall_s / 12_500)
    assert run.device == "cpu"
    assert by[("B", 1)].executor == "slurm" and by[("B", 1)].job_id == "77_1" and by[("B", 1)].attempts == 1
    assert by[("A", 2)].eta_s == pytest.approx((1e6 - 12_500) * 16.5 / 12_500)  # crashed: its wall clock runs on
    assert by[("B", 2)].job_id == "77_2" and by[("B", 2)].tokens == 0 and by[("B", 2)].eta_s is None
    done = by[("A", 0)]  # compacted to Parquet: the same sums
    assert (done.tokens, done.iteration, done.evaluations, done.fraction, done.eta_s) == (12_500, 10, 3, 0.0125, 0.0)
    assert not (run_dir(study, "A", 0) / "iterations.jsonl").exists()
    tot = st.totals()
    assert (tot["runs"], tot["not_in_plan"], tot["complete"], tot["pending"], tot["failed"]) == (8, 1, 2, 2, 2)
    assert tot["done"] == 5 * 12_500 and tot["total"] == 8e6
    assert not st.finished


def test_a_requeued_stopped_run_is_queued_and_exit_130_is_stopped(study):
    f = run_dir(study, "A", 0)
    write_run(f)
    record_started(f, "slurm", "5_0")
    record_exited(f, 130, "stopped")
    assert study_status(study).runs[0].state == "stopped"
    record_submitted(f, "slurm", "6_0")
    assert study_status(study).runs[0].state == "queued"


def test_a_resumed_run_takes_its_rate_from_training_seconds(study):
    f = run_dir(study, "A", 0)
    write_run(f, meta=_meta("A", 0, ago=10_000))  # lay stopped for hours: the wall clock would mislead
    RunLogWriter(f, None, resume=True, fsync=False).lock.release()
    r = study_status(study).runs[0]
    assert r.eta_s == pytest.approx((1e6 - 12_500) * 16.5 / 12_500)


def test_a_torn_last_line_is_left_for_the_next_refresh(study):
    f = run_dir(study, "A", 0)
    write_run(f)
    cache = StatusCache()
    assert study_status(study, cache=cache).runs[0].iteration == 10
    line = json.dumps(_it(10)).encode() + b"\n"
    with open(f / "iterations.jsonl", "ab") as fh:
        fh.write(line[:17])  # being written
    with open(f / "evals.jsonl", "ab") as fh:
        fh.write(b'{"eval_index": 3, "iter')
    r = study_status(study, cache=cache).runs[0]
    assert (r.iteration, r.tokens, r.evaluations, r.note) == (10, 12_500, 3, "")
    assert study_status(study).runs[0].iteration == 10  # a fresh read too
    with open(f / "iterations.jsonl", "ab") as fh:
        fh.write(line[17:])
    r = study_status(study, cache=cache).runs[0]
    assert (r.iteration, r.tokens) == (11, 13_750)
    assert r.train_s == pytest.approx(11 * 1.65)
    assert cache.tallies[str(f / "iterations.jsonl")].offset == (f / "iterations.jsonl").stat().st_size
    (f / "iterations.jsonl").write_bytes(b"".join(json.dumps(_it(i)).encode() + b"\n" for i in range(3)))
    assert study_status(study, cache=cache).runs[0].iteration == 3  # truncated by a resume: read again


def test_an_iteration_budget_counts_iterations(study):
    (study / "plan.toml").write_text(PLAN.replace('tokens = "1M"\neval_every = "B/16"', 'iterations = 40\neval_every = 4'))
    write_run(run_dir(study, "A", 0), n_it=10)
    r = study_status(study).runs[0]
    assert (r.unit, r.done, r.stop, r.fraction, r.tokens) == ("iterations", 10, 40, 0.25, 12_500)
    assert r.eta_s == pytest.approx(30 * 16.5 / 10)  # stopped: its training seconds are the clock


def test_json_has_every_run_and_parses(study):
    write_run(run_dir(study, "A", 0), status="complete")
    res = CliRunner().invoke(app, ["status", str(study), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert len(doc["runs"]) == 8 and doc["blind"] and doc["note"] == BLIND_NOTE
    assert {(r["configuration"], r["seed"]) for r in doc["runs"]} == {(c, s) for c in "AB" for s in range(4)}
    assert doc["totals"]["complete"] == 1 and "\x1b[" not in res.stdout


def test_the_main_stage_is_blind_even_when_evaluations_exist(study):
    write_run(run_dir(study, "A", 0), status="complete", correct=3)  # accuracy 3/8 = 0.375
    write_run(run_dir(study, "B", 0), correct=5)  # 0.625
    for args in (["status", str(study)], ["status", str(study), "--json"]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
        low = res.stdout.lower()
        assert BLIND_NOTE.lower() in low
        low = low.replace(BLIND_NOTE.lower(), "")  # the note names what is hidden; nothing else may
        for word in ("accuracy\"", "accuracy ", "correct", "reward", "contrast\"", "0.375", "0.625", "c1"):
            assert word not in low, word
    assert "accuracy" not in study_status(study).to_frame().columns


def test_a_smoke_stage_shows_the_last_accuracy(study):
    f = run_dir(study, "A", 5, stage="smoke")
    write_run(f, n_it=50, meta=_meta("A", 5, stage="smoke"), correct=2, status="complete")
    st = study_status(study, "smoke")
    assert [r.accuracy for r in st.runs] == [{"test": 0.25}]
    assert st.runs[0].stop == 62_500 and st.runs[0].fraction == 1.0 and st.finished
    res = CliRunner().invoke(app, ["status", str(study), "--stage", "smoke"])
    assert res.exit_code == 0 and "test 0.250" in res.stdout and "blind" not in res.stdout


def test_errors_name_the_path_typed(study, tmp_path):
    for path, msg in ((tmp_path / "nowhere", "no such folder"), (tmp_path, "no plan.toml in this folder")):
        res = CliRunner().invoke(app, ["status", str(path)])
        assert res.exit_code != 0 and str(path) in res.output and msg in res.output
    res = CliRunner().invoke(app, ["status", str(study), "--stage", "pilot"])
    assert res.exit_code != 0 and "no stage 'pilot'" in res.output


FINISH_LATER = """
import sys, time
from pathlib import Path
from prereg_kit.runlog import RunLogWriter
w = RunLogWriter(sys.argv[1], None, resume=True, fsync=False)
print("holding", flush=True)
deadline = time.time() + 60
while not Path(sys.argv[2]).exists() and time.time() < deadline:  # until the watcher saw it running
    time.sleep(0.05)
w.log_iteration({"iteration": 10, "tokens_rollout": 1000, "tokens_continuation": 0, "tokens_discarded": 0,
                 "seconds_step": 1.0, "updates": 11})
w.finish("complete")
"""


def test_watch_ends_by_itself_when_every_run_is_done(tmp_path):
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(PLAN.replace("seeds = [0, 1, 2, 3]", "seeds = [0]"))
    write_run(run_dir(d, "A", 0), status="complete")
    write_run(run_dir(d, "B", 0))
    go = tmp_path / "go"
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen([sys.executable, "-c", FINISH_LATER, str(run_dir(d, "B", 0)), str(go)],
                             stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert child.stdout.readline().strip() == "holding"
        watch = subprocess.Popen([sys.executable, "-m", "prereg_kit", "status", str(d), "--watch", "0.2"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        seen = []
        for line in watch.stdout:
            seen.append(line)
            if "1 running" in line:
                go.touch()  # the run completes while the watch goes on
        assert watch.wait(60) == 0, watch.stderr.read()
        text = "".join(seen)
        assert "1 complete, 1 running" in text and text.count("2 complete") == 1 and text.rstrip().endswith(BLIND_NOTE)
        assert text.count("blind:") >= 2  # refreshed at least once
    finally:
        go.touch()
        child.wait(30)


def test_status_writes_nothing_and_reads_a_long_run_once(study):
    f = run_dir(study, "A", 0)
    w = RunLogWriter(f, _meta("A", 0), fsync=False)
    w.log_iterations([_it(i) for i in range(5000)])
    w.lock.release()
    tree = {p: p.read_bytes() for p in study.rglob("*") if p.is_file()}
    cache = StatusCache()
    r = study_status(study, cache=cache).runs[0]
    assert (r.iteration, r.tokens) == (5000, 5000 * 1250) and r.train_s == pytest.approx(5000 * 1.65)
    assert {p: p.read_bytes() for p in study.rglob("*") if p.is_file()} == tree
    t0 = time.perf_counter()
    for _ in range(20):  # a refresh with nothing appended reads no rows
        study_status(study, cache=cache)
    assert time.perf_counter() - t0 < 5


def test_a_calibration_stage_stops_after_three_iterations(study):
    (study / "plan.toml").write_text(PLAN.replace('[[stages]]\nname = "smoke"', '[[stages]]\nname = "calibration"\nseeds = [7]\n\n[[stages]]\nname = "smoke"'))
    write_run(run_dir(study, "A", 7, stage="calibration"), n_it=2, meta=_meta("A", 7, stage="calibration"))
    rows = study_status(study, "calibration").runs
    assert [(r.configuration, r.unit, r.done, r.stop) for r in rows] == [("A", "iterations", 2, 3), ("B", "iterations", 0, 3)]


def test_a_run_held_by_a_lease_of_another_machine_is_running(study):
    f = run_dir(study, "A", 0)
    write_run(f)
    beat = (utc_now() - timedelta(seconds=5)).isoformat()
    (f / ".writer.json").write_text(json.dumps({"pid": 4242, "host": "node-b", "since": beat, "token": "e" * 32,
                                                "heartbeat": beat}))
    r = study_status(study).runs[0]
    assert (r.state, r.holder) == ("running", "pid 4242 on node-b") and 4 < r.heartbeat_age_s < 30
    beat = (utc_now() - timedelta(seconds=500)).isoformat()  # expired: nobody writes it
    (f / ".writer.json").write_text(json.dumps({"pid": 4242, "host": "node-b", "since": beat, "token": "e" * 32,
                                                "heartbeat": beat}))
    r = study_status(study).runs[0]
    assert (r.state, r.holder) == ("stopped", "")


def test_an_earlier_attempt_never_overwrites_a_later_attempts_record(tmp_path):
    """A worker that lost its run to a requeued one ends without touching the new attempt's record."""
    import os
    import socket

    from prereg_kit.runlog import read_job_record, record_exited, record_started, write_job_record

    folder = tmp_path / "run"
    record_started(folder, "slurm", "7_0")
    write_job_record(folder, host="node-b", pid=4242)  # the requeued attempt started on another node
    record_exited(folder, 1, "failed (lost the run)")
    rec = read_job_record(folder)
    assert rec["state"] == "running" and rec["host"] == "node-b" and rec["result"] == ""
    write_job_record(folder, host=socket.gethostname(), pid=os.getpid())  # this attempt is the last one
    assert record_exited(folder, 0, "complete")["state"] == "exited"


def test_runs_past_their_stop_show_the_tokens_trained_and_a_true_fraction(study):
    """A run's last iteration ends past its stop: the table and totals show the tokens trained
    (12.5k of a 10.0k stop), never the stop in their place, and the fraction of the way stays
    the share of the stops reached (runs over their stop do not make up for pending ones)."""
    (study / "plan.toml").write_text(PLAN.replace('tokens = "1M"', 'tokens = "10K"'))
    for c in "AB":
        write_run(run_dir(study, c, 0), status="complete")  # 10 iterations x 1250 = 12,500 tokens
    st = study_status(study)
    tot = st.totals()
    assert (tot["done"], tot["total"], tot["fraction"]) == (25_000, 80_000, 0.25)
    res = CliRunner().invoke(app, ["status", str(study)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "12.5k / 10.0k" in res.output and "25.0k / 80.0k tokens trained / planned, 25% of the way" in res.output
    for c in "AB":
        for s in (1, 2, 3):
            write_run(run_dir(study, c, s), status="complete")
    res = CliRunner().invoke(app, ["status", str(study)], env={"COLUMNS": "200"})
    assert "100.0k / 80.0k tokens trained / planned, 100% of the way" in res.output, res.output
    assert "80.0k / 80.0k" not in res.output
