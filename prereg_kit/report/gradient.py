"""The report's "Gradient tests" section: the paper's Table 6 layout, the a + b/k fit, the
conditions, ``gradient_tests.csv`` and a figure of per-token efficiency.

Table 6 (dense-rewards paper §2.4, §3.3) prints, per configuration, the
efficiency per update and per token relative to the baseline with 95% intervals, the alignment
outside V, and the positivity of E⟨u, ĥ⟩ as a z-score; here a last column gives the verdict of
each preregistered condition on that configuration. Results from ``prereg dry-run`` are marked
SYNTHETIC in the heading, the table and the figure.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ..analysis.gradient import NOT_RUN, REFUSED, Z_PASS, GradientResults
from ..errors import writing
from . import plots

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CSV = "gradient_tests.csv"
FIGURE = "gradient_tests.png"


def _num(x, fmt: str = "{:.2f}") -> str:
    return "—" if x is None or (isinstance(x, float) and not math.isfinite(x)) or pd.isna(x) else fmt.format(x)


def _with_ci(r: pd.Series, key: str) -> str:
    if pd.isna(r.get(key)):
        return "—"
    return f"{_num(r[key])} [{_num(r.get(f'{key}_ci_low'))}, {_num(r.get(f'{key}_ci_high'))}]"


def gradient_markdown(g: GradientResults) -> list[str]:
    """The section's lines (Table 6 layout, one table per test; the fit; the conditions)."""
    tag = " (SYNTHETIC: made-up vectors from `prereg dry-run`, not a measurement)" if g.synthetic else ""
    out = ["## Gradient tests" + tag, ""]
    if g.synthetic:
        out += ["> **SYNTHETIC.** These numbers come from made-up vectors written by `prereg dry-run`; they show "
                "the layout of the results, never a measurement.", ""]
    out += ["Efficiency (E⟨u,ĥ⟩)²/E‖u‖² relative to the baseline on the same batches, per update and per token "
            "(÷ mean tokens per update); alignment = mean cos(P⊥d, P⊥ĥ) outside the span V of the completions' "
            f"scores (— when the update lies in V); z = mean⟨u,ĥ⟩/SE, passed at z ≥ {Z_PASS:g}. Intervals: 95% "
            "percentile bootstrap over batches. Values recomputed from the sealed `batches.parquet`.", ""]
    for test, rows in g.table.groupby("test", sort=False):
        first = rows.iloc[0]
        if first["status"] == NOT_RUN:
            out += [f"**{test}**: not run (no sealed result; `prereg gradient-test STUDY --test {test}`).", ""]
            continue
        if first["status"] == REFUSED:
            out += [f"**{test}**: not read: its result fails its seal (see the notes).", ""]
            continue
        out += [f"**{test}** ({first['status']}; baseline {first['baseline']}, {int(first['batches'])} batches)", "",
                "| configuration | per update [95% CI] | per token [95% CI] | alignment | tokens / update | "
                "E⟨u,ĥ⟩ z | conditions |", "|---|---|---|---|---|---|---|"]
        for _, r in rows.iterrows():
            z = f"{_num(r['positivity_z'], '{:.1f}')} {'✓' if r['positivity_pass'] else '✗ (< 3)'}"
            out.append(f"| {r['configuration']} | {_with_ci(r, 'per_update')} | {_with_ci(r, 'per_token')} "
                       f"| {_with_ci(r, 'alignment')} | {_num(r['tokens_per_update'], '{:,.0f}')} | {z} "
                       f"| {r['conditions'] or '—'} |")
        fit = g.fit[g.fit["test"] == test] if len(g.fit) else g.fit
        for f in fit.itertuples():
            out += ["", f"a + b/k fit of E‖u_k‖² over {f.configurations} (k = {f.ks}): a = {f.a:.4g}, b = {f.b:.4g}; "
                    f"share of the second moment due to continuation sampling at k = {f.at_k:g}: {f.share:.1%} "
                    f"[{_num(f.share_ci_low, '{:.1%}')}, {_num(f.share_ci_high, '{:.1%}')}]; any reallocation of the "
                    f"continuations gains at most {_num(f.reallocation_bound)}× per update (1/(1 − share))."]
        out.append("")
    if len(g.conditions):
        out += ["Preregistered conditions:", ""]
        out += [f"- {c.test}: {c.text} — value {_num(c.value, '{:.3f}')}: **{c.verdict}**" for c in g.conditions.itertuples()]
        out.append("")
    out += [f"![per-token efficiency]({FIGURE})", ""] + [f"- {n}" for n in g.notes] + ([""] if g.notes else [])
    return out


