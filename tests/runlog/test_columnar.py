"""Column-wise loading and readings equal the per-run ones, and still name the run a check fails on."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from prereg_kit.readings import accuracy_curve, check_pairing
from prereg_kit.readings.curves import _set_hash, _set_hashes
from prereg_kit.readings.pairing import _NO_CRN, _modal
from prereg_kit.readings.points import _runs
from prereg_kit.runlog import RunLogError, find_runs, load_study, read_run, unreadable
from prereg_kit.runlog.study import _load
from prereg_kit.simulate.synth import generate_study


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("columnar")
    generate_study(root, configurations={"control": 0.0, "treatment": 0.02}, seeds=range(6),
                   budget_tokens=200_000, eval_every=50_000, eval_sets={"math200": 12}, rng=3)
    return root


def _copy(study, tmp_path):
    dst = tmp_path / "s"
    shutil.copytree(study, dst)
    return dst


def _assert_same(root, strict=False):
    folders = find_runs(root)
    a = load_study(root, progress=False, strict=strict)
    b = _load(root, folders, progress=False, strict=strict, columnar=False)  # the per-run reader
    for k in ("meta", "iterations", "evals"):
        pd.testing.assert_frame_equal(getattr(a, k), getattr(b, k), check_exact=True)
    assert [str(p) for p in a.problems] == [str(p) for p in b.problems]
    return a


def _rewrite(path, edit):
    """Rewrite a run's Parquet table with ``edit`` applied, its recorded metadata kept (the row
    count updated: a consistent file whose content is wrong)."""
    t = pq.read_table(path)
    df = edit(t.replace_schema_metadata(None).to_pandas())
    md = dict(t.schema.metadata)
    info = json.loads(md[b"prereg_runlog"])
    md[b"prereg_runlog"] = json.dumps({**info, "rows": len(df)}).encode()
    nt = pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(md)
    pq.write_table(nt, path, write_page_checksum=True)


def test_column_wise_equals_per_run(study):
    st = _assert_same(study)
    assert len(st.meta) == 12 and not st.problems


def test_mixed_runs_equal_per_run(study, tmp_path):
    root = _copy(study, tmp_path)
    folders = find_runs(root)
    # run 3: JSON lines only (the per-run path); run 5: not complete; run 7: inconsistent tokens
    run3 = folders[3]
    for kind in ("iterations", "evals"):
        df = pq.read_table(run3 / f"{kind}.parquet").to_pandas()
        (run3 / f"{kind}.jsonl").write_text("".join(json.dumps({k: (None if pd.isna(v) else v.item() if hasattr(v, "item") else v)
                                                              for k, v in r.items()}) + "\n" for r in df.to_dict("records")))
        (run3 / f"{kind}.parquet").unlink()
    meta = json.loads((folders[5] / "meta.json").read_text())
    meta["status"] = "stopped"
    (folders[5] / "meta.json").write_text(json.dumps(meta))
    _rewrite(folders[7] / "evals.parquet", lambda d: d.assign(tokens=np.where(d["eval_index"] == 2, d["tokens"] + 5, d["tokens"])))
    st = _assert_same(root)
    kinds = {(p.kind, p.path) for p in st.problems}
    assert ("status", str(folders[5] / "meta.json")) in kinds
    assert ("inconsistent", str(folders[7] / "evals.jsonl")) in kinds


@pytest.mark.parametrize("how", ["field", "order", "duplicate"])
def test_corrupt_run_k_of_many_is_named(study, tmp_path, how):
    root = _copy(study, tmp_path)
    folders = find_runs(root)
    k = 9
    if how == "field":
        _rewrite(folders[k] / "evals.parquet", lambda d: d.assign(correct=np.where(np.arange(len(d)) == 4, d["samples"] + 1, d["correct"])))
        path, where = folders[k] / "evals.parquet", "line 5: field 'correct'"
    elif how == "order":
        _rewrite(folders[k] / "iterations.parquet", lambda d: d.assign(iteration=np.where(np.arange(len(d)) == 3, 1, d["iteration"])))
        path, where = folders[k] / "iterations.jsonl", "field 'iteration'"
    else:
        _rewrite(folders[k] / "evals.parquet", lambda d: pd.concat([d, d.iloc[[0]]], ignore_index=True).sort_values("eval_index", kind="stable"))
        path, where = folders[k] / "evals.jsonl", "duplicate row"
    st = _assert_same(root)
    bad = [p for p in st.problems if p.kind == "corrupt"]
    assert len(bad) == 1 and bad[0].path == str(folders[k])
    assert str(path) in bad[0].message and where in bad[0].message
    assert len(st.meta) == len(folders) - 1
    with pytest.raises(RunLogError, match=str(path).replace("+", r"\+")):
        load_study(root, progress=False, strict=True)


def _per_run_problem(folder):
    """What sealing asked of each run before it read runs column-wise: the first problem of the
    per-run reader that is not the run's status."""
    try:
        bad = [p for p in read_run(folder).problems if p.kind != "status"]
    except RunLogError as e:
        return str(e)
    return str(bad[0]) if bad else None


