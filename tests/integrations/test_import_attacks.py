"""The import core attacked through every importer (verl, OpenRLHF, TRL, TensorBoard, MLflow, W&B).

Each attack goes through `prereg import <tool>` as a user types it and asserts the exit code, the
one line that names the cause in the user's input, and that nothing was written outside the study
or left behind in it:

- a `runs/` folder, a configuration folder or a run folder that is a symbolic link out of the study
  (refused before anything is written; the link's target stays empty);
- a main run that started before the plan was locked (refused at import with both times named,
  the rule the audit applies later);
- a refused import leaves no folder it made (no empty `runs/<configuration>/`).

The built-in trainer's launcher refuses the same symbolic links before it runs anything.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pytest
from importfiles import (
    IMPORT_PLAN,
    T_LOCK,
    T_RUN,
    locked_study,
    openrlhf_lines,
    outputs_lines,
    trl_state,
    write_verl_run,
)
from paths import ROOT
from plans import lock_at
from test_import_core import _prereg
from test_import_trackers import _mlflow_run, _tb, _wandb
from typer.testing import CliRunner

from prereg_kit.errors import PreregError, ViolationError
from prereg_kit.integrations.importing import ImportedRun, write_imported_run

STEPS = range(1, 11)
TRACKER_ROWS = {s: {"perf/total_num_tokens": 560.0, "prompt_length/mean": 20.0, "response_length/mean": 50.0,
                    "timing_s/gen": 1.5, "timing_s/reward": 0.1, "timing_s/old_log_prob": 0.2, "timing_s/adv": 0.01,
                    "timing_s/update_actor": 0.9} for s in STEPS}


def _z(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def _tracker_evals(path: Path) -> Path:
    rows = [{"problem_id": f"p{k}", "eval_set": "test", "step": step, "samples": 2, "correct": 1}
            for step in (0, 5, 10) for k in range(6)]
    pd.DataFrame(rows).to_parquet(path)
    return path


def _verl(root: Path, started: datetime) -> list[str]:
    f = write_verl_run(root, 0, 0.5)
    return [str(f["log"]), "--config", str(f["config"]), "--validation-dir", str(f["val"]), "--eval-set", "test",
            "--started-at", _z(started)]


def _openrlhf(root: Path, started: datetime) -> list[str]:
    root.mkdir(parents=True)
    (root / "history.jsonl").write_text(openrlhf_lines())
    (root / "out.jsonl").write_text(outputs_lines())
    (root / "args.json").write_text(json.dumps({"rollout": {"batch_size": 4, "n_samples_per_prompt": 4},
                                                "train": {"batch_size": 8, "max_epochs": 1}}))
    return [str(root / "history.jsonl"), "--args", str(root / "args.json"), "--evaluations", str(root / "out.jsonl"),
            "--eval-set", "test", "--started-at", _z(started)]


def _trl(root: Path, started: datetime) -> list[str]:
    d = root / "checkpoint-6"
    d.mkdir(parents=True)
    (d / "trainer_state.json").write_text(json.dumps(trl_state()))
    (root / "out.jsonl").write_text(outputs_lines())
    return [str(d), "--completions-per-step", "8", "--evaluations", str(root / "out.jsonl"), "--eval-set", "test",
            "--started-at", _z(started)]


def _tracker_args(path: Path, root: Path) -> list[str]:
    return [str(path), "--preset", "verl", "--updates-per-step", "2", "--evaluations",
            str(_tracker_evals(root / "evals.parquet"))]


def _tensorboard(root: Path, started: datetime) -> list[str]:
    root.mkdir(parents=True)
    return _tracker_args(_tb(root / "tb", TRACKER_ROWS), root)  # stamped by the real clock


def _mlflow(root: Path, started: datetime) -> list[str]:
    root.mkdir(parents=True)
    run_id = _mlflow_run(root / "mlruns", TRACKER_ROWS)  # stamped by the real clock
    return [*_tracker_args(root / "mlruns", root), "--run-id", run_id]


def _wandb_history(root: Path, started: datetime) -> list[str]:
    root.mkdir(parents=True)
    return _tracker_args(_wandb(root / "history.parquet", TRACKER_ROWS, t0=started.timestamp()), root)


# The importers by their subcommand: each writes a valid run of its tool under a folder and returns
# the arguments after `prereg import <tool> STUDY`; trackers stamp the run with their own clock.
IMPORTERS = {"verl": _verl, "openrlhf": _openrlhf, "trl": _trl, "tensorboard": _tensorboard, "mlflow": _mlflow,
             "wandb": _wandb_history}
TRACKERS = ("tensorboard", "mlflow", "wandb")


def _run(study: Path, tool: str, args: list[str], *more: str):
    return CliRunner().invoke(_prereg(), ["import", tool, str(study), *args, "-c", "A", "--seed", "0", *more])


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) if folder.exists() else []


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """One valid run of every importer, started after T_LOCK (trackers: now)."""
    root = tmp_path_factory.mktemp("sources")
    return {tool: make(root / tool, T_RUN) for tool, make in IMPORTERS.items()}


@pytest.mark.parametrize("tool", IMPORTERS)
def test_a_valid_run_of_every_importer_imports_and_says_what_with_json(tmp_path, sources, tool):
    study = locked_study(tmp_path / "study")
    res = _run(study, tool, sources[tool], "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["run"] == str(study / "runs" / "A" / "seed-0") and doc["importer"] == {"trl": "trl-state"}.get(tool, tool) and doc["sealed"]
    assert doc["iterations"] > 0 and doc["tokens"] > 0 and doc["evaluations"] == 3 and doc["evaluation_rows"] >= 18
    assert doc["start_source"] == ("--started-at" if tool not in TRACKERS else f"the {tool} log's own clock")


@pytest.mark.parametrize("link", ["runs", "runs/A", "runs/A/seed-0"])
@pytest.mark.parametrize("tool", IMPORTERS)
def test_a_symbolic_link_out_of_the_study_is_refused_before_anything_is_written(tmp_path, sources, tool, link):
    study = locked_study(tmp_path / "study")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (study / link).parent.mkdir(parents=True, exist_ok=True)
    (study / link).symlink_to(outside, target_is_directory=True)
    before = _files(study)
    lock_before = (study / "plan.lock").read_text()
    res = _run(study, tool, sources[tool])
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert "\n" not in line and f"{study / link}: a symbolic link (to {outside})" in line and "nothing imported" in line
    assert _files(outside) == [] and _files(study) == before
    assert (study / "plan.lock").read_text() == lock_before  # nothing sealed


@pytest.mark.parametrize("tool", IMPORTERS)
def test_a_run_started_before_the_lock_is_refused_at_import_naming_both_times(tmp_path, sources, tool):
    if tool in TRACKERS:  # the tracker stamped the run: lock the plan after that
        lock = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=2)
        study = tmp_path / "study"
        study.mkdir()
        (study / "plan.toml").write_text(IMPORT_PLAN)
        lock_at(study / "plan.toml", lock)
        args = sources[tool] if tool != "wandb" else _wandb_history(tmp_path / "w", lock - timedelta(hours=1))
    else:
        lock = T_LOCK
        study = locked_study(tmp_path / "study")
        args = IMPORTERS[tool](tmp_path / "src", T_LOCK - timedelta(hours=3))
    res = _run(study, tool, args)
    assert res.exit_code == 1, res.output
    line = res.output.strip()
    assert "\n" not in line and "A/seed-0: main run started " in line
    assert f"before the plan was locked ({_z(lock)})" in line and "nothing imported" in line
    assert ("(start time from --started-at)" in line) if tool not in TRACKERS else (f"the {tool} log's own clock" in line)
    assert not (study / "runs").exists()


def _bad_run() -> ImportedRun:
    it = pd.DataFrame({"iteration": [0, 1], "tokens_rollout": [10, 10], "tokens_continuation": 0, "tokens_discarded": 0,
                       "seconds_step": [1.0, 1.0], "updates": [1, 2], "truncation_rate": [0.0, 7.5]})
    ev = pd.DataFrame({"iteration": [0], "eval_set": ["test"], "problem_id": ["p"], "samples": [2], "correct": [1]})
    return ImportedRun(trainer="t", importer="verl", iterations=it, evaluations=ev, started_at=T_RUN)


def test_a_run_the_log_format_refuses_leaves_no_folder_behind(tmp_path):
    study = locked_study(tmp_path / "study")
    with pytest.raises(PreregError, match="nothing imported"):
        write_imported_run(study, "A", 0, _bad_run())
    assert not (study / "runs").exists()
    (study / "runs" / "B").mkdir(parents=True)  # folders that were there stay
    with pytest.raises(PreregError, match="nothing imported"):
        write_imported_run(study, "A", 0, _bad_run())
    assert _files(study / "runs") == ["B"]


def test_an_interrupted_import_leaves_nothing_half_written(tmp_path, monkeypatch):
    study = locked_study(tmp_path / "study")
    run = _bad_run()
    run.iterations["truncation_rate"] = 0.0
    import prereg_kit.integrations.importing as importing

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(importing, "seal_runs", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_imported_run(study, "A", 0, run)
    assert not (study / "runs").exists()


def test_a_run_is_recorded_under_the_plan_entry_in_force_when_it_started(tmp_path):
    from plans import amend_at

    study = locked_study(tmp_path / "study")
    plan = study / "plan.toml"
    plan.write_text(plan.read_text().replace("learning_rate = 2e-6", "learning_rate = 3e-6"))  # B only
    amend_at(plan, "B's learning rate", T_LOCK + timedelta(days=2))
    from prereg_kit.chain.lock import read_chain
    from prereg_kit.runlog import read_meta

    chain = read_chain(plan)
    early = _bad_run()
    early.iterations["truncation_rate"] = 0.0
    # started a day after the lock, before an amendment that changed only B: admissible under entry 0
    folder = write_imported_run(study, "A", 0, early)
    assert read_meta(folder).plan_hash == chain.entries[0]["content_sha256"]
    with pytest.raises(ViolationError, match=r"B/seed-0: main run under superseded entry 0; amendment 1 .* changed "
                                             r"configurations\.B\.overrides\.learning_rate \(start time from --started-at\)"):
        write_imported_run(study, "B", 0, early)
    late = _bad_run()
    late.iterations["truncation_rate"] = 0.0
    late.started_at = T_LOCK + timedelta(days=3)
    assert read_meta(write_imported_run(study, "A", 1, late)).plan_hash == chain.last["content_sha256"]
    with pytest.raises(ViolationError, match=r"A/seed-2: main run started 2026-01-10T11:00:00Z, before the plan was locked"):
        late.started_at = T_LOCK - timedelta(hours=1)
        write_imported_run(study, "A", 2, late)


def test_the_built_in_trainer_refuses_a_symbolic_link_on_the_way_to_a_run_too(tmp_path):
    pytest.importorskip("torch")
    from trainer.launch import plan_jobs

    study = tmp_path / "demo"
    study.mkdir()
    (study / "plan.toml").write_text((ROOT / "examples" / "demo" / "plan.toml").read_text())
    lock_at(study / "plan.toml", T_LOCK)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (study / "runs").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PreregError, match=rf"{study / 'runs'}: a symbolic link \(to {outside}\).*nothing run"):
        plan_jobs(study)
    assert _files(outside) == []


def _main_file(tool: str, args: list[str]) -> Path:
    """The file of a source that holds the run's steps (the one an attack damages)."""
    path = Path(args[0])
    if tool == "tensorboard":
        return next(path.glob("events.out.tfevents*"))
    if tool == "mlflow":
        return sorted(p for p in path.glob("*/*/metrics/**/*") if p.is_file())[0]
    if tool == "trl":
        return path / "trainer_state.json"
    return path


