"""Run every benchmark that reports ratios, in its quick mode, and print each ratio beside its reference.

``make bench`` runs this (``make bench-full``: ``--full``, the scripts' own full sizes). Each entry
of :data:`BENCHMARKS` is a script in ``benchmarks/``, its quick-mode arguments, what its ratios
compare and the CPU seconds its quick mode is budgeted; :data:`NOT_RUN` names the scripts of
``benchmarks/`` that are deliberately left out, with the reason (a test sees that every script is in
one or the other). Each script runs in its own process (a fresh interpreter: imports, allocator and
thread settings do not carry over from one benchmark to the next); the lines it prints that hold a
ratio (a number followed by ``×``) are passed through under a header naming the reference, then
the script's wall time, its CPU time (its processes and their children: the figure the load moves
least) and the load average while it ran.

No ratio is judged here: the ratios are for people to read, each measured against its reference
in the same run, so a busy machine slows both sides alike. A script fails only by exiting non-zero
or by running past its timeout; the exit status is then 1. In quick mode the timeout is generous
relative to the script's CPU budget (:func:`timeout_for`: a loaded machine stretches wall time, and
that must not fail a benchmark); with ``--full`` there is none unless ``--timeout`` gives one. A
script that times out is stopped with the processes it started. A listed script that is not in
this checkout is skipped with a line saying so.

    python3 benchmarks/run_all.py [--full] [--only NAME ...] [--timeout SECONDS]
"""

from __future__ import annotations

import argparse
import math
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


class Bench(NamedTuple):
    script: str  # in benchmarks/
    quick: list[str]  # its arguments in quick mode (make bench)
    what: str  # what its ratios compare
    cpu_s: float  # CPU seconds its quick mode is budgeted on 2 cores (measured: docs/performance.md)


#: Every benchmark ``make bench`` runs, in this order. The CPU budgets sum to at most
#: :data:`QUICK_CPU_BUDGET_S` (tested); each is 1.3-3× the quick mode's CPU time measured on 2 cores
#: at load averages of 2 and 5 (docs/performance.md), which a loaded machine raises a little.
BENCHMARKS: list[Bench] = [
    Bench("bench_crossed_bootstrap.py", ["--quick"],
          "crossed_bootstrap vs the floor (draw, bincount, one BLAS product per 64 resamples) and vs a fair loop", 5),
    Bench("bench_guards.py", ["--quick"], "each guard on pathological input vs a small or linear reference", 20),
    Bench("stats_speed.py", ["--quick"], "statistics routines vs the libraries computing the same numbers", 5),
    Bench("startup_speed.py", ["--quick"], "start-up time vs `import pandas` and `python -c pass`", 20),
    Bench("bench_analyze.py", ["--quick"], "prereg analyze and its parts vs reading the study's run logs (the floor)", 15),
    Bench("bench_trainer_cpu.py", ["--quick"], "the trainer's iteration vs a bare transformers generate + backward loop", 25),
    Bench("bench_loading.py", ["--quick"], "load_study vs pandas per file and one pyarrow.dataset; analyze's growth with runs", 45),
    Bench("bench_run_overhead.py", ["--quick"], "a fresh process per run vs a worker's later runs", 60),
    Bench("gradient_memory.py", ["--quick"], "a gradient test's held memory and time per batch vs model size, R and subspace", 30),
    Bench("sequential_t_error.py", ["--quick"], "the family-wise error of paired-t looks as a multiple of α: the z rule vs the t boundaries", 4),
]

#: Scripts of benchmarks/ that ``make bench`` does not run, and why.
NOT_RUN: dict[str, str] = {
    "run_all.py": "this runner",
    "gpu_check.py": "the GPU path check (one GPU: bash benchmarks/gpu_check.sh); its CPU half runs in tests/project/test_gpu_check.py",
    "suite_cpu.py": "the default test suite's CPU per test (it runs the whole suite: minutes); docs/testing.md",
}

#: Scripts other engineers are adding at the same time; listed before they land.
IN_FLIGHT: set[str] = set()

#: The most CPU seconds all quick modes together may be budgeted (on 2 cores).
QUICK_CPU_BUDGET_S = 300
#: A quick mode's timeout: this many times its CPU budget, and never under MIN_TIMEOUT_S. At a load
#: average of 4 on 2 cores a single-threaded script gets about 0.4 of a core (≈ 2.5× its CPU time
#: in wall time); 10× leaves room for a load twice that, and still stops a script that hangs.
TIMEOUT_PER_CPU_S = 10
MIN_TIMEOUT_S = 300

