"""Shared fixtures: a small valid plan written into a temporary study folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from plans import SMALL_PLAN
from tsa import tsa, tsa_factory  # noqa: F401 (fixtures: a local RFC 3161 TSA for any test file)


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """A study folder holding the small plan (not locked)."""
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(SMALL_PLAN)
    return d
