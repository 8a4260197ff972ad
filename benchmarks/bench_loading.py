"""Benchmark: loading run logs and `prereg analyze` as the number of runs grows.

On a generated study of the paper's form (bench_analyze.py's plan: 4 configurations, 17
evaluations of 200 problems, 1,543 further problems at the start and at B), prints

- ``load_study`` against reading the same Parquet files with pandas (``read_parquet`` per file,
  concatenated) and against one ``pyarrow.dataset`` per table (``to_table().to_pandas()``: the
  floor, no validation, no derived columns);
- ``prereg analyze`` as a whole process (imports, verification, loading, readings, statistics,
  report) with this checkout and, with ``--old DIR``, with another checkout (e.g. the main one),
  wall time and peak memory (max RSS) of each;
- the growth series (``--series``, seeds per configuration, default 24,240,2400: 96, 960 and
  9,600 runs) with few problems per evaluation (``--series-problems``, default 10): per size the
  time to write and seal the study (not part of analyze), the whole-process wall time and peak
  memory, and the growth exponents of both (slope of log value on log runs). The studies are
  written by ``--jobs`` processes in chunks of seeds (the runs of a seed depend on the seed only,
  so the runs are the same as one process writes), each sealing its chunk as it finishes it.

    python3 benchmarks/bench_loading.py [--seeds 24] [--old /work/main] [--series 24,240,2400]
        [--series-old] [--keep-series DIR] [--jobs 2] [--quick]
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_analyze import PLAN, read_floor  # the paper-scale plan and the reading floor, one definition each

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


def _plan(root: Path, seeds: int, n_main: int, n_further: int, resamples: int):
    from prereg_kit.chain.lock import lock_plan
    from prereg_kit.plan import load_plan

    root.mkdir(parents=True, exist_ok=True)
    plan = PLAN.replace("n_problems = 200", f"n_problems = {n_main}").replace("n_problems = 1543", f"n_problems = {n_further}")
    (root / "plan.toml").write_text(plan.format(last=seeds - 1, resamples=resamples))
    lock_plan(root / "plan.toml")
    return load_plan(root / "plan.toml")


def _generate(root: Path, plan_hash: str, B: int, seeds: range, n_main: int, n_further: int, started_at) -> None:
    """Write (and seal) the runs of ``seeds``. The runs of a seed depend on the seed only, and run
    ``k`` of the whole study starts ``k`` minutes after ``started_at``, so chunks of seeds written
    apart are the same runs as one call for all seeds."""
    from prereg_kit.chain.seal import seal_runs
    from prereg_kit.simulate.synth import generate_study

    first = started_at + timedelta(minutes=4 * seeds.start)
    out = generate_study(root, study="bench", plan_hash=plan_hash,
                         configurations={"outcome": 0.0, "mc_k4": -0.14, "mc_k1": -0.07, "filter": 0.01},
                         seeds=seeds, budget_tokens=B, eval_every=B // 16,
                         eval_sets={"math200": n_main}, budget_sets={"further": n_further},
                         updates_per_token={"outcome": 600 / B, "mc_k4": 50 / B, "mc_k1": 160 / B, "filter": 600 / B},
                         time_per_token={"outcome": 1.3e-4, "mc_k4": 0.4e-4, "mc_k1": 0.6e-4, "filter": 1.5e-4},
                         continuation_share={"outcome": 0.0, "mc_k4": 0.91, "mc_k1": 0.70, "filter": 0.0}, rng=0,
                         started_at=first)
    r = seal_runs(root, out.runs)  # as `prereg seal` would: analyze refuses unsealed runs
    if r.refused:
        raise RuntimeError(r.refused[0])


def make_study(root: Path, seeds: int, n_main: int, n_further: int, resamples: int, jobs: int = 1,
               chunk: int = 25) -> None:
    """Lock the plan and write ``4 * seeds`` sealed runs; with ``jobs`` > 1, chunks of ``chunk``
    seeds in that many processes (each seals its chunk as it finishes it: one lock-chain append
    per chunk, so sealing overlaps the other processes' writing)."""
    from prereg_kit.chain.lock import utc_now

    pf = _plan(root, seeds, n_main, n_further, resamples)
    B = pf.plan.budget.tokens
    started = utc_now()
    parts = [range(a, min(seeds, a + chunk)) for a in range(0, seeds, chunk)]
    if jobs <= 1 or len(parts) == 1:
        for part in parts:
            _generate(root, pf.content_sha256, B, part, n_main, n_further, started)
        return
    ctx = multiprocessing.get_context("spawn")  # pyarrow's thread pools make fork unsafe
    with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
        for f in [pool.submit(_generate, root, pf.content_sha256, B, part, n_main, n_further, started) for part in parts]:
            f.result()


def loading_times(root: Path) -> dict[str, float]:
    """Seconds: load_study, pandas read_parquet per file (concatenated), one pyarrow.dataset per table."""
    import pandas as pd

    from prereg_kit.runlog import load_study

    def pandas_per_file():
        for kind in ("iterations", "evals"):
            pd.concat([pd.read_parquet(f) for f in sorted(glob.glob(f"{root}/runs/*/seed-*/{kind}.parquet"))], ignore_index=True)

    ways = {"load_study": lambda: load_study(root, progress=False), "pandas": pandas_per_file,
            "dataset": lambda: read_floor(root)}
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
    ap.add_argument("--series", default="24,240,2400",
                    help="seeds per configuration for the growth series (4 runs each), '' to skip it")
    ap.add_argument("--series-problems", type=int, default=10, help="problems per evaluation in the series")
    ap.add_argument("--series-old", action="store_true", help="time the old checkout on the series too")
    ap.add_argument("--series-old-max", type=int, default=960, help="the old checkout only on studies of up to this many runs")
    ap.add_argument("--keep-series", type=Path, default=None,
                    help="write the series' largest study here and keep it (reused if it has runs already)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="processes writing runs")
    ap.add_argument("--quick", action="store_true", help="small sizes: 6 seeds, series 6,12,24")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.series = min(args.seeds, 6), "6,12,24"
    here = str(Path(__file__).resolve().parents[1])
    tmp = Path(tempfile.mkdtemp(prefix="prereg-bench-loading-"))

    if args.seeds:
        root = args.study or tmp / "paper"
        if not (root / "runs").exists():
            t = time.perf_counter()
            make_study(root, args.seeds, 200, 1543, args.resamples, jobs=args.jobs)
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
        res = min(args.resamples, 2000)
        rows, olds = [], []
        for s in [int(x) for x in args.series.split(",")]:
            keep = args.keep_series and s == int(args.series.split(",")[-1])
            root = args.keep_series if keep else tmp / f"series-{s}"
            if keep and (root / "runs").exists():
                gen = float("nan")  # written before: reused as it is
            else:
                t = time.perf_counter()
                make_study(root, s, args.series_problems, args.series_problems, res, jobs=args.jobs)
                gen = time.perf_counter() - t
            wall, rss = analyze_process(root, here, res)
            line = (f"series: {4 * s:5d} runs  generated in {gen:7.1f} s (not part of analyze)  "
                    f"analyze {wall:7.2f} s  peak {rss:6.0f} MiB")
            if args.series_old and args.old and 4 * s <= args.series_old_max:
                ow, orss = analyze_process(root, args.old, res)
                olds.append((4 * s, ow, orss))
                line += f"   old {ow:7.2f} s  peak {orss:6.0f} MiB  ({ow / wall:.1f}×)"
            print(line, flush=True)
            rows.append((4 * s, wall, rss))
            if not keep:
                shutil.rmtree(root, ignore_errors=True)
        for label, got in (("this checkout", rows), (args.old, olds)):
            if len(got) > 1:
                n, w, m = (np.log(np.array(c, dtype=float)) for c in zip(*got))
                print(f"growth exponent ({label}, {got[0][0]}–{got[-1][0]} runs, {args.series_problems} problems per "
                      f"evaluation): time {np.polyfit(n, w, 1)[0]:.2f}, peak memory {np.polyfit(n, m, 1)[0]:.2f} "
                      "(slope of log value on log runs)")
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({"done": True}))


if __name__ == "__main__":
    main()
