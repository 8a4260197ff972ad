"""The `prereg` command end to end: the walk-through from plan to report, exit codes, no tracebacks."""

from __future__ import annotations

from pathlib import Path

import pytest
from paths import ROOT
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


# --- `prereg run` / `prereg elect` reach a trainer only through the prereg_kit.runners entry point


class _Recorder:
    """A stand-in trainer: records what the CLI hands it."""

    def __init__(self, name: str, ok: bool = True):
        self.name, self.ok, self.calls = name, ok, []

    def run(self, study_dir, **kw):
        self.calls.append(("run", study_dir, kw))
        return self.ok

    def elect(self, study_dir, **kw):
        self.calls.append(("elect", study_dir, kw))
        return {"elected": "correct", "kl_rev": {"correct": 0.1}, "kl_fwd": {"correct": 0.2}}


class _EntryPoint:
    def __init__(self, name: str, obj):
        self.name, self._obj = name, obj

    def load(self):
        return self._obj


def _install(monkeypatch, *runners):
    import prereg_kit.cli.runners as rn

    monkeypatch.setattr(rn, "entry_points", lambda group: [_EntryPoint(r.name, r) for r in runners]
                        if group == rn.GROUP else [])


def test_run_without_a_trainer_exits_2_with_one_line(tmp_path, monkeypatch):
    from plans import SMALL_PLAN

    (tmp_path / "plan.toml").write_text(SMALL_PLAN)  # the study path is checked first, then the trainer
    _install(monkeypatch)
    for cmd in (["run", str(tmp_path)], ["elect", str(tmp_path)]):
        res = runner.invoke(app, cmd)
        assert res.exit_code == 2, res.output
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and "no trainer installed: pip install 'prereg-kit[train]'" in lines[0]


def test_run_hands_the_study_to_the_only_or_the_chosen_trainer(tmp_path, monkeypatch):
    from plans import SMALL_PLAN

    (tmp_path / "plan.toml").write_text(SMALL_PLAN)
    a, b = _Recorder("alpha"), _Recorder("beta", ok=False)
    _install(monkeypatch, a)
    res = runner.invoke(app, ["run", str(tmp_path), "--stage", "smoke", "--configs", "x,y", "--seeds", "0-2", "-j", "2"])
    assert res.exit_code == 0, res.output
    assert a.calls == [("run", tmp_path, {"stage": "smoke", "configs": ["x", "y"], "seeds": [0, 1, 2], "n_jobs": 2,
                                          "console": a.calls[0][2]["console"]})]

    _install(monkeypatch, a, b)
    res = runner.invoke(app, ["run", str(tmp_path)])
    assert res.exit_code == 2 and "several trainers are installed (alpha, beta): choose one with --runner NAME" in res.output
    res = runner.invoke(app, ["run", str(tmp_path), "--runner", "beta"])
    assert res.exit_code == 1 and len(b.calls) == 1  # beta reported a failed run
    res = runner.invoke(app, ["run", str(tmp_path), "--runner", "gamma"])
    assert res.exit_code == 2 and "no trainer 'gamma' is installed (installed: alpha, beta)" in res.output

    res = runner.invoke(app, ["elect", str(tmp_path), "--runner", "alpha", "--steps", "3", "--seeds", "0,1"])
    assert res.exit_code == 0, res.output
    kind, study, kw = a.calls[-1]
    assert (kind, study, kw["steps"], kw["seeds"], kw["tokens"]) == ("elect", tmp_path, 3, [0, 1], None)
    assert '"elected": "correct"' in res.stdout


def test_the_package_registers_the_builtin_trainer():
    """pyproject.toml declares the entry point, and the installed metadata carries it (CI installs
    the checkout with pip, so a removed or misspelt entry point fails here, not at a user's prompt)."""
    import tomllib

    from prereg_kit.cli.runners import GROUP, installed_runners

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert declared["project"]["entry-points"][GROUP] == {"builtin": "trainer.plugin:RUNNER"}
    ep = installed_runners()["builtin"]
    assert ep.value == "trainer.plugin:RUNNER"
    runner = ep.load()
    assert callable(runner.run) and callable(runner.elect)


# --- `prereg registry`: how many configurations the installed trainer can run


class _Checker(_Recorder):
    """A stand-in trainer that can run every configuration except those named ``B``."""

    def check_configuration(self, plan, configuration):
        return ["recipe: group_size: not for B", "recipe: x: unknown key"] if configuration == "B" else []


def _registry(tmp_path: Path) -> Path:
    from plans import SMALL_PLAN

    for name in ("one", "two"):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "plan.toml").write_text(SMALL_PLAN.replace('id = "t1"', f'id = "{name}"'))
    return tmp_path


def test_registry_counts_runnable_configurations_and_names_why(tmp_path, monkeypatch):
    _install(monkeypatch, _Checker("alpha"))
    root = _registry(tmp_path)
    res = runner.invoke(app, ["registry", "--root", str(root)], terminal_width=250)
    assert res.exit_code == 0, res.output
    assert res.output.count("1 of 2") == 2  # each study: A runs, B does not
    assert "2 of 4 configurations runnable by the trainer 'alpha' (--why names the reasons)" in res.output
    res = runner.invoke(app, ["registry", "--root", str(root), "--why"], terminal_width=250)
    assert "one/B: recipe: group_size: not for B (+1 more)" in res.output
    assert "two/B: recipe: group_size: not for B (+1 more)" in res.output and "one/A" not in res.output


