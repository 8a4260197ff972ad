"""The verl importer on files laid out as verl 0.9.1 writes them, varied by hand where verl's own
writer never varies (tests/verlwriter.py, ``Fit(hand=True)``): integers written as floats,
optional keys missing, no line before training, validation at other frequencies, nulls and NaN,
resumed runs; and a table of damaged files, each refused in one line that names the file, the
line, the key and the value as written (through ``prereg import verl``: exit 2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from importfiles import T_RUN, locked_study, prereg_app, verl_config, write_verl_run
from typer.testing import CliRunner
from verlwriter import Fit, write_fit

from prereg_kit.errors import PreregError
from prereg_kit.integrations.verl import import_verl, read_file_logger


def _imp(f: dict, **kw):
    kw.setdefault("config", f["config"])
    kw.setdefault("validation_dir", f["val"])
    return import_verl(f["logs"], eval_set="test", started_at=T_RUN, **kw)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict:
    """A hand-written verl run: no line before training, integer metrics, validation at 5 and 10."""
    return write_fit(tmp_path_factory.mktemp("verl") / "run", Fit(hand=True, val_before_train=False))


def _copy(base: dict, dest: Path) -> dict:
    shutil.copytree(base["logs"][0].parent, dest)
    return {"logs": [dest / p.name for p in base["logs"]], "val": dest / "val", "config": dest / "config.yaml"}


def test_the_first_step_without_a_line_before_it_and_integer_metrics(base):
    """The user's run: perf/total_num_tokens a JSON integer in every line, no step-0 line."""
    first = json.loads(base["logs"][0].read_text().splitlines()[0])
    assert first["step"] == 1 and isinstance(first["data"]["perf/total_num_tokens"], int)
    run = _imp(base)
    it = run.iterations
    assert list(it["tokens_rollout"]) == [400] * 10 and list(it["updates"]) == [2 * k for k in range(1, 11)]
    assert it["seconds_update"].iloc[0] == pytest.approx(0.2 + 0.2 + 0.9) and it["seconds_weight_sync"].iloc[0] == 0.12
    assert sorted(run.evaluations["iteration"].unique()) == [5, 10] and (run.evaluations["samples"] == 2).all()
    assert list(run.evaluations.groupby("iteration")["correct"].sum()) == [6, 6]


VARIANTS = {
    # integer metrics written as floats (a logger without orjson): the same run
    "floats": {"floats": True},
    # optional keys missing: the total (tokens from the config), the unneeded stage timers, reward, truncation
    "optional keys missing": {"drop": ("perf/total_num_tokens", "timing_s/ref", "timing_s/reward", "timing_s/adv",
                                        "timing_s/update_weights", "critic/score/mean", "response_length/clip_ratio")},
    # nulls (orjson's NaN) and NaN literals where no number is needed
    "nulls where not needed": {"null": ("actor/grad_norm", "critic/score/mean", "val-core/openai/gsm8k/reward/mean@2"),
                                   "nan": ("actor/pg_loss", "response_length/clip_ratio")},
    "validation every 3 steps": {"test_freq": 3},  # 3, 6, 9 and the last step, 10
    "validation only at the end": {"test_freq": 100, "val_before_train": True},
    "no validation during training": {"test_freq": -1, "val_before_train": True},
}
EVALS = {"validation every 3 steps": [3, 6, 9, 10], "validation only at the end": [0, 10],
         "no validation during training": [0]}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_varied_runs_import_the_same_compute(tmp_path, name):
    f = write_fit(tmp_path / "run", Fit(hand=True, **({"val_before_train": False} | VARIANTS[name])))
    run = _imp(f)
    it = run.iterations
    assert list(it["tokens_rollout"]) == [400] * 10 and list(it["updates"]) == [2 * k for k in range(1, 11)]
    assert it["seconds_generation"].between(1.5, 1.6).all()
    assert sorted(run.evaluations["iteration"].unique()) == EVALS.get(name, [5, 10])
    if name == "optional keys missing":
        assert "total_num_tokens" not in it.columns and it["reward_mean"].isna().all()
        assert it["seconds_credit"].iloc[0] == 0 and any("weight sync 0" in n for n in run.source["notes"])
    if name == "nulls where not needed":
        assert it["reward_mean"].isna().all() and it["truncation_rate"].isna().all()


