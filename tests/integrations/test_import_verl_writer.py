"""verl runs written by verl 0.9.1's own code (tests/verlwriter.py: its FileLogger through
``Tracking(..., default_backend="file")`` and its ``_write_generations``), imported, and a study of
them analyzed to exactly the per-seed differences the validation dumps encode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from importfiles import T_RUN, locked_study, prereg_app
from typer.testing import CliRunner
from verlwriter import SKIP_REASON, Fit, verl_ready, write_fit

from prereg_kit.errors import PreregError
from prereg_kit.integrations.evaluations_file import build
from prereg_kit.integrations.rescore import read_outputs
from prereg_kit.integrations.verl import import_verl, read_validation_dumps

pytestmark = pytest.mark.skipif(not verl_ready(), reason=SKIP_REASON)


_prereg = prereg_app  # the `prereg` app with `import` (importfiles)


def _args(study: Path, f: dict, c: str, s: int) -> list[str]:
    return ["import", "verl", str(study), *map(str, f["logs"]), "-c", c, "-s", str(s), "--config", str(f["config"]),
            "--validation-dir", str(f["val"]), "--eval-set", "test", "--eval-seed", str(s),
            "--started-at", T_RUN.isoformat().replace("+00:00", "Z")]


def test_the_file_logger_writes_integers_and_nulls_and_no_line_before_training(tmp_path):
    """What verl 0.9.1 writes with trainer.val_before_train=False: the first line is step 1,
    perf/total_num_tokens and the agent loop's numpy counts are JSON integers, NaN is null."""
    fit = Fit(val_before_train=False, nan_grad_norm_at=1)
    f = write_fit(tmp_path / "run", fit)
    first = json.loads(f["logs"][0].read_text().splitlines()[0])
    assert first["step"] == 1 and first["data"]["actor/grad_norm"] is None
    assert type(first["data"]["perf/total_num_tokens"]) is int and type(first["data"]["num_turns/min"]) is int
    run = import_verl(f["logs"], config=f["config"], validation_dir=f["val"], eval_set="test", started_at=T_RUN)
    assert list(run.iterations["tokens_rollout"]) == [sum(fit.response_lengths[s]) for s in range(1, 11)] == [400] * 10
    assert run.iterations["seconds_weight_sync"].iloc[0] == pytest.approx(0.12)
    assert sorted(run.evaluations["iteration"].unique()) == [5, 10]


@pytest.mark.parametrize("trainer,val_before_train,test_freq,evals", [
    ("v0", True, 5, [0, 5, 10]), ("v1", True, 3, [0, 3, 6, 9, 10]), ("v0", False, 100, [10]), ("v1", True, -1, [0])])
def test_validation_at_the_steps_fit_validates(tmp_path, trainer, val_before_train, test_freq, evals):
    f = write_fit(tmp_path / "run", Fit(trainer=trainer, val_before_train=val_before_train, test_freq=test_freq))
    run = import_verl(f["logs"], config=f["config"], validation_dir=f["val"], eval_set="test")
    assert sorted(run.evaluations["iteration"].unique()) == evals
    assert (run.evaluations["samples"] == 2).all() and run.evaluations["problem_id"].nunique() == 6


def test_a_resumed_run(tmp_path):
    """Attempt 1 dies after step 8 (checkpoint at 5); attempt 2 loads it, validates at step 5 and
    trains 6..10: both files in order give the run whose weights the last step has."""
    fit = Fit(crash_after=8, seed=7)
    f = write_fit(tmp_path / "run", fit)
    run = import_verl(f["logs"], config=f["config"], validation_dir=f["val"], eval_set="test")
    assert list(run.iterations["tokens_rollout"]) == [sum(fit.response_lengths[s]) for s in range(1, 11)]
    assert any("steps 6..8 of metrics.jsonl were trained again" in n for n in run.source["notes"])
    study = locked_study(tmp_path / "study")  # through the command: the files in order after the study
    res = CliRunner().invoke(_prereg(), _args(study, f, "A", 0))
    assert res.exit_code == 0, res.output
    assert "10 iterations, 4000 generated tokens" in res.output and "were trained again" in res.output
    same = write_fit(tmp_path / "same", Fit(crash_after=8, same_file=True))
    with pytest.raises(PreregError, match="the first training step logged is 6, not 1: verl's file logger empties its file"):
        import_verl(same["logs"], config=same["config"])