def test_unreadable_names_what_the_per_run_reader_names(study, tmp_path):
    """Sealing checks its runs column-wise (:func:`unreadable`); every kind of damage the per-run
    reader finds, several in one study, gives the same line for the same run, and the runs
    without damage (one of them only not complete) give none."""
    root = _copy(study, tmp_path)
    f = find_runs(root)
    _rewrite(f[1] / "evals.parquet", lambda d: d.assign(correct=np.where(np.arange(len(d)) == 4, d["samples"] + 1, d["correct"])))
    _rewrite(f[2] / "iterations.parquet", lambda d: d.assign(iteration=np.where(np.arange(len(d)) == 3, 1, d["iteration"])))
    _rewrite(f[3] / "evals.parquet", lambda d: pd.concat([d, d.iloc[[0]]], ignore_index=True).sort_values("eval_index", kind="stable"))
    _rewrite(f[4] / "evals.parquet", lambda d: d.assign(tokens=np.where(d["eval_index"] == 2, d["tokens"] + 5, d["tokens"])))
    (f[5] / "iterations.parquet").write_bytes(b"PAR1 not really")
    (f[6] / "meta.json").write_text("{")
    meta = json.loads((f[7] / "meta.json").read_text())
    (f[7] / "meta.json").write_text(json.dumps({**meta, "status": "stopped"}))
    _rewrite(f[8] / "evals.parquet", lambda d: d.drop(columns=["problem_id"]))
    with (f[9] / "evals.jsonl").open("a") as fh:  # JSON lines newer than their Parquet: read from the lines, torn tail
        fh.write('{"eval_index": 9')
    want = {i: p for i, folder in enumerate(f) if (p := _per_run_problem(folder)) is not None}
    assert sorted(want) == [1, 2, 3, 4, 5, 6, 8, 9]
    assert unreadable(f) == want
    assert unreadable(f[:1]) == {} and unreadable([f[4]]) == {0: want[4]}  # one run: the per-run reader


@pytest.mark.parametrize("column", ["eval_set", "problem_id"])
def test_a_run_missing_a_text_column_is_named_like_per_run(study, tmp_path, column):
    """The text columns are read as dictionaries by name; a file without one takes the per-run
    path, which names the file, instead of stopping the whole load."""
    root = _copy(study, tmp_path)
    folders = find_runs(root)
    _rewrite(folders[4] / "evals.parquet", lambda d: d.drop(columns=[column]))
    st = _assert_same(root)
    bad = [p for p in st.problems if p.kind == "corrupt"]
    assert len(bad) == 1 and bad[0].path == str(folders[4]) and column in bad[0].message, st.problems
    assert len(st.meta) == len(folders) - 1


def test_set_hashes_equal_per_group_hash():
    rng = np.random.default_rng(0)
    rows = []
    for cfg in ("a", "b"):
        for seed in range(3):
            for e in range(4):
                n = 5 if (seed, e) != (2, 3) else 4
                ids = [f"p{j}" for j in rng.permutation(12)[:n]] if e == 1 else [f"p{j}" for j in range(n)][::-1]
                rows += [(cfg, seed, e, pid) for pid in ids]
    ev = pd.DataFrame(rows, columns=["configuration", "seed", "eval_index", "problem_id"]).astype({"problem_id": "str"})
    keys = ["configuration", "seed", "eval_index"]
    want = ev.groupby(keys, sort=True)["problem_id"].agg(_set_hash).to_numpy()
    assert list(_set_hashes(ev, keys)) == list(want)
    # the recorded value itself: sha1 of the sorted ids joined by newlines, 12 hex digits
    assert _set_hash(pd.Series(["b", "a"])) == hashlib.sha1(b"a\nb").hexdigest()[:12] == "fcd127ffa101"
    one = pd.DataFrame({"configuration": ["x", "x"], "seed": [0, 0], "eval_index": [0, 0], "problem_id": ["b", "a"]})
    assert list(_set_hashes(one.astype({"problem_id": "str"}), keys)) == ["fcd127ffa101"]