def test_a_resumed_run_from_each_attempts_file(tmp_path):
    """Attempt 1 dies after step 7 (checkpoint at 5); attempt 2 validates at 5 and trains 6..10:
    its steps 6 and 7 replace attempt 1's (whose weights were lost), steps 1..5 come from attempt 1."""
    fit = Fit(hand=True, crash_after=7, seed=3)
    f = write_fit(tmp_path / "run", fit)
    first = [json.loads(x)["step"] for x in f["logs"][0].read_text().splitlines()]
    second = [json.loads(x)["step"] for x in f["logs"][1].read_text().splitlines()]
    assert first == list(range(8)) and second == list(range(5, 11))
    run = _imp(f)
    assert list(run.iterations["verl_step"]) == list(range(1, 11))
    assert list(run.iterations["tokens_rollout"]) == [sum(fit.response_lengths[s]) for s in range(1, 11)]
    assert any("steps 6..7 of metrics.jsonl were trained again" in n for n in run.source["notes"])
    assert [r["kind"] for r in run.source["files"][:2]] == ["attempt 1", "attempt 2"]
    with pytest.raises(PreregError, match=r"metrics-resumed.jsonl:2: step 6: the first training step logged is 6, "
                                          r"not 1: .* give that file first"):
        _imp(f | {"logs": f["logs"][1:]})
    with pytest.raises(PreregError, match=r"metrics-resumed.jsonl:2: step 6: the first training step logged is 6"):
        _imp(f | {"logs": f["logs"][::-1]})  # the attempts out of order


def test_a_resumed_run_logged_into_the_same_file_is_refused(tmp_path):
    """FileLogger opens its file with "wb": the second attempt emptied the first one's lines."""
    f = write_fit(tmp_path / "run", Fit(hand=True, crash_after=7, same_file=True))
    assert len(f["logs"]) == 1
    with pytest.raises(PreregError, match=r"metrics.jsonl:2: step 6: the first training step logged is 6, not 1: "
                                          r"verl's file logger empties its file when a run resumes"):
        _imp(f)


def test_critic_warmup_steps_update_no_actor(tmp_path):
    f = write_fit(tmp_path / "run", Fit(hand=True, critic_warmup=3))
    it = _imp(f).iterations
    assert list(it["updates"][:4]) == [0, 0, 2, 4] and it["seconds_update"].iloc[0] == pytest.approx(0.4)


def test_v1_trainer_updates_and_async_modes(tmp_path, base):
    cfg = yaml.safe_load(base["config"].read_text())
    cfg["trainer"] |= {"use_v1": True, "v1": {"trainer_mode": "sync", "sync": {"parameter_sync_step": 2}}}
    # 2 local updates of 4 // 2 = 2 prompts, each 2 // 2 = 1 mini-batch: 2 optimizer steps a step
    assert _imp(base, config=cfg).iterations["updates"].iloc[-1] == 20
    cfg["trainer"]["v1"]["trainer_mode"] = "separate_async"
    with pytest.raises(PreregError, match=r'--config: trainer.v1.trainer_mode = "separate_async": generation then '
                                          "overlaps training"):
        _imp(base, config=cfg)


