"""The OpenRLHF importer: its logged train/ keys as JSON lines, mapped through the preset."""

from __future__ import annotations

import pytest
from importfiles import T_RUN, openrlhf_lines, outputs_lines

from prereg_kit.errors import PreregError
from prereg_kit.integrations.openrlhf import PRESET, import_openrlhf

ARGS = {"rollout_batch_size": 4, "n_samples_per_prompt": 4, "train_batch_size": 8, "max_epochs": 1}


def _files(tmp_path, **kw):
    (tmp_path / "history.jsonl").write_text(openrlhf_lines(**kw))
    (tmp_path / "out.jsonl").write_text(outputs_lines())
    return tmp_path / "history.jsonl"


def test_mapping(tmp_path):
    p = _files(tmp_path)
    run = import_openrlhf(p, args=ARGS, keys={"seconds_step": "train/step_time"}, evaluations=tmp_path / "out.jsonl",
                          eval_set="test", started_at=T_RUN)
    it = run.iterations
    # 30 mean response tokens x 16 samples (4 prompts x 4); total_length (prompt + response) only a check
    assert list(it["tokens_rollout"]) == [480] * 6 and list(it["updates"]) == [2 * k for k in range(1, 7)]
    assert (it["seconds_step"] == 4.0).all() and it["reward_mean"].iloc[0] == 0.4
    assert len(it) == 6  # the eval/ line is not a training step
    assert run.source["key_map"]["seconds_step"] == "train/step_time" and PRESET["step"] == "train/global_step"
    assert set(run.evaluations["iteration"]) == {0, 3, 6}


def test_time_key_must_be_named(tmp_path):
    p = _files(tmp_path)
    with pytest.raises(PreregError, match="no per-step training time we know of .*--key seconds_step=KEY"):
        import_openrlhf(p, args=ARGS)
    with pytest.raises(PreregError, match="key 'no_such' is not logged"):
        import_openrlhf(p, args=ARGS, keys={"seconds_step": "train/no_such"})
    with pytest.raises(PreregError, match="--key: 'seconds' is not a column the preset maps"):
        import_openrlhf(p, args=ARGS, keys={"seconds": "train/step_time"})


def test_refusals(tmp_path):
    p = _files(tmp_path)
    keys = {"seconds_step": "train/step_time"}
    with pytest.raises(PreregError, match="dynamic_filtering is on"):
        import_openrlhf(p, args=ARGS | {"dynamic_filtering": True}, keys=keys)
    with pytest.raises(PreregError, match="give --responses-per-step"):
        import_openrlhf(p, keys=keys)
    with pytest.raises(PreregError, match="train_batch_size needed"):
        import_openrlhf(p, responses_per_step=16, keys=keys)
    lines = p.read_text().splitlines()
    p.write_text("\n".join(lines[:2] + lines[3:]) + "\n")  # step 3 missing
    with pytest.raises(PreregError, match="step 4 where 3 was due"):
        import_openrlhf(p, args=ARGS, keys=keys)
    p.write_text("\n".join(lines + [lines[0]]) + "\n")
    with pytest.raises(PreregError, match=r"history.jsonl:8: step 1 logged again \(first at line 1\)"):
        import_openrlhf(p, args=ARGS, keys=keys)
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(PreregError, match="total_length_mean is below response_length"):
        import_openrlhf(p, args=ARGS, keys=keys | {"length_mean": "train/total_length", "total_length_mean": "train/response_length"})
