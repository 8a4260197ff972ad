"""The import core and `prereg import`: imported runs land in a locked study, sealed, and `prereg analyze` reads them."""

from __future__ import annotations

import json
import tomllib

import numpy as np
import pandas as pd
import pytest
import typer
from importfiles import IMPORT_PLAN, N_STEPS, T_RUN, locked_study, prereg_app, write_verl_run
from paths import ROOT
from typer.testing import CliRunner

from prereg_kit import cli
from prereg_kit.cli import commands as cli_commands
from prereg_kit.errors import PreregError, ViolationError
from prereg_kit.integrations import command
from prereg_kit.integrations.importing import ImportedRun, place_evaluations, write_imported_run
from prereg_kit.integrations.rescore import rescore, score_problems
from prereg_kit.integrations.verl import import_verl
from prereg_kit.runlog import load_study, read_meta

SKILL = {"A": 0.3, "B": 0.6}


_prereg = prereg_app  # the `prereg` app with `import` (importfiles)


def _verl_args(study, files, c, s, *extra):
    return ["import", "verl", str(study), str(files["log"]), "--configuration", c, "--seed", str(s),
            "--config", str(files["config"]), "--validation-dir", str(files["val"]), "--eval-set", "test",
            "--eval-seed", str(s), "--started-at", T_RUN.isoformat().replace("+00:00", "Z"), *extra]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    root = tmp_path_factory.mktemp("imp")
    study = locked_study(root / "study")
    runner = CliRunner()
    for c in ("A", "B"):
        for s in (0, 1, 2):
            files = write_verl_run(root / "verl" / c / str(s), s, SKILL[c])
            res = runner.invoke(_prereg(), _verl_args(study, files, c, s))
            assert res.exit_code == 0, res.output
            assert f"runs/{c}/seed-{s}" in res.output
    return root, study


def test_end_to_end_analyze_reads_imported_runs(imported):
    root, study = imported
    runner = CliRunner()
    res = runner.invoke(_prereg(), ["verify", str(study)])
    assert res.exit_code == 0, res.output
    assert "6 sealed run(s): every file matches its seal" in res.output
    res = runner.invoke(_prereg(), ["analyze", str(study), "--resamples", "200"])
    assert res.exit_code == 0, res.output
    contrasts = pd.read_csv(study / "report" / "contrasts.csv").set_index("contrast")
    assert contrasts.loc["C1", "n"] == 3 and np.isfinite(contrasts.loc["C1", "mean"])
    runs = load_study(study)
    assert runs.iterations.groupby(["configuration", "seed"]).ngroups == 6
    meta = read_meta(study / "runs" / "B" / "seed-1")
    assert meta.trainer == "verl" and meta.source["importer"] == "verl" and meta.status == "complete"
    assert meta.source["files"][0]["path"] == "metrics.jsonl"
    ev = pd.read_parquet(study / "runs" / "B" / "seed-1" / "evals.parquet")
    # evaluation at verl's step 5 = after 5 iterations of 400 tokens, 2 updates each
    at5 = ev[ev["iteration"] == 5]
    assert (at5["eval_index"] == 1).all() and (at5["tokens"] == 2000).all() and (at5["updates"] == 10).all()
    assert at5["train_seconds"].iloc[0] == pytest.approx(5 * (1.5 + 0.51 + 0.9))
    assert (ev[ev["iteration"] == 0]["tokens"] == 0).all() and set(ev["eval_index"]) == {0, 1, 2}


def test_over_an_existing_run_refused(imported):
    root, study = imported
    files = write_verl_run(root / "again", 0, 0.3)
    before = sorted(p.name for p in (study / "runs" / "A" / "seed-0").iterdir())
    res = CliRunner().invoke(_prereg(), _verl_args(study, files, "A", 0))
    assert res.exit_code != 0 and "already holds files" in res.output and "never overwrites" in res.output
    assert sorted(p.name for p in (study / "runs" / "A" / "seed-0").iterdir()) == before


@pytest.mark.parametrize("c,s,msg", [("A", 3, "--seed: 3 is not a seed of configuration 'A'"),
                                     ("a", 0, "--configuration: 'a' is not a configuration"),
                                     ("B ", 0, "--configuration: 'B ' is not a configuration")])
