"""The OpenRLHF importer: OpenRLHF 0.11's logged train/ keys as JSON lines, mapped through the preset."""

from __future__ import annotations

import pytest
from importfiles import T_RUN, openrlhf_lines, outputs_lines

from prereg_kit.errors import PreregError
from prereg_kit.integrations.openrlhf import PRESET, import_openrlhf

# OpenRLHF 0.11's nested arguments: 4 prompts x 4 samples, batches of 8, one epoch
ARGS = {"rollout": {"batch_size": 4, "n_samples_per_prompt": 4}, "train": {"batch_size": 8, "max_epochs": 1}}


def _files(tmp_path, **kw):
    (tmp_path / "history.jsonl").write_text(openrlhf_lines(**kw))
    (tmp_path / "out.jsonl").write_text(outputs_lines())
    return tmp_path / "history.jsonl"


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


def test_logged_samples_count_the_tokens_without_arguments(tmp_path):
    p = _files(tmp_path, samples=12)
    run = import_openrlhf(p, updates_per_step=1)
    assert list(run.iterations["tokens_rollout"]) == [360] * 6
    with pytest.raises(PreregError, match="num_samples = 12, but the arguments give 16 samples per step"):
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
    (tmp_path / "dyn").mkdir()
    q = _files(tmp_path / "dyn", extra={"train/dynamic_filtering_pass_rate": 0.5})
    with pytest.raises(PreregError, match="dynamic_filtering_pass_rate is logged"):
        import_openrlhf(q, args=ARGS)
    lines = p.read_text().splitlines()
    p.write_text("\n".join(lines[:2] + lines[3:]) + "\n")  # step 3 missing
    with pytest.raises(PreregError, match="step 4 where 3 was due"):
        import_openrlhf(p, args=ARGS)
    p.write_text("\n".join(lines + [lines[0]]) + "\n")
    with pytest.raises(PreregError, match=r"history.jsonl:8: step 1 logged again \(first at line 1\)"):
        import_openrlhf(p, args=ARGS)


def test_a_line_that_is_not_json_is_refused_naming_file_and_line(tmp_path):
    """Torn or edited lines in the history or the outputs file are refused, never skipped."""
    p = _files(tmp_path)
    lines = p.read_text().splitlines()
    p.write_text("\n".join(lines[:1] + ['{"train/global_step": 2,'] + lines[2:]) + "\n")
    with pytest.raises(PreregError, match=r"history.jsonl:2: not a JSON line"):
        import_openrlhf(p, args=ARGS)
    p.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out.jsonl"
    out.write_text(out.read_text() + "not json\n")
    with pytest.raises(PreregError, match=r"out.jsonl:\d+: not a JSON line"):
        import_openrlhf(p, args=ARGS, evaluations=out, eval_set="test")
