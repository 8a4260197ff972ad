"""What every executor does around its own submission: plan the stage's runs from the plan as it
is now, skip the complete ones, leave alone the ones another writer holds, build the shared assets
once on the submitting machine (so workers never race to build them), and report the outcome.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

from prereg_kit.runlog import run_busy
from trainer.core.tracking import where_tracked
from trainer.executors.task import RunTask
from trainer.launch import LOG_FILE, Job, plan_jobs, prepare

PROGRESS_EVERY_S = 30.0  # a waiting submitter prints a line at least this often


def planned(study_dir: str | Path, stage: str, configs: Sequence[str] | None, seeds: Sequence[int] | None,
            executor: str, say: Callable[[str], None], trackers: Sequence[str] = ()) -> tuple[list[Job], list[RunTask]]:
    """The stage's jobs, and one task for each that is neither complete nor held by another writer
    (each task carries the live ``trackers`` to its worker)."""
    pf, jobs = plan_jobs(study_dir, stage, configs, seeds)  # main runs: locked, unchanged plan
    done = [j for j in jobs if j.state == "complete"]
    busy = [j for j in jobs if j.state == "busy"]
    todo = [j for j in jobs if j.state in ("new", "resume")]
    say(f"{pf.path}: stage {stage}, {len(jobs)} run(s): {len(done)} complete (skipped), "
        f"{sum(j.state == 'resume' for j in jobs)} to resume, {sum(j.state == 'new' for j in jobs)} new"
        + (f", {len(busy)} held by another writer (not submitted)" if busy else "")
        + f"; plan {pf.content_sha256[:12]}…; executor {executor}")
    for j in done:
        j.result = "skipped (already complete)"
    for j in busy:
        j.result = f"failed (another writer holds this run: {run_busy(j.folder) or 'released since'})"
        say(f"  {j.configuration} seed {j.seed}: {j.result}")
    if todo:
        prepare(todo, log=say)  # task files, warm start: once, here, before any worker starts
        if trackers:
            say(where_tracked(trackers, pf.path.parent, stage))
    tasks = [RunTask(str(Path(study_dir).resolve()), stage, j.configuration, j.seed, pf.content_sha256, executor,
                     trackers=tuple(trackers)) for j in todo]
    return jobs, tasks


def report(jobs: Sequence[Job], t0: float, say: Callable[[str], None]) -> bool:
    """The local launcher's summary; True when no run failed."""
    failed = [j for j in jobs if j.result.startswith("failed")]
    skipped = [j for j in jobs if j.result.startswith("skipped")]
    say(f"{len(jobs) - len(failed) - len(skipped)} run(s) finished, {len(failed)} failed, {len(skipped)} skipped, "
        f"in {time.perf_counter() - t0:.0f} s")
    for j in failed:
        say(f"  {j.configuration} seed {j.seed}: {j.result} (log: {j.folder / LOG_FILE})")
    return not failed


__all__ = ["PROGRESS_EVERY_S", "planned", "report"]
