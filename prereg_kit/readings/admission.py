"""Drift between the default and the strict verifier, and the admission and exclusion rules:
each returns the kept curves and every exclusion with its rule and reason, never silently."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..runlog.groups import group_numbers
from .base import DRIFT_THRESHOLD, RUN, AdmissionResult, ReadingError, exclusions_table
from .curves import accuracy_curve
from .points import Budgets, _first_at_or_after, _runs, budget_target, describe_target

# --------------------------------------------------------------------------------------------
# Drift
# --------------------------------------------------------------------------------------------


def drift_flags(evals: pd.DataFrame, *, eval_set: str, threshold: float = DRIFT_THRESHOLD,
                known: Mapping[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """Flag drifted evaluations: default-verifier accuracy exceeds strict by more than ``threshold``.

    Rule (dense-rewards paper §C.1 "Verifiers"): an evaluation "counts as drifted when default verifier accuracy
    exceeds strict-verifier accuracy by more than 0.1". One row per (configuration, seed,
    eval_index): tokens, accuracy_default, accuracy_strict, gap, drifted. A run that does not log
    ``correct_strict`` on the set (another trainer's, outputs not kept) has no strict accuracy: its
    gap is NaN and it is not flagged (the analysis names such runs in its notes). ``known``: accuracy
    curves already read from the same ``evals`` and set, by verifier, used instead of reading again.
    """
    known = known or {}
    d = known["default"] if "default" in known else accuracy_curve(evals, eval_set=eval_set, verifier="default")
    out = d[RUN + ["eval_index", "iteration", "tokens"]].copy()  # either can be B's axis
    out["accuracy_default"] = d["accuracy"].to_numpy()
    in_set = evals["eval_set"] == eval_set
    mine = evals if in_set.all() else evals[in_set]  # one set's rows (SetRows): no copy
    lack = mine.loc[mine["correct_strict"].isna(), RUN].drop_duplicates()
    if len(lack):
        gone = evals[RUN].merge(lack.assign(_lack=1), on=RUN, how="left")["_lack"].notna().to_numpy()
        s = (accuracy_curve(evals[~gone], eval_set=eval_set, verifier="strict") if (~gone & (evals["eval_set"] == eval_set).to_numpy()).any()
             else d.iloc[:0])
        out["accuracy_strict"] = out[RUN + ["eval_index"]].merge(s[RUN + ["eval_index", "accuracy"]], on=RUN + ["eval_index"],
                                                                 how="left")["accuracy"].to_numpy(dtype="float64")
    else:
        out["accuracy_strict"] = known["strict"]["accuracy"].to_numpy() if "strict" in known else _mean_accuracy(mine)
    out["gap"] = out["accuracy_default"] - out["accuracy_strict"]
    out["drifted"] = out["gap"] > threshold
    return out


def _mean_accuracy(mine: pd.DataFrame) -> np.ndarray:
    """Strict accuracy per (configuration, seed, eval_index), in key order: the mean over problems
    of correct_strict/samples, the value :func:`accuracy_curve` reads (same rows, same group
    mean), without its per-evaluation columns; the default curve already checked the rows."""
    keys = RUN + ["eval_index"]
    acc = mine["correct_strict"].to_numpy(dtype="float64") / mine["samples"].to_numpy(dtype="float64")
    return pd.Series(acc).groupby(group_numbers(mine, keys), sort=True).mean().to_numpy()  # one number per evaluation


def drifted_at(flags: pd.DataFrame, budget: Budgets) -> pd.DataFrame:
    """Per run, whether its evaluation at ``budget`` (first at or after) is drifted (§C.1 "Verifiers").

    "A run is drifted at B when its evaluation at B is drifted" (Table 12). Columns:
    configuration, seed, eval_index (NA if the run never reached B), gap, drifted.
    """
    rows = []
    for key, run in _runs(flags).items():
        col, value = budget_target(budget, key[0])
        pos = _first_at_or_after(run, value, col)
        if pos is None:
            rows.append((key[0], key[1], pd.NA, np.nan, False))
        else:
            r = run.iloc[pos]
            rows.append((key[0], key[1], int(r["eval_index"]), float(r["gap"]), bool(r["drifted"])))
    df = pd.DataFrame(rows, columns=RUN + ["eval_index", "gap", "drifted"])
    df["eval_index"] = df["eval_index"].astype("Int64")
    return df


# --------------------------------------------------------------------------------------------
# AdmissionResult and exclusion rules: each returns (kept curves, exclusions); never silent
# --------------------------------------------------------------------------------------------


def _drop_runs(curves: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    if not len(runs):
        return curves
    idx = pd.MultiIndex.from_frame(curves[RUN])
    drop = pd.MultiIndex.from_frame(runs[RUN].astype({"seed": "int64"}))
    return curves[~idx.isin(drop)]


def admit_min_iteration(curves: pd.DataFrame, iterations: pd.DataFrame, min_iteration: int) -> AdmissionResult:
    """Admit only runs that reached iteration ``min_iteration`` (last logged index >= it).

    Example rule (equal-iteration study, §H.2 "Additional drift seeds"): a run stopping at iteration 20 "is excluded
    under the stated iteration-28 admission rule".
    """
    last = iterations.groupby(RUN)["iteration"].max()
    rows = []
    for key in curves[RUN].drop_duplicates().itertuples(index=False):
        k = (key[0], key[1])
        reached = int(last.get(k, -1))
        if reached < min_iteration:
            rows.append((k[0], int(k[1]), pd.NA, "min_iteration",
                         f"reached iteration {reached}, the admission rule requires {min_iteration}"))
    ex = exclusions_table(rows)
    return AdmissionResult(_drop_runs(curves, ex), ex)


def admit_status(curves: pd.DataFrame, meta: pd.DataFrame, statuses: Sequence[str] = ("complete",)) -> AdmissionResult:
    """Admit only runs whose metadata status is one of ``statuses`` (e.g. not failed)."""
    st = meta.set_index(RUN)["status"]
    rows = []
    for key in curves[RUN].drop_duplicates().itertuples(index=False):
        s = st.get((key[0], key[1]), "unknown")
        if s not in statuses:
            rows.append((key[0], int(key[1]), pd.NA, "status", f"run status is '{s}', admitted: {', '.join(statuses)}"))
    ex = exclusions_table(rows)
    return AdmissionResult(_drop_runs(curves, ex), ex)


def exclude_drifted_evaluations(curves: pd.DataFrame, flags: pd.DataFrame) -> AdmissionResult:
    """Drop every drifted evaluation (§C.1 "Verifiers") from the curves; readings then use the others."""
    m = curves.merge(flags[RUN + ["eval_index", "gap", "drifted"]], on=RUN + ["eval_index"], how="left")
    hit = m["drifted"].fillna(False).astype(bool).to_numpy()
    rows = [(r.configuration, int(r.seed), int(r.eval_index), "drifted_evaluation",
             f"default accuracy exceeds strict by {r.gap:.3f} > {DRIFT_THRESHOLD}")
            for r in m[hit].itertuples(index=False)]
    return AdmissionResult(curves[~hit], exclusions_table(rows))


def exclude_drifted_runs(curves: pd.DataFrame, flags: pd.DataFrame, budget: Budgets) -> AdmissionResult:
    """Drop whole runs whose evaluation at ``budget`` is drifted (§C.1 "Verifiers", Table 12)."""
    d = drifted_at(flags, budget)
    d = d[d["drifted"]]
    rows = [(r.configuration, int(r.seed), int(r.eval_index), "drifted_at_budget",
             f"evaluation at {describe_target(budget, r.configuration)} drifted (gap {r.gap:.3f} > {DRIFT_THRESHOLD})")
            for r in d.itertuples(index=False)]
    ex = exclusions_table(rows)
    return AdmissionResult(_drop_runs(curves, ex), ex)


def apply_admission(
    curves: pd.DataFrame,
    *,
    iterations: pd.DataFrame | None = None,
    min_iteration: int | None = None,
    meta: pd.DataFrame | None = None,
    statuses: Sequence[str] | None = None,
    flags: pd.DataFrame | None = None,
    drop_drifted_evaluations: bool = False,
    drop_runs_drifted_at: Budgets | None = None,
) -> AdmissionResult:
    """Apply the preregistered admission and exclusion rules in order; report every exclusion.

    ``min_iteration`` (needs ``iterations``): runs must reach that iteration. ``statuses`` (needs
    ``meta``): admitted run statuses. ``drop_drifted_evaluations`` / ``drop_runs_drifted_at``
    (token budget; need ``flags`` from :func:`drift_flags`): drift exclusions. Returns the kept
    curves and one exclusions table (configuration, seed, eval_index, rule, reason).
    """
    steps = []
    if min_iteration is not None:
        if iterations is None:
            raise ReadingError("the min_iteration rule needs the iteration rows")
        steps.append(lambda c: admit_min_iteration(c, iterations, min_iteration))
    if statuses is not None:
        if meta is None:
            raise ReadingError("the status rule needs the run metadata")
        steps.append(lambda c: admit_status(c, meta, statuses))
    if drop_runs_drifted_at is not None or drop_drifted_evaluations:
        if flags is None:
            raise ReadingError("drift rules need drift flags (drift_flags)")
    if drop_runs_drifted_at is not None:
        steps.append(lambda c: exclude_drifted_runs(c, flags, drop_runs_drifted_at))
    if drop_drifted_evaluations:
        steps.append(lambda c: exclude_drifted_evaluations(c, flags))
    kept, parts = curves, []
    for step in steps:
        a = step(kept)
        kept = a.kept
        parts.append(a.exclusions)
    ex = pd.concat(parts, ignore_index=True) if parts else exclusions_table([])
    if not len(ex):
        ex = exclusions_table([])
    return AdmissionResult(kept.reset_index(drop=True), ex)
