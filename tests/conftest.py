"""Shared fixtures: a small valid plan written into a temporary study folder."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
from plans import SMALL_PLAN
from tsa import tsa, tsa_factory  # noqa: F401 (fixtures: a local RFC 3161 TSA for any test file)


def pytest_configure(config):
    """Make the built-in trainer's ``prereg_kit.runners`` entry point visible when this checkout's
    installed metadata predates it (an editable install made before the entry point existed), so
    ``prereg run`` / ``prereg elect`` reach the trainer in these tests as in an up-to-date install.
    The stand-in metadata lives in a temporary folder on sys.path and on PYTHONPATH (subprocesses)."""
    from prereg_kit.runners import installed_runners

    if installed_runners():
        return
    root = Path(tempfile.mkdtemp(prefix="prereg-runner-"))
    info = root / "prereg_kit_builtin_runner-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: prereg-kit-builtin-runner\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[prereg_kit.runners]\nbuiltin = trainer.plugin:RUNNER\n")
    sys.path.append(str(root))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(root)) if p)



@pytest.fixture
def study(tmp_path: Path) -> Path:
    """A study folder holding the small plan (not locked)."""
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(SMALL_PLAN)
    return d
