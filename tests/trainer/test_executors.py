"""``prereg run --executor slurm|ray``: the options and their refusals, the sbatch script of the
job array (a fake ``sbatch`` on PATH), and the worker's re-check of the lock when its run starts.
Nothing here trains (tests/trainer/test_executors_run.py trains through submitit and Ray)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from paths import ROOT
from plans import run_plan
from typer.testing import CliRunner

from prereg_kit.chain.lock import amend_plan, lock_plan
from prereg_kit.cli import app
from prereg_kit.errors import PreregError
from prereg_kit.runlog import read_job_record
from trainer.executors.options import RayOptions, SlurmOptions, check_gpu_share, check_local_jobs, executor_options

pytest.importorskip("pydantic")


def tiny_plan(tokens: int = 600, seeds: str = "[0, 1]") -> str:
    """The tests' smallest real study: the tiny model, 2 prompts × 4, greedy evaluation on 6 problems."""
    return run_plan(
        id="tiny", title="Tiny executor test", question="Do the executors run it?", comparator="frozen",
        treatment="grpo", seeds=seeds, configurations="""\
[configurations.grpo]
[configurations.frozen]
overrides = { learning_rate = 0.0 }
""", tokens=tokens, eval_every="B/4", samples=2, greedy=True, n_problems=6,
        smoke_configurations='["grpo"]', train_to="0.5B")


def study(tmp_path: Path, locked: bool = True, **kw) -> Path:
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(tiny_plan(**kw))
    if locked:
        lock_plan(d / "plan.toml")
    return d


def cli(*args):
    return CliRunner().invoke(app, [*map(str, args)])


# --- options ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("gpus", [0.5, 0.25, 1.5])
@pytest.mark.parametrize("stage", ["main", "calibration"])
def test_a_fractional_gpu_is_refused_outside_smoke_and_pilot(gpus, stage):
    with pytest.raises(PreregError) as e:
        executor_options({"name": "ray", "gpus_per_run": gpus}, stage)
    assert f"--gpus-per-run {gpus:g}: {stage}-stage runs never share a GPU" in e.value.lines[0]
    assert len(e.value.lines) == 1


def test_fractions_pass_in_smoke_and_pilot_and_whole_gpus_or_cpu_everywhere():
    assert executor_options({"name": "ray", "gpus_per_run": 0.5}, "smoke").gpus_per_run == 0.5
    assert executor_options({"name": "ray", "gpus_per_run": 0.25}, "pilot").gpus_per_run == 0.25
    for g in (0, 1, 2, 2.0):
        check_gpu_share(g, "main")
    assert executor_options({"name": "slurm", "gpus_per_run": 2.0}, "main").gpus_per_run == 2
    with pytest.raises(PreregError, match="--gpus-per-run: Input should be a valid integer"):
        executor_options({"name": "slurm", "gpus_per_run": 0.5}, "smoke")  # Slurm hands out whole GPUs
    assert executor_options(None, "main") is None and executor_options({"name": "local"}, "main") is None


@pytest.mark.parametrize("options, message", [
    ({"name": "slurm", "gpus_per_run": -1}, "--gpus-per-run: Input should be greater than or equal to 0"),
    ({"name": "slurm", "time_min": 0}, "--time-min: Input should be greater than or equal to 1"),
    ({"name": "slurm", "array_parallelism": 0}, "--array-parallelism"),
    ({"name": "slurm", "backend": "lokal"}, "--backend: Input should be 'slurm' or 'local'"),
    ({"name": "slurm", "sbatch": ["array=0-3"]}, "'array' is set by the executor: use --array-parallelism"),
    ({"name": "slurm", "sbatch": ["--time=10"]}, "'time' is set by the executor: use --time-min"),
    ({"name": "slurm", "sbatch": ["gres=gpu:2"]}, "use --gpus-per-run"),
    ({"name": "slurm", "sbatch": ["bad key=1"]}, "'bad key' is not an sbatch flag name"),
    ({"name": "slurm", "sbatch": ["=x"]}, "'' is not an sbatch flag name"),
    ({"name": "slurm", "sbatch": ["signal=USR1@60"]}, "'signal' is set by the executor"),
    ({"name": "slurm", "adress": "x"}, "--adress: not an option of --executor slurm"),
    ({"name": "ray", "retries": -1}, "--retries: Input should be greater than or equal to 0"),
    ({"name": "ray", "cpus_per_run": 0}, "--cpus-per-run: Input should be greater than 0"),
    ({"name": "ray", "partition": "gpu"}, "--partition: not an option of --executor ray"),
    ({"name": "slurmm"}, "--executor 'slurmm': unknown executor"),
])
def test_bad_options_are_refused_in_one_line(options, message):
    with pytest.raises(PreregError) as e:
        executor_options(options, "main")
    assert len(e.value.lines) == 1 and message in e.value.lines[0], e.value.lines


