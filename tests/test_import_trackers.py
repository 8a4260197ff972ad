"""Tracker importers: files written by the tools themselves where installed (TensorBoard through
torch's SummaryWriter, MLflow's file store through mlflow), W&B's Parquet history with pyarrow,
MLflow's SQLite store with its table layout; each precision trap attacked and refused."""

from __future__ import annotations

import json
import sqlite3
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prereg_kit.integrations import trackers
from prereg_kit.integrations.mlflow import import_mlflow, read_mlflow
from prereg_kit.integrations.tensorboard import import_tensorboard, read_tensorboard
from prereg_kit.integrations.trackers import TrackerError, iterations_from_metrics
from prereg_kit.integrations.wandb import import_wandb, read_wandb

VERL_STEP = {"response_length/mean": 300.0, "prompt_length/mean": 100.0, "response_length/clip_ratio": 0.25,
             "critic/score/mean": 0.5, "timing_s/gen": 4.0, "timing_s/reward": 0.5, "timing_s/adv": 0.25,
             "timing_s/old_log_prob": 1.0, "timing_s/ref": 0.5, "timing_s/update_actor": 2.0, "timing_s/step": 99.0}


def _tb(folder, rows: dict[int, dict[str, float]]):
    SummaryWriter = pytest.importorskip("torch.utils.tensorboard").SummaryWriter
    w = SummaryWriter(str(folder))
    for step, kv in rows.items():
        for k, v in kv.items():
            w.add_scalar(k, v, step)
    w.close()
    return folder


def _mlflow_run(root, rows: dict[int, dict[str, float]], params=None):
    mlflow = pytest.importorskip("mlflow")
    import os

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3.x keeps the file store in maintenance mode
    try:
        mlflow.set_tracking_uri(f"file://{root}")
        mlflow.set_experiment("e")
        with mlflow.start_run() as run:
            mlflow.log_params(params or {"lr": 1e-6})
            for step, kv in rows.items():
                mlflow.log_metrics(kv, step=step)
    finally:
        mlflow.set_tracking_uri(None)
        del os.environ["MLFLOW_ALLOW_FILE_STORE"]
    return run.info.run_id


def _wandb(path, rows: dict[int, dict[str, float]], *, float32=(), t0=1.7e9):
    recs = [{"_step": s, "_runtime": 3.0 * (s + 1), "_timestamp": t0 + 3.0 * (s + 1), **kv} for s, kv in rows.items()]
    df = pd.DataFrame(recs)
    schema = pa.schema([(c, pa.float32() if c in float32 else pa.float64() if c != "_step" else pa.int64()) for c in df.columns])
    pq.write_table(pa.Table.from_pandas(df, schema=schema, preserve_index=False), path)
    return path


# ---------------------------------------------------------------------------------------------
# TensorBoard


def test_tensorboard_verl_stages_and_tokens(tmp_path):
    rows = {s: {"perf/total_num_tokens": 400.0 * 64 + s * 4, **VERL_STEP} for s in range(1, 5)}
    rows[2]["response_length/mean"] = 301.0
    run = import_tensorboard(_tb(tmp_path / "tb", rows), preset="verl", trainer="verl", updates_per_step=4)
    it = run.iterations
    assert list(it["iteration"]) == [0, 1, 2, 3]
    # total x L / (P + L): 64 sequences of 100 + 300 (+ the odd tokens) -> the completion share
    expect = [round((25600 + s * 4) * (301.0 if s == 2 else 300.0) / ((301.0 if s == 2 else 300.0) + 100.0)) for s in range(1, 5)]
    assert list(it["tokens_rollout"]) == expect
    assert it["seconds_generation"].tolist() == [4.0] * 4
    assert it["seconds_credit"].tolist() == [0.75] * 4            # reward + adv
    assert it["seconds_update"].tolist() == [3.5] * 4             # old_log_prob + ref + update_actor
    assert it["seconds_selection"].tolist() == [0.0] * 4 and "seconds_step" not in it   # timing_s/step never read
    assert list(it["updates"]) == [4, 8, 12, 16]
    assert run.evaluations.empty and "--evaluations" in run.source["derived"]["evaluations"]
    assert run.source["files"][0]["path"].startswith("events.out.tfevents")
    assert run.started_at is not None and run.trainer == "verl" and run.importer == "tensorboard"


