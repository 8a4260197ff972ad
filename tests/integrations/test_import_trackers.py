"""Tracker importers on files the trackers write themselves: W&B run files written by wandb
(offline runs), TensorBoard event files by torch's SummaryWriter, MLflow stores by mlflow, each the
way verl, transformers and OpenRLHF call them (trackerfiles.py); W&B's Parquet history with
pyarrow, MLflow's SQLite store in its table layout; restarts and resumed runs; each precision trap
attacked and refused (the format attacks through the command: test_import_trackers_attacks.py)."""

from __future__ import annotations

import json
import re
import sqlite3
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from trackerfiles import (
    WANDB_RUNS,
    file_store,
    hf_mlflow,
    hf_tensorboard,
    hf_wandb,
    openrlhf_tensorboard,
    openrlhf_wandb,
    run_file,
    verl_mlflow,
    verl_tensorboard,
    verl_tracking_module,
    verl_wandb,
    wandb_batch,
    wandb_folder,
)

from prereg_kit.integrations import trackers
from prereg_kit.integrations.mlflow import import_mlflow, read_mlflow
from prereg_kit.integrations.tensorboard import import_tensorboard, read_tensorboard
from prereg_kit.integrations.tracker_presets import PRESETS
from prereg_kit.integrations.trackers import TrackerError, iterations_from_metrics
from prereg_kit.integrations.wandb import import_wandb, read_wandb

VERL_STEP = {"response_length/mean": 300.0, "prompt_length/mean": 100.0, "response_length/clip_ratio": 0.25,
             "critic/score/mean": 0.5, "timing_s/gen": 4.0, "timing_s/reward": 0.5, "timing_s/adv": 0.25,
             "timing_s/old_log_prob": 1.0, "timing_s/ref": 0.5, "timing_s/update_actor": 2.0, "timing_s/step": 99.0}

pytestmark = WANDB_RUNS  # reads the W&B runs of wandb_folder


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
    monkeypatch.setitem(sys.modules, "tensorboard.compat.proto", None)
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
    with pytest.raises(TrackerError, match="prompt_length/mean: no value at step 2"):
        iterations_from_metrics(holes.assign(**{"prompt_length/mean": [100.0, np.nan]}), "verl", updates_per_step=1)
    with pytest.raises(TrackerError, match="perf/total_num_tokens: no value at step 1"):
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
    pytest.importorskip("mlflow")
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


# ---------------------------------------------------------------------------------------------
# W&B run files, written by wandb itself (offline runs) as verl, transformers and OpenRLHF log


def _verl_steps(n: int, first: int = 1, **over) -> dict[int, dict]:
    """verl's metrics per step; ``perf/total_num_tokens`` an int, as verl logs it."""
    return {s: {"perf/total_num_tokens": 25600 + 4 * s, **VERL_STEP, **over} for s in range(first, n + 1)}


VERL_CONFIG = {"trainer": {"total_epochs": 1}, "actor_rollout_ref": {"actor": {"optim": {"lr": 1e-6}}, "rollout": {"n": 8}}}
TRL_LOGS = [(s, {"completions/mean_length": 20.0 + s, "reward": 0.5, "num_tokens": 480 * s, "frac_reward_zero_std": 0.25,
                 "completions/clipped_ratio": 0.125}) for s in range(1, 5)]


def _orl(s: int) -> dict:
    """OpenRLHF 0.11.2's per-step log (ppo_trainer: rollout stats and timing/*); the sample text is a table in W&B."""
    return {"rollout/response_length_mean": 100.0 + s, "rollout/num_samples": 64, "rollout/reward_mean": 0.5,
            "rollout/truncated_rate": 0.0, "timing/step_total": 12.5, "generated_samples": None}