def test_sbatch_flags_are_parsed():
    o = executor_options({"name": "slurm", "sbatch": ["qos=high", "--mail-type=END", "exclusive", "comment=a=b"]}, "main")
    assert isinstance(o, SlurmOptions)
    assert o.sbatch == {"qos": "high", "mail-type": "END", "exclusive": True, "comment": "a=b"}
    assert isinstance(executor_options({"name": "ray"}, "main"), RayOptions)


def test_local_jobs_beyond_the_devices_are_refused_for_main_and_calibration():
    with pytest.raises(PreregError, match=r"--jobs 3 > 2 CUDA device\(s\): main-stage runs never share a GPU"):
        check_local_jobs(3, 2, "main")
    with pytest.raises(PreregError, match="calibration-stage"):
        check_local_jobs(2, 1, "calibration")
    check_local_jobs(2, 2, "main")
    check_local_jobs(4, 1, "smoke")
    check_local_jobs(4, 0, "main")  # CPU: no device to share
    check_local_jobs(None, 2, "main")


def test_prereg_run_local_refuses_more_jobs_than_gpus_in_the_main_stage(tmp_path, monkeypatch):
    import trainer.launch as launch

    d = study(tmp_path)
    monkeypatch.setattr(launch, "default_jobs", lambda: (2, ["0", "1"]))
    res = cli("run", d, "--jobs", "3")
    assert res.exit_code == 2 and "--jobs 3 > 2 CUDA device(s)" in res.output, res.output
    assert not (d / "runs").exists()


@pytest.mark.parametrize("args, message", [
    (["--executor", "ray", "--partition", "gpu"], "--partition is an option of --executor slurm, not of --executor ray"),
    (["--executor", "ray", "--sbatch", "qos=x"], "--sbatch is an option of --executor slurm, not of --executor ray"),
    (["--executor", "ray", "--wait"], "--wait is an option of --executor slurm"),
    (["--executor", "slurm", "--retries", "2"], "--retries is an option of --executor ray, not of --executor slurm"),
    (["--executor", "slurm", "--ray-address", "auto"], "--ray-address is an option of --executor ray"),
    (["--gpus-per-run", "1"], "--gpus-per-run is an option of --executor slurm or ray, not of --executor local"),
    (["--executor", "slurm", "--jobs", "2"], "--jobs is an option of --executor local"),
    (["--executor", "k8s"], "--executor 'k8s': unknown executor"),
    (["--executor", "ray", "--gpus-per-run", "0.5"], "--gpus-per-run 0.5: main-stage runs never share a GPU"),
])
def test_options_of_another_executor_are_refused(tmp_path, args, message):
    d = study(tmp_path)
    res = cli("run", d, *args)
    assert res.exit_code == 2 and message in res.output, res.output
    assert "Traceback" not in res.output and not (d / "runs").exists()


def test_a_runner_without_an_executor_parameter_is_refused(tmp_path, monkeypatch):
    import prereg_kit.cli.runners as runners

    class Old:
        name = "old"
        calls = []

        def run(self, study_dir, *, stage="main", configs=None, seeds=None, n_jobs=None, console=None):
            self.calls.append(stage)
            return True

    monkeypatch.setattr(runners, "load_runner", lambda name=None, command="run": Old())
    d = study(tmp_path)
    res = cli("run", d, "--executor", "slurm")
    assert res.exit_code == 2 and "the runner 'old' takes no executor" in res.output, res.output
    assert Old.calls == []
    assert cli("run", d).exit_code == 0 and Old.calls == ["main"]  # local: called as before


# --- the sbatch script ------------------------------------------------------------------------------

def fake_sbatch(tmp_path: Path, monkeypatch) -> Path:
    """An ``sbatch`` on PATH that records its arguments and the submission file."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    record = tmp_path / "sbatch-calls"
    record.mkdir()
    script = bindir / "sbatch"
    script.write_text(f"""#!/bin/sh