def test_tensorboard_tensor_summaries_are_float32_too(tmp_path):
    SummaryWriter = pytest.importorskip("torch.utils.tensorboard").SummaryWriter
    w = SummaryWriter(str(tmp_path / "tb"))
    for s in (1, 2):
        w.add_scalar("tokens/cumulative", 100.0 * s, s, new_style=True)   # a tensor summary, not simple_value
    w.close()
    steps = read_tensorboard(tmp_path / "tb")
    assert steps["tokens/cumulative"].tolist() == [100.0, 200.0] and "tokens/cumulative" in steps.attrs["float32_keys"]


def test_tensorboard_float32_cumulative_counter_is_refused(tmp_path):
    above = 2**24 + 1  # float32 stores it as 2**24: the counter is already wrong on disk
    rows = {s: {"tokens/cumulative": float(above + 3 * s), "response_length/mean": 3.0, "timing_s/gen": 1.0} for s in range(1, 4)}
    steps = read_tensorboard(_tb(tmp_path / "tb", rows))
    assert steps["tokens/cumulative"].iloc[0] != above          # what float32 did to it
    preset = {"tokens_rollout_cumulative": "tokens/cumulative", "seconds_generation": "timing_s/gen"}
    with pytest.raises(TrackerError, match=r"cumulative token counter read from a float32 store.*2\*\*24.*per-step lengths"):
        iterations_from_metrics(steps, preset, updates_per_step=1)
    # small values too: a cumulative counter from float32 is never read (it grows past 2**24)
    small = read_tensorboard(_tb(tmp_path / "tb2", {s: {"tokens/cumulative": 10.0 * s, "timing_s/gen": 1.0} for s in (1, 2)}))
    with pytest.raises(TrackerError, match="float32"):
        iterations_from_metrics(small, preset, updates_per_step=1)
    # a per-step counter above 2**24 from float32 is refused as well; below it, it is exact
    big = read_tensorboard(_tb(tmp_path / "tb3", {s: {"perf/total_num_tokens": 2.0**25, **VERL_STEP} for s in (1, 2)}))
    with pytest.raises(TrackerError, match="token counter above 2"):
        iterations_from_metrics(big, "verl", updates_per_step=1)


def test_the_same_cumulative_counter_from_mlflow_is_exact(tmp_path):
    rows = {s: {"tokens/cumulative": float(2**24 + 1 + 3 * s), "timing_s/gen": 1.0} for s in range(1, 4)}
    _mlflow_run(tmp_path / "mlruns", rows)
    steps = read_mlflow(tmp_path / "mlruns")
    it = iterations_from_metrics(steps, {"tokens_rollout_cumulative": "tokens/cumulative", "seconds_generation": "timing_s/gen"},
                                 updates_per_step=1)
    assert list(it["tokens_rollout"]) == [2**24 + 4, 3, 3]


def test_timing_step_alone_is_refused(tmp_path):
    rows = {s: {"perf/total_num_tokens": 4000.0, "response_length/mean": 30.0, "prompt_length/mean": 10.0, "timing_s/step": 9.0}
            for s in (1, 2)}
    steps = read_tensorboard(_tb(tmp_path / "tb", rows))
    with pytest.raises(TrackerError, match=r"no training time.*timing_s/step is never used"):
        iterations_from_metrics(steps, "verl", updates_per_step=1)
    with pytest.raises(TrackerError, match="timing_s/step includes validation"):
        iterations_from_metrics(steps, {"tokens_total": "perf/total_num_tokens", "seconds_step": "timing_s/step"})
    # the tracker's own clock, asked for by name, gives an unsplit step time
    it = iterations_from_metrics(steps, "verl", updates_per_step=1, wallclock=True)
    assert it["seconds_generation"].isna().all() and (it["seconds_step"] >= 0).all()


