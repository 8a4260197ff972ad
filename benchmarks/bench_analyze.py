"""Benchmark: `prereg analyze` end to end on a generated study at the paper's scale.

4 configurations × 24 seeds × 17 evaluations × 200 problems, plus a further set of 1,543
problems scored at the start and at B (S33/S34's form); 10⁴ crossed-bootstrap resamples per
primary contrast; report and figures included. Prints wall time, peak memory (max RSS) and the
share of time spent generating (not part of analyze), loading, computing and plotting, and the
ratio line ``analyze  39.4× reading its run logs (loading 2.7×, readings + statistics 10.7×,
report + figures 26.1×)``: each time against the floor of reading the same Parquet files (one
``pyarrow.dataset`` per table, no checks: :func:`read_floor`), timed in the same process just
before and just after the analysis, best of 3 each time (the mean of the two: a change of load
hits both sides alike; the floor takes a tenth of a second at 24 runs, so one timing is noisy).
The analysis is timed once, as ``prereg analyze`` runs it: its first call in the process, the
imports it makes on first use (matplotlib for the figures) included.

    python3 benchmarks/bench_analyze.py [--seeds 24] [--resamples 10000] [--keep DIR] [--quick]

``--quick`` (make bench): 6 seeds (24 runs) and 2,000 resamples.
"""

from __future__ import annotations

import argparse
import glob
import resource
import shutil
import tempfile
import time
from datetime import timedelta
from pathlib import Path

PLAN = """\
[study]
id = "bench"
title = "Paper-scale analysis benchmark"
question = "How long does prereg analyze take at the paper's scale?"
comparator = "outcome"
seeds = {{ first = 0, last = {last} }}

[configurations.outcome]
[configurations.mc_k4]
[configurations.mc_k1]
[configurations.filter]

[budget]
tokens = "12.25M"
eval_every = "B/16"

[evaluation]
sets = [{{ name = "math200", n_problems = 200 }}, {{ name = "further", n_problems = 1543 }}]

[[contrasts]]
id = "P1"
treatment = "mc_k4"
control = "outcome"
tier = "primary"

[[contrasts]]
id = "P2"
treatment = "mc_k1"
control = "outcome"
tier = "primary"

[[contrasts]]
id = "P3"
treatment = "filter"
control = "outcome"
tier = "primary"

[[contrasts]]
id = "P4"
treatment = "filter"
control = "outcome"
tier = "primary"
eval_set = "further"

[[contrasts]]
id = "S1"
treatment = "mc_k4"
control = "outcome"
at = "time"
tier = "secondary"

[[contrasts]]
id = "S2"
treatment = "filter"
control = "outcome"
tier = "secondary"
kind = "equivalence"

[[contrasts]]
id = "X1"
treatment = "mc_k4"
control = "outcome"
at = "updates"
tier = "exploratory"

[[families]]
name = "primary"
members = ["P1", "P2", "P3", "P4"]

[statistics]
bootstrap_resamples = {resamples}
"""


def read_floor(root: Path) -> None:
    """Read a study's run logs the fastest way: one ``pyarrow.dataset`` per table into pandas, no
    checks and no derived columns (the floor ``load_study`` and ``prereg analyze`` are measured against)."""
    import pyarrow.dataset as ds

    for kind in ("iterations", "evals"):
        ds.dataset(sorted(glob.glob(f"{root}/runs/*/seed-*/{kind}.parquet")), format="parquet").to_table().to_pandas()


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=24)
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--keep", type=Path, default=None, help="write the study here and keep it")
    ap.add_argument("--quick", action="store_true", help="6 seeds, 2,000 resamples (make bench)")
    args = ap.parse_args()
    if args.quick:
        args.seeds, args.resamples = min(args.seeds, 6), min(args.resamples, 2_000)

    from prereg_kit.analysis.analyze import analyze_study
    from prereg_kit.chain.lock import lock_plan, utc_now
    from prereg_kit.plan import load_plan
    from prereg_kit.report import write_report
    from prereg_kit.runlog import load_study
    from prereg_kit.simulate.synth import generate_study

    root = args.keep or Path(tempfile.mkdtemp(prefix="prereg-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    (root / "plan.toml").write_text(PLAN.format(last=args.seeds - 1, resamples=args.resamples))
    now = utc_now()
    lock_plan(root / "plan.toml")
    now = utc_now()
    pf = load_plan(root / "plan.toml")
    B = pf.plan.budget.tokens

    t0 = time.perf_counter()
    generate_study(root, study="bench", plan_hash=pf.content_sha256,
                   configurations={"outcome": 0.0, "mc_k4": -0.14, "mc_k1": -0.07, "filter": 0.01},
                   seeds=range(args.seeds), budget_tokens=B, eval_every=B // 16,
                   eval_sets={"math200": 200}, budget_sets={"further": 1543},
                   updates_per_token={"outcome": 600 / B, "mc_k4": 50 / B, "mc_k1": 160 / B, "filter": 600 / B},
                   time_per_token={"outcome": 1.3e-4, "mc_k4": 0.4e-4, "mc_k1": 0.6e-4, "filter": 1.5e-4},
                   continuation_share={"outcome": 0.0, "mc_k4": 0.91, "mc_k1": 0.70, "filter": 0.0}, rng=0, started_at=now + timedelta(seconds=1))
    from prereg_kit.chain.seal import seal_runs
    seal_runs(root)  # as `prereg seal` would: analyze refuses unsealed runs
    t_gen = time.perf_counter() - t0

    read_floor(root)  # pyarrow.dataset's import and the file cache, outside the timings
    floor = [min(timed(lambda: read_floor(root)) for _ in range(3))]
    t0 = time.perf_counter()
    st = load_study(root, progress=False)
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    a = analyze_study(root, progress=False)  # verify + load + readings + statistics
    t_analyze = time.perf_counter() - t0
    t0 = time.perf_counter()
    files = write_report(a, root / "report")
    t_report = time.perf_counter() - t0
    floor.append(min(timed(lambda: read_floor(root)) for _ in range(3)))
    t_floor = sum(floor) / len(floor)

    total = t_analyze + t_report
    compute = t_analyze - t_load
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"study: {len(st.meta)} runs, {len(st.evals):,} eval rows, {len(st.iterations):,} iteration rows; "
          f"{args.resamples:,} crossed-bootstrap resamples × {sum(c.tier == 'primary' for c in pf.plan.contrasts)} primary contrasts")
    print(f"generate (not part of analyze): {t_gen:6.2f} s")
    print(f"analyze end to end:            {total:6.2f} s")
    print(f"  loading run logs:            {t_load:6.2f} s  ({t_load / total:5.1%})")
    print(f"  readings + statistics:       {compute:6.2f} s  ({compute / total:5.1%})")
    print(f"  report + figures:            {t_report:6.2f} s  ({t_report / total:5.1%})")
    print(f"peak memory (max RSS):         {rss:6.0f} MiB")
    print(f"reading the run logs (floor):  {t_floor:6.2f} s  (one pyarrow.dataset per table, best of 3 before and after: "
          f"{floor[0]:.2f} s, {floor[1]:.2f} s)")
    print(f"analyze  {total / t_floor:5.1f}× reading its run logs (loading {t_load / t_floor:.1f}×, "
          f"readings + statistics {compute / t_floor:.1f}×, report + figures {t_report / t_floor:.1f}×)")
    print(a.contrasts[["contrast", "n", "mean", "ci_low", "ci_high", "crossed_ci_low", "crossed_ci_high", "verdict"]]
          .to_string(index=False))
    print(f"{len(files)} report files in {root / 'report'}")
    if args.keep is None:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
