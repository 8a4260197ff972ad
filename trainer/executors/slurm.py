"""``prereg run --executor slurm``: a study's runs as ONE Slurm job array, through submitit.

Each array task runs one :class:`~trainer.executors.task.RunTask`. The options map to submitit's
parameters (the sbatch script then holds ``--array=0-<n-1>%<parallelism>``, partition, account,
GPUs, CPUs, memory, time, constraint, ``--signal=USR2@<delay>``, ``--requeue`` and the extra
``--sbatch`` flags). A job that is preempted, or reaches its time limit, gets USR2 first: submitit
calls :meth:`RunTask.checkpoint`, which stops the run at its last checkpoint, and requeues the
task; the requeued attempt resumes the run. ``backend = "local"`` runs the same tasks through
submitit's LocalExecutor (one process per run on this machine, no cluster): the whole path,
testable anywhere.

The submitter records each run's array task id (``12345_3``) in its ``executor.json``; without
``wait`` it returns once the array is queued (``prereg status STUDY`` follows it).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Sequence

from prereg_kit.plan import load_plan
from prereg_kit.runlog import record_submitted, write_job_record
from trainer.executors.common import PROGRESS_EVERY_S, planned, report
from trainer.executors.options import SlurmOptions

SUBMITIT_DIR = ".submitit"  # in the study folder: submitit's pickles, sbatch scripts and job logs


def executor_parameters(opts: SlurmOptions, job_name: str) -> dict[str, Any]:
    """submitit ``AutoExecutor.update_parameters`` keywords for the options."""
    params: dict[str, Any] = {"name": job_name, "timeout_min": opts.time_min, "nodes": 1, "tasks_per_node": 1,
                              "gpus_per_node": opts.gpus_per_run}
    if opts.cpus_per_run is not None:
        params["cpus_per_task"] = opts.cpus_per_run
    if opts.mem_gb is not None:
        params["mem_gb"] = opts.mem_gb
    if opts.backend == "local":  # submitit's LocalExecutor: USR2 30 s before the time limit
        return params
    params |= {"slurm_array_parallelism": opts.array_parallelism, "slurm_signal_delay_s": opts.signal_delay_s,
               # --requeue: Slurm may requeue a preempted job itself; submitit requeues on USR2
               "slurm_additional_parameters": {"requeue": True} | dict(opts.sbatch)}
    for key in ("partition", "account", "constraint"):
        if getattr(opts, key):
            params[f"slurm_{key}"] = getattr(opts, key)
    return params


def make_executor(study_dir: str | Path, opts: SlurmOptions, job_name: str):
    """A submitit AutoExecutor writing under ``<study>/.submitit/`` (the shared filesystem)."""
    import submitit

    folder = Path(study_dir).resolve() / SUBMITIT_DIR / "%j"
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm" if opts.backend == "slurm" else "local")
    ex.update_parameters(**executor_parameters(opts, job_name))
    return ex


def submit_slurm(study_dir: str | Path, stage: str, configs: Sequence[str] | None, seeds: Sequence[int] | None,
                 opts: SlurmOptions, say: Callable[[str], None], trackers: Sequence[str] = ()) -> bool:
    """Submit the stage's runs as one job array; wait and report when ``opts.wait``."""
    t0 = time.perf_counter()
    ex = make_executor(study_dir, opts, f"prereg-{load_plan(study_dir).plan.study.id}-{stage}")  # options first
    jobs, tasks = planned(study_dir, stage, configs, seeds, "slurm", say, trackers)
    if not tasks:
        return report(jobs, t0, say)
    by_task = {(j.configuration, j.seed): j for j in jobs}
    for t in tasks:  # before submission: a worker that starts at once finds the record
        record_submitted(by_task[t.configuration, t.seed].folder, "slurm", "(submitting)")
    with ex.batch():
        submitted = [ex.submit(t) for t in tasks]
    for t, sj in zip(tasks, submitted):
        write_job_record(by_task[t.configuration, t.seed].folder, job_id=str(sj.job_id))  # the state is the worker's
    array = str(submitted[0].job_id).split("_")[0]
    say(f"submitted {len(tasks)} run(s)" + (f" as job array {array}" if opts.backend == "slurm" else " (submitit local backend)")
        + ": " + ", ".join(f"{t.configuration} seed {t.seed} → {sj.job_id}" for t, sj in zip(tasks, submitted)))
    if not opts.wait:
        say(f"follow it with `prereg status {study_dir}`; `prereg run` again resubmits only what is not complete")
        return True
    wait_jobs([(by_task[t.configuration, t.seed], sj) for t, sj in zip(tasks, submitted)], say)
    return report(jobs, t0, say)


def wait_jobs(pairs: list[tuple[Any, Any]], say: Callable[[str], None], poll_s: float = 2.0) -> None:
    """Wait for submitit jobs, printing each as it ends and a progress line at least every 30 s."""
    pending = list(pairs)
    last = time.monotonic()
    while pending:
        for pair in list(pending):
            job, sj = pair
            if not sj.done():
                continue
            pending.remove(pair)
            exc = sj.exception()
            job.result = str(sj.result()) if exc is None else f"failed ({_last_line(exc)})"
            say(f"  {job.configuration} seed {job.seed} ({sj.job_id}): {job.result}")
        if pending and time.monotonic() - last >= PROGRESS_EVERY_S:
            last = time.monotonic()
            say(f"  {len(pairs) - len(pending)}/{len(pairs)} run(s) ended; waiting on "
                + ", ".join(f"{j.configuration} seed {j.seed} ({sj.state.lower()})" for j, sj in pending[:6])
                + (" …" if len(pending) > 6 else ""))
        if pending:
            time.sleep(poll_s)


def _last_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    for ln in reversed(lines):  # submitit wraps the worker's traceback: keep the worker's own line
        if "RunFailed" in ln or "PreregError" in ln or "ViolationError" in ln:
            return ln.split(": ", 1)[-1][:300]
    return (lines[-1] if lines else type(exc).__name__)[:300]


__all__ = ["SUBMITIT_DIR", "executor_parameters", "make_executor", "submit_slurm", "wait_jobs"]
