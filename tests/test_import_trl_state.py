"""TRL's trainer_state.json importer on a state laid out as transformers' Trainer.save_state writes it."""

from __future__ import annotations

import json

import pytest
from importfiles import T_RUN, locked_study, outputs_lines, trl_state

from prereg_kit.errors import PreregError
from prereg_kit.integrations.importing import write_imported_run
from prereg_kit.integrations.trl_state import import_trl_state
from prereg_kit.runlog import ITERATION_COLUMNS

ARGS = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "world_size": 1, "num_generations": 4,
        "logging_steps": 1, "num_iterations": 1, "max_completion_length": 64}


def _write(tmp_path, state, name="trainer_state.json"):
    d = tmp_path / "checkpoint-6"
    d.mkdir(exist_ok=True)
    (d / name).write_text(json.dumps(state, indent=2))
    return d


def test_mapping_from_the_checkpoint_folder(tmp_path):
    d = _write(tmp_path, trl_state())
    (tmp_path / "out.jsonl").write_text(outputs_lines())
    run = import_trl_state(d, args=ARGS, evaluations=tmp_path / "out.jsonl", eval_set="test", started_at=T_RUN)
    it = run.iterations
    # 40 mean completion tokens x 8 completions (4 per device x 2 accumulation); prompts (num_tokens) left out
    assert list(it["tokens_rollout"]) == [320] * 6 and list(it["updates"]) == list(range(1, 7))
    assert (it["seconds_step"] == 2.5).all() and "seconds_generation" not in it.columns
    assert list(it["num_tokens"]) == [440.0 * k for k in range(1, 7)]  # kept as the cross-check
    assert it["reward_mean"].iloc[0] == 0.5 and it["truncation_rate"].iloc[0] == 0.125
    assert sorted(run.evaluations["iteration"].unique()) == [0, 3, 6] and run.trainer == "trl"
    assert run.source["files"][0]["path"] == "trainer_state.json"


def test_logging_gaps_refused(tmp_path):
    d = _write(tmp_path, trl_state(every=2))
    with pytest.raises(PreregError, match="step 2 where 1 was due: every training step must be logged"):
        import_trl_state(d, completions_per_step=8)
    with pytest.raises(PreregError, match="logging_steps = 2"):
        import_trl_state(d, args=ARGS | {"logging_steps": 2})


def test_no_step_time_refused(tmp_path):
    d = _write(tmp_path, trl_state(step_time=False))
    with pytest.raises(PreregError, match="no per-step time .*train_runtime covers the whole run"):
        import_trl_state(d, completions_per_step=8)


def test_completions_per_step_checked(tmp_path):
    d = _write(tmp_path, trl_state())
    with pytest.raises(PreregError, match="give --completions-per-step"):
        import_trl_state(d)
    with pytest.raises(PreregError, match="--completions-per-step 16 contradicts --args \\(8\\)"):
        import_trl_state(d, completions_per_step=16, args=ARGS)
    # 16 completions x 40 tokens exceeds what num_tokens grew by (8 x 55 = 440): refused
    with pytest.raises(PreregError, match="num_tokens grew by 440 .* the completions per step are wrong"):
        import_trl_state(d, completions_per_step=16)
    with pytest.raises(PreregError, match="num_iterations = 2"):
        import_trl_state(d, args=ARGS | {"num_iterations": 2})
    with pytest.raises(PreregError, match="steps_per_generation = 4 differs"):
        import_trl_state(d, args=ARGS | {"steps_per_generation": 4})


def test_not_a_trainer_state_refused(tmp_path):
    d = _write(tmp_path, {"global_step": 3})
    with pytest.raises(PreregError, match="'log_history' missing"):
        import_trl_state(d, completions_per_step=8)
    state = trl_state()
    state["log_history"].insert(2, dict(state["log_history"][1]))
    d = _write(tmp_path, state)
    with pytest.raises(PreregError, match=r"log_history\[2\]: step 2 logged again"):
        import_trl_state(d, completions_per_step=8)


@pytest.mark.skipif("seconds_step" not in {c.name for c in ITERATION_COLUMNS},
                    reason="the run-log format does not admit an unsplit step time yet")
def test_write_into_a_study(tmp_path):
    study = locked_study(tmp_path / "study")
    d = _write(tmp_path, trl_state())
    (tmp_path / "out.jsonl").write_text(outputs_lines())
    run = import_trl_state(d, args=ARGS, evaluations=tmp_path / "out.jsonl", eval_set="test", eval_seed=0, started_at=T_RUN)
    folder = write_imported_run(study, "A", 0, run)
    assert (folder / "iterations.parquet").exists()