def _wandb_formats(folder: Path) -> list[dict]:
    resumed = [verl_wandb(folder / "resumed", "res0", _verl_steps(5)),
               verl_wandb(folder / "resumed", "res0", _verl_steps(6, 4, **{"timing_s/gen": 5.0}))]
    same = [verl_wandb(folder / "same", "same0", _verl_steps(3)), verl_wandb(folder / "same", "same0", _verl_steps(5, 3))]
    runs = [verl_wandb(folder / "verl", "verl0", _verl_steps(4), VERL_CONFIG),
            hf_wandb(folder / "hf", "hf0", [*TRL_LOGS[:2], (2, {"eval_reward": 0.25}), *TRL_LOGS[2:],
                                            (4, {"train_runtime": 9.5, "train_loss": 0.01})]),
            openrlhf_wandb(folder / "orl", "orl0", [("train", 1, _orl(1)), ("train", 2, _orl(2)), ("eval", 2, {"pass1": 0.5}),
                                                     ("train", 3, _orl(3))]),
            *({**r, "resume": True} for r in [*resumed, *same]),
            hf_wandb(folder / "twice", "twice0", [*TRL_LOGS[:2], (2, {"completions/mean_length": 99.0})])]
    from verlwriter import verl_ready

    if verl_ready():
        runs.append({**verl_wandb(folder / "verl-itself", "verlit0", _verl_steps(4), VERL_CONFIG), "verl": True})
    return runs


wandb_batch("formats", _wandb_formats)


@pytest.fixture(scope="module")
def wb(tmp_path_factory) -> Path:
    return wandb_folder(tmp_path_factory, "formats")


def test_wandb_run_file_of_verl_reads_as_file_folder_or_wandb_folder(wb):
    file = run_file(wb / "verl")
    frames = [read_wandb(p) for p in (file, file.parent, file.parent.parent)]
    for f in frames[1:]:
        pd.testing.assert_frame_equal(f, frames[0])
    run = import_wandb(file.parent.parent, preset="verl", trainer="verl", updates_per_step=2)
    it = run.iterations
    assert list(it["tokens_rollout"]) == [round((25600 + 4 * s) * 300 / 400) for s in range(1, 5)]   # ints, exact
    assert it["seconds_generation"].tolist() == [4.0] * 4 and list(it["updates"]) == [2, 4, 6, 8]
    assert run.config == VERL_CONFIG and run.source["form"] == "run file" and run.source["wandb_run_id"] == "verl0"
    assert run.source["files"][0]["path"].endswith("run-verl0.wandb")
    import wandb

    assert run.source["tool_versions"]["wandb (read it)"] == wandb.__version__
    assert run.source["tool_versions"]["wandb (wrote the file)"].startswith(wandb.__version__)
    # the start is the run record's, before the first step's stamp and within the run's lifetime
    first = float(read_wandb(file)["_wall"].iloc[0])
    assert run.started_at is not None and 0 <= first < 60 and run.ended_at >= run.started_at


def test_wandb_transformers_callback_steps_by_global_step(wb):
    """transformers' WandbCallback commits every log call: the eval log and the final train summary
    at a step's global_step are further rows of that step, merged with it."""
    with pytest.raises(TrackerError, match="none of the preset's token keys .* it logs .*train/completions/mean_length"):
        import_wandb(wb / "hf", preset="trl", trainer="trl", step_key="train/global_step", completions_per_step=8, wallclock=True)
    run = import_wandb(wb / "hf", preset="trl", trainer="trl", step_key="train/global_step", prefix="train/",
                       completions_per_step=8, wallclock=True)
    it = run.iterations
    assert list(it["tokens_rollout"]) == [168, 176, 184, 192] and list(it["updates"]) == [1, 2, 3, 4]
    assert (it["seconds_step"] >= 0).all() and list(it["truncation_rate"]) == [0.125] * 4
    steps = read_wandb(wb / "hf", step_key="train/global_step")
    assert steps.set_index("step").loc[2, "eval/reward"] == 0.25 and steps.set_index("step").loc[4, "train/train_runtime"] == 9.5


def test_wandb_openrlhf_logger(wb):
    run = import_wandb(wb / "orl", preset="openrlhf", trainer="openrlhf", step_key="train/global_step",
                       completions_per_step=64, updates_per_step=1)
    it = run.iterations
    assert list(it["tokens_rollout"]) == [(100 + s) * 64 for s in (1, 2, 3)] and list(it["seconds_step"]) == [12.5] * 3


def test_wandb_a_step_logged_twice_with_different_values_is_refused(wb):
    """Two commits at one global_step with different values (today the last one won silently)."""
    with pytest.raises(TrackerError) as e:
        read_wandb(wb / "twice", step_key="train/global_step")
    msg = str(e.value)
    assert re.search(r"run-twice0\.wandb \(_step 2\): train/completions/mean_length at step 2 is 99, but .*run-twice0\.wandb "
                     r"\(_step 1\) logged 22 for that step \(a step is logged once", msg), msg