JUNK = {"empty": b"", "binary": bytes(range(256)) * 4, "not-utf8": b'{"step": 1, "data": {"x": "\xff\xfe"}}\n'}


@pytest.mark.parametrize("damage", JUNK)
@pytest.mark.parametrize("tool", IMPORTERS)
def test_a_damaged_file_of_every_importer_is_one_line_and_exit_2_with_nothing_written(tmp_path, tool, damage):
    args = IMPORTERS[tool](tmp_path / "src", T_RUN)
    target = _main_file(tool, args)
    target.write_bytes(JUNK[damage])
    study = locked_study(tmp_path / "study")
    res = _run(study, tool, args)
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert "\n" not in line and line.startswith("error: ") and "internal error" not in line and "np." not in line
    assert not (study / "runs").exists()


@pytest.mark.parametrize("suffix, damage", [(".jsonl", "binary"), (".jsonl", "not-utf8"), (".jsonl", "empty"),
                                            (".parquet", "binary")])
def test_a_damaged_evaluations_file_of_a_tracker_import_is_one_line_and_exit_2(tmp_path, sources, suffix, damage):
    evals = tmp_path / f"evals{suffix}"
    evals.write_bytes(JUNK[damage])
    args = list(sources["tensorboard"])
    args[args.index("--evaluations") + 1] = str(evals)
    study = locked_study(tmp_path / "study")
    res = _run(study, "tensorboard", args)
    assert res.exit_code == 2, res.output
    line = res.output.strip()
    assert "\n" not in line and str(evals) in line and "internal error" not in line
    assert not (study / "runs").exists()