def test_outside_the_plan_refused(tmp_path, c, s, msg):
    study = locked_study(tmp_path / "study")
    files = write_verl_run(tmp_path / "v", 0, 0.3)
    run = import_verl(files["log"], config=files["config"], started_at=T_RUN)
    with pytest.raises(PreregError, match=msg):
        write_imported_run(study, c, s, run)
    assert not (study / "runs").exists()


def test_unlocked_or_changed_plan_refused(tmp_path):
    files = write_verl_run(tmp_path / "v", 0, 0.3)
    run = import_verl(files["log"], config=files["config"], started_at=T_RUN)
    (tmp_path / "u").mkdir()
    (tmp_path / "u" / "plan.toml").write_text(IMPORT_PLAN)
    with pytest.raises(ViolationError, match="main-stage runs need a locked plan"):
        write_imported_run(tmp_path / "u", "A", 0, run)
    study = locked_study(tmp_path / "study")
    (study / "plan.toml").write_text(IMPORT_PLAN.replace('tokens = "4K"', 'tokens = "8K"'))
    with pytest.raises(ViolationError, match="refused until the change is recorded"):
        write_imported_run(study, "A", 0, run)
    assert not (study / "runs").exists() and not (tmp_path / "u" / "runs").exists()


def test_start_time_and_eval_sets_required(tmp_path):
    study = locked_study(tmp_path / "study")
    files = write_verl_run(tmp_path / "v", 0, 0.3)
    run = import_verl(files["log"], config=files["config"], validation_dir=files["val"], eval_set="tset")
    with pytest.raises(PreregError, match="start time is not in its logs: give it \\(--started-at"):
        write_imported_run(study, "A", 0, run)
    run.started_at = T_RUN
    with pytest.raises(PreregError, match="set 'tset' is not an evaluation set .* \\(have: test\\)"):
        write_imported_run(study, "A", 0, run)
    res = CliRunner().invoke(_prereg(), _verl_args(study, files, "A", 0)[:-2] + ["--started-at", "2026-01-11T12:00:00"])
    assert res.exit_code == 2 and "has no UTC offset" in res.output
    assert not (study / "runs").exists()


def test_a_run_the_format_refuses_leaves_nothing(tmp_path):
    study = locked_study(tmp_path / "study")
    files = write_verl_run(tmp_path / "v", 0, 0.3)
    run = import_verl(files["log"], config=files["config"], validation_dir=files["val"], eval_set="test", eval_seed=0,
                      started_at=T_RUN)
    run.evaluations.loc[3, "correct"] = 5  # more correct than samples
    with pytest.raises(PreregError, match="field 'correct': 5 exceeds samples=2; nothing imported"):
        write_imported_run(study, "A", 0, run)
    assert not (study / "runs" / "A" / "seed-0").exists()


def test_place_evaluations_and_its_refusals():
    it = pd.DataFrame({"iteration": [0, 1, 2], "tokens_rollout": [10, 20, 30], "tokens_continuation": [1, 0, 0],
                       "tokens_discarded": [0, 5, 0], "updates": [1, 2, 3], "seconds_step": [1.0, 2.0, 4.0]})
    ev = pd.DataFrame({"iteration": [3, 0, 2], "eval_set": "t", "problem_id": "p", "samples": 1, "correct": 1})
    out = place_evaluations(it, ev)
    assert list(out["eval_index"]) == [0, 1, 2] and list(out["iteration"]) == [0, 2, 3]
    assert list(out["tokens"]) == [0, 36, 66] and list(out["updates"]) == [0, 2, 3]
    assert list(out["train_seconds"]) == [0.0, 3.0, 7.0]
    with pytest.raises(PreregError, match="iteration 4 is not between 0 and the 3 iterations"):
        place_evaluations(it, ev.assign(iteration=[4, 0, 1]))
    with pytest.raises(PreregError, match="row 2 is iteration 2, expected 1"):
        place_evaluations(it.assign(iteration=[0, 2, 3]), ev)
    half = it.assign(seconds_generation=[1.0, None, None])
    with pytest.raises(PreregError, match="iteration 0: needs all five stage times or an unsplit seconds_step"):
        place_evaluations(half, ev)
    with pytest.raises(PreregError, match="missing: seconds_selection"):
        place_evaluations(it.drop(columns="seconds_step"), ev)