def test_missing_dependency_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard.backend.event_processing", None)
    with pytest.raises(TrackerError, match=r"pip install 'prereg-kit\[tensorboard\]'"):
        read_tensorboard(tmp_path)


def test_tensorboard_folder_of_runs_asks_for_one(tmp_path):
    _tb(tmp_path / "logs" / "run_a", {1: {"x": 1.0}})
    with pytest.raises(TrackerError, match="runs below it: run_a"):
        read_tensorboard(tmp_path / "logs")


# ---------------------------------------------------------------------------------------------
# Logging gaps and presets


def _frame(steps, **cols):
    return pd.DataFrame({"step": steps, **cols})


def test_logging_gaps_and_duplicates_are_refused():
    ok = dict(completions_per_step=8)
    base = {"completions/mean_length": 10.0, "reward": 0.5}
    with pytest.raises(TrackerError, match=r"steps 3\.\.4 are missing.*logging_steps=1"):
        iterations_from_metrics(_frame([1, 2, 5], **base), "trl", wallclock=True, **ok)
    with pytest.raises(TrackerError, match="starts at step 5"):
        iterations_from_metrics(_frame([5, 6], **base), "trl", wallclock=True, **ok)
    with pytest.raises(TrackerError, match="step 2 is logged twice"):
        iterations_from_metrics(_frame([1, 2, 2], **base), "trl", wallclock=True, **ok)
    # rows with only evaluation metrics (no training key) are not training steps
    df = _frame([0, 1, 2], **{"completions/mean_length": [np.nan, 10.0, 10.0], "_wall": [0.0, 2.0, 5.0]})
    it = iterations_from_metrics(df, "trl", wallclock=True, **ok)
    assert list(it["tokens_rollout"]) == [80, 80] and list(it["updates"]) == [1, 2] and list(it["seconds_step"]) == [2.0, 3.0]


def test_trl_needs_the_completion_count_and_cross_checks_num_tokens():
    df = _frame([1, 2], **{"completions/mean_length": [10.0, 12.0], "num_tokens": [200.0, 420.0],
                           "frac_reward_zero_std": [0.25, 0.5], "_wall": [1.0, 2.0]})
    with pytest.raises(TrackerError, match="completions_per_step"):
        iterations_from_metrics(df, "trl", wallclock=True)
    it = iterations_from_metrics(df, "trl", wallclock=True, completions_per_step=8)
    assert list(it["tokens_rollout"]) == [80, 96] and list(it["mixed_share"]) == [0.75, 0.5]
    assert "per-step growth" in it.attrs["source"]["cross_check"]
    with pytest.raises(TrackerError, match="completions_per_step is too large"):
        iterations_from_metrics(df, "trl", wallclock=True, completions_per_step=32)
    # from a float32 store above 2**24 the cross-check is skipped, and the run's source says so
    big = df.assign(num_tokens=[2.0**25, 2.0**25 + 512])
    it = iterations_from_metrics(big, "trl", wallclock=True, completions_per_step=8, float32_keys=["num_tokens"])
    assert list(it["tokens_rollout"]) == [80, 96] and "not checked: float32" in it.attrs["source"]["cross_check"]


