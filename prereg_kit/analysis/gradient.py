"""A study's gradient tests read from their sealed results: the tidy tables of the report.

For each ``[[gradient_tests]]`` entry whose result is sealed (``prereg_kit.chain.gradient_seal``), the
per-batch inner products in ``gradient/<id>/batches.parquet`` are summarized again here — never
taken from the trainer — with the plan's ``[statistics]`` resamples, seed and confidence
(dense-rewards paper §2.4, App. A "Alignment" and "Efficiency", Table 6):

- **alignment**: the mean over batches of cos(P⊥d_b, P⊥ĥ_b) = ⟨P⊥d,P⊥ĥ⟩ / √(‖P⊥d‖²‖P⊥ĥ‖²), NaN for
  a configuration whose update lies in V (outcome-only);
- **efficiency** (E⟨u,ĥ⟩)² / E‖u‖²; **per update**: over the baseline's on the same batches;
  **per token**: (efficiency / mean tokens per update) over the same ratio of the baseline;
- **positivity**: z = mean_b⟨u_b,ĥ_b⟩ / (sd/√B), passed at z ≥ 3;
- 95% percentile intervals from a bootstrap over batches (the same resampled batches for a
  configuration and its baseline);
- the **a + b/k fit** of E‖u_k‖² over the Monte-Carlo configurations in ``fit`` (§C.3.2,
  S25): the share (b/k)/(a + b/k) of the second moment due to continuation sampling at k,
  and the bound 1/(1 − share) on the per-update gain of any reallocation (3.8% → 1.04 in the paper);
- each condition: the value it reads, its bound, "met" or "not met".

A test not yet run gives rows with status ``"not run"``; the analysis goes on.
:func:`efficiency_value` gives one configuration's per-token estimate (``"G1:critic_td"``) to the
extrapolation heuristic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyses.gradient_stats import alignment_summary, continuation_fit, relative_efficiency

from ..chain.gradient_seal import BATCHES_FILE, GRADIENT_DIR, check_gradient_seals, read_result_meta, sealed_tests
from ..chain.lock import Chain, read_chain
from ..errors import PreregError, ViolationError
from ..plan import GradientTest, Plan, resolve_plan_path
from ..plan.gradient import credit_of, with_variants

COLUMNS = ("test", "dot_uh", "uu", "perp_dh", "perp_dd", "perp_hh", "tokens", "batch", "configuration", "mc_k")
Z_PASS = 3.0  # the paper's positivity check: mean ⟨u, ĥ⟩ at least 3 standard errors above 0
NOT_RUN = "not run"
REFUSED = "refused"  # a result that fails its seal, listed unread by an exploratory analysis


@dataclass
class GradientResults:
    """The report's gradient-test tables (columns in docs/gradient-tests.md "In a study")."""

    table: pd.DataFrame  # one row per test × configuration
    fit: pd.DataFrame  # one row per test with a fit
    conditions: pd.DataFrame  # one row per condition
    synthetic: bool = False
    notes: list[str] = field(default_factory=list)


