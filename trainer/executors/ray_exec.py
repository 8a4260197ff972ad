"""``prereg run --executor ray``: one Ray task per run, on a running cluster or a local one.

Each task runs a :class:`~trainer.executors.task.RunTask` with ``num_gpus = gpus_per_run``,
``num_cpus = cpus_per_run`` and ``max_retries = retries``. Ray retries a task only when its worker
is lost (``retry_exceptions = False``: a refused or failed run is not retried); the retried attempt
resumes the run from its last checkpoint, and the run log writer drops rows written after it, so a
lost worker means a resumed run, never a duplicated row. The submitter stays connected until every
task has ended (a Ray driver's tasks end with it), printing each run as it ends.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from prereg_kit.errors import PreregError
from prereg_kit.runlog import record_submitted, write_job_record
from trainer.executors.common import PROGRESS_EVERY_S, planned, report
from trainer.executors.options import RayOptions


def _run_task(task: Any) -> str:
    return task()


def connect(opts: RayOptions, say: Callable[[str], None]) -> bool:
    """Connect to ``opts.address`` or start a local cluster; True when this call started Ray."""
    import ray

    if ray.is_initialized():
        return False
    if opts.address:
        ray.init(address=opts.address, include_dashboard=False, log_to_driver=True)
        say(f"ray: connected to {opts.address}")
    else:
        ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=True)
        say(f"ray: started a local cluster ({os.cpu_count()} CPUs)")
    return True


def run_ray(study_dir: str | Path, stage: str, configs: Sequence[str] | None, seeds: Sequence[int] | None,
            opts: RayOptions, say: Callable[[str], None], trackers: Sequence[str] = ()) -> bool:
    """Run the stage's runs as Ray tasks and wait for them; True when none failed."""
    import ray

    t0 = time.perf_counter()
    jobs, tasks = planned(study_dir, stage, configs, seeds, "ray", say, trackers)
    if not tasks:
        return report(jobs, t0, say)
    started = connect(opts, say)
    try:
        have = ray.cluster_resources()
        for res, need in (("GPU", opts.gpus_per_run), ("CPU", opts.cpus_per_run)):
            if need > have.get(res, 0):  # such a task would wait forever
                raise PreregError(f"--executor ray: a run asks for {need:g} {res}(s) but the cluster has "
                                  f"{have.get(res, 0):g}: use --{'gpus' if res == 'GPU' else 'cpus'}-per-run")
        remote = ray.remote(num_gpus=opts.gpus_per_run, num_cpus=opts.cpus_per_run, max_retries=opts.retries,
                            retry_exceptions=False)(_run_task)
        by_task = {(j.configuration, j.seed): j for j in jobs}
        refs = {}
        for t in tasks:
            folder = by_task[t.configuration, t.seed].folder
            record_submitted(folder, "ray", "(submitting)")
            ref = remote.remote(t)
            write_job_record(folder, job_id=ref.task_id().hex())  # the state is the worker's
            refs[ref] = by_task[t.configuration, t.seed]
        say(f"submitted {len(refs)} Ray task(s); waiting for them")
        pending, last = list(refs), time.monotonic()
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=PROGRESS_EVERY_S)
            for ref in ready:
                job = refs[ref]
                try:
                    job.result = str(ray.get(ref))
                except Exception as e:  # noqa: BLE001  (RayTaskError wraps the worker's RunFailed)
                    job.result = f"failed ({_cause(e)})"
                say(f"  {job.configuration} seed {job.seed}: {job.result}")
            if pending and (not ready or time.monotonic() - last >= PROGRESS_EVERY_S):
                last = time.monotonic()
                say(f"  {len(refs) - len(pending)}/{len(refs)} run(s) ended; "
                    f"{len(pending)} running or queued")
    finally:
        if started:
            ray.shutdown()
    return report(jobs, t0, say)


def _cause(e: BaseException) -> str:
    inner = getattr(e, "cause", None) or e
    lines = [ln for ln in str(inner).strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else type(inner).__name__)[:300]


__all__ = ["connect", "run_ray"]