def test_dynamic_sampling_and_unknown_keys_are_refused():
    df = _frame([1, 2], **{k: [v, v] for k, v in VERL_STEP.items()}, **{"perf/total_num_tokens": [4000.0] * 2,
                                                                        "batch/num_gen_batches": [2.0, 1.0]})
    with pytest.raises(TrackerError, match="dynamic sampling"):
        iterations_from_metrics(df, "verl", updates_per_step=1)
    holes = df.drop(columns="batch/num_gen_batches")
    with pytest.raises(TrackerError, match="prompt_length/mean: no value at a training step"):
        iterations_from_metrics(holes.assign(**{"prompt_length/mean": [100.0, np.nan]}), "verl", updates_per_step=1)
    with pytest.raises(TrackerError, match="perf/total_num_tokens: no value"):
        iterations_from_metrics(holes.assign(**{"perf/total_num_tokens": [np.nan, 4.0]}), "verl", updates_per_step=1)
    with pytest.raises(TrackerError, match="updates_per_step"):
        iterations_from_metrics(df.drop(columns="batch/num_gen_batches"), "verl")
    with pytest.raises(TrackerError, match="'tokens_rolout' is not a column"):
        iterations_from_metrics(df, {"tokens_rolout": "x"})
    with pytest.raises(TrackerError, match="unknown; known: trl, verl, openrlhf"):
        iterations_from_metrics(df, "verl2")


# ---------------------------------------------------------------------------------------------
# MLflow


def test_mlflow_at_is_stored_as__at__and_read_back(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    with pytest.raises(Exception, match="Names may only contain"):   # why loggers rewrite '@'
        from mlflow.utils.validation import _validate_metric_name

        _validate_metric_name("val-core/x/reward/mean@4")
    rows = {s: {trackers.mlflow_key("val-core/x/reward/mean@4"): 0.25 * s, "data_at_rest": 1.0,
                "perf/total_num_tokens": 4000.0 + s, **{k: v for k, v in VERL_STEP.items() if k != "timing_s/step"}}
            for s in range(1, 4)}
    rows[0] = {trackers.mlflow_key("val-core/x/reward/mean@4"): 0.0}  # verl validates before training
    run_id = _mlflow_run(tmp_path / "mlruns", rows)
    steps = read_mlflow(tmp_path / "mlruns")
    assert "val-core/x/reward/mean@4" in steps and "data_at_rest" in steps and "val-core/x/reward/mean_at_4" not in steps
    run = import_mlflow(tmp_path / "mlruns", preset="verl", trainer="verl", updates_per_step=2)
    assert len(run.iterations) == 3 and run.source["mlflow_run_id"] == run_id and run.config == {"lr": "1e-06"}
    assert run.source["renamed_from_at"] == ["val-core/x/reward/mean@4"]
    assert trackers.from_mlflow_key("val-core/x/reward/mean_at_4") == "val-core/x/reward/mean@4"
    assert trackers.from_mlflow_key("data_at_rest") == "data_at_rest"
    # a preset key written with '@' finds MLflow's spelling too
    raw = steps.rename(columns={"val-core/x/reward/mean@4": "val-core/x/reward/mean_at_4"})
    assert trackers._column(raw, "val-core/x/reward/mean@4").tolist() == [0.0, 0.25, 0.5, 0.75]


def test_mlflow_sqlite_store_reads_like_the_file_store(tmp_path):
    rows = {s: {"perf/total_num_tokens": 4000.0 + s, **VERL_STEP} for s in range(1, 4)}
    _mlflow_run(tmp_path / "mlruns", rows)
    files = read_mlflow(tmp_path / "mlruns")
    db = tmp_path / "mlflow.db"  # MLflow 3.x's default store, in its table layout
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE runs (run_uuid TEXT, start_time BIGINT, end_time BIGINT);"
                      "CREATE TABLE metrics (key TEXT, value FLOAT, timestamp BIGINT, run_uuid TEXT, step BIGINT, is_nan BOOLEAN);"
                      "CREATE TABLE params (key TEXT, value TEXT, run_uuid TEXT); CREATE TABLE tags (key TEXT, value TEXT, run_uuid TEXT);")
    con.execute("INSERT INTO runs VALUES ('r1', 1700000000000, 1700000100000)")
    con.executemany("INSERT INTO metrics VALUES (?, ?, ?, 'r1', ?, 0)",
                    [(k, v, 1700000000000 + 1000 * s, s) for s, kv in rows.items() for k, v in kv.items()])
    con.commit()
    con.close()
    sql = read_mlflow(db)
    cols = [c for c in files.columns if c != "_wall"]
    pd.testing.assert_frame_equal(sql[cols], files[cols], check_like=True)
    run = import_mlflow(db, preset="verl", trainer="verl", updates_per_step=1)
    assert run.source["store"] == "sqlite" and run.started_at.year == 2023


