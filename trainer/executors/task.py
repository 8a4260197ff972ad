"""One run on one executor worker: :class:`RunTask`, the picklable callable a Slurm array task or a
Ray task runs.

A worker may start long after the study was submitted (a queued array task, a retried Ray task),
so it decides nothing from the submission but the run's name:

1. it rebuilds the run's job from the plan as it is *now* (:func:`trainer.launch.plan_jobs`): a
   main-stage run needs a locked, unchanged plan, and a configuration or seed the plan no longer
   has is refused by name; when an amendment changed the plan's hash since submission, the run
   follows the amended plan and says so (dense-rewards paper §2.3, C.1: the runs follow the
   registered plan, amendments included);
2. it records the attempt in ``executor.json`` (:mod:`prereg_kit.runlog.jobrecord`);
3. it waits, up to ``wait_s``, while another writer still holds the run (a killed attempt's
   process shutting down), naming the holder;
4. it runs ``python -m trainer spec.json`` (:func:`trainer.launch.run_one`) with ``PREREG_EXECUTOR``
   and ``PREREG_JOB_ID`` in its environment; the run process dies with the worker (Linux
   ``PR_SET_PDEATHSIG``), so a lost worker never leaves an orphan writing the run.

A failed or refused run raises :class:`RunFailed`, so the executor reports the job failed (and
Ray does not retry it: only a lost worker is retried). Submitit finds :meth:`RunTask.checkpoint`
by its name (``submitit.core.job_environment``, 1.5): on preemption or before the time limit it
stops the run (SIGTERM: the trainer marks it ``stopped``, its last checkpoint on disk) and hands
back a fresh task, which submitit requeues; that attempt resumes from the checkpoint, and the run
log writer drops rows written after it, so no row is lost or duplicated.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from prereg_kit.errors import PreregError
from prereg_kit.runlog import record_exited, record_started, run_busy
from trainer.launch import plan_jobs, run_one

BUSY_WAIT_S = 300.0  # how long a new attempt waits for an earlier one's process to let go of the run
STOP_WAIT_S = 60.0  # within Slurm's USR2 warning (120 s): the trainer stops at its next iteration
_PR_SET_PDEATHSIG = 1


class RunFailed(PreregError):
    """The run failed or was refused on the worker (the executor marks the job failed)."""


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when its parent dies (Linux), and ignore
    the USR2 a cluster sends the whole job before its time limit (the worker stops the run
    itself); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None

    def preexec() -> None:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)

    return preexec


def _short(plan_hash: str) -> str:
    return plan_hash.removeprefix("sha256:")[:12]


def worker_job_id() -> str | None:
    """The executor's id of this job as the worker sees it (Slurm array task, Ray task), if any."""
    if os.environ.get("SLURM_ARRAY_JOB_ID") and os.environ.get("SLURM_ARRAY_TASK_ID"):
        return f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ['SLURM_ARRAY_TASK_ID']}"
    if os.environ.get("SLURM_JOB_ID"):
        return os.environ["SLURM_JOB_ID"]
    return None


@dataclass
class RunTask:
    """Train one run of a study on an executor worker (see the module docstring)."""

    study_dir: str
    stage: str
    configuration: str
    seed: int
    plan_hash: str  # of the plan the run was submitted under
    executor: str  # "slurm" | "ray"
    wait_s: float = BUSY_WAIT_S
    trackers: tuple[str, ...] = ()  # the live trackers the run logs to (`prereg run --tracker`)
    _job: Any = field(default=None, repr=False, compare=False)
    _ended: bool = field(default=False, repr=False, compare=False)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_job"], state["_ended"] = None, False  # a process handle never travels
        return state

    @property
    def name(self) -> str:
        return f"{self.configuration} seed {self.seed}"

    def plan_now(self):
        """The run's job under the plan as it is now; refusals name the cause."""
        try:
            pf, jobs = plan_jobs(self.study_dir, self.stage, [self.configuration], [self.seed], self.trackers)
        except PreregError as e:
            raise RunFailed(f"{self.name}: refused at start: {' '.join(e.lines)}") from None
        if pf.content_sha256 != self.plan_hash:
            print(f"{self.name}: the plan was amended since submission: the run follows the amended plan "
                  f"({_short(self.plan_hash)}… → {_short(pf.content_sha256)}…)", flush=True)
        return jobs[0]

    def wait_free(self, folder: Path) -> None:
        """Wait while another writer holds the run (an earlier attempt's process shutting down)."""
        t0 = last = time.monotonic()
        holder = run_busy(folder)
        if holder is not None:
            print(f"{self.name}: waiting for the run's writer to let go: {holder}", flush=True)
        while holder is not None:
            if time.monotonic() - t0 > self.wait_s:
                raise RunFailed(f"{self.name}: another writer still holds this run after {self.wait_s:.0f} s: {holder}")
            time.sleep(1.0)
            if time.monotonic() - last >= 30:
                last = time.monotonic()
                print(f"{self.name}: still held by {holder}", flush=True)
            holder = run_busy(folder)

    def __call__(self) -> str:
        job = self.plan_now()
        rec = record_started(job.folder, self.executor, worker_job_id())
        job_id = str(rec.get("job_id", ""))
        try:
            if job.state == "complete":
                result = "skipped (already complete)"
            else:
                self.wait_free(job.folder)
                job = self.plan_now() if job.state == "busy" else job  # its state once the holder let go
                self._job = job
                env = {"PREREG_EXECUTOR": self.executor, "PREREG_JOB_ID": job_id}
                result = run_one(job, None, env=env, preexec_fn=die_with_parent())
        except BaseException as e:  # a requeue's SystemExit too: the record says how it ended
            if not self._ended:
                record_exited(job.folder, getattr(job, "exit_code", None) or -1, f"failed ({type(e).__name__}: {e})")
            raise
        record_exited(job.folder, job.exit_code if job.exit_code is not None else 0, result)
        self._ended = True
        print(f"{self.name}: {result}", flush=True)
        if result.startswith("failed"):
            raise RunFailed(f"{self.name}: {result} (log: {job.folder / 'train.log'})")
        return result

    def checkpoint(self, *args: Any, **kwargs: Any):
        """Submitit's hook on preemption or time-out: stop the run (it marks itself ``stopped``;
        its last checkpoint is on disk) and return a fresh task for submitit to requeue."""
        from submitit.helpers import DelayedSubmission

        job = self._job
        proc = getattr(job, "process", None)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=STOP_WAIT_S)
            except Exception:  # noqa: BLE001  (it will die with this worker; the next attempt waits for it)
                pass
        if job is not None:
            record_exited(job.folder, proc.returncode if proc is not None and proc.returncode is not None else -1,
                          "stopped (preempted or timed out): requeued, resumes from its last checkpoint")
            self._ended = True
        fresh = RunTask(self.study_dir, self.stage, self.configuration, self.seed, self.plan_hash, self.executor, self.wait_s,
                        self.trackers)
        return DelayedSubmission(fresh)


__all__ = ["BUSY_WAIT_S", "RunFailed", "RunTask", "die_with_parent", "worker_job_id"]
