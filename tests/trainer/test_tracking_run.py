"""`prereg run --tracker` on real runs of the tiny model: a main stage trained by two worker
processes (each run its own tracker run, nothing but progress and compute logged, the study still
verifies), and a smoke run interrupted and resumed into the same tracker runs.
tests/trainer/test_tracking.py checks the same claims quickly on synthetic iterations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tensorboard", reason="the tensorboard extra")

from test_tracking import (
    BLIND_KEYS,
    TRACKER_ENV,
    _have,
    spec_of,
    tensorboard_events,
    tiny_plan,
    wandb_records,
)
from typer.testing import CliRunner

from prereg_kit.chain.lock import lock_plan
from prereg_kit.cli import app
from prereg_kit.runlog import TRACKER_RECORD, read_meta, read_run
from trainer.core.tracking import tensorboard_dir

TRACKERS = ["tensorboard", "mlflow"] + (["wandb"] if _have("wandb") else [])


@pytest.fixture(scope="module")
def cache(trainer_cache) -> Path:
    # mlflow (a second of imports) only where these slow tests run, not in every worker that collects them
    pytest.importorskip("mlflow", reason="the mlflow extra (mlflow-skinny)")
    return trainer_cache  # conftest: one warm start per worker, shared with the other modules that train


def make_study(tmp_path: Path, cache: Path, monkeypatch, tokens: int = 600) -> Path:
    for k in TRACKER_ENV:
        monkeypatch.delenv(k, raising=False)
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(tiny_plan(tokens))
    (d / ".cache").symlink_to(cache, target_is_directory=True)  # the warm start, shared
    return d


def _wandb_history(study: Path, run_dir: Path) -> tuple[list[dict], list[int]]:
    """The rows a run logged to W&B (every offline folder of its id, in order) and its exit codes."""
    run_id = json.loads((run_dir / TRACKER_RECORD).read_text())["wandb"]["id"]
    history, exits = [], []
    for f in sorted((study / "wandb").glob(f"offline-run-*-{run_id}*")):
        for rec in wandb_records(f / f"run-{run_id}.wandb"):
            kind = rec.WhichOneof("record_type")
            if kind == "history":
                history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
            elif kind == "exit":
                exits.append(rec.exit.exit_code)
    return history, exits


@pytest.mark.slow  # trains two runs of the tiny model in two worker processes
def test_a_main_stage_with_two_workers_tracks_each_run_blind_and_still_verifies(tmp_path, cache, monkeypatch):
    from mlflow.tracking import MlflowClient

    from prereg_kit.study.verify import verify_study

    study = make_study(tmp_path, cache, monkeypatch)
    lock_plan(study / "plan.toml")
    res = CliRunner().invoke(app, ["run", str(study), "--seeds", "0", "--jobs", "2", "--tracker", ",".join(TRACKERS)])
    assert res.exit_code == 0, res.output
    assert "tracking each run live in tensorboard (" in res.output and "blind: progress and compute only" in res.output
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads a file store only when told to
    client = MlflowClient((study.resolve() / "mlruns").as_uri())
    mlflow_runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert sorted(r.data.tags["prereg.configuration"] for r in mlflow_runs) == ["frozen", "grpo"]
    ids = set()
    for config in ("grpo", "frozen"):
        folder = study / "runs" / config / "seed-0"
        run = read_run(folder, strict=True)
        assert run.meta.status == "complete" and not run.problems
        steps = list(range(len(run.iterations) + 1))  # the evaluation before training, then each iteration
        ev = tensorboard_events(tensorboard_dir(spec_of(study, "main", [], config)))
        assert set(ev) <= BLIND_KEYS and [s for s, _ in ev["tokens"]] == steps
        assert dict(ev["tokens"])[steps[-1]] == run.iterations["tokens_total"].sum()
        state = json.loads((folder / TRACKER_RECORD).read_text())
        mr = client.get_run(state["mlflow"]["run_id"])
        assert mr.info.status == "FINISHED" and mr.data.tags["prereg.configuration"] == config
        assert set(mr.data.metrics) <= BLIND_KEYS
        assert mr.data.metrics["evaluations"] == run.evals["eval_index"].nunique()
        if "wandb" in TRACKERS:
            history, exits = _wandb_history(study, folder)
            assert exits == [0] and [h["iteration"] for h in history] == steps
            assert set().union(*history) - {"_step", "_runtime", "_timestamp"} <= BLIND_KEYS
            ids.add(state["wandb"]["id"])
    assert len(ids) == (2 if "wandb" in TRACKERS else 0)  # each run its own tracker run
    rep = verify_study(study)  # sealed runs, tracker folders beside them: nothing to report
    assert rep.exit_code == 0 and not rep.violations, rep.violations
    assert set(rep.seals.sealed) == {"runs/grpo/seed-0", "runs/frozen/seed-0"}


@pytest.mark.slow  # trains the tiny model, interrupted once
def test_an_interrupted_smoke_run_resumes_its_tracker_runs_with_accuracy_and_reward(tmp_path, cache, monkeypatch):
    from mlflow.tracking import MlflowClient

    from trainer.loop import train

    study = make_study(tmp_path, cache, monkeypatch, tokens=2000)  # 0.5B: about 6 iterations, evaluations every 3
    spec = spec_of(study, "smoke", TRACKERS)

    def interrupt(info: dict) -> None:  # Ctrl-C or SIGTERM after an iteration past the first checkpoint
        if info.get("iteration", 0) >= 2 and "eval_index" not in info and info["iteration"] > evaluated[-1]:
            raise KeyboardInterrupt
        if "eval_index" in info:
            evaluated.append(info["iteration"])

    evaluated = [0]
    with pytest.raises(KeyboardInterrupt):
        train(spec, progress=interrupt)
    assert read_meta(spec.run_dir).status == "stopped"
    train(spec)
    run = read_run(spec.run_dir, strict=True)
    assert run.meta.status == "complete" and len(run.meta.model_extra["resumes"]) == 1
    steps = list(range(len(run.iterations) + 1))
    ev = tensorboard_events(tensorboard_dir(spec))
    assert [s for s, _ in ev["tokens"]] == steps  # the steps after the checkpoint, logged twice, shown once
    assert ev["reward_mean"] and [s for s, _ in ev["accuracy/heldout"]] == sorted(set(run.evals["iteration"]))
    state = json.loads((Path(spec.run_dir) / TRACKER_RECORD).read_text())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads a file store only when told to
    client = MlflowClient(state["mlflow"]["tracking_uri"])
    (mr,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert mr.info.run_id == state["mlflow"]["run_id"] and mr.info.status == "FINISHED"
    assert {"reward_mean", "accuracy/heldout"} <= set(mr.data.metrics)
    if "wandb" in TRACKERS:
        history, exits = _wandb_history(study, Path(spec.run_dir))
        assert exits == [130, 0] and {h["iteration"] for h in history} == set(steps)
        assert len(history) > len(steps)  # the iterations after the checkpoint came again
