"""How the suite itself runs (docs/testing.md): one thread per test process, so that the workers
of `make test` (one per core) do not spin their thread pools against each other; the report's
figures drawn only by tests marked `figures` and by slow tests; the CLI's command built once per app;
a test that hangs fails by name."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import textwrap
import tomllib

import pytest
import tomli_w
from paths import ROOT


def test_every_thread_pool_of_a_test_process_has_one_thread():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import numpy as np

    np.ones((64, 64)) @ np.ones((64, 64))  # the BLAS pool is loaded
    pools = threadpoolctl.threadpool_info()
    assert pools and all(p["num_threads"] == 1 for p in pools), pools
    torch = pytest.importorskip("torch")
    assert torch.get_num_threads() == 1


def test_a_process_a_test_starts_inherits_one_thread():
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                         capture_output=True, text=True, check=True, env=dict(os.environ))
    assert out.stdout.strip() == "1"


def _report_figures_drawn(tmp_path) -> list:
    """What the report's figure writer returns for an analysis of nothing (no contrasts, no
    curves): the no-op returns [] without looking at its arguments; the real one raises on them."""
    from prereg_kit import report

    try:
        return report.report_figures(None, tmp_path)
    except AttributeError:  # the real writer reads the analysis
        return ["drawn"]


def test_a_test_not_marked_figures_draws_none(tmp_path):
    from prereg_kit.report import gradient

    assert _report_figures_drawn(tmp_path) == []
    assert gradient.efficiency_figure(None, tmp_path / "g.png", title="") == []


@pytest.mark.figures
def test_a_test_marked_figures_draws_them(tmp_path):
    assert _report_figures_drawn(tmp_path) == ["drawn"]


@pytest.mark.slow
def test_a_slow_test_draws_them(tmp_path):
    assert _report_figures_drawn(tmp_path) == ["drawn"]


def test_the_cli_runner_builds_an_apps_command_once_and_again_when_its_commands_change():
    """The suite's CliRunner reuses the click command built for an app (tests/conftest.py); an app
    given another command, or another app, is built anew, so no test runs a stale command."""
    import typer
    from typer.testing import CliRunner, _get_command

    from prereg_kit.cli import app

    assert _get_command(app) is _get_command(app)
    mine = typer.Typer()

    @mine.command()
    def first() -> None:
        print("first")

    assert CliRunner().invoke(mine, []).output == "first\n"

    @mine.command()
    def second() -> None:
        print("second")

    res = CliRunner().invoke(mine, ["second"])
    assert res.exit_code == 0 and res.output == "second\n"
    assert _get_command(mine) is not _get_command(app)


def test_a_test_sharing_a_module_fixture_joins_its_modules_group_unless_it_has_its_own():
    """`make test`'s grouping (tests/conftest.py): a module-scoped fixture puts its test in the
    module's xdist group, a function-scoped one in none, and a test's own group (the W&B tests')
    is kept rather than replaced by its module's."""
    from types import SimpleNamespace as NS

    import conftest
    from trackerfiles import WANDB_RUNS

    def item(scope: str, *marks) -> NS:
        it = NS(module=NS(__name__="test_m"), _fixtureinfo=NS(name2fixturedefs={"f": [NS(scope=scope)]}),
                marks=[m.mark for m in marks])
        it.get_closest_marker = lambda name: next((m for m in it.marks if m.name == name), None)
        it.add_marker = lambda m: it.marks.append(m.mark)
        return it

    shared, free, own = item("module"), item("function"), item("module", WANDB_RUNS)
    conftest.pytest_collection_modifyitems(None, [shared, free, own])
    groups = [[m.args[0] for m in it.marks if m.name == "xdist_group"] for it in (shared, free, own)]
    assert groups == [["test_m"], [], ["wandb-runs"]]


def test_a_test_with_only_its_own_fixtures_goes_to_whichever_worker_is_free(request):
    """On a real item, with every fixture tests/conftest.py gives each test: the module-wide figure
    switch is module-scoped but built in every worker, so a test that shares nothing else (this
    one) joins no group, and the slow step's 56 registry dry runs spread over both workers."""
    assert "_figures_only_where_read" in request.fixturenames
    assert request.node.get_closest_marker("xdist_group") is None


HANGS = """
    import subprocess, sys

    def test_passes():
        pass

    def test_hangs():
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        try:
            p.wait()  # the hang
        finally:
            p.kill()
            p.wait()
"""


def test_a_hanging_test_fails_by_name_with_its_stack_and_the_run_goes_on(tmp_path):
    """`make test`'s own command line (the Makefile's guard at 4 s, this project's pytest settings,
    one worker) on a test that waits for a process that never ends: the run ends by itself with
    the test failed at the line it hung on, every thread's stack printed, the other test passed."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make here")
    line = subprocess.run([make, "-s", "-n", "-o", ".make-installed", "-C", str(ROOT), "test", "TEST_TIMEOUT=4",
                           "TEST_WORKERS=1", f"PYTHON={shlex.quote(sys.executable)}"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert "--timeout=4" in line and "faulthandler_timeout=3" in line, line
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    (tmp_path / "pyproject.toml").write_text(tomli_w.dumps({"tool": {"pytest": {"ini_options": {
        k: v for k, v in ini.items() if k in ("timeout_method", "markers")}}}}))
    (tmp_path / "test_h.py").write_text(textwrap.dedent(HANGS))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    res = subprocess.run(["bash", "-c", line + " -p no:cacheprovider -p no:benchmark"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "FAILED test_h.py::test_hangs - Failed: Timeout" in out, out
    assert 'test_h.py", line 10 in test_hangs' in out, out  # faulthandler's stack, at the wait
    assert "1 failed, 1 passed" in out, out
