"""The tiny study trained through submitit (its local executor) and through a local Ray cluster:
every run complete, run logs equal to ``--executor local`` row for row (seconds aside), and a run
preempted (submitit) or whose worker is killed (Ray) resumed with nothing lost or duplicated."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from paths import ROOT

pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_executors import tiny_plan

from prereg_kit.chain.lock import lock_plan
from prereg_kit.runlog import read_job_record, read_meta, read_run

ENV = dict(os.environ, PYTHONPATH=str(ROOT), RAY_AUTH_MODE="disabled")


@pytest.fixture(scope="module")
def cache(trainer_cache) -> Path:
    return trainer_cache  # conftest: one warm start per worker, shared with the other modules that train


def make_study(root: Path, cache: Path, tokens: int) -> Path:
    root.mkdir(parents=True)
    (root / "plan.toml").write_text(tiny_plan(tokens=tokens))
    (root / ".cache").symlink_to(cache, target_is_directory=True)  # one warm start for every study here
    lock_plan(root / "plan.toml")
    return root


def prereg_run(study: Path, *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prereg_kit", "run", str(study), "--configs", "grpo", *args],
                          env=ENV, capture_output=True, text=True, timeout=timeout)


def start_run(study: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "prereg_kit", "run", str(study), "--configs", "grpo", *args],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def rows(folder: Path):
    run = read_run(folder, strict=True)
    it = run.iterations.drop(columns=[c for c in run.iterations.columns if "seconds" in c])
    ev = run.evals.drop(columns=[c for c in run.evals.columns if "seconds" in c])
    return it, ev, run


def assert_same_rows(ref: Path, other: Path, seeds=(0, 1)) -> None:
    for s in seeds:
        it_ref, ev_ref, _ = rows(ref / "runs" / "grpo" / f"seed-{s}")
        it, ev, run = rows(other / "runs" / "grpo" / f"seed-{s}")
        assert run.meta.status == "complete" and not run.problems
        assert it.equals(it_ref), f"seed {s}: iterations differ"
        assert ev.equals(ev_ref), f"seed {s}: evaluations differ"
        assert len(it) and len(ev)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cache) -> Path:
    """grpo seeds 0 and 1 of the 600-token study, trained by the local launcher."""
    study = make_study(tmp_path_factory.mktemp("local") / "study", cache, 600)
    res = prereg_run(study)
    assert res.returncode == 0, res.stderr
    assert read_job_record(study / "runs" / "grpo" / "seed-0")["job_id"].startswith("pid ")
    return study


@pytest.fixture(scope="module")
def long_reference(tmp_path_factory, cache) -> Path:
    """grpo seed 0 of the 4000-token study (several evaluations, so a mid-run checkpoint), local."""
    study = make_study(tmp_path_factory.mktemp("local-long") / "study", cache, 4000)
    res = prereg_run(study, "--seeds", "0")
    assert res.returncode == 0, res.stderr
    return study


@pytest.mark.slow  # trains the tiny model twice through submitit's LocalExecutor
def test_submitit_local_executor_runs_the_study_with_equal_rows(tmp_path, cache, reference):
    pytest.importorskip("submitit")
    study = make_study(tmp_path / "study", cache, 600)
    res = prereg_run(study, "--executor", "slurm", "--slurm-backend", "local", "--gpus-per-run", "0", "--wait")
    assert res.returncode == 0, res.stderr
    assert "2 run(s) finished, 0 failed" in res.stderr
    assert_same_rows(reference, study)
    rec = read_job_record(study / "runs" / "grpo" / "seed-0")
    assert rec["executor"] == "slurm" and rec["state"] == "exited" and rec["attempts"] == 1 and rec["result"] == "complete"
    again = prereg_run(study, "--executor", "slurm", "--slurm-backend", "local", "--gpus-per-run", "0", "--wait")
    assert again.returncode == 0 and "2 complete (skipped)" in again.stderr  # nothing resubmitted


@pytest.mark.slow  # trains the tiny model twice on a local Ray cluster
def test_ray_local_cluster_runs_the_study_with_equal_rows(tmp_path, cache, reference):
    pytest.importorskip("ray")
    study = make_study(tmp_path / "study", cache, 600)
    res = prereg_run(study, "--executor", "ray", "--gpus-per-run", "0")
    assert res.returncode == 0, res.stderr
    assert "ray: started a local cluster" in res.stderr and "2 run(s) finished, 0 failed" in res.stderr
    assert_same_rows(reference, study)
    rec = read_job_record(study / "runs" / "grpo" / "seed-1")
    assert rec["executor"] == "ray" and rec["attempts"] == 1 and len(rec["job_id"]) > 16


def _wait_rows(folder: Path, n: int, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    rows_file = folder / "iterations.jsonl"
    while time.time() < deadline and proc.poll() is None:
        if (folder / "checkpoint").exists() and rows_file.exists() and rows_file.read_bytes().count(b"\n") >= n:
            return
        time.sleep(0.01)
    out = proc.stdout.read() if proc.poll() is not None and proc.stdout else ""
    pytest.fail(f"the run never reached {n} rows with a checkpoint: {out[-2000:]}")


def _worker_pid(folder: Path) -> int:
    rec = read_job_record(folder)
    assert rec and rec["state"] == "running"
    return int(rec["pid"])


@pytest.mark.slow  # preempts a submitit job after its first checkpoint; the requeued attempt resumes
def test_a_preempted_submitit_job_requeues_and_resumes_with_equal_rows(tmp_path, cache, long_reference):
    pytest.importorskip("submitit")
    study = make_study(tmp_path / "study", cache, 4000)
    folder = study / "runs" / "grpo" / "seed-0"
    proc = start_run(study, "--seeds", "0", "--executor", "slurm", "--slurm-backend", "local", "--gpus-per-run", "0",
                     "--wait")
    _wait_rows(folder, 12, proc)
    os.kill(_worker_pid(folder), signal.SIGUSR2)  # what Slurm sends on preemption (submitit's USR2)
    out, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, out
    assert_same_rows(long_reference, study, seeds=(0,))
    rec = read_job_record(folder)
    assert rec["attempts"] == 2 and rec["result"] == "complete", rec
    resumes = read_meta(folder).model_extra["resumes"]
    assert len(resumes) == 1 and resumes[0]["at_iteration"] > 0
    logs = "".join(p.read_text() for p in (study / ".submitit").rglob("*_log.*"))
    assert "preempted" in logs and "Requeued" in logs


@pytest.mark.slow  # SIGKILLs the Ray worker of a run; Ray retries the task and it resumes
def test_a_lost_ray_worker_means_a_resumed_run_never_a_duplicated_row(tmp_path, cache, long_reference):
    pytest.importorskip("ray")
    study = make_study(tmp_path / "study", cache, 4000)
    folder = study / "runs" / "grpo" / "seed-0"
    proc = start_run(study, "--seeds", "0", "--executor", "ray", "--gpus-per-run", "0", "--retries", "2")
    _wait_rows(folder, 12, proc)
    os.kill(_worker_pid(folder), signal.SIGKILL)  # the worker is lost; its run process dies with it
    out, _ = proc.communicate(timeout=400)
    assert proc.returncode == 0, out
    assert_same_rows(long_reference, study, seeds=(0,))
    rec = read_job_record(folder)
    assert rec["attempts"] == 2 and rec["result"] == "complete", rec
    assert len(read_meta(folder).model_extra["resumes"]) == 1
