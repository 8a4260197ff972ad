"""benchmarks/run_all.py (``make bench``): its list of benchmarks (every script of benchmarks/ in it or
named with the reason it is not), their CPU budget and timeouts, how it passes ratio lines through,
a timeout stopping what a script started, and one quick benchmark end to end. No time is asserted:
the ratios are for people to read."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time

import pytest
from paths import ROOT

BENCH = ROOT / "benchmarks"


def _run_all():
    spec = importlib.util.spec_from_file_location("bench_run_all", BENCH / "run_all.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_listed_benchmark_exists_or_is_in_flight():
    ra = _run_all()
    names = [b.script for b in ra.BENCHMARKS]
    assert len(names) == len(set(names))
    for b in ra.BENCHMARKS:
        assert (BENCH / b.script).is_file() or b.script in ra.IN_FLIGHT, f"{b.script}: listed but missing"
        assert "--quick" in b.quick and b.what and b.cpu_s > 0


def test_every_benchmark_script_is_run_by_make_bench_or_said_why_not():
    """A new script in benchmarks/ cannot be forgotten: it is in make bench's list, or named with a reason."""
    ra = _run_all()
    listed = {b.script for b in ra.BENCHMARKS}
    assert not listed & set(ra.NOT_RUN)
    assert all(why for why in ra.NOT_RUN.values())
    for path in sorted(BENCH.glob("*.py")):
        assert path.name in listed or path.name in ra.NOT_RUN, f"{path.name}: add it to BENCHMARKS in run_all.py"
    for name in ra.NOT_RUN:
        assert (BENCH / name).is_file(), f"{name}: named in NOT_RUN but not in benchmarks/"


def test_every_listed_benchmark_has_a_quick_mode():
    for b in _run_all().BENCHMARKS:
        if (BENCH / b.script).is_file():
            assert 'add_argument("--quick"' in (BENCH / b.script).read_text(encoding="utf-8"), b.script


def test_quick_modes_fit_the_cpu_budget_and_their_timeouts_are_generous():
    ra = _run_all()
    assert sum(b.cpu_s for b in ra.BENCHMARKS) <= ra.QUICK_CPU_BUDGET_S == 300
    for b in ra.BENCHMARKS:
        t = ra.timeout_for(b, full=False, fixed=None)
        assert t >= 300 and t >= 10 * b.cpu_s  # a loaded machine stretches wall time: that is no failure
        assert ra.timeout_for(b, full=True, fixed=None) is None  # full sizes run as long as they take
        assert ra.timeout_for(b, full=True, fixed=5) == ra.timeout_for(b, full=False, fixed=5) == 5


def test_ratio_lines_keep_ratios_only():
    ra = _run_all()
    out = "header: 24 seeds × 1543 problems\ncrossed_bootstrap S=24  1.04× floor  3.9× faster than loop\n" \
          "loop 12,396 ms\nplan nested 100,000 deep   0.15×  vs the 3-seed plan\n"
    assert ra.ratio_lines(out) == ["crossed_bootstrap S=24  1.04× floor  3.9× faster than loop",
                                   "plan nested 100,000 deep   0.15×  vs the 3-seed plan"]


def test_missing_script_is_skipped_and_a_failing_one_fails(tmp_path, monkeypatch, capsys):
    ra = _run_all()
    (tmp_path / "good.py").write_text("print('ours 2.0× the reference')\nprint('no ratio here')\n")
    (tmp_path / "bad.py").write_text("print('1.5× so far'); raise SystemExit(3)\n")
    monkeypatch.setattr(ra, "HERE", tmp_path)
    monkeypatch.setattr(ra, "BENCHMARKS", [ra.Bench("good.py", ["--quick"], "good vs ref", 1),
                                           ra.Bench("gone.py", ["--quick"], "x", 1)])
    assert ra.main([]) == 0
    out = capsys.readouterr().out
    assert "ours 2.0× the reference" in out and "no ratio here" not in out
    assert "gone.py is not in this checkout" in out
    assert "CPU" in out and "load average" in out and "every script finished" in out
    monkeypatch.setattr(ra, "BENCHMARKS", [ra.Bench("bad.py", ["--quick"], "bad vs ref", 1)])
    assert ra.main([]) == 1
    out = capsys.readouterr().out
    assert "FAILED (exit 3)" in out and "FAILED: bad.py" in out