RATIO = re.compile(r"\d(?:[\d.,]*\d)?\s?×")


def ratio_lines(text: str) -> list[str]:
    """The lines of a benchmark's output that report a ratio (a number followed by ×)."""
    return [ln for ln in text.splitlines() if RATIO.search(ln)]


def timeout_for(bench: Bench, full: bool, fixed: float | None) -> float | None:
    """Seconds allowed to one script: ``fixed`` if given, none at full size, else generous to its CPU budget."""
    if fixed is not None:
        return fixed
    if full:
        return None
    return max(MIN_TIMEOUT_S, TIMEOUT_PER_CPU_S * bench.cpu_s)


class LoadSampler:
    """The 1-minute load average, read every few seconds in a thread while the benchmarks run."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.samples: list[float] = []
        self._every = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self._every):
                return

    def sample(self) -> float:
        try:
            load = os.getloadavg()[0]
        except OSError:  # not available on this system
            return float("nan")
        self.samples.append(load)
        return load

    def start(self) -> LoadSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def since(self, k: int) -> str:
        """The range of the samples from the ``k``-th on, as text."""
        got = [s for s in self.samples[k:] if not math.isnan(s)]
        if not got:
            return "load average not available"
        lo, hi = min(got), max(got)
        return f"load average {lo:.1f}" if f"{lo:.1f}" == f"{hi:.1f}" else f"load average {lo:.1f}–{hi:.1f}"


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_one(bench: Bench, args: list[str], timeout: float | None, load: LoadSampler) -> tuple[bool, float]:
    """Run one benchmark and pass its ratio lines through; (whether it succeeded, its CPU seconds)."""
    path = HERE / bench.script
    print(f"== {bench.script}: {bench.what}", flush=True)
    if not path.exists():
        print(f"   skipped: {bench.script} is not in this checkout", flush=True)
        return True, 0.0
    k = len(load.samples)
    load.sample()
    t0, c0 = time.perf_counter(), _children_cpu()
    # its own session, so that a timeout stops the processes it started (run workers, analyze) too
    proc = subprocess.Popen([sys.executable, str(path), *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        print(f"   FAILED: still running after {timeout:.0f} s (CPU {_children_cpu() - c0:.0f} s, "
              f"{load.since(k)})", flush=True)
        return False, _children_cpu() - c0
    wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    load.sample()
    lines = ratio_lines(out)
    for ln in lines:
        print(f"   {ln.strip()}")
    if proc.returncode != 0:
        tail = (out + err).strip().splitlines()[-8:]
        print(f"   FAILED (exit {proc.returncode}):", *(f"   | {t}" for t in tail), sep="\n")
        return False, cpu
    if not lines:
        print("   (no ratio line printed)")
    over = f", over its budget of {bench.cpu_s:.0f} s" if "--quick" in args and cpu > bench.cpu_s else ""
    print(f"   (wall {wall:.0f} s, CPU {cpu:.1f} s{over}; {load.since(k)})", flush=True)
    return True, cpu


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended meanwhile
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="run each script at its full size (no --quick; make bench-full)")
    ap.add_argument("--only", nargs="+", default=None, help="run only these scripts")
    ap.add_argument("--timeout", type=float, default=None,
                    help=f"seconds allowed to each script (default: quick mode {TIMEOUT_PER_CPU_S}× its CPU budget, "
                         f"at least {MIN_TIMEOUT_S} s; full size none)")
    args = ap.parse_args(argv)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = LoadSampler().start()
    t0 = time.perf_counter()
    failed: list[str] = []
    cpu_total = 0.0
    try:
        for bench in BENCHMARKS:
            if args.only and bench.script not in args.only:
                continue
            run_args = [a for a in bench.quick if a != "--quick"] if args.full else bench.quick
            ok, cpu = run_one(bench, run_args, timeout_for(bench, args.full, args.timeout), load)
            cpu_total += cpu
            if not ok:
                failed.append(bench.script)
    finally:
        load.stop()
    mode = "full size" if args.full else "quick mode"
    print(f"== {mode}: wall {time.perf_counter() - t0:.0f} s, CPU {cpu_total:.0f} s on {cores} cores, "
          f"{load.since(0)}; " + (f"FAILED: {', '.join(failed)}" if failed else "every script finished"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
