"""A contrast's own test when the plan names another than the paired t, the robustness rows
beside it, the flag on a contrast whose verdict changes under one of them, effect sizes and a
one-line description of each row.

Each test reads the contrast's per-unit differences ``d`` (fractions) under its kind:

- ``t``: paired t (superiority), TOST (equivalence), one-sided t against −m (non-inferiority),
  minimal-effect test (``stats.minimal_effect_paired``) — the papers' tests;
- ``wilcoxon``: signed-rank test with the Hodges–Lehmann estimate and its interval, R's rules
  (``stats.wilcoxon_paired``; the interval's attained level in ``ci_level``); equivalence by ``stats.wilcoxon_tost``; non-inferiority and
  minimal effect by the one-sided signed-rank tests of ``d`` shifted by the bounds;
- ``sign-flip``: the exact sign-flip test of the mean and its inverted interval
  (``stats.sign_flip_test``, ``stats.sign_flip_ci``), equivalence, non-inferiority and minimal
  effect as one-sided tests against the bounds;
- ``bootstrap-bca`` / ``bootstrap-studentized``: ``stats.seed_bootstrap`` with that method; its
  two-sided p, its TOST p at the margin, its lower one-sided p for non-inferiority.

Superiority intervals are two-sided at the plan's confidence; equivalence, non-inferiority and
minimal-effect ones are the 1−2α intervals their verdicts read. A robustness row of a primary
contrast is read with the family's adjustment, the contrast's p replaced by the row's p (the
verdict the family would have given had the plan named that test).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .. import stats
from ..margin import margin_bounds, noninferiority_margin
from ..plan import Contrast, Plan

MARK = "‡"  # beside a verdict that changes under a robustness row


def column(test: str) -> str:
    """The column stem of a robustness row: ``robust_sign_flip`` for ``sign-flip``."""
    return "robust_" + test.replace("-", "_")


def reading_of(test: str, d: np.ndarray, kind: str, *, low: float, high: float, alpha: float, confidence: float,
                 alternative: str = "two-sided", n_resamples: int = 10_000, seed: int = 0) -> dict:
    """The p-value, estimate and interval of one test of ``d`` under ``kind`` (module docstring)."""
    m = -low  # the non-inferiority margin: −m is the lower bound
    # the level an interval is computed at; Wilcoxon's attains its own (``ci_level``)
    level = confidence if kind == "superiority" else 1 - 2 * alpha

    def _out(p: float, estimate: float, lo: float, hi: float, ci_level: float = level) -> dict:
        return {"p": float(p), "estimate": float(estimate), "ci_low": float(lo), "ci_high": float(hi),
                "ci_level": float(ci_level)}

    if test == "t":
        if kind == "superiority":
            r = stats.paired_t(d, confidence=confidence, alternative=alternative)
            return _out(r.p, r.mean, r.ci_low, r.ci_high)
        if kind == "equivalence":
            r = stats.tost_paired(d, margin=(low, high), alpha=alpha)
            return _out(r.p, float(np.mean(d)), r.ci_low, r.ci_high)
        if kind == "non-inferiority":
            r = stats.noninferiority_paired(d, margin=m, alpha=alpha)
            return _out(r.p, float(np.mean(d)), r.lower, math.inf)
        r = stats.minimal_effect_paired(d, margin=(low, high), alpha=alpha)
        return _out(r.p, r.mean, r.ci_low, r.ci_high)
    if test == "wilcoxon":
        if kind == "superiority":
            r = stats.wilcoxon_paired(d, confidence, alternative=alternative)
            return _out(r.p, r.hl, *r.ci, r.ci_level)
        w = stats.wilcoxon_paired(d, 1 - 2 * alpha)  # the interval wilcoxon_tost reads too
        if kind == "equivalence":
            r = stats.wilcoxon_tost(d, margin=(low, high), alpha=alpha)
            return _out(r.p, r.hl, *r.ci, w.ci_level)
        if kind == "non-inferiority":
            return _out(stats.wilcoxon_paired(d - low, alternative="greater").p, w.hl, w.ci[0], math.inf, w.ci_level)
        p = min(stats.wilcoxon_paired(d - low, alternative="less").p, stats.wilcoxon_paired(d - high, alternative="greater").p)
        return _out(p, w.hl, *w.ci, w.ci_level)
    if test == "sign-flip":
        def flip(null: float, alt: str) -> float:
            return stats.sign_flip_test(d, null=null, alternative=alt, n_resamples=n_resamples, seed=seed).p
        if kind == "superiority":
            ci = stats.sign_flip_ci(d, confidence, n_resamples=n_resamples, seed=seed)
            return _out(flip(0.0, alternative), ci.mean, ci.ci_low, ci.ci_high)
        ci = stats.sign_flip_ci(d, 1 - 2 * alpha, n_resamples=n_resamples, seed=seed)
        if kind == "equivalence":
            return _out(max(flip(low, "greater"), flip(high, "less")), ci.mean, ci.ci_low, ci.ci_high)
        if kind == "non-inferiority":
            return _out(flip(low, "greater"), ci.mean, ci.ci_low, math.inf)
        return _out(min(flip(low, "less"), flip(high, "greater")), ci.mean, ci.ci_low, ci.ci_high)
    method = test.removeprefix("bootstrap-")
    if kind == "superiority":
        b = stats.seed_bootstrap(d, n_resamples=n_resamples, confidence=confidence, seed=seed, method=method)
        return _out(b.p, b.mean, b.ci_low, b.ci_high)
    b = stats.seed_bootstrap(d, n_resamples=n_resamples, confidence=1 - 2 * alpha, seed=seed, method=method,
                             margin=(low, high))
    if kind == "equivalence":
        return _out(b.p_tost, b.mean, b.ci_low, b.ci_high)
    if kind == "non-inferiority":
        return _out(b.p_tost_lower, b.mean, b.ci_low, math.inf)
    raise ValueError(f"{test} has no {kind} test")


def robust_columns(d: np.ndarray, c: Contrast, plan: Plan, *, n_resamples: int) -> dict:
    """The columns a paired-type contrast adds beside the paired-t ones: its ``test``; the named
    test's ``test_p``, ``test_estimate``, ``test_ci_low``, ``test_ci_high`` (and ``tested_p``)
    when it is not the t or the kind is minimal-effect; ``robust_<test>_p``/``_estimate``/
    ``_ci_low``/``_ci_high`` per robustness row; and Cohen's ``d_z`` and Hedges' ``g_z`` with
    their noncentral-t intervals (``stats.effect_size_paired``; NaN below 3 units)."""
    st = plan.statistics
    margin = plan.margin_of(c)
    lo, hi = margin_bounds(margin)
    if c.kind == "non-inferiority":
        lo, hi = -noninferiority_margin(margin), noninferiority_margin(margin)
    kw = dict(low=lo, high=hi, alpha=st.alpha, confidence=st.confidence, alternative=c.alternative,
              n_resamples=n_resamples, seed=st.seed)
    out: dict = {"test": c.test, **effect_sizes(d, st.confidence)}
    r = reading_of(c.test, d, c.kind, **kw)
    if c.test != "t" or c.kind == "minimal-effect":
        out.update({f"test_{k}": v for k, v in r.items()}, tested_p=r["p"])
    out["result_in_words"] = in_words(c.test, d, c.kind, r, **kw)
    for t in c.robustness:
        out.update({f"{column(t)}_{k}": v for k, v in reading_of(t, d, c.kind, **kw).items()})
    return out


def in_words(test: str, d: np.ndarray, kind: str, reading: dict, *, low: float, high: float, alpha: float,
             confidence: float, alternative: str = "two-sided", n_resamples: int = 10_000, seed: int = 0) -> str:
    """One sentence on the contrast's own test before any family adjustment (``stats.describe``;
    for the bootstraps and the shifted one-sided tests, its estimate, interval and p)."""
    result = None
    if test == "t":
        result = {"superiority": lambda: stats.paired_t(d, confidence=confidence, alternative=alternative),
                  "equivalence": lambda: stats.tost_paired(d, margin=(low, high), alpha=alpha),
                  "non-inferiority": lambda: stats.noninferiority_paired(d, margin=-low, alpha=alpha),
                  "minimal-effect": lambda: stats.minimal_effect_paired(d, margin=(low, high), alpha=alpha)}[kind]()
    elif test == "wilcoxon" and kind in ("superiority", "equivalence"):
        result = (stats.wilcoxon_paired(d, confidence, alternative=alternative) if kind == "superiority"
                  else stats.wilcoxon_tost(d, margin=(low, high), alpha=alpha))
    elif test == "sign-flip" and kind == "superiority":
        result = stats.sign_flip_test(d, alternative=alternative, n_resamples=n_resamples, seed=seed)
    if result is not None:
        return stats.describe(result, alpha)
    level = f"{100 * (confidence if kind == 'superiority' else 1 - 2 * alpha):g}%"
    p = reading["p"]
    return (f"{test} {kind} test: estimate {reading['estimate']:+.4f}, {level} interval [{_end(reading['ci_low'])}, "
            f"{_end(reading['ci_high'])}]{'' if kind == 'superiority' else f', bounds [{low:+.4f}, {high:+.4f}]'}, "
            f"{f'p = {p:.3g}' if p >= 0.001 else 'p < 0.001'} (before any family adjustment).")


def effect_sizes(d: np.ndarray, confidence: float) -> dict:
    """``d_z``, ``g_z`` and their intervals, NaN where they are undefined (n < 3)."""
    try:
        e = stats.effect_size_paired(d, confidence)
    except ValueError:
        return dict.fromkeys(("d_z", "d_z_ci_low", "d_z_ci_high", "g_z", "g_z_ci_low", "g_z_ci_high"), np.nan)
    return {"d_z": e.d_z, "d_z_ci_low": e.d_z_ci[0], "d_z_ci_high": e.d_z_ci[1],
            "g_z": e.g_z, "g_z_ci_low": e.g_z_ci[0], "g_z_ci_high": e.g_z_ci[1]}


def read(kind: str, p: float, estimate: float, ci_low: float, ci_high: float, margin_low: float,
         margin_high: float, alpha: float) -> tuple[str, str]:
    """The reading of one test (``stats.verdict``) and why. Minimal effect: a *gain* (or
    *deficit*) when ``p < α`` — the 1−2α interval lies wholly above ``margin_high`` (below
    ``margin_low``) — else *inconclusive*."""
    if kind == "minimal-effect":
        sig = p < alpha
        vs = f"{p:.3g} {'<' if sig else '≥'} {alpha}"
        if sig and ci_low > margin_high:
            return "gain", f"minimal-effect p = {vs}; interval above +{margin_high:g}"
        if sig and ci_high < margin_low:
            return "deficit", f"minimal-effect p = {vs}; interval below {margin_low:g}"
        return "inconclusive", f"minimal-effect p = {vs}"
    if kind == "superiority":
        v = stats.verdict("superiority", p=p, estimate=estimate, alpha=alpha)
    elif kind == "equivalence":
        v = stats.verdict("equivalence", p=p, ci_low=ci_low, ci_high=ci_high, margin=[margin_low, margin_high], alpha=alpha)
    else:
        v = stats.verdict("non-inferiority", p=p, ci_low=ci_low, margin=-margin_low, alpha=alpha)
    return v.reading, v.reason


def own_reading(r: pd.Series, p: float, alpha: float) -> tuple[str, str] | None:
    """The verdict of a row read by another test than the t, or of a minimal-effect row; None
    when the row takes the papers' reading (``verdicts.adjust_and_read``)."""
    test = r.get("test", "t")
    if (not isinstance(test, str) or test == "t") and r["kind"] != "minimal-effect":
        return None
    reading, reason = read(r["kind"], p, r["test_estimate"], r["test_ci_low"], r["test_ci_high"],
                           r["margin_low"], r["margin_high"], alpha)
    return reading, (f"{test}: {reason}" if isinstance(test, str) and test != "t" else reason)