def test_full_drops_quick(tmp_path, monkeypatch, capsys):
    ra = _run_all()
    (tmp_path / "plain.py").write_text("import sys\nprint(f'{len(sys.argv)}.0× args')\n")
    monkeypatch.setattr(ra, "HERE", tmp_path)
    monkeypatch.setattr(ra, "BENCHMARKS", [ra.Bench("plain.py", ["--quick"], "plain vs ref", 1)])
    assert ra.main(["--full"]) == 0
    assert "1.0× args" in capsys.readouterr().out
    assert ra.main([]) == 0
    assert "2.0× args" in capsys.readouterr().out


def test_a_timeout_stops_the_script_and_what_it_started(tmp_path, monkeypatch, capsys):
    ra = _run_all()
    pidfile = tmp_path / "child.pid"
    (tmp_path / "hangs.py").write_text(
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(120)\n")
    monkeypatch.setattr(ra, "HERE", tmp_path)
    monkeypatch.setattr(ra, "BENCHMARKS", [ra.Bench("hangs.py", ["--quick"], "hangs", 1)])
    assert ra.main(["--timeout", "3"]) == 1
    assert "FAILED: still running after 3 s" in capsys.readouterr().out
    pid = int(pidfile.read_text())
    for _ in range(50):  # the orphan is reaped by whoever adopted it
        if not _alive(pid):
            break
        time.sleep(0.1)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def test_gradient_memory_ratio_lines():
    spec = importlib.util.spec_from_file_location("gradient_memory", BENCH / "gradient_memory.py")
    gm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gm)
    rows = [{"model": m, "P": p, "R": r, "subspace": v, "held_MB": h, "s_per_batch": t}
            for m, p, r, v, h, t in [("S", 100, 3, 8, 1.0, 0.5), ("M", 300, 1, 8, 3.0, 0.5), ("M", 300, 3, 8, 3.0, 1.0),
                                     ("M", 300, 3, 16, 5.0, 1.5), ("L", 1200, 3, 8, 12.0, 4.0)]]
    assert gm.ratio_lines(rows) == [
        "R = 3 vs R = 1 (model M, subspace 8): held memory 1.00×, time per batch 2.00×",
        "subspace 16 vs 8 (model M, R = 3): held memory 1.67×, time per batch 1.50×",
        "model M vs S (R = 3, subspace 8): held memory 3.00×, time per batch 2.00× (P 3.00×)",
        "model L vs M (R = 3, subspace 8): held memory 4.00×, time per batch 4.00× (P 4.00×)"]


@pytest.mark.parametrize("seeds", ["5"])
def test_crossed_bootstrap_benchmark_prints_ratio_lines(seeds):
    done = subprocess.run([sys.executable, str(BENCH / "bench_crossed_bootstrap.py"), "--quick", "--seeds", seeds],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = _run_all().ratio_lines(done.stdout)
    assert len(lines) == 1 and lines[0].startswith(f"crossed_bootstrap S={seeds} ")
    assert "× floor" in lines[0] and "× faster than loop" in lines[0] and "page faults/call" in lines[0]


def test_every_test_module_a_benchmark_imports_is_on_its_path():
    """A benchmark that times the tests' own inputs (`from test_verify import adversarial`) finds
    the module in the folder it lives in now: the module exists under tests/, and a script that
    imports one from a test folder puts the test folders on its path (paths.folders_with_tests)."""
    import ast

    from paths import TESTS, folders_with_tests

    helpers = {p.stem: p for p in TESTS.glob("*.py")}
    in_folders = {p.stem: p for f in folders_with_tests() for p in f.glob("*.py")}
    checked = 0
    for script in sorted(BENCH.glob("*.py")):
        tree = ast.parse(script.read_text())
        names = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and n.level == 0}
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        for name in sorted(n for n in names if n in helpers or n in in_folders or n.startswith("test_")):
            assert name in helpers or name in in_folders, f"{script.name}: imports {name}, which is not under tests/"
            if name not in helpers:
                assert "folders_with_tests()" in script.read_text(), \
                    f"{script.name}: imports {name} from {in_folders[name].parent.name}/ without the test folders on its path"
            checked += 1
    assert checked >= 5  # bench_guards.py's test modules, startup_speed.py's plans
