"""`prereg import evaluations --from verl VAL --out FILE`: the --evaluations file built from verl's
validation dumps reads, through both readers of such files, to the counts the verl importer reads
from the dumps themselves; refusals are one line (exit 2) and leave no file behind."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner
from verlwriter import Fit, write_fit

from prereg_kit.integrations import command, evaluations_file
from prereg_kit.integrations.rescore import read_outputs
from prereg_kit.integrations.tracker_evals import load_evaluations
from prereg_kit.integrations.verl import read_validation_dumps

COUNTS = ["iteration", "eval_set", "problem_id", "samples", "correct", "correct_strict", "boxed"]


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.add_typer(command.app, name="import")
    return app


def _run(*argv: str):
    return CliRunner().invoke(_app(), ["import", "evaluations", *argv])


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> Path:
    """verl's validation dumps at steps 0, 3, 6, 9 and 10 (test_freq 3, 10 steps)."""
    return write_fit(tmp_path_factory.mktemp("verl") / "run", Fit(hand=True, test_freq=3, correct=lambda s: s))["val"]


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    return df[COUNTS].sort_values(["iteration", "problem_id"], ignore_index=True).astype({c: "int64" for c in COUNTS[3:]})


def test_built_file_reads_to_the_dumps_counts(tmp_path, dumps):
    out = tmp_path / "evals.jsonl"
    res = _run(str(dumps), "--from", "verl", "--out", str(out), "--eval-set", "test")
    assert res.exit_code == 0, res.output
    assert "wrote 60 evaluation outputs" in res.output
    first = json.loads(out.read_text().splitlines()[0])
    assert list(first) == list(evaluations_file.RECORD_KEYS) and first["step"] == 0 and first["eval_set"] == "test"
    expected = _sorted(read_validation_dumps(dumps, eval_set="test")[0])
    assert sorted(expected["iteration"].unique()) == [0, 3, 6, 9, 10] and expected["correct"].sum() == 0 + 3 + 6 + 9 + 10
    pd.testing.assert_frame_equal(_sorted(read_outputs(out, eval_set=None)), expected)  # openrlhf, trl
    tracker, entry = load_evaluations(out, first_step=1)  # tensorboard, mlflow, wandb: step s is s steps done
    pd.testing.assert_frame_equal(_sorted(tracker), expected)
    assert entry["shape"].startswith("outputs re-scored")


def test_never_over_a_file_unless_forced(tmp_path, dumps):
    out = tmp_path / "evals.jsonl"
    out.write_text("mine\n")
    res = _run(str(dumps), "--from", "verl", "--out", str(out), "--eval-set", "test")
    assert res.exit_code == 2 and "already exists; give --force to replace it" in res.output
    assert out.read_text() == "mine\n"
    assert _run(str(dumps), "--from", "verl", "--out", str(out), "--eval-set", "test", "--force").exit_code == 0
    assert len(out.read_text().splitlines()) == 60


def _damaged(tmp_path: Path, dumps: Path, name: str, data: bytes) -> Path:
    val = tmp_path / "val"
    val.mkdir()
    for f in dumps.iterdir():
        (val / f.name).write_bytes(f.read_bytes())
    (val / name).write_bytes(data)
    return val


@pytest.mark.parametrize("argv,damage,message", [
    (["--from", "openrlhf"], None, "--from openrlhf: OpenRLHF 0.11.2 writes no evaluation outputs: PPOTrainer.evaluate"),
    (["--from", "trlx"], None, "--from 'trlx': not a source of evaluation outputs (have: trl, verl)"),
    (["--from", "verl", "--out", "{tmp}/evals.txt"], None, "evals.txt: name the file *.jsonl"),
    (["--from", "verl", "--out", "{tmp}/nowhere/evals.jsonl"], None, "does not exist"),
    (["--from", "verl"], ("9.jsonl", b'{"input": "q", "output": "o", "gts": "1"}\n\xff\n'),
     "val/9.jsonl:2: not UTF-8 text (byte 0xff at column 1)"),
    (["--from", "verl"], ("10.jsonl", b'{"input": "q", "output": "o", "gts": null}\n'),
     "val/10.jsonl:1: key 'gts' is null: verl had no reference answer"),
    (["--from", "verl", "--eval-set", ""], None, "0.jsonl:1: no data_source in the dump: give the plan's evaluation set"),
    (["--from", "verl"], ("3.jsonl", b""), "val/3.jsonl: empty validation dump"),
])
def test_refusals_are_one_line_and_leave_no_file(tmp_path, dumps, argv, damage, message):
    val = _damaged(tmp_path, dumps, *damage) if damage else dumps
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "evals.jsonl")]
    if "--eval-set" not in argv:
        argv += ["--eval-set", "test"]
    res = _run(str(val), *argv)
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split()) and res.output.count("error:") == 1 and "Traceback" not in res.output
    assert not [p for p in tmp_path.iterdir() if p.name != "val"]  # no output, no temporary file


def test_help_says_what_each_tool_writes():
    res = CliRunner().invoke(_app(), ["import", "evaluations", "--help"], terminal_width=200)
    text = " ".join(res.output.replace("│", " ").split())
    assert res.exit_code == 0 and "verl" in text and "OpenRLHF writes none" in text
    assert "openrlhf: none to read (OpenRLHF 0.11.2 writes no evaluation outputs)" in text


def test_a_source_is_a_plain_function_in_the_table(tmp_path, monkeypatch):
    """Another tool's source is one entry: (path, **options) -> records."""
    def mine(path, *, eval_set=None):
        yield {"step": 2, "eval_set": eval_set, "problem_id": "q1", "input": None, "output": "\\boxed{4}", "answer": "4",
               "tool_score": None}

    monkeypatch.setitem(evaluations_file.SOURCES, "mine", mine)
    out = tmp_path / "e.jsonl"
    assert evaluations_file.build("mine", tmp_path, out, eval_set="test") == 1
    ev = read_outputs(out, eval_set=None)
    assert ev[["iteration", "problem_id", "samples", "correct", "correct_strict"]].values.tolist() == [[2, "q1", 1, 1, 1]]
