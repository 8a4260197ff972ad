"""Figures of a study's report (matplotlib): forest plot, accuracy curves, difference over time.

Figures are ``matplotlib.figure.Figure`` objects made by :func:`subplots`, not through pyplot: no
backend is selected and nothing global changes when this module is imported or a figure is drawn.

Each figure has a function that draws it and returns its ``Figure``; given ``ax=`` it draws on
that axes (a notebook's own subplot) and returns ``ax.figure`` without laying out, saving or
closing it. ``synthetic=True`` (a ``prereg dry-run``) marks the title and watermarks every panel.

- :func:`forest` — every contrast: mean with its 95% CI, per-seed differences as dots, the
  margin band, each contrast's own where they differ (dense-rewards paper, Figures 7–8);
- :func:`accuracy` — accuracy against generated tokens or training time (one panel) per
  configuration, mean over seeds with a min–max band;
- :func:`difference` — treatment − control against matched generated tokens, training time or
  updates, per-seed curves interpolated onto one grid, mean and 95% t band (dense-rewards
  paper, Figure 3's form); given the table's readings (:class:`TableMark`), each contrast's reading point and its
  Δ [95% CI] as the table reads it are marked on the curve.

Every band, line and marker has a legend entry; legends sit outside the panel (to its right, or
below it), so they cover no data; laid out (``tight_layout`` or ``layout="constrained"``), the
figure makes room for them. The report's files are written by :func:`forest_plot`,
:func:`accuracy_curves` (both panels) and :func:`difference_panels` (one panel per axis the
primary contrasts are read on), each as a PNG and a PDF with the same stem (:func:`save_all`).

The module runs past 500 lines (about 530) because it is one public module, ``pk.plots``: every
figure a user draws in a notebook and the helpers they share (axes, legends, marks, units).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from scipy.special import stdtrit

from ..errors import writing

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn, not with the report
    from matplotlib.figure import Figure

SYNTHETIC = "SYNTHETIC (prereg dry-run)"
EXPLORATORY = "EXPLORATORY"  # an analysis whose preregistration checks failed (prereg analyze --exploratory)
TIER_COLOR = {"primary": "#1f4e9c", "secondary": "#4a8c3a", "exploratory": "#8a8a8a"}
BAND = "band: min–max over seeds"  # what an accuracy line's band is
VECTOR = ".pdf"  # the vector copy written beside every PNG


def subplots(nrows: int = 1, ncols: int = 1, **kw):
    """A figure and its axes, as ``pyplot.subplots`` returns them, on a figure pyplot never sees
    (``layout="constrained"`` gives it room for legends outside its panels, as pyplot's does)."""
    from matplotlib.figure import Figure  # matplotlib only when something is drawn

    fig = Figure(figsize=kw.pop("figsize", None), layout=kw.pop("layout", None))
    return fig, fig.subplots(nrows, ncols, **kw)


def save(fig, path: Path, *, dpi: int = 120, rect: tuple[float, float, float, float] | None = None) -> Path:
    """Lay out (``rect``: the area the axes may fill, leaving room for a suptitle) and write a
    figure to ``path`` in the format its suffix names; return the path (creating the folder).
    The figure belongs to no pyplot registry, so nothing keeps it once the caller drops it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout(rect=rect)
    with writing(path):
        fig.savefig(path, dpi=dpi, bbox_inches="tight", metadata=_metadata(path))  # long titles and labels are never cut off
    return path


def _metadata(path: Path) -> dict | None:
    """A PDF without its creation date, so that the same figure gives the same bytes on every
    run (a PNG carries no date)."""
    return {"CreationDate": None} if path.suffix.lower() == VECTOR else None


def save_all(fig, path: Path, *, dpi: int = 120, rect: tuple[float, float, float, float] | None = None) -> list[Path]:
    """Write ``fig`` as the PNG ``path`` and as a PDF beside it (same stem); return both paths.
    Laid out as :func:`save` lays out; both files show the one tight box :func:`layout` measures
    (the PNG pixel for pixel what :func:`save` writes)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    box = layout(fig, dpi=dpi, rect=rect)
    with writing(path):
        fig.savefig(path, dpi=dpi, bbox_inches=box)
    pdf = path.with_suffix(VECTOR)
    with writing(pdf):
        fig.savefig(pdf, bbox_inches=box, metadata=_metadata(pdf))
    return [path, pdf]


def layout(fig, *, dpi: int = 120, rect: tuple[float, float, float, float] | None = None):
    """Lay the figure out tightly (``Figure.tight_layout(rect=rect)``) and return the box, in
    inches, that ``savefig(bbox_inches="tight")`` at ``dpi`` saves: every artist's extent plus
    ``savefig.pad_inches``, so long titles and labels are never cut off.

    Why not ``bbox_inches="tight"`` on each save: such a save draws the figure once to measure
    it and once to write it, so a PNG and a PDF cost four draws; here the box is measured once
    (``Figure.get_tightbbox`` places ticks, titles and legends itself, without a draw) and each
    file is drawn once. The layout runs through a ``TightLayoutEngine`` the figure is not given,
    so no layout engine is left for ``savefig`` to run again; a figure that has one is laid out
    by ``Figure.tight_layout``, as before. tests/report/test_figure_files.py checks every report
    figure's PNG against the plain ``savefig(bbox_inches="tight")``, pixel for pixel."""
    import matplotlib as mpl
    from matplotlib.layout_engine import TightLayoutEngine

    if fig.get_layout_engine() is None:
        TightLayoutEngine(rect=rect).execute(fig)
    else:
        fig.tight_layout(rect=rect)
    before = fig.dpi
    fig.dpi = dpi  # measured at the PNG's resolution, as savefig measures it
    try:
        box = fig.get_tightbbox()
    finally:
        fig.dpi = before
    pad = mpl.rcParams["savefig.pad_inches"]
    return box.padded(pad, pad)


def time_unit(seconds: float) -> tuple[float, str]:
    """Divisor and name of the unit that shows a span of training time legibly."""
    if seconds >= 2 * 3600:
        return 3600.0, "hours"
    if seconds >= 120:
        return 60.0, "minutes"
    return 1.0, "seconds"


def token_unit(tokens: float) -> tuple[float, str]:
    """Divisor and name of the unit that shows a span of tokens legibly: tokens, thousands (K)
    from 2,000, millions (M) from 2,000,000 — so an axis reads 0–30 thousand, never 0.000–0.030 million."""
    if tokens >= 2e6:
        return 1e6, "millions"
    if tokens >= 2e3:
        return 1e3, "thousands"
    return 1.0, "tokens"


def tokens_label(unit: str, what: str = "generated tokens") -> str:
    """An axis label for tokens in ``unit`` (from :func:`token_unit`)."""
    return what if unit == "tokens" else f"{what} ({unit})"


def marked(title: str | None, synthetic: bool, *, exploratory: bool = False) -> str | None:
    """``title`` with the SYNTHETIC mark in front when the figure shows simulated results, and the
    EXPLORATORY mark when it shows an analysis whose preregistration checks failed."""
    mark = ": ".join(m for m, on in ((SYNTHETIC, synthetic), (EXPLORATORY, exploratory)) if on)
    if not mark:
        return title
    return f"{mark}: {title}" if title else mark


@cache
def _watermark_class() -> type:
    """The text artist class of :func:`watermark` (made on first use: matplotlib is imported lazily)."""
    from matplotlib.text import Text

    class _Watermark(Text):
        """SYNTHETIC across a panel, sized when drawn to the panel's final box (after any layout)."""

        def draw(self, renderer):
            h, w = (v * 72 / self.figure.dpi for v in (self.axes.bbox.height, self.axes.bbox.width))  # points
            if h >= 100:  # room for the diagonal
                self.set_rotation(25)
                self.set_fontsize(max(8.0, min(40.0, 0.3 * h, 0.2 * w)))
            else:
                self.set_rotation(0)
                self.set_fontsize(max(8.0, min(40.0, 0.7 * h, 0.18 * w)))
            super().draw(renderer)

    return _Watermark


def watermark(ax) -> None:
    """A large, faint SYNTHETIC across the panel, over the data (it never hides a point)."""
    ax.add_artist(_watermark_class()(0.5, 0.5, "SYNTHETIC", transform=ax.transAxes, ha="center", va="center",
                             color="#c0392b", alpha=0.13, zorder=10, clip_on=True, in_layout=False))


def decorate(ax, title: str | None, synthetic: bool, *, width: int = 80, **kw) -> None:
    """Set the panel's title (wrapped; SYNTHETIC in front and a watermark when synthetic)."""
    t = marked(title, synthetic)
    if t:
        ax.set_title(textwrap.fill(t, width), **kw)
    if synthetic:
        watermark(ax)


def legend_outside(ax, handles=None, labels=None, **kw):
    """The legend to the right of the panel, outside the axes: it never covers a data point."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return None
    kw = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0, "fontsize": 8, **kw}
    return ax.legend(handles, labels, **kw) if labels is not None else ax.legend(handles=handles, **kw)


def _axes(ax, figsize):
    return subplots(figsize=figsize)[1] if ax is None else ax


def forest(contrasts: pd.DataFrame, per_seed: pd.DataFrame, *, ax=None, title: str | None = None,
           margin: float = 0.02, synthetic: bool = False) -> Figure:
    """One row per contrast: paired-t mean and CI (fractions), dots for the per-seed differences,
    the margin band; the legend outside the panel, to its right. The band is each contrast's own
    ``[margin_low, margin_high]`` where the contrasts' margins differ (an asymmetric one, a
    contrast's own), one band across the panel where they are all the same, ``±margin`` where the
    frame has no margins."""
    n = len(contrasts)
    ax = _axes(ax, (9.5, 1.2 + 0.55 * max(n, 1)))
    bounds = _row_margins(contrasts, margin)
    if len(set(bounds)) <= 1:
        lo, hi = bounds[0] if bounds else (-margin, margin)
        ax.axvspan(lo, hi, color="#d9d9d9", alpha=0.6, lw=0)
        band = f"±{hi:g} margin" if lo == -hi else f"margin [{lo:g}, {hi:g}]"
    else:
        for i, (lo, hi) in enumerate(bounds):
            y = n - 1 - i
            ax.fill_betweenx([y - 0.45, y + 0.45], lo, hi, color="#d9d9d9", alpha=0.6, lw=0)
        band = "the contrast's own margin"
    ax.axvline(0, color="black", lw=0.8)
    rng = np.random.default_rng(0)  # jitter only; fixed for reproducible figures
    seeds = {k: g.to_numpy() for k, g in per_seed.groupby("contrast", sort=False, observed=True)["difference"]}
    xs, ys = [], []  # every contrast's seed dots, drawn as one collection
    for i, row in enumerate(contrasts.itertuples(index=False)):
        y = n - 1 - i
        dots = seeds.get(row.contrast, np.empty(0))
        xs.append(dots)
        ys.append(y + rng.uniform(-0.15, 0.15, dots.size))
        color = TIER_COLOR.get(row.tier, "black")
        ax.errorbar(row.mean, y, xerr=[[row.mean - row.ci_low], [row.ci_high - row.mean]], fmt="o",
                    color=color, ms=6, capsize=3, lw=1.8, zorder=3)
    ax.scatter(np.concatenate([np.empty(0), *xs]), np.concatenate([np.empty(0), *ys]), s=10, color="#999999", zorder=2)
    ax.set_yticks(range(n))
    metrics = contrasts["metric"].fillna("accuracy") if "metric" in contrasts else pd.Series(["accuracy"] * n)
    pairs = (contrasts["comparison"] if "comparison" in contrasts
             else contrasts["treatment"].astype(str) + " − " + contrasts["control"].astype(str))
    ax.set_yticklabels([f"{r.contrast}: {pair} @ {r.at}" + ("" if m == "accuracy" else f" [{m}]")
                        for r, m, pair in zip(contrasts.itertuples(), metrics, pairs)][::-1])
    ax.set_ylim(-0.6, max(n, 1) - 0.4)
    what = "accuracy" if set(metrics) == {"accuracy"} else "the metric in [ ] (else accuracy)"
    ax.set_xlabel(f"difference in {what} (fraction; 0.01 = 1 point)\nmean and 95% CI; dots: seeds")
    decorate(ax, title, synthetic)
    tiers = set(contrasts["tier"]) if "tier" in contrasts else set()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    handles = [Line2D([], [], marker="o", lw=1.8, color=c, label=f"{t}: mean, 95% CI") for t, c in TIER_COLOR.items() if t in tiers]
    legend_outside(ax, [*handles, Line2D([], [], marker="o", ls="", ms=3, color="#999999", label="one seed's difference"),
                        Rectangle((0, 0), 1, 1, color="#d9d9d9", label=band)])
    ax.grid(axis="x", alpha=0.3)
    return ax.figure


def _row_margins(contrasts: pd.DataFrame, margin: float) -> list[tuple[float, float]]:
    """Each contrast's ``(margin_low, margin_high)`` (``±margin`` where the frame has none or a
    row's is missing), in row order."""
    if not {"margin_low", "margin_high"} <= set(contrasts.columns):
        return [(-margin, margin)] * len(contrasts)
    return [(-margin, margin) if pd.isna(lo) or pd.isna(hi) else (float(lo), float(hi))
            for lo, hi in zip(contrasts["margin_low"], contrasts["margin_high"])]


def accuracy(curves: pd.DataFrame, *, x: str = "tokens", ax=None, title: str | None = None,
             budget_tokens: int | None = None, synthetic: bool = False, legend: bool = True) -> Figure:
    """Accuracy against generated tokens (``x="tokens"``) or training time (``x="time"``), one line
    per configuration: the mean over seeds at each evaluation, the band min–max over seeds.

    ``curves``: configuration, seed, eval_index, tokens, train_seconds, accuracy (one row per
    evaluation). Tokens are shown in tokens, thousands or millions and time in seconds, minutes
    or hours, by the span; ``budget_tokens`` draws B on the tokens axis.
    """
    if x not in ("tokens", "time"):
        raise ValueError(f"accuracy(x={x!r}): x is 'tokens' or 'time'")
    ax = _axes(ax, (7.5, 4.2))
    col = "tokens" if x == "tokens" else "train_seconds"
    span = float(curves[col].max()) if len(curves) else 0.0
    if x == "tokens":
        div, unit = token_unit(max(span, float(budget_tokens or 0)))
    else:
        div, unit = time_unit(span)
    for name, g in curves.groupby("configuration", sort=True):
        by_eval = g.groupby("eval_index")
        xs = by_eval[col].mean() / div
        (line,) = ax.plot(xs, by_eval["accuracy"].mean(), marker=".", label=f"{name} (mean over seeds)")
        ax.fill_between(xs, by_eval["accuracy"].min(), by_eval["accuracy"].max(), color=line.get_color(), alpha=0.15, lw=0)
    if budget_tokens is not None and x == "tokens":  # no one line for B when it is in iterations
        ax.axvline(budget_tokens / div, color="black", ls="--", lw=0.8, label="B: where the table reads")
    ax.set_xlabel(tokens_label(unit) if x == "tokens" else f"training time ({unit})")
    ax.set_ylabel("accuracy (fraction)")
    decorate(ax, title, synthetic, fontsize=10)
    ax.grid(alpha=0.3)
    if legend:
        legend_outside(ax, *band_entry(ax))
    return ax.figure


def band_entry(ax, text: str = BAND, handles=None, labels=None) -> tuple[list, list]:
    """``ax``'s legend handles and labels (or those given) with a grey patch for its bands."""
    from matplotlib.patches import Patch

    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    return [*handles, Patch(color="#999999", alpha=0.3, lw=0)], [*labels, text]


# the figure's x axis for each reading the table makes: (run-log column, what is matched)
AXES = {"tokens": ("tokens", "matched generated tokens"), "time": ("train_seconds", "matched training time"),
        "updates": ("updates", "matched updates")}
# the axis a contrast read at a point kind is drawn on (to-target shares and extrapolations have figures of their own)
READ_AXIS = {"tokens": "tokens", "first_half": "tokens", "second_half": "tokens", "all_evals": "tokens",
             "time": "time", "control_time": "time", "updates": "updates"}


@dataclass(frozen=True)
class TableMark:
    """What the report's table reads for one contrast, drawn on its difference curve: ``x``, the
    reading point on the figure's axis (k·B tokens, the seeds' mean T* in seconds, the
    treatment's mean updates), the table's Δ with its 95% interval (an open end of a one-sided
    interval is infinite), and ``what`` the point is in words (``tokens at B``)."""

    x: float
    mean: float
    ci_low: float
    ci_high: float
    what: str


@dataclass(frozen=True)
class DifferencePanel:
    """One panel of the difference figure: the contrasts (label, treatment, control) read on one
    axis (``tokens``, ``time`` or ``updates``), the grid's end on it (``until``: k·B for a token
    reading; None: the shortest run's end), the table's readings to mark, by label, and each
    contrast's own ``(margin_low, margin_high)``, by label (``±margin`` for one not named)."""

    x: str
    pairs: list[tuple[str, str, str]]
    until: float | None = None
    marks: Mapping[str, TableMark] = field(default_factory=dict)
    margins: Mapping[str, tuple[float, float]] = field(default_factory=dict)


def difference(curves: pd.DataFrame, pairs: list[tuple[str, str, str]], *, ax=None, title: str | None = None,
               margin: float = 0.02, synthetic: bool = False, grid_points: int = 60, x: str = "time",
               until: float | None = None, marks: Mapping[str, TableMark] | None = None) -> Figure:
    """Treatment − control accuracy for each (label, treatment, control) against ``x``: matched
    ``"time"`` (training seconds), ``"tokens"`` (generated tokens) or ``"updates"``, up to
    ``until`` on that axis (else the shortest run's end): the mean over seeds and its 95% t band,
    the ±margin band in grey (:func:`difference_data`); ``marks`` (label → :class:`TableMark`)
    draws each contrast's reading point and the table's Δ [95% CI] there. Every line, band and
    marker has a legend entry; the legend sits to the right of the panel."""
    ax = _axes(ax, (9, 4.2))
    _draw_difference(ax, curves, DifferencePanel(x, pairs, until, marks or {}), margin, grid_points)
    decorate(ax, title, synthetic)
    return ax.figure


def difference_data(curves: pd.DataFrame, pairs: list[tuple[str, str, str]], grid_points: int = 60, *,
                    x: str = "time", until: float | None = None) -> pd.DataFrame:
    """What :func:`difference` draws: one row per (label, grid point) with the point on the axis
    (its run-log column: ``train_seconds``, ``tokens`` or ``updates``), the mean difference over
    seeds, the band's half-width and n.

    Per seed, both runs' accuracy is interpolated linearly in that column on a common grid up to
    ``until`` or the shorter run's last evaluation, whichever comes first; the line is the mean
    over seeds, the band a 95% t interval.
    """
    col = _axis_column(x)
    data = []
    for label, tr, co in pairs:
        diffs, grid = _interpolated_differences(curves, tr, co, grid_points, col, until)
        if diffs is None:
            continue
        m, n = diffs.mean(axis=0), diffs.shape[0]
        half = stdtrit(n - 1, 0.975) * diffs.std(axis=0, ddof=1) / np.sqrt(n) if n > 1 else np.zeros_like(m)
        data.append(pd.DataFrame({"label": label, "treatment": tr, "control": co, col: grid,
                                  "difference": m, "half_width": half, "n": n}))
    cols = ["label", "treatment", "control", col, "difference", "half_width", "n"]
    return pd.concat(data, ignore_index=True) if data else pd.DataFrame(columns=cols)


def _axis_column(x: str) -> str:
    if x not in AXES:
        raise ValueError(f"difference(x={x!r}): x is 'tokens', 'time' or 'updates'")
    return AXES[x][0]


def _axis_unit(x: str, span: float) -> tuple[float, str]:
    """Divisor and axis label of a panel on ``x`` spanning ``span``."""
    if x == "tokens":
        div, unit = token_unit(span)
        return div, tokens_label(unit, AXES[x][1])
    if x == "time":
        div, unit = time_unit(span)
        return div, f"{AXES[x][1]} ({unit})"
    return 1.0, AXES[x][1]


def _draw_difference(ax, curves, panel: DifferencePanel, margin, grid_points) -> pd.DataFrame:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    col = _axis_column(panel.x)
    data = difference_data(curves, panel.pairs, grid_points, x=panel.x, until=panel.until)
    span = max([float(data[col].max()) if len(data) else 0.0] + [m.x for m in panel.marks.values() if np.isfinite(m.x)])
    div, xlabel = _axis_unit(panel.x, span)
    bounds = {label: panel.margins.get(label, (-margin, margin)) for label, _, _ in panel.pairs}
    shared = set(bounds.values()) if bounds else {(-margin, margin)}
    if len(shared) == 1:  # one band across the panel, as the contrasts share it
        lo, hi = next(iter(shared))
        ax.axhspan(lo, hi, color="#d9d9d9", alpha=0.6, lw=0)
    ax.axhline(0, color="black", lw=0.8)
    handles, labels = [], []
    for (label, tr, co), g in data.groupby(["label", "treatment", "control"], sort=False):
        xs, m, half = g[col].to_numpy() / div, g["difference"].to_numpy(), g["half_width"].to_numpy()
        (line,) = ax.plot(xs, m, label=f"{label}: {tr} − {co} (n={int(g['n'].iloc[0])})")
        ax.fill_between(xs, m - half, m + half, color=line.get_color(), alpha=0.2, lw=0)
        handles += [line, Patch(color=line.get_color(), alpha=0.2, lw=0)]
        labels += [f"{label}: {tr} − {co}, mean of {int(g['n'].iloc[0])} seeds", f"{label}: 95% t band"]
        if len(shared) > 1:  # the contrasts' margins differ: each its own, in its colour
            for y in bounds[label]:
                ax.axhline(y, color=line.get_color(), ls="--", lw=0.9)
            handles.append(Line2D([], [], color=line.get_color(), ls="--", lw=0.9))
            labels.append(f"{label}: its margin [{bounds[label][0]:g}, {bounds[label][1]:g}]")
        if (mk := panel.marks.get(label)) is not None and np.isfinite(mk.x):
            handles.append(_mark(ax, mk, div, line.get_color()))
            one_sided = not (np.isfinite(mk.ci_low) and np.isfinite(mk.ci_high))
            labels.append(f"{label} in the table ({mk.what}): Δ {mk.mean:+.3f} and its "
                          + ("one-sided 95% bound" if one_sided else "95% CI"))
    if len(shared) == 1:
        handles.append(Patch(color="#d9d9d9", alpha=0.6, lw=0))
        labels.append(f"±{hi:g} margin" if lo == -hi else f"margin [{lo:g}, {hi:g}]")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("difference in accuracy (fraction)")
    ax.grid(alpha=0.3)
    legend_outside(ax, handles, labels)
    return data


def _mark(ax, mk: TableMark, div: float, color: str):
    """The table's reading on the panel: a dotted line at its point and its Δ with the 95%
    interval (an open end drawn to the panel's edge); returns the marker for the legend."""
    at = mk.x / div
    ax.axvline(at, color=color, ls=":", lw=1.0)
    lo, hi = (v if np.isfinite(v) else mk.mean for v in (mk.ci_low, mk.ci_high))
    bars = ax.errorbar([at], [mk.mean], yerr=[[mk.mean - lo], [hi - mk.mean]], fmt="D", ms=6, color=color,
                       mec="black", mew=0.8, capsize=4, lw=1.6, zorder=4)
    return bars


def forest_plot(contrasts: pd.DataFrame, per_seed: pd.DataFrame, path: Path, *, title: str,
                margin: float = 0.02, synthetic: bool = False) -> list[Path]:
    """The report's forest plot (:func:`forest`) written to ``path`` (PNG) and its PDF."""
    return save_all(forest(contrasts, per_seed, title=title, margin=margin, synthetic=synthetic), path)


def accuracy_curves(curves: pd.DataFrame, path: Path, *, title: str, budget_tokens: int | None,
                    synthetic: bool = False) -> list[Path]:
    """Accuracy against generated tokens (left) and training time (right), one line per
    configuration (:func:`accuracy` on each panel), written to ``path`` (PNG) and its PDF."""
    fig, axes = subplots(1, 2, figsize=(12, 4.4), sharey=True)
    accuracy(curves, x="tokens", ax=axes[0], title="at matched generated tokens", budget_tokens=budget_tokens, legend=False)
    accuracy(curves, x="time", ax=axes[1], title="over training time", legend=False)
    for ax in axes if synthetic else ():  # the suptitle carries the word; each panel its watermark
        watermark(ax)
    axes[1].set_ylabel("")
    legend_outside(axes[1], *band_entry(axes[0]))  # B: left panel only
    fig.suptitle(marked(title, synthetic))
    return save_all(fig, path)


def difference_over_time(curves: pd.DataFrame, pairs: list[tuple[str, str, str]], path: Path, *,
                         title: str, margin: float = 0.02, grid_points: int = 60, synthetic: bool = False) -> list[Path]:
    """Treatment − control accuracy against training time (:func:`difference`) written to
    ``path`` (PNG) and its PDF."""
    return save_all(difference(curves, pairs, title=title, margin=margin, synthetic=synthetic,
                               grid_points=grid_points), path)


def difference_panels(curves: pd.DataFrame, panels: list[DifferencePanel], path: Path, *, title: str,
                      margin: float = 0.02, grid_points: int = 60, synthetic: bool = False) -> list[Path]:
    """The report's difference figure: one :func:`difference` panel per axis the contrasts are
    read on (stacked; legends to their right), written to ``path`` (PNG) and its PDF."""
    fig, axes = subplots(len(panels), 1, figsize=(10.5, 3.6 * len(panels) + 0.6), squeeze=False)
    for ax, panel in zip(axes[:, 0], panels):
        _draw_difference(ax, curves, panel, margin, grid_points)
        if synthetic:
            watermark(ax)
    fig.suptitle(marked(title, synthetic))
    return save_all(fig, path)


def difference_figure(curves: pd.DataFrame, pairs: list[tuple[str, str, str]], *, title: str,
                      margin: float = 0.02, grid_points: int = 60, synthetic: bool = False):
    """The figure of :func:`difference` and its data (:func:`difference_data`), computed once."""
    ax = _axes(None, (9, 4.2))
    data = _draw_difference(ax, curves, DifferencePanel("time", pairs), margin, grid_points)
    decorate(ax, title, synthetic)
    return ax.figure, data


def _interpolated_differences(curves: pd.DataFrame, tr: str, co: str, k: int, col: str = "train_seconds",
                              until: float | None = None):
    """Per seed both configurations, the treatment's minus the control's accuracy on a common
    grid of ``k`` points of ``col`` up to the shortest run's end, or ``until`` when that comes
    first (linear interpolation). Column-wise: one stable sort and slices per (configuration,
    seed), not a filter of the frame per seed."""
    both = curves.loc[curves["configuration"].isin([tr, co]), ["configuration", "seed", col, "accuracy"]]
    both = both.sort_values(["configuration", "seed", col], kind="stable")
    ends = both.groupby(["configuration", "seed"], sort=False)[col].max().unstack(0)
    if tr not in ends or co not in ends:
        return None, None
    ends = ends[[tr, co]].dropna()
    if not len(ends):
        return None, None
    end = float(ends.to_numpy().min())
    grid = np.linspace(0, end if until is None else min(end, float(until)), k)
    key = both["configuration"].to_numpy(dtype=object), both["seed"].to_numpy()
    t, acc = both[col].to_numpy(dtype="float64"), both["accuracy"].to_numpy(dtype="float64")
    cut = np.flatnonzero((key[0][1:] != key[0][:-1]) | (key[1][1:] != key[1][:-1])) + 1
    start = dict(zip(zip(key[0][np.r_[0, cut]], key[1][np.r_[0, cut]].tolist()), zip(np.r_[0, cut], np.r_[cut, len(t)])))

    def curve(cfg: str, seed) -> np.ndarray:
        a, b = start[(cfg, seed)]
        return np.interp(grid, t[a:b], acc[a:b])

    seeds = sorted(ends.index.tolist())
    return np.asarray([curve(tr, s) - curve(co, s) for s in seeds]), grid