def _pairing_per_seed(curves, treatment, control, common_random_numbers=True):
    """The per-seed check_pairing as it was before it was vectorized: the reference."""
    issues = []
    t, c = _runs(curves, treatment), _runs(curves, control)
    st, sc = {k[1] for k in t}, {k[1] for k in c}
    for s in sorted(st ^ sc):
        has, lacks = (treatment, control) if s in st else (control, treatment)
        issues.append((s, lacks, f"seed {s}: configuration {has!r} has evaluations, {lacks!r} has none (no run, or a run that logged no evaluations)"))
    for s in sorted(st & sc):
        rt, rc = t[(treatment, s)], c[(control, s)]
        sets = {}
        for name, run in ((treatment, rt), (control, rc)):
            sets[name] = _modal(run["problem_set"])
            odd = run[run["problem_set"] != sets[name]]
            if len(odd):
                e = odd.iloc[0]
                n0 = int(run.loc[run["problem_set"] == sets[name], "n_problems"].iloc[0])
                issues.append((s, name, f"configuration {name!r} seed {s}: evaluation {int(e['eval_index'])} scored "
                               f"{int(e['n_problems'])} problems, a different set from its other evaluations ({n0})"))
        if sets[treatment] != sets[control]:
            nt, nc = int(rt["n_problems"].iloc[0]), int(rc["n_problems"].iloc[0])
            issues.append((s, "both", f"seed {s}: evaluation problems differ between {treatment!r} ({nt} problems) "
                           f"and {control!r} ({nc} problems)"))
        if not common_random_numbers:
            continue
        unknown = [(name, run) for name, run in ((treatment, rt), (control, rc)) if run["eval_seed"].isna().any()]
        for name, run in unknown:
            e = run[run["eval_seed"].isna()].iloc[0]
            issues.append((s, name, f"configuration {name!r} seed {s}: evaluation {int(e['eval_index'])} does not log its "
                           f"sampling seed (eval_seed null), so common random numbers cannot be checked; {_NO_CRN}"))
        if unknown:
            continue
        m = rt[["eval_index", "eval_seed"]].merge(rc[["eval_index", "eval_seed"]], on="eval_index", suffixes=("_t", "_c"))
        m = m[m["eval_seed_t"] != m["eval_seed_c"]]
        if len(m):
            e = m.iloc[0]
            issues.append((s, "both", f"seed {s}: evaluation {int(e['eval_index'])} used sampling seed {int(e['eval_seed_t'])} "
                           f"in {treatment!r} but {int(e['eval_seed_c'])} in {control!r} (common random numbers broken); {_NO_CRN}"))
    return pd.DataFrame(issues, columns=["seed", "configuration", "reason"])


def test_pairing_equals_per_seed(study):
    curves = accuracy_curve(load_study(study, progress=False).evals, eval_set="math200")
    clean = check_pairing(curves, "treatment", "control")
    assert clean.empty
    pd.testing.assert_frame_equal(clean, _pairing_per_seed(curves, "treatment", "control"))
    bad = curves.copy()
    bad = bad[~((bad["configuration"] == "control") & (bad["seed"] == 0))]  # seed 0: no control run
    t1 = (bad["configuration"] == "treatment") & (bad["seed"] == 1) & (bad["eval_index"] == 2)
    bad.loc[t1, "problem_set"] = "other"  # one evaluation scored another set
    bad.loc[(bad["configuration"] == "control") & (bad["seed"] == 2), "problem_set"] = "elsewhere"  # both runs differ
    bad["eval_seed"] = bad["eval_seed"].astype("Int64")
    bad.loc[(bad["configuration"] == "control") & (bad["seed"] == 3) & (bad["eval_index"] == 1), "eval_seed"] = pd.NA
    bad.loc[(bad["configuration"] == "treatment") & (bad["seed"] == 4) & (bad["eval_index"] == 3), "eval_seed"] = 99
    for crn in (True, False):
        got = check_pairing(bad, "treatment", "control", common_random_numbers=crn)
        want = _pairing_per_seed(bad, "treatment", "control", common_random_numbers=crn)
        pd.testing.assert_frame_equal(got, want)
        assert set(got["seed"]) == ({0, 1, 2, 3, 4} if crn else {0, 1, 2})


