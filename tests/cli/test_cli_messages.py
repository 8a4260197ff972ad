"""What every ``prereg`` command says first: the path the user typed and the real cause; and a
``--help`` of every command without typer's ``<bool>`` on flags or ``{study_dir}`` for arguments."""

from __future__ import annotations

import re

import pytest
import typer.main
from typer.testing import CliRunner

from prereg_kit.cli import app
from prereg_kit.errors import PlanError
from prereg_kit.plan import resolve_plan_path

PLAN_COMMANDS = ["verify", "analyze", "lock", "amend", "seal", "run", "status", "dry-run"]


def _first_error_line(output: str) -> str:
    return next(ln for ln in output.splitlines() if ln.strip()).removeprefix("error: ")


@pytest.mark.parametrize("command", PLAN_COMMANDS)
def test_a_missing_folder_is_named_as_typed(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "studies").mkdir()
    res = CliRunner().invoke(app, [command, "studies/nonexistent"])
    assert res.exit_code == 2, res.output
    # the folder as typed, not its parent's plan.lock, and the cause before anything else
    assert _first_error_line(res.output) == "studies/nonexistent: no such folder"
    assert "plan.lock" not in res.output and "--exploratory" not in res.output


@pytest.mark.parametrize("command", PLAN_COMMANDS)
def test_a_folder_without_a_plan_says_so_first(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "studies" / "empty").mkdir(parents=True)
    (tmp_path / "studies" / "empty" / "plan.lock").write_text("{}")  # a stray lock is not the cause
    res = CliRunner().invoke(app, [command, "studies/empty", "--reason", "x"] if command == "amend"
                             else [command, "studies/empty"])
    assert res.exit_code == 2, res.output
    assert _first_error_line(res.output) == ("studies/empty: no plan.toml in this folder "
                                             "(prereg new studies/empty writes a template)")
    assert "not locked" not in res.output and "--exploratory" not in res.output


def test_analyze_exploratory_says_the_same(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    res = CliRunner().invoke(app, ["analyze", "empty", "--exploratory"])
    assert res.exit_code == 2 and _first_error_line(res.output).startswith("empty: no plan.toml in this folder")


def test_near_misses_of_a_plan_path(tmp_path):
    """A plan.toml that is a folder, a file typed with .toml that is absent, a file of another name."""
    with pytest.raises(PlanError, match=r"nope\.toml: no such plan file"):
        resolve_plan_path(tmp_path / "nope.toml")
    with pytest.raises(PlanError, match="no such folder"):
        resolve_plan_path(tmp_path / "plan")  # the file without its suffix is not a folder either
    (tmp_path / "Plan.TOML").write_text("")
    if not (tmp_path / "plan.toml").exists():  # a case-sensitive file system: the wrong case is no plan
        with pytest.raises(PlanError, match="no plan.toml in this folder"):
            resolve_plan_path(tmp_path)
    other = tmp_path / "mine.toml"
    other.write_text("")
    assert resolve_plan_path(other) == other  # a plan file of another name is taken as given
    (tmp_path / "sub" / "plan.toml").mkdir(parents=True)
    assert resolve_plan_path(tmp_path / "sub") == tmp_path / "sub" / "plan.toml"  # read_toml says "is a folder"


def _command_paths(command, prefix=()):
    yield prefix
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _command_paths(sub, (*prefix, name))


BAD_METAVAR = re.compile(r"<bool>|\{[a-z_]+\}|\{[A-Z_]+\}")


def test_every_help_is_clean():
    paths = list(_command_paths(typer.main.get_command(app)))
    assert ("import", "verl") in paths and ("analyze",) in paths and len(paths) > 20
    for path in paths:
        res = CliRunner().invoke(app, [*path, "--help"], terminal_width=200)
        assert res.exit_code == 0, (path, res.output)
        assert not BAD_METAVAR.search(res.output), (path, BAD_METAVAR.search(res.output).group(), res.output)
        usage = next(ln for ln in res.output.splitlines() if "Usage:" in ln)
        assert "{" not in usage and "}" not in usage, usage
    analyze = CliRunner().invoke(app, ["analyze", "--help"], terminal_width=200).output
    assert re.search(r"Usage: .* \[OPTIONS\] STUDY_DIR\b", analyze) and "study_dir" not in analyze
    assert re.search(r"--exploratory\s+Analyze", analyze)  # the flag: no type between name and help
    assert re.search(r"--resamples\s+<int>", analyze)  # an option with a value keeps its type


def test_a_missing_argument_is_named_in_capitals():
    res = CliRunner().invoke(app, ["analyze"])
    assert res.exit_code == 2 and "STUDY_DIR" in res.output


def test_an_import_names_a_missing_input_file_as_typed(tmp_path, monkeypatch):
    from plans import SMALL_PLAN

    from prereg_kit.chain.lock import lock_plan

    monkeypatch.chdir(tmp_path)
    (tmp_path / "logs").mkdir()
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "plan.toml").write_text(SMALL_PLAN)
    lock_plan(tmp_path / "st")
    for typed, cause in (("x.jsonl", "x.jsonl: no such file"), ("logs", "logs: a folder, not a JSON-lines file")):
        res = CliRunner().invoke(app, ["import", "verl", "st", typed, "-c", "A", "-s", "0",
                                       "--updates-per-step", "1", "--responses-per-step", "4"])
        assert res.exit_code == 2 and _first_error_line(res.output) == cause, res.output
        assert "internal error" not in res.output
    # the study is checked before the other trainer's files: a wrong study path is what is named
    res = CliRunner().invoke(app, ["import", "verl", "studies/nonexistent", "x.jsonl", "-c", "A", "-s", "0"])
    assert res.exit_code == 2 and _first_error_line(res.output) == "studies/nonexistent: no such folder", res.output


