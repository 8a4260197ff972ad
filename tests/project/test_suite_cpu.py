"""benchmarks/suite_cpu.py: the default suite's CPU time test by test (a pytest plugin of its own),
and two measurements compared on the tests they share."""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import pytest
from paths import ROOT

_spec = importlib.util.spec_from_file_location("bench_suite_cpu", ROOT / "benchmarks" / "suite_cpu.py")
sc = importlib.util.module_from_spec(_spec)  # a script of benchmarks/, not a package
_spec.loader.exec_module(sc)

BURN = "x = 0\nfor i in range(2_000_000):\n    x += i\n"
TESTS = f'''
import subprocess, sys

def test_burns():
{textwrap.indent(BURN, "    ")}
def test_starts_a_burning_child():
    subprocess.run([sys.executable, "-c", {BURN!r}], check=True)

def test_fast():
    pass
'''


# The measured runs load only the plugins they need (pytest-xdist's, the script's): each process
# then starts in a fraction of the time every installed plugin costs it.
LEAN = ["-p", "xdist.plugin"]


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> tuple[Path, dict]:
    """A checkout of four tests in two folders, measured with two workers as `make test` runs:
    every worker writes its own rows."""
    root = tmp_path_factory.mktemp("checkout")
    (root / "sub").mkdir()
    (root / "test_a.py").write_text(TESTS)
    (root / "sub" / "test_b.py").write_text("def test_fast():\n    pass\n")
    out = root.parent / (root.name + "-out")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
        return out, sc.measure(root, out, workers=2, extra=LEAN)


def _rows(out: Path) -> dict[str, dict]:
    rows = {}
    for f in out.glob("gw*.json"):
        rows.update({r["test"]: r for r in json.loads(f.read_text())
                     if not r["test"].startswith("<")})
    return rows


def test_each_test_has_its_own_cpu_and_its_childrens(measured):
    out, total = measured
    assert total["exit_code"] == 0 and total["summary"].startswith("4 passed"), total
    assert {f.name for f in out.glob("*.json")} >= {"gw0.json", "gw1.json", "total.json"}
    rows = _rows(out)
    assert set(rows) == {"test_a.py::test_burns", "test_a.py::test_starts_a_burning_child", "test_a.py::test_fast",
                         "sub/test_b.py::test_fast"}
    burn, child, fast = (rows[f"test_a.py::{t}"] for t in ("test_burns", "test_starts_a_burning_child", "test_fast"))
    assert burn["self"] > 0.03 and burn["children"] < 0.01  # its own loop, in the worker
    assert child["children"] > 0.03 and child["self"] < burn["self"]  # the same loop, in a child it waited for
    assert fast["self"] + fast["children"] < burn["self"]
    tests = sum(r["self"] + r["children"] for r in rows.values())
    assert total["user"] + total["system"] > tests  # the whole command: the tests and the workers' start-up


def test_one_process_inside_a_worker_with_a_failing_test_is_measured_and_said(measured, monkeypatch, tmp_path):
    """A checkout whose own addopts has -q (as this project's) and one failing test, measured from
    inside a pytest-xdist worker: its file is the run's own (main.json), not named after the
    worker, and the closing counts and exit status say the failure."""
    out, _ = measured
    assert all(r["test"].startswith("<") for r in json.loads((out / "main.json").read_text()))  # the controller runs no test
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw7")  # as in this suite's own workers
    root = tmp_path / "one"
    root.mkdir()
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "-q"\n')
    (root / "test_c.py").write_text("def test_c():\n    pass\n\ndef test_d():\n    assert False\n")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    total = sc.measure(root, tmp_path / "out")
    assert sorted(f.name for f in (tmp_path / "out").glob("*.json")) == ["main.json", "total.json"]
    assert total["exit_code"] == 1 and total["summary"].startswith("1 failed, 1 passed"), total
    rows = [r["test"] for r in json.loads((tmp_path / "out" / "main.json").read_text())]
    assert rows == ["<collection>", "test_c.py::test_c", "test_c.py::test_d", "<process>"]


def test_one_process_is_the_suites_command_without_workers():
    assert "-n" not in sc.suite_command(0, [])
    assert sc.suite_command(2, ["-x"])[-5:] == ["-n", "2", "--dist", "loadgroup", "-x"]
    assert sc.suite_command(0, [])[3:5] == ["-m", "not slow"]
    assert "-q" not in sc.suite_command(2, [])  # the project's addopts has it: -qq would drop the closing counts


@pytest.mark.parametrize("nodeid, key", [
    ("tests/test_x.py::t", "test_x.py::t"),
    ("tests/a/test_x.py::t[1]@g", "test_x.py::t[1]"),  # moved into a folder; xdist's group suffix
    ("tests/a/test_x.py::t[a@b]", "test_x.py::t[a@b]"),  # an @ inside a parameter stays
    ("tests/a/test_x.py::t[a@b]@test_x", "test_x.py::t[a@b]"),
    ("tests/a/test_x.py::C::t", "test_x.py::C::t"),
])
def test_a_test_keeps_its_key_across_folders_and_groups(nodeid, key):
    assert sc.key_of(nodeid) == key


def _write(out: Path, rows: dict[str, tuple[float, float]], cpu: float, summary: str) -> None:
    out.mkdir()
    (out / "gw0.json").write_text(json.dumps(
        [{"test": "<collection>", "self": 2.0, "children": 0.0, "wall": None}]
        + [{"test": k, "self": s, "children": c, "wall": s} for k, (s, c) in rows.items()]))
    (out / "total.json").write_text(json.dumps({"checkout": str(out), "workers": 2, "exit_code": 0, "wall": 9.0,
                                                "user": cpu * 0.9, "system": cpu * 0.1, "load_before": 1.0,
                                                "load_after": 2.0, "summary": summary}))


def test_compare_matches_moved_tests_and_counts_the_new_and_the_gone(tmp_path):
    _write(tmp_path / "a", {"tests/test_x.py::t": (4.0, 0.0), "tests/test_y.py::u[1]": (1.0, 1.0),
                            "tests/test_gone.py::g": (3.0, 0.0)}, 20.0, "3 passed")
    _write(tmp_path / "b", {"tests/a/test_x.py::t@test_x": (1.0, 0.5), "tests/b/test_y.py::u[1]": (1.5, 0.0),
                            "tests/b/test_new.py::n": (0.25, 0.0), "tests/b/test_new.py::m": (0.5, 0.0)},
           15.0, "4 passed")
    c = sc.comparison(sc.per_test(tmp_path / "a")[0], sc.per_test(tmp_path / "b")[0])
    assert (c["matched"], c["matched_a"], c["matched_b"]) == (2, 6.0, 3.0)
    assert (c["only_a"], c["only_a_cpu"], c["only_b"], c["only_b_cpu"]) == (1, 3.0, 2, 0.75)
    assert c["only_b_top"] == ["test_new.py::m", "test_new.py::n"]  # dearest first
    text = "\n".join(sc.compare(tmp_path / "a", tmp_path / "b", top=1))
    assert "whole suite, B / A: 0.75×" in text
    assert "the 2 tests in both: A 6.0 s, B 3.0 s of CPU, B / A 0.50×" in text
    assert "only in A: 1 test, 3.0 s; only in B: 2 tests, 0.8 s" in text
    assert "test_new.py::m" in text and "test_new.py::n" not in text  # --top 1
    assert "collection A 2.0 s, B 2.0 s" in text
