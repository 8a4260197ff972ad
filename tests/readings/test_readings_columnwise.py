"""Readings built column-wise equal the per-run ones they replace (the old functions are kept
here, verbatim, as the reference) on a small synthetic study and on edge cases."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from prereg_kit import readings as rd
from prereg_kit.analysis.analyze import UNSPLIT, configuration_summary
from prereg_kit.readings import accuracy_curve, read_at_tokens
from prereg_kit.readings.points import _at_budget, _frame, _runs
from prereg_kit.runlog import load_study
from prereg_kit.simulate.synth import generate_study


def old_read_at_tokens(curves, budget):
    return _frame([_at_budget(k, r, budget)[0] for k, r in _runs(curves).items()])


def old_configuration_summary(curves, iterations, budget, *, relative_accuracy=None, collapse=None):
    at_b = rd.read_at_tokens(curves, budget)
    at_b = at_b[at_b["reached"]]
    derived = {}
    for key, cv in (("relative_accuracy", relative_accuracy), ("collapse", collapse)):
        if cv is not None:
            r = rd.read_at_tokens(cv, budget)
            derived[key] = r[r["reached"]].groupby("configuration")["accuracy"]
    stages = ["selection", "generation", "credit", "update", "weight_sync"]
    rows = []
    for name, g in at_b.groupby("configuration", sort=True):
        its = iterations[iterations["configuration"] == name]
        share_tok, shares, unsplit = [], [], False
        for r in g.itertuples():
            run = its[(its["seed"] == r.seed) & (its["cum_tokens"] <= r.tokens + 1e-9)]
            tot = run["tokens_total"].sum()
            share_tok.append(run["tokens_continuation"].sum() / tot if tot else np.nan)
            unsplit |= bool(run[[f"seconds_{s}" for s in stages]].isna().to_numpy().any())
            secs = np.array([run[f"seconds_{s}"].sum() for s in stages])
            shares.append(secs / secs.sum() if secs.sum() else np.full(len(stages), np.nan))
        sh = np.full(len(stages), np.nan) if unsplit else np.nanmean(np.array(shares), axis=0)
        rows.append({"configuration": name, "n_seeds": len(g), "accuracy_at_B": g["accuracy"].mean(),
                     "tokens_at_B": g["tokens"].mean(), "updates_at_B": g["updates"].mean(),
                     "hours_at_B": g["train_seconds"].mean() / 3600, "continuation_share": float(np.nanmean(share_tok)),
                     "stage_shares": UNSPLIT if unsplit else " / ".join(f"{x:.0%}" for x in sh),
                     **{f"share_{s}": float(x) for s, x in zip(stages, sh)}})
        if "relative_accuracy" in derived:
            g_rel = derived["relative_accuracy"]
            rows[-1]["relative_accuracy_at_B"] = float(g_rel.mean().get(name, np.nan))
        if "collapse" in derived:
            g_col = derived["collapse"]
            rows[-1]["n_collapsed"] = int(g_col.sum().get(name, 0))
            rows[-1]["collapse_rate"] = float(g_col.mean().get(name, np.nan))
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("colwise")
    generate_study(root, configurations={"control": 0.0, "treatment": 0.02, "third": 0.01}, seeds=range(5),
                   budget_tokens=200_000, eval_every=50_000, eval_sets={"math200": 12, "aime": 6},
                   continuation_share={"control": 0.0, "treatment": 0.3, "third": 0.1},
                   extend_to={"control": 1.0, "treatment": 1.5, "third": 1.0}, rng=5)
    return load_study(root, progress=False)


@pytest.fixture(scope="module")
def curves(study):
    c = accuracy_curve(study.evals, eval_set="math200")
    # shuffled, one evaluation dropped (a run stops early): the order and gaps of real curves
    c = c.sample(frac=1.0, random_state=1).reset_index(drop=True)
    drop = (c["configuration"] == "third") & (c["seed"] == 2) & (c["tokens"] >= c["tokens"].max() * 0.7)
    return c[~drop]


@pytest.mark.parametrize("budget", [0.0, 100_000.0, 150_001.0, 200_000.0, 1e12,
                                    {"control": ("tokens", 120_000.0), "treatment": ("iteration", 3.0),
                                     "third": ("tokens", 2e5)}])
def test_read_at_tokens_equals_per_run(curves, budget):
    new, old = read_at_tokens(curves, budget), old_read_at_tokens(curves, budget)
    pd.testing.assert_frame_equal(new, old, check_exact=True)
    assert (~new["reached"]).any() or budget != 1e12


def test_read_at_tokens_edge_cases(curves):
    pd.testing.assert_frame_equal(read_at_tokens(curves.iloc[:0], 1.0), old_read_at_tokens(curves.iloc[:0], 1.0))
    with pytest.raises(rd.ReadingError, match="'third': no budget B"):
        read_at_tokens(curves, {"control": ("tokens", 1.0), "treatment": ("tokens", 1.0)})
    with pytest.raises(rd.ReadingError, match="'third': no budget B"):
        old_read_at_tokens(curves, {"control": ("tokens", 1.0), "treatment": ("tokens", 1.0)})


@pytest.mark.parametrize("budget", [100_000.0, 200_000.0, 1e12])
def test_configuration_summary_equals_per_run(study, curves, budget):
    its = study.iterations.sample(frac=1.0, random_state=2)  # summed in the rows' order, as before
    extra = {"relative_accuracy": rd.relative_accuracy_curves(curves, "control", 200_000.0, allow_missing=True).kept,
             "collapse": accuracy_curve(study.evals, eval_set="math200", metric="collapse")}
    new = configuration_summary(curves, its, budget, **extra)
    old = old_configuration_summary(curves, its, budget, **extra)
    pd.testing.assert_frame_equal(new, old, check_exact=True)


def test_configuration_summary_unsplit_and_missing_iterations(study, curves):
    its = study.iterations.copy()
    its.loc[(its["configuration"] == "third") & (its["seed"] == 1), "seconds_credit"] = np.nan  # seconds_step only
    its = its[~((its["configuration"] == "control") & (its["seed"] == 3))]  # a run without iteration rows
    new, old = configuration_summary(curves, its, 200_000.0), old_configuration_summary(curves, its, 200_000.0)
    pd.testing.assert_frame_equal(new, old, check_exact=True)
    assert (new["stage_shares"] == UNSPLIT).sum() == 1


# ---- the design's problem-set check


def _old_problem_sets(rows):
    g = rows.groupby(["configuration", "seed", "eval_index"], sort=True)
    gid = g.ngroup().to_numpy()
    codes = pd.factorize(rows["problem_id"].astype(str))[0]
    order = np.argsort(gid, kind="stable")
    parts = np.split(codes[order], np.searchsorted(gid[order], np.arange(1, g.ngroups)))
    return pd.Series([frozenset(p.tolist()) for p in parts], index=g.size().index, dtype=object)


def old_eval_problem_violations(evals, plan):
    if not len(evals):
        return []
    out = []
    planned = {s.name: s for s in plan.evaluation.sets}
    runs = evals[["configuration", "seed"]].drop_duplicates()
    extra = evals[~evals["eval_set"].isin(list(planned))]
    for (c, s), g in extra.groupby(["configuration", "seed"], sort=True):
        names = sorted(g["eval_set"].unique())
        out.append((c, int(s), f"evaluation set(s) {', '.join(map(repr, names))} are not in the plan "
                                f"(have: {', '.join(planned)})"))
    for name, spec in planned.items():
        rows = evals[evals["eval_set"] == name]
        have = rows[["configuration", "seed"]].drop_duplicates()
        lacking = runs.merge(have, how="left", indicator=True)
        for r in lacking[lacking["_merge"] == "left_only"].itertuples(index=False):
            out.append((r.configuration, int(r.seed), f"never evaluated on the plan's set {name!r}"))
        if not len(rows):
            continue
        sets = _old_problem_sets(rows)
        counts = sets.value_counts()
        reference = counts.index[0]
        if spec.n_problems is not None:
            sized = [x for x in counts.index if len(x) == spec.n_problems]
            reference = sized[0] if sized else reference
        seen = set()
        for (c, s, e), problems in sets.items():
            if problems == reference and (spec.n_problems is None or len(problems) == spec.n_problems):
                continue
            if (c, s) in seen:
                continue
            seen.add((c, s))
            if spec.n_problems is not None and len(problems) != spec.n_problems:
                how = f"has {len(problems)} problems, the plan names {spec.n_problems}"
            else:
                how = (f"differs from the other runs' {len(reference)} problems "
                       f"({len(reference - problems)} missing, {len(problems - reference)} extra)")
            out.append((c, int(s), f"evaluation {e} of set {name!r} {how}"))
    return out


def _plan(**sizes):
    from types import SimpleNamespace
    return SimpleNamespace(evaluation=SimpleNamespace(sets=[SimpleNamespace(name=k, n_problems=v) for k, v in sizes.items()]))


def _broken_evals(evals):
    ev = evals.sample(frac=1.0, random_state=4).reset_index(drop=True)  # rows in any order
    m = ev["eval_set"] == "math200"
    first = ev.loc[m, "problem_id"].iloc[0]
    ev = ev[~(m & (ev["configuration"] == "control") & (ev["seed"] == 1) & (ev["eval_index"] == 2)
              & (ev["problem_id"] == first))]  # one problem missing
    odd = ev[(ev["eval_set"] == "math200") & (ev["configuration"] == "third") & (ev["seed"] == 0)].iloc[:2].copy()
    odd["problem_id"] = ["new-problem", odd["problem_id"].iloc[1]]  # an extra problem; a problem scored twice
    ev = pd.concat([ev, odd], ignore_index=True)
    ev = ev[~((ev["eval_set"] == "aime") & (ev["configuration"] == "treatment") & (ev["seed"] == 4))]  # never on aime
    ghost = ev.iloc[:3].copy()
    ghost["eval_set"] = "gsm8k"  # a set the plan does not name
    return pd.concat([ev, ghost], ignore_index=True)


@pytest.mark.parametrize("sizes", [{"math200": None, "aime": None}, {"math200": 12, "aime": 5},
                                   {"math200": 13, "aime": 6, "absent": None}])
def test_problem_set_check_equals_per_evaluation(study, sizes):
    from prereg_kit.study.design import eval_problem_violations
    for ev in (study.evals, _broken_evals(study.evals)):
        new, old = eval_problem_violations(ev, _plan(**sizes)), old_eval_problem_violations(ev, _plan(**sizes))
        assert new == old
    assert any("1 missing, 0 extra" in w for _, _, w in new) or sizes["math200"] is not None
    assert any("never evaluated" in w for _, _, w in new) and any("not in the plan" in w for _, _, w in new)


# ---- drift flags and collapse flags


def old_drift_flags(evals, *, eval_set, threshold=0.1, known=None):
    known = known or {}
    d = known["default"] if "default" in known else accuracy_curve(evals, eval_set=eval_set, verifier="default")
    out = d[rd.RUN + ["eval_index", "iteration", "tokens"]].copy()
    out["accuracy_default"] = d["accuracy"].to_numpy()
    mine = evals[evals["eval_set"] == eval_set]
    lack = mine.loc[mine["correct_strict"].isna(), rd.RUN].drop_duplicates()
    if len(lack):
        gone = evals[rd.RUN].merge(lack.assign(_lack=1), on=rd.RUN, how="left")["_lack"].notna().to_numpy()
        s = (accuracy_curve(evals[~gone], eval_set=eval_set, verifier="strict") if (~gone & (evals["eval_set"] == eval_set).to_numpy()).any()
             else d.iloc[:0])
        out["accuracy_strict"] = out[rd.RUN + ["eval_index"]].merge(s[rd.RUN + ["eval_index", "accuracy"]], on=rd.RUN + ["eval_index"],
                                                                    how="left")["accuracy"].to_numpy(dtype="float64")
    else:
        s = known["strict"] if "strict" in known else accuracy_curve(evals, eval_set=eval_set, verifier="strict")
        out["accuracy_strict"] = s["accuracy"].to_numpy()
    out["gap"] = out["accuracy_default"] - out["accuracy_strict"]
    out["drifted"] = out["gap"] > threshold
    return out


def old_collapse_flags(curve, eval_set):
    flags = np.zeros(len(curve))
    for key, g in curve.groupby(rd.RUN, sort=False):
        base = g[g["eval_index"] == 0]
        if not len(base):
            raise rd.ReadingError(f"metric collapse: configuration {key[0]!r} seed {key[1]} has no evaluation 0 on set "
                                  f"{eval_set!r} (the base model's pass@4 is read at the start of the run)")
        if float(base["updates"].iloc[0]) != 0:
            raise rd.ReadingError(f"metric collapse: configuration {key[0]!r} seed {key[1]}: evaluation 0 on set {eval_set!r} "
                                  f"was taken after {float(base['updates'].iloc[0]):g} updates, not before any update")
        b = float(base["accuracy"].iloc[0])
        flags[curve.index.get_indexer(g.index)] = (g["accuracy"].to_numpy(dtype="float64") < b).astype("float64")
    return flags


@pytest.mark.parametrize("threshold", [0.0, 0.05])
def test_drift_flags_equal_per_curve(study, threshold):
    ev = study.evals.sample(frac=1.0, random_state=6).reset_index(drop=True)
    one = rd.SetRows(ev)("math200")
    d = accuracy_curve(one, eval_set="math200")
    for evals in (ev, one):
        for known in (None, {"default": d}, {"strict": accuracy_curve(evals, eval_set="math200", verifier="strict")}):
            new = rd.drift_flags(evals, eval_set="math200", threshold=threshold, known=known)
            old = old_drift_flags(evals, eval_set="math200", threshold=threshold, known=known)
            pd.testing.assert_frame_equal(new, old, check_exact=True)
    lacking = ev.copy()
    lacking.loc[(lacking["configuration"] == "third") & (lacking["seed"] == 1), "correct_strict"] = np.nan
    pd.testing.assert_frame_equal(rd.drift_flags(lacking, eval_set="math200", threshold=threshold),
                                  old_drift_flags(lacking, eval_set="math200", threshold=threshold), check_exact=True)


def test_collapse_flags_equal_per_run(study):
    from prereg_kit.readings.curves import _collapse_flags
    c = accuracy_curve(study.evals, eval_set="math200", metric="pass@4").sample(frac=1.0, random_state=7)
    np.testing.assert_array_equal(_collapse_flags(c, "math200"), old_collapse_flags(c, "math200"))
    np.testing.assert_array_equal(_collapse_flags(c.iloc[:0], "x"), old_collapse_flags(c.iloc[:0], "x"))
    dup = pd.concat([c, c[c["eval_index"] == 0].assign(accuracy=0.5)])  # a second evaluation 0: the first is the base
    np.testing.assert_array_equal(_collapse_flags(dup, "math200"), old_collapse_flags(dup.reset_index(drop=True), "math200"))
    no_base = c[~((c["configuration"] == "third") & (c["seed"] == 2) & (c["eval_index"] == 0))]
    late = c.assign(updates=np.where((c["configuration"] == "control") & (c["eval_index"] == 0), 3, c["updates"]))
    for bad in (no_base, late, pd.concat([late, no_base])):
        with pytest.raises(rd.ReadingError) as new:
            _collapse_flags(bad, "math200")
        with pytest.raises(rd.ReadingError) as old:
            old_collapse_flags(bad.reset_index(drop=True), "math200")
        assert str(new.value) == str(old.value)
