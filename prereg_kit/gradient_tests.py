"""A study's gradient tests read from their sealed results: the tidy tables of the report.

For each ``[[gradient_tests]]`` entry whose result is sealed (``prereg_kit.gradient_seal``), the
per-batch inner products in ``gradient/<id>/batches.parquet`` are summarized again here — never
taken from the trainer — with the plan's ``[statistics]`` resamples, seed and confidence
(dense-rewards paper §2.4 L427-450, Appendix A L1932-1957, Table 6; extract §3.14):

- **alignment**: the mean over batches of cos(P⊥d_b, P⊥ĥ_b) = ⟨P⊥d,P⊥ĥ⟩ / √(‖P⊥d‖²‖P⊥ĥ‖²), NaN for
  a configuration whose update lies in V (outcome-only);
- **efficiency** (E⟨u,ĥ⟩)² / E‖u‖²; **per update**: over the baseline's on the same batches;
  **per token**: (efficiency / mean tokens per update) over the same ratio of the baseline;
- **positivity**: z = mean_b⟨u_b,ĥ_b⟩ / (sd/√B), passed at z ≥ 3;
- 95% percentile intervals from a bootstrap over batches (the same resampled batches for a
  configuration and its baseline);
- the **a + b/k fit** of E‖u_k‖² over the Monte-Carlo configurations in ``fit`` (C.3.1
  L2559-2600): the share (b/k)/(a + b/k) of the second moment due to continuation sampling at k,
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

from .errors import PreregError, ViolationError
from .gradient_seal import BATCHES_FILE, check_gradient_seals, GRADIENT_DIR, read_result_meta, sealed_tests
from .lock import read_chain
from .plan import GradientTest, Plan, resolve_plan_path
from .plan.gradient import credit_of

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
# The one place the summaries are computed; analyses.gradient's positivity, relative_efficiency,
# alignment_summary and continuation_fit take its place when they land (same formulas).


def _efficiency(d: np.ndarray, uu: np.ndarray) -> np.ndarray:
    """(mean ⟨u,ĥ⟩)² / mean ‖u‖² along the last axis (NaN where the second moment is 0)."""
    m2 = uu.mean(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(m2 > 0, d.mean(axis=-1) ** 2 / m2, np.nan)


def _ci(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    s = samples[np.isfinite(samples)]
    if not s.size:
        return np.nan, np.nan
    lo, hi = np.quantile(s, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(lo), float(hi)


def _cosines(g: pd.DataFrame) -> np.ndarray:
    den = g["perp_dd"].to_numpy(float) * g["perp_hh"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, g["perp_dh"].to_numpy(float) / np.sqrt(np.where(den > 0, den, 1.0)), np.nan)


def _summaries(frame: pd.DataFrame, configurations: list[str], baseline: str, fit: list[str], *,
               n_resamples: int, seed: int, confidence: float) -> tuple[list[dict], dict | None]:
    """Per configuration (in ``configurations`` order) its summaries against ``baseline``, and the
    a + b/k fit over ``fit`` (None without one). Batches are aligned by index; every statistic
    resamples the same batch indices."""
    wide = {c: g.sort_values("batch").set_index("batch") for c, g in frame.groupby("configuration")}
    for c in [*configurations, baseline, *fit]:
        if c not in wide:
            raise PreregError(f"configuration {c!r}: no rows in {BATCHES_FILE}")
    batches = wide[baseline].index
    for c in configurations:
        if not wide[c].index.equals(batches):
            raise PreregError(f"configuration {c!r}: its batches differ from the baseline {baseline!r}'s in {BATCHES_FILE}")
    B = len(batches)
    idx = np.random.default_rng(seed).integers(0, B, size=(n_resamples, B))
    col = lambda c, k: wide[c][k].to_numpy(float)  # noqa: E731
    bd, buu, btok = col(baseline, "dot_uh"), col(baseline, "uu"), col(baseline, "tokens")
    b_eff, b_eff_s = _efficiency(bd, buu), _efficiency(bd[idx], buu[idx])
    b_tok, b_tok_s = btok.mean(), btok[idx].mean(axis=1)
    rows = []
    for c in configurations:
        d, uu, tok = col(c, "dot_uh"), col(c, "uu"), col(c, "tokens")
        eff, eff_s = _efficiency(d, uu), _efficiency(d[idx], uu[idx])
        with np.errstate(divide="ignore", invalid="ignore"):
            pu, pu_s = eff / b_eff, eff_s / b_eff_s
            pt, pt_s = (eff / tok.mean()) / (b_eff / b_tok), (eff_s / tok[idx].mean(axis=1)) / (b_eff_s / b_tok_s)
        cos = _cosines(wide[c].reset_index())
        if np.isfinite(cos).any():
            cs = np.where(np.isfinite(cos[idx]), cos[idx], np.nan)
            with np.errstate(invalid="ignore"):
                al, al_s = float(np.nanmean(cos)), np.nanmean(cs, axis=1) if cs.size else cs
        else:
            al, al_s = np.nan, np.full(n_resamples, np.nan)
        sd = d.std(ddof=1)
        z = float(d.mean() / (sd / np.sqrt(B))) if sd > 0 else (np.inf * np.sign(d.mean()) if d.mean() else np.nan)
        rows.append({"configuration": c, "batches": B, "efficiency": float(eff), "per_update": float(pu),
                     **dict(zip(("per_update_ci_low", "per_update_ci_high"), _ci(pu_s, confidence))),
                     "per_token": float(pt), **dict(zip(("per_token_ci_low", "per_token_ci_high"), _ci(pt_s, confidence))),
                     "alignment": al, **dict(zip(("alignment_ci_low", "alignment_ci_high"), _ci(np.asarray(al_s), confidence))),
                     "tokens_per_update": float(tok.mean()), "mean_dot_uh": float(d.mean()), "mean_uu": float(uu.mean()),
                     "positivity_z": z, "positivity_pass": bool(z >= Z_PASS)})
    fit_row = None
    if fit:
        ks = np.array([int(wide[c]["mc_k"].iloc[0]) for c in fit], float)
        U = np.stack([col(c, "uu") for c in fit], axis=1)  # batches × fit configurations
        X = np.stack([np.ones_like(ks), 1 / ks], axis=1)
        at_k = 4.0 if 4 in ks else float(ks.max())

        def share(m: np.ndarray) -> np.ndarray:  # m: (..., configurations) means of ‖u_k‖²
            coef = np.linalg.lstsq(X, m.reshape(-1, len(ks)).T, rcond=None)[0]
            a, b = coef[0], coef[1]
            with np.errstate(divide="ignore", invalid="ignore"):
                return (b / at_k) / (a + b / at_k)

        a, b = np.linalg.lstsq(X, U.mean(axis=0), rcond=None)[0]
        sh, sh_s = float(share(U.mean(axis=0))[0]), share(U[idx].mean(axis=1))
        lo, hi = _ci(sh_s, confidence)
        fit_row = {"configurations": ", ".join(fit), "ks": ", ".join(f"{k:g}" for k in ks), "a": float(a), "b": float(b),
                   "at_k": at_k, "share": sh, "share_ci_low": lo, "share_ci_high": hi,
                   "reallocation_bound": 1 / (1 - sh) if sh < 1 else np.inf}
    return rows, fit_row


# ------------------------------------------------------------------------------- the study


def _check_sealed(study: Path, t: GradientTest, seal: dict[str, Any] | None) -> Path:
    """The result folder of a sealed test whose files match their seal; a violation otherwise."""
    if seal is None:
        raise PreregError(f"gradient test {t.id}: no sealed result: run `prereg gradient-test {study} --test {t.id}`")
    folder = study / seal["result"]
    rep = check_gradient_seals(study, read_chain(study))
    bad = [v for v in rep.violations if v.startswith(seal["result"] + "/") or v.startswith(seal["result"] + ":")]
    if bad:
        raise ViolationError(f"gradient test {t.id}: {bad[0]}")
    return folder


def gradient_results(study_dir: str | Path, plan: Plan, *, n_resamples: int | None = None,
                     exploratory: bool = False) -> GradientResults:
    """Every gradient test of ``plan`` read from the study's sealed results (docstring above).
    ``exploratory``: a result that fails its seal is a row set with status ``"refused"`` and the
    reason in the notes, instead of an error."""
    study = resolve_plan_path(study_dir).parent
    st = plan.statistics
    nres = n_resamples or st.bootstrap_resamples
    seals = sealed_tests(read_chain(study)) if plan.gradient_tests else {}
    rows, fits, conds, notes, synthetic = [], [], [], [], False
    for t in plan.gradient_tests:
        base = t.baseline_of(plan.study.comparator)
        seal, status, folder = seals.get(t.id), NOT_RUN, None
        if seal is not None:
            try:
                folder = _check_sealed(study, t, seal)
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
                         "credit_rule": credit_of(plan.resolved_config(r["configuration"]))["rule"]
                         if r["configuration"] in plan.configurations else "",
                         "conditions": "; ".join(f"{x['text']}: {x['verdict']}" for x in mine)})
        if fit_row is not None:
            fits.append({"test": t.id, **fit_row})
    return GradientResults(pd.DataFrame(rows), pd.DataFrame(fits), pd.DataFrame(conds), synthetic, notes)


def efficiency_value(study_dir: str | Path, plan: Plan, ref: str) -> float:
    """The per-token efficiency estimate that ``ref`` (``"G1:critic_td"``: test id and one of its
    configurations) names, from the test's sealed result; a one-line error when the test has not
    run, the result was edited, or ``ref`` names no test configuration."""
    test_id, sep, name = ref.partition(":")
    t = next((x for x in plan.gradient_tests if x.id == test_id), None)
    if not sep or t is None:
        raise PreregError(f"efficiency {ref!r}: expected TEST:configuration with TEST a [[gradient_tests]] id "
                          f"(have: {', '.join(x.id for x in plan.gradient_tests) or 'none'})")
    if name not in t.configurations:
        raise PreregError(f"efficiency {ref!r}: {name!r} is not a configuration of gradient test {test_id} "
                          f"(have: {', '.join(t.configurations)})")
    study = resolve_plan_path(study_dir).parent
    seal = sealed_tests(read_chain(study)).get(test_id)
    if seal is None:
        raise PreregError(f"efficiency {ref!r}: gradient test {test_id} has not run; gradient test results are "
                          f"needed: run prereg gradient-test {study} --test {test_id}")
    folder = _check_sealed(study, t, seal)
    base = t.baseline_of(plan.study.comparator)
    rows, _ = _summaries(read_batches(folder), [name], base, [], n_resamples=1, seed=plan.statistics.seed,
                         confidence=plan.statistics.confidence)
    return rows[0]["per_token"]


__all__ = ["efficiency_value", "gradient_results", "GradientResults", "NOT_RUN", "REFUSED", "read_batches", "Z_PASS"]
