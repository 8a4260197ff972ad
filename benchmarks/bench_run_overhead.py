"""Benchmark: what a run costs beyond its training stages, one process per run against one worker
process per job slot (``prereg run --fresh-process`` against the default).

The demo study (examples/demo, its shipped warm start) on its smoke stage (grpo to 0.25 B: about 3
iterations and 2 evaluations) for ``--seeds`` seeds, trained once each way, ``--jobs`` at a time.
A run's overhead is its wall time (``executor.json``: the launcher's start to its end) minus its
training stages (the five timed stages of every iteration) and the excluded seconds its log
records (evaluation, logging, checkpoints): imports, loading the model, opening the log, sealing.
Prints each run's overhead and the mean per mode, and their ratio, measured in one run of this
script (the machine may be shared: compare the ratio, not the seconds).

    python3 benchmarks/bench_run_overhead.py [--seeds 4] [--jobs 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def study(where: Path, seeds: int, cache: Path) -> Path:
    text = (ROOT / "examples" / "demo" / "plan.toml").read_text()
    old = 'name = "smoke"\nseeds = [0]\n'
    assert old in text
    where.mkdir(parents=True)
    (where / "plan.toml").write_text(text.replace(old, f'name = "smoke"\nseeds = {list(range(seeds))}\n'))
    (where / ".cache").symlink_to(cache, target_is_directory=True)
    return where


def overheads(d: Path) -> list[tuple[str, float, float]]:
    """(run, wall seconds, overhead seconds) of every run of the study's smoke stage."""
    from prereg_kit.runlog import read_job_record, read_run
    from prereg_kit.runlog.schema import STAGE_SECONDS

    out = []
    for folder in sorted((d / "stages" / "smoke" / "grpo").glob("seed-*")):
        rec = read_job_record(folder)
        wall = (datetime.fromisoformat(rec["ended_at"]) - datetime.fromisoformat(rec["started_at"])).total_seconds()
        run = read_run(folder, strict=True)
        staged = float(run.iterations[list(STAGE_SECONDS)].to_numpy().sum()) + sum(run.meta.excluded_seconds.values())
        out.append((folder.name, wall, wall - staged))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--keep", type=Path, default=None, help="keep the studies in this folder")
    ap.add_argument("--quick", action="store_true", help="2 seeds (make bench)")
    args = ap.parse_args()
    if args.quick:
        args.seeds = min(args.seeds, 2)
    from rich.console import Console

    from trainer.launch import run_study

    base = args.keep or Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    cache = base / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    means = {}
    try:
        for name, fresh in (("fresh process per run", True), ("worker per job slot", False)):
            d = study(base / ("fresh" if fresh else "worker"), args.seeds, cache)
            t0 = time.perf_counter()
            jobs = run_study(d, stage="smoke", n_jobs=args.jobs, fresh_process=fresh, console=Console(file=io.StringIO()))
            took = time.perf_counter() - t0
            assert all(j.result == "complete" for j in jobs), [j.result for j in jobs]
            rows = overheads(d)
            means[name] = statistics.mean(o for _, _, o in rows)
            print(f"{name}: {len(rows)} runs in {took:.1f} s, --jobs {args.jobs}")
            for run, wall, over in rows:
                print(f"  {run}: wall {wall:.1f} s, overhead {over:.1f} s")
            print(f"  mean overhead {means[name]:.2f} s per run")
        a, b = means.values()
        print(f"overhead per run: fresh process {a / b:.1f}× a worker's later run")
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