def test_wandb_resumed_run(wb):
    """Two folders of one run id: a run resumed at step 4 that re-logged steps 4 and 5."""
    with pytest.raises(TrackerError) as e:
        read_wandb(wb / "resumed")
    assert re.search(r"offline-run-[^/]*/run-res0\.wandb \(_step 4\): timing_s/gen at step 4 is 5, but .*"
                     r"offline-run-[^/]*/run-res0\.wandb \(_step 4\) logged 4 for that step \(a resumed run\? --resumed",
                     str(e.value)), str(e.value)
    run = import_wandb(wb / "resumed", preset="verl", trainer="verl", updates_per_step=1, resumed=True)
    assert run.iterations["seconds_generation"].tolist() == [4.0] * 3 + [5.0] * 3
    (restart,) = run.source["restarts"]
    assert restart["from_step"] == 4 and restart["why"] == "resumed" and restart["values_discarded"] == 2 * len(VERL_STEP) + 2
    # a resumed run that logged the same values again reads without --resumed
    assert len(import_wandb(wb / "same", preset="verl", trainer="verl", updates_per_step=1).iterations) == 5


def test_wandb_folder_of_several_runs_asks_for_one(wb):
    with pytest.raises(TrackerError, match=r"holds 3 W&B runs \(hf0, orl0, verl0\): give one run's folder"):
        read_wandb(_several(wb))


def _several(wb: Path) -> Path:
    import shutil

    folder = wb / "several" / "wandb"
    if not folder.exists():
        for name in ("verl", "hf", "orl"):
            shutil.copytree(run_file(wb / name).parent, folder / run_file(wb / name).parent.name)
    return folder


def test_verl_tracking_itself_writes_what_the_fixtures_write(wb, tmp_path, monkeypatch):
    """verl's own Tracking (its tracking.py, where verl is installed) to W&B, TensorBoard and MLflow
    imports exactly as the fixtures that follow it line by line."""
    tracking = verl_tracking_module()
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", file_store(tmp_path / "mlruns"))
    t = tracking.Tracking("p", "e", default_backend=["tensorboard", "mlflow"], config=VERL_CONFIG)
    steps = _verl_steps(4, **{"val-core/math(500)/acc@4": 0.5})
    for s, data in steps.items():
        t.log(data, s)
    t.finish()
    mine = tmp_path / "mine"
    verl_mlflow(file_store(mine / "mlruns"), steps, config=VERL_CONFIG)
    for tool, theirs, ours in (("tb", tmp_path / "tb", verl_tensorboard(mine / "tb", steps)),
                               ("mlflow", tmp_path / "mlruns", mine / "mlruns"), ("wandb", wb / "verl-itself", wb / "verl")):
        read = {"tb": read_tensorboard, "mlflow": read_mlflow, "wandb": read_wandb}[tool]
        a, b = read(theirs), read(ours)
        pd.testing.assert_frame_equal(a.drop(columns="_wall"), b.drop(columns="_wall"), check_like=True)
        if tool == "mlflow":
            assert a.attrs["params"] == b.attrs["params"] and "val-core/math_500_/acc@4" in a


# ---------------------------------------------------------------------------------------------
# TensorBoard as the trainers write it, restarts


def test_tensorboard_as_transformers_and_openrlhf_write_it(tmp_path):
    logs = [*TRL_LOGS[:2], (2, {"eval_reward": 0.25, "eval_samples": "text"}), *TRL_LOGS[2:]]
    run = import_tensorboard(hf_tensorboard(tmp_path / "hf", logs), preset="trl", trainer="trl", prefix="train/",
                             completions_per_step=8, wallclock=True)
    assert list(run.iterations["tokens_rollout"]) == [168, 176, 184, 192]   # texts (args, eval_samples) skipped
    orl = [(s, {**_orl(s), "generated_samples": ("2+2=4", 1.0)}) for s in (1, 2, 3)]
    run = import_tensorboard(openrlhf_tensorboard(tmp_path / "orl", orl, [(2, {"pass1": 0.5})]), preset="openrlhf",
                             trainer="openrlhf", completions_per_step=64, updates_per_step=1)
    assert list(run.iterations["tokens_rollout"]) == [(100 + s) * 64 for s in (1, 2, 3)]