def test_without_total_tokens_uses_responses_per_step(tmp_path):
    f = write_verl_run(tmp_path / "v2", 0, 0.5, drop=("perf/total_num_tokens",))
    files = {"logs": [f["log"]], "val": f["val"], "config": f["config"]}
    assert (_imp(files).iterations["tokens_rollout"] == 400).all()
    with pytest.raises(PreregError, match="give the responses per step"):
        _imp(files, config={"actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 2}}, "data": {}}, updates_per_step=2)
    assert (_imp(files, config=None, updates_per_step=1, responses_per_step=8).iterations["tokens_rollout"] == 400).all()


def test_responses_per_step_contradicting_the_total_refused(base):
    with pytest.raises(PreregError, match=r"metrics.jsonl:1: step 1: perf/total_num_tokens \d+ / \(prompt_length/mean "
                                          r"[\d.]+ \+ response_length/mean 50.0\) is 8.0 responses, but a step has 16"):
        _imp(base, responses_per_step=16)


def test_step_timer_only_refused(tmp_path):
    f = write_fit(tmp_path / "v", Fit(hand=True, val_before_train=False, drop=("timing_s/gen",)))
    with pytest.raises(PreregError, match=r"metrics.jsonl:1: step 1: only timing_s/step is logged, which includes validation"):
        _imp(f)
    f = write_fit(tmp_path / "w", Fit(hand=True, drop=("timing_s/update_actor",)))
    with pytest.raises(PreregError, match=r"metrics.jsonl:2: step 1: key 'timing_s/update_actor' missing"):
        _imp(f)


def test_dynamic_sampling_refused(tmp_path):
    f = write_verl_run(tmp_path / "v", 0, 0.5, config=verl_config(**{"algorithm.filter_groups.enable": True}))
    with pytest.raises(PreregError, match="filter_groups.enable = true .* discarded tokens are not in its files"):
        import_verl(f["log"], config=f["config"])
    # the config disabled but the DAPO trainer's key present: still refused
    f = write_verl_run(tmp_path / "w", 0, 0.5)
    lines = f["log"].read_text().splitlines()
    rec = json.loads(lines[1])
    rec["data"]["train/num_gen_batches"] = 3
    f["log"].write_text("\n".join([lines[0], json.dumps(rec), *lines[2:]]) + "\n")
    with pytest.raises(PreregError, match=r"metrics.jsonl:2: step 1: the run used dynamic sampling"):
        import_verl(f["log"], config=f["config"])
    # a near miss (filter_groups present but off) imports
    f = write_verl_run(tmp_path / "x", 0, 0.5, config=verl_config(**{"algorithm.filter_groups.enable": False}))
    assert len(import_verl(f["log"], config=f["config"]).iterations) == 10


def test_updates_need_the_config_or_an_option(base):
    with pytest.raises(PreregError, match="ppo_mini_batch_size"):
        import_verl(base["logs"], started_at=T_RUN)
    assert import_verl(base["logs"], updates_per_step=3).iterations["updates"].iloc[-1] == 30


def test_rescoring_uses_our_verifiers_and_keeps_verl_score(tmp_path, base):
    f = _copy(base, tmp_path / "run")
    recs = [{"input": "What is 2 + 2?", "output": "The answer is \\boxed{4}", "gts": "4", "score": 1.0},
            {"input": "What is 2 + 2?", "output": "so it is 4", "gts": "4", "score": 0.0},  # ours: correct, not strict
            {"input": "What is 3 + 3?", "output": "answer: 5", "gts": 6, "score": 1.0},  # verl's reward said 1; gts an int
            {"input": "What is 4 + 4?", "output": "\\boxed{8}", "gts": "8", "score": None}]  # no score: none kept
    for dump in f["val"].glob("*.jsonl"):
        dump.write_text("".join(json.dumps(r) + "\n" for r in recs))
    rows = _imp(f).evaluations.query("iteration == 5").reset_index(drop=True)
    assert list(rows["samples"]) == [2, 1, 1] and list(rows["correct"]) == [2, 0, 1]
    assert list(rows["correct_strict"]) == [1, 0, 1] and list(rows["boxed"]) == [1, 0, 1]
    assert list(rows["tool_score_mean"][:2]) == [0.5, 1.0] and rows["tool_score_mean"].isna().iloc[2]


def test_dump_without_data_source_needs_eval_set(tmp_path, base):
    f = _copy(base, tmp_path / "run")
    with pytest.raises(PreregError, match=r"5.jsonl:1: no data_source .*--eval-set"):
        import_verl(f["logs"], config=f["config"], validation_dir=f["val"])
    for dump in f["val"].glob("*.jsonl"):
        lines = [json.loads(x) | {"data_source": "test"} for x in dump.read_text().splitlines()]
        dump.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert set(import_verl(f["logs"], config=f["config"], validation_dir=f["val"]).evaluations["eval_set"]) == {"test"}


def test_config_as_yaml_file_must_be_a_mapping(tmp_path, base):
    bad = tmp_path / "config.yaml"
    bad.write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(PreregError, match="a config is a mapping"):
        import_verl(base["logs"], config=bad)


# --- damaged files: one line naming file, line, key and the value as written -------------------

def _edit_line(path: Path, n: int, fn) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    lines[n - 1] = fn(lines[n - 1])
    path.write_bytes(b"".join(lines))


def _set(key: str, text: str, n: int = 3):
    """Line ``n`` of the file logger with ``key`` written as ``text`` (raw JSON)."""
    def fn(f):
        def edit(line: bytes) -> bytes:
            rec = json.loads(line)
            rec["data"][key] = "@@"
            return json.dumps(rec).replace('"@@"', text).encode() + b"\n"
        _edit_line(f["logs"][0], n, edit)
    return fn


def _raw(n: int, text: bytes, file: str = "log"):
    def fn(f):
        path = f["logs"][0] if file == "log" else f["val"] / file
        _edit_line(path, n, lambda _: text)
    return fn


def _dump(n: int, **changes):
    def fn(f):
        def edit(line: bytes) -> bytes:
            rec = json.loads(line)
            rec.update(changes)
            return json.dumps({k: v for k, v in rec.items() if v != "<drop>"}).encode() + b"\n"
        _edit_line(f["val"] / "5.jsonl", n, edit)
    return fn


def _write(name: str, text: bytes):
    def fn(f):
        path = f["logs"][0] if name == "log" else f["val"] / name if name.endswith(".jsonl") else f["config"]
        path.write_bytes(text)
    return fn


ATTACKS = {
    "junk bytes in the log": (_raw(3, b'{"step": 3, "data": {"a": "\xff\xfe"}}\n'),
                              r"metrics.jsonl:3: not UTF-8 text \(byte 0xff at column 28\)"),
    "junk bytes in a dump": (_raw(2, b"\x89PNG\r\n", "5.jsonl"), r"val/5.jsonl:2: not UTF-8 text \(byte 0x89 at column 1\)"),
    "junk bytes in the config": (_write("config", b"\x00\x9c\xff"), r"config.yaml: not UTF-8 text"),
    "a batch size beyond any run": (lambda f: f["config"].write_text(f["config"].read_text().replace(
        "train_batch_size: 4", "train_batch_size: " + "1" + "0" * 30)),
        r"config.yaml: data.train_batch_size is 10{30}, expected an integer >= 0 \(below 2\^40\)"),
    "a torn line": (_raw(3, b'{"step": 3, "data": {"timing_s/gen": 1.\n'), r"metrics.jsonl:3: not a JSON line"),
    "nested too deep": (_raw(3, b"[" * 100000 + b"\n"), r"metrics.jsonl:3: not a JSON line \(nested deeper"),
    "an integer too long to read": (_set("perf/total_num_tokens", "9" * 5000), r"metrics.jsonl:3: not a JSON line"),
    "NaN in a needed timer": (_set("timing_s/gen", "NaN"), (r"metrics.jsonl:3: step 3: key 'timing_s/gen' is NaN, "
                                                           r"expected a number >= 0")),
    "Infinity in the mean length": (_set("response_length/mean", "Infinity"),
                                    r"metrics.jsonl:3: step 3: key 'response_length/mean' is Infinity, expected"),
    "null in a needed timer": (_set("timing_s/update_actor", "null"),
                               (r"metrics.jsonl:3: step 3: key 'timing_s/update_actor' is null \(verl's file logger "
                               r"writes NaN and infinite values as null\)")),
    "null in a summed timer": (_set("timing_s/ref", "null"), r"metrics.jsonl:3: step 3: key 'timing_s/ref' is null"),
    "an overflowing mean length": (_set("response_length/mean", "1e300"),
                                   r"metrics.jsonl:3: step 3: key 'response_length/mean' is 1e300: above 2\^40 tokens"),
    "an overflowing total": (_set("perf/total_num_tokens", "123456789012345678901234567890"),
                             r"key 'perf/total_num_tokens' is 123456789012345678901234567890: above 2\^40 tokens"),
    "an integer beyond a float": (_set("timing_s/gen", "1" + "0" * 400),
                                  r"step 3: key 'timing_s/gen' is 10{19}\.\.\. \(401 characters\): above 10\^9 seconds"),
    "a negative timer": (_set("timing_s/gen", "-1.5e0"), r"step 3: key 'timing_s/gen' is -1.5e0, expected a number >= 0"),
    "a timer as text": (_set("timing_s/gen", '"1.5"'), r"""step 3: key 'timing_s/gen' is "1.5", expected a number"""),
    "a timer as true": (_set("timing_s/gen", "true"), r"step 3: key 'timing_s/gen' is true, expected a number"),
    "truncation above 1": (_set("response_length/clip_ratio", "1.25"),
                           r"step 3: key 'response_length/clip_ratio' is 1.25, expected a number between 0 and 1"),
    "a step logged twice": (_raw(4, b'{"step": 2, "data": {}}\n'),
                            r"metrics.jsonl:4: step 2 logged again \(first at line 2\): verl logs a step once per file"),
    "a step as text": (_raw(3, b'{"step": "3", "data": {}}\n'), r"""metrics.jsonl:3: key 'step' is "3", expected an integer"""),
    "a step as a float": (_raw(3, b'{"step": 3.0, "data": {}}\n'), r"metrics.jsonl:3: key 'step' is 3.0, expected an integer"),
    "a negative step": (_raw(3, b'{"step": -3, "data": {}}\n'), r"metrics.jsonl:3: key 'step' is -3, expected an integer >= 0"),
    "data not an object": (_raw(3, b'{"step": 3, "data": [1.5]}\n'), r"metrics.jsonl:3: key 'data' is \[1.5\], expected an object"),
    "a line not an object": (_raw(3, b"[3, {}]\n"), (r"metrics.jsonl:3: expected \{\"step\": <integer>, \"data\": \{...\}\} "
                                                   r"\(a line of verl's file logger\), got \[3, \{\}\]")),
    "a step missing": (_raw(3, b"\n"), r"metrics.jsonl:4: training step 4 follows step 2 \(line 2\)"),
    "an empty log": (_write("log", b""), r"metrics.jsonl: no steps logged \(the file is empty\)"),
    "an empty dump": (_write("5.jsonl", b"\n"), r"val/5.jsonl: empty validation dump"),
    "a dump without gts": (_dump(2, gts=None), r"val/5.jsonl:2: key 'gts' is null: verl had no reference answer"),
    "a dump with a list as gts": (_dump(2, gts=["2", "two"]), r"""val/5.jsonl:2: key 'gts' is \["2", "two"\], expected"""),
    "a dump without output": (_dump(3, output="<drop>"), r"val/5.jsonl:3: key 'output' missing"),
    "a dump with a null output": (_dump(3, output=None), r"val/5.jsonl:3: key 'output' is null, expected the output's text"),
    "a dump of another step": (_dump(1, step=7), r"val/5.jsonl:1: key 'step' is 7, but the file is the dump of step 5"),
    "two answers for one problem": (_dump(2, gts="3"), (r"""val/5.jsonl:2: key 'gts' is "3", but line 1 gave problem p-[0-9a-f]+ """
                                                       r"""the answer "2": the samples of one problem share""")),
    "a dump after the last step": (_write("12.jsonl", b'{"input": "q", "output": "o", "gts": "1"}\n'),
                                   r"val/12.jsonl: a validation dump of step 12, but the training steps logged end at step 10"),
    "a second dump of a step": (_write("05.jsonl", b'{"input": "q", "output": "o", "gts": "1"}\n'),
                                r"val/5.jsonl: a second dump of step 5 \(the other is 05.jsonl\)"),
}


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    return locked_study(tmp_path_factory.mktemp("verl-study") / "study")


_prereg = prereg_app  # the `prereg` app with `import` (importfiles)


@pytest.mark.parametrize("name", list(ATTACKS))
def test_a_damaged_file_is_refused_in_one_line(tmp_path, base, study, name):
    damage, message = ATTACKS[name]
    f = _copy(base, tmp_path / "run")
    damage(f)
    with pytest.raises(PreregError, match=message) as e:
        _imp(f)
    assert "\n" not in str(e.value) and "np." not in str(e.value)
    res = CliRunner().invoke(_prereg(), ["import", "verl", str(study), *map(str, f["logs"]), "-c", "A", "-s", "0",
                                         "--config", str(f["config"]), "--validation-dir", str(f["val"]), "--eval-set",
                                         "test", "--started-at", "2026-01-11T12:00:00Z"])
    assert res.exit_code == 2, res.output
    assert res.output.count("error:") == 1 and "Traceback" not in res.output and "internal error" not in res.output
    assert not (study / "runs").exists()


def test_read_file_logger_returns_the_lines_in_order(base):
    steps = read_file_logger(base["logs"][0])
    assert [s.step for s in steps] == list(range(1, 11)) and steps[0].line == 1 and steps[0].training
    assert isinstance(steps[0].data["perf/total_num_tokens"], int)