def test_rescore_and_score_problems_match_the_verifiers():
    from trainer.data.verifiers import get_verifier, has_boxed

    outs = ["\\boxed{4}", "4", "The answer is 5", "\\boxed{}", "so \\boxed{2/4}"]
    golds = ["4", "4", "4", "4", "1/2"]
    r = rescore(outs, golds)
    assert list(r["correct"]) == [int(get_verifier("default")(o, g)) for o, g in zip(outs, golds)]
    assert list(r["correct_strict"]) == [int(get_verifier("strict")(o, g)) for o, g in zip(outs, golds)]
    assert list(r["boxed"]) == [int(has_boxed(o)) for o in outs]
    assert r["correct"].sum() > r["correct_strict"].sum()  # the strict verifier is stricter on these
    df = pd.DataFrame({"problem_id": ["b", "a", "b"], "output": ["\\boxed{1}", "x", "1"], "answer": ["1", "2", "1"]})
    s = score_problems(df)
    assert list(s["problem_id"]) == ["b", "a"] and list(s["samples"]) == [2, 1] and list(s["correct_strict"]) == [1, 0]
    with pytest.raises(ValueError, match="problem 'b' has outputs with different reference answers"):
        score_problems(df.assign(answer=["1", "2", "3"]))


def test_entry_point_group_wires_prereg_import(monkeypatch):
    ep = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["prereg_kit.commands"]
    assert ep == {"import": "prereg_kit.integrations.command:app",
                  "evaluate-checkpoints": "prereg_kit.integrations.trl_command:app"}

    class EP:
        name = "import"

        def load(self):
            return command.app

    app = typer.Typer()
    monkeypatch.setattr(cli_commands, "app", app)
    import importlib.metadata as md

    monkeypatch.setattr(md, "entry_points", lambda group: [EP()] if group == "prereg_kit.commands" else [])
    cli.add_commands()
    res = CliRunner().invoke(app, ["import", "--help"])
    assert res.exit_code == 0 and all(name in res.output for name in ("verl", "openrlhf", "trl"))
    assert set(command.COMMANDS) >= {"verl", "openrlhf", "trl"}


def test_imported_run_is_a_plain_dataclass():
    run = ImportedRun("x", "y", pd.DataFrame(), pd.DataFrame())
    assert run.config == {} and run.source == {} and run.started_at is None and run.device == "unknown"
    assert json.dumps(run.source) == "{}" and N_STEPS == 10


def test_cli_refusals_are_one_line(tmp_path):
    from importfiles import openrlhf_lines, trl_state

    study = locked_study(tmp_path / "study")
    (tmp_path / "h.jsonl").write_text(openrlhf_lines(time=False))
    (tmp_path / "trainer_state.json").write_text(json.dumps(trl_state(every=2)))
    files = write_verl_run(tmp_path / "v", 0, 0.3, drop=("timing_s/gen",))
    runner = CliRunner()
    cases = [
        (["import", "openrlhf", str(study), str(tmp_path / "h.jsonl"), "-c", "A", "-s", "0", "--responses-per-step", "16",
          "--updates-per-step", "1", "--key", "seconds_step"], "--key: expected COLUMN=KEY"),
        (["import", "openrlhf", str(study), str(tmp_path / "h.jsonl"), "-c", "A", "-s", "0", "--responses-per-step", "16",
          "--updates-per-step", "1"], "key 'timing/step_total' is not logged"),
        (["import", "trl", str(study), str(tmp_path), "-c", "A", "-s", "0", "--completions-per-step", "8"],
         "every training step must be logged"),
        (_verl_args(study, files, "A", 0), "only timing_s/step is logged"),
    ]
    for argv, msg in cases:
        res = runner.invoke(_prereg(), argv)
        assert res.exit_code == 2, res.output
        assert msg in res.output and "Traceback" not in res.output and res.output.count("error:") == 1
    assert not (study / "runs").exists()


def test_no_import_cycle_with_the_installed_entry_point():
    """With the entry point installed, importing the command module first (before prereg_kit.cli) works."""
    import subprocess
    import sys

    code = ("import importlib.metadata as md; real = md.entry_points\n"
            "md.entry_points = lambda group=None, **kw: [md.EntryPoint('import', 'prereg_kit.integrations.command:app', "
            "'prereg_kit.commands')] if group == 'prereg_kit.commands' else real(group=group, **kw)\n"
            "import prereg_kit.integrations.command as c\nimport prereg_kit.cli as cli\n"
            "print(sorted(g.name for g in cli.app.registered_groups), sorted(x.name for x in c.app.registered_commands))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert "['export', 'import']" in res.stdout and "'verl'" in res.stdout