def test_tensorboard_other_logging_frequencies_and_missing_optional_keys(tmp_path):
    """A key logged every other step leaves gaps only in itself; a stage timer a run never logs (no
    reference model: timing_s/ref) took no time; an int logged where floats were is the same number."""
    steps = {s: {k: v for k, v in {"perf/total_num_tokens": 4000 + s, **VERL_STEP}.items() if k != "timing_s/ref"}
             for s in range(1, 5)}
    for s in (1, 3):
        del steps[s]["critic/score/mean"]
    steps[2]["timing_s/gen"] = 4   # an int
    run = import_tensorboard(verl_tensorboard(tmp_path / "tb", steps), preset="verl", trainer="verl", updates_per_step=1)
    it = run.iterations
    assert it["seconds_update"].tolist() == [3.0] * 4 and it["seconds_generation"].tolist() == [4.0] * 4
    assert it["reward_mean"].isna().tolist() == [True, False, True, False]


def test_tensorboard_restarts(tmp_path):
    """A second writer in the run folder that re-logs steps 3..4: refused with different values;
    read when its values are the same, when its writer marked the restart (purge_step, as
    TensorBoard itself then hides the old records), or with --resumed."""
    verl_tensorboard(tmp_path / "a", _verl_steps(4))
    verl_tensorboard(tmp_path / "a", _verl_steps(5, 3, **{"timing_s/gen": 5.0}))
    with pytest.raises(TrackerError) as e:
        read_tensorboard(tmp_path / "a")
    assert re.search(r"/a/events\.out\.tfevents\.[^:]*: timing_s/gen at step 3 is 5, but .*/a/events\.out\.tfevents\.\S+ "
                     r"logged 4 for that step \(a resumed run\? --resumed keeps", str(e.value)), str(e.value)
    run = import_tensorboard(tmp_path / "a", preset="verl", trainer="verl", updates_per_step=1, resumed=True)
    assert run.iterations["seconds_generation"].tolist() == [4.0, 4.0, 5.0, 5.0, 5.0]
    assert run.source["restarts"][0]["from_step"] == 3 and run.source["restarts"][0]["why"] == "resumed"
    verl_tensorboard(tmp_path / "b", _verl_steps(4))
    verl_tensorboard(tmp_path / "b", _verl_steps(5, 3, **{"timing_s/gen": 5.0}), purge_step=3)
    run = import_tensorboard(tmp_path / "b", preset="verl", trainer="verl", updates_per_step=1)
    assert run.iterations["seconds_generation"].tolist() == [4.0, 4.0, 5.0, 5.0, 5.0]
    assert "SessionLog START at step 3" in run.source["restarts"][0]["why"]
    verl_tensorboard(tmp_path / "c", _verl_steps(4))
    verl_tensorboard(tmp_path / "c", _verl_steps(5, 3))
    assert len(import_tensorboard(tmp_path / "c", preset="verl", trainer="verl", updates_per_step=1).iterations) == 5


def test_restart_wall_clock_leaves_out_the_time_between_files():
    from prereg_kit.integrations.tracker_records import StepRecords

    rec = StepRecords(resumed=True)
    rec.segment("a", 100.0)
    for s in (1, 2, 3):
        rec.add("x", s, 1.0, rec.label("a"), wall=100.0 + 10 * s)
    rec.segment("b", 1000.0)          # restarted from step 2's checkpoint, 870 s after step 3
    for s in (3, 4):
        rec.add("x", s, 2.0, rec.label("b"), wall=1000.0 + 5 * (s - 2))
    assert rec.wall() == {1: 10.0, 2: 20.0, 3: 25.0, 4: 30.0} and rec.values["x"] == {1: 1.0, 2: 1.0, 3: 2.0, 4: 2.0}
    assert rec.purged == [{"file": "b", "from_step": 3, "values_discarded": 1, "why": "resumed"}]


# ---------------------------------------------------------------------------------------------
# MLflow as verl and transformers write it


