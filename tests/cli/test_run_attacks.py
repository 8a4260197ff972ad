"""What attacks on `prereg run` and the lock chain found, each fixed and held here without training:

* a run the chain seals, deleted or rerun over, is refused before anything trains (one line
  naming the run and its seal entry), never trained to fail at its seal;
* seals appended by 8 processes at once on busy cores are all kept, once each (the chain's lock
  is waited for with retries, and the run files are hashed before it is taken);
* SIGTERM to `prereg run` stops its worker processes, as Ctrl-C does (exit 130), none left behind;
* a full disk is one line naming the file (exit 2), and the chain stays whole.
"""

from __future__ import annotations

import errno
import json
import logging
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from paths import ROOT
from plans import plan_text
from typer.testing import CliRunner

from prereg_kit.chain.lock import GUARD_TIMEOUT_ENV, chain_guard, guard_timeout, lock_plan, read_chain, utc_now
from prereg_kit.chain.seal import seal_runs
from prereg_kit.cli import app
from prereg_kit.errors import LockError, PreregError, ViolationError
from prereg_kit.plan import load_plan
from prereg_kit.runlog import RunMeta, read_meta, write_meta
from prereg_kit.simulate.synth import generate_study
from prereg_kit.study.verify import verify_study

PLAN = plan_text(id="attacks", comparator="ctl", treatment="trt", seeds='"0-3"', tokens=100_000, eval_every="B/4",
                 configurations="[configurations.ctl]\n[configurations.trt]\noverrides = { learning_rate = 2e-6 }\n",
                 evaluation="samples = 2\n", n_problems=4)


def _study(tmp_path: Path, *, seal: bool = True, seeds=range(4)) -> Path:
    """A locked study with its synthetic runs (2 configurations × ``seeds``, tiny logs), sealed."""
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(PLAN)
    lock_plan(d)
    generate_study(d, study="attacks", plan_hash=load_plan(d).content_sha256, configurations={"ctl": 0.0, "trt": 0.05},
                   seeds=seeds, budget_tokens=100_000, eval_every=50_000, eval_sets={"heldout": 4}, samples=2, rng=1,
                   started_at=utc_now(), spacing=timedelta(microseconds=1), fsync=False)
    if seal:
        assert not seal_runs(d).refused
    return d


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


# ------------------------------------------------------------- a sealed run is never trained again

@pytest.fixture
def no_training(monkeypatch):
    """`prereg run` planned as usual, but a run that would start is a test failure."""
    import trainer.launch as launch

    def refuse(*args, **kwargs):
        raise AssertionError("a run was prepared or started")

    monkeypatch.setattr(launch, "prepare", refuse)
    monkeypatch.setattr(launch, "run_jobs", refuse)
    monkeypatch.setattr(launch, "default_jobs", lambda: (1, [None]))  # no torch import to count devices


@pytest.mark.parametrize("how", ["deleted", "rerun"])
def test_a_sealed_run_that_is_gone_or_rerun_is_refused_before_training(tmp_path, no_training, how):
    d = _study(tmp_path, seeds=[0, 1])
    folder = d / "runs" / "trt" / "seed-1"
    entry = next(s for s in read_chain(d).seals if s["run"] == "runs/trt/seed-1")
    if how == "deleted":
        for f in sorted(folder.iterdir()):
            f.unlink()
        folder.rmdir()
    else:  # rerun over: the folder holds a run in progress again
        write_meta(folder, RunMeta(**{**read_meta(folder).model_dump(), "status": "running", "ended_at": None}), fsync=False)
    res = _cli("run", str(d))
    assert res.exit_code == 1, res.output
    lines = res.output.strip().splitlines()
    assert lines[0].startswith(f"error: {folder}: sealed in plan.lock (entry {entry['index']}, {entry['time']}) but ")
    assert ("its folder is gone" if how == "deleted" else "its log now says 'running'") in lines[0]
    assert "restore its sealed files" in lines[0] and "Traceback" not in res.output
    assert lines[-1] == f"error: {d / 'plan.toml'}: nothing run"
    assert (how == "deleted") != folder.exists()  # nothing was written for it


def test_plan_jobs_refuses_only_sealed_runs_that_are_not_complete(tmp_path):
    from trainer.launch import plan_jobs

    d = _study(tmp_path, seeds=[0, 1])
    _, jobs = plan_jobs(d)  # seeds 0-1 complete and sealed (skipped), seeds 2-3 new: nothing refused
    assert [j.state for j in jobs] == ["complete"] * 4 + ["new"] * 4
    (d / "runs" / "ctl" / "seed-0" / "meta.json").unlink()
    with pytest.raises(ViolationError) as e:
        plan_jobs(d)
    assert len(e.value.lines) == 2 and "runs/ctl/seed-0: sealed in plan.lock (entry " in e.value.lines[0]
    assert "its meta.json is gone" in e.value.lines[0]
    _, jobs = plan_jobs(d, configs=["trt"])  # the other runs can still be run
    assert [j.state for j in jobs] == ["complete"] * 2 + ["new"] * 2


