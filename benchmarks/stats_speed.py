"""Benchmark: the per-call time of our paired tests against the libraries that compute the same
numbers, as ratios measured in the same run (n = 24 seeds, many calls).

* ``paired_t`` against ``scipy.stats.ttest_rel`` (same t, p and interval);
* ``tost_paired`` against statsmodels' ``ttost_paired`` (same p-values).

With ``--frozen`` it also times the t functions alone: ``prereg_kit.stats.tdist`` against
``scipy.stats.t``'s frozen-distribution calls. A ratio below 1 means ours is faster. Each
figure is the best of ``--repeat`` rounds of ``--calls`` calls (the least disturbed by other work),
ours and the reference in alternating rounds, so that a change of load hits both alike.
``--quick`` (make bench): 300 calls, best of 3.

    python3 benchmarks/stats_speed.py [--calls 2000] [--repeat 5] [--frozen] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]


def per_call(ours, ref, calls: int, repeat: int) -> tuple[float, float]:
    """Seconds per call of ``ours`` and of ``ref``: each one's fastest round of ``calls`` calls,
    the rounds alternating between the two."""
    t_ours = t_ref = float("inf")
    for _ in range(repeat):
        t_ours = min(t_ours, timeit.timeit(ours, number=calls))
        t_ref = min(t_ref, timeit.timeit(ref, number=calls))
    return t_ours / calls, t_ref / calls


def line(name: str, times: tuple[float, float], ref_name: str) -> None:
    ours, ref = times
    print(f"{name:<14} {ours * 1e6:8.1f} µs/call   {ref_name:<28} {ref * 1e6:8.1f} µs/call   "
          f"{ours / ref:5.2f}× of {ref_name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--frozen", action="store_true", help="also time the t functions alone")
    ap.add_argument("--quick", action="store_true", help="300 calls, best of 3 (make bench)")
    args = ap.parse_args()
    if args.quick:
        args.calls, args.repeat = min(args.calls, 300), min(args.repeat, 3)
    from scipy import stats as sps
    from statsmodels.stats.weightstats import ttost_paired

    from prereg_kit.stats import paired_t, tost_paired

    rng = np.random.default_rng(20261201)
    a = rng.normal(0.55, 0.04, 24)
    b = a - rng.normal(0.005, 0.03, 24)
    c, r = args.calls, args.repeat
    line("paired_t", per_call(lambda: paired_t(a, b), lambda: sps.ttest_rel(a, b), c, r), "scipy.stats.ttest_rel")
    line("tost_paired", per_call(lambda: tost_paired(a, b, margin=0.02), lambda: ttost_paired(a, b, -0.02, 0.02), c, r),
         "statsmodels ttost_paired")
    if args.frozen:
        from prereg_kit.stats.tdist import t_ppf, t_sf

        line("t sf + ppf", per_call(lambda: (t_sf(1.3, 23), t_ppf(0.975, 23)),
                                    lambda: (float(sps.t.sf(1.3, 23)), float(sps.t.ppf(0.975, 23))), c, r), "scipy.stats.t")


if __name__ == "__main__":
    main()
