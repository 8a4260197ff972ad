"""Benchmark: the per-call time of our paired tests against the libraries that compute the same
numbers, as ratios measured in the same run (n = 24 seeds, many calls).

* ``paired_t`` against ``scipy.stats.ttest_rel`` (same t, p and interval);
* ``tost_paired`` against statsmodels' ``ttost_paired`` (same p-values).

With ``--frozen`` it also times the t functions alone: ``prereg_kit.stats.tdist`` against
``scipy.stats.t``'s frozen-distribution calls. A ratio below 1 means ours is faster. Each
figure is the best of ``--repeat`` rounds of ``--calls`` calls (the least disturbed by other work).

    python3 benchmarks/stats_speed.py [--calls 2000] [--repeat 5] [--frozen]
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]


def per_call(fn, calls: int, repeat: int) -> float:
    """Seconds per call: the fastest round of ``calls`` calls."""
    return min(timeit.repeat(fn, number=calls, repeat=repeat)) / calls


def line(name: str, ours: float, ref: float, ref_name: str) -> None:
    print(f"{name:<14} {ours * 1e6:8.1f} µs/call   {ref_name:<28} {ref * 1e6:8.1f} µs/call   "
          f"{ours / ref:5.2f}× of {ref_name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--frozen", action="store_true", help="also time the t functions alone")
    args = ap.parse_args()
    from scipy import stats as sps
    from statsmodels.stats.weightstats import ttost_paired

    from prereg_kit.stats import paired_t, tost_paired

    rng = np.random.default_rng(20261201)
    a = rng.normal(0.55, 0.04, 24)
    b = a - rng.normal(0.005, 0.03, 24)
    c, r = args.calls, args.repeat
    line("paired_t", per_call(lambda: paired_t(a, b), c, r), per_call(lambda: sps.ttest_rel(a, b), c, r),
         "scipy.stats.ttest_rel")
    line("tost_paired", per_call(lambda: tost_paired(a, b, margin=0.02), c, r),
         per_call(lambda: ttost_paired(a, b, -0.02, 0.02), c, r), "statsmodels ttost_paired")
    if args.frozen:
        from prereg_kit.stats.tdist import t_ppf, t_sf

        line("t sf + ppf", per_call(lambda: (t_sf(1.3, 23), t_ppf(0.975, 23)), c, r),
             per_call(lambda: (float(sps.t.sf(1.3, 23)), float(sps.t.ppf(0.975, 23))), c, r), "scipy.stats.t")


if __name__ == "__main__":
    main()