def test_an_unsealed_incomplete_run_still_resumes(tmp_path):
    from trainer.launch import plan_jobs

    d = _study(tmp_path, seal=False, seeds=[0])
    folder = d / "runs" / "ctl" / "seed-0"
    write_meta(folder, RunMeta(**{**read_meta(folder).model_dump(), "status": "stopped", "ended_at": None}), fsync=False)
    _, jobs = plan_jobs(d, seeds=[0])
    assert {j.configuration: j.state for j in jobs} == {"ctl": "resume", "trt": "complete"}


# ------------------------------------------------------------- seals appended at once, under load

def _spin(stop) -> None:
    while not stop.is_set():
        pass


def _seal_one(study: str, folder: str, log_file: str, out) -> None:
    logging.basicConfig(filename=log_file, level=logging.WARNING, format="%(message)s", force=True)
    try:
        res = seal_runs(study, [folder])
        out.put((folder, "sealed" if res.sealed else f"refused: {res.refused}"))
    except Exception as e:  # noqa: BLE001  (reported to the test, which names it)
        out.put((folder, f"{type(e).__name__}: {e}"))


def test_eight_processes_sealing_at_once_on_busy_cores_lose_nothing(tmp_path, monkeypatch):
    """8 runs sealed by 8 processes at once while 2 others keep both cores busy; the chain is held
    by the test when they start, so each first try times out and the retry path (with its log
    line) is taken. Every seal is in the chain once, and the chain verifies."""
    d = _study(tmp_path, seal=False)
    folders = sorted(str(p.parent) for p in (d / "runs").glob("*/seed-*/meta.json"))
    assert len(folders) == 8
    monkeypatch.setenv(GUARD_TIMEOUT_ENV, "30")  # bounded, and far above what 8 appends need
    ctx = mp.get_context("fork")
    stop, out = ctx.Event(), ctx.Queue()
    busy = [ctx.Process(target=_spin, args=(stop,)) for _ in range(2)]
    logs = [tmp_path / f"seal-{i}.log" for i in range(8)]
    sealers = [ctx.Process(target=_seal_one, args=(str(d), f, str(log), out)) for f, log in zip(folders, logs)]
    try:
        for p in busy:
            p.start()
        with chain_guard(d):
            for p in sealers:
                p.start()
            time.sleep(0.6)  # longer than a first try (0.25 s): every sealer that got this far retries
        results = dict(out.get(timeout=60) for _ in sealers)
        for p in sealers:
            p.join(30)
    finally:
        stop.set()
        for p in busy + sealers:
            p.join(5)
            if p.is_alive():
                p.kill()
    assert results == {f: "sealed" for f in folders}
    keys = [s["run"] for s in read_chain(d).seals]
    assert sorted(keys) == sorted(Path(f).relative_to(d).as_posix() for f in folders)  # each once
    assert verify_study(d).exit_code == 0
    waited = [log.read_text() for log in logs if log.exists() and log.read_text()]
    assert waited and all("waiting for the lock chain: another process is appending to it" in t for t in waited)


def test_a_chain_held_past_the_bound_gives_up_in_one_line(tmp_path, caplog):
    d = _study(tmp_path, seal=False, seeds=[0])
    before = (d / "plan.lock").read_bytes()
    with chain_guard(d), caplog.at_level(logging.WARNING, logger="prereg_kit.chain.lock"):
        with pytest.raises(LockError, match=r"held the lock chain for over 0.6 s; nothing was written .*"
                                            + GUARD_TIMEOUT_ENV):
            with chain_guard(d, timeout_s=0.6):
                pass
    assert len(caplog.records) >= 1 and "waiting for the lock chain" in caplog.records[0].getMessage()
    assert (d / "plan.lock").read_bytes() == before


def test_the_chain_wait_is_set_by_its_variable(monkeypatch):
    monkeypatch.delenv(GUARD_TIMEOUT_ENV, raising=False)
    assert guard_timeout() == 600.0
    monkeypatch.setenv(GUARD_TIMEOUT_ENV, "2.5")
    assert guard_timeout() == 2.5
    for bad in ("soon", "0", "-1", "inf"):
        monkeypatch.setenv(GUARD_TIMEOUT_ENV, bad)
        with pytest.raises(PreregError, match=f"{GUARD_TIMEOUT_ENV}=.*positive number of seconds"):
            guard_timeout()


