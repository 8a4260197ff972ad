"""Grouping by run and evaluation from blocks of rows equals pandas' grouping, whatever the rows'
order; a frame the block rule cannot take (a group in two blocks, missing keys, other dtypes)
falls back to pandas and still agrees."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from prereg_kit.runlog.groups import group_numbers, rows_by_group
from prereg_kit.runlog.text import sorted_categories

KEYS = ["configuration", "seed", "eval_index"]


def _rows(rng, *, shuffle: bool, categorical: bool) -> pd.DataFrame:
    runs = [(c, s) for c in ("b", "a", "c10", "c2") for s in rng.permutation(12)[:int(rng.integers(1, 6))]]
    rows = []
    for c, s in runs:  # folder order: each run's rows together, evaluations ascending
        for e in range(int(rng.integers(1, 5))):
            for p in sorted(rng.choice(30, size=int(rng.integers(1, 6)), replace=False)):
                rows.append((c, int(s), e, f"p{p:03d}"))
    df = pd.DataFrame(rows, columns=KEYS + ["problem_id"])
    if shuffle:
        df = df.sample(frac=1, random_state=int(rng.integers(0, 2**31))).reset_index(drop=True)
    if categorical:
        df["configuration"] = sorted_categories(df["configuration"])
        df["problem_id"] = sorted_categories(df["problem_id"])
    return df


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("categorical", [False, True])
def test_group_numbers_and_row_order_equal_pandas(shuffle, categorical):
    rng = np.random.default_rng(4 + 2 * shuffle + categorical)
    for _ in range(50):
        df = _rows(rng, shuffle=shuffle, categorical=categorical)
        want = df.groupby(KEYS, sort=True).ngroup().to_numpy()
        gid = group_numbers(df, KEYS)
        np.testing.assert_array_equal(gid, want)
        codes = pd.factorize(df["problem_id"].astype(str), sort=True)[0]
        np.testing.assert_array_equal(rows_by_group(gid, codes), np.lexsort((codes, gid)))


def test_a_group_split_in_two_blocks_and_unsorted_codes_fall_back():
    df = pd.DataFrame({"configuration": ["a", "a", "b", "a"], "seed": [1, 1, 1, 1], "eval_index": [0, 0, 0, 0]})
    np.testing.assert_array_equal(group_numbers(df, KEYS), [0, 0, 1, 0])  # ('a', 1, 0) is two blocks
    gid = np.array([0, 0, 1, 1, 0])
    codes = np.array([2, 1, 0, 3, 0])  # unsorted within a block, and group 0 in two blocks
    np.testing.assert_array_equal(rows_by_group(gid, codes), np.lexsort((codes, gid)))
    np.testing.assert_array_equal(rows_by_group(np.array([0, 0, 1]), np.array([1, 0, 5])), [1, 0, 2])


def test_missing_or_other_keys_fall_back_to_pandas():
    df = pd.DataFrame({"configuration": ["a", None, "a"], "seed": [1, 1, 2], "eval_index": [0, 0, 0]})
    np.testing.assert_array_equal(group_numbers(df, KEYS), df.groupby(KEYS, sort=True).ngroup().to_numpy())
    df = pd.DataFrame({"configuration": ["a", "a", "b"], "seed": [1.5, 1.5, 0.5], "eval_index": [0, 1, 0]})
    np.testing.assert_array_equal(group_numbers(df, KEYS), df.groupby(KEYS, sort=True).ngroup().to_numpy())
    assert len(group_numbers(df.iloc[:0], KEYS)) == 0


def test_problem_accuracy_rows_equal_a_sort_of_all_keys(tmp_path):
    """The per-problem accuracies come in the order (and with the values) of sorting every row by
    configuration, seed, evaluation and problem, whether the study's rows are in folder order or shuffled."""
    from prereg_kit.readings import problem_accuracy
    from prereg_kit.readings.base import RUN
    from prereg_kit.runlog import load_study
    from prereg_kit.simulate.synth import generate_study

    generate_study(tmp_path, configurations={"control": 0.0, "treatment": 0.02}, seeds=range(12),
                   budget_tokens=100_000, eval_every=50_000, eval_sets={"math200": 7}, rng=2)
    evals = load_study(tmp_path, progress=False).evals
    for rows in (evals, evals.sample(frac=1, random_state=3)):
        got = problem_accuracy(rows, eval_set="math200")
        plain = got.sample(frac=1, random_state=5).sort_values(RUN + ["eval_index", "problem_id"], ignore_index=True)
        pd.testing.assert_frame_equal(got, plain, check_exact=True)


def test_strict_accuracy_of_drift_flags_equals_its_curve(tmp_path):
    """The drift check's strict accuracy (a group mean by evaluation number) is bit-identical to
    the strict accuracy curve, on rows in folder order and shuffled."""
    from prereg_kit.readings import accuracy_curve, drift_flags
    from prereg_kit.runlog import load_study
    from prereg_kit.simulate.synth import generate_study

    generate_study(tmp_path, configurations={"control": 0.0, "treatment": 0.02}, seeds=range(11),
                   budget_tokens=100_000, eval_every=50_000, eval_sets={"math200": 9}, rng=6)
    evals = load_study(tmp_path, progress=False).evals
    for rows in (evals, evals.sample(frac=1, random_state=1)):
        flags = drift_flags(rows, eval_set="math200")
        strict = accuracy_curve(rows, eval_set="math200", verifier="strict")
        np.testing.assert_array_equal(flags["accuracy_strict"].to_numpy(), strict["accuracy"].to_numpy())