def test_mlflow_several_runs_need_a_run_id(tmp_path):
    a = _mlflow_run(tmp_path / "mlruns", {1: {"x": 1.0}})
    _mlflow_run(tmp_path / "mlruns", {1: {"x": 2.0}})
    with pytest.raises(TrackerError, match="2 runs.*--run-id"):
        read_mlflow(tmp_path / "mlruns")
    assert read_mlflow(tmp_path / "mlruns", a)["x"].tolist() == [1.0]
    with pytest.raises(TrackerError, match="no MLflow run nope"):
        read_mlflow(tmp_path / "mlruns", "nope")


# ---------------------------------------------------------------------------------------------
# W&B


def test_wandb_parquet_history_trl_with_prefix(tmp_path):
    rows = {s: {"train/global_step": float(s + 1), "train/completions/mean_length": 20.0 + s, "train/reward": 0.5,
                "train/num_tokens": 60.0 * 8 * (s + 1), "train/completions/clipped_ratio": 0.125} for s in range(4)}
    path = _wandb(tmp_path / "history.parquet", rows)
    run = import_wandb(path, preset="trl", trainer="trl", step_key="train/global_step", prefix="train/",
                       completions_per_step=8, wallclock=True)
    it = run.iterations
    assert list(it["tokens_rollout"]) == [160, 168, 176, 184] and list(it["updates"]) == [1, 2, 3, 4]
    assert list(it["seconds_step"]) == [3.0] * 4 and list(it["truncation_rate"]) == [0.125] * 4
    assert run.source["prefix"] == "train/" and run.started_at.timestamp() == pytest.approx(1.7e9)


def test_wandb_csv_export_and_sampled_history_are_refused(tmp_path):
    csv = tmp_path / "wandb_export_2026.csv"
    csv.write_text("Step,run - completions/mean_length\n1,20.1\n7,21.3\n")
    with pytest.raises(TrackerError, match="CSV export holds the chart's sampled points with rounded values"):
        read_wandb(csv)
    sampled = _wandb(tmp_path / "h.parquet", {s: {"completions/mean_length": 20.0} for s in (1, 2, 4, 9)})
    with pytest.raises(TrackerError, match="missing"):
        import_wandb(sampled, preset="trl", trainer="trl", completions_per_step=8, wallclock=True)
    f32 = _wandb(tmp_path / "f.parquet", {s: {"tok": 10.0 * s} for s in (1, 2)}, float32=("tok",))
    assert read_wandb(f32).attrs["float32_keys"] == ["tok"]
    with pytest.raises(TrackerError, match="float32"):
        import_wandb(f32, preset={"tokens_rollout_cumulative": "tok"}, trainer="x", updates_per_step=1, wallclock=True)
    (tmp_path / "not.parquet").write_text("a,b\n")
    with pytest.raises(TrackerError, match="not a Parquet file"):
        read_wandb(tmp_path / "not.parquet")


# ---------------------------------------------------------------------------------------------
# Evaluations (--evaluations) and the command


def _trl_history(tmp_path):
    return _wandb(tmp_path / "h.parquet", {s: {"completions/mean_length": 20.0} for s in (1, 2, 3)})


