"""Several runs per worker process (``trainer.run_worker``): each run keeps its own log, stderr,
environment, seeds and result; the run logs equal those of one process per run; a failing run
fails alone; a worker that dies fails its current run and the queue goes on in a fresh worker."""

from __future__ import annotations

import io
import os
import signal
import sys
from pathlib import Path

import pytest
from paths import ROOT

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch
from typer.testing import CliRunner

from prereg_kit.cli import app
from prereg_kit.runlog import read_job_record, read_run
from trainer import run_worker
from trainer.launch import plan_jobs, prepare, run_jobs, run_study

DEMO = ROOT / "examples" / "demo" / "plan.toml"


def _study(tmp_path: Path, name: str = "study", cache: Path | None = None, seeds: str = "[0, 1]") -> Path:
    """The demo study (its shipped warm start: nothing to build) on its smoke stage, grpo to 0.25 B
    (about 3 iterations that update the policy, 2 evaluations), for ``seeds``."""
    d = tmp_path / name
    d.mkdir()
    text = DEMO.read_text()
    assert 'name = "smoke"\nseeds = [0]\n' in text
    (d / "plan.toml").write_text(text.replace('name = "smoke"\nseeds = [0]\n', f'name = "smoke"\nseeds = {seeds}\n'))
    if cache is not None:
        (d / ".cache").symlink_to(cache, target_is_directory=True)  # the task files built once for every study here
    return d


# --- one run inside the worker (no training) ----------------------------------------------------

def _fd_stderr(monkeypatch) -> None:
    """sys.stderr on file descriptor 2 itself, as in a worker process (pytest's capture puts its own
    there at each test phase, so this is called in the test)."""
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True))

def test_a_run_in_the_worker_writes_its_stderr_to_its_log_and_gets_a_fresh_state(tmp_path, monkeypatch):
    """The run's stderr (Python's and a C-level write to fd 2) goes to its own log; its environment
    is its own; torch's seed and threads are as at the worker's start, whatever the run before did."""
    _fd_stderr(monkeypatch)
    rng_before = torch.get_rng_state()
    torch.manual_seed(torch.initial_seed())  # as at a worker's start: earlier tests may have drawn from it
    fresh = run_worker.FreshState.now()
    expected = torch.rand(3)  # the first draws of the default generator at the worker's start
    seen: dict = {}
    monkeypatch.delenv("PREREG_JOB_ID", raising=False)

    def entry(args: list[str]) -> int:
        print(f"python stderr of {args[0]}", file=sys.stderr)
        os.write(2, b"c-level stderr\n")
        seen["env"] = os.environ.get("PREREG_JOB_ID")
        seen["draw"] = torch.rand(3)
        seen["threads"] = torch.get_num_threads()
        torch.set_num_threads(1 if fresh.threads > 1 else 2)  # what a plan's threads do to the process
        torch.manual_seed(12345)
        return 0

    threads_before = torch.get_num_threads()
    try:
        for k in (1, 2):
            log = tmp_path / f"run{k}.log"
            rc = run_worker.train_one({"spec": f"spec{k}", "log": str(log), "env": {"PREREG_JOB_ID": f"pid 1 run {k}/2"}},
                                      fresh, entry)
            assert rc == 0
            assert log.read_text() == f"python stderr of spec{k}\nc-level stderr\n"
            assert seen["env"] == f"pid 1 run {k}/2" and "PREREG_JOB_ID" not in os.environ
            assert torch.equal(seen["draw"], expected) and seen["threads"] == fresh.threads
    finally:
        torch.set_num_threads(threads_before)
        torch.set_rng_state(rng_before)


def test_an_exception_in_a_run_is_that_runs_failure_and_a_stopped_run_retires_the_worker(tmp_path, monkeypatch):
    """Someone's run raises: exit 1 with its traceback in its own log, and the worker goes on;
    a run stopped by SIGTERM (exit 130) ends the worker; a refused run (2) does not."""
    _fd_stderr(monkeypatch)
    fresh = run_worker.FreshState.now()

    def boom(args: list[str]) -> int:
        raise RuntimeError("a bug in this run")

    log = tmp_path / "bad.log"
    assert run_worker.train_one({"spec": "s", "log": str(log)}, fresh, boom) == 1
    text = log.read_text()
    assert "Traceback" in text and text.strip().endswith("RuntimeError: a bug in this run")
    assert run_worker.train_one({"spec": "s", "log": str(tmp_path / "exit.log")}, fresh, lambda a: sys.exit(2)) == 2
    assert not run_worker.retire_after(0) and not run_worker.retire_after(2) and run_worker.retire_after(130)
    assert run_worker.retire_after(1) is torch.cuda.is_initialized()  # a failed run on a GPU: a fresh worker next


