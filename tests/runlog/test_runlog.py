"""Run-log format: writer, reader, torn lines, resume, Parquet compaction, study loader."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest
from paths import ROOT

from prereg_kit.runlog import (
    EVAL_COLUMNS,
    ITERATION_COLUMNS,
    RunLogError,
    RunLogWarning,
    RunLogWriter,
    RunMeta,
    finalize,
    find_runs,
    load_study,
    read_meta,
    read_run,
    run_dir,
)

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def meta(config="ctl", seed=0, plan_hash="a" * 64) -> RunMeta:
    return RunMeta(study="s", configuration=config, seed=seed, plan_hash=plan_hash, started_at=T0)


def it_row(i: int, tokens: int = 100) -> dict:
    return {
        "iteration": i, "tokens_rollout": tokens, "tokens_continuation": 0, "tokens_discarded": 0,
        "seconds_selection": 0.0, "seconds_generation": 1.0, "seconds_credit": 0.5, "seconds_update": 0.25,
        "seconds_weight_sync": 0.25, "updates": i + 1, "reward_mean": 0.5, "my_extra": f"x{i}",
    }


def eval_rows(e: int, n_iter_done: int, problems=("p0", "p1", "p2"), tokens_per_it: int = 100) -> list[dict]:
    return [{
        "eval_index": e, "iteration": n_iter_done, "eval_set": "math", "problem_id": p, "eval_seed": 1000 + e,
        "tokens": n_iter_done * tokens_per_it, "train_seconds": 2.0 * n_iter_done, "updates": n_iter_done,
        "samples": 8, "correct": j + e, "correct_strict": j, "boxed": 8, "greedy_correct": bool(j % 2),
    } for j, p in enumerate(problems)]


def write_run(folder: Path, n_it: int = 10, every: int = 5, finish: bool = True, **kw) -> RunLogWriter:
    w = RunLogWriter(folder, meta(), fsync=False)
    w.log_eval_rows(eval_rows(0, 0))
    for i in range(n_it):
        w.log_iteration(it_row(i))
        if (i + 1) % every == 0:
            w.log_eval_rows(eval_rows((i + 1) // every, i + 1))
    if finish:
        w.finish("complete", **kw)
    return w


def test_roundtrip_and_derived_columns(tmp_path):
    folder = run_dir(tmp_path, "ctl", 0)
    write_run(folder, keep_jsonl=True)
    run = read_run(folder, strict=True)
    assert run.meta.status == "complete" and run.meta.ended_at is not None
    assert list(run.iterations["iteration"]) == list(range(10))
    assert run.iterations["cum_tokens"].iloc[-1] == 1000
    assert run.iterations["cum_train_seconds"].iloc[-1] == pytest.approx(20.0)
    assert run.iterations["my_extra"].iloc[3] == "x3"  # extra columns kept
    assert run.evals["eval_index"].max() == 2 and len(run.evals) == 9
    assert run.problems == []
    # Optional columns absent from the rows are present as nulls.
    assert run.iterations["truncation_rate"].isna().all()


def test_jsonl_and_parquet_give_identical_frames(tmp_path):
    folder = run_dir(tmp_path, "ctl", 0)
    write_run(folder, keep_jsonl=True)
    from_parquet = read_run(folder)
    for kind in ("iterations", "evals"):
        (folder / f"{kind}.parquet").unlink()
    from_jsonl = read_run(folder)
    pd.testing.assert_frame_equal(from_parquet.iterations, from_jsonl.iterations)
    pd.testing.assert_frame_equal(from_parquet.evals, from_jsonl.evals)


def test_finish_compacts_and_removes_jsonl(tmp_path):
    folder = run_dir(tmp_path, "ctl", 0)
    write_run(folder)
    assert not (folder / "evals.jsonl").exists() and (folder / "evals.parquet").exists()
    assert len(read_run(folder, strict=True).evals) == 9


def _write_buffered(folder: Path, n_it: int = 10, every: int = 5) -> RunLogWriter:
    w = RunLogWriter(folder, meta(), fsync=False, buffered=True)
    w.log_eval_rows(eval_rows(0, 0))
    for i in range(n_it):
        w.log_iteration(it_row(i))
        if (i + 1) % every == 0:
            w.log_eval_rows(eval_rows((i + 1) // every, i + 1))
    return w


def test_a_buffered_run_reads_as_the_same_run_written_through_json_lines(tmp_path):
    plain, buffered = run_dir(tmp_path, "ctl", 0), run_dir(tmp_path / "b", "ctl", 0)
    write_run(plain)
    w = _write_buffered(buffered)
    assert not list(buffered.glob("*.jsonl")) and not list(buffered.glob("*.parquet"))  # nothing before finish
    w.finish("complete")
    assert not list(buffered.glob("*.jsonl"))
    a, b = read_run(plain, strict=True), read_run(buffered, strict=True)
    assert a.problems == b.problems == []
    pd.testing.assert_frame_equal(a.iterations, b.iterations)
    pd.testing.assert_frame_equal(a.evals, b.evals)
    # a buffered run resumes like any compacted run
    r = RunLogWriter(buffered, meta(), resume=True, fsync=False)
    r.log_iteration(it_row(10))
    r.finish("complete")
    assert list(read_run(buffered, strict=True).iterations["iteration"]) == list(range(11))


def test_a_buffered_writer_checks_every_row_as_the_plain_one_does(tmp_path):
    w = _write_buffered(run_dir(tmp_path, "ctl", 0))
    with pytest.raises(RunLogError, match="already logged"):
        w.log_eval_rows(eval_rows(2, 10))
    with pytest.raises(RunLogError, match="out of order"):
        w.log_eval_rows(eval_rows(1, 5))
    with pytest.raises(RunLogError, match="not above the last logged"):
        w.log_iteration(it_row(3))
    with pytest.raises(RunLogError, match="field 'correct'"):
        w.log_eval_rows([{**eval_rows(3, 15)[0], "correct": 9}])  # more correct than samples
    with pytest.raises(ValueError, match="cannot resume"):
        RunLogWriter(run_dir(tmp_path, "ctl", 1), meta(seed=1), resume=True, buffered=True)


def test_a_buffered_run_that_fails_is_kept_as_json_lines_and_resumes(tmp_path):
    folder = run_dir(tmp_path, "ctl", 0)
    with pytest.raises(RuntimeError):
        with _write_buffered(folder, n_it=4, every=2):
            raise RuntimeError("boom")
    assert read_meta(folder).status == "failed" and not list(folder.glob("*.parquet"))
    run = read_run(folder)
    assert len(run.iterations) == 4 and len(run.evals) == 9
    w = RunLogWriter(folder, meta(), resume=True, at_iteration=4, fsync=False)
    w.log_iteration(it_row(4))
    w.finish("complete")
    assert list(read_run(folder, strict=True).iterations["iteration"]) == list(range(5))


def test_torn_last_line_is_reported_and_not_used(tmp_path):
    folder = run_dir(tmp_path, "ctl", 0)
    write_run(folder, finish=False)
    with open(folder / "iterations.jsonl", "ab") as fh:
        fh.write(b'{"iteration": 10, "tokens_rol')
    run = read_run(folder)
    assert len(run.iterations) == 10  # the torn row is not used
    torn = [p for p in run.problems if p.kind == "torn"]
    assert len(torn) == 1 and torn[0].line == 11 and "iterations.jsonl" in torn[0].path
    with pytest.raises(RunLogError, match=r"iterations.jsonl: line 11: torn"):
        read_run(folder, strict=True)
    study = load_study(tmp_path, progress=False)
    assert any(p.kind == "torn" for p in study.problems)
    with pytest.raises(RunLogError, match="cannot finalize"):
        finalize(folder)


def test_garbage_tail_with_newline_is_torn(tmp_path):
    folder = run_dir(tmp_path, "ctl", 0)
    write_run(folder, finish=False)
    with open(folder / "evals.jsonl", "ab") as fh:
        fh.write(b"\x00\x00\x00\x00\n")
    run = read_run(folder)
    assert [p.kind for p in run.problems if p.kind == "torn"] == ["torn"]
    assert len(run.evals) == 9


def test_corrupt_middle_line_is_an_error(tmp_path):
    folder = run_dir(tmp_path, "ctl", 0)
    write_run(folder, finish=False)
    lines = (folder / "iterations.jsonl").read_text().splitlines(keepends=True)
    lines[3] = '{"iteration": 3, broken\n'
    (folder / "iterations.jsonl").write_text("".join(lines))
    with pytest.raises(RunLogError, match=r"iterations.jsonl: line 4: not a valid JSON object"):
        read_run(folder)
    study = load_study(tmp_path, progress=False)  # the run is left out and reported
    assert study.meta.empty and study.problems[0].kind == "corrupt"


def test_bad_field_names_file_line_and_field(tmp_path):
    folder = run_dir(tmp_path, "ctl", 0)
    write_run(folder, finish=False)
    lines = (folder / "evals.jsonl").read_text().splitlines(keepends=True)
    row = json.loads(lines[4])
    row["correct"] = 9  # more than samples
    lines[4] = json.dumps(row) + "\n"
    (folder / "evals.jsonl").write_text("".join(lines))
    with pytest.raises(RunLogError, match=r"evals.jsonl: line 5: field 'correct': 9 exceeds samples=8"):
        read_run(folder)
    row["correct"] = "three"
    lines[4] = json.dumps(row) + "\n"
    (folder / "evals.jsonl").write_text("".join(lines))
    with pytest.raises(RunLogError, match=r"line 5: field 'correct': expected an integer >= 0"):
        read_run(folder)


def test_writer_validates_rows(tmp_path):
    w = RunLogWriter(run_dir(tmp_path, "ctl", 0), meta(), fsync=False)
    bad = it_row(0)
    del bad["seconds_update"]
    with pytest.raises(RunLogError, match=r"iterations.jsonl \(not written\): line 1: field 'seconds_update': missing"):
        w.log_iteration(bad)
    bad = it_row(0) | {"tokens_rollout": -5}
    with pytest.raises(RunLogError, match="field 'tokens_rollout': expected an integer >= 0, got -5"):
        w.log_iteration(bad)
    w.log_iteration(it_row(0))
    with pytest.raises(RunLogError, match="not above the last logged 0"):
        w.log_iteration(it_row(0))
    w.log_eval_rows(eval_rows(0, 0))
    with pytest.raises(RunLogError, match="evaluation 0, set 'math' already logged"):
        w.log_eval_rows(eval_rows(0, 0))
    assert len(read_run(w.folder).iterations) == 1


def test_new_writer_refuses_existing_log(tmp_path):
    folder = run_dir(tmp_path, "ctl", 0)
    write_run(folder, finish=False)
    with pytest.raises(RunLogError, match="already holds a run log; pass resume=True"):
        RunLogWriter(folder, meta())


def test_resume_truncates_torn_tail_without_loss_or_duplication(tmp_path):
    folder = run_dir(tmp_path, "ctl", 0)
    write_run(folder, n_it=10, every=5, finish=False)  # iterations 0-9, evals 0, 1, 2
    # Kill while writing iteration 10 and the evaluation after it.
    with open(folder / "iterations.jsonl", "ab") as fh:
        fh.write(b'{"iteration": 10, "tok')
    with open(folder / "evals.jsonl", "ab") as fh:
        fh.write((json.dumps(eval_rows(3, 11)[0]) + "\n").encode() + b'{"eval_index": 3, "itera')
    # The last checkpoint was after iteration 7 (8 iterations done) and evaluation 1.
    with pytest.warns(RunLogWarning) as rec:
        w = RunLogWriter(folder, meta(), resume=True, at_iteration=8, at_eval=2, fsync=False)
    msgs = " | ".join(str(r.message) for r in rec)
    assert "torn last line" in msgs and "resume at iteration 8" in msgs
    assert any(p.kind == "torn" for p in w.repairs)
    assert w.last_iteration == 7 and w.last_eval == 1
    for i in range(8, 15):
        w.log_iteration(it_row(i))
        if (i + 1) % 5 == 0:
            w.log_eval_rows(eval_rows((i + 1) // 5, i + 1))
    w.finish("complete")
    run = read_run(folder, strict=True)
    assert list(run.iterations["iteration"]) == list(range(15))
    assert sorted(run.evals["eval_index"].unique()) == [0, 1, 2, 3]
    assert not run.evals.duplicated(["eval_index", "eval_set", "problem_id"]).any()
    assert len(read_meta(folder).resumes) == 1


def test_resume_drops_interrupted_eval_batch(tmp_path):
    folder = run_dir(tmp_path, "ctl", 0)
    write_run(folder, n_it=10, every=5, finish=False)
    rows = eval_rows(3, 10, problems=("p0", "p1", "p2"))
    with open(folder / "evals.jsonl", "ab") as fh:  # two of three rows, then a torn one
        fh.write("".join(json.dumps(r) + "\n" for r in rows[:2]).encode() + b'{"eval_')
    with pytest.warns(RunLogWarning) as rec:
        w = RunLogWriter(folder, resume=True, fsync=False)
    assert any("interrupted batch" in str(r.message) for r in rec)
    assert w.last_eval == 2
    w.log_eval_rows(rows)  # the trainer re-runs evaluation 3 in full
    assert (read_run(folder).evals["eval_index"] == 3).sum() == 3


def test_resume_after_finish_and_plan_hash_check(tmp_path):
    folder = run_dir(tmp_path, "ctl", 0)
    write_run(folder, n_it=10, every=5)  # compacted, JSON lines removed
    with pytest.raises(RunLogError, match="cannot resume: plan_hash"):
        RunLogWriter(folder, meta(plan_hash="b" * 64), resume=True)
    w = RunLogWriter(folder, meta(), resume=True, fsync=False)  # e.g. extending a run past B
    assert w.meta.status == "running" and w.meta.started_at == T0
    w.log_iteration(it_row(10))
    w.finish("complete")
    assert list(read_run(folder, strict=True).iterations["iteration"]) == list(range(11))


def test_stale_parquet_is_ignored(tmp_path):
    folder = run_dir(tmp_path, "ctl", 0)
    write_run(folder, keep_jsonl=True)
    with open(folder / "iterations.jsonl", "a") as fh:
        fh.write(json.dumps(it_row(10)) + "\n")
    run = read_run(folder)
    assert len(run.iterations) == 11
    assert any(p.kind == "stale" for p in run.problems)


def test_failed_run_keeps_jsonl_and_status(tmp_path):
    folder = run_dir(tmp_path, "ctl", 0)
    with pytest.raises(RuntimeError):
        with RunLogWriter(folder, meta(), fsync=False) as w:
            w.log_iteration(it_row(0))
            raise RuntimeError("boom")
    assert read_meta(folder).status == "failed"
    run = read_run(folder)
    assert len(run.iterations) == 1
    assert any(p.kind == "status" for p in run.problems)


def test_inconsistent_eval_rows_are_reported(tmp_path):
    folder = run_dir(tmp_path, "ctl", 0)
    w = RunLogWriter(folder, meta(), fsync=False)
    for i in range(5):
        w.log_iteration(it_row(i))
    rows = eval_rows(1, 5)
    for r in rows:
        r["tokens"] = 499  # iterations say 500
    w.log_eval_rows(rows)
    w.finish()
    probs = [p for p in read_run(folder).problems if p.kind == "inconsistent"]
    assert probs and "tokens=499 but iterations give 500" in probs[0].message


def test_load_study_frames_and_missing_files(tmp_path):
    for c in ("ctl", "trt"):
        for s in (0, 1):
            f = run_dir(tmp_path, c, s)
            w = RunLogWriter(f, meta(c, s), fsync=False)
            w.log_iteration(it_row(0))
            w.log_eval_rows(eval_rows(0, 0))
            w.finish()
    (run_dir(tmp_path, "trt", 1) / "evals.parquet").unlink()
    study = load_study(tmp_path, progress=False)
    assert len(find_runs(tmp_path)) == 4
    assert list(study.meta[["configuration", "seed"]].itertuples(index=False, name=None)) == [
        ("ctl", 0), ("ctl", 1), ("trt", 0), ("trt", 1)]
    assert list(study.evals.columns[:2]) == ["configuration", "seed"]
    assert len(study.evals) == 9 and len(study.iterations) == 4
    missing = [p for p in study.problems if p.kind == "missing"]
    assert len(missing) == 1 and "trt/seed-1/evals.jsonl" in missing[0].path
    assert load_study(tmp_path / "nowhere", progress=False).evals.empty


def test_docs_list_every_column():
    doc = (ROOT / "docs" / "run-log.md").read_text()
    for col in ITERATION_COLUMNS + EVAL_COLUMNS:
        assert f"`{col.name}`" in doc, col.name


def test_resume_refuses_other_weights_than_the_run_started_from(tmp_path):
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64

    def hashed(digest: str, seed: int = 0) -> RunMeta:  # what the built-in trainer writes
        return RunMeta(**meta(seed=seed).model_dump(), model_sha256=digest)

    folder = run_dir(tmp_path, "ctl", 0)
    RunLogWriter(folder, hashed(a), fsync=False).log_iteration(it_row(0))
    with pytest.raises(RunLogError) as e:
        RunLogWriter(folder, hashed(b), resume=True, at_iteration=1, fsync=False)
    assert str(e.value) == (f"{folder / 'meta.json'}: cannot resume: model_sha256 is {a!r}, the resuming trainer has "
                            f"{b!r} (the model's weights differ from those the run started from; restore them or "
                            "move the run aside)")
    with pytest.raises(RunLogError, match="cannot resume: model_sha256"):  # a trainer that records no hash
        RunLogWriter(folder, meta(), resume=True, at_iteration=1, fsync=False)
    w = RunLogWriter(folder, hashed(a), resume=True, at_iteration=1, fsync=False)
    assert w.meta.model_extra["model_sha256"] == a
    old = run_dir(tmp_path, "ctl", 1)  # a run that recorded no hash resumes under any
    RunLogWriter(old, meta(seed=1), fsync=False).log_iteration(it_row(0))
    w = RunLogWriter(old, hashed(b, seed=1), resume=True, at_iteration=1, fsync=False)
    assert w.meta.model_extra["model_sha256"] == b


def test_new_optional_columns_read_in_old_logs_and_are_range_checked():
    from prereg_kit.runlog.schema import EVAL_COLUMNS, ITERATION_COLUMNS, RunLogError, validate_frame

    it = pd.DataFrame({"iteration": [0], "tokens_rollout": [5], "tokens_continuation": [0], "tokens_discarded": [0],
                       "seconds_selection": [0.0], "seconds_generation": [1.0], "seconds_credit": [0.0],
                       "seconds_update": [1.0], "seconds_weight_sync": [0.0], "updates": [1], "mixed_share": [0.5]})
    old = validate_frame(it, ITERATION_COLUMNS, where="iterations.jsonl")  # a log from before the shares
    assert old["all_wrong_share"].isna().all() and old["all_correct_share"].isna().all()
    for col, bad in (("all_wrong_share", 1.5), ("all_correct_share", -0.1), ("all_wrong_share", "half")):
        with pytest.raises(RunLogError, match=f"line 1: field '{col}'"):
            validate_frame(it.assign(**{col: [bad]}), ITERATION_COLUMNS, where="iterations.jsonl")
    ev = pd.DataFrame({"eval_index": [0], "iteration": [0], "eval_set": ["m"], "problem_id": ["p"], "eval_seed": [1],
                       "tokens": [0], "train_seconds": [0.0], "updates": [0], "samples": [2], "correct": [1],
                       "correct_strict": [1], "boxed": [2]})
    old = validate_frame(ev, EVAL_COLUMNS, where="evals.jsonl")
    assert old["level"].isna().all() and old["log_length"].isna().all()
    for col, bad in (("level", 0), ("level", 2.5), ("level", "5"), ("log_length", -1.0), ("log_length", float("inf"))):
        with pytest.raises(RunLogError, match=f"field '{col}'"):
            validate_frame(ev.assign(**{col: [bad]}), EVAL_COLUMNS, where="evals.jsonl")
