"""The OpenRLHF importer: histories written by OpenRLHF 0.11.2's own W&B logger code into an
emulated W&B history (tests/openrlhfwriter.py), hand-varied histories, and a table of damaged
files refused in one line naming the file, line, key and value (through `prereg import openrlhf`:
exit 2). Its outputs file (--evaluations) is refused the same way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from importfiles import T_RUN, locked_study, openrlhf_lines, outputs_lines, prereg_app
from openrlhfwriter import SKIP_REASON, hand_history, openrlhf_ready, wandb_history
from typer.testing import CliRunner

from prereg_kit.errors import PreregError
from prereg_kit.integrations.openrlhf import PRESET, import_openrlhf

# OpenRLHF 0.11's nested arguments: 4 prompts x 4 samples, batches of 8, one epoch
ARGS = {"rollout": {"batch_size": 4, "n_samples_per_prompt": 4}, "train": {"batch_size": 8, "max_epochs": 1}}
needs_openrlhf = pytest.mark.skipif(not openrlhf_ready(), reason=SKIP_REASON)


def _files(tmp_path, **kw):
    (tmp_path / "history.jsonl").write_text(openrlhf_lines(**kw))
    (tmp_path / "out.jsonl").write_text(outputs_lines())
    return tmp_path / "history.jsonl"


def _lines(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@needs_openrlhf
@pytest.mark.parametrize("how", ["rows", "pandas"])
def test_its_own_wandb_logger_through_a_wandb_history(tmp_path, how):
    """Two rows a step (the generated-samples table, then the metrics), eval/ rows between them:
    exported row by row or through pandas (nulls, float steps), the same run."""
    hist = wandb_history(6)
    rows = hist.rows
    assert [r.get("train/global_step") for r in rows[:5]] == [None, 1, 1, 2, 2]  # step_sync stamps the table rows
    assert "train/rollout/num_samples" in rows[1] and "eval/eval_math_pass1" in rows[6]
    run = import_openrlhf(hist.export(tmp_path / "history.jsonl", how), args=ARGS, started_at=T_RUN)
    it = run.iterations
    assert list(it["tokens_rollout"]) == [480] * 6 and list(it["updates"]) == [2 * k for k in range(1, 7)]
    assert it["seconds_step"].tolist() == pytest.approx([4.0] * 6) and it["reward_mean"].iloc[0] == 0.4


def test_mapping(tmp_path):
    p = _files(tmp_path)
    run = import_openrlhf(p, args=ARGS, evaluations=tmp_path / "out.jsonl", eval_set="test", started_at=T_RUN)
    it = run.iterations
    # 30 mean response tokens x 16 logged samples; 1 epoch x 16 // 8 = 2 updates a step
    assert list(it["tokens_rollout"]) == [480] * 6 and list(it["updates"]) == [2 * k for k in range(1, 7)]
    # timing/step_total, unsplit: no stage columns are invented
    assert (it["seconds_step"] == 4.0).all() and "seconds_generation" not in it.columns
    assert it["reward_mean"].iloc[0] == 0.4 and (it["truncation_rate"] == 0).all()
    assert len(it) == 6  # the eval/ line is not a training step
    assert PRESET["step"] == "train/global_step" and run.source["key_map"]["seconds_step"] == "train/timing/step_total"
    assert set(run.evaluations["iteration"]) == {0, 3, 6}


VARIED = {
    # keys without the train/ prefix (a history exported with the prefix stripped)
    "no prefix": ({"prefix": ""}, ARGS, [480] * 6),
    # the sample count not logged (an older version): the arguments' count
    "samples not logged": ({"extra": {"rollout/num_samples": None}}, ARGS, [480] * 6),
    # NaN and null where no number is needed: reward and truncation kept as missing
    "NaN reward, null truncation": ({"extra": {"rollout/reward_mean": float("nan"), "rollout/truncated_rate": None}},
                                    ARGS, [480] * 6),
    # argparse's dotted names, as vars(args) gives them before hierarchize
    "dotted arguments": ({}, {"rollout.batch_size": 4, "rollout.n_samples_per_prompt": 4, "train.batch_size": 8}, [480] * 6),
    # integer-valued floats (pandas) for the step; a fractional mean length
    "float steps": ({"length": 30.25}, ARGS, [484] * 6),
}


@pytest.mark.parametrize("name", list(VARIED))
def test_varied_histories(tmp_path, name):
    kw, args, tokens = VARIED[name]
    rows = hand_history(6, **kw)
    if name == "float steps":
        rows = [r | {"train/global_step": float(r["train/global_step"])} for r in rows]
    run = import_openrlhf(_lines(tmp_path / "h.jsonl", rows), args=args)
    assert list(run.iterations["tokens_rollout"]) == tokens and run.iterations["updates"].iloc[-1] == 12
    if name.startswith("NaN"):
        assert run.iterations["reward_mean"].isna().all() and run.iterations["truncation_rate"].isna().all()


def test_frozen_actor_steps_update_nothing(tmp_path):
    p = _lines(tmp_path / "h.jsonl", hand_history(4))
    # ppo_train(global_step) runs the actor when the step before the logged one exceeds critic.freezing_steps
    it = import_openrlhf(p, args=ARGS | {"critic": {"freezing_steps": 1}}).iterations
    assert list(it["updates"]) == [0, 0, 2, 4]


def test_logged_samples_count_the_tokens_without_arguments(tmp_path):
    p = _files(tmp_path, samples=12)
    run = import_openrlhf(p, updates_per_step=1)
    assert list(run.iterations["tokens_rollout"]) == [360] * 6
    with pytest.raises(PreregError, match=r"history.jsonl:1: step 1: key 'rollout/num_samples' is 12.0, but the arguments "
                                          "give 16 samples per step"):
        import_openrlhf(p, args=ARGS)


def test_older_flat_arguments_and_a_named_time_key(tmp_path):
    p = _files(tmp_path, time=False)
    flat = {"rollout_batch_size": 4, "n_samples_per_prompt": 4, "train_batch_size": 8, "max_epochs": 1}
    with pytest.raises(PreregError, match="key 'timing/step_total' is not logged"):
        import_openrlhf(p, args=flat)
    run = import_openrlhf(p, args=flat, keys={"seconds_step": "train/timing/ppo_train"})
    assert (run.iterations["seconds_step"] == 0.9).all() and list(run.iterations["updates"])[:2] == [2, 4]
    with pytest.raises(PreregError, match="--key: 'seconds' is not a column the preset maps"):
        import_openrlhf(p, args=flat, keys={"seconds": "train/timing/ppo_train"})


def test_refusals(tmp_path):
    p = _files(tmp_path)
    with pytest.raises(PreregError, match="dynamic filtering is on"):
        import_openrlhf(p, args=ARGS | {"algo": {"dynamic_filtering_enable": True}})
    with pytest.raises(PreregError, match="train.batch_size needed"):
        import_openrlhf(p)
    with pytest.raises(PreregError, match=r"--args: logger.logging_steps = 5: OpenRLHF then logs every 5th step"):
        import_openrlhf(p, args=ARGS | {"logger": {"logging_steps": 5}})
    with pytest.raises(PreregError, match=r"--args: train.async_enable is on: .*wall clock between steps"):
        import_openrlhf(p, args={**ARGS, "train": ARGS["train"] | {"async_enable": True}})
    assert len(import_openrlhf(p, args={**ARGS, "train": ARGS["train"] | {"async_enable": True}},
                               keys={"seconds_step": "train/timing/ppo_train"}).iterations) == 6
    with pytest.raises(PreregError, match=r"--responses-per-step 8 contradicts --args"):
        import_openrlhf(p, args=ARGS, responses_per_step=8)
    (tmp_path / "dyn").mkdir()
    q = _files(tmp_path / "dyn", extra={"train/dynamic_filtering_pass_rate": 0.5})
    with pytest.raises(PreregError, match=r"history.jsonl:1: dynamic_filtering_pass_rate is logged"):
        import_openrlhf(q, args=ARGS)
    lines = p.read_text().splitlines()
    p.write_text("\n".join(lines[:2] + lines[3:]) + "\n")  # step 3 missing
    with pytest.raises(PreregError, match="step 4 where 3 was due"):
        import_openrlhf(p, args=ARGS)


# --- damaged files: one line naming file, line, key and the value as written -------------------

def _history_with(key: str, text: str, step: int = 3) -> str:
    rows = hand_history(6)
    out = []
    for r in rows:
        if r["train/global_step"] == step:
            r = r | {key: "@@"}
        out.append(json.dumps(r).replace('"@@"', text))
    return "\n".join(out) + "\n"


OUTPUT = '{"step": 0, "input": "What is 1 + 1?", "output": "\\\\boxed{2}", "answer": "2"}'
ATTACKS = {
    "junk bytes": ("history", b'{"train/global_step": 1}\n\xc3\x28\n', r"h.jsonl:2: not UTF-8 text \(byte 0xc3 at column 1\)"),
    "an empty history": ("history", b"", r"h.jsonl: no line has the step key 'train/global_step' \(the file is empty\)"),
    "no step key": ("history", b'{"eval/x": 1}\n', r"h.jsonl: no line has the step key 'train/global_step'$"),
    "a row not an object": ("history", b'{"train/global_step": 1}\n"step 2"\n', (r'h.jsonl:2: expected a JSON object of '
                                                                               r'logged keys, got "step 2"')),
    "a step as text": ("history", _history_with("train/global_step", '"3"', 3).encode(),
                       r"""h.jsonl:3: key 'train/global_step' is "3", expected an integer step"""),
    "a fractional step": ("history", _history_with("train/global_step", "2.5", 3).encode(),
                          r"h.jsonl:3: key 'train/global_step' is 2.5, expected an integer step"),
    "a negative step": ("history", _history_with("train/global_step", "-3", 3).encode(),
                        r"h.jsonl:3: key 'train/global_step' is -3, expected an integer step >= 0"),
    "a step beyond any run": ("history", _history_with("train/global_step", "1" + "0" * 30, 3).encode(),
                              r"h.jsonl:3: key 'train/global_step' is 10{30}, expected an integer step >= 0"),
    "NaN mean length": ("history", _history_with("train/rollout/response_length_mean", "NaN").encode(),
                        r"h.jsonl:3: step 3: key 'rollout/response_length_mean' is NaN, expected a number >= 0"),
    "Infinity step time": ("history", _history_with("train/timing/step_total", "Infinity").encode(),
                           r"h.jsonl:3: step 3: key 'timing/step_total' is Infinity, expected a number >= 0"),
    "an overflowing mean length": ("history", _history_with("train/rollout/response_length_mean", "1e300").encode(),
                                   r"h.jsonl:3: step 3: key 'rollout/response_length_mean' is 1e300: above 2\^40 tokens"),
    "a mean length that fills a step": ("history", _history_with("train/rollout/response_length_mean", "1e11").encode(),
                                        (r"h.jsonl:3: step 3: key 'rollout/response_length_mean' is 1e11: times the "
                                         r"step's completions that is above 2\^40 tokens")),
    "a count beyond a float": ("history", _history_with("train/rollout/num_samples", "1" + "0" * 400).encode(),
                               r"h.jsonl:3: step 3: key 'rollout/num_samples' is 10{19}\.\.\. \(401 characters\): above 2\^40 tokens"),
    "an overflowing step time": ("history", _history_with("train/timing/step_total", "1e300").encode(),
                                 r"h.jsonl:3: step 3: key 'timing/step_total' is 1e300: above 10\^9 seconds"),
    "a negative time": ("history", _history_with("train/timing/step_total", "-4").encode(),
                        r"h.jsonl:3: step 3: key 'timing/step_total' is -4, expected a number >= 0"),
    "a length as text": ("history", _history_with("train/rollout/response_length_mean", '"30"').encode(),
                         r"""h.jsonl:3: step 3: key 'rollout/response_length_mean' is "30", expected a number >= 0"""),
    "a count as true": ("history", _history_with("train/rollout/num_samples", "true").encode(),
                        r"h.jsonl:3: step 3: key 'rollout/num_samples' is true, expected a whole number >= 1"),
    "a fractional count": ("history", _history_with("train/rollout/num_samples", "15.5").encode(),
                           r"h.jsonl:3: step 3: key 'rollout/num_samples' is 15.5, expected a whole number >= 1"),
    "null length (a pandas export of NaN)": ("history", _history_with("train/rollout/response_length_mean", "null").encode(),
                                             (r"h.jsonl:3: step 3: key 'rollout/response_length_mean' missing, but other "
                                             r"steps log it")),
    "truncation above 1": ("history", _history_with("train/rollout/truncated_rate", "2").encode(),
                           r"h.jsonl:3: step 3: key 'rollout/truncated_rate' is 2, expected a number between 0 and 1"),
    "a step logged twice": ("history", (openrlhf_lines(3) + openrlhf_lines(1)).encode(),
                            r"h.jsonl:5: step 1: key 'policy_loss' logged again \(first at line 1\): a resumed run's"),
    "junk bytes in the arguments": ("args", b"\xff{}", r"args.json: not UTF-8 text"),
    "arguments not JSON": ("args", b"{rollout: 4}", r"args.json:1: not JSON"),
    "arguments not an object": ("args", b"[4, 4]", r"args.json: the arguments are a JSON object, got \[4, 4\]"),
    "a batch size as text": ("args", json.dumps({"rollout": {"batch_size": "4"}}).encode(),
                             r"""args.json: rollout.batch_size is "4", expected an integer >= 1"""),
    "a batch size beyond any run": ("args", json.dumps({"rollout": {"batch_size": 10**25}}).encode(),
                                    r"args.json: rollout.batch_size is 10{25}, expected an integer >= 1 \(below 2\^40\)"),
    "junk bytes in the outputs": ("outputs", OUTPUT.encode() + b"\n\x80\n", r"out.jsonl:2: not UTF-8 text"),
    "an empty outputs file": ("outputs", b"\n", r"out.jsonl: no evaluation outputs \(the file is empty\)"),
    "an outputs line not an object": ("outputs", b"[0]\n", r"out.jsonl:1: expected a JSON object .*, got \[0\]"),
    "a negative step in the outputs": ("outputs", OUTPUT.replace('"step": 0', '"step": -1').encode(),
                                       r"out.jsonl:1: key 'step' is -1, expected an integer >= 0"),
    "a step as a float in the outputs": ("outputs", OUTPUT.replace('"step": 0', '"step": 3.0').encode(),
                                         r"out.jsonl:1: key 'step' is 3.0, expected an integer >= 0"),
    "a null answer": ("outputs", OUTPUT.replace('"2"}', "null}").encode(),
                      r"out.jsonl:1: key 'answer' is null, expected the reference answer's text"),
    "a null output": ("outputs", OUTPUT.replace('"\\\\boxed{2}"', "null").encode(),
                      r"out.jsonl:1: key 'output' is null, expected the output's text"),
    "an input that is not text": ("outputs", OUTPUT.replace('"What is 1 + 1?"', "7").encode(),
                                  r"out.jsonl:1: key 'input' is 7, expected the prompt's text"),
    "a step beyond any run in the outputs": ("outputs", OUTPUT.replace('"step": 0', '"step": 1' + "0" * 30).encode(),
                                             r"out.jsonl:1: key 'step' is 10{30}, expected an integer >= 0"),
    "outputs after the last step": ("outputs", (OUTPUT + "\n" + OUTPUT.replace('"step": 0', '"step": 7')).encode(),
                                    r"out.jsonl:2: key 'step' is 7, but the training steps logged end at step 6"),
    "two answers for one problem": ("outputs", (OUTPUT + "\n" + OUTPUT.replace('"2"}', '"3"}')).encode(),
                                    r"""out.jsonl:2: key 'answer' is "3", but line 1 gave problem p-[0-9a-f]+ the answer"""),
}


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    return locked_study(tmp_path_factory.mktemp("orl-study") / "study")


_prereg = prereg_app  # the `prereg` app with `import` (importfiles)


@pytest.mark.parametrize("name", list(ATTACKS))
def test_a_damaged_file_is_refused_in_one_line(tmp_path, study, name):
    which, data, message = ATTACKS[name]
    files = {"history": _lines(tmp_path / "h.jsonl", hand_history(6)), "args": tmp_path / "args.json",
             "outputs": tmp_path / "out.jsonl"}
    files["args"].write_text(json.dumps(ARGS))
    files["outputs"].write_text(OUTPUT + "\n")
    files[which].write_bytes(data)
    with pytest.raises(PreregError, match=message) as e:
        import_openrlhf(files["history"], args=files["args"], evaluations=files["outputs"], eval_set="test")
    assert "\n" not in str(e.value) and "np." not in str(e.value)
    res = CliRunner().invoke(_prereg(), ["import", "openrlhf", str(study), str(files["history"]), "-c", "A", "-s", "0",
                                         "--args", str(files["args"]), "--evaluations", str(files["outputs"]),
                                         "--eval-set", "test", "--started-at", "2026-01-11T12:00:00Z"])
    assert res.exit_code == 2, res.output
    assert res.output.count("error:") == 1 and "Traceback" not in res.output and "internal error" not in res.output
    assert not (study / "runs").exists()