# --- the command line ----------------------------------------------------------------------------

def test_fresh_process_reaches_the_runner_and_is_refused_where_it_means_nothing(tmp_path, monkeypatch):
    import prereg_kit.cli.runners as runners

    calls: list[dict] = []

    class New:
        name = "new"

        def run(self, study_dir, *, stage="main", configs=None, seeds=None, n_jobs=None, console=None,
                executor=None, fresh_process=False):
            calls.append({"fresh_process": fresh_process})
            return True

    class Old:
        name = "old"

        def run(self, study_dir, *, stage="main", configs=None, seeds=None, n_jobs=None, console=None, executor=None):
            calls.append({})
            return True

    d = _study(tmp_path)
    cli = CliRunner()
    monkeypatch.setattr(runners, "load_runner", lambda name=None, command="run": New())
    assert cli.invoke(app, ["run", str(d), "--stage", "smoke", "--fresh-process"]).exit_code == 0
    assert cli.invoke(app, ["run", str(d), "--stage", "smoke"]).exit_code == 0
    assert calls == [{"fresh_process": True}, {"fresh_process": False}]
    res = cli.invoke(app, ["run", str(d), "--executor", "slurm", "--fresh-process"])
    assert res.exit_code == 2 and "--fresh-process is an option of --executor local" in res.output, res.output
    monkeypatch.setattr(runners, "load_runner", lambda name=None, command="run": Old())
    res = cli.invoke(app, ["run", str(d), "--stage", "smoke", "--fresh-process"])
    assert res.exit_code == 2 and "the runner 'old' takes no fresh_process" in res.output, res.output
    assert len(calls) == 2


# --- real runs of the tiny model ------------------------------------------------------------------

WALL_CLOCK = ("seconds", "time", "_at", "wall")  # columns of wall-clock time: they differ between any two runs


def _rows(folder: Path) -> tuple[list[dict], list[dict]]:
    run = read_run(folder, strict=True)
    assert run.meta.status == "complete" and not run.problems

    def keep(df):
        cols = [c for c in df.columns if not any(w in c for w in WALL_CLOCK)]
        return df[cols].to_dict("records")

    return keep(run.iterations), keep(run.evals)


@pytest.mark.slow  # trains the tiny model four times
def test_the_worker_writes_the_same_run_logs_as_one_process_per_run(tmp_path):
    """The same two runs (seed 0 then seed 1 in one worker, --jobs 1) give the same iteration and
    evaluation rows, wall-clock columns aside, as two fresh run processes."""
    cache = tmp_path / "cache"
    cache.mkdir()
    fresh, worker = _study(tmp_path, "fresh", cache), _study(tmp_path, "worker", cache)
    for d, mode in ((fresh, True), (worker, False)):
        jobs = run_study(d, stage="smoke", n_jobs=1, fresh_process=mode)
        assert [j.result for j in jobs] == ["complete", "complete"]
    pids = set()
    for seed in (0, 1):
        a = fresh / "stages" / "smoke" / "grpo" / f"seed-{seed}"
        b = worker / "stages" / "smoke" / "grpo" / f"seed-{seed}"
        it_a, ev_a = _rows(a)
        it_b, ev_b = _rows(b)
        assert len(it_a) >= 2 and any(r["grad_norm"] > 0 for r in it_a)  # iterations that update the policy
        assert len({r["eval_index"] for r in ev_a}) >= 2
        assert it_a == it_b, seed
        assert ev_a == ev_b, seed
        rec = read_job_record(b)
        assert rec["executor"] == "local" and rec["exit_code"] == 0 and rec["job_id"].endswith(f"run {seed + 1}/2")
        pids.add(rec["job_id"].split()[1])
        assert read_job_record(a)["job_id"] == f"pid {os.getpid()}"  # the launcher, for a fresh process each
    assert len(pids) == 1  # both runs in one worker


class _BadSpec:
    """A job's spec saved as a folder, not a file: reading it raises an error the trainer does not
    expect (IsADirectoryError), as a bug in a run would."""

    def __init__(self, spec) -> None:
        self._spec = spec

    def __getattr__(self, name):
        return getattr(self._spec, name)

    def save(self, path) -> None:
        Path(path).mkdir()