def flag_changes(df: pd.DataFrame, plan: Plan) -> pd.DataFrame:
    """Each robustness row read (``robust_<test>_p_adjusted``, ``robust_<test>_verdict``) and
    ``verdict_changes_under``: the robustness tests, ``"; "``-joined, whose verdict differs from
    the contrast's own. Adds nothing to a plan that names no robustness rows."""
    tests = list(dict.fromkeys(t for c in plan.contrasts for t in c.robustness))
    if not tests:
        return df
    df = df.copy()
    changes = {i: [] for i in df.index}
    for t in tests:
        col = column(t)
        adj, verdicts = [], []
        for i, r in df.iterrows():
            if f"{col}_p" not in df or pd.isna(r.get(f"{col}_p")) or r.get("status") == "not read":
                adj.append(np.nan)
                verdicts.append("")
                continue
            fam = plan.family_of(r["contrast"])
            p = r[f"{col}_p"]
            if fam is not None and r["tier"] == "primary":
                rows = df["contrast"].isin(fam.members)
                ps = df.loc[rows, "tested_p"].copy()
                ps[i] = p
                p = float(pd.Series(stats.adjust(ps.to_numpy(), fam.method), index=ps.index)[i])
            alpha = fam.alpha if fam is not None else plan.statistics.alpha
            v, _ = read(r["kind"], p, r[f"{col}_estimate"], r[f"{col}_ci_low"], r[f"{col}_ci_high"],
                        r["margin_low"], r["margin_high"], alpha)
            adj.append(p)
            verdicts.append(v)
            if v != r["verdict"]:
                changes[i].append(t)
        df[f"{col}_p_adjusted"] = adj
        df[f"{col}_verdict"] = verdicts
    df["verdict_changes_under"] = ["; ".join(changes[i]) for i in df.index]
    return df