def test_mlflow_as_verl_and_transformers_write_it(tmp_path):
    """verl sanitizes keys (``@`` → ``_at_``, other characters MLflow refuses → ``_``) and flattens its
    config into params; transformers replaces ``@`` and the like by ``_``: a preset names the key as
    logged and finds it in either spelling."""
    steps = _verl_steps(3, **{"val-core/math(500)/acc@4": 0.5})
    verl_mlflow(file_store(tmp_path / "verl"), steps, config=VERL_CONFIG)
    run = import_mlflow(tmp_path / "verl", preset={**PRESETS["verl"], "reward_mean": "val-core/math(500)/acc@4"},
                        trainer="verl", updates_per_step=1)
    assert run.config["actor_rollout_ref/actor/optim/lr"] == "1e-06" and run.config["trainer/total_epochs"] == "1"
    assert run.iterations["reward_mean"].tolist() == [0.5] * 3
    hf_mlflow(file_store(tmp_path / "hf"), [(s, {**d, "rewards/acc@1": 0.75}) for s, d in TRL_LOGS])
    run = import_mlflow(tmp_path / "hf", preset={**PRESETS["trl"], "reward_mean": "rewards/acc@1"}, trainer="trl",
                        completions_per_step=8, wallclock=True)
    assert list(run.iterations["tokens_rollout"]) == [168, 176, 184, 192] and run.iterations["reward_mean"].tolist() == [0.75] * 4
    assert run.config == {"learning_rate": "1e-06", "logging_steps": "1"}


@pytest.mark.slow
def test_mlflow_sqlite_store_written_by_mlflow(tmp_path):
    """verl's default store (``sqlite:////tmp/mlruns.db``), written by mlflow (SQLAlchemy; creating
    the store runs MLflow's migrations, seconds): the same run as the file store."""
    pytest.importorskip("sqlalchemy", reason="MLflow's SQLite store needs sqlalchemy and alembic")
    pytest.importorskip("alembic", reason="MLflow's SQLite store needs sqlalchemy and alembic")
    steps = _verl_steps(3, **{"val-core/math(500)/acc@4": 0.5})
    rid = verl_mlflow(f"sqlite:///{tmp_path / 'mlflow.db'}", steps, config=VERL_CONFIG)
    verl_mlflow(file_store(tmp_path / "mlruns"), steps, config=VERL_CONFIG)
    sql, files = read_mlflow(tmp_path / "mlflow.db"), read_mlflow(tmp_path / "mlruns")
    pd.testing.assert_frame_equal(sql.drop(columns="_wall"), files.drop(columns="_wall"), check_like=True)
    assert sql.attrs["params"] == files.attrs["params"] and sql.attrs["run_id"] == rid
    verl_mlflow(f"sqlite:///{tmp_path / 'mlflow.db'}", {1: {"x": 1.0}}, name="second")
    with pytest.raises(TrackerError, match="2 runs .*give the run id"):
        read_mlflow(tmp_path / "mlflow.db")
    assert read_mlflow(tmp_path / "mlflow.db", rid).attrs["run_id"] == rid


@pytest.mark.slow
def test_transformers_callbacks_themselves(tmp_path, monkeypatch):
    """The installed transformers' TensorBoardCallback and MLflowCallback (importing them takes
    seconds) write what the fixtures that follow them write."""
    iu = pytest.importorskip("transformers.integrations.integration_utils")
    from transformers import TrainerControl, TrainerState

    args = types.SimpleNamespace(output_dir=str(tmp_path), to_json_string=lambda: "{}", to_dict=lambda: {"learning_rate": 1e-6},
                                 run_name=None, logging_dir=str(tmp_path / "tb"))
    state = TrainerState(is_world_process_zero=True, is_hyper_param_search=False)
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "tb"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", file_store(tmp_path / "mlruns"))
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "hf")
    tb, ml = iu.TensorBoardCallback(), iu.MLflowCallback()
    tb.on_train_begin(args, state, TrainerControl())
    for s, d in TRL_LOGS:
        state.global_step = s
        for cb in (tb, ml):
            cb.on_log(args, state, TrainerControl(), logs={**d, "rewards/acc@1": 0.75})
    tb.on_train_end(args, state, TrainerControl())
    ml.on_train_end(args, state, TrainerControl())
    ours = tmp_path / "ours"
    hf_tensorboard(ours / "tb", [(s, {**d, "rewards/acc@1": 0.75}) for s, d in TRL_LOGS])
    hf_mlflow(file_store(ours / "mlruns"), [(s, {**d, "rewards/acc@1": 0.75}) for s, d in TRL_LOGS])
    for read, theirs, mine in ((read_tensorboard, tmp_path / "tb", ours / "tb"), (read_mlflow, tmp_path / "mlruns", ours / "mlruns")):
        pd.testing.assert_frame_equal(read(theirs).drop(columns="_wall"), read(mine).drop(columns="_wall"), check_like=True)
