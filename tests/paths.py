"""Where the tests find the repository: its root (``ROOT``), ``tests/`` (``TESTS``) and the
reference data in ``tests/data/`` (``DATA``), computed once here, so that no test file computes
them from its own depth in the tree (docs/testing.md, "Where tests live")."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DATA = TESTS / "data"
