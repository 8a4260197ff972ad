"""The `prereg` command end to end: the issue's walk-through, exit codes, no tracebacks."""

from __future__ import annotations

from typer.testing import CliRunner

from prereg_kit.cli import app

runner = CliRunner()


def _run(*args):
    res = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in res.output
    return res


def test_new_lock_verify_amend_walkthrough(tmp_path):
    d = tmp_path / "demo"
    assert _run("new", d).exit_code == 0
    assert _run("new", d).exit_code == 2  # refuses to overwrite
    plan = d / "plan.toml"
    res = _run("lock", plan)
    assert res.exit_code == 0 and (d / "plan.lock").exists() and "locked" in res.output
    assert "nothing to do" in _run("lock", plan).output
    assert _run("verify", d).exit_code == 0
    # change one number: verify names the key and exits 1
    plan.write_text(plan.read_text().replace("samples = 8 ", "samples = 16 "))
    res = _run("verify", plan)
    assert res.exit_code == 1 and "evaluation.samples: 8 → 16" in res.output
    assert _run("lock", plan).exit_code == 1
    assert _run("amend", plan).exit_code == 2  # no reason
    res = _run("amend", plan, "--reason", "pilot: 8 samples too noisy")
    assert res.exit_code == 0 and "evaluation.samples: 8 → 16" in res.output
    assert _run("verify", d).exit_code == 0
    # a hand edit of plan.lock
    lock = d / "plan.lock"
    lock.write_text(lock.read_text().replace("pilot: 8 samples", "pilot: 9 samples"))
    res = _run("verify", d)
    assert res.exit_code == 1 and "violation" in res.output


def test_invalid_plan_exit_2_one_line_per_error(tmp_path):
    d = tmp_path / "s"
    _run("new", d)
    plan = d / "plan.toml"
    plan.write_text(plan.read_text().replace("margin = 0.02                           # non", "margin = 0 # non"))
    res = _run("lock", plan)
    assert res.exit_code == 2
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "contrasts[1].margin" in errors[0] and f"{plan}:" in errors[0]


def test_verify_missing_plan(tmp_path):
    res = _run("verify", tmp_path / "nothing.toml")
    assert res.exit_code == 2


def test_version():
    res = _run("--version")
    assert res.exit_code == 0 and "prereg-kit" in res.output
