"""Live tracking of the built-in trainer (`prereg run --tracker`, trainer.core.tracking): what each
tracker receives (blind in the main stage), resuming the same tracker run, a tracker that fails
mid-run, the refusals, and the option's way to the runs (local workers, Slurm, Ray).

The sinks are driven here as the loop drives them, on synthetic iterations (nothing trains), and
read back with each tool's own reader; tests/trainer/test_tracking_run.py trains real runs with them."""

from __future__ import annotations

import json
import logging
import shutil
import struct
import time
from pathlib import Path
from typing import ClassVar

import pytest
from plans import run_plan
from typer.testing import CliRunner

from prereg_kit.chain.lock import lock_plan
from prereg_kit.cli import app
from prereg_kit.errors import MissingExtraError, PreregError
from prereg_kit.runlog import PROGRESS_COLUMNS, TRACKER_RECORD
from trainer.core.budget import TRAIN_STAGES, Counters
from trainer.core.tracking import (
    TRACKERS,
    MlflowSink,
    Tracking,
    check_trackers,
    tensorboard_dir,
    tracked_metrics,
)

# everything a blind stage may show: the progress columns of the run log and the run's counters
BLIND_KEYS = set(PROGRESS_COLUMNS) | {"tokens", "b_multiple", "train_seconds", "evaluations"}
TRACKER_ENV = ("WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME",
               "MLFLOW_ALLOW_FILE_STORE")


def tiny_plan(tokens: int = 600) -> str:
    return run_plan(id="tiny", title="Tiny tracking test", question="Is it tracked?", comparator="frozen",
                    treatment="grpo", seeds="[0, 1]", configurations="""\
[configurations.grpo]
[configurations.frozen]
overrides = { learning_rate = 0.0 }
""", tokens=tokens, eval_every="B/4", samples=2, greedy=True, n_problems=6, smoke_configurations='["grpo"]',
                    train_to="0.5B")


def make_study(root: Path) -> Path:
    d = root / "study"
    d.mkdir()
    (d / "plan.toml").write_text(tiny_plan())
    lock_plan(d / "plan.toml")
    return d


def spec_of(study: Path, stage: str, trackers: list[str], configuration: str = "grpo", seed: int = 0):
    from trainer.launch import plan_jobs

    _, jobs = plan_jobs(study, stage, [configuration], [seed], trackers)
    Path(jobs[0].spec.run_dir).mkdir(parents=True, exist_ok=True)
    return jobs[0].spec


def drive(spec, counters: Counters, iterations: int, *, seconds: float = 0.1, fail_after: int | None = None,
          sinks=TRACKERS) -> Counters:
    """Log as the loop logs: the evaluation before training (a new run), then ``iterations``
    iteration rows, an evaluation after every second one; accuracy and rewards are always handed
    over (the tracker decides what a stage shows). ``fail_after``: interrupted (Ctrl-C / SIGTERM)
    after that many iterations."""
    with Tracking.open(spec, counters, sinks) as tracking:
        if counters.eval_index == 0:
            counters.eval_index += 1
            tracking.log(counters, None, {"heldout": 0.25})
        for k in range(iterations):
            if fail_after is not None and k == fail_after:
                raise KeyboardInterrupt
            row = counters.add_iteration({"rollout": 100, "continuation": 4, "discarded": 8},
                                         {s: seconds for s in TRAIN_STAGES}, updates=1)
            row.update(reward_mean=0.5, mixed_share=0.5, all_wrong_share=0.25, all_correct_share=0.25, length_mean=12.0,
                       truncation_rate=0.0, loss=0.1, lr=1e-3, **{"channel/correct": 0.5, "sel_realized_trained": 0.5})
            accuracies = None
            if counters.iteration % 2 == 0:
                counters.eval_index += 1
                row["seconds_evaluation"] = 0.5
                accuracies = {"heldout": 0.25 + 0.01 * counters.iteration}
            tracking.log(counters, row, accuracies)
    return counters


@pytest.fixture(scope="module")
def clean_env():
    with pytest.MonkeyPatch.context() as mp:
        for k in TRACKER_ENV:
            mp.delenv(k, raising=False)
        yield mp


