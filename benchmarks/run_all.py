"""Run every benchmark that reports ratios, in its quick mode, and print each ratio beside its reference.

``make bench`` runs this. Each entry of :data:`BENCHMARKS` is a script in ``benchmarks/``, its
arguments and what its ratios compare. Each script runs in its own process (a fresh interpreter:
imports, allocator and thread settings do not carry over from one benchmark to the next); the
lines it prints that hold a ratio (a number followed by ``×``) are passed through under a header
naming the reference. A listed script that is not in this checkout is skipped with a line saying
so, one without a ``--quick`` option yet runs at full size; a script that fails is reported with
the end of its output, and the exit status is then 1.

    python3 benchmarks/run_all.py [--full] [--only NAME ...] [--timeout SECONDS]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: (script in benchmarks/, arguments in quick mode, what its ratios compare).
BENCHMARKS: list[tuple[str, list[str], str]] = [
    ("bench_crossed_bootstrap.py", ["--quick"],
     "crossed_bootstrap vs the floor (draw, bincount, one BLAS product per 64 resamples) and vs a fair loop"),
    ("bench_guards.py", ["--quick"], "each guard on pathological input vs a small or linear reference"),
    ("stats_speed.py", ["--quick"], "statistics routines vs their references"),
    ("startup_speed.py", ["--quick"], "start-up time vs its reference"),
    ("bench_analyze.py", ["--quick"], "prereg analyze and its loading vs their references"),
    ("bench_trainer_cpu.py", ["--quick"], "the trainer's iteration vs a bare transformers generate + backward loop"),
    ("bench_loading.py", ["--quick"], "load_study vs pandas per file and one pyarrow.dataset; analyze's growth with runs"),
    ("bench_run_overhead.py", ["--quick"], "a run in a worker per job slot vs a fresh process per run"),
]

#: Scripts other engineers are adding at the same time; listed before they land.
IN_FLIGHT: set[str] = set()

RATIO = re.compile(r"\d(?:[\d.,]*\d)?\s?×")


def ratio_lines(text: str) -> list[str]:
    """The lines of a benchmark's output that report a ratio (a number followed by ×)."""
    return [ln for ln in text.splitlines() if RATIO.search(ln)]


def run_one(script: str, args: list[str], what: str, timeout: float) -> bool:
    """Run one benchmark and pass its ratio lines through; False when it failed."""
    path = HERE / script
    print(f"== {script}: {what}", flush=True)
    if not path.exists():
        print(f"   skipped: {script} is not in this checkout", flush=True)
        return True
    if "--quick" in args and "--quick" not in path.read_text(encoding="utf-8"):
        args = [a for a in args if a != "--quick"]
        print(f"   ({script} has no --quick yet: full size)", flush=True)
    t0 = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, str(path), *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"   FAILED: still running after {timeout:.0f} s", flush=True)
        return False
    lines = ratio_lines(done.stdout)
    for ln in lines:
        print(f"   {ln.strip()}")
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-8:]
        print(f"   FAILED (exit {done.returncode}):", *(f"   | {t}" for t in tail), sep="\n")
        return False
    if not lines:
        print("   (no ratio line printed)")
    print(f"   ({time.perf_counter() - t0:.0f} s)", flush=True)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="run each script at its full size (no --quick)")
    ap.add_argument("--only", nargs="+", default=None, help="run only these scripts")
    ap.add_argument("--timeout", type=float, default=600, help="seconds allowed to each script")
    args = ap.parse_args(argv)
    ok = True
    for script, quick_args, what in BENCHMARKS:
        if args.only and script not in args.only:
            continue
        run_args = [a for a in quick_args if a != "--quick"] if args.full else quick_args
        ok &= run_one(script, run_args, what, args.timeout)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
