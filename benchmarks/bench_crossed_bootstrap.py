"""Benchmark: crossed seed-by-problem bootstrap against its floor and against a fair loop.

Data: S seeds × 1,543 problems of per-problem accuracies (8 samples each) for two arms, as in the
paper's "1,543 further test problems" contrasts (S33, S34), for S = 5, 24 and 96. For each shape
the script times, in one process on the same data, best of ``--repeat``:

* **ours**: ``prereg_kit.stats.crossed_bootstrap`` (validation, resampling, percentiles);
* **floor**: the least code that does the resampling (:func:`floor_means`): per chunk of 64
  resamples draw the seed and problem indices, ``bincount`` them to counts, one BLAS product of
  the problem counts with the difference matrix ``D`` and a row-wise dot with the seed counts —
  one BLAS thread, as that is fastest at this size;
* **fair loop**: per resample, index ``D`` once with ``np.ix_`` and take the mean (the existing
  ``_crossed_bootstrap_loop`` indexes both arms, twice the work); run on fewer resamples when
  slow and scaled to the same count.

It prints ``crossed_bootstrap S=24  1.04× floor  3.9× faster than loop`` lines (the ratios), the
minor page faults per call (``ru_minflt`` delta) of ours and of the floor — timed with glibc's
trim threshold raised (:func:`raise_trim_threshold`, the floor's best case), and ours also on its
first call in the process — and the floor's time
split into drawing indices, counting (bincount) and the product. ``--quick`` runs fewer
resamples (for ``make bench``). Run: ``python3 benchmarks/bench_crossed_bootstrap.py``.
"""

from __future__ import annotations

import argparse
import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's code, whatever is installed

from prereg_kit.stats import crossed_bootstrap  # noqa: E402

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # the floor then runs with the BLAS's own thread count
    threadpool_limits = None

FLOOR_ROWS = 64


def make_data(seeds: int, problems: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    base = rng.uniform(0.1, 0.9, problems)
    seed_eff = rng.normal(0, 0.012, (seeds, 1))
    prob_eff = rng.normal(0, 0.04, (1, problems))
    control = rng.binomial(8, np.broadcast_to(base, (seeds, problems))) / 8
    treatment = rng.binomial(8, np.clip(base + 0.01 + seed_eff + prob_eff, 0, 1)) / 8
    return treatment, control


def floor_means(d: np.ndarray, n: int, seed: int, stages: dict | None = None) -> np.ndarray:
    """The minimal resampling: resampled means of D over n crossed resamples, 64 per BLAS product.

    With ``stages`` (a dict) the time of drawing, counting and the product is added to its keys.
    """
    s, p = d.shape
    rng = np.random.default_rng(seed)
    means = np.empty(n)
    off_s = (np.arange(FLOOR_ROWS) * s)[:, None]
    off_p = (np.arange(FLOOR_ROWS) * p)[:, None]
    dt = d.T
    clock = time.perf_counter
    for start in range(0, n, FLOOR_ROWS):
        r = min(FLOOR_ROWS, n - start)
        t0 = clock()
        si = rng.integers(0, s, size=(r, s))
        pj = rng.integers(0, p, size=(r, p))
        t1 = clock()
        a = np.bincount((si + off_s[:r]).ravel(), minlength=r * s).reshape(r, s).astype(float)
        b = np.bincount((pj + off_p[:r]).ravel(), minlength=r * p).reshape(r, p).astype(float)
        t2 = clock()
        means[start:start + r] = np.einsum("bs,bs->b", a, b @ dt)
        if stages is not None:
            t3 = clock()
            stages["draw"] += t1 - t0
            stages["count"] += t2 - t1
            stages["product"] += t3 - t2
    return means / (s * p)


def fair_loop_means(d: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Per resample: draw seeds and problems, index D once, take the mean."""
    s, p = d.shape
    rng = np.random.default_rng(seed)
    means = np.empty(n)
    for b in range(n):
        means[b] = d[np.ix_(rng.integers(0, s, size=s), rng.integers(0, p, size=p))].mean()
    return means


def timed(fn, repeat: int) -> tuple[float, int]:
    """Best wall time of ``repeat`` calls and the minor page faults of the last one."""
    best, faults = float("inf"), 0
    for _ in range(repeat):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    return best, faults


def one_blas_thread():
    return threadpool_limits(limits=1, user_api="blas") if threadpool_limits else _Null()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def fresh_faults(seeds: int, problems: int, resamples: int) -> int:
    """Minor page faults of one call of ours in the allocator's start-up state (run first)."""
    treatment, control = make_data(seeds, problems, np.random.default_rng(0))
    return timed(lambda: crossed_bootstrap(treatment, control, n_resamples=resamples, seed=1), 1)[1]


def raise_trim_threshold() -> None:
    """Free a 16 MiB block: glibc then keeps freed blocks up to that size instead of handing them
    back to the system, so the floor's per-chunk arrays are reused without page faults (its best case)."""
    block = np.ones(1 << 21)
    del block


def bench_shape(seeds: int, problems: int, resamples: int, loop_resamples: int, repeat: int,
                first_faults: int) -> None:
    treatment, control = make_data(seeds, problems, np.random.default_rng(0))
    d = treatment - control
    crossed_bootstrap(treatment, control, n_resamples=200, seed=1)  # warm-up
    with one_blas_thread():
        floor_means(d, 200, 1)
    # interleaved so that load from other processes hits both alike
    t_ours = t_floor = float("inf")
    for _ in range(repeat):
        t, f_ours = timed(lambda: crossed_bootstrap(treatment, control, n_resamples=resamples, seed=1), 1)
        t_ours = min(t_ours, t)
        with one_blas_thread():
            t, f_floor = timed(lambda: floor_means(d, resamples, 1), 1)
        t_floor = min(t_floor, t)
    t_loop, _ = timed(lambda: fair_loop_means(d, loop_resamples, 1), 1)
    t_loop *= resamples / loop_resamples
    stages = {"draw": 0.0, "count": 0.0, "product": 0.0}
    with one_blas_thread():
        floor_means(d, resamples, 1, stages)
    total = sum(stages.values())
    shares = "  ".join(f"{k} {v / total:.0%}" for k, v in stages.items())
    print(f"crossed_bootstrap S={seeds:<3} {t_ours / t_floor:5.2f}× floor  {t_loop / t_ours:5.1f}× faster than loop"
          f"   (ours {t_ours * 1e3:.0f} ms, floor {t_floor * 1e3:.0f} ms, loop {t_loop * 1e3:.0f} ms"
          f" from {loop_resamples:,} resamples scaled; page faults/call ours {f_ours:,} (first call {first_faults:,}),"
          f" floor {f_floor:,}; floor split:"
          f" {shares})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[5, 24, 96])
    ap.add_argument("--problems", type=int, default=1543)
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--loop-resamples", type=int, default=2_000, help="resamples for the fair loop (time scaled)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2,000 resamples, 200 in the loop, best of 3 (make bench)")
    args = ap.parse_args()
    if args.quick:
        args.resamples, args.loop_resamples, args.repeat = 2_000, 200, 3
    loop_n = min(args.loop_resamples, args.resamples)
    print(f"crossed bootstrap: S seeds × {args.problems} problems, {args.resamples:,} resamples, best of {args.repeat}; "
          f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}")
    first = {s: fresh_faults(s, args.problems, args.resamples) for s in args.seeds}
    raise_trim_threshold()
    for s in args.seeds:
        bench_shape(s, args.problems, args.resamples, loop_n, args.repeat, first[s])


if __name__ == "__main__":
    main()