# ------------------------------------------------------------- SIGTERM stops the workers

SLEEPY_WORKER = """\
import json, os, signal, sys, time
def stop(signum, frame):
    print("\\n" + json.dumps({"worker_done": 130, "retiring": True}), flush=True)  # a line of its own, as the worker's
    with open(os.environ["STOPPED_DIR"] + f"/{os.getpid()}", "w") as fh:
        fh.write("stopped")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
for line in sys.stdin:
    req = json.loads(line)
    print(json.dumps({"iteration": 0, "tokens": 0}), flush=True)
    with open(os.environ["PIDS_DIR"] + f"/{os.getpid()}", "w") as fh:  # training: the test may stop it now
        fh.write(req["spec"])
    time.sleep(120)
"""

LAUNCHER = """\
import sys
import trainer.launch as launch
launch.RunWorker.command = [sys.executable, sys.argv[1]]
launch.prepare = lambda jobs, log=None: None  # no assets: the stand-in workers train nothing
launch.default_jobs = lambda: (2, [None, None])
from prereg_kit.cli import app
app(["run", sys.argv[2], "--jobs", "2"])
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_to_prereg_run_stops_its_workers_like_ctrl_c(study, tmp_path):
    """`prereg run` with two stand-in workers (each sleeps in its run); SIGTERM to the launcher: each
    worker gets SIGTERM (it says so), none outlives the launcher, and the exit is 130, one line."""
    lock_plan(study)
    (tmp_path / "pids").mkdir()
    (tmp_path / "stopped").mkdir()
    (tmp_path / "worker.py").write_text(SLEEPY_WORKER)
    env = dict(os.environ, PYTHONPATH=str(ROOT), PIDS_DIR=str(tmp_path / "pids"), STOPPED_DIR=str(tmp_path / "stopped"))
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path / "worker.py"), str(study)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(list((tmp_path / "pids").iterdir())) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = [int(p.name) for p in (tmp_path / "pids").iterdir()]
        assert len(pids) == 2, proc.communicate(timeout=5)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)  # not communicate(): a worker left alive would hold the pipe open
        stderr = proc.stderr.read()
        assert proc.returncode == 130, stderr
        assert "Traceback" not in stderr
        assert stderr.strip().splitlines()[-1] == "error: interrupted: running runs were stopped; `prereg run` again resumes them"
        assert sorted(int(p.name) for p in (tmp_path / "stopped").iterdir()) == sorted(pids)  # stopped, not orphaned
        for _ in range(100):
            if not any(_alive(p) for p in pids):
                break
            time.sleep(0.05)
        assert not [p for p in pids if _alive(p)]
        runs = [json.loads((f / "executor.json").read_text()) for f in (study / "runs").glob("*/seed-*")
                if (f / "executor.json").exists()]
        assert len(runs) == 2 and all(r["state"] == "exited" and r["exit_code"] == 130 for r in runs)
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in pids + [int(p.name) for p in (tmp_path / "pids").iterdir()]:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


# ------------------------------------------------------------- a full disk: one line, naming the file

def _fail_writes_to(monkeypatch, call: str, suffix: str) -> list[str]:
    """``os.<call>`` raises ENOSPC for a file whose path ends with ``suffix``; returns the paths hit."""
    real = getattr(os, call)
    hit: list[str] = []

    def full(fd, *args):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        if path.endswith(suffix):
            hit.append(path)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, *args)

    monkeypatch.setattr(os, call, full)
    return hit


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to name a file descriptor's path")
@pytest.mark.parametrize("call", ["write", "fsync"])
def test_a_full_disk_at_the_chain_append_is_one_line_and_the_chain_stays_whole(tmp_path, monkeypatch, call):
    d = _study(tmp_path, seal=False, seeds=[0])
    before = (d / "plan.lock").read_bytes()
    with monkeypatch.context() as m:
        hit = _fail_writes_to(m, call, "plan.lock.tmp")
        res = _cli("seal", str(d))
    assert hit and res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == [
        f"error: disk full writing {d / 'plan.lock'}: No space left on device [errno {errno.ENOSPC}]; free some space "
        "and run the command again (nothing was appended: plan.lock is as it was)"]
    assert (d / "plan.lock").read_bytes() == before and not list(d.glob("*.tmp"))
    read_chain(d)  # still a valid chain
    assert _cli("seal", str(d)).exit_code == 0  # space again: the same command seals
    assert verify_study(d).exit_code == 0


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc to name a file descriptor's path")
def test_a_full_disk_at_a_run_log_append_is_one_line(tmp_path, monkeypatch):
    """A trainer's append (JSON lines, as the built-in trainer logs every iteration)."""
    from prereg_kit.errors import DiskFullError
    from prereg_kit.runlog import RunLogWriter, RunMeta, run_dir

    folder = run_dir(tmp_path, "grpo", 0)
    meta = RunMeta(study="s", configuration="grpo", seed=0, plan_hash="a" * 64, started_at=datetime(2026, 1, 1, tzinfo=timezone.utc))
    w = RunLogWriter(folder, meta, fsync=False)
    row = {"iteration": 0, "tokens_rollout": 100, "tokens_continuation": 0, "tokens_discarded": 0,
           "seconds_selection": 0.0, "seconds_generation": 1.0, "seconds_credit": 0.5, "seconds_update": 0.25,
           "seconds_weight_sync": 0.25, "updates": 1}
    with monkeypatch.context() as m:
        hit = _fail_writes_to(m, "write", "iterations.jsonl")
        with pytest.raises(DiskFullError) as e:
            w.log_iteration(row)
    assert hit and str(e.value).splitlines() == [str(e.value)]
    assert str(e.value).startswith(f"disk full writing {hit[0]}: No space left on device [errno {errno.ENOSPC}]")
    assert str(e.value).endswith("(none of the rows were logged)")
    assert Path(hit[0]).read_bytes() == b""  # nothing of the rows stayed behind
    w.log_iteration(row)  # the space is back: the same row is logged, once
    w.finish("complete")


