"""Benchmark: crossed seed-by-problem bootstrap, vectorized vs a plain loop, in one process.

Data: 24 seeds × 1,543 problems of per-problem accuracies (8 samples each) for two arms, as in
the paper's "1,543 further test problems" contrasts (S33, S34). Both implementations draw 10⁴
resamples of seeds and problems; the script prints each time, their ratio and the peak memory
traced while each runs (numpy reports its allocations to tracemalloc), plus the process's
maximum resident set size. Run: ``python3 benchmarks/bench_crossed_bootstrap.py``.
"""

from __future__ import annotations

import argparse
import platform
import resource
import time
import tracemalloc

import numpy as np

from prereg_kit.stats import crossed_bootstrap
from prereg_kit.stats.bootstrap import _crossed_bootstrap_loop


def make_data(seeds: int, problems: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    base = rng.uniform(0.1, 0.9, problems)
    seed_eff = rng.normal(0, 0.012, (seeds, 1))
    prob_eff = rng.normal(0, 0.04, (1, problems))
    control = rng.binomial(8, np.broadcast_to(base, (seeds, problems))) / 8
    treatment = rng.binomial(8, np.clip(base + 0.01 + seed_eff + prob_eff, 0, 1)) / 8
    return treatment, control


def measure(fn, *args, **kwargs):
    tracemalloc.start()
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return result, elapsed, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=24)
    ap.add_argument("--problems", type=int, default=1543)
    ap.add_argument("--resamples", type=int, default=10_000)
    args = ap.parse_args()

    treatment, control = make_data(args.seeds, args.problems, np.random.default_rng(0))
    crossed_bootstrap(treatment, control, n_resamples=200, seed=1)  # warm-up (imports, BLAS threads)
    fast, t_fast, m_fast = measure(crossed_bootstrap, treatment, control, n_resamples=args.resamples, seed=1)
    loop, t_loop, m_loop = measure(_crossed_bootstrap_loop, treatment, control, n_resamples=args.resamples, seed=1)
    maxrss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

    print(f"crossed bootstrap: {args.seeds} seeds × {args.problems} problems, {args.resamples:,} resamples")
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}")
    print(f"loop       : {t_loop:8.3f} s   peak traced memory {m_loop / 2**20:7.1f} MiB   "
          f"CI [{loop.ci_low:+.5f}, {loop.ci_high:+.5f}]")
    print(f"vectorized : {t_fast:8.3f} s   peak traced memory {m_fast / 2**20:7.1f} MiB   "
          f"CI [{fast.ci_low:+.5f}, {fast.ci_high:+.5f}]")
    print(f"ratio      : {t_loop / t_fast:8.1f}× faster")
    print(f"process max RSS: {maxrss_mb:.0f} MiB; input matrices {2 * treatment.nbytes / 2**20:.2f} MiB")


if __name__ == "__main__":
    main()