def test_registry_without_a_trainer_says_runnability_was_not_checked(tmp_path, monkeypatch):
    _install(monkeypatch)
    res = runner.invoke(app, ["registry", "--root", str(_registry(tmp_path))], terminal_width=250)
    assert res.exit_code == 0 and "runnable: not checked (no trainer installed" in res.output
    _install(monkeypatch, _Recorder("plain"))  # a trainer that does not say
    res = runner.invoke(app, ["registry", "--root", str(_registry(tmp_path / "b"))], terminal_width=250)
    assert "runnable: not checked (the installed trainer does not say" in res.output


def test_the_builtin_trainer_runs_every_cpu_study_configuration():
    """The CPU studies and a paper study are runnable by the built-in trainer; a recipe with a key
    it does not know is not, and the reason names the key and the one it most likely meant."""
    pytest.importorskip("torch")
    from prereg_kit.cli.runners import configuration_problems, installed_runners
    from prereg_kit.plan import load_plan

    builtin = installed_runners()["builtin"].load()
    root = ROOT / "registry"
    for study in ("cpu-grpo", "cpu-interventions", "cpu-multireward", "cpu-gradient"):
        problems = configuration_problems(builtin, load_plan(root / study).plan)
        assert problems and all(v == [] for v in problems.values()), (study, problems)
    plan = load_plan(root / "S25").plan  # a paper study in the trainer's vocabulary
    assert configuration_problems(builtin, plan) == {name: [] for name in plan.configurations}
    bad = plan.model_copy(update={"recipe": {**plan.recipe, "credit": {"rule": "outcome", "mc_kk": 4}}})
    problems = configuration_problems(builtin, bad)
    assert all(any("credit.mc_kk: unknown key; did you mean 'credit.mc_k'?" in line for line in v)
               for v in problems.values()), problems


def test_an_error_at_line_100_is_printed_as_written_not_as_an_emoji(tmp_path):
    """rich turns ':100:' into an emoji unless told not to; a plan error at line 100 must keep its place."""
    d = tmp_path / "demo"
    assert _run("new", d).exit_code == 0
    plan = d / "plan.toml"
    plan.write_text("#\n" * 99 + "bogus_key = 1\n" + plan.read_text())  # the unknown key on line 100
    res = _run("lock", plan)
    assert res.exit_code == 2 and "plan.toml:100:" in res.output and "\U0001f4af" not in res.output, res.output


def test_lock_says_what_the_plan_names_to_run(tmp_path):
    """A seed range typed "0-30" for "0-3" shows as 31 seeds and 62 runs when the plan locks."""
    from plans import SMALL_PLAN

    plan = tmp_path / "plan.toml"
    plan.write_text(SMALL_PLAN.replace("seeds = [0, 1, 2]", 'seeds = "0-30"'))
    res = _run("lock", plan)
    assert res.exit_code == 0, res.output
    assert "  2 configurations × 31 seeds (0-30) = 62 runs, B = 1M generated tokens each\n" in res.output
    assert "2 configurations × 31 seeds (0-30) = 62 runs" in _run("lock", plan).output  # already locked: said again
    plan.write_text(plan.read_text().replace('seeds = "0-30"', 'seeds = "0-3"'))
    res = _run("amend", plan, "--reason", "seed range typo")
    assert res.exit_code == 0 and "2 configurations × 4 seeds (0-3) = 8 runs" in res.output, res.output


def test_run_summary_counts_as_the_trainer_runs():
    """Per stage where a stage runs other configurations, seeds or lengths; configurations with
    their own seeds or budget named with theirs; a configuration marked runnable = false is not
    counted, and named."""
    from plans import SMALL_PLAN

    from prereg_kit.plan import parse_toml, validate_plan
    from prereg_kit.study.jobs import run_summary, stage_summary

    def plan_of(text):
        return validate_plan(parse_toml(text.encode()))

    assert run_summary(plan_of(SMALL_PLAN)) == ["2 configurations × 3 seeds (0-2) = 6 runs, B = 1M generated tokens each"]
    staged = SMALL_PLAN + ('\n[[stages]]\nname = "smoke"\nseeds = [7]\nconfigurations = ["A"]\ntrain_to = "0.25B"\n'
                           '\n[[stages]]\nname = "main"\n\n[[stages]]\nname = "pilot"\n')
    assert run_summary(plan_of(staged)) == [
        "stage main: 2 configurations × 3 seeds (0-2) = 6 runs, B = 1M generated tokens each",
        "stage smoke: 1 configuration × 1 seed (7) = 1 run, B = 1M generated tokens each, trained to 0.25B"]  # pilot = main
    mixed = SMALL_PLAN.replace("[configurations.B]\n", "[configurations.B]\nseeds = [0, 1, 2, 3, 4, 5]\nbudget = { iterations = 300 }\n")
    mixed += '\n[configurations.C]\nrunnable = false\nnot_runnable = "needs a 70B model"\n'
    assert stage_summary(plan_of(mixed)) == (
        "2 configurations (A: 3 seeds (0-2); B: 6 seeds (0-5)) = 9 runs, B = 1M generated tokens (A); 300 iterations (B); "
        "not runnable: C (runnable = false)")
