"""The report's part for ``at = "extrapolated"`` contrasts (dense-rewards paper §3.3): one figure
per contrast — the mean over seeds of the treatment's observed curve, the control's curve read at
e·t (the extrapolation) and the control's own curve, against the treatment's tokens t, with the
usable evaluations (e·t ≤ B) shaded — and the note the contrast table carries."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..readings.extrapolation import HEURISTIC, Extrapolation
from .plots import decorate, legend_outside, marked, save_all, subplots, token_unit, tokens_label

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..analysis.analyze import Analysis


def extrapolation(x: Extrapolation, *, ax=None, title: str | None = None, treatment: str = "treatment",
                  control: str = "control", synthetic: bool = False) -> Figure:
    """Observed, extrapolated and control accuracy (mean over seeds) against the treatment's tokens;
    the span of usable evaluations shaded, the extrapolation drawn only where it is defined. With
    ``ax`` it draws on that panel and returns its figure; the legend sits outside, to the right."""
    m = x.points.groupby("eval_index", sort=True).agg(tokens=("tokens", "first"), observed=("observed", "mean"),
                                                       extrapolated=("extrapolated", "mean"), control=("control", "mean"),
                                                       usable=("usable", "first"))
    ax = subplots(figsize=(9.5, 4.2))[1] if ax is None else ax
    div, unit = token_unit(max(float(m["tokens"].max()), float(x.last_tokens)) if len(m) else 0.0)
    first = float(m.loc[m["usable"], "tokens"].min())
    tok = m["tokens"].to_numpy() / div
    ax.axvspan(first / div, x.last_tokens / div, color="#e6eef8", lw=0, label=f"usable: e·t ≤ B ({x.n_usable} evaluations)")
    ax.plot(tok, m["observed"], "o-", color="#1f4e9c", label=f"{treatment} (observed)")
    ext = m["extrapolated"].to_numpy()
    ax.plot(tok[np.isfinite(ext)], ext[np.isfinite(ext)], "s--", color="#c0392b",
            label=f"{control} at e·t (extrapolated, e = {x.e:.3g})")
    ax.plot(tok, m["control"], "^:", color="#555555", label=f"{control} (observed)")
    ax.set_xlabel(tokens_label(unit, f"{treatment}'s generated tokens t"))
    ax.set_ylabel("accuracy (mean over seeds)")
    decorate(ax, title, synthetic, fontsize=10)
    legend_outside(ax)
    return ax.figure


def extrapolation_figure(x: Extrapolation, path: Path, *, title: str, treatment: str, control: str,
                         synthetic: bool = False) -> list[Path]:
    """:func:`extrapolation` written to ``path`` (PNG) and its PDF."""
    return save_all(extrapolation(x, title=title, treatment=treatment, control=control, synthetic=synthetic), path)


def extrapolation_figures(a: Analysis, out_dir: Path) -> list[Path]:
    """One figure per read extrapolated contrast, ``extrapolated-<id>.png`` and ``.pdf`` (SYNTHETIC
    when the analysis is a dry run's)."""
    out = []
    for cid, x in a.extrapolations.items():
        c = a.plan.contrast(cid)
        out += extrapolation_figure(x, out_dir / f"extrapolated-{cid}.png", treatment=c.treatment, control=c.control,
                                    title=marked(f"{a.plan.study.id} {cid}: observed vs extrapolated (e = {x.e:.3g})",
                                                 False, exploratory=a.exploratory),
                                    synthetic=a.synthetic)
    return out


def extrapolation_notes(a: Analysis) -> list[str]:
    """The lines under the contrast table when some contrast is read at ``extrapolated``."""
    if not any(c.reading_point.kind == "extrapolated" for c in a.plan.contrasts):
        return []
    return [f"*{HEURISTIC}.* An extrapolated row's Δ is, per seed, the mean over the usable evaluations "
            "(e·t ≤ B) of the observed accuracy minus the control's curve read at e·t; the predicted lead is the "
            "extrapolation minus the control at t, the observed lead the observed accuracy minus the control at t.", ""] + \
        [f"![extrapolation {cid}](extrapolated-{cid}.png)" for cid in a.extrapolations] + [""]
