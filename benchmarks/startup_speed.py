"""Benchmark: how long a `prereg` process takes to start, as a ratio to `python -c "import pandas"`
and to the interpreter floor `python -c pass`, both measured in the same run.

Each command is a fresh process (wall time from spawn to exit, median of ``--repeat``), on a
small study locked in a temporary folder (the tests' small plan):

* ``prereg --help``;
* ``prereg lock <plan>`` (on a fresh copy of the study each time);
* ``prereg verify <study>``;
* ``import prereg_kit.analysis.analyze`` (what `analyze` and `report` pay before any work: pandas and
  scipy are its tools, so this one is expected near or above 1).

Every process reads its bytecode from one private cache (``PYTHONPYCACHEPREFIX`` in the temporary
folder, filled by a warm-up run of each command; ``PYTHONDONTWRITEBYTECODE`` is dropped), as an
installed package starts: neither checkout compiles its sources in a timed run, whatever the
environment says and whether a checkout holds ``__pycache__`` folders (a checkout with them and
one without would otherwise differ by the compile time of every module they import).

The references (``import pandas``; ``pass``, the interpreter's own start) are timed in the same
run, interleaved with ours, so a busy machine slows all alike. Lines read
``startup  prereg --help  0.79× import pandas  3.10× python -c pass  (650 ms, CPU 600 ms)``: ratios
of wall times; the process's CPU seconds (user + system, its children included) are shown beside,
steadier than wall time when other processes share the cores.

    python3 benchmarks/startup_speed.py [--repeat 5] [--before /path/to/other/checkout] [--numba] [--quick]

``--quick`` (make bench): medians of 3 processes per command.

``--numba`` also times the tabular recursion (analyses.tabular, n = 8) in two fresh processes
sharing an empty ``PREREG_CACHE``: the first compiles its numba kernels and caches them, the second
loads them.

``--before`` also times the same commands from another checkout (e.g. the commit before a change),
interleaved with ours, and prints its ratio beside ours.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests")]

PRE = [sys.executable, "-m", "prereg_kit"]


def wall(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    """Seconds from spawning ``cmd`` to its exit (it must succeed); its CPU seconds (user + system)
    are appended to ``CPU``."""
    t0 = time.perf_counter()
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.append(c1.ru_utime - c0.ru_utime + c1.ru_stime - c0.ru_stime)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {res.stdout}{res.stderr}")
    return dt


CPU: list[float] = []  # CPU seconds of each process ``wall`` ran, in order


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="processes per command (median reported)")
    ap.add_argument("--before", type=Path, help="another checkout to time beside this one")
    ap.add_argument("--numba", action="store_true", help="also time the tabular kernels' compile cache")
    ap.add_argument("--quick", action="store_true", help="3 processes per command (make bench)")
    args = ap.parse_args()
    if args.quick:
        args.repeat = min(args.repeat, 3)
    from plans import SMALL_PLAN

    roots = {"ours": ROOT, **({"before": args.before.resolve()} if args.before else {})}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        envs = {k: {**base, "PYTHONPATH": str(r), "PYTHONPYCACHEPREFIX": str(tmp / "pycache")} for k, r in roots.items()}
        env = envs["ours"]
        template = tmp / "template"
        template.mkdir()
        (template / "plan.toml").write_text(SMALL_PLAN)
        study = tmp / "study"
        shutil.copytree(template, study)
        wall([*PRE, "lock", str(study / "plan.toml")], env, tmp)
        commands = {
            "prereg --help": lambda i: [*PRE, "--help"],
            "prereg lock": lambda i: [*PRE, "lock", str(_fresh(template, tmp / f"lock-{i}") / "plan.toml")],
            "prereg verify": lambda i: [*PRE, "verify", str(study)],
            "import prereg_kit.analysis.analyze": lambda i: [sys.executable, "-c", "import prereg_kit.analysis.analyze"],
        }
        ref_cmd = [sys.executable, "-c", "import pandas"]
        floor_cmd = [sys.executable, "-c", "pass"]
        wall(ref_cmd, env, tmp)  # warm the file cache and fill the bytecode cache for both sides
        wall(floor_cmd, env, tmp)
        for k, e in envs.items():
            for make in commands.values():
                wall(make(f"{k}-warm"), e, tmp)
        times: dict[tuple[str, str], list[float]] = {(k, name): [] for k in envs for name in commands}
        cpu: dict[tuple[str, str], list[float]] = {key: [] for key in times}
        ref: list[float] = []
        floor: list[float] = []
        ref_cpu: list[float] = []
        floor_cpu: list[float] = []
        for i in range(args.repeat):  # interleaved: a burst of load slows every side alike
            ref.append(wall(ref_cmd, env, tmp))
            ref_cpu.append(CPU[-1])
            floor.append(wall(floor_cmd, env, tmp))
            floor_cpu.append(CPU[-1])
            for k, e in envs.items():
                for name, make in commands.items():
                    times[k, name].append(wall(make(f"{k}-{i}"), e, tmp))
                    cpu[k, name].append(CPU[-1])
    med = statistics.median
    r, f = med(ref), med(floor)
    print(f"reference: python -c 'import pandas'  {r * 1e3:.0f} ms, CPU {med(ref_cpu) * 1e3:.0f} ms (median of {args.repeat})")
    print(f"reference: python -c pass             {f * 1e3:.0f} ms, CPU {med(floor_cpu) * 1e3:.0f} ms")
    for name in commands:
        m = med(times["ours", name])
        before = ""
        if "before" in envs:
            b = med(times["before", name])
            before = f"   before: {b / r:5.2f}× {b / f:5.2f}× ({b * 1e3:.0f} ms, CPU {med(cpu['before', name]) * 1e3:.0f} ms)"
        print(f"startup  {name:<26} {m / r:5.2f}× import pandas {m / f:5.2f}× python -c pass   "
              f"({m * 1e3:.0f} ms, CPU {med(cpu['ours', name]) * 1e3:.0f} ms){before}")
    if args.numba:
        numba_cache()


TABULAR = """\
import time
t0 = time.perf_counter()
from analyses.tabular import iterations_to_reach
iterations_to_reach((0.8, 0.01, 0.19), rule="grpo", eta=0.2, rho=0.5, n=8, alpha=1.0, action=1,
                    threshold=0.5, max_iter=10**5)
print(time.perf_counter() - t0)
"""


def numba_cache() -> None:
    """First and second process of the tabular recursion on one empty cache folder."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PREREG_CACHE": str(Path(tmp) / "numba")}
        inner, outer = [], []
        for _ in range(2):
            t0 = time.perf_counter()
            res = subprocess.run([sys.executable, "-c", TABULAR], env=env, capture_output=True, text=True, check=True)
            outer.append(time.perf_counter() - t0)
            inner.append(float(res.stdout.split()[-1]))
    print(f"numba cache  first process {outer[0]:.2f} s (import + compile + run {inner[0]:.2f} s), "
          f"second {outer[1]:.2f} s ({inner[1]:.2f} s): second/first {outer[1] / outer[0]:.2f}×")


def _fresh(template: Path, dest: Path) -> Path:
    shutil.copytree(template, dest)
    return dest


if __name__ == "__main__":
    main()
