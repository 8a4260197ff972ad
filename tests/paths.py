"""Where the tests find the repository: its root (``ROOT``), ``tests/`` (``TESTS``), the
reference data in ``tests/data/`` (``DATA``) and the folders of test modules
(:func:`folders_with_tests`), computed once here, so that no test file computes them from its own
depth in the tree (docs/testing.md, "Where tests live")."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DATA = TESTS / "data"


def folders_with_tests() -> list[Path]:
    """The folders of ``tests/`` that hold test modules: on ``sys.path`` in every test process
    (tests/conftest.py), so that a module imports a helper of another folder's module by its name,
    and in the benchmarks that time the tests' own inputs (benchmarks/bench_guards.py)."""
    return sorted(p for p in TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py")))
