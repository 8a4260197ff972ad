"""The verl importer on files laid out as verl's file logger, validation dumps and hydra config leave them."""

from __future__ import annotations

import json

import pytest
import yaml
from importfiles import BATCH, N, N_STEPS, T_RUN, verl_config, write_verl_run

from prereg_kit.errors import PreregError
from prereg_kit.integrations.verl import import_verl, read_file_logger


@pytest.fixture
def verl_run(tmp_path):
    return write_verl_run(tmp_path / "verl", 0, 0.5)


def _imp(f, **kw):
    kw.setdefault("config", f["config"])
    return import_verl(f["log"], validation_dir=f["val"], eval_set="test", started_at=T_RUN, **kw)


def test_mapping_tokens_stages_updates(verl_run):
    run = _imp(verl_run)
    it = run.iterations
    assert list(it["iteration"]) == list(range(N_STEPS))
    # perf/total_num_tokens = 8 x (20 + 50) = 560; the response share is 8 x 50 = 400, prompts left out
    assert (it["tokens_rollout"] == BATCH * N * 50).all() and (it["total_num_tokens"] == 560).all()
    assert (it["tokens_discarded"] == 0).all() and (it["tokens_continuation"] == 0).all()
    # as the built-in trainer times them: old and reference log-probs in the update, reward and
    # advantages in credit (VERL_STAGES)
    assert it["seconds_generation"].iloc[0] == 1.5
    assert it["seconds_update"].iloc[0] == pytest.approx(0.2 + 0.2 + 0.9)
    assert it["seconds_credit"].iloc[0] == pytest.approx(0.1 + 0.01)
    assert (it["seconds_selection"] == 0).all() and (it["seconds_weight_sync"] == 0).all()
    # validation steps log timing_s/step 2 s longer (testing): never used, so every step costs the same
    assert it["seconds_generation"].nunique() == 1
    # ppo_epochs 1 x (4 // 2) = 2 optimizer steps per verl step, cumulative
    assert list(it["updates"]) == [2 * (i + 1) for i in range(N_STEPS)]
    assert sorted(run.evaluations["iteration"].unique()) == [0, 5, 10]
    assert (run.evaluations["samples"] == 2).all() and run.evaluations["problem_id"].nunique() == 6
    assert run.source["files"][0]["sha256"].startswith("sha256:") and any("weight sync" in n for n in run.source["notes"])