# Every command that takes a study or plan path, with the other arguments it needs to reach the path.
EVERY_COMMAND = {
    "lock": [], "amend": ["--reason", "x"], "seal": [], "timestamp": ["--tsa", "http://127.0.0.1:9"], "verify": [],
    "dry-run": [], "run": [], "status": [], "gradient-test": [], "elect": [], "probe": [], "analyze": [],
    "evaluate-checkpoints": [], "recheck": [],
    "import verl": ["x.jsonl", "-c", "A", "-s", "0"], "import openrlhf": ["x.jsonl", "-c", "A", "-s", "0"],
    "import trl": ["x.json", "-c", "A", "-s", "0"],
    **{f"import {t}": ["x", "-c", "A", "--seed", "0", "--preset", "trl"] for t in ("tensorboard", "mlflow", "wandb")},
}
CAUSES = {"studies/nonexistent": "studies/nonexistent: no such folder",
          "studies/empty": "studies/empty: no plan.toml in this folder (prereg new studies/empty writes a template)"}


def _invoke(command: str, path: str):
    return CliRunner().invoke(app, [*command.split(), path, *EVERY_COMMAND[command]])


@pytest.mark.parametrize("typed", list(CAUSES))
@pytest.mark.parametrize("command", list(EVERY_COMMAND))
def test_every_command_names_the_path_as_typed_first(command, typed, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "studies" / "empty").mkdir(parents=True)
    res = _invoke(command, typed)
    assert res.exit_code == 2, res.output
    assert res.stderr.splitlines()[0].removeprefix("error: ") == CAUSES[typed], res.stderr
    assert res.stdout == "" and "Traceback" not in res.output and "internal error" not in res.output


# refused before any trainer loads (run and elect load theirs first, then the trainer checks the lock)
NEED_A_LOCK = ["amend", "seal", "timestamp", "verify", "analyze", "gradient-test", "import verl", "import tensorboard"]


@pytest.mark.parametrize("command", NEED_A_LOCK)
def test_an_unlocked_plan_names_its_lock_file_and_the_lock_command(command, tmp_path, monkeypatch):
    from plans import SMALL_PLAN

    monkeypatch.chdir(tmp_path)
    (tmp_path / "studies" / "open").mkdir(parents=True)
    (tmp_path / "studies" / "open" / "plan.toml").write_text(SMALL_PLAN)
    res = _invoke(command, "studies/open")
    assert res.exit_code in (1, 2), res.output  # 1: a main-stage run refused (docs/cli.md), 2: unusable input
    first = res.stderr.splitlines()[0].removeprefix("error: ")
    assert first.startswith("studies/open/plan.lock: no lock file") and "`prereg lock studies/open" in first, first
    assert "Traceback" not in res.output
