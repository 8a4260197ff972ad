"""The program judge's isolation in the trainer (trainer/core/program_judge.py ``judge_meta``): recorded in a
code run's meta.json, and main- or calibration-stage code rewards refused without an OS sandbox
unless the recipe sets ``sandbox.allow_weak_isolation = true``. The probe is forced here; the
sandbox itself is tested in test_sandbox.py."""

from __future__ import annotations

import pytest
from plans import run_plan

import trainer.core.program_judge as rewards
from trainer.config import ConfigError, RunSpec, parse_config
from trainer.rewards.sandbox import Isolation

WEAK = Isolation("/usr/bin/python3", "ns-root", "/usr/bin/unshare", True, True, 61337, True,
                 notes=("bubblewrap 'bwrap' not found on /usr/local/bin:/usr/bin:/bin (Debian/Ubuntu: apt-get "
                        "install bubblewrap)", "no OS sandbox: the program sees the host's filesystem"))
STRONG = Isolation("/usr/bin/python3", "bwrap", "/usr/bin/unshare", True, True, 61337, True,
                   bwrap="/usr/bin/bwrap", binds=("/usr",), links=(("usr/lib", "/lib"),))
KEY = "sandbox.allow_weak_isolation = true"


@pytest.fixture
def probe(monkeypatch):
    """Force what the machine probe reports to the trainer."""
    def force(iso: Isolation) -> None:
        monkeypatch.setattr(rewards, "probe_isolation", lambda *a: iso)
    return force


def spec(tmp_path, stage: str = "main", **recipe) -> RunSpec:
    cfg = parse_config({"task": "code", **recipe})
    return RunSpec(study="s", configuration="c", seed=0, stage=stage, plan_hash="h", study_dir=str(tmp_path),
                   run_dir=str(tmp_path / "runs" / "c"), cache_dir=str(tmp_path / ".cache"), budget_tokens=100,
                   eval_interval=50, eval_sets=[{"name": "held", "source": "synthetic:eval"}], config=cfg)


def test_allow_weak_isolation_is_a_strict_recipe_key():
    assert parse_config({"task": "code"}).rewards.sandbox.allow_weak_isolation is False
    assert parse_config({"task": "code", "sandbox": {"allow_weak_isolation": True}}).rewards.sandbox.allow_weak_isolation
    for bad in ("yes", 1, "true"):  # an opt-in out of isolation must be spelled as a TOML boolean
        with pytest.raises(ConfigError) as e:
            parse_config({"task": "code", "sandbox": {"allow_weak_isolation": bad}})
        assert len(e.value.lines) == 1 and "sandbox.allow_weak_isolation" in e.value.lines[0], e.value.lines


@pytest.mark.parametrize("stage", ["main", "calibration"])
def test_weak_judge_refused_for_main_and_calibration(tmp_path, probe, stage):
    probe(WEAK)
    with pytest.raises(ConfigError) as e:
        rewards.judge_meta(spec(tmp_path, stage), where="c: ")
    (line,) = e.value.lines
    assert line.startswith(f"c: {stage}-stage code rewards need an OS sandbox")
    assert "bubblewrap 'bwrap' not found" in line and KEY in line and "'ns-root'" in line


@pytest.mark.parametrize("stage", ["smoke", "pilot"])
def test_weak_judge_allowed_for_smoke_and_pilot_with_a_warning(tmp_path, probe, capsys, stage):
    probe(WEAK)
    assert rewards.judge_meta(spec(tmp_path, stage)) == {"judge_isolation": "ns-root"}
    err = capsys.readouterr().err
    assert err.startswith("warning: program judge with weak isolation 'ns-root'") and f"the {stage} stage" in err


def test_explicit_opt_in_allows_a_weak_main_run(tmp_path, probe, capsys):
    probe(WEAK)
    meta = rewards.judge_meta(spec(tmp_path, "main", sandbox={"allow_weak_isolation": True}))
    assert meta == {"judge_isolation": "ns-root"} and KEY in capsys.readouterr().err


def test_os_sandbox_is_recorded_without_a_warning(tmp_path, probe, capsys):
    probe(STRONG)
    assert rewards.judge_meta(spec(tmp_path, "main")) == {"judge_isolation": "bwrap"}
    assert capsys.readouterr().err == ""


