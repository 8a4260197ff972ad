"""A command whose optional package is missing says so in one line, naming the extra and the pip
command, and exits 2 — never `internal error … No module named 'torch'` (exit 3).

The packages are hidden in a fresh process (``sys.modules[name] = None``: their import raises
``ModuleNotFoundError`` as on a machine without them), and each command is run there as a user
types it. The extra named is read from the installed package's requirements, so the message
follows ``pyproject.toml``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import typer
from paths import ROOT
from plans import lock_at
from typer.testing import CliRunner

from prereg_kit.cli.base import handles_errors
from prereg_kit.errors import extra_for

HIDDEN = ("torch", "transformers", "submitit", "ray", "rfc3161_client", "tensorboard")

# One process: every command run in turn with the optional packages hidden; its exit code and
# stderr lines reported as JSON.
SCRIPT = textwrap.dedent("""
    import contextlib, io, json, sys
    for m in sys.argv[1].split(","):
        sys.modules[m] = None
    from prereg_kit.cli import main
    out = []
    for argv in json.loads(sys.argv[2]):
        sys.argv = ["prereg", *argv]
        err = io.StringIO()
        code = 0
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                main()
            except SystemExit as e:
                code = e.code
        out.append([code, err.getvalue().strip().splitlines()])
    print(json.dumps(out))
""")


def test_every_command_that_needs_an_extra_names_it(tmp_path):
    from datetime import datetime, timezone

    demo = tmp_path / "demo"
    demo.mkdir()
    (demo / "plan.toml").write_text((ROOT / "examples" / "demo" / "plan.toml").read_text())
    lock_at(demo / "plan.toml", datetime(2026, 1, 1, tzinfo=timezone.utc))
    grad = tmp_path / "gradient"
    grad.mkdir()
    (grad / "plan.toml").write_text((ROOT / "registry" / "cpu-gradient" / "plan.toml").read_text())
    lock_at(grad / "plan.toml", datetime(2026, 1, 1, tzinfo=timezone.utc))
    mr = tmp_path / "multireward"
    mr.mkdir()
    (mr / "plan.toml").write_text((ROOT / "registry" / "cpu-multireward" / "plan.toml").read_text())
    tb = tmp_path / "tb"
    tb.mkdir()
    cases = [
        (["run", str(demo)], "prereg run needs torch", "train"),
        (["elect", str(mr)], "prereg elect needs torch", "train"),
        (["gradient-test", str(grad)], "prereg gradient-test needs torch", "train"),
        (["run", str(demo), "--executor", "slurm"], "prereg run needs submitit", "cluster"),
        (["run", str(demo), "--executor", "ray"], "prereg run needs ray", "cluster"),
        (["timestamp", str(demo), "--tsa", "http://127.0.0.1:9/"], "rfc3161_client is not installed", "timestamp"),
        (["import", "tensorboard", str(demo), str(tb), "-c", "grpo", "--seed", "0", "--preset", "verl"],
         "needs the tensorboard package", "tensorboard"),
    ]
    res = subprocess.run([sys.executable, "-c", SCRIPT, ",".join(HIDDEN), json.dumps([c[0] for c in cases])],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    for (argv, says, extra), (code, lines) in zip(cases, json.loads(res.stdout)):
        assert code == 2, (argv, lines)
        last = lines[-1]
        assert says in last and f"pip install 'prereg-kit[{extra}]'" in last, (argv, lines)
        assert not any("internal error" in ln or "Traceback" in ln for ln in lines), (argv, lines)


def test_the_extra_is_read_from_the_package_requirements():
    assert extra_for("torch") == "train" and extra_for("transformers") == "train"
    assert extra_for("submitit") == "cluster" and extra_for("rfc3161_client") == "timestamp"
    assert extra_for("numba") == "analyses"  # the dev extra lists it too: the user's extra comes first
    assert extra_for("numpy") is None and extra_for("no_such_module") is None


@pytest.mark.parametrize("name, expected", [("torch.nn", 2), ("numpy", 3), ("no_such_module", 3)])
def test_a_missing_module_no_extra_brings_stays_an_internal_error(name, expected):
    """Only a module an extra brings is a missing extra; anything else is a bug (exit 3)."""
    app = typer.Typer()

    @app.command()
    @handles_errors
    def cmd() -> None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    res = CliRunner().invoke(app, [])
    assert res.exit_code == expected, res.output
    if expected == 2:
        assert "needs torch, which is not installed: pip install 'prereg-kit[train]'" in res.output
    else:
        assert "internal error" in res.output
