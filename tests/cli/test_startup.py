"""`prereg --help`, `lock` and `verify` start without the heavy libraries: pandas, scipy,
matplotlib, torch and numba are imported only by the commands that compute or draw; lock and
verify (the recipe check with the built-in trainer included) import no numpy either."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from paths import ROOT

HEAVY = ("pandas", "scipy", "matplotlib", "torch", "numba")

# Runs the command as `prereg` does, then prints (on the last stdout line) which heavy
# top-level packages are in sys.modules when the process exits.
WRAPPER = """\
import atexit, json, runpy, sys
heavy = {heavy!r}
atexit.register(lambda: print("\\nLOADED " + json.dumps(sorted(m for m in heavy if m in sys.modules))))
sys.argv = ["prereg", *sys.argv[1:]]
runpy.run_module("prereg_kit", run_name="__main__")
"""


def _loaded(*args: str, cwd: Path, heavy: tuple[str, ...] = HEAVY) -> tuple[list[str], subprocess.CompletedProcess]:
    res = subprocess.run([sys.executable, "-c", WRAPPER.format(heavy=heavy), *args], capture_output=True,
                         text=True, cwd=cwd, timeout=120, env={**_env(), "PYTHONPATH": str(ROOT)})
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("LOADED ")]
    assert line, res.stdout + res.stderr
    return json.loads(line[-1][len("LOADED "):]), res


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


# Every module some test below looks for: each command runs once, in one fresh process that reports
# all of them, and each test reads the ones its claim names (``_of``).
WATCHED = (*HEAVY, "numpy", "pydantic", "click", "filelock", "trainer.rewards.channels")


def _of(loaded: list[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in loaded if m in names]


@pytest.fixture(scope="module")
def commands(tmp_path_factory) -> dict[str, tuple[list[str], subprocess.CompletedProcess, Path]]:
    """`prereg --help`, then `lock` of the small plan, then `verify` of that study, each a fresh
    process reporting which of ``WATCHED`` it loaded."""
    from plans import SMALL_PLAN

    tmp = tmp_path_factory.mktemp("startup")
    study = tmp / "study"
    study.mkdir()
    (study / "plan.toml").write_text(SMALL_PLAN)
    out = {}
    for name, args in (("help", ["--help"]), ("lock", ["lock", str(study / "plan.toml")]), ("verify", ["verify", str(study)])):
        out[name] = (*_loaded(*args, cwd=tmp, heavy=WATCHED), study)
        if name == "lock":
            out[name] += ((study / "plan.lock").exists(),)
    return out


def _ran(commands, name: str) -> list[str]:
    """What command ``name`` loaded, once it is checked to have done its work."""
    loaded, res, study, *locked = commands[name]
    if name == "help":
        assert res.returncode == 0 and "lock" in res.stdout, res.stderr
    elif name == "lock":
        assert res.returncode == 0 and locked == [True], res.stdout + res.stderr
    else:
        assert res.returncode == 0 and "OK" in res.stdout, res.stdout + res.stderr
    return loaded


def test_help_lock_and_verify_import_no_heavy_library(commands):
    for name in ("help", "lock", "verify"):
        assert _of(_ran(commands, name), HEAVY) == [], name


# Imports each module the wrapper must see (pandas, numpy, pydantic, click, filelock, the channel
# table) before running `prereg --help`: one process, which each "the wrapper sees" test reads.
SEEN = ("pandas", "numpy", "pydantic", "click", "filelock", "trainer.rewards.channels")


@pytest.fixture(scope="module")
def seen(tmp_path_factory) -> str:
    imports = "; ".join(f"import {m}" for m in SEEN)
    code = WRAPPER.format(heavy=tuple(dict.fromkeys((*HEAVY, *SEEN)))).replace("runpy.run_module", f"{imports}; runpy.run_module")
    res = subprocess.run([sys.executable, "-c", code, "--help"], capture_output=True, text=True,
                         cwd=tmp_path_factory.mktemp("seen"), timeout=120, env={**_env(), "PYTHONPATH": str(ROOT)})
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("LOADED ")]
    assert res.returncode == 0 and line, res.stdout + res.stderr
    return json.loads(line[-1][len("LOADED "):])


def test_the_wrapper_sees_a_heavy_import(seen):
    """The check can fail: a command that does import pandas is reported (here: `analyze` of a
    folder without a plan still loads the analysis, which imports pandas and scipy)."""
    assert _of(seen, HEAVY) == ["pandas"]


def test_lock_and_verify_import_no_numpy(commands, tmp_path: Path):
    """The recipe check included: a plan naming reward channels loads the trainer's channel table."""
    from plans import run_plan

    for name in ("lock", "verify"):
        assert _of(_ran(commands, name), ("numpy",)) == [], name
    multi = tmp_path / "multi"
    multi.mkdir()
    (multi / "plan.toml").write_text(run_plan(
        id="tinymr", title="Tiny multi-reward test", question="Does the wiring run?", comparator="additive",
        treatment="tag", task_levels="[1, 2]", recipe='channels = ["correct", "negative"]\n',
        configurations='[configurations.additive]\noverrides = { aggregation = { rule = "lagrangian" } }\n'
                       '[configurations.tag]\noverrides = { aggregation = { rule = "tag" }, anchor = "elected" }\n',
        tokens=300, eval_every="B/2", samples=4, n_problems=4, smoke_configurations='["additive"]'))
    loaded, res = _loaded("lock", str(multi / "plan.toml"), cwd=tmp_path, heavy=("numpy", "trainer.rewards.channels"))
    assert res.returncode == 0 and (multi / "plan.lock").exists(), res.stdout + res.stderr
    assert loaded == ["trainer.rewards.channels"]  # the channels were checked, without numpy


