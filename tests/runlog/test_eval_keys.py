"""The writer's checks of a batch of eval rows (an (evaluation, set) logged again, a problem twice
in one evaluation) work on integer keys of the rows; they find what pandas' grouping finds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_runlog import _write_buffered, eval_rows, meta, write_run

from prereg_kit.runlog import RunLogError, RunLogWriter, run_dir
from prereg_kit.runlog.text import sorted_categories
from prereg_kit.runlog.writer import _duplicates, _eval_keys, _groups


def _rows(rng: np.random.Generator) -> pd.DataFrame:
    n = int(rng.integers(1, 40))
    big = rng.random() < 0.15  # indices too far apart for one 62-bit key
    df = pd.DataFrame({
        "eval_index": rng.integers(0, 4, n) * (2**61 if big else 1),
        "eval_set": pd.array([f"s{k}" for k in rng.integers(0, 3, n)], dtype="str"),
        "problem_id": pd.array([f"p{k}" for k in rng.integers(0, 8, n)], dtype="str"),
    })
    if rng.random() < 0.5:
        df["eval_set"] = sorted_categories(df["eval_set"])
    if rng.random() < 0.3:
        df["problem_id"] = sorted_categories(df["problem_id"])
    return df


def test_the_keys_group_and_find_repeats_as_pandas_does():
    rng = np.random.default_rng(5)
    for _ in range(150):
        df = _rows(rng)
        keys = _eval_keys(df)
        want_groups = set(zip(*(df.drop_duplicates(["eval_index", "eval_set"])[c].tolist() for c in ("eval_index", "eval_set"))))
        assert _groups(df) == _groups(df, keys) == want_groups
        assert all(type(i) is int and type(s) is str for i, s in _groups(df))
        np.testing.assert_array_equal(_duplicates(df, keys), df.duplicated(["eval_index", "eval_set", "problem_id"]).to_numpy())


def test_a_problem_twice_in_one_evaluation_is_refused_on_its_line(tmp_path):
    for buffered in (False, True):
        folder = run_dir(tmp_path / str(buffered), "ctl", 0)
        w = _write_buffered(folder) if buffered else write_run(folder, finish=False)
        rows = eval_rows(3, 15) + eval_rows(3, 15, problems=("p9", "p1"))
        with pytest.raises(RunLogError, match=r"evals.jsonl \(not written\): line 14: duplicate problem 'p1' in evaluation 3$"):
            w.log_eval_rows(rows)
        w.log_eval_rows(eval_rows(3, 15))  # nothing of the refused batch was kept
        w.finish("complete")
    b = RunLogWriter(run_dir(tmp_path / "b", "ctl", 0), meta(), fsync=False, buffered=True)
    b.log_eval_rows(eval_rows(0, 0))
    with pytest.raises(RunLogError, match="evaluation 0, set 'math' already logged"):
        b.log_eval_rows(eval_rows(0, 0, problems=("p7",)))
    b.finish("complete")
