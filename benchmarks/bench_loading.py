"""Benchmark: loading run logs and `prereg analyze` as the number of runs grows.

On a generated study of the paper's form (bench_analyze.py's plan: 4 configurations, 17
evaluations of 200 problems, 1,543 further problems at the start and at B), prints

- ``load_study`` against reading the same Parquet files with pandas (``read_parquet`` per file,
  concatenated) and against one ``pyarrow.dataset`` per table (``to_table().to_pandas()``: the
  floor, no validation, no derived columns);
- ``prereg analyze`` as a whole process (imports, verification, loading, readings, statistics,
  report) with this checkout and, with ``--old DIR``, with another checkout (e.g. the main one),
  wall time and peak memory (max RSS) of each;
- with ``--series``, the whole-process time at several study sizes with few problems per
  evaluation (``--series-problems``) and the growth exponent: the slope of log time on log runs.

    python3 benchmarks/bench_loading.py [--seeds 24] [--old /work/main] [--series 24,60,120,240]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analyze import PLAN  # noqa: E402  (the paper-scale plan, one definition)

_CHILD = """
import resource, subprocess, sys, time
t = time.perf_counter()
r = subprocess.run([sys.executable, "-m", "prereg_kit", "analyze", sys.argv[1], "--resamples", sys.argv[2],
                    "--out", sys.argv[3]], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
wall = time.perf_counter() - t
if r.returncode:
    sys.exit(r.stderr[-2000:])
print(wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
"""


def make_study(root: Path, seeds: int, n_main: int, n_further: int, resamples: int) -> None:
    from prereg_kit.lock import lock_plan, utc_now
    from prereg_kit.plan import load_plan
    from prereg_kit.seal import seal_runs
    from prereg_kit.synth import generate_study

    root.mkdir(parents=True, exist_ok=True)
    plan = PLAN.replace("n_problems = 200", f"n_problems = {n_main}").replace("n_problems = 1543", f"n_problems = {n_further}")
    (root / "plan.toml").write_text(plan.format(last=seeds - 1, resamples=resamples))
    lock_plan(root / "plan.toml")
    pf = load_plan(root / "plan.toml")
    B = pf.plan.budget.tokens
    generate_study(root, study="bench", plan_hash=pf.content_sha256,
                   configurations={"outcome": 0.0, "mc_k4": -0.14, "mc_k1": -0.07, "filter": 0.01},
                   seeds=range(seeds), budget_tokens=B, eval_every=B // 16,
                   eval_sets={"math200": n_main}, budget_sets={"further": n_further},
                   updates_per_token={"outcome": 600 / B, "mc_k4": 50 / B, "mc_k1": 160 / B, "filter": 600 / B},
                   time_per_token={"outcome": 1.3e-4, "mc_k4": 0.4e-4, "mc_k1": 0.6e-4, "filter": 1.5e-4},
                   continuation_share={"outcome": 0.0, "mc_k4": 0.91, "mc_k1": 0.70, "filter": 0.0}, rng=0,
                   started_at=utc_now())
    seal_runs(root)


def loading_times(root: Path) -> dict[str, float]:
    """Seconds: load_study, pandas read_parquet per file (concatenated), one pyarrow.dataset per table."""
    import pandas as pd
    import pyarrow.dataset as ds

    from prereg_kit.runlog import load_study

    def pandas_per_file():
        for kind in ("iterations", "evals"):
            pd.concat([pd.read_parquet(f) for f in sorted(glob.glob(f"{root}/runs/*/seed-*/{kind}.parquet"))], ignore_index=True)

    def dataset_per_table():
        for kind in ("iterations", "evals"):
            ds.dataset(sorted(glob.glob(f"{root}/runs/*/seed-*/{kind}.parquet")), format="parquet").to_table().to_pandas()

    ways = {"load_study": lambda: load_study(root, progress=False), "pandas": pandas_per_file, "dataset": dataset_per_table}
    out = {k: float("inf") for k in ways}
    for _ in range(2):  # best of two, interleaved: the machine is shared
        for k, f in ways.items():
            t = time.perf_counter()
            f()
            out[k] = min(out[k], time.perf_counter() - t)
    return out


def analyze_process(root: Path, pythonpath: str, resamples: int) -> tuple[float, float]:
    """Wall seconds and peak MiB of one `python -m prereg_kit analyze` process."""
    out = Path(tempfile.mkdtemp(prefix="prereg-bench-report-"))
    env = {**os.environ, "PYTHONPATH": pythonpath}
    r = subprocess.run([sys.executable, "-c", _CHILD, str(root), str(resamples), str(out)], env=env,
                       capture_output=True, text=True, check=True)
    shutil.rmtree(out, ignore_errors=True)
    wall, rss = map(float, r.stdout.split())
    return wall, rss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=24, help="seeds per configuration of the paper-form study (0: skip it)")
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--old", default=None, help="checkout to compare with (its PYTHONPATH), e.g. /work/main")
    ap.add_argument("--study", type=Path, default=None, help="use (or write and keep) the paper-form study here")
    ap.add_argument("--series", default="", help="seeds per configuration for the growth series, e.g. 24,60,120,240")
    ap.add_argument("--series-problems", type=int, default=10, help="problems per evaluation in the series")
    ap.add_argument("--series-old", action="store_true", help="time the old checkout on the series too")
    args = ap.parse_args()
    here = str(Path(__file__).resolve().parents[1])
    tmp = Path(tempfile.mkdtemp(prefix="prereg-bench-loading-"))

    if args.seeds:
        root = args.study or tmp / "paper"
        if not (root / "runs").exists():
            t = time.perf_counter()
            make_study(root, args.seeds, 200, 1543, args.resamples)
            print(f"generated {4 * args.seeds} runs in {time.perf_counter() - t:.1f} s (not part of analyze)")
        lt = loading_times(root)
        print(f"{4 * args.seeds} runs: load_study {lt['load_study']:.2f} s, pandas read_parquet per file {lt['pandas']:.2f} s, "
              f"pyarrow.dataset per table {lt['dataset']:.2f} s")
        print(f"load_study  {lt['load_study'] / lt['dataset']:.1f}× pyarrow.dataset floor")
        print(f"load_study  {lt['load_study'] / lt['pandas']:.1f}× pandas read_parquet per file")
        new = analyze_process(root, here, args.resamples)
        print(f"analyze (whole process, this checkout): {new[0]:.2f} s, peak {new[1]:.0f} MiB")
        if args.old:
            old = analyze_process(root, args.old, args.resamples)
            print(f"analyze (whole process, {args.old}): {old[0]:.2f} s, peak {old[1]:.0f} MiB")
            print(f"analyze     {old[0] / new[0]:.1f}× faster than {args.old}; peak memory {new[1] / old[1]:.2f}× of it")

    if args.series:
        sizes, times, olds = [], [], []
        for s in [int(x) for x in args.series.split(",")]:
            root = tmp / f"series-{s}"
            make_study(root, s, args.series_problems, args.series_problems, min(args.resamples, 2000))
            wall, rss = analyze_process(root, here, min(args.resamples, 2000))
            line = f"series: {4 * s:5d} runs  analyze {wall:7.2f} s  peak {rss:6.0f} MiB"
            if args.series_old and args.old:
                ow, orss = analyze_process(root, args.old, min(args.resamples, 2000))
                olds.append(ow)
                line += f"   old {ow:7.2f} s  peak {orss:6.0f} MiB  ({ow / wall:.1f}×)"
            print(line, flush=True)
            sizes.append(4 * s)
            times.append(wall)
            shutil.rmtree(root, ignore_errors=True)
        if len(sizes) > 1:
            k = np.polyfit(np.log(sizes), np.log(times), 1)[0]
            print(f"growth exponent {k:.2f} (log time on log runs, {sizes[0]}–{sizes[-1]} runs, "
                  f"{args.series_problems} problems per evaluation)")
            if len(olds) == len(sizes):
                print(f"growth exponent {np.polyfit(np.log(sizes), np.log(olds), 1)[0]:.2f} for {args.old}")
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({"done": True}))


if __name__ == "__main__":
    main()