def test_help_imports_neither_numpy_nor_the_plan_models(commands):
    """`--help` lists the commands without building the plan's pydantic models."""
    assert _of(_ran(commands, "help"), ("numpy", "pydantic")) == []


@pytest.mark.parametrize("library", ["numpy", "pydantic"])
def test_the_wrapper_sees_numpy_and_pydantic(seen, library: str):
    """The checks above can fail: a process that imports the library is reported."""
    assert library in seen


@pytest.mark.parametrize("module, absent", [
    ("prereg_kit.report", ("matplotlib",)),
    ("prereg_kit.analysis.analyze", ("matplotlib", "numba", "torch")),
    ("prereg_kit.runlog", ("pandas", "pyarrow", "scipy")),
    ("prereg_kit.plan", ("pandas", "scipy", "matplotlib")),
])
def test_importing_a_module_leaves_the_heavy_libraries_out(module: str, absent: tuple[str, ...]):
    """matplotlib (and so pyplot) is imported when a figure is drawn, not with the report."""
    code = (f"import sys, {module}\n"
            f"print(sorted(m for m in {absent!r} if m in sys.modules or m + '.pyplot' in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]", f"{module} imported {res.stdout.strip()}"


def test_lazy_runlog_keeps_every_public_name():
    import prereg_kit.runlog as runlog

    assert set(runlog.__all__) <= set(runlog._LAZY) | {"__all__"}
    for name in runlog.__all__:
        assert getattr(runlog, name) is not None
    with pytest.raises(AttributeError):
        runlog.no_such_name  # noqa: B018
    from prereg_kit.runlog import RunLogWriter, read_run  # noqa: F401  (still importable by name)


def test_a_drawn_figure_still_gets_its_watermark():
    """The watermark's artist class is made when first drawn; it is still a matplotlib Text."""
    from matplotlib.text import Text

    from prereg_kit import plots

    fig, ax = plots.subplots()
    plots.watermark(ax)
    assert any(isinstance(a, Text) and a.get_text() == "SYNTHETIC" for a in ax.artists + ax.texts)


def test_lock_and_verify_leave_out_click_filelock_and_the_channel_table(commands):
    """typer 0.29 runs without click; verify only reads the lock chain, so it needs no OS lock
    (filelock); a plan naming no reward channels needs no channel table."""
    light = ("click", "trainer.rewards.channels", "filelock")
    assert _of(_ran(commands, "lock"), light) == ["filelock"]  # lock takes the chain's OS lock
    assert _of(_ran(commands, "verify"), light) == []


@pytest.mark.parametrize("library", ["click", "filelock", "trainer.rewards.channels"])
def test_the_wrapper_sees_click_filelock_and_the_channel_table(seen, library: str):
    """The check above can fail: a process that imports the module is reported."""
    assert library in seen


def _commands() -> list[str]:
    from typer.main import get_command_name

    from prereg_kit.cli import app

    return [c.name or get_command_name(c.callback.__name__) for c in app.registered_commands]


@pytest.mark.parametrize("command", _commands())
def test_one_command_app_gives_the_same_help_and_usage_errors(command: str):
    """`prereg CMD ...` runs a copy of the app holding CMD alone (typer builds every command's
    parameters first): its --help and its usage error are the full app's, and the app is unchanged."""
    from typer.testing import CliRunner

    from prereg_kit.cli import app, app_for

    before = list(app.registered_commands)
    one = app_for([command, "--help"])
    assert one is not app and [c.callback for c in one.registered_commands] == \
        [c.callback for c in app.registered_commands if (c.name or c.callback.__name__.replace("_", "-")) == command]
    assert app.registered_commands == before and app.registered_groups
    runner = CliRunner()
    for args in ([command, "--help"], [command, "--no-such-option"]):
        full, light = runner.invoke(app, args), runner.invoke(one, args)
        assert (light.exit_code, light.output) == (full.exit_code, full.output), args


def test_other_arguments_run_the_whole_app():
    """Group options, plugin groups, unknown names and no arguments keep the app with every command."""
    from prereg_kit.cli import app, app_for

    groups = [g.name for g in app.registered_groups]
    assert groups  # e.g. `prereg import` from the prereg_kit.commands entry point
    for args in ([], ["--help"], ["--version"], ["lokc", "x"], [groups[0], "--help"]):
        assert app_for(args) is app, args


def test_a_usage_error_raised_by_a_command_is_typers_own():
    """The error handler lets typer's usage errors through (found without importing click): exit 2
    with typer's message, not an internal error."""
    import typer
    from typer.testing import CliRunner

    from prereg_kit.cli.base import handles_errors

    app = typer.Typer()

    @app.command()
    @handles_errors
    def go(n: int = 0) -> None:
        raise typer.BadParameter("not this one")

    res = CliRunner().invoke(app, [])
    assert res.exit_code == 2 and "not this one" in res.output and "internal error" not in res.output, res.output
