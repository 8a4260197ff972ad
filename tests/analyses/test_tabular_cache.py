"""The tabular recursion's numba kernels are cached on disk (``$PREREG_CACHE`` or
``~/.cache/prereg-kit/numba``): a second process loads them instead of compiling, and a folder
that cannot be written means compiling without a cache, never an error."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from paths import ROOT

pytest.importorskip("numba")


RUN = """\
import json, sys, time
import numpy as np
t0 = time.perf_counter()
from analyses import tabular as t
t._kernel()  # the three kernels, each given its cache; none compiled yet
caches = {name: getattr(t, name)._cache.cache_path for name in ("_softmax_into", "_step", "_recurse")}
if sys.argv[1] == "all":  # compiles (or loads) every kernel
    n = t.iterations_to_reach((0.8, 0.01, 0.19), rule="grpo", eta=0.2, rho=0.5, n=4, alpha=1.0, action=1,
                              threshold=0.5, max_iter=10**5)
    _, traj = t.run_recursion((0.8, 0.01, 0.19), rule="grpo", eta=0.2, rho=0.5, n=4, alpha=0.5, steps=40,
                              record_at=[0, 7, 40])
    traj = traj.tolist()
else:  # compiles (or loads) the smallest kernel alone
    n, pi = None, np.empty(3)
    t._softmax_into(np.array([0.3, -1.2, 2.0]), pi)
    traj = pi.tolist()
folder = t.numba_cache_dir()
print(json.dumps({"n": n, "traj": traj, "folder": None if folder is None else str(folder), "caches": caches,
                  "seconds": time.perf_counter() - t0}))
"""
KERNELS = {"tabular._recurse", "tabular._step", "tabular._softmax_into"}
# The default suite compiles the smallest kernel in each process (0.5 s of CPU, against 3.5 s for
# all three); the slow step compiles and loads all three, the recursion run end to end.
WHICH = ["one", pytest.param("all", marks=pytest.mark.slow)]


def _run(cache: Path | str, which: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREREG_CACHE": str(cache)}
    res = subprocess.run([sys.executable, "-c", RUN, which], capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env=env)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if which == "one":
        assert out["traj"] == pytest.approx(np.exp([0.3, -1.2, 2.0]) / np.exp([0.3, -1.2, 2.0]).sum(), rel=1e-12)
    else:
        assert out["n"] is not None
    return out


def _cache_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix in (".nbi", ".nbc"))


@pytest.mark.parametrize("which", WHICH)
def test_second_process_loads_the_kernels_from_the_cache(tmp_path: Path, which):
    cache = tmp_path / "numba"
    first = _run(cache, which)
    assert first["folder"] == str(cache)
    # every kernel is given a cache in the folder, compiled in this process or not
    assert all(Path(c).is_relative_to(cache) for c in first["caches"].values()), first["caches"]
    files = _cache_files(cache)
    names = {p.name.split("-")[0] for p in files}
    assert names == (KERNELS if which == "all" else {"tabular._softmax_into"}), files
    stamps = {p: p.stat().st_mtime_ns for p in files}
    second = _run(cache, which)
    assert second["n"] == first["n"] and second["traj"] == first["traj"]  # the same numbers, to the bit
    # loaded, not compiled and written again: no new cache file, none rewritten
    assert _cache_files(cache) == files
    assert {p: p.stat().st_mtime_ns for p in files} == stamps


@pytest.mark.parametrize("which", WHICH)
def test_unwritable_folder_compiles_without_a_cache(tmp_path: Path, which):
    """Neither a folder under a file (no one can create it) nor a read-only folder stops the
    recursion; nothing is written there."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    under_file = _run(blocker / "numba", which)
    assert under_file["folder"] is None and set(under_file["caches"].values()) == {None}
    if os.geteuid() == 0:  # root writes into a 0o500 folder: that case only means something for users
        return
    ro = tmp_path / "read-only"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)  # 0o500
    try:
        out = _run(ro, which)
        assert out["folder"] is None and not _cache_files(ro) and set(out["caches"].values()) == {None}
        assert out["n"] == under_file["n"] and out["traj"] == under_file["traj"]
    finally:
        ro.chmod(stat.S_IRWXU)


def test_numba_cache_dir_defaults_to_the_home_cache(tmp_path: Path, monkeypatch):
    from analyses.tabular import numba_cache_dir

    monkeypatch.delenv("PREREG_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert numba_cache_dir() == tmp_path / ".cache" / "prereg-kit" / "numba"
    assert (tmp_path / ".cache" / "prereg-kit" / "numba").is_dir()
    monkeypatch.setenv("PREREG_CACHE", str(tmp_path / "elsewhere"))
    assert numba_cache_dir() == tmp_path / "elsewhere"


def test_a_folder_that_refuses_writes_is_not_used(tmp_path: Path, monkeypatch):
    """What a 0o500 folder does for a non-root user (root ignores the mode): the write probe fails."""
    import tempfile

    from analyses.tabular import numba_cache_dir

    monkeypatch.setenv("PREREG_CACHE", str(tmp_path))
    assert numba_cache_dir() == tmp_path
    monkeypatch.setattr(tempfile, "TemporaryFile", lambda **kw: (_ for _ in ()).throw(PermissionError("denied")))
    assert numba_cache_dir() is None