def read_batches(folder: Path) -> pd.DataFrame:
    """``batches.parquet`` of a result, with the columns the summaries need (one-line error otherwise)."""
    path = folder / BATCHES_FILE
    try:
        df = pd.read_parquet(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises many kinds; all mean "not a result table"
        raise PreregError(f"{path}: unreadable: {type(e).__name__}: {' '.join(str(e).split())[:200]}") from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise PreregError(f"{path}: missing columns {', '.join(missing)} (the results contract, docs/gradient-tests.md)")
    return df


# ------------------------------------------------------------------------------- statistics
# The one place the summaries are computed, by analyses.gradient_stats (tested there against
# scipy's bootstrap and exact enumeration).


def _summaries(frame: pd.DataFrame, configurations: list[str], baseline: str, fit: list[str], *,
               n_resamples: int, seed: int, confidence: float) -> tuple[list[dict], dict | None]:
    """Per configuration (in ``configurations`` order) its summaries against ``baseline``, and the
    a + b/k fit over ``fit`` (None without one). Batches are aligned by index; every statistic
    resamples the same batch indices (one seed)."""
    wide = {c: g.sort_values("batch").set_index("batch") for c, g in frame.groupby("configuration")}
    for c in [*configurations, baseline, *fit]:
        if c not in wide:
            raise PreregError(f"configuration {c!r}: no rows in {BATCHES_FILE}")
    batches = wide[baseline].index
    for c in configurations:
        if not wide[c].index.equals(batches):
            raise PreregError(f"configuration {c!r}: its batches differ from the baseline {baseline!r}'s in {BATCHES_FILE}")
    col = lambda c, k: wide[c][k].to_numpy(float)  # noqa: E731
    boot = dict(n_resamples=n_resamples, seed=seed, confidence=confidence)
    rows = []
    for c in configurations:
        e = relative_efficiency(col(c, "dot_uh"), col(c, "uu"), col(c, "tokens"), col(baseline, "dot_uh"),
                                col(baseline, "uu"), col(baseline, "tokens"), **boot)
        al = alignment_summary(col(c, "perp_dh"), col(c, "perp_dd"), col(c, "perp_hh"),
                               undefined=~np.isfinite(col(c, "alignment")) if "alignment" in wide[c] else None, **boot)
        z = e.positivity.z
        rows.append({"configuration": c, "batches": e.batches, "efficiency": e.efficiency, "per_update": e.per_update,
                     "per_update_ci_low": e.per_update_ci[0], "per_update_ci_high": e.per_update_ci[1],
                     "per_token": e.per_token, "per_token_ci_low": e.per_token_ci[0], "per_token_ci_high": e.per_token_ci[1],
                     "alignment": al.mean, "alignment_ci_low": al.ci[0], "alignment_ci_high": al.ci[1],
                     "alignment_pooled": al.pooled, "tokens_per_update": e.tokens_per_update,
                     "mean_dot_uh": e.positivity.mean, "mean_uu": float(col(c, "uu").mean()),
                     "positivity_z": z, "positivity_pass": bool(z >= Z_PASS)})
    fit_row = None
    if fit:
        ks = np.array([int(wide[c]["mc_k"].iloc[0]) for c in fit], float)
        at_k = 4.0 if 4 in ks else float(ks.max())
        f = continuation_fit(ks, np.stack([col(c, "uu") for c in fit], axis=1), at_k=at_k, **boot)
        fit_row = {"configurations": ", ".join(fit), "ks": ", ".join(f"{k:g}" for k in ks), "a": f.a, "b": f.b,
                   "at_k": at_k, "share": f.share, "share_ci_low": f.share_ci[0], "share_ci_high": f.share_ci[1],
                   "reallocation_bound": f.bound}
    return rows, fit_row


# ------------------------------------------------------------------------------- the study


def _check_sealed(study: Path, t: GradientTest, seal: dict[str, Any] | None, chain: Chain) -> Path:
    """The result folder of a sealed test whose files match their seal; a violation otherwise."""
    if seal is None:
        raise PreregError(f"gradient test {t.id}: no sealed result: run `prereg gradient-test {study} --test {t.id}`")
    folder = study / seal["result"]
    rep = check_gradient_seals(study, chain)
    bad = [v for v in rep.violations if v.startswith(seal["result"] + "/") or v.startswith(seal["result"] + ":")]
    if bad:
        raise ViolationError(f"gradient test {t.id}: {bad[0]}")
    return folder


def gradient_results(study_dir: str | Path, plan: Plan, *, n_resamples: int | None = None,
                     exploratory: bool = False, chain: Chain | None = None) -> GradientResults:
    """Every gradient test of ``plan`` read from the study's sealed results (docstring above).
    ``exploratory``: a result that fails its seal is a row set with status ``"refused"`` and the
    reason in the notes, instead of an error. ``chain``: the study's lock chain when the caller
    has read it (an analysis reads ``plan.lock`` once); read here otherwise."""
    study = resolve_plan_path(study_dir).parent
    st = plan.statistics
    nres = n_resamples or st.bootstrap_resamples
    if plan.gradient_tests and chain is None:
        chain = read_chain(study)
    seals = sealed_tests(chain) if plan.gradient_tests else {}
    rows, fits, conds, notes, synthetic = [], [], [], [], False
    for t in plan.gradient_tests:
        base = t.baseline_of(plan.study.comparator)
        seal, status, folder = seals.get(t.id), NOT_RUN, None
        if seal is not None:
            try:
                folder = _check_sealed(study, t, seal, chain)
            except ViolationError as e:  # only with --exploratory: the result is listed, not read
                if not exploratory:
                    raise
                notes.append(f"gradient test {t.id}: not read: {e.lines[0]}")
                status = REFUSED
        if folder is None:
            if status == NOT_RUN:
                notes.append(f"gradient test {t.id}: not run (no sealed result under {GRADIENT_DIR}/{t.id})")
            summaries, fit_row = [{"configuration": c} for c in t.configurations], None
        else:
            meta = read_result_meta(folder)
            synthetic |= bool(meta.get("synthetic"))
            frame = read_batches(folder)
            try:
                summaries, fit_row = _summaries(frame, t.configurations, base, t.fit, n_resamples=nres, seed=st.seed,
                                                confidence=st.confidence)
            except PreregError as e:
                raise PreregError(f"gradient test {t.id}: {folder / BATCHES_FILE}: {e.lines[0]}") from None
            status = "synthetic" if meta.get("synthetic") else "complete"
        by_config = {r["configuration"]: r for r in summaries}
        for ci, c in enumerate(t.conditions):
            r = by_config.get(c.configuration, {})
            key = c.metric if c.on == "estimate" else f"{c.metric}_ci_{'low' if c.on == 'lower' else 'high'}"
            value = r.get(key, np.nan)
            conds.append({"test": t.id, "condition": ci, "configuration": c.configuration, "metric": c.metric, "on": c.on,
                          "direction": c.direction, "bound": c.bound, "value": value, "text": c.describe(),
                          "verdict": status if status in (NOT_RUN, REFUSED) else "met" if c.met(value) else "not met"})
        for r in summaries:
            mine = [x for x in conds if x["test"] == t.id and x["configuration"] == r["configuration"]]
            rows.append({"test": t.id, "status": status, "baseline": base, **r,
                         "credit_rule": credit_of(with_variants(plan, t).resolved_config(r["configuration"]))["rule"],
                         "conditions": "; ".join(f"{x['text']}: {x['verdict']}" for x in mine)})
        if fit_row is not None:
            fits.append({"test": t.id, **fit_row})
    return GradientResults(pd.DataFrame(rows), pd.DataFrame(fits), pd.DataFrame(conds), synthetic, notes)


def efficiency_value(study_dir: str | Path, plan: Plan, ref: str, *, chain: Chain | None = None) -> float:
    """The per-token efficiency estimate that ``ref`` (``"G1:critic_td"``: test id and one of its
    configurations) names, from the test's sealed result; a one-line error when the test has not
    run, the result was edited, or ``ref`` names no test configuration. ``chain``: the study's lock
    chain when the caller has read it; read here otherwise."""
    test_id, sep, name = ref.partition(":")
    t = next((x for x in plan.gradient_tests if x.id == test_id), None)
    if not sep or t is None:
        raise PreregError(f"efficiency {ref!r}: expected TEST:configuration with TEST a [[gradient_tests]] id "
                          f"(have: {', '.join(x.id for x in plan.gradient_tests) or 'none'})")
    if name not in t.configurations:
        raise PreregError(f"efficiency {ref!r}: {name!r} is not a configuration of gradient test {test_id} "
                          f"(have: {', '.join(t.configurations)})")
    study = resolve_plan_path(study_dir).parent
    chain = chain if chain is not None else read_chain(study)
    seal = sealed_tests(chain).get(test_id)
    if seal is None:
        raise PreregError(f"efficiency {ref!r}: gradient test {test_id} has not run; gradient test results are "
                          f"needed: run prereg gradient-test {study} --test {test_id}")
    folder = _check_sealed(study, t, seal, chain)
    base = t.baseline_of(plan.study.comparator)
    rows, _ = _summaries(read_batches(folder), [name], base, [], n_resamples=1, seed=plan.statistics.seed,
                         confidence=plan.statistics.confidence)
    return rows[0]["per_token"]


__all__ = ["efficiency_value", "gradient_results", "GradientResults", "NOT_RUN", "REFUSED", "read_batches", "Z_PASS"]