# --- what a tracker receives -----------------------------------------------------------------------

def test_a_blind_stage_sends_progress_and_compute_only(tmp_path):
    study = make_study(tmp_path)
    row = {"iteration": 2, "tokens_rollout": 100, "tokens_continuation": 0, "tokens_discarded": 8,
           **{f"seconds_{s}": 0.1 for s in TRAIN_STAGES}, "updates": 3, "seconds_evaluation": 0.4,
           "reward_mean": 0.5, "mixed_share": 0.5, "all_wrong_share": 0.2, "all_correct_share": 0.3,
           "length_mean": 11.0, "truncation_rate": 0.1, "loss": 0.2, "channel/correct": 0.6, "sel_realized_trained": 0.4}
    c = Counters(iteration=3, eval_index=2, tokens={"rollout": 300, "continuation": 0, "discarded": 24},
                 train_seconds=1.5, updates=3)
    main = tracked_metrics(spec_of(study, "main", []), c, row, {"heldout": 0.7})
    assert set(main) <= BLIND_KEYS and not any(w in k for k in main for w in ("acc", "reward", "share", "length"))
    assert main["iteration"] == 3 and main["tokens"] == 324 and main["evaluations"] == 2 and main["tokens_discarded"] == 8
    assert main["b_multiple"] == pytest.approx(324 / 600) and main["train_seconds"] == 1.5
    smoke = tracked_metrics(spec_of(study, "smoke", []), c, row, {"heldout": 0.7})
    assert smoke["accuracy/heldout"] == 0.7 and smoke["reward_mean"] == 0.5 and smoke["channel/correct"] == 0.6
    assert smoke["seconds_evaluation"] == 0.4 and smoke["iteration"] == 3  # iterations completed, not the row's index
    assert set(main) < set(smoke)


def test_names_are_checked_and_a_missing_package_names_its_extra(monkeypatch):
    assert check_trackers(["TensorBoard", "mlflow", "tensorboard"]) == ["tensorboard", "mlflow"]
    assert check_trackers(None) == []
    with pytest.raises(PreregError) as e:
        check_trackers(["wandb", "neptune"])
    assert e.value.lines == ["--tracker neptune: unknown tracker (have: wandb, mlflow, tensorboard)"]
    from trainer.core import tracking

    monkeypatch.setattr(tracking, "find_spec", lambda name: None if name == "mlflow" else object())
    with pytest.raises(MissingExtraError) as e:
        check_trackers(["tensorboard", "mlflow"])
    assert e.value.lines == [("--tracker mlflow needs the mlflow package, which is not installed: "
                              "pip install 'prereg-kit[mlflow]'")]


def test_prereg_run_refuses_a_bad_tracker_in_one_line_before_anything_starts(tmp_path, monkeypatch):
    from trainer.core import tracking

    study = make_study(tmp_path)
    res = CliRunner().invoke(app, ["run", str(study), "--tracker", "tensorboard,neptune"])
    assert res.exit_code == 2 and "--tracker neptune: unknown tracker (have: wandb, mlflow, tensorboard)" in res.output
    monkeypatch.setattr(tracking, "find_spec", lambda name: None)
    res = CliRunner().invoke(app, ["run", str(study), "--stage", "smoke", "--tracker", "wandb", "--executor", "ray"])
    assert res.exit_code == 2, res.output
    assert "--tracker wandb needs the wandb package, which is not installed: pip install 'prereg-kit[wandb]'" in res.output
    assert "Traceback" not in res.output and not (study / "runs").exists() and not (study / "stages").exists()


def test_a_runner_without_trackers_is_refused(tmp_path, monkeypatch):
    import prereg_kit.cli.runners as runners

    class Old:
        name = "old"

        def run(self, study_dir, *, stage="main", configs=None, seeds=None, n_jobs=None, console=None):
            raise AssertionError("never called")

    monkeypatch.setattr(runners, "load_runner", lambda name=None, command="run": Old())
    res = CliRunner().invoke(app, ["run", str(make_study(tmp_path)), "--tracker", "mlflow"])
    assert res.exit_code == 2 and "--tracker: the runner 'old' takes no trackers" in res.output