def test_without_total_tokens_uses_responses_per_step(verl_run, tmp_path):
    f = write_verl_run(tmp_path / "v2", 0, 0.5, drop=("perf/total_num_tokens",))
    assert (_imp(f).iterations["tokens_rollout"] == 400).all()
    with pytest.raises(PreregError, match="responses per step"):
        _imp(f, config={"actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 2}}, "data": {}}, updates_per_step=2)
    assert (_imp(f, config=None, updates_per_step=1, responses_per_step=8).iterations["tokens_rollout"] == 400).all()


def test_responses_per_step_contradicting_the_total_refused(verl_run):
    with pytest.raises(PreregError, match="gives 8.0 responses, but the step should have 16"):
        _imp(verl_run, responses_per_step=16)


def test_step_timer_only_refused(tmp_path):
    f = write_verl_run(tmp_path / "v", 0, 0.5, drop=("timing_s/gen",))
    with pytest.raises(PreregError, match=r"metrics.jsonl:2: only timing_s/step is logged, which includes validation"):
        _imp(f)
    f = write_verl_run(tmp_path / "w", 0, 0.5, drop=("timing_s/update_actor",))
    with pytest.raises(PreregError, match=r"key 'timing_s/update_actor' missing"):
        _imp(f)


def test_dynamic_sampling_refused(tmp_path):
    f = write_verl_run(tmp_path / "v", 0, 0.5, config=verl_config(**{"algorithm.filter_groups.enable": True}))
    with pytest.raises(PreregError, match="filter_groups.enable = true .* discarded tokens are not in its files"):
        _imp(f)
    # the config disabled but the DAPO trainer's key present: still refused
    f = write_verl_run(tmp_path / "w", 0, 0.5)
    lines = f["log"].read_text().splitlines()
    rec = json.loads(lines[1])
    rec["data"]["train/num_gen_batches"] = 3
    f["log"].write_text("\n".join([lines[0], json.dumps(rec), *lines[2:]]) + "\n")
    with pytest.raises(PreregError, match="dynamic sampling"):
        _imp(f)
    # a near miss (filter_groups present but off) imports
    f = write_verl_run(tmp_path / "x", 0, 0.5, config=verl_config(**{"algorithm.filter_groups.enable": False}))
    assert len(_imp(f).iterations) == N_STEPS


def test_file_logger_errors_name_the_line(tmp_path, verl_run):
    text = verl_run["log"].read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([text[0], "{not json", *text[1:]]) + "\n")
    with pytest.raises(PreregError, match=r"bad.jsonl:2: not a JSON line"):
        read_file_logger(bad)
    bad.write_text("\n".join([text[0], json.dumps({"step": "1", "data": {}}), *text[1:]]) + "\n")
    with pytest.raises(PreregError, match=r"bad.jsonl:2: expected"):
        read_file_logger(bad)
    bad.write_text("\n".join([*text, text[3]]) + "\n")
    with pytest.raises(PreregError, match=r"bad.jsonl:12: step 3 logged again \(first at line 4\)"):
        read_file_logger(bad)
    # a step missing in the middle: refused, never silently joined
    gap = verl_run["log"].with_name("gap.jsonl")
    gap.write_text("\n".join(text[:4] + text[5:]) + "\n")
    with pytest.raises(PreregError, match=r"gap.jsonl:5: .*found step 5 where 4 was due"):
        import_verl(gap, config=verl_run["config"], started_at=T_RUN)


def test_updates_need_the_config_or_an_option(verl_run):
    with pytest.raises(PreregError, match="ppo_mini_batch_size"):
        import_verl(verl_run["log"], started_at=T_RUN)
    assert import_verl(verl_run["log"], updates_per_step=3).iterations["updates"].iloc[-1] == 3 * N_STEPS


def test_rescoring_uses_our_verifiers_and_keeps_verl_score(tmp_path, verl_run):
    val = verl_run["val"]
    recs = [{"input": "What is 2 + 2?", "output": "The answer is \\boxed{4}", "gts": "4", "score": 1.0},
            {"input": "What is 2 + 2?", "output": "so it is 4", "gts": "4", "score": 0.0},  # ours: correct, not strict
            {"input": "What is 3 + 3?", "output": "answer: 5", "gts": "6", "score": 1.0}]  # verl's reward said 1
    for f in val.glob("*.jsonl"):
        f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ev = _imp(verl_run).evaluations
    rows = ev[ev["iteration"] == 0].reset_index(drop=True)
    assert list(rows["samples"]) == [2, 1] and list(rows["correct"]) == [2, 0]
    assert list(rows["correct_strict"]) == [1, 0] and list(rows["boxed"]) == [1, 0]
    assert list(rows["tool_score_mean"]) == [0.5, 1.0]  # verl's reward scored "answer: 5" correct; ours does not


def test_dump_without_data_source_needs_eval_set(verl_run):
    with pytest.raises(PreregError, match=r"0.jsonl:1: no data_source .*--eval-set"):
        import_verl(verl_run["log"], config=verl_run["config"], validation_dir=verl_run["val"])
    f = next(verl_run["val"].glob("5.jsonl"))
    lines = [json.loads(x) | {"data_source": "openai/gsm8k"} for x in f.read_text().splitlines()]
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(PreregError, match="0.jsonl:1: no data_source"):  # the other dumps still lack it
        import_verl(verl_run["log"], config=verl_run["config"], validation_dir=verl_run["val"])
    bad = verl_run["val"] / "7.jsonl"
    bad.write_text(json.dumps({"input": "q", "output": "o"}) + "\n")
    with pytest.raises(PreregError, match=r"7.jsonl:1: key 'gts' missing"):
        _imp(verl_run)


def test_config_as_yaml_file_must_be_a_mapping(tmp_path, verl_run):
    bad = tmp_path / "config.yaml"
    bad.write_text(yaml.safe_dump([1, 2]))
    with pytest.raises(PreregError, match="a config is a mapping"):
        import_verl(verl_run["log"], config=bad)
