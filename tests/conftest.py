"""Shared fixtures: a small valid plan written into a temporary study folder, and the trainer's
cache shared by every test of a worker process that trains the tiny model (docs/testing.md)."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings
from paths import folders_with_tests
from plans import SMALL_PLAN
from tsa import tsa, tsa_factory  # noqa: F401 - fixtures: a local TSA (RFC 3161) for any test file

# One thread per test process: `make test` runs one worker per core, and a worker whose OpenMP
# and BLAS pools (torch, numpy) hold a thread per core spins them against the other worker's: the
# tiny model's tests took twice the CPU time. Set before numpy or torch is first imported (none of the
# imports above loads them; and in every process a test starts, which inherits the environment).
for _pool in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_pool] = "1"


# Property tests draw the same examples on every run (a failure in CI is one a developer sees
# again); HYPOTHESIS_PROFILE=explore draws new ones each run, to look for more (docs/testing.md).
settings.register_profile("repeatable", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


# Every test folder on sys.path, after what is there: pytest puts a test file's own folder there
# when it imports it, and a test module may import a helper from a test module of another folder
# by its name (names are unique across folders: tests/project/test_layout.py).
for _folder in folders_with_tests():
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))


def _command_built_once():
    """``CliRunner().invoke(app, ...)`` has typer build the click command of every one of the app's
    commands (each signature inspected and its type hints resolved) on every call: about 3% of the
    default suite's CPU time over its in-process CLI calls. The command built for an app is the same
    on every call while the app's commands are the same, so it is built once per app and list of
    commands, and reused; a test that builds its own app, or adds a command, gets its own."""
    import typer.testing

    build = typer.testing._get_command
    built: dict[tuple, object] = {}

    def cached(app):
        key = (id(app), tuple(map(id, app.registered_commands)), tuple(map(id, app.registered_groups)))
        if key not in built:
            built[key] = (app, build(app))  # the app is kept, so that its id is not reused
        return built[key][1]

    typer.testing._get_command = cached


_command_built_once()


def pytest_collection_finish(session):
    """Everything imported and collected so far lives to the end of the run (torch, pandas,
    matplotlib, every test module): moved out of the garbage collector's generations, so that each
    full collection no longer walks it (about 6% of the default suite's CPU time)."""
    gc.collect()
    gc.freeze()


_SHARED_SCOPES = {"module", "class", "package"}
# module-scoped only to switch the figures for a whole module: cheap in every worker, so it joins no group
_BUILT_IN_EVERY_WORKER = {"_figures_only_where_read"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups (its loadgroup suffix)
def pytest_collection_modifyitems(config, items):
    """With ``--dist loadgroup`` (``make test``): a test that uses a module-, class- or
    package-scoped fixture runs in the same worker as that module's other such tests, so the
    fixture (a dry run, a trained study) is built once; every other test goes to whichever worker is
    free, so that one long module (the registry's dry runs) does not hold a worker alone."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue  # a group of its own (tests/trackerfiles.py's W&B runs)
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        module = getattr(item, "module", None)
        if module is not None and any(d.scope in _SHARED_SCOPES for name, ds in defs.items() for d in ds
                                      if name not in _BUILT_IN_EVERY_WORKER):
            item.add_marker(pytest.mark.xdist_group(module.__name__))


# The report's figures are drawn only where a test reads them: drawing and saving them (PNG and
# PDF) was about a tenth of the default suite's CPU time, spent by tests that read only tables.
# A module or test marked `figures` draws them, and so does every slow test (the registry's dry
# runs draw every figure of every plan's design). Elsewhere the report names figures it did not
# write, as it does any missing figure (report.html: "figure not embedded").
_DRAWERS = (("prereg_kit.report", "report_figures"), ("prereg_kit.report", "extrapolation_figures"),
            ("prereg_kit.report.gradient", "efficiency_figure"))


def _none_drawn(*args, **kwargs) -> list[Path]:
    return []


@contextlib.contextmanager
def _no_figures():
    """The report's drawing functions replaced by one that draws nothing, until the block ends."""
    import importlib

    with pytest.MonkeyPatch.context() as mp:
        for m, n in _DRAWERS:
            mp.setattr(importlib.import_module(m), n, _none_drawn)
        yield


def _draws(node) -> bool:
    return any(node.get_closest_marker(m) is not None for m in ("figures", "slow"))


@pytest.fixture(scope="module", autouse=True)
def _figures_only_where_read(request):
    """For a whole module (its module-scoped fixtures' reports too): no figures unless it is
    marked; yields the drawing functions themselves."""
    import importlib

    real = {(m, n): getattr(importlib.import_module(m), n) for m, n in _DRAWERS}
    if _draws(request.node):
        yield real
        return
    with _no_figures():
        yield real


@pytest.fixture(autouse=True)
def _figures_where_a_test_reads_them(request, _figures_only_where_read):
    """A test marked `figures` (or slow) in a module that is not draws them for itself."""
    import importlib

    if not _draws(request.node) or _draws(request.node.getparent(pytest.Module)):
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        for (m, n), fn in _figures_only_where_read.items():
            mp.setattr(importlib.import_module(m), n, fn)
        yield


@pytest.fixture
def without_figures():
    """A context in which the report draws no figures: for a test of a `figures` module whose
    own dry runs' figures it never reads (the module's other tests read theirs)."""
    return _no_figures


@pytest.fixture
def lock_reads(monkeypatch) -> list[Path]:
    """Every ``plan.lock`` read while the test runs, in order (``read_chain`` reads it with
    ``Path.read_text``): an analysis reads its chain once and passes it on."""
    reads: list[Path] = []
    real = Path.read_text

    def counting(self: Path, *args, **kwargs):
        if self.name == "plan.lock":
            reads.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counting)
    return reads


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """A study folder holding the small plan (not locked)."""
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(SMALL_PLAN)
    return d


@pytest.fixture(scope="session")
def trainer_cache(tmp_path_factory) -> Path:
    """One trainer cache folder (task files and warm starts, each under a key of its settings) for
    every test module of this worker that trains: a study links its ``.cache`` here, so each warm
    start is built once per worker rather than once per module. Read-only to its users in the sense
    that matters: a test that edits a cached item works on a copy of the folder."""
    return tmp_path_factory.mktemp("trainer-cache")