# --- a tracker that fails, and closing ---------------------------------------------------------------

class Fake:
    """A sink that records its calls; ``fail`` in ("open", "log"): raises there."""

    fail = ""
    calls: ClassVar[list] = []  # each test's subclass has a list of its own

    def __init__(self, spec, state, first_step):
        if self.fail == "open":
            raise ConnectionError("server gone\nsecond line")
        state["id"] = "fake-1"
        self.calls.append(("open", first_step))

    def log(self, metrics, step):
        if self.fail == "log" and step >= 2:
            raise ConnectionError("server gone")
        self.calls.append(("log", step))

    def close(self, status):
        self.calls.append(("close", status))


@pytest.mark.parametrize("fail", ["open", "log"])
def test_a_failing_tracker_is_warned_about_once_and_the_run_goes_on(tmp_path, caplog, fail):
    good = type("Good", (Fake,), {"calls": []})
    bad = type("Bad", (Fake,), {"calls": [], "fail": fail})
    spec = spec_of(make_study(tmp_path), "smoke", ["tensorboard", "mlflow"])
    with caplog.at_level(logging.WARNING, logger="prereg_kit.tracking"):
        c = drive(spec, Counters(), 5, sinks={"tensorboard": good, "mlflow": bad})
    assert c.iteration == 5
    assert [m for _, m in good.calls] == [0, 0, 1, 2, 3, 4, 5, "complete"]
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and warned[0].startswith("tracker mlflow ")
    assert warned[0].endswith("(ConnectionError: server gone); training goes on without it, the run log is complete")
    assert ("could not start" if fail == "open" else "failed at iteration 2") in warned[0]
    if fail == "log":
        assert bad.calls == [("open", 0), ("log", 0), ("log", 1), ("close", "failed")]


def test_an_interrupted_run_closes_its_trackers_as_stopped_and_resumes_them(tmp_path):
    sink = type("Sink", (Fake,), {"calls": []})
    spec = spec_of(make_study(tmp_path), "main", ["wandb"])
    c = Counters()
    with pytest.raises(KeyboardInterrupt):
        drive(spec, c, 5, fail_after=3, sinks={"wandb": sink})
    assert sink.calls[-1] == ("close", "stopped")
    assert json.loads((Path(spec.run_dir) / TRACKER_RECORD).read_text()) == {"wandb": {"id": "fake-1"}}
    sink.calls.clear()
    drive(spec, Counters(iteration=2, eval_index=2, updates=2), 1, sinks={"wandb": sink})  # from the checkpoint at 2
    assert sink.calls == [("open", 3), ("log", 3), ("close", "complete")]


def test_without_trackers_nothing_is_written(tmp_path):
    spec = spec_of(make_study(tmp_path), "main", [])
    drive(spec, Counters(), 2)
    assert not (Path(spec.run_dir) / TRACKER_RECORD).exists() and not (Path(spec.study_dir) / "tensorboard").exists()


# --- the real clients, read back with their own readers ----------------------------------------------

def _run_twice(study: Path, stage: str, trackers: list[str]):
    """A run interrupted after 5 iterations (its last checkpoint at the evaluation after 4), then
    resumed from that checkpoint for 2 more, with other stage seconds (so a dropped step shows)."""
    spec = spec_of(study, stage, trackers)
    with pytest.raises(KeyboardInterrupt):
        drive(spec, Counters(), 6, fail_after=5)
    # A resume starts later than the run it resumes. TensorBoard reads a folder's event files in the
    # order of their names, "events.out.tfevents.<second>.<host>.<pid>.<writer number>": two writers
    # made in the same second of one process sort by that number as text (".10" before ".9"), so the
    # resumed file could be read first and the interrupted one's steps purge the resumed steps.
    time.sleep(1.0 - time.time() % 1.0 + 0.01)
    resumed = Counters(iteration=4, eval_index=3, tokens={"rollout": 400, "continuation": 16, "discarded": 32},
                       train_seconds=2.0, updates=4)
    drive(spec, resumed, 2, seconds=0.2)
    return spec


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory, clean_env):
    """The tiny study's grpo seed 0 tracked in every installed tool: main stage and smoke stage."""
    pytest.importorskip("torch")  # TensorBoard through torch's SummaryWriter
    pytest.importorskip("tensorboard", reason="the tensorboard extra")
    pytest.importorskip("mlflow", reason="the mlflow extra (mlflow-skinny)")
    names = ["tensorboard", "mlflow"] + (["wandb"] if _have("wandb") else [])
    study = make_study(tmp_path_factory.mktemp("tracked"))
    specs = {stage: _run_twice(study, stage, names) for stage in ("main", "smoke")}
    yield study, specs
    if "wandb" in names:
        import wandb

        wandb.teardown()  # its service process ends with the tests


