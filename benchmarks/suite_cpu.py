"""The default suite's CPU time, test by test, and two checkouts compared on the tests they share.

The budget of the default suite (docs/testing.md) is a CPU time, user + system with the processes
the tests start; ``/usr/bin/time`` gives the total, but not where it goes, nor how much of a change
is new tests rather than old ones grown dearer. This script does both:

    python3 benchmarks/suite_cpu.py measure CHECKOUT OUT [--workers N] [PYTEST_ARG ...]
    python3 benchmarks/suite_cpu.py compare OUT_A OUT_B [--top N]

``measure`` runs ``python -m pytest -m "not slow"`` in CHECKOUT (one process, or ``--workers N``
pytest-xdist workers with ``--dist loadgroup`` as ``make test`` runs it), with this file loaded as
a pytest plugin. Each process of the run writes ``OUT/<worker>.json``: for every test, the CPU of
its process and of the processes it started and waited for, from the start of its setup to the end
of its teardown; its collection; and its whole run. ``OUT/total.json`` holds the whole command's CPU
(pytest's process and every child, as ``/usr/bin/time`` counts it), its wall time, the load average
before and after, and pytest's closing line. CHECKOUT needs only pytest (and pytest-xdist for
``--workers``): the plugin uses no part of the project, so an old commit is measured as it was.

``compare`` matches the tests of two measurements by test file name and test (an xdist group suffix
dropped), so a test whose file moved to another folder is still the same test, and prints the two
totals, the matched tests' CPU in A and B with their ratio, and the tests only in A or only in B.

pytest-benchmark times code inside a test, not a test with its fixtures and children; no plugin we
found reports user + system CPU per test with the children included, so this one is our own.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

OUT_ENV = "SUITE_CPU_OUT"
COUNTS = re.compile(r"\d+ (passed|failed|errors?)\b")
HERE = Path(__file__).resolve().parent


# --- the pytest plugin (loaded with -p suite_cpu) ------------------------------------------------

def _cpu() -> tuple[float, float]:
    """CPU seconds (user + system) of this process, and of its children that were waited for."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


