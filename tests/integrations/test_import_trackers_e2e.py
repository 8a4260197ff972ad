"""Tracker exports end to end: six runs written by each tracker itself as verl logs to it (W&B run
files from wandb's offline mode, TensorBoard event files from torch's SummaryWriter, an MLflow file
store from mlflow; and W&B's Parquet history), imported with `prereg import`, then verified and
analyzed like the built-in trainer's runs, to the exact per-seed differences of the evaluations
given. The trackers carry no evaluation sampling seeds, so the plan preregisters
`common_random_numbers = false` and the report says so; a plan that does not is refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from importfiles import IMPORT_PLAN, T_RUN, locked_study
from test_import_core import _prereg
from test_import_trackers import _mlflow_run, _tb, _wandb
from trackerfiles import WANDB_RUNS, verl_wandb, wandb_batch, wandb_folder
from typer.testing import CliRunner

SKILL = {"A": 0.3, "B": 0.6}
STEPS = range(1, 11)  # 10 verl steps of 8 responses x 50 tokens = 400 generated tokens; B = 4000
NO_CRN = IMPORT_PLAN.replace("samples = 2\n", "samples = 2\ncommon_random_numbers = false\n")


def _metrics(seed: int) -> dict[int, dict[str, float]]:
    rng = np.random.default_rng([seed, 7])
    return {s: {"perf/total_num_tokens": 560.0, "prompt_length/mean": 20.0, "response_length/mean": 50.0,
                "critic/score/mean": float(rng.random()), "timing_s/gen": 1.5, "timing_s/reward": 0.1,
                "timing_s/old_log_prob": 0.2, "timing_s/adv": 0.01, "timing_s/update_actor": 0.9,
                "timing_s/step": 4.0} for s in STEPS}


def _eval_rows(configuration: str, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng([seed, 11, ord(configuration)])
    return pd.DataFrame([{"problem_id": f"p{k}", "eval_set": "test", "step": step, "samples": 2,
                          "correct": int(rng.binomial(2, min(0.95, SKILL[configuration] * (1 + step / 10) if step else 0.3)))}
                         for step in (0, 5, 10) for k in range(6)])


def _evals(path: Path, configuration: str, seed: int) -> Path:
    _eval_rows(configuration, seed).to_parquet(path)
    return path


def _accuracy_at_budget(configuration: str, seed: int) -> float:
    """The accuracy the analysis reads at B (step 10: 10 steps of 400 generated tokens), from the evaluations given."""
    final = _eval_rows(configuration, seed).query("step == 10")
    return float((final["correct"] / final["samples"]).mean())


wandb_batch("e2e", lambda folder: [verl_wandb(folder / f"{c}{s}", f"e2e{c}{s}", _metrics(s)) for c in ("A", "B") for s in (0, 1, 2)])
_RUN_FILES: list[Path] = []  # the e2e batch's folder, once written


def _write(tool: str, folder: Path, seed: int, configuration: str = "") -> tuple[Path, list[str]]:
    if tool == "wandb-run":
        return _RUN_FILES[0] / f"{configuration}{seed}", []
    folder.mkdir(parents=True)
    rows = _metrics(seed)
    if tool == "wandb":
        return _wandb(folder / "history.parquet", rows, t0=T_RUN.timestamp()), []
    if tool == "tensorboard":
        return _tb(folder / "tb", rows), []
    run_id = _mlflow_run(folder / "mlruns", rows)
    return folder / "mlruns", ["--run-id", run_id]


def _import(runner, study: Path, tool: str, root: Path, c: str, s: int, *more: str):
    path, extra = _write(tool, root / tool / c / str(s), s, c)
    args = ["import", tool.split("-")[0], str(study), str(path), "-c", c, "--seed", str(s), "--preset", "verl",
            "--updates-per-step", "2", "--evaluations", str(_evals(root / f"{tool}-{c}-{s}.parquet", c, s)), *extra, *more]
    return runner.invoke(_prereg(), args)


@WANDB_RUNS
@pytest.mark.parametrize("tool", ["wandb-run", "wandb", "tensorboard", "mlflow"])
def test_tracker_imports_are_analyzed(tmp_path, tmp_path_factory, tool):
    if tool == "wandb-run" and not _RUN_FILES:
        _RUN_FILES.append(wandb_folder(tmp_path_factory, "e2e"))
    runner = CliRunner()
    study = locked_study(tmp_path / "study", NO_CRN)
    for c in ("A", "B"):
        for s in (0, 1, 2):
            res = _import(runner, study, tool, tmp_path, c, s)
            assert res.exit_code == 0, res.output
    res = runner.invoke(_prereg(), ["verify", str(study)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(_prereg(), ["analyze", str(study), "--resamples", "200"])
    assert res.exit_code == 0, res.output
    contrasts = pd.read_csv(study / "report" / "contrasts.csv").set_index("contrast")
    assert contrasts.loc["C1", "n"] == 3 and np.isfinite(contrasts.loc["C1", "mean"])
    per_seed = pd.read_csv(study / "report" / "per_seed.csv").set_index("seed")
    for s in (0, 1, 2):
        row = per_seed.loc[s]
        assert (row["treatment_value"], row["control_value"]) == pytest.approx((_accuracy_at_budget("B", s), _accuracy_at_budget("A", s)))
        assert row["difference"] == pytest.approx(_accuracy_at_budget("B", s) - _accuracy_at_budget("A", s)) and row["read_at"] == 4000
    assert json.loads((study / "report" / "results.json").read_text())["common_random_numbers"] is False
    assert "common_random_numbers = false" in (study / "report" / "report.md").read_text()
    ev = pd.read_parquet(study / "runs" / "B" / "seed-2" / "evals.parquet")
    at5 = ev[ev["iteration"] == 5]
    # 5 steps of 400 generated tokens; 2 updates a step; stage timers, never timing_s/step
    assert (at5["tokens"] == 2000).all() and (at5["updates"] == 10).all()
    assert at5["train_seconds"].iloc[0] == pytest.approx(5 * (1.5 + 0.1 + 0.2 + 0.01 + 0.9), rel=1e-6)


def test_without_common_random_numbers_preregistered_the_analysis_refuses(tmp_path):
    runner = CliRunner()
    study = locked_study(tmp_path / "study")
    for c in ("A", "B"):
        for s in (0, 1, 2):
            assert _import(runner, study, "wandb", tmp_path, c, s).exit_code == 0
    res = runner.invoke(_prereg(), ["analyze", str(study), "--resamples", "200"])
    assert res.exit_code == 2, res.output
    assert "common_random_numbers = false" in res.output



def test_runs_of_two_trainers_are_refused_unless_the_plan_says_so(tmp_path):
    """A trained by verl and B by TRL (both logged to W&B): `verify` and `analyze` refuse the study
    (exit 1, trainers and counts named); a plan that preregisters mixed_trainers reads it."""
    runner = CliRunner()
    mixed = NO_CRN.replace("seeds = [0, 1, 2]\n", "seeds = [0, 1, 2]\nmixed_trainers = true\n")
    for plan, code in ((NO_CRN, 1), (mixed, 0)):
        root = tmp_path / f"exit{code}"
        study = locked_study(root / "study", plan)
        for c in ("A", "B"):
            for s in (0, 1, 2):
                res = _import(runner, study, "wandb", root, c, s, *(["--trainer", "trl"] if c == "B" else []))
                assert res.exit_code == 0, res.output
        for command in (["verify", str(study)], ["analyze", str(study), "--resamples", "200"]):
            res = runner.invoke(_prereg(), command)
            assert res.exit_code == code, res.output
            if code:
                assert "'trl' (3 runs)" in res.output and "'verl' (3 runs)" in res.output