def test_counted_evals_from_tool_steps(tmp_path):
    ev = tmp_path / "evals.jsonl"
    lines = [{"problem_id": p, "eval_set": "math", "step": st, "samples": 4, "correct": c}
             for st, c in ((0, 1), (3, 2)) for p in ("a", "b")]
    ev.write_text("\n".join(json.dumps(x) for x in lines))
    run = import_wandb(_trl_history(tmp_path), preset="trl", trainer="trl", completions_per_step=8, wallclock=True, evals=ev)
    assert sorted(set(run.evaluations["iteration"])) == [0, 3]    # steps 1.. -> step 3 = 3 iterations done
    assert run.source["files"][-1]["path"] == "evals.jsonl"
    ev.write_text("\n".join(json.dumps(x) for x in [*lines, {**lines[0], "step": 9}]))
    with pytest.raises(TrackerError, match="after iteration 9, but the log has 3"):
        import_wandb(_trl_history(tmp_path), preset="trl", trainer="trl", completions_per_step=8, wallclock=True, evals=ev)
    ev.write_text("\n".join(json.dumps(x) for x in [*lines, lines[0]]))
    with pytest.raises(TrackerError, match="problem 'a' of 'math' appears twice at iteration 0"):
        import_wandb(_trl_history(tmp_path), preset="trl", trainer="trl", completions_per_step=8, wallclock=True, evals=ev)


def test_output_evals_are_rescored(tmp_path):
    """Raw outputs are scored with the preregistered verifiers (default, strict, boxed), not taken
    from the tracker."""
    ev = tmp_path / "evals.parquet"
    pd.DataFrame({"problem_id": ["a", "b"], "eval_set": "math", "iteration": 0, "answer": ["1", "2"],
                  "outputs": [["\\boxed{1}", "\\boxed{2}", "The answer is 1"], ["x"]]}).to_parquet(ev)
    run = import_wandb(_trl_history(tmp_path), preset="trl", trainer="trl", completions_per_step=8, wallclock=True, evals=ev)
    got = run.evaluations.set_index("problem_id")
    assert got.loc["a", "samples"] == 3 and got.loc["a", "correct"] == 2 and got.loc["b", "correct"] == 0
    assert got.loc["a", "correct_strict"] == 1 and got.loc["a", "boxed"] == 2 and got.loc["b", "samples"] == 1
    assert "re-scored" in run.source["files"][-1]["shape"]


def test_commands_register_and_pass_the_run_on(tmp_path, monkeypatch):
    typer = pytest.importorskip("typer")
    from typer.testing import CliRunner

    from prereg_kit.integrations import importing, tracker_commands

    got = {}

    def write_imported_run(study_dir, configuration, seed, run, *, stage="main", seal=True):
        got.update(study=study_dir, configuration=configuration, seed=seed, run=run, stage=stage)
        return study_dir / "runs" / configuration / f"seed-{seed}"

    monkeypatch.setattr(importing, "write_imported_run", write_imported_run, raising=False)
    monkeypatch.setattr(importing, "check_target", lambda *a, **k: None)  # the study is checked first; none here
    app = typer.Typer()
    tracker_commands.register(app)
    args = ["wandb", str(tmp_path), str(_trl_history(tmp_path)), "--configuration", "base", "--seed", "1",
            "--preset", "trl", "--completions-per-step", "8", "--wallclock"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert got["run"].trainer == "trl" and got["seed"] == 1 and len(got["run"].iterations) == 3
    assert "analysis refuses this run" in res.output
    (tmp_path / "p.json").write_text(json.dumps({"length_mean": "completions/mean_length"}))
    res = CliRunner().invoke(app, [*args[:8], str(tmp_path / "p.json"), *args[9:], "--trainer", "mine", "--updates-per-step", "1"])
    assert res.exit_code == 0, res.output
    assert got["run"].trainer == "mine" and got["run"].source["preset"] == "custom"
    res = CliRunner().invoke(app, [*args[:8], "trll", *args[9:]])
    assert res.exit_code == 2 and "not one of trl, verl, openrlhf" in " ".join(res.output.split())  # one line, no traceback
    assert "Traceback" not in res.output
