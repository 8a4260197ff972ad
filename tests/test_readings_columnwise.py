"""Readings built column-wise equal the per-run ones they replace (the old functions are kept
here, verbatim, as the reference) on a small synthetic study and on edge cases."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from prereg_kit.analyze import UNSPLIT, configuration_summary
from prereg_kit.readings import accuracy_curve, read_at_tokens
from prereg_kit.readings.points import _at_budget, _frame, _runs
from prereg_kit.runlog import load_study
from prereg_kit.synth import generate_study
from prereg_kit import readings as rd


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
    from prereg_kit.design import eval_problem_violations
    for ev in (study.evals, _broken_evals(study.evals)):
        new, old = eval_problem_violations(ev, _plan(**sizes)), old_eval_problem_violations(ev, _plan(**sizes))
        assert new == old
    assert any("1 missing, 0 extra" in w for _, _, w in new) or sizes["math200"] is not None
    assert any("never evaluated" in w for _, _, w in new) and any("not in the plan" in w for _, _, w in new)
