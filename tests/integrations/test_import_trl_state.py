"""`prereg import trl`: TRL's trainer_state.json as transformers and TRL write it.

A real run (``trl_runs.real_run``: TRL's GRPOTrainer, four steps of a tiny model, built once per
process) gives the files TRL itself writes; states written by transformers'
``TrainerState.save_to_json`` with the keys TRL 1.16 logs (``importfiles.grpo_entry``, checked
against the real run's) vary what the format allows. Every refusal is one line naming the file,
the log_history entry, the key and the value as written."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from importfiles import (
    T_RUN,
    checkpoint_state,
    locked_study,
    outputs_lines,
    prereg_app,
    trl_state,
    write_trl_state,
)
from typer.testing import CliRunner

from prereg_kit.errors import PreregError
from prereg_kit.integrations.importing import write_imported_run
from prereg_kit.integrations.trl_state import import_trl_state

# 4 completions a device x 2 accumulation steps; steps_per_generation defaults to the latter: one
# generation batch of 8 completions per optimizer step
ARGS = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "num_generations": 4, "logging_steps": 1,
        "num_iterations": 1, "max_completion_length": 64}
GEN_ONLY = {"num_tokens", "completions/mean_length", "completions/min_length", "completions/max_length",
            "completions/clipped_ratio", "completions/mean_terminated_length", "completions/min_terminated_length",
            "completions/max_terminated_length", "rewards/prereg_default/mean", "rewards/prereg_default/std", "reward",
            "reward_std", "frac_reward_zero_std"}


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    pytest.importorskip("trl", reason="the real run needs TRL (pip install 'prereg-kit[trl]')")
    from trl_runs import real_run

    return real_run(tmp_path_factory.mktemp("trl"))


def _write(tmp_path, state, name="checkpoint-6"):
    pytest.importorskip("transformers", reason="transformers' TrainerState writes the state (the trl extra)")
    return write_trl_state(tmp_path / name, state)


_prereg = prereg_app  # the `prereg` app with `import` (importfiles)


@pytest.mark.slow  # a real GRPOTrainer run (trl_runs), built once per process: seconds
def test_a_real_grpo_run_is_read_as_trl_wrote_it(real):
    entries = [e for e in json.loads((real / "trainer_state.json").read_text())["log_history"]
               if "completions/mean_length" in e]
    run = import_trl_state(real, args=real / "args.json", started_at=T_RUN)  # GRPOConfig.to_json_string()
    it = run.iterations
    assert it["tokens_rollout"].tolist() == [round(e["completions/mean_length"] * 4) for e in entries]
    assert it["seconds_step"].tolist() == [e["step_time"] for e in entries]
    assert it["updates"].tolist() == [1, 2, 3, 4] and it["num_tokens"].tolist() == [e["num_tokens"] for e in entries]
    assert (run.source["completions_per_generation"], run.source["generation_span_steps"]) == (4, 1)
    # each checkpoint's state: the earlier one's history is the later one's beginning
    early = import_trl_state(real / "checkpoint-2", args=real / "args.json").iterations
    late = import_trl_state(real / "checkpoint-4" / "trainer_state.json", args=real / "args.json").iterations
    pd.testing.assert_frame_equal(late, it)
    pd.testing.assert_frame_equal(early, it.iloc[:2])


@pytest.mark.slow  # a real GRPOTrainer run (trl_runs), built once per process: seconds
def test_the_written_states_have_the_keys_trl_writes(real):
    from trl_runs import keys_of

    got = keys_of(json.loads((real / "trainer_state.json").read_text()))
    assert keys_of(trl_state(4, eval_every=2)) == got
    # a step that reuses a generation batch logs the loss metrics only (TRL 1.16, GRPOTrainer.log)
    assert keys_of(trl_state(4, span=2))["step"] == got["generation"] - GEN_ONLY


@pytest.mark.parametrize("kw", [{"ints": True}, {"drop": ("reward", "num_tokens", "completions/clipped_ratio",
                                                          "frac_reward_zero_std", "loss")},
                                {"eval_every": 1, "eval_at_start": True}, {"eval_every": 0}, {"eval_every": 4}],
                         ids=["integers", "optional-keys-missing", "evaluations-every-step", "no-evaluations",
                              "evaluations-every-4"])
def test_what_the_format_allows_is_read(tmp_path, kw):
    it = import_trl_state(_write(tmp_path, trl_state(**kw)), args=ARGS).iterations
    # 40 mean completion tokens x 8 completions; prompts (num_tokens) left out
    assert it["tokens_rollout"].tolist() == [320] * 6 and it["updates"].tolist() == list(range(1, 7))
    assert it["seconds_step"].tolist() == [2.0 if kw.get("ints") else 2.5] * 6
    if "drop" in kw:
        assert it["reward_mean"].isna().all() and it["truncation_rate"].isna().all()
    else:
        assert it["reward_mean"].iloc[0] == 0.5 and it["truncation_rate"].iloc[0] == 0.125


def test_a_resumed_run_continues_the_earlier_checkpoints_history(tmp_path):
    full = trl_state(6)
    early = import_trl_state(_write(tmp_path, checkpoint_state(full, 3), "checkpoint-3"), args=ARGS).iterations
    late = import_trl_state(_write(tmp_path, checkpoint_state(full, 6), "checkpoint-6"), args=ARGS).iterations
    assert len(early) == 3 and len(late) == 6
    pd.testing.assert_frame_equal(early, late.iloc[:3])
    with pytest.raises(PreregError, match=r"no trainer_state.json in this folder; .* the latest here is .*checkpoint-6"):
        import_trl_state(tmp_path, args=ARGS)


@pytest.mark.parametrize("extra, span, batch", [({"steps_per_generation": 4}, 2, 16), ({"num_iterations": 2}, 2, 8),
                                                ({"steps_per_generation": 6}, 3, 24)])
def test_generation_batches_spanning_several_steps(tmp_path, extra, span, batch):
    """steps_per_generation > gradient_accumulation_steps or num_iterations > 1: TRL generates every
    `span` optimizer steps, and logs completion metrics only at those steps; an iteration is a batch."""
    d = _write(tmp_path, trl_state(6, span=span, completions=batch))
    steps = tuple(range(0, 7, span))
    (tmp_path / "out.jsonl").write_text(outputs_lines(steps))
    run = import_trl_state(d, args=ARGS | extra, evaluations=tmp_path / "out.jsonl", eval_set="test")
    it = run.iterations
    assert it["tokens_rollout"].tolist() == [40 * batch] * (6 // span)
    assert it["seconds_step"].tolist() == [2.5 * span] * (6 // span)
    assert it["updates"].tolist() == list(range(span, 7, span))
    assert sorted(run.evaluations["iteration"].unique()) == list(range(6 // span + 1))
    (tmp_path / "bad.jsonl").write_text(outputs_lines((0, span + 1)))
    with pytest.raises(PreregError, match=rf"bad.jsonl: an evaluation at step {span + 1}, inside a generation batch of {span}"):
        import_trl_state(d, args=ARGS | extra, evaluations=tmp_path / "bad.jsonl", eval_set="test")
    # without --args every step is taken to generate: the second step's missing metrics are named
    with pytest.raises(PreregError, match=r"log_history\[1\] \(step 2\): key 'completions/mean_length' missing: TRL "
                                          r"generates at this step .*needs --args"):
        import_trl_state(d, completions_per_step=8)
    # --args saying one batch spans 6 steps, a log generating at every step
    with pytest.raises(PreregError, match=r"log_history\[1\] \(step 2\): key 'completions/mean_length' is 40.0 inside "
                                          r"a generation batch \(a generation batch spans 6 optimizer step"):
        import_trl_state(_write(tmp_path, trl_state(6), "every-step"), args=ARGS | {"steps_per_generation": 12})


def test_a_last_generation_batch_cut_short_counts_the_steps_done(tmp_path):
    it = import_trl_state(_write(tmp_path, trl_state(5, span=2, completions=16, eval_every=0)),
                          args=ARGS | {"steps_per_generation": 4}).iterations
    assert it["updates"].tolist() == [2, 4, 5] and it["seconds_step"].tolist() == [5.0, 5.0, 2.5]


def _set(i, key, value):
    def mutate(state):
        state["log_history"][i][key] = value
    return mutate


def _drop(i, key):
    return lambda state: state["log_history"][i].pop(key)


REFUSED = [  # (name, change, raw text for "@@", message); log_history: steps 1-3, eval, 4-6, eval, summary
    ("string", _set(0, "completions/mean_length", "40"), None,
     "log_history[0] (step 1): key 'completions/mean_length' is \"40\", expected a finite number >= 0"),
    ("nan", _set(0, "step_time", "@@"), "NaN", "log_history[0] (step 1): key 'step_time' is NaN"),
    ("infinity", _set(1, "reward", "@@"), "-Infinity", ("log_history[1] (step 2): key 'reward' is -Infinity, expected a "
                                                      "finite number")),
    ("overflow", _set(2, "num_tokens", "@@"), "1e400", "log_history[2] (step 3): key 'num_tokens' is 1e400"),
    ("negative", _set(0, "completions/clipped_ratio", -0.125), None, ("key 'completions/clipped_ratio' is -0.125, "
                                                                      "expected a finite number >= 0")),
    ("boolean", _set(0, "loss", True), None, "key 'loss' is true"),
    ("null time", _set(2, "step_time", None), None, "log_history[2] (step 3): key 'step_time' is null"),
    ("no time", _drop(4, "step_time"), None, "log_history[4] (step 4): key 'step_time' missing"),
    ("null length", _set(0, "completions/mean_length", None), None,
     "log_history[0] (step 1): key 'completions/mean_length' is null: TRL generates at this step"),
    ("step string", _set(0, "step", "1"), None, "log_history[0]: key 'step' is \"1\", expected an integer >= 0"),
    ("step float", _set(0, "step", "@@"), "1.0", "log_history[0]: key 'step' is 1.0, expected an integer"),
    ("no step", _drop(0, "step"), None, "log_history[0]: key 'step' is missing"),
    ("entry", lambda s: s["log_history"].__setitem__(1, 7), None, "log_history[1] is 7, expected an object"),
    ("logging_steps", lambda s: s.update(logging_steps=2), None,
     "key 'logging_steps' is 2: every training step must be logged"),
    ("duplicate", lambda s: s["log_history"].insert(1, dict(s["log_history"][0])), None,
     "log_history[1]: step 1 logged again (first at log_history[0])"),
    ("gap", lambda s: s["log_history"].pop(1), None,
     "log_history[1]: step 3 after step 1 (log_history[0]), where step 2 was due: every training step must be logged"),
    ("global_step", lambda s: s.update(global_step=8), None,
     "key 'global_step' is 8, but the last training entry is step 6 (log_history[6])"),
    ("not a list", lambda s: s.update(log_history={}), None, "key 'log_history' missing or not a list"),
    ("num_tokens", _set(1, "num_tokens", 540.0), None,
     ("log_history[1] (step 2): key 'num_tokens' is 540.0 after 440.0 at log_history[0]: fewer than "
     "completions/mean_length 40.0 x 8 completions per generation batch")),
]


@pytest.mark.parametrize("change, raw, msg", [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_refusals_name_the_file_entry_key_and_value_as_written(tmp_path, change, raw, msg):
    state = trl_state()
    change(state)
    path = _write(tmp_path, state) / "trainer_state.json"
    if raw is not None:
        path.write_text(path.read_text().replace('"@@"', raw))
    with pytest.raises(PreregError) as e:
        import_trl_state(path, args=ARGS)
    text = str(e.value)
    assert text.startswith(f"{path}: ") and msg in text, text
    assert "\n" not in text and "np." not in text and "numpy" not in text


@pytest.mark.parametrize("args, msg", [
    ({"per_device_train_batch_size": "4"}, "key 'per_device_train_batch_size' is \"4\", expected an integer >= 1"),
    ({"per_device_train_batch_size": 4.0}, "key 'per_device_train_batch_size' is 4.0, expected an integer >= 1"),
    ({"per_device_train_batch_size": None}, "key 'per_device_train_batch_size' missing"),
    ({"gradient_accumulation_steps": 0}, "key 'gradient_accumulation_steps' is 0, expected an integer >= 1"),
    ({"steps_per_generation": 3}, ("steps_per_generation 3 x num_iterations 1 is not a multiple of "
                                  "gradient_accumulation_steps 2")),
    ({"generation_batch_size": 12, "world_size": 1}, ("key 'generation_batch_size' is 12, but per_device_train_batch_size "
                                                     "4 x world_size 1 x steps_per_generation 2 differ")),
    ({"logging_steps": 2}, "key 'logging_steps' is 2: TRL then averages its metrics"),
    ({"generation_batch_size": 9}, "key 'generation_batch_size' is 9, not a multiple of steps_per_generation 2"),
    ([4, 2], "expected a JSON object of TRL's arguments"),
])
def test_trl_arguments_are_checked_as_written(tmp_path, args, msg):
    d = _write(tmp_path, trl_state())
    (tmp_path / "args.json").write_text(json.dumps(ARGS | args if isinstance(args, dict) else args))
    with pytest.raises(PreregError) as e:
        import_trl_state(d, args=tmp_path / "args.json")
    assert str(e.value).startswith(f"{tmp_path / 'args.json'}: ") and msg in str(e.value), str(e.value)


def test_completions_per_step_checked(tmp_path):
    d = _write(tmp_path, trl_state())
    with pytest.raises(PreregError, match="give --completions-per-step"):
        import_trl_state(d)
    with pytest.raises(PreregError, match="--completions-per-step 16 contradicts --args \\(8\\)"):
        import_trl_state(d, completions_per_step=16, args=ARGS)
    # 16 completions x 40 tokens exceed what num_tokens grew by (8 x 55 = 440): refused
    with pytest.raises(PreregError, match=r"key 'num_tokens' is 440.0 after 0 at the start: fewer than .* x 16 completions "
                                          r"per generation batch \(--completions-per-step\)"):
        import_trl_state(d, completions_per_step=16)


def test_unreadable_files_exit_2_in_one_line(tmp_path):
    study = locked_study(tmp_path / "study")
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "junk.json").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "cut.json").write_text('{"log_history": [{"step": 1,')
    (tmp_path / "latin.json").write_bytes(b'{"log_history": "caf\xe9"}')
    (tmp_path / "deep.json").write_text("[" * 100_000)
    (tmp_path / "long.json").write_text('{"global_step": ' + "9" * 5000 + "}")
    (tmp_path / "out" / "checkpoint-2").mkdir(parents=True)
    (tmp_path / "out" / "checkpoint-2" / "trainer_state.json").write_text(json.dumps(trl_state(2)))
    (tmp_path / "args.json").write_bytes(b"\x00\x01 not json")
    cases = [(tmp_path / "empty.json", [], "empty.json: empty file, expected TRL's trainer_state.json"),
             (tmp_path / "junk.json", [], "junk.json: binary content, not TRL's trainer_state.json"),
             (tmp_path / "latin.json", [], "latin.json: not UTF-8 text (byte 20), expected TRL's trainer_state.json"),
             (tmp_path / "deep.json", [], "deep.json: not readable as JSON (maximum recursion depth exceeded"),
             (tmp_path / "long.json", [], "long.json: not readable as JSON (Exceeds the limit (4300 digits)"),
             (tmp_path / "cut.json", [], "cut.json: not JSON (line 1, column 29: Expecting property name"),
             (tmp_path / "missing.json", [], "missing.json: no such file"),
             (tmp_path / "out", [], "out: no trainer_state.json in this folder; TRL writes one into each checkpoint"),
             (tmp_path / "out" / "checkpoint-2", ["--args", str(tmp_path / "args.json")],
              "args.json: binary content, not TRL's arguments as JSON")]
    runner = CliRunner()
    for path, extra, msg in cases:
        argv = ["import", "trl", str(study), str(path), "-c", "A", "-s", "0", "--completions-per-step", "8", *extra]
        if extra:
            argv = argv[:-4] + extra
        res = runner.invoke(_prereg(), argv)
        assert res.exit_code == 2, res.output
        assert msg in res.output and "Traceback" not in res.output and res.output.count("error:") == 1, res.output
    assert not (study / "runs").exists()


def test_write_into_a_study(tmp_path):
    study = locked_study(tmp_path / "study")
    d = _write(tmp_path, trl_state())
    (tmp_path / "out.jsonl").write_text(outputs_lines())
    run = import_trl_state(d, args=ARGS, evaluations=tmp_path / "out.jsonl", eval_set="test", eval_seed=0, started_at=T_RUN)
    assert sorted(run.evaluations["iteration"].unique()) == [0, 3, 6] and run.trainer == "trl"
    (tmp_path / "late.jsonl").write_text(outputs_lines((0, 9)))
    with pytest.raises(PreregError, match=r"late.jsonl: an evaluation at step 9, after the last step logged \(6\)"):
        import_trl_state(d, args=ARGS, evaluations=tmp_path / "late.jsonl", eval_set="test")
    assert run.source["files"][0]["path"] == "trainer_state.json"
    folder = write_imported_run(study, "A", 0, run)
    assert (folder / "iterations.parquet").exists() or (folder / "iterations.jsonl").exists()
