"""Figures of a study's report (matplotlib): forest plot, accuracy curves, difference over time.

Figures are ``matplotlib.figure.Figure`` objects made by :func:`subplots`, not through pyplot: no
backend is selected and nothing global changes when this module is imported or a figure is drawn.

- :func:`forest_plot` — every contrast: mean with its 95% CI, per-seed differences as dots, a
  ±margin band (paper 1, Figures 7–8);
- :func:`accuracy_curves` — accuracy against generated tokens and against training hours per
  configuration, mean over seeds with a min–max band;
- :func:`difference_over_time` — treatment − control against training hours, per-seed curves
  interpolated onto one grid, mean and 95% t band (paper 1, Figure 3's form).
"""

from __future__ import annotations

from pathlib import Path
import textwrap

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
import numpy as np
import pandas as pd
from scipy import stats as sps

def subplots(nrows: int = 1, ncols: int = 1, **kw):
    """A figure and its axes, as ``pyplot.subplots`` returns them, on a figure pyplot never sees."""
    fig = Figure(figsize=kw.pop("figsize", None))
    return fig, fig.subplots(nrows, ncols, **kw)


TIER_COLOR = {"primary": "#1f4e9c", "secondary": "#4a8c3a", "exploratory": "#8a8a8a"}


def save(fig, path: Path, *, dpi: int = 120, rect: tuple[float, float, float, float] | None = None) -> Path:
    """Lay out (``rect``: the area the axes may fill, leaving room for a suptitle), write and close
    a figure; return its path (creating the folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout(rect=rect)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")  # long titles and labels are never cut off
    return path


def time_unit(seconds: float) -> tuple[float, str]:
    """Divisor and name of the unit that shows a span of training time legibly."""
    if seconds >= 2 * 3600:
        return 3600.0, "hours"
    if seconds >= 120:
        return 60.0, "minutes"
    return 1.0, "seconds"


def forest_plot(contrasts: pd.DataFrame, per_seed: pd.DataFrame, path: Path, *, title: str,
                margin: float = 0.02) -> Path:
    """One row per contrast: paired-t mean and CI (fractions), dots for the per-seed differences."""
    n = len(contrasts)
    fig, ax = subplots(figsize=(8.5, 1.2 + 0.55 * max(n, 1)))
    ax.axvspan(-margin, margin, color="#d9d9d9", alpha=0.6, lw=0, label=f"±{margin:g} margin")
    ax.axvline(0, color="black", lw=0.8)
    rng = np.random.default_rng(0)  # jitter only; fixed for reproducible figures
    for i, row in enumerate(contrasts.itertuples(index=False)):
        y = n - 1 - i
        dots = per_seed.loc[per_seed["contrast"] == row.contrast, "difference"].to_numpy()
        ax.scatter(dots, y + rng.uniform(-0.15, 0.15, dots.size), s=10, color="#999999", zorder=2)
        color = TIER_COLOR.get(row.tier, "black")
        ax.errorbar(row.mean, y, xerr=[[row.mean - row.ci_low], [row.ci_high - row.mean]], fmt="o",
                    color=color, ms=6, capsize=3, lw=1.8, zorder=3)
    ax.set_yticks(range(n))
    metrics = contrasts["metric"].fillna("accuracy") if "metric" in contrasts else pd.Series(["accuracy"] * n)
    pairs = (contrasts["comparison"] if "comparison" in contrasts
             else contrasts["treatment"].astype(str) + " − " + contrasts["control"].astype(str))
    ax.set_yticklabels([f"{r.contrast}: {pair} @ {r.at}" + ("" if m == "accuracy" else f" [{m}]")
                        for r, m, pair in zip(contrasts.itertuples(), metrics, pairs)][::-1])
    what = "accuracy" if set(metrics) == {"accuracy"} else "the metric in [ ] (else accuracy)"
    ax.set_xlabel(f"difference in {what} (fraction; 0.01 = 1 point)\nmean and 95% CI; dots: seeds")
    ax.set_title(textwrap.fill(title, 70))
    handles = [Line2D([], [], marker="o", ls="", color=c, label=t) for t, c in TIER_COLOR.items()
               if t in set(contrasts["tier"])]
    ax.legend(handles=[*handles, Rectangle((0, 0), 1, 1, color="#d9d9d9", label=f"±{margin:g} margin")],
              loc="best", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    return save(fig, path)


def accuracy_curves(curves: pd.DataFrame, path: Path, *, title: str, budget_tokens: int | None) -> Path:
    """Accuracy against generated tokens (left) and training hours (right), one line per configuration.

    ``curves``: configuration, seed, tokens, train_seconds, accuracy (one row per evaluation).
    """
    fig, axes = subplots(1, 2, figsize=(11, 4.2), sharey=True)
    div, unit = time_unit(float(curves["train_seconds"].max()) if len(curves) else 0.0)
    for name, g in curves.groupby("configuration", sort=True):
        by_eval = g.groupby("eval_index")
        x_tok = by_eval["tokens"].mean() / 1e6
        x_h = by_eval["train_seconds"].mean() / div
        m, lo, hi = by_eval["accuracy"].mean(), by_eval["accuracy"].min(), by_eval["accuracy"].max()
        for ax, x in zip(axes, (x_tok, x_h)):
            (line,) = ax.plot(x, m, marker=".", label=str(name))
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15, lw=0)
    if budget_tokens is not None:  # no one line for B when it is in iterations
        axes[0].axvline(budget_tokens / 1e6, color="black", ls="--", lw=0.8, label="B")
    axes[0].set_xlabel("generated tokens (millions)")
    axes[1].set_xlabel(f"training time ({unit})")
    axes[0].set_ylabel("accuracy (fraction): seed mean, band = min–max")
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    for ax in axes:
        ax.grid(alpha=0.3)
    return save(fig, path)


def difference_over_time(curves: pd.DataFrame, pairs: list[tuple[str, str, str]], path: Path, *,
                         title: str, margin: float = 0.02, grid_points: int = 60) -> Path:
    """Treatment − control accuracy against training hours for each (label, treatment, control),
    written to ``path`` (:func:`difference_figure`)."""
    fig, _ = difference_figure(curves, pairs, title=title, margin=margin, grid_points=grid_points)
    return save(fig, path)


def difference_figure(curves: pd.DataFrame, pairs: list[tuple[str, str, str]], *, title: str,
                      margin: float = 0.02, grid_points: int = 60):
    """The figure of :func:`difference_over_time` and its data: one row per (label, grid point)
    with the training seconds, the mean difference over seeds, the band's half-width and n.

    Per seed, both runs' accuracy is interpolated linearly in training time on a common grid up
    to the shorter run's last evaluation; the line is the mean over seeds, the band a 95% t
    interval; the grey band is ±margin.
    """
    fig, ax = subplots(figsize=(8, 4.2))
    div, unit = time_unit(float(curves["train_seconds"].max()) if len(curves) else 0.0)
    ax.axhspan(-margin, margin, color="#d9d9d9", alpha=0.6, lw=0)
    ax.axhline(0, color="black", lw=0.8)
    data = []
    for label, tr, co in pairs:
        diffs, grid = _interpolated_differences(curves, tr, co, grid_points)
        if diffs is None:
            continue
        m = diffs.mean(axis=0)
        n = diffs.shape[0]
        if n > 1:
            half = sps.t.ppf(0.975, n - 1) * diffs.std(axis=0, ddof=1) / np.sqrt(n)
        else:
            half = np.zeros_like(m)
        (line,) = ax.plot(grid / div, m, label=f"{label}: {tr} − {co} (n={n})")
        ax.fill_between(grid / div, m - half, m + half, color=line.get_color(), alpha=0.2, lw=0)
        data.append(pd.DataFrame({"label": label, "treatment": tr, "control": co, "train_seconds": grid,
                                  "difference": m, "half_width": half, "n": n}))
    ax.set_xlabel(f"training time ({unit})")
    ax.set_ylabel("difference in accuracy (fraction)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    cols = ["label", "treatment", "control", "train_seconds", "difference", "half_width", "n"]
    return fig, (pd.concat(data, ignore_index=True) if data else pd.DataFrame(columns=cols))


def _interpolated_differences(curves: pd.DataFrame, tr: str, co: str, k: int):
    a = curves[curves["configuration"] == tr]
    b = curves[curves["configuration"] == co]
    seeds = sorted(set(a["seed"]) & set(b["seed"]))
    if not seeds:
        return None, None
    end = min(min(a.groupby("seed")["train_seconds"].max()[seeds]), min(b.groupby("seed")["train_seconds"].max()[seeds]))
    grid = np.linspace(0, end, k)
    rows = []
    for s in seeds:
        ga, gb = a[a["seed"] == s].sort_values("train_seconds"), b[b["seed"] == s].sort_values("train_seconds")
        rows.append(np.interp(grid, ga["train_seconds"], ga["accuracy"]) - np.interp(grid, gb["train_seconds"], gb["accuracy"]))
    return np.asarray(rows), grid
