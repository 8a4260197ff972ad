"""Manipulation checks (``[[checks]]``): did each intervention do what it was built to do?

The dense-rewards paper asks, beside each contrast, whether the manipulation took place — for a
prompt filter, that it moved its prompts' predicted success toward its target (S30's check, §C.5.5). A
check reads a per-iteration column of the run logs (a schema column or one the trainer adds),
averages it per run over the iterations trained up to its reading point (k·B generated tokens),
and tests per seed, one-sided over seeds, the quantity its ``expect`` names
(:class:`prereg_kit.plan.Check`). The result is a pass/fail row; a failed check is named in the
report's verdict summary.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import stats
from ..errors import PreregError
from ..plan import Check, Plan
from ..plan.designs import seed_text

CHECK_COLUMNS = ["check", "configuration", "metric", "expect", "reference", "target", "threshold", "at", "n",
                 "seeds", "value_mean", "reference_mean", "mean", "ci_low", "ci_high", "t", "df", "p", "alpha",
                 "passed", "verdict", "reason", "description"]
CHECK_SEED_COLUMNS = ["check", "seed", "value", "reference", "d"]


def run_means(iterations: pd.DataFrame, configuration: str, column: str, tokens: float, check_id: str) -> pd.Series:
    """Per seed, the mean of ``column`` over the iterations of ``configuration`` that began
    before ``tokens`` generated tokens (the iterations trained toward the reading point)."""
    its = iterations[iterations["configuration"] == configuration]
    if column not in its.columns:
        have = ", ".join(sorted(c for c in its.columns if c not in ("configuration", "seed", "stage")))
        raise PreregError(f"check {check_id}: the run logs of {configuration!r} have no per-iteration column "
                          f"{column!r} (have: {have})")
    began = its["cum_tokens"] - its["tokens_total"] < tokens
    vals = pd.to_numeric(its.loc[began, column], errors="coerce")
    means = vals.groupby(its.loc[began, "seed"].astype(int)).mean()
    empty = means[means.isna()]
    if len(empty):
        raise PreregError(f"check {check_id}: runs/{configuration}/seed-{empty.index[0]} logs no value of "
                          f"{column!r} before {tokens:,.0f} tokens")
    return means


def _reference(k: Check) -> str:
    return f"control {k.control}" if k.control else f"column {k.baseline}" if k.baseline else "none"


def read_check(k: Check, plan: Plan, iterations: pd.DataFrame) -> tuple[dict, pd.DataFrame]:
    """One check's row (:data:`CHECK_COLUMNS`) and its per-seed values (:data:`CHECK_SEED_COLUMNS`)."""
    tokens = k.reading_point.at_budget(plan.budget.tokens).tokens
    alpha = plan.statistics.alpha
    value = run_means(iterations, k.configuration, k.metric, tokens, k.id)
    if k.control:
        ref = run_means(iterations, k.control, k.metric, tokens, k.id)
    elif k.baseline:
        ref = run_means(iterations, k.configuration, k.baseline, tokens, k.id)
    else:
        ref = pd.Series(np.nan, index=value.index)
    want = set(k.seeds) if k.seeds is not None else set(plan.configuration_seeds(k.configuration))
    seeds = sorted(want & set(value.index) & (set(ref.index) if k.control else set(value.index)))
    v, r = value.loc[seeds].to_numpy(float), ref.reindex(seeds).to_numpy(float)
    if k.expect == "closer_to_target":
        d = np.abs(r - k.target) - np.abs(v - k.target)
    else:
        d = v - r if (k.control or k.baseline) else v
    per_seed = pd.DataFrame({"check": k.id, "seed": seeds, "value": v, "reference": r, "d": d},
                            columns=CHECK_SEED_COLUMNS)
    row = {"check": k.id, "configuration": k.configuration, "metric": k.metric, "expect": k.expect,
           "reference": _reference(k), "target": k.target, "threshold": k.threshold, "at": str(k.reading_point),
           "n": len(seeds), "seeds": seed_text(seeds), "value_mean": float(np.mean(v)) if len(v) else np.nan,
           "reference_mean": float(np.nanmean(r)) if len(r) and not np.isnan(r).all() else np.nan,
           "alpha": alpha, "description": k.description}
    if len(d) < 2:
        return {**row, "mean": np.nan, "ci_low": np.nan, "ci_high": np.nan, "t": np.nan, "df": np.nan, "p": np.nan,
                "passed": False, "verdict": "fail", "reason": f"{len(d)} seed(s) with a value; at least 2 are needed"}, per_seed
    side = "less" if k.expect == "less" else "greater"
    pt = stats.paired_t(d - k.threshold, confidence=plan.statistics.confidence, alternative=side)
    passed = bool(pt.p < alpha)
    what = (f"gain in closeness to {k.target:g}" if k.expect == "closer_to_target"
            else "value − reference" if (k.control or k.baseline) else "value")
    rel = "<" if side == "less" else ">"
    reason = f"mean {what} = {pt.mean + k.threshold:+.4f} {rel} {k.threshold:g}: one-sided p = {pt.p:.3g} " + \
        ("<" if passed else "≥") + f" {alpha}"
    return {**row, "mean": pt.mean + k.threshold, "ci_low": pt.ci_low + k.threshold, "ci_high": pt.ci_high + k.threshold,
            "t": pt.t, "df": pt.df, "p": pt.p, "passed": passed, "verdict": "pass" if passed else "fail",
            "reason": reason}, per_seed


def read_checks(plan: Plan, iterations: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every ``[[checks]]`` entry of ``plan`` on the main runs' iteration rows (with ``cum_tokens``
    and ``tokens_total``): the check table and the per-seed table."""
    rows, seeds = [], []
    for k in plan.checks:
        row, ps = read_check(k, plan, iterations)
        rows.append(row)
        seeds.append(ps)
    return (pd.DataFrame(rows, columns=CHECK_COLUMNS),
            pd.concat(seeds, ignore_index=True) if seeds else pd.DataFrame(columns=CHECK_SEED_COLUMNS))