def test_a_full_disk_at_a_run_logged_in_one_go_is_one_line(study, monkeypatch):
    """The dry run's synthetic runs go straight to Parquet: a full disk there is one line too."""
    import pyarrow.parquet as pq

    real, hit = pq.write_table, []

    def full(table, where, *args, **kwargs):
        if str(where).endswith("iterations.parquet.tmp"):
            hit.append(str(where))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(table, where, *args, **kwargs)

    monkeypatch.setattr(pq, "write_table", full)
    res = _cli("dry-run", str(study))
    assert hit and res.exit_code == 2, res.output
    lines = [ln for ln in res.output.strip().splitlines() if not ln.startswith("dry run: writing")]
    assert len(lines) == 1 and "Traceback" not in res.output
    target = hit[0].removesuffix(".tmp")
    assert lines[0].startswith(f"error: disk full writing {target}: No space left on device [errno {errno.ENOSPC}]")
    assert lines[0].endswith("(the run was not written)")
    assert not Path(hit[0]).exists()


def test_a_full_disk_the_writers_did_not_name_is_still_one_line(study, monkeypatch):
    """A write outside the named places: the file where the system names it, else said so."""
    import prereg_kit.chain.lock as lock

    def full(*args, **kwargs):
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), str(study / "plan.lock"))

    monkeypatch.setattr(lock, "_plan_fields", full)
    res = _cli("lock", str(study))
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [
        f"error: disk full writing {study / 'plan.lock'}: {os.strerror(errno.EDQUOT)} [errno {errno.EDQUOT}]; "
        "free some space and run the command again"]


@pytest.mark.slow  # trains the tiny model until the SIGTERM
def test_sigterm_stops_a_real_training_run_resumably(tmp_path):
    """The demo's smoke run trained by `prereg run` in a worker; SIGTERM to the launcher once the run
    has logged an iteration: exit 130, the worker gone, the run 'stopped' and planned to resume."""
    from prereg_kit.runlog import read_job_record
    from trainer.launch import plan_jobs

    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text((ROOT / "examples" / "demo" / "plan.toml").read_text())
    run = d / "stages" / "smoke" / "grpo" / "seed-0"
    proc = subprocess.Popen([sys.executable, "-m", "prereg_kit", "run", str(d), "--stage", "smoke", "--configs", "grpo"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    pid = None
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            rows = run / "iterations.jsonl"
            if rows.exists() and rows.stat().st_size and (run / "executor.json").exists():
                break
            time.sleep(0.2)
        pid = int(read_job_record(run)["job_id"].split()[1])
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        stderr = proc.stderr.read()
        assert proc.returncode == 130, stderr
        for _ in range(100):
            if not _alive(pid):
                break
            time.sleep(0.05)
        assert not _alive(pid)
        assert read_meta(run).status == "stopped"
        assert [j.state for j in plan_jobs(d, "smoke", ["grpo"])[1]] == ["resume"]
    finally:
        if proc.poll() is None:
            proc.kill()
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)
