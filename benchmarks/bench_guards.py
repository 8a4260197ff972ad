"""Benchmark: the guards against pathological inputs, as ratios to a reference measured in the same run.

The tests check that each guard gives the right answer; how fast it does so depends on the
machine and on what else runs on it, so the times are reported here instead of asserted there.
Each line prints our time and a reference measured on the same machine in alternating timings
(:func:`best_pair`), so that a change of load hits both:

* answer extraction on multi-megabyte adversarial texts (tests/trainer/test_verify.py ``adversarial()``, at full size)
  against the same extraction on the text's first tenth: about 10× for work linear in the text,
  about 100× for quadratic work (a backtracking pattern);
* near-duplicate removal at the paper's scale (3,500 training against 1,700 evaluation problems)
  against the brute-force Jaccard scan of tests/trainer/test_data.py on 100 of the problems, scaled to all;
* plan loading with 10,000 seeds and with 100,000-level nesting against loading the small plan;
* the tabular dynamics to 10⁶ iterations against 10⁵ (linear: a ratio near 10).

    python3 benchmarks/bench_guards.py [--repeat 3] [--quick]

``--quick`` (make bench): the best of 2 timings of each.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # the tests' inputs, and their own `from plans import …`
from paths import folders_with_tests  # noqa: E402 - tests/paths.py, found through the line above

# the test modules whose inputs are timed live in tests/<package>/, and import each other's helpers by name
sys.path += [str(f) for f in folders_with_tests() if str(f) not in sys.path]


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def best(fn, repeat: int) -> float:
    """The fastest of ``repeat`` timed calls (the least disturbed by other work on the machine)."""
    return min(_timed(fn) for _ in range(repeat))


def best_pair(ours, ref, repeat: int) -> tuple[float, float]:
    """The fastest of ``repeat`` timed calls of ``ours`` and of ``ref``, the calls alternating
    (the reference first), so that both see the same load."""
    t_ours = t_ref = float("inf")
    for _ in range(repeat):
        t_ref = min(t_ref, _timed(ref))
        t_ours = min(t_ours, _timed(ours))
    return t_ours, t_ref


def line(name: str, ours: float, ref: float, what: str) -> None:
    print(f"{name:<44} {ours * 1e3:10.1f} ms  {ref * 1e3:10.2f} ms  {ours / ref:9.3g}×  {what}")


def verifier(repeat: int) -> None:
    from test_verify import adversarial

    from trainer.data.verifiers import extract_answer

    def both(t: str):
        return extract_answer(t), extract_answer(t, strict=True)

    for name, text in adversarial().items():
        tenth = text[: len(text) // 10]
        ours, ref = best_pair(lambda t=text: both(t), lambda t=tenth: both(t), repeat)
        line(f"extract_answer: {name}", ours, ref, "vs its first tenth (linear ~10×)")


def dedup(repeat: int) -> None:
    import numpy as np
    from test_data import _brute_force, _perturb, _random_problems

    from trainer.data.problems import Problem, ProblemPool

    rng = np.random.default_rng(1)
    evals = _random_problems(rng, 1700, "e")
    train = _random_problems(rng, 3400, "t")
    dups = [Problem(f"d{i}", _perturb(rng, evals[i].prompt, 1 + i % 3), "1") for i in range(100)]
    pool = ProblemPool.from_problems(train + dups)
    ours = best(lambda: pool.without_near_duplicates(evals[:1500], evals[1500:]), repeat)
    ref = best(lambda: _brute_force(dups, evals), 1) * (3500 / 100)  # brute force on 100, scaled to 3,500
    line("near-duplicates, 3,500 × 1,700", ours, ref, "vs brute-force Jaccard (extrapolated)")


def plans(repeat: int) -> None:
    from plans import SMALL_PLAN
    from test_plan_limits import MAX_SEEDS, _deep, _errors, _loads

    def small():
        return _loads(SMALL_PLAN)

    small()  # the plan's models are built on the first load: outside the timings
    big = f"[{', '.join(map(str, range(MAX_SEEDS)))}]"
    ours, ref = best_pair(lambda: _loads(SMALL_PLAN.replace("seeds = [0, 1, 2]", f"seeds = {big}")), small, repeat)
    line(f"plan with {MAX_SEEDS} seeds (list)", ours, ref, "vs the 3-seed plan")
    ours, ref = best_pair(lambda: _errors(SMALL_PLAN.replace("seeds = [0, 1, 2]", 'seeds = "0-99999"')), small, repeat)
    line("plan with 100,000 seeds (refused)", ours, ref, "vs the 3-seed plan")
    deep = SMALL_PLAN.replace("group_size = 8", "group_size = 8\n" + _deep("dotted", 100_000))
    ours, ref = best_pair(lambda: _errors(deep), small, repeat)
    line("plan nested 100,000 deep (refused)", ours, ref, "vs the 3-seed plan")


def tabular(repeat: int) -> None:
    from test_tabular import PAPER_INIT

    from analyses.tabular import iterations_to_reach

    kw = dict(rule="grpo", eta=0.8, rho=0.5, n=8, alpha=0.1, action=1, threshold=0.99)
    iterations_to_reach(PAPER_INIT, max_iter=10, **kw)  # compile outside the timing
    ours, ref = best_pair(lambda: iterations_to_reach(PAPER_INIT, **kw),
                          lambda: iterations_to_reach(PAPER_INIT, max_iter=100_000, **kw), repeat)
    line("tabular GRPO to 10^6 iterations", ours, ref, "vs 10^5 iterations (linear: ~10×)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="best of 2 timings of each (make bench)")
    args = ap.parse_args()
    if args.quick:
        args.repeat = min(args.repeat, 2)
    print(f"{'guard':<44} {'ours':>13}  {'reference':>13}  {'ratio':>10}")
    for part in (verifier, dedup, plans, tabular):
        part(args.repeat)


if __name__ == "__main__":
    main()
