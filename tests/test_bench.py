"""benchmarks/run_all.py (``make bench``): its list of benchmarks, how it passes ratio lines through,
and one quick benchmark end to end. No time is asserted: the ratios are for people to read."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def _run_all():
    spec = importlib.util.spec_from_file_location("bench_run_all", BENCH / "run_all.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_listed_benchmark_exists_or_is_in_flight():
    ra = _run_all()
    names = [script for script, _, _ in ra.BENCHMARKS]
    assert len(names) == len(set(names))
    for script, args, what in ra.BENCHMARKS:
        assert (BENCH / script).is_file() or script in ra.IN_FLIGHT, f"{script}: listed but missing"
        assert "--quick" in args and what
    for script in ("bench_crossed_bootstrap.py", "bench_trainer_cpu.py", "bench_guards.py", "bench_analyze.py",
                   "startup_speed.py", "stats_speed.py"):
        assert script in names


def test_present_benchmarks_accept_quick():
    for script in ("bench_crossed_bootstrap.py", "bench_guards.py", "bench_trainer_cpu.py"):
        assert "--quick" in (BENCH / script).read_text()


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
    monkeypatch.setattr(ra, "BENCHMARKS", [("good.py", ["--quick"], "good vs ref"), ("gone.py", ["--quick"], "x")])
    assert ra.main([]) == 0
    out = capsys.readouterr().out
    assert "ours 2.0× the reference" in out and "no ratio here" not in out
    assert "gone.py is not in this checkout" in out
    monkeypatch.setattr(ra, "BENCHMARKS", [("bad.py", ["--quick"], "bad vs ref")])
    assert ra.main([]) == 1
    assert "FAILED (exit 3)" in capsys.readouterr().out


@pytest.mark.parametrize("seeds", ["5"])
def test_crossed_bootstrap_benchmark_prints_ratio_lines(seeds):
    done = subprocess.run([sys.executable, str(BENCH / "bench_crossed_bootstrap.py"), "--quick", "--seeds", seeds],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = _run_all().ratio_lines(done.stdout)
    assert len(lines) == 1 and lines[0].startswith(f"crossed_bootstrap S={seeds} ")
    assert "× floor" in lines[0] and "× faster than loop" in lines[0] and "page faults/call" in lines[0]


def test_a_script_without_quick_runs_at_full_size(tmp_path, monkeypatch, capsys):
    ra = _run_all()
    (tmp_path / "plain.py").write_text("import sys\nassert len(sys.argv) == 1, sys.argv\nprint('3.0× ref')\n")
    monkeypatch.setattr(ra, "HERE", tmp_path)
    monkeypatch.setattr(ra, "BENCHMARKS", [("plain.py", ["--quick"], "plain vs ref")])
    assert ra.main([]) == 0
    out = capsys.readouterr().out
    assert "3.0× ref" in out and "no --quick yet" in out
