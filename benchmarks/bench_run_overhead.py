"""Benchmark: what a run costs beyond its training stages in a fresh process per run
(``prereg run --fresh-process``) against a later run in a worker (the default: one worker process
per job slot, which trains its runs one after another).

The demo study (examples/demo, its shipped warm start, one torch thread) on its smoke stage (grpo
to 0.25 B: about 3 iterations and 2 evaluations). A run's overhead is its wall time, from handing
the run to its process to hearing its end, minus its training stages (the five timed stages of
every iteration) and the excluded seconds its log records (evaluation, logging, checkpoints):
imports, loading the model, opening the log, sealing.

A worker pays the imports (torch, transformers, the trainer) in its first run only; what it saves
is the overhead of each *later* run, so that is the reference: the worker's first run is a
warm-up, shown on its own line and left out of the ratio. After it, ``--seeds`` rounds each train
one run in a fresh process and one run in the same worker, in turns, so that both modes see the
same load (the same two primitives ``prereg run`` uses: ``trainer.launch.run_one`` and
``RunWorker.run``, one job slot). Prints each run's overhead, the mean per mode and the ratio line
``overhead per run: fresh process 9.5× a worker's later run`` (means, measured in this one run:
the machine may be shared, so compare the ratio, not the seconds).

    python3 benchmarks/bench_run_overhead.py [--seeds 4] [--keep DIR] [--quick]

``--quick`` (make bench): 2 rounds (2 fresh-process runs, 3 runs in the worker: its first and 2 later).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ENV = {"PREREG_EXECUTOR": "local", "PREREG_JOB_ID": "bench_run_overhead"}


def study(where: Path, seeds: int, cache: Path) -> Path:
    """The demo study with ``seeds`` seeds in its smoke stage, its assets in the shared ``cache``."""
    text = (ROOT / "examples" / "demo" / "plan.toml").read_text()
    old = 'name = "smoke"\nseeds = [0]\n'
    assert old in text and "threads = 1 " in text  # one torch thread: the overhead, not thread contention
    where.mkdir(parents=True)
    (where / "plan.toml").write_text(text.replace(old, f'name = "smoke"\nseeds = {list(range(seeds))}\n'))
    (where / ".cache").symlink_to(cache, target_is_directory=True)
    return where


def overhead(folder: Path, wall: float) -> float:
    """A run's wall seconds minus its training stages and the excluded seconds its log records."""
    from prereg_kit.runlog import read_run
    from prereg_kit.runlog.schema import STAGE_SECONDS

    run = read_run(folder, strict=True)
    staged = float(run.iterations[list(STAGE_SECONDS)].to_numpy().sum()) + sum(run.meta.excluded_seconds.values())
    return wall - staged


def timed_run(job, start) -> tuple[float, float]:
    """Train ``job`` (``start(job)`` returns its result); its (wall, overhead) seconds."""
    t0 = time.perf_counter()
    result = start(job)
    wall = time.perf_counter() - t0
    assert result == "complete", f"{job.configuration} seed {job.seed}: {result}"
    return wall, overhead(job.folder, wall)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=4, help="rounds: runs per mode, besides the worker's first")
    ap.add_argument("--keep", type=Path, default=None, help="keep the studies in this folder")
    ap.add_argument("--quick", action="store_true", help="2 rounds (make bench)")
    args = ap.parse_args()
    if args.quick:
        args.seeds = min(args.seeds, 2)
    from trainer.launch import RunWorker, plan_jobs, prepare, run_one

    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    cache = base / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    try:
        _, fresh_jobs = plan_jobs(study(base / "fresh", args.seeds, cache), stage="smoke")
        _, worker_jobs = plan_jobs(study(base / "worker", args.seeds + 1, cache), stage="smoke")
        prepare(fresh_jobs + worker_jobs, log=lambda m: None)  # the shared warm start, once, before any timing
        worker = RunWorker(None)
        try:
            first = timed_run(worker_jobs[0], lambda j: worker.run(j, env=ENV))
            rows: dict[str, list[tuple[str, float, float]]] = {"fresh process per run": [], "worker, later runs": []}
            for fj, wj in zip(fresh_jobs, worker_jobs[1:]):  # in turns: a change of load hits both modes
                rows["fresh process per run"].append((f"seed-{fj.seed}", *timed_run(fj, lambda j: run_one(j, None, env=ENV))))
                rows["worker, later runs"].append((f"seed-{wj.seed}", *timed_run(wj, lambda j: worker.run(j, env=ENV))))
        finally:
            worker.close()
        print(f"worker's first run (pays the imports; left out of the ratio): wall {first[0]:.1f} s, overhead {first[1]:.1f} s")
        means = {}
        for name, got in rows.items():
            means[name] = statistics.mean(o for _, _, o in got)
            print(f"{name}: {len(got)} runs")
            for run, wall, over in got:
                print(f"  {run}: wall {wall:.1f} s, overhead {over:.1f} s")
            print(f"  mean overhead {means[name]:.2f} s per run")
        fresh, later = means.values()
        print(f"overhead per run: fresh process {fresh / later:.1f}× a worker's later run "
              f"({fresh:.1f} s vs {later:.1f} s, {args.seeds} runs each, in turns)")
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