n=$(ls {record} | wc -l)
echo "$@" > {record}/args-$n
for a in "$@"; do case "$a" in *.sh) cp "$a" {record}/script-$n;; esac; done
echo "Submitted batch job 4242"
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    srun = bindir / "srun"  # submitit checks that srun exists before it submits
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(srun.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return record


def test_slurm_submits_one_job_array_with_every_option(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    import trainer.executors.common as common

    record = fake_sbatch(tmp_path, monkeypatch)
    monkeypatch.setattr(common, "prepare", lambda jobs, log=print: None)  # no assets: nothing trains here
    d = study(tmp_path)
    res = cli("run", d, "--executor", "slurm", "--partition", "gpu-long", "--account", "lab42", "--gpus-per-run", "1",
              "--cpus-per-run", "8", "--mem-gb", "64", "--time-min", "90", "--array-parallelism", "3",
              "--constraint", "h100", "--sbatch", "qos=high", "--sbatch", "mail-type=END")
    assert res.exit_code == 0, res.output
    scripts = sorted(record.glob("script-*"))
    assert len(scripts) == 1  # ONE job array for the study
    text = scripts[0].read_text()
    for line in ("#SBATCH --array=0-3%3", "#SBATCH --partition=gpu-long", "#SBATCH --account=lab42",
                 "#SBATCH --gpus-per-node=1", "#SBATCH --cpus-per-task=8", "#SBATCH --mem=64GB",
                 "#SBATCH --time=90", "#SBATCH --constraint=h100", "#SBATCH --qos=high", "#SBATCH --mail-type=END",
                 "#SBATCH --signal=USR2@120", "#SBATCH --requeue", "#SBATCH --job-name=prereg-tiny-main"):
        assert line in text.splitlines(), (line, text)
    assert str(d.resolve() / ".submitit") in text
    ids = []
    for c in ("grpo", "frozen"):
        for s in (0, 1):
            rec = read_job_record(d / "runs" / c / f"seed-{s}")
            assert rec["executor"] == "slurm" and rec["state"] == "queued"
            ids.append(rec["job_id"])
    assert sorted(ids) == [f"4242_{i}" for i in range(4)]
    assert "job array 4242" in res.output and "prereg status" in res.output


def test_slurm_submits_only_what_is_not_complete_nor_held(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    import trainer.executors.common as common
    from prereg_kit.runlog import RunLock

    record = fake_sbatch(tmp_path, monkeypatch)
    monkeypatch.setattr(common, "prepare", lambda jobs, log=print: None)
    d = study(tmp_path, seeds="[0, 1, 2]")
    held = RunLock(d / "runs" / "grpo" / "seed-2").acquire()  # another writer trains this run
    try:
        res = cli("run", d, "--executor", "slurm", "--configs", "grpo", "--gpus-per-run", "0")
    finally:
        held.release()
    assert res.exit_code == 0, res.output
    assert "1 held by another writer (not submitted)" in res.output and "grpo seed 2: failed (another writer" in res.output
    text = next(record.glob("script-*")).read_text()
    assert "#SBATCH --array=0-1%2" in text and "--gpus-per-node=0" in text


# --- the worker's re-check of the lock --------------------------------------------------------------

def _task(d: Path, seed: int = 0, configuration: str = "grpo"):
    from prereg_kit.plan import load_plan
    from trainer.executors.task import RunTask

    return RunTask(str(d), "main", configuration, seed, load_plan(d).content_sha256, "slurm")


def test_a_worker_refuses_a_plan_edited_without_an_amendment(tmp_path):
    from trainer.executors.task import RunFailed

    d = study(tmp_path)
    task = _task(d)
    plan = d / "plan.toml"
    plan.write_text(plan.read_text().replace("samples = 2", "samples = 3"))
    with pytest.raises(RunFailed) as e:
        task()
    assert "grpo seed 0: refused at start:" in e.value.lines[0] and "`prereg amend`" in e.value.lines[0]
    assert not (d / "runs" / "grpo" / "seed-0" / "meta.json").exists()


def test_a_worker_follows_an_amended_plan_and_says_so(tmp_path, capsys):
    d = study(tmp_path)
    task = _task(d)
    plan = d / "plan.toml"
    plan.write_text(plan.read_text().replace("samples = 2", "samples = 3"))
    amend_plan(plan, "three samples per problem")
    from prereg_kit.plan import load_plan

    new = load_plan(d).content_sha256
    job = task.plan_now()
    assert job.spec.plan_hash == new != task.plan_hash and job.spec.eval_samples == 3
    said = capsys.readouterr().out
    short = lambda h: h.removeprefix("sha256:")[:12]  # noqa: E731
    assert f"the run follows the amended plan ({short(task.plan_hash)}… → {short(new)}…)" in said


def test_a_worker_refuses_a_seed_removed_from_the_plan(tmp_path):
    from trainer.executors.task import RunFailed

    d = study(tmp_path)
    task = _task(d, seed=1)
    plan = d / "plan.toml"
    plan.write_text(plan.read_text().replace("seeds = [0, 1]", "seeds = [0]", 1))
    amend_plan(plan, "one seed")
    with pytest.raises(RunFailed) as e:
        task()
    assert "grpo seed 1: refused at start:" in e.value.lines[0] and "1 is not a seed of stage 'main'" in e.value.lines[0]
    assert _task(d, seed=0).plan_now().seed == 0


def test_a_task_pickles_without_its_process_and_checkpoint_hands_back_a_fresh_task(tmp_path):
    pytest.importorskip("submitit")
    import pickle

    d = study(tmp_path)
    task = _task(d)
    task._job = object()  # stands for a running job: never pickled
    back = pickle.loads(pickle.dumps(task))
    assert back._job is None and back == task
    task._job = None
    delayed = task.checkpoint()
    assert delayed.function == task and delayed.function is not task


def test_the_run_process_dies_with_its_parent(tmp_path):
    """The preexec_fn asks the kernel for SIGTERM when the parent dies (Linux)."""
    import subprocess
    import sys
    import time

    from trainer.executors.task import die_with_parent

    if die_with_parent() is None:
        pytest.skip("PR_SET_PDEATHSIG is Linux only")
    pidfile = tmp_path / "pid"
    code = ("import subprocess, sys, time\n"
            "from trainer.executors.task import die_with_parent\n"
            f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], preexec_fn=die_with_parent())\n"
            f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
            "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(ROOT)))
    deadline = time.time() + 60
    while not (pidfile.exists() and pidfile.read_text()) and time.time() < deadline:
        time.sleep(0.05)
    child = int(pidfile.read_text())
    parent.kill()
    parent.wait()
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, 9)
        pytest.fail("the child outlived its parent")


def test_slurm_calibration_without_wait_is_refused(tmp_path):
    from trainer.executors.dispatch import run_on_executor

    with pytest.raises(PreregError, match="--stage calibration needs --wait"):
        run_on_executor(tmp_path, stage="calibration", configs=None, seeds=None, executor={"name": "slurm"})


@pytest.mark.parametrize("stage, shown", [("main", False), ("smoke", True)])
def test_the_local_progress_shows_no_accuracy_in_the_main_stage(tmp_path, monkeypatch, stage, shown):
    """Main-stage blindness: the study stays blind until it is analyzed."""
    import io

    from rich.console import Console

    import trainer.launch as launch

    d = study(tmp_path, locked=True)
    seen = []

    def fake_run_jobs(jobs, n_jobs=None, on_progress=lambda j: None, on_done=lambda j: None):
        for j in jobs:
            j.progress.update({"iteration": 3, "tokens": 10, "accuracy": 0.625})
            on_progress(j)
            j.result = "complete"
            on_done(j)
            seen.append(j.configuration)
        return jobs

    monkeypatch.setattr(launch, "run_jobs", fake_run_jobs)
    monkeypatch.setattr(launch, "prepare", lambda jobs, log=print: None)
    buf = io.StringIO()
    launch.run_study(d, stage=stage, console=Console(file=buf, width=200))
    assert seen and ("acc 0.625" in buf.getvalue()) is shown, buf.getvalue()


def test_prereg_and_the_local_launcher_never_import_submitit_or_ray():
    import subprocess
    import sys

    code = ("import sys, prereg_kit.cli, prereg_kit.cli.run, trainer.plugin, trainer.launch\n"
            "bad = [m for m in ('submitit', 'ray') if m in sys.modules]\n"
            "assert not bad, bad\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert res.returncode == 0, res.stderr