def efficiency(g: GradientResults, *, ax=None, title: str | None = None, synthetic: bool = False) -> Figure:
    """Per-token efficiency with its 95% interval per configuration (rows: test · configuration),
    a line at 1 (the baseline) and one at each per-token condition's threshold; the legend below
    the panel. SYNTHETIC when ``synthetic`` or the results are a dry run's. With ``ax`` it draws
    on that panel and returns its figure."""
    t = g.table[~g.table["status"].isin([NOT_RUN, REFUSED])] if len(g.table) else g.table
    n = len(t)
    ax = plots.subplots(figsize=(7.5, max(2.6, 1.3 + 0.45 * n)))[1] if ax is None else ax
    ax.axvline(1.0, color="black", lw=0.8, label="baseline (1)")
    for i, (_, r) in enumerate(t.iterrows()):
        y = n - 1 - i
        lo, hi = r.get("per_token_ci_low"), r.get("per_token_ci_high")
        if pd.notna(lo) and pd.notna(hi):
            ax.plot([lo, hi], [y, y], color="#1f4e9c", lw=2)
        ax.plot([r["per_token"]], [y], "o", color="#1f4e9c")
    conds = g.conditions[g.conditions["metric"] == "per_token"] if len(g.conditions) else g.conditions
    lines: dict[tuple, list[str]] = {}  # one line per threshold, naming every condition drawn at it
    for c in conds.itertuples():
        lines.setdefault((c.bound, c.direction), []).append(f"{c.test} {c.configuration}")
    for (bound, direction), names in lines.items():
        ax.axvline(bound, color="#c0392b", ls="--", lw=1,
                   label=f"condition {direction} {bound:g} ({', '.join(names)})"[:90])
    ax.set_xlim(left=min(ax.get_xlim()[0], *(b for b, _ in lines)) if lines else None)
    ax.set_yticks(range(n), [f"{r['test']} · {r['configuration']}" for _, r in t.iloc[::-1].iterrows()])
    ax.set_ylim(-0.7, max(n, 1) - 0.3)
    ax.set_xlabel("per-token efficiency relative to the baseline (95% bootstrap CI)")
    plots.decorate(ax, title, synthetic or g.synthetic)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.55 / max(n, 1) - 0.08), fontsize=8, frameon=False)  # below: never over a row
    return ax.figure


def efficiency_figure(g: GradientResults, path: Path, *, title: str, synthetic: bool = False) -> list[Path]:
    """:func:`efficiency` written to ``path`` (PNG) and its PDF."""
    return plots.save_all(efficiency(g, title=title, synthetic=synthetic), path)


def write_gradient(g: GradientResults, out_dir: Path, *, title: str, synthetic: bool = False,
                   marks: dict[str, bool] | None = None) -> list[Path]:
    """``gradient_tests.csv`` (one row per test × configuration), ``gradient_fit.csv`` and
    ``gradient_conditions.csv`` when there are any, and the figure (PNG and PDF); the tables carry
    the report's ``marks`` as columns (``synthetic`` for a dry run's, ``exploratory``)."""
    written = []
    marks = {**({"synthetic": True} if synthetic else {}), **(marks or {})}
    for name, df in ((CSV, g.table), ("gradient_fit.csv", g.fit), ("gradient_conditions.csv", g.conditions)):
        if name == CSV or len(df):
            with writing(out_dir / name):
                df.assign(**marks).to_csv(out_dir / name, index=False)
            written.append(out_dir / name)
    written += efficiency_figure(g, out_dir / FIGURE, title=title, synthetic=synthetic)
    return written


__all__ = ["CSV", "efficiency", "efficiency_figure", "FIGURE", "gradient_markdown", "write_gradient"]
