"""benchmarks/bench_loading.py's study writer: seeds written in chunks (as its processes write them)
are the same runs as one call for all seeds, every run sealed; a run the seal refuses stops it.
No time is asserted: the benchmark's numbers are for people to read (docs/performance.md)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pandas as pd
import pytest
from paths import ROOT


@pytest.fixture(scope="module")
def bl():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # it imports bench_analyze's plan
    try:
        spec = importlib.util.spec_from_file_location("bench_loading", ROOT / "benchmarks" / "bench_loading.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def _runs(root: Path) -> dict[str, tuple[pd.DataFrame, pd.DataFrame, object]]:
    from prereg_kit.runlog import read_run

    out = {}
    for folder in sorted(root.glob("runs/*/seed-*")):
        r = read_run(folder, strict=True)
        out[folder.relative_to(root).as_posix()] = (r.iterations, r.evals, r.meta.started_at)
    return out


def test_chunks_write_the_same_sealed_runs(bl, tmp_path):
    from prereg_kit.chain.lock import read_chain

    bl.make_study(tmp_path / "one", 3, 4, 5, 100)
    bl.make_study(tmp_path / "chunks", 3, 4, 5, 100, chunk=1)
    one, chunks = _runs(tmp_path / "one"), _runs(tmp_path / "chunks")
    assert len(one) == 12 and list(one) == list(chunks)
    t0 = {k: min(v[2] for v in runs.values()) for k, runs in (("one", one), ("chunks", chunks))}
    for key in one:
        pd.testing.assert_frame_equal(one[key][0], chunks[key][0])
        pd.testing.assert_frame_equal(one[key][1], chunks[key][1])
        assert one[key][2] - t0["one"] == chunks[key][2] - t0["chunks"]  # same start order and spacing
    for name in ("one", "chunks"):
        seals = read_chain(tmp_path / name / "plan.toml").seals
        assert sorted(s["run"] for s in seals) == sorted(one)


def test_a_run_the_seal_refuses_stops_the_writer(bl, tmp_path, monkeypatch):
    from prereg_kit.runlog import RunLogWriter

    finish = RunLogWriter.finish
    monkeypatch.setattr(RunLogWriter, "finish", lambda self, status="complete", **kw: finish(self, "failed", **kw))
    with pytest.raises(RuntimeError, match="only a complete run is sealed"):
        bl.make_study(tmp_path / "s", 1, 4, 5, 100)