def flagged(df: pd.DataFrame) -> pd.DataFrame:
    """The rows whose verdict changes under a robustness row."""
    if "verdict_changes_under" not in df:
        return df.iloc[:0]
    return df[df["verdict_changes_under"].fillna("").astype(str) != ""]


def flag_lines(df: pd.DataFrame) -> list[str]:
    """The line under the report's contrast table naming each flagged contrast, or nothing."""
    rows = flagged(df)
    if not len(rows):
        return []
    what = "; ".join(f"{r['contrast']} ({_changed(r)})" for _, r in rows.iterrows())
    return [f"{MARK} The verdict changes under a robustness test named in the plan: {what}.", ""]


def _changed(r: pd.Series) -> str:
    return ", ".join(f"{t}: {r[column(t) + '_verdict']}" for t in r["verdict_changes_under"].split("; "))


def robustness_table(df: pd.DataFrame, format_p, *, confidence: float = 0.95, alpha: float = 0.05) -> list[str]:
    """Markdown rows: each contrast's own test and each robustness row beside it (p, adjusted p
    for primary contrasts, estimate with interval, the interval's level, verdict). The level is
    the one the interval attains where the test reports it (Wilcoxon's Walsh interval: 93.8% for a
    95% interval of 5 seeds), else the level it is computed at (``confidence`` for superiority,
    1−2α otherwise)."""
    cols = [c[:-len("_verdict")] for c in df.columns if c.startswith("robust_") and c.endswith("_verdict")]
    if not cols:
        return []
    out = ["### Robustness", "", "| contrast | test | p | adjusted p | estimate [interval] | level | verdict |",
           "|---|---|---|---|---|---|---|"]
    for _, r in df.iterrows():
        nominal = confidence if r["kind"] == "superiority" else 1 - 2 * alpha
        if any(r.get(f"{col}_verdict") for col in cols):  # the contrast's own test first
            lo, hi = _own_interval(r)
            est = r["test_estimate"] if isinstance(r.get("test"), str) and r["test"] != "t" else r["mean"]
            level = r.get("test_ci_level", np.nan)
            out.append(f"| {r['contrast']} | {r.get('test') or 't'} (the contrast's) | {format_p(r['tested_p'])} "
                       f"| {format_p(r['p_adjusted']) if r['tier'] == 'primary' else '—'} | {est:+.3f} [{_end(lo)}, {_end(hi)}] "
                       f"| {_level(nominal if pd.isna(level) else level)} | {r['verdict']} |")
        for col in cols:
            if not r.get(f"{col}_verdict"):
                continue
            est = f"{r[f'{col}_estimate']:+.3f} [{_end(r[f'{col}_ci_low'])}, {_end(r[f'{col}_ci_high'])}]"
            mark = f" {MARK}" if r[f"{col}_verdict"] != r["verdict"] else ""
            out.append(f"| {r['contrast']} | {col.removeprefix('robust_').replace('_', '-')} | {format_p(r[f'{col}_p'])} "
                       f"| {format_p(r[f'{col}_p_adjusted']) if r['tier'] == 'primary' else '—'} | {est} "
                       f"| {_level(r.get(f'{col}_ci_level', nominal))} | {r[f'{col}_verdict']}{mark} |")
    return out + [""]


def _level(x: float) -> str:
    """``93.8%``; ``—`` where there is no interval (level 0 or missing)."""
    return "—" if pd.isna(x) or x <= 0 else f"{100 * x:.3g}%"


def _own_interval(r: pd.Series) -> tuple[float, float]:
    """The interval the contrast's own verdict reads."""
    if (isinstance(r.get("test"), str) and r["test"] != "t") or r["kind"] == "minimal-effect":
        return r["test_ci_low"], r["test_ci_high"]
    return {"equivalence": (r["tost_ci_low"], r["tost_ci_high"]),
            "non-inferiority": (r["ni_lower"], math.inf)}.get(r["kind"], (r["ci_low"], r["ci_high"]))


def _end(x: float) -> str:
    return "n/a" if pd.isna(x) else "−∞" if x == -math.inf else "+∞" if x == math.inf else f"{x:+.3f}"


def json_lists(records: list[dict]) -> list[dict]:
    """``verdict_changes_under`` as a list in results.json (a ``"; "``-joined text in the CSV)."""
    for r in records:
        if "verdict_changes_under" in r:
            r["verdict_changes_under"] = [t for t in str(r["verdict_changes_under"] or "").split("; ") if t]
    return records
