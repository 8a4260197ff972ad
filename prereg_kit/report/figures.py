"""The report's figures of one analysis (``prereg_kit.report.plots``): the forest plot of every contrast,
the accuracy curves, and the primary differences, each drawn along the axis its contrast is read
on — matched generated tokens, training time or updates — with the reading the table makes marked
on it (the point and the table's Δ [95% CI]), so the figure and the table show one reading. Every
title is marked SYNTHETIC (a dry run) or EXPLORATORY (an analysis whose preregistration checks
failed) when the analysis is."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from . import plots

if TYPE_CHECKING:
    from ..analysis.analyze import Analysis


def is_target(row) -> bool:
    """A to-target row (Table 11): a share of the budget, read against 1, not a difference."""
    t = row.get("target")
    return t is not None and not pd.isna(t)


def title(a: Analysis, text: str) -> str:
    """A figure title of ``a``'s report: EXPLORATORY in front when its checks failed (SYNTHETIC is
    added where the figure is drawn, with its watermark)."""
    return plots.marked(text, False, exploratory=a.exploratory)


def difference_panels(a: Analysis) -> list[plots.DifferencePanel]:
    """The difference figure's panels: the primary seed-paired contrasts that were read (else the
    first seed-paired one), one panel per axis they are read on, each contrast marked where the
    table reads it: k·B tokens (the grid ends there), the seeds' mean T* or control time, the
    treatment's mean updates."""
    plan = a.plan
    rows = a.contrasts.set_index("contrast") if len(a.contrasts) else None
    read = [c for c in plan.contrasts if c.design == "paired" and c.reading_point.kind in plots.READ_AXIS
            and rows is not None and c.id in rows.index and rows.loc[c.id].get("status") != "not read"
            and not is_target(rows.loc[c.id])]
    chosen = [c for c in read if c.tier == "primary"] or read[:1]
    budget = plan.budgets()
    panels: dict[str, plots.DifferencePanel] = {}
    for c in chosen:
        rp = c.reading_point
        axis = plots.READ_AXIS[rp.kind]
        until = rp.at_budget(budget).tokens if axis == "tokens" and isinstance(budget, float) else None
        at = a.per_seed.loc[a.per_seed["contrast"] == c.id, "read_at"].to_numpy(dtype="float64")
        r = rows.loc[c.id]
        mark = plots.TableMark(float(np.nanmean(at)) if np.isfinite(at).any() else math.nan, float(r["mean"]),
                               float(r["ci_low"]), float(r["ci_high"]),
                               rp.at_budget(budget).describe().replace("time T*", "the seeds' mean T*"))
        p = panels.setdefault(axis, plots.DifferencePanel(axis, [], until, {}))
        p.pairs.append((c.id, c.treatment, c.control))
        p.marks[c.id] = mark  # type: ignore[index]
        lo, hi = r.get("margin_low", math.nan), r.get("margin_high", math.nan)
        if not (pd.isna(lo) or pd.isna(hi)):
            p.margins[c.id] = (float(lo), float(hi))  # type: ignore[index]
        if until is not None and (p.until is None or until > p.until):
            panels[axis] = plots.DifferencePanel(axis, p.pairs, until, p.marks, p.margins)
    return list(panels.values()) or [plots.DifferencePanel("time", [])]


def report_figures(a: Analysis, out_dir: Path) -> list[Path]:
    """Write the forest plot, the accuracy curves and the difference figure of ``a`` into
    ``out_dir`` (each a PNG and a PDF); return the files."""
    plan = a.plan
    margin = float(a.contrasts["margin_high"].max()) if len(a.contrasts) else plan.statistics.margin
    syn = a.synthetic
    one_budget = all(c.budget is None for c in plan.configurations.values())
    shown = a.contrasts[[not is_target(r) and r.get("status") != "not read" for _, r in a.contrasts.iterrows()]]
    return [
        *plots.forest_plot(shown, a.per_seed, out_dir / "forest.png", margin=margin, synthetic=syn,
                           title=title(a, f"{plan.study.id}: every contrast (treatment − control) as the table reads it")),
        *plots.accuracy_curves(a.curves, out_dir / "accuracy.png", budget_tokens=plan.budget.tokens if one_budget else None,
                               title=title(a, f"{plan.study.id}: {plan.evaluation.metric} on {plan.evaluation.primary}"),
                               synthetic=syn),
        *plots.difference_panels(a.curves, difference_panels(a), out_dir / "difference_vs_time.png", margin=margin,
                                 synthetic=syn, title=title(a, f"{plan.study.id}: primary differences, read as the table reads them")),
    ]