def _have(module: str) -> bool:
    from importlib.util import find_spec

    return find_spec(module) is not None


def tensorboard_events(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar TensorBoard shows for a run, read as its server reads event files (the plugin
    event accumulator: the steps a restart's ``purge_step`` drops are gone)."""
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    from tensorboard.util import tensor_util

    acc = pea.EventAccumulator(str(folder), size_guidance={pea.TENSORS: 0})
    acc.Reload()
    return {tag: [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
            for tag in acc.Tags()[pea.TENSORS]}


@pytest.mark.parametrize("stage", ["main", "smoke"])
def test_tensorboard_gets_every_step_once_and_a_resume_drops_the_steps_after_its_checkpoint(real_runs, stage):
    study, specs = real_runs
    folder = tensorboard_dir(specs[stage])
    assert folder == study.resolve() / "tensorboard" / stage / "grpo" / "seed-0"
    ev = tensorboard_events(folder)
    assert [s for s, _ in ev["tokens"]] == list(range(7))  # 0: before training; 5 logged twice, shown once
    assert dict(ev["seconds_generation"]) == {1: 0.1, 2: 0.1, 3: 0.1, 4: 0.1, 5: 0.2, 6: 0.2}
    assert dict(ev["tokens"])[6] == 6 * 112 and dict(ev["evaluations"]) [6] == 4  # float64: exact
    if stage == "main":
        assert set(ev) <= BLIND_KEYS
    else:
        assert dict(ev["accuracy/heldout"]) == {0: 0.25, 2: 0.27, 4: 0.29, 6: 0.31}
        assert {"reward_mean", "mixed_share", "channel/correct", "seconds_evaluation"} <= set(ev)
    from prereg_kit.integrations.tensorboard import read_tensorboard

    assert read_tensorboard(folder)["step"].tolist() == list(range(7))  # `prereg import tensorboard` reads it


@pytest.mark.parametrize("stage", ["main", "smoke"])
def test_mlflow_continues_the_same_run_in_the_study_file_store(real_runs, stage, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads a file store only when told to
    study, specs = real_runs
    state = json.loads((Path(specs[stage].run_dir) / TRACKER_RECORD).read_text())["mlflow"]
    uri = (study.resolve() / "mlruns").as_uri()
    assert state["tracking_uri"] == uri
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("tiny")
    runs = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags["prereg.stage"] == stage]
    assert [r.info.run_id for r in runs] == [state["run_id"]]  # one run, continued
    run = runs[0]
    assert run.info.status == "FINISHED" and run.info.run_name == ("grpo seed 0" if stage == "main" else "grpo seed 0 (smoke)")
    assert {k: run.data.tags[f"prereg.{k}"] for k in ("study", "configuration", "seed")} == \
        {"study": "tiny", "configuration": "grpo", "seed": "0"}
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "tokens")]
    assert sorted(steps) == [0, 1, 2, 3, 4, 5, 5, 6]  # the steps after the checkpoint come again
    if stage == "main":
        assert set(run.data.metrics) <= BLIND_KEYS
    else:
        assert run.data.metrics["accuracy/heldout"] == 0.31 and "reward_mean" in run.data.metrics


def wandb_records(path: Path) -> list:
    """The records of a W&B offline run file (``run-<id>.wandb``): W&B's LevelDB-style log of
    protobuf ``Record`` messages (blocks of 32 KiB, 7-byte chunk headers), parsed with W&B's protos."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, parts, out = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        _, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + n], pos + 7 + n
        if kind == 0:
            pos += left - 7 - n
            continue
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):  # a whole record, or the last chunk of one
            rec = pb.Record()
            rec.ParseFromString(parts)
            out.append(rec)
    return out


@pytest.mark.parametrize("stage", ["main", "smoke"])
def test_wandb_writes_offline_into_the_study_and_resumes_the_same_run_id(real_runs, stage):
    pytest.importorskip("wandb", reason="the wandb extra")
    study, specs = real_runs
    run_id = json.loads((Path(specs[stage].run_dir) / TRACKER_RECORD).read_text())["wandb"]["id"]
    folders = sorted((study / "wandb").glob(f"offline-run-*-{run_id}*"))
    assert len(folders) == 2  # the first attempt and the resumed one: `wandb sync` joins them
    history, runs, exits = [], [], []
    for f in folders:
        for rec in wandb_records(f / f"run-{run_id}.wandb"):
            kind = rec.WhichOneof("record_type")
            if kind == "history":
                history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
            elif kind == "run":
                runs.append(rec.run)
            elif kind == "exit":
                exits.append(rec.exit.exit_code)
    assert exits == [130, 0]  # interrupted, then complete
    r = runs[0]
    assert (r.run_id, r.project, r.run_group, r.job_type) == (run_id, "tiny", "grpo", stage)
    assert r.display_name == ("grpo seed 0" if stage == "main" else "grpo seed 0 (smoke)")
    assert [h["iteration"] for h in history] == [0, 1, 2, 3, 4, 5, 5, 6]
    keys = set().union(*history) - {"_step", "_runtime", "_timestamp"}
    if stage == "main":
        assert keys <= BLIND_KEYS
    else:
        assert "accuracy/heldout" in keys and "reward_mean" in keys


def test_tracker_output_leaves_verify_and_the_seals_alone(real_runs):
    """The trackers write beside runs/ (wandb/, mlruns/, tensorboard/) and tracker.json in a run
    folder, a working file: `prereg verify` names no tracker folder and no seal covers tracker.json
    (tests/trainer/test_tracking_run.py verifies a study of complete, sealed runs)."""
    from prereg_kit.chain.seal import UNSEALED, run_files
    from prereg_kit.study.verify import verify_study

    study, specs = real_runs
    assert {p.name for p in study.iterdir()} >= {"tensorboard", "mlruns"}
    run = Path(specs["main"].run_dir)
    assert (run / TRACKER_RECORD).is_file() and TRACKER_RECORD in UNSEALED and run_files(run) == {}
    rep = verify_study(study)  # the synthetic runs have no run log: only that is named
    assert rep.violations == [f"{d}/grpo/seed-0: a run folder without meta.json" for d in ("runs", "stages/smoke")]
    assert not rep.problems


def test_mlflow_failing_mid_run_is_warned_about_once(tmp_path, clean_env, caplog):
    pytest.importorskip("mlflow", reason="the mlflow extra (mlflow-skinny)")
    pytest.importorskip("tensorboard", reason="the tensorboard extra")
    study = make_study(tmp_path)
    spec = spec_of(study, "main", ["mlflow", "tensorboard"])
    c = Counters()
    with caplog.at_level(logging.WARNING, logger="prereg_kit.tracking"), Tracking.open(spec, c) as tracking:
        c.eval_index = 1
        tracking.log(c)
        shutil.rmtree(study / "mlruns")  # the store is gone
        for _ in range(3):
            c.add_iteration({"rollout": 10}, {}, updates=1)
            tracking.log(c, {"tokens_rollout": 10})
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and warned[0].startswith("tracker mlflow failed at iteration 1 (")
    assert [s for s, _ in tensorboard_events(tensorboard_dir(spec))["tokens"]] == [0, 1, 2, 3]


def test_an_mlflow_server_that_is_not_there_is_warned_about(tmp_path, clean_env, caplog):
    pytest.importorskip("mlflow", reason="the mlflow extra (mlflow-skinny)")
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    clean_env.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    clean_env.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    try:
        spec = spec_of(make_study(tmp_path), "main", ["mlflow"])
        with caplog.at_level(logging.WARNING, logger="prereg_kit.tracking"):
            drive(spec, Counters(), 2)
    finally:
        clean_env.delenv("MLFLOW_TRACKING_URI")
        clean_env.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES")
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and warned[0].startswith("tracker mlflow could not start (MlflowException")


# --- the option's way to the runs --------------------------------------------------------------------

def test_the_trackers_travel_with_every_run_spec_and_executor_task(tmp_path, monkeypatch):
    import pickle

    from trainer.executors import common
    from trainer.executors.task import RunTask
    from trainer.launch import plan_jobs

    study = make_study(tmp_path)
    _, jobs = plan_jobs(study, "main", trackers=["mlflow", "wandb"])
    assert len(jobs) == 4 and all(j.spec.trackers == ["mlflow", "wandb"] for j in jobs)
    monkeypatch.setattr(common, "prepare", lambda jobs, log=print: None)
    said = []
    _, tasks = common.planned(study, "main", None, None, "slurm", said.append, ["tensorboard"])
    assert len(tasks) == 4 and all(t.trackers == ("tensorboard",) for t in tasks)
    assert any(s.startswith("tracking each run live in tensorboard (") and s.endswith("blind: progress and compute only")
               for s in said)
    task = pickle.loads(pickle.dumps(tasks[0]))  # as submitit and Ray hand it to a worker
    assert isinstance(task, RunTask) and task.plan_now().spec.trackers == ["tensorboard"]
    if _have("submitit"):  # a preempted Slurm task is requeued with its trackers
        assert task.checkpoint().function.trackers == ("tensorboard",)


def test_prereg_run_hands_the_trackers_to_the_runner(tmp_path, monkeypatch):
    from trainer import launch

    seen = {}

    def fake_run_study(study_dir, **kw):
        seen.update(kw)
        return []

    monkeypatch.setattr(launch, "run_study", fake_run_study)
    res = CliRunner().invoke(app, ["run", str(make_study(tmp_path)), "--tracker", "tensorboard", "--tracker", "MLflow",
                                   "--jobs", "2"])
    assert res.exit_code == 0, res.output
    assert seen["trackers"] == ["tensorboard", "mlflow"] and seen["n_jobs"] == 2


def _start_mlflow_sink(spec, barrier, out) -> None:
    barrier.wait()  # every worker asks for the experiment at the same moment, as `--jobs N` workers do
    out.put(MlflowSink(spec, {}, 0).run_id)


def test_workers_starting_together_share_one_mlflow_experiment(tmp_path, clean_env):
    """Two workers of one study starting their runs at once: MLflow's file store answers a name it
    has not stored yet to each of them, and without one lock around look-up-or-create each made
    its own experiment of the same name, so the study's runs were split and one seemed lost."""
    pytest.importorskip("mlflow", reason="the mlflow extra (mlflow-skinny)")
    import multiprocessing

    from mlflow.tracking import MlflowClient

    study = make_study(tmp_path)
    specs = [spec_of(study, "main", ["mlflow"], c, s) for c in ("grpo", "frozen") for s in (0, 1)]
    ctx = multiprocessing.get_context("fork")  # mlflow already imported: the race window stays narrow
    barrier, out = ctx.Barrier(len(specs)), ctx.Queue()
    procs = [ctx.Process(target=_start_mlflow_sink, args=(spec, barrier, out)) for spec in specs]
    for p in procs:
        p.start()
    run_ids = {out.get(timeout=120) for _ in procs}
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * len(specs)
    clean_env.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    try:
        client = MlflowClient((study.resolve() / "mlruns").as_uri())
        named = [e for e in client.search_experiments() if e.name == "tiny"]
        assert len(named) == 1
        assert {r.info.run_id for r in client.search_runs([named[0].experiment_id])} == run_ids
    finally:
        clean_env.delenv("MLFLOW_ALLOW_FILE_STORE")
