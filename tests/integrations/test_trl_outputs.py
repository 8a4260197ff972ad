"""trl_outputs: evaluation outputs from the completions tables TRL writes (log_completions=True),
as lines of the outputs file that rescore.read_outputs reads. The real run (``trl_runs``)
evaluates one prompt x 2 completions at steps 2 and 4 with a generation batch of 4: TRL's table at
those steps holds 2 training completions, then the evaluation's 2."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from importfiles import trl_state

from prereg_kit.errors import PreregError
from prereg_kit.integrations.rescore import read_outputs
from prereg_kit.integrations.trl_outputs import trl_outputs


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    pytest.importorskip("trl", reason="the real run needs TRL (pip install 'prereg-kit[trl]')")
    from trl_runs import real_run

    return real_run(tmp_path_factory.mktemp("trl"))


@pytest.mark.slow  # a real GRPOTrainer run (trl_runs), built once per process: seconds
def test_the_evaluations_of_a_real_run_are_read_and_rescored(real, tmp_path):
    recs = list(trl_outputs(real, completions=2, eval_set="heldout"))
    assert [r["step"] for r in recs] == [2, 2, 4, 4]
    assert {r["input"] for r in recs} == {"What is 1+1?"} and {r["answer"] for r in recs} == {"2"}
    table = pd.read_parquet(real / "completions" / "completions_00002.parquet")
    assert [r["output"] for r in recs[:2]] == [c[-1]["content"] for c in table["completion"].iloc[2:]]
    (tmp_path / "out.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    rows = read_outputs(tmp_path / "out.jsonl", eval_set=None)
    assert rows["iteration"].tolist() == [2, 4] and rows["samples"].tolist() == [2, 2]
    assert rows["eval_set"].unique().tolist() == ["heldout"]
    # the same from the completions folder, one table, or evaluation steps given
    assert list(trl_outputs(real / "completions", completions=2, state=real, eval_set="heldout")) == recs
    assert list(trl_outputs(real / "completions" / "completions_00004.parquet", completions=2,
                            eval_steps=[4], eval_set="heldout")) == recs[2:]


@pytest.mark.slow  # a real GRPOTrainer run (trl_runs), built once per process: seconds
def test_an_evaluation_larger_than_the_kept_batch_is_refused(real):
    with pytest.raises(PreregError, match=r"completions_00002.parquet: 4 completions, fewer than the 5 one evaluation "
                                          r"generates: TRL keeps only the last generation_batch_size"):
        list(trl_outputs(real, completions=5))


def _table(folder, step, *, answers=True, prompts=None, n=4, named=None, **cols):
    """A completions table with TRL's columns (step, prompt, completion, one per reward function,
    the log_extra columns, advantage), named for step ``named`` (default: its own)."""
    folder.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame({"step": [step] * n, "prompt": prompts or [f"What is {k}+1?" for k in range(n)],
                       "completion": [f"\\boxed{{{k + 1}}}" for k in range(n)], "prereg_default": [1.0] * n,
                       **({} if answers is False else {"answer": [str(k + 1) for k in range(n)] if answers is True
                                                       else answers}), **cols, "advantage": [0.0] * n})
    df.to_parquet(folder / f"completions_{step if named is None else named:05d}.parquet")


def test_text_prompts_problem_ids_and_the_state_in_the_output_dir(tmp_path):
    out = tmp_path / "out"
    _table(out / "completions", 3, problem_id=["a", "b", "c", "d"])
    _table(out / "completions", 4)  # a training table: no evaluation at step 4
    (out / "trainer_state.json").write_text(json.dumps(trl_state(4, eval_every=3)))
    recs = list(trl_outputs(out, completions=4))
    assert [(r["input"], r["output"], r["answer"], r["problem_id"]) for r in recs] == [
        (f"What is {k}+1?", f"\\boxed{{{k + 1}}}", str(k + 1), "abcd"[k]) for k in range(4)]
    assert "eval_set" not in recs[0]  # then --eval-set names it


def _junk(folder):
    folder.mkdir(parents=True)
    (folder / "completions_00003.parquet").write_bytes(b"\x00junk")


@pytest.mark.parametrize("change, msg", [
    (lambda d: _table(d, 3, answers=False), ("completions_00003.parquet: column 'answer' missing (TRL keeps the reference "
                                           "answer only when a reward function logs it")),
    (lambda d: _table(d, 3, answers=[None, "2", "3", "4"]),
     "completions_00003.parquet: row 0: key 'answer' is null"),
    (lambda d: _table(d, 5), "no completions_00003.parquet for the evaluation at step 3"),
    (_junk, "completions_00003.parquet: not a Parquet table"),
    (lambda d: _table(d, 2, named=3), "completions_00003.parquet: row 0: key 'step' is 2, not the step 3 in the file name"),
], ids=["no-answer-column", "null-answer", "no-table", "not-parquet", "step-disagrees"])
def test_refusals_name_the_table(tmp_path, change, msg):
    out = tmp_path / "out"
    change(out / "completions")
    (out / "trainer_state.json").write_text(json.dumps(trl_state(6, eval_every=3)))
    with pytest.raises(PreregError) as e:
        list(trl_outputs(out, completions=4))
    assert msg in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_what_is_not_a_trl_run_is_refused(tmp_path):
    (tmp_path / "x.parquet").write_bytes(b"")
    with pytest.raises(PreregError, match="x.parquet: not one of TRL's completions tables"):
        list(trl_outputs(tmp_path / "x.parquet", completions=2))
    with pytest.raises(PreregError, match="no completions_<step>.parquet .*log_completions=True"):
        list(trl_outputs(tmp_path, completions=2))
    _table(tmp_path / "completions", 1)
    (tmp_path / "trainer_state.json").write_text(json.dumps(trl_state(2, eval_every=0)))
    with pytest.raises(PreregError, match="no evaluation entry .* TRL ran no evaluation"):
        list(trl_outputs(tmp_path, completions=2))
    with pytest.raises(PreregError, match=r"completions = 0: expected the number of completions one evaluation generates"):
        list(trl_outputs(tmp_path, completions=0))


def test_prereg_import_evaluations_from_trl_builds_a_file_both_readers_read(tmp_path):
    """The `trl` source of `prereg import evaluations`: the tables' evaluations, a problem named by
    its prompt where no id was logged (the rule read_outputs uses), the options TRL's alone."""
    from test_import_evaluations_file import _app
    from typer.testing import CliRunner

    from prereg_kit.integrations.tracker_evals import load_evaluations

    out = tmp_path / "out"
    _table(out / "completions", 3)
    _table(out / "completions", 6)
    (out / "trainer_state.json").write_text(json.dumps(trl_state(6, eval_every=3)))
    built = tmp_path / "evals.jsonl"
    run = CliRunner().invoke(_app(), ["import", "evaluations", "--from", "trl", str(out), "--out", str(built),
                                      "--completions", "4", "--eval-set", "test"])
    assert run.exit_code == 0, run.output
    lines = [json.loads(ln) for ln in built.read_text().splitlines()]
    assert [r["step"] for r in lines] == [3] * 4 + [6] * 4 and {r["eval_set"] for r in lines} == {"test"}
    rows = read_outputs(built, eval_set=None)
    assert rows["iteration"].tolist() == [3] * 4 + [6] * 4 and (rows["correct"] == 1).all()
    assert set(rows["problem_id"]) == {r["problem_id"] for r in lines} and lines[0]["problem_id"].startswith("p-")
    ev, _ = load_evaluations(built, first_step=1)
    assert len(ev) == 8 and (ev["samples"] == 1).all()
    # TRL's options are refused for another source, and trl without --completions is named
    res = CliRunner().invoke(_app(), ["import", "evaluations", "--from", "verl", str(out), "--out", str(tmp_path / "x.jsonl"),
                                      "--completions", "4"])
    assert res.exit_code == 2 and "--completions: an option of --from trl only" in res.output
    res = CliRunner().invoke(_app(), ["import", "evaluations", "--from", "trl", str(out), "--out", str(tmp_path / "y.jsonl")])
    assert res.exit_code == 2 and "--from trl needs --completions N" in res.output and not (tmp_path / "y.jsonl").exists()