def test_task_files_inside_the_sandbox_view_count_as_weak(tmp_path, probe, capsys):
    """A study folder or task file under a folder bound into the sandbox (e.g. inside the
    interpreter's prefix) would be readable by programs: refused like weak isolation."""
    probe(Isolation(**{**STRONG.__dict__, "binds": ("/usr", str(tmp_path))}))
    with pytest.raises(ConfigError) as e:
        rewards.judge_meta(spec(tmp_path, "main"))
    assert f"{tmp_path} is inside the sandbox's view" in e.value.lines[0] and KEY in e.value.lines[0]
    assert rewards.judge_meta(spec(tmp_path, "smoke")) == {"judge_isolation": "bwrap-task-visible"}
    capsys.readouterr()
    probe(Isolation(**{**STRONG.__dict__, "binds": ("/usr", "/data")}))  # an absolute train_file under a bind
    with pytest.raises(ConfigError, match="/data/code.jsonl is inside the sandbox's view"):
        rewards.judge_meta(spec(tmp_path / "study", "main", train_file="/data/code.jsonl"))


def test_no_interpreter_is_a_one_line_error(tmp_path, monkeypatch):
    from trainer.rewards.sandbox import SandboxUnavailableError

    def missing(*a):
        raise SandboxUnavailableError("sandbox: interpreter 'python3' not found on /usr/local/bin:/usr/bin:/bin")

    monkeypatch.setattr(rewards, "probe_isolation", missing)
    with pytest.raises(ConfigError) as e:
        rewards.judge_meta(spec(tmp_path, "smoke"), where="c: ")
    assert e.value.lines == ["c: sandbox: interpreter 'python3' not found on /usr/local/bin:/usr/bin:/bin"]


def test_math_runs_record_nothing_and_never_probe(tmp_path, monkeypatch):
    def boom(*a):
        raise AssertionError("probed for a math run")

    monkeypatch.setattr(rewards, "probe_isolation", boom)
    s = spec(tmp_path).model_copy(update={"config": parse_config({})})
    assert rewards.judge_meta(s) == {}


PLAN = run_plan(
    id="judgeiso", title="t", question="q", comparator="a", treatment="b", task="code", task_levels="[1]",
    task_train_problems=20, warm_steps=1, recipe="", stages=False, configurations="""\
[configurations.a]
overrides = { learning_rate = 1e-3 }
[configurations.b]
overrides = { learning_rate = 2e-3 }
""", tokens=64, eval_every="B/2", samples=1, n_problems=2) + (
    '\n[[stages]]\nname = "calibration"\nseeds = [0]\n[[stages]]\nname = "smoke"\nseeds = [0]\n'
    '[[stages]]\nname = "main"\n')


def test_launcher_refuses_before_building_anything(tmp_path, probe, monkeypatch, capsys):
    """``prereg run --stage calibration`` on a machine without an OS sandbox: one error line
    naming the cause and the key, exit 2, no asset built, no run started; smoke goes on."""
    from typer.testing import CliRunner

    import trainer.launch as launcher
    from prereg_kit.cli import app

    built: list = []
    monkeypatch.setattr(launcher, "prepare_assets", lambda *a, **k: built.append(a) or (_ for _ in ()).throw(
        RuntimeError("stop after the check")))
    (tmp_path / "plan.toml").write_text(PLAN)
    probe(WEAK)
    res = CliRunner().invoke(app, ["run", str(tmp_path), "--stage", "calibration"])
    assert res.exit_code == 2, res.output
    errors = [ln for ln in res.output.splitlines() if "error" in ln]
    assert len(errors) == 1 and "calibration-stage code rewards need an OS sandbox" in errors[0]
    assert "bubblewrap 'bwrap' not found" in res.output and "allow_weak_isolation" in res.output
    assert built == [] and not (tmp_path / "stages").exists()
    from trainer.launch import plan_jobs, prepare

    _, jobs = plan_jobs(tmp_path, "smoke")
    with pytest.raises(RuntimeError, match="stop after the check"):
        prepare(jobs, log=lambda m: None)  # smoke: warned, then on to the assets
    assert len(built) == 1 and "allowed for the smoke stage" in capsys.readouterr().err