class _Recorder:
    """Rows of one pytest process: one per test, one for its collection, one for the whole run."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.rows: list[dict] = []
        self.start = _cpu()

    def row(self, name: str, since: tuple[float, float], wall: float | None = None) -> None:
        now = _cpu()
        self.rows.append({"test": name, "self": now[0] - since[0], "children": now[1] - since[1], "wall": wall})

    def pytest_collection_finish(self, session) -> None:
        self.row("<collection>", self.start)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        """Around setup, call and teardown of one test."""
        since, t0 = _cpu(), time.perf_counter()
        yield
        self.row(item.nodeid, since, time.perf_counter() - t0)

    def pytest_sessionfinish(self, session) -> None:
        self.row("<process>", self.start)
        self.out.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        (self.out / f"{worker}.json").write_text(json.dumps(self.rows))


def pytest_configure(config) -> None:
    out = os.environ.get(OUT_ENV)
    if out:
        config.pluginmanager.register(_Recorder(Path(out)), "suite_cpu_recorder")


# --- measure -----------------------------------------------------------------------------------

def suite_command(workers: int, extra: list[str]) -> list[str]:
    """The default suite's command line: one process, or ``make test``'s workers and grouping."""
    # no -q: the checkout's own addopts decide (a second -q would drop pytest's closing counts)
    cmd = [sys.executable, "-m", "pytest", "-m", "not slow", "-p", "no:cacheprovider", "-p", "suite_cpu"]
    if workers:
        cmd += ["-n", str(workers), "--dist", "loadgroup"]
    return cmd + extra


def measure(checkout: Path, out: Path, workers: int = 0, extra: list[str] | None = None, echo=None) -> dict:
    """Run the default suite of ``checkout`` with the plugin; write and return ``OUT/total.json``.
    pytest's output goes to ``OUT/pytest.log`` and, line by line as it comes, to ``echo`` (a text
    stream: its progress, for a run of minutes)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.json"):
        old.unlink()
    path = os.pathsep.join([str(HERE), str(checkout), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    # not an outer pytest's worker identity (its files would be named after it) nor its current test
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_") and k != "PYTEST_CURRENT_TEST"}
    env.update(PYTHONPATH=path, **{OUT_ENV: str(out.resolve())})
    load_before, before, t0 = os.getloadavg(), resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    with open(out / "pytest.log", "w") as log, subprocess.Popen(
            suite_command(workers, extra or []), cwd=checkout, env=env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        text = []
        for line in proc.stdout:
            log.write(line)
            text.append(line)
            if echo is not None:
                echo.write(line)
                echo.flush()
    wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [ln for ln in "".join(text).splitlines() if ln.strip()]
    lines = [ln for ln in lines if COUNTS.search(ln)] or lines  # pytest's closing counts, if it printed them
    total = {"checkout": str(checkout), "workers": workers, "exit_code": proc.returncode, "wall": wall,
             "user": after.ru_utime - before.ru_utime, "system": after.ru_stime - before.ru_stime,
             "load_before": load_before[0], "load_after": os.getloadavg()[0],
             "summary": lines[-1].strip("= ") if lines else ""}
    (out / "total.json").write_text(json.dumps(total, indent=1))
    return total


# --- compare -----------------------------------------------------------------------------------

def key_of(nodeid: str) -> str:
    """A test's name across layouts: its file's name and the test, without the folder or the
    ``@group`` suffix pytest-xdist's loadgroup adds (``tests/a/test_x.py::t[1]@g`` → ``test_x.py::t[1]``).
    Test file names are unique across this project's folders (tests/project/test_layout.py); two
    files of one name elsewhere would count as one."""
    file, _, rest = nodeid.partition("::")
    return Path(file).name + "::" + re.sub(r"@[^@\]]+$", "", rest)


def per_test(out: Path) -> tuple[dict[str, float], dict[str, float]]:
    """CPU seconds (the process's and its children's) per test key, and per special row
    (``<collection>``, ``<process>``) summed over the run's processes."""
    tests: dict[str, float] = defaultdict(float)
    special: dict[str, float] = defaultdict(float)
    for f in sorted(out.glob("*.json")):
        if f.name == "total.json":
            continue
        for r in json.loads(f.read_text()):
            cpu = r["self"] + r["children"]
            if r["test"].startswith("<"):
                special[r["test"]] += cpu
            else:
                tests[key_of(r["test"])] += cpu
    return dict(tests), dict(special)


def comparison(a: dict[str, float], b: dict[str, float]) -> dict:
    """The tests of two runs: those in both (their CPU in each), and those only in one."""
    both = sorted(set(a) & set(b))
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    return {"matched": len(both), "matched_a": sum(a[k] for k in both), "matched_b": sum(b[k] for k in both),
            "only_a": len(only_a), "only_a_cpu": sum(a[k] for k in only_a),
            "only_b": len(only_b), "only_b_cpu": sum(b[k] for k in only_b),
            "only_a_top": sorted(only_a, key=lambda k: -a[k]), "only_b_top": sorted(only_b, key=lambda k: -b[k])}


def _tests(n: int) -> str:
    return f"{n} test" + ("" if n == 1 else "s")


def _total_line(name: str, out: Path) -> str:
    t = json.loads((out / "total.json").read_text()) if (out / "total.json").exists() else None
    if t is None:
        return f"{name}: {out} (no total.json: tests only)"
    how = f"{t['workers']} workers" if t["workers"] else "one process"
    return (f"{name}: {t['checkout']}, {how}: {t['user']:.1f} + {t['system']:.1f} = {t['user'] + t['system']:.1f} s "
            f"of CPU, {t['wall']:.0f} s wall, load {t['load_before']:.2f} → {t['load_after']:.2f}; {t['summary']}")


def compare(out_a: Path, out_b: Path, top: int = 10) -> list[str]:
    """The lines ``compare`` prints (each ratio B over A, with its ×)."""
    (a, sa), (b, sb) = per_test(out_a), per_test(out_b)
    c = comparison(a, b)
    lines = [_total_line("A", out_a), _total_line("B", out_b)]
    totals = [json.loads((o / "total.json").read_text()) for o in (out_a, out_b) if (o / "total.json").exists()]
    if len(totals) == 2:
        ta, tb = totals
        lines.append(f"whole suite, B / A: {(tb['user'] + tb['system']) / (ta['user'] + ta['system']):.2f}×")
    lines += [f"tests: A {len(a)}, B {len(b)}; collection A {sa.get('<collection>', 0):.1f} s, "
              f"B {sb.get('<collection>', 0):.1f} s of CPU (every process's)",
              f"the {c['matched']} tests in both: A {c['matched_a']:.1f} s, B {c['matched_b']:.1f} s of CPU, "
              f"B / A {c['matched_b'] / c['matched_a'] if c['matched_a'] else float('nan'):.2f}×",
              f"only in A: {_tests(c['only_a'])}, {c['only_a_cpu']:.1f} s; only in B: {_tests(c['only_b'])}, "
              f"{c['only_b_cpu']:.1f} s"]
    for side, keys, cpu in (("A", c["only_a_top"], a), ("B", c["only_b_top"], b)):
        lines += [f"  only in {side}: {cpu[k]:6.2f} s  {k}" for k in keys[:top]]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="run a checkout's default suite with the per-test CPU plugin")
    m.add_argument("checkout", type=Path)
    m.add_argument("out", type=Path)
    m.add_argument("--workers", type=int, default=0, help="pytest-xdist workers (0: one process)")
    c = sub.add_parser("compare", help="two measurements, test by test")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    c.add_argument("--top", type=int, default=10, help="how many tests only in A or only in B to list")
    args, extra = ap.parse_known_args(argv)
    if args.cmd == "measure":
        how = f"{args.workers} workers" if args.workers else "one process"
        print(f"measuring {args.checkout}'s default suite ({how}); pytest's output follows and is kept in "
              f"{args.out / 'pytest.log'}", file=sys.stderr)
        t = measure(args.checkout.resolve(), args.out, args.workers, extra, echo=sys.stderr)
        print(_total_line("run", args.out))
        return t["exit_code"]  # pytest's: a failed test is still measured, and still said
    if extra:
        ap.error(f"unrecognized arguments: {' '.join(extra)}")
    print("\n".join(compare(args.a, args.b, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