@pytest.mark.slow  # trains the tiny model twice
def test_a_failing_run_fails_alone_and_a_dead_worker_hands_the_queue_to_a_fresh_one(tmp_path):
    """One worker, three runs: the first raises (the worker goes on), the second's worker is killed
    mid-run (the run fails with the signal; executor.json says so), the third completes in a
    fresh worker."""
    d = _study(tmp_path, seeds="[0, 1, 2]")
    _, jobs = plan_jobs(d, "smoke")
    assert [j.seed for j in jobs] == [0, 1, 2]
    prepare(jobs, log=lambda m: None)
    jobs[0].spec = _BadSpec(jobs[0].spec)

    def kill_on_first_progress(job) -> None:
        if job.seed == 1 and job.progress.get("iteration", 0) >= 1 and job.process.poll() is None:
            os.kill(job.process.pid, signal.SIGKILL)

    run_jobs(jobs, 1, kill_on_first_progress)
    bad, killed, good = jobs
    assert bad.result.startswith("failed (exit 1: ") and "Traceback" in (bad.folder / "train.log").read_text()
    assert killed.result.startswith(f"failed (the worker ended during the run, exit {-signal.SIGKILL}")
    assert good.result == "complete" and read_run(good.folder, strict=True).meta.status == "complete"
    recs = [read_job_record(j.folder) for j in jobs]
    assert [r["exit_code"] for r in recs] == [1, -signal.SIGKILL, 0]
    assert [r["state"] for r in recs] == ["exited"] * 3
    pid = [r["job_id"].split()[1] for r in recs]
    assert pid[0] == pid[1] != pid[2]  # the failed run's worker went on; the killed one was replaced
    assert read_run(killed.folder).meta.status == "running"  # as after a SIGKILLed run process: resumable


# --- the launcher's side, with a stand-in worker ---------------------------------------------------

FAKE_WORKER = """\
import json, os, sys
for line in sys.stdin:
    req = json.loads(line)
    what = open(req["spec"]).read()
    with open(req["log"], "a") as log:
        log.write(f"{what} in {os.getpid()} as {req['env']['PREREG_JOB_ID']}\\n")
    print(json.dumps({"iteration": 1, "tokens": 10}), flush=True)
    if what == "crash":
        os._exit(9)
    print(json.dumps({"worker_done": 0, "retiring": what == "retire"}), flush=True)
    if what == "retire":
        sys.exit(0)
"""


class _Spec:
    stop_tokens, iteration_stop = 10, None

    def __init__(self, what: str) -> None:
        self.what = what

    def save(self, path) -> None:
        Path(path).write_text(self.what)


def test_the_launcher_replaces_a_worker_that_retires_or_dies_and_never_hands_it_another_run(tmp_path, monkeypatch):
    """A worker that says it retires after a run gets no further run (even before it has exited);
    one that dies mid-run fails that run only; the slot's next runs go to fresh workers."""
    from types import SimpleNamespace

    import trainer.launch as launch

    script = tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    monkeypatch.setattr(launch.RunWorker, "command", [sys.executable, str(script)])
    monkeypatch.setattr(launch, "default_jobs", lambda: (1, [None]))
    whats = ["ok", "retire", "ok", "crash", "ok"]
    jobs = [SimpleNamespace(configuration="c", seed=i, folder=tmp_path / f"seed-{i}", spec=_Spec(w), state="new",
                            result="", progress={}, process=None, exit_code=None) for i, w in enumerate(whats)]
    launch.run_jobs(jobs, 1)
    assert [j.result for j in jobs[:3]] == ["complete"] * 3 and jobs[4].result == "complete"
    assert jobs[3].result == "failed (the worker ended during the run, exit 9: crash in " + \
        read_job_record(jobs[3].folder)["job_id"].split()[1] + " as " + read_job_record(jobs[3].folder)["job_id"] + ")"
    logs = [(j.folder / "train.log").read_text().split() for j in jobs]
    pids = [log[2] for log in logs]
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4]
    for k, (j, log) in enumerate(zip(jobs, logs), 1):
        rec = read_job_record(j.folder)
        assert rec["job_id"] == f"pid {pids[k - 1]} run {k}/5" == " ".join(log[4:])
        assert rec["exit_code"] == (9 if j.seed == 3 else 0) and rec["state"] == "exited"


def test_runs_are_queued_seed_major():
    # early seeds of every configuration first: a sequential plan's first look completes first, and
    # each worker's first (cold) run is not always the first configuration's
    from prereg_kit.study.jobs import PlannedRun
    from trainer.launch import seed_major

    runs = [PlannedRun(c, s, "main", None) for c, s in [("A", 0), ("A", 1), ("A", 2), ("B", 5), ("B", 6)]]
    assert [(r.configuration, r.seed) for r in seed_major(runs)] == [("A", 0), ("B", 5), ("A", 1), ("B", 6), ("A", 2)]
    assert seed_major([]) == []
