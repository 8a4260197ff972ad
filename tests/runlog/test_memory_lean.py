"""The analysis holds a large study's rows once: text as sorted categories, each set's rows split
out of the study frame, per-problem pivots only of the evaluations read, Arrow's allocator
restored after loading. Each lean path is compared with the plain one it replaces."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from prereg_kit import readings as rd
from prereg_kit.plan import ReadingPoint
from prereg_kit.readings.pairing import _evaluations_read
from prereg_kit.runlog import load_study
from prereg_kit.runlog.memory import release_memory
from prereg_kit.runlog.text import sorted_categories, text_codes
from prereg_kit.simulate.synth import generate_study
from prereg_kit.study.design import _runs_in_order


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("lean")
    generate_study(root, configurations={"control": 0.0, "treatment": 0.02}, seeds=range(4),
                   budget_tokens=200_000, eval_every=50_000, eval_sets={"math200": 12, "aime": 6}, rng=7)
    return root


def test_loaded_text_columns_are_categories_in_text_order(study):
    ev = load_study(study, progress=False).evals
    for col in ("configuration", "eval_set", "problem_id"):
        cats = ev[col].dtype.categories
        assert isinstance(ev[col].dtype, pd.CategoricalDtype) and cats.dtype == "str"
        assert list(cats) == sorted(cats)
    # sorting by a category column gives the text order
    order = ev["problem_id"].sort_values(kind="stable").astype(str).tolist()
    assert order == sorted(ev["problem_id"].astype(str).tolist())


def test_sorted_categories_and_codes_match_text():
    rng = np.random.default_rng(3)
    for _ in range(50):
        words = rng.choice(["b-2", "a-10", "a-9", "c", "é"], size=int(rng.integers(1, 30)))
        text = pd.Series(pd.array(words, dtype="str"))
        for given in (text, text.astype("category"),
                      pd.Series(pd.Categorical(words, categories=list(dict.fromkeys(words[::-1]))))):
            cat = sorted_categories(given)
            assert cat.astype(str).tolist() == text.tolist()
            codes, names = text_codes(given)
            assert names[codes].tolist() == text.tolist()
            # a smaller code is an earlier text
            assert all((a < b) == (x < y) for a, x in zip(codes, text) for b, y in zip(codes, text))


def test_a_category_column_with_unsorted_categories_is_not_taken_as_text_order():
    s = pd.Series(pd.Categorical(["z", "a"], categories=["z", "a"]))
    codes, names = text_codes(s)
    assert names.tolist() == ["a", "z"] and codes.tolist() == [1, 0]  # re-coded, not the given codes


def test_consumed_set_rows_equal_the_selected_rows(study):
    st = load_study(study, progress=False)
    plain = rd.SetRows(st.evals.copy())
    frame = st.evals.copy()
    lean = rd.SetRows(frame, consume=True)
    assert frame.shape[1] == 0  # every column was taken out of the study frame
    for name in ("math200", "aime"):
        pd.testing.assert_frame_equal(lean(name), plain(name).reset_index(drop=True))
        pd.testing.assert_frame_equal(rd.accuracy_curve(lean(name), eval_set=name),
                                      rd.accuracy_curve(plain(name), eval_set=name))
    with pytest.raises(rd.ReadingError, match="sets logged: aime, math200"):
        rd.accuracy_curve(lean("gsm8k"), eval_set="gsm8k")  # an unknown set is still named from all rows


def test_runs_in_order_equal_drop_duplicates():
    rng = np.random.default_rng(11)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        df = pd.DataFrame({"configuration": pd.array(rng.choice(["a", "b", "c"], n), dtype="str"),
                           "seed": rng.integers(0, 3, n)})
        for frame in (df, df.assign(configuration=sorted_categories(df["configuration"]))):
            pd.testing.assert_frame_equal(_runs_in_order(frame), frame[["configuration", "seed"]].drop_duplicates())


def test_the_pivot_of_the_evaluations_read_gives_the_same_matrices(study, monkeypatch):
    st = load_study(study, progress=False)
    curves = rd.accuracy_curve(st.evals, eval_set="math200")
    pa_ = rd.problem_accuracy(st.evals, eval_set="math200")
    for point in (ReadingPoint("tokens", budget=200_000), ReadingPoint("time", budget=200_000),
                  ReadingPoint("tokens", multiple=0.6, budget=200_000), ReadingPoint("second_half", budget=200_000)):
        lean = rd.paired_readings(curves, "treatment", "control", point, problem_acc=pa_)
        assert set(_evaluations_read(lean.table)) <= set(pa_["eval_index"])
        monkeypatch.setattr("prereg_kit.readings.pairing._evaluations_read",
                            lambda table: np.sort(pa_["eval_index"].unique()))  # every evaluation, as before
        full = rd.paired_readings(curves, "treatment", "control", point, problem_acc=pa_)
        monkeypatch.undo()
        np.testing.assert_array_equal(lean.treatment_matrix, full.treatment_matrix)
        np.testing.assert_array_equal(lean.control_matrix, full.control_matrix)
        assert lean.problems == full.problems


def test_evaluations_read_cover_spans_and_brackets():
    table = pd.DataFrame({"treatment_eval_lo": [2, 1], "treatment_eval_hi": [3, 4], "treatment_weight": [0.5, np.nan],
                          "control_eval_lo": [7, 7], "control_eval_hi": [7, 7], "control_weight": [0.0, 0.0]})
    assert _evaluations_read(table).tolist() == [1, 2, 3, 4, 7]


def test_loading_restores_arrows_allocator(study):
    before = pa.default_memory_pool().backend_name
    load_study(study, progress=False)
    assert pa.default_memory_pool().backend_name == before
    release_memory()  # does nothing harmful where there is nothing to hand back
    assert pa.default_memory_pool().backend_name == before


def _matrix_by_loc(pa_wide, config, rows, arm):
    """The per-row pandas lookup the position table replaced, kept as the exact reference."""
    out = []
    for _, r in rows.iterrows():
        seed, e_lo, e_hi, w = int(r["seed"]), int(r[f"{arm}_eval_lo"]), int(r[f"{arm}_eval_hi"]), float(r[f"{arm}_weight"])
        if np.isnan(w):
            run = pa_wide.loc[(config, seed)]
            out.append(run.loc[(run.index >= e_lo) & (run.index <= e_hi)].to_numpy(dtype="float64").mean(axis=0))
            continue
        lo = pa_wide.loc[(config, seed, e_lo)].to_numpy(dtype="float64")
        hi = pa_wide.loc[(config, seed, e_hi)].to_numpy(dtype="float64")
        out.append((1 - w) * lo + w * hi)
    return np.vstack(out) if out else np.empty((0, pa_wide.shape[1]))


def test_matrix_by_position_equals_per_row_lookup():
    """Readings between two evaluations and over spans (with evaluations missing inside a span)
    give bit-identical per-problem rows; a run that is not in the pivot still raises KeyError."""
    from prereg_kit.readings.pairing import _matrix

    rng = np.random.default_rng(5)
    for _ in range(60):
        idx = [(c, s, e) for c in ("a", "b") for s in range(4) for e in range(6) if rng.random() > 0.15 or e == 0]
        wide = pd.DataFrame(rng.random((len(idx), 3)), index=pd.MultiIndex.from_tuples(idx, names=["configuration", "seed", "eval_index"]),
                            columns=["p1", "p2", "p3"]).sort_index()
        have = {k[:2]: sorted(e for (c, s, e) in idx if (c, s) == k[:2]) for k in idx}
        rows = []
        for s in range(4):
            ev = have[("a", s)]
            if rng.random() < 0.5:
                lo = ev[int(rng.integers(0, len(ev)))]
                rows.append((s, lo, lo + int(rng.integers(0, 4)), np.nan))
            else:
                i = int(rng.integers(0, len(ev)))
                rows.append((s, ev[i], ev[min(i + 1, len(ev) - 1)], float(rng.random())))
        table = pd.DataFrame(rows, columns=["seed", "treatment_eval_lo", "treatment_eval_hi", "treatment_weight"])
        np.testing.assert_array_equal(_matrix(wide, "a", table, "treatment"), _matrix_by_loc(wide, "a", table, "treatment"))
    with pytest.raises(KeyError):
        _matrix(wide, "a", table.assign(seed=9), "treatment")


def test_the_runs_tables_are_held_only_by_the_lists_handed_to_conversion(tmp_path, monkeypatch):
    """Loading frees each run's Arrow chunks while it converts them, which works only if the lists
    handed to the conversion hold the only references (a list of what the reader threads returned,
    kept alive, made the 960-run load peak at 1.95 GiB instead of 1.2 GiB)."""
    import sys

    from prereg_kit.runlog import columnar

    generate_study(tmp_path, configurations={"control": 0.0, "treatment": 0.02}, seeds=range(3),
                   budget_tokens=100_000, eval_every=50_000, eval_sets={"math200": 5}, rng=1)
    seen = []
    real = columnar._validated

    def check(tables, *a, **k):
        seen.append([sys.getrefcount(t) for t in tables])  # the list, the loop variable, getrefcount's argument
        return real(tables, *a, **k)

    monkeypatch.setattr(columnar, "_validated", check)
    load_study(tmp_path, progress=False)
    assert len(seen) == 2 and all(len(r) == 6 for r in seen)
    assert all(n == 3 for r in seen for n in r), seen