# the default suite draws the slow step's first 8 trials of 20
@pytest.mark.parametrize("trials", [8, pytest.param(20, marks=pytest.mark.slow)])
def test_pairing_equals_per_seed_on_random_damage(study, trials):
    """Random damage (sets changed in one evaluation or a whole run, sampling seeds missing or
    changed, runs dropped, rows shuffled): the seeds found at once are those the per-seed check finds.
    Every trial is damaged (the undamaged curves are test_pairing_equals_per_seed's), and each kind
    of damage is drawn in several trials, in some with another kind."""
    curves = accuracy_curve(load_study(study, progress=False).evals, eval_set="math200")
    rng = np.random.default_rng(8)
    drawn, found = [], 0  # the kinds of damage of each trial; trials in which damage is found
    for trial in range(trials):
        bad = curves.copy()
        bad["eval_seed"] = bad["eval_seed"].astype("Int64")
        kinds = [int(rng.integers(0, 5)) for _ in range(int(rng.integers(1, 5)))]
        drawn.append(kinds)
        for how in kinds:
            row = int(rng.integers(0, len(bad)))
            if how == 0:
                bad.iloc[row, bad.columns.get_loc("problem_set")] = "other"
            elif how == 1:
                run = (bad["configuration"] == bad["configuration"].iloc[row]) & (bad["seed"] == bad["seed"].iloc[row])
                bad.loc[run, "problem_set"] = "elsewhere"
            elif how == 2:
                bad.iloc[row, bad.columns.get_loc("eval_seed")] = pd.NA
            elif how == 3:
                bad.iloc[row, bad.columns.get_loc("eval_seed")] = 2**62 + int(rng.integers(0, 3))
            else:
                bad = bad.drop(index=bad.index[row])
        bad = bad.sample(frac=1, random_state=trial)
        for crn in (True, False):
            got = check_pairing(bad, "treatment", "control", common_random_numbers=crn)
            want = _pairing_per_seed(bad, "treatment", "control", common_random_numbers=crn)
            pd.testing.assert_frame_equal(got, want)
            found += crn and not got.empty
    assert found == trials  # every trial's damage is seen, so the frames compared are not both empty
    for how in range(5):  # each kind in several trials, in some of them with another kind
        alone_or_not = sum(how in k for k in drawn)
        with_another = sum(how in k and len(set(k)) > 1 for k in drawn)
        assert alone_or_not >= trials // 5 and with_another >= max(1, trials // 10), (how, drawn)


def test_runs_split_equals_group_by(study):
    from prereg_kit.readings.base import RUN
    curves = accuracy_curve(load_study(study, progress=False).evals, eval_set="math200").sample(frac=1, random_state=1)
    for name in (None, "control"):
        c = curves if name is None else curves[curves["configuration"] == name]
        want = {(str(k[0]), int(k[1])): g.sort_values("eval_index", ignore_index=True) for k, g in c.groupby(RUN, sort=True)}
        got = _runs(curves, name)
        assert list(got) == list(want)
        for k in want:
            pd.testing.assert_frame_equal(got[k], want[k], check_exact=True)


@pytest.mark.parametrize("wide", [False, True])
def test_duplicate_runs_equal_pandas_duplicated(wide):
    """The integer-key duplicate check names exactly the runs pandas' ``duplicated`` does, on
    random frames with repeats, missing names and negative eval indices (``wide``: indices so
    large the key needs the lexsort path)."""
    from prereg_kit.runlog.columnar import _RUN, duplicate_runs
    from prereg_kit.runlog.text import sorted_categories

    rng = np.random.default_rng(11)
    for trial in range(200):
        n = int(rng.integers(1, 60))
        names = np.array(["p0", "p1", "p2", "p10", None], dtype=object)
        ev = pd.DataFrame({
            _RUN: rng.integers(0, 6, n),
            "eval_index": rng.integers(-2, 4, n) * (10 ** 17 if wide else 1),
            "eval_set": pd.Series(rng.choice(np.array(["a", "b"], dtype=object), n)),
            "problem_id": pd.Series(names[rng.integers(0, 5, n)]),
        })
        if trial % 2:
            ev["eval_set"], ev["problem_id"] = sorted_categories(ev["eval_set"]), sorted_categories(ev["problem_id"])
        want = set(ev.loc[ev.duplicated([_RUN, "eval_index", "eval_set", "problem_id"]), _RUN].tolist())
        assert duplicate_runs(ev) == want, trial