def test_an_evaluations_file_from_the_v1_trainers_dumps(tmp_path):
    """The V1 trainer's dumps carry a uid per sample that changes every validation: a problem
    is still its input text, so the built file reads to the dumps' own counts."""
    f = write_fit(tmp_path / "run", Fit(trainer="v1", correct=lambda step: step))
    assert "uid" in json.loads((f["val"] / "5.jsonl").read_text().splitlines()[0])
    assert build("verl", f["val"], tmp_path / "evals.jsonl", eval_set="test") == 36
    cols = ["iteration", "problem_id", "samples", "correct", "correct_strict", "boxed"]
    built = read_outputs(tmp_path / "evals.jsonl", eval_set=None)[cols]
    assert built.equals(read_validation_dumps(f["val"], eval_set="test")[0][cols])
    assert list(built.groupby("iteration")["correct"].sum()) == [0, 5, 10]


def test_a_wandb_history_with_the_built_evaluations_reads_as_the_verl_import(tmp_path):
    """docs/integrations.md, "Building --evaluations files": verl's metrics in a W&B history
    (the same dicts, W&B's step = verl's global step), the evaluations built from its dumps."""
    import pandas as pd

    from prereg_kit.integrations.wandb import import_wandb

    f = write_fit(tmp_path / "run", Fit(correct=lambda step: step))
    rows = [{"_step": rec["step"], "_runtime": 5.0 * i, "_timestamp": 1.7e9 + 5 * i, **rec["data"]}
            for i, rec in enumerate(map(json.loads, f["logs"][0].read_text().splitlines()))]
    pd.DataFrame(rows).to_parquet(tmp_path / "history.parquet")
    build("verl", f["val"], tmp_path / "evals.jsonl", eval_set="test")
    run = import_wandb(tmp_path / "history.parquet", preset="verl", trainer="verl", evals=tmp_path / "evals.jsonl",
                       updates_per_step=2)
    direct = import_verl(f["logs"], config=f["config"], validation_dir=f["val"], eval_set="test")
    cols = ["iteration", "problem_id", "samples", "correct", "correct_strict"]
    assert run.evaluations[cols].sort_values(cols[:2], ignore_index=True).astype("str").equals(
        direct.evaluations[cols].sort_values(cols[:2], ignore_index=True).astype("str"))
    assert list(run.iterations["tokens_rollout"]) == list(direct.iterations["tokens_rollout"])


# correct outputs (of 6 problems x 2 samples) in the validation after 10 steps, per configuration and seed;
# the earlier validations have fewer (see _correct): the per-seed difference at B is (B - A) / 12
AT_B = {"A": {0: 3, 1: 4, 2: 2}, "B": {0: 6, 1: 5, 2: 7}}


def _correct(c: str, s: int):
    return lambda step: max(AT_B[c][s] - (10 - step) // 5, 0)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Two configurations x three seeds, logged and dumped by verl's own code (the V1 trainer's
    dump writer for seed 2), imported through `prereg import verl`."""
    root = tmp_path_factory.mktemp("verl-e2e")
    study = locked_study(root / "study")
    runner = CliRunner()
    for c in ("A", "B"):
        for s in (0, 1, 2):
            f = write_fit(root / c / str(s), Fit(seed=s, correct=_correct(c, s), trainer="v1" if s == 2 else "v0",
                                                 val_before_train=True, test_freq=5))
            res = runner.invoke(_prereg(), _args(study, f, c, s))
            assert res.exit_code == 0, res.output
    return study


def test_the_study_analyzes_to_the_differences_the_dumps_encode(study):
    import prereg_kit as pk

    analysis = pk.analyze(study, n_resamples=50)
    per_seed = analysis.per_seed.query("contrast == 'C1'").set_index("seed")
    for s in (0, 1, 2):
        assert per_seed.loc[s, "treatment_value"] == pytest.approx(AT_B["B"][s] / 12, abs=1e-12)
        assert per_seed.loc[s, "control_value"] == pytest.approx(AT_B["A"][s] / 12, abs=1e-12)
        assert per_seed.loc[s, "difference"] == pytest.approx((AT_B["B"][s] - AT_B["A"][s]) / 12, abs=1e-12)
    curves = analysis.curves.query("configuration == 'B' and seed == 1").sort_values("eval_index")
    assert list(curves["tokens"]) == [0, 2000, 4000] and list(curves["accuracy"] * 12) == pytest.approx([3, 4, 5])
