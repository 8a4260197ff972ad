"""Figures 7-8 of the dense-rewards paper (forest plots of every matched-compute comparison),
rebuilt from the registry's reported summaries: printed mean and 95% paired-t interval per row,
over a grey band at ±0.02. Writes ``figure7_forest.png`` and ``figure8_forest.png``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from figures.paper_tables import value
from prereg_kit.plots import subplots

OUTPUT = "figure7_forest.png"
DESCRIPTION = ("Figures 7-8 (figure7_forest.png, figure8_forest.png): forest plots of every matched-compute "
               "comparison with a ±0.02 band, rebuilt from reported summaries")
INPUTS = "registry/*/reported.toml (rows with figure = 7 or 8)"

TITLES = {7: "Figure 7 — every matched-compute comparison, part 1",
          8: "Figure 8 — every matched-compute comparison, part 2"}
BAND = 0.02


def _root(root) -> Path:
    return Path(root) if root is not None else Path(__file__).resolve().parents[1] / "registry"


def draw(rows, figure: int):
    """The forest plot of Figure 7 or 8 and the numbers it plots.

    One row per printed comparison, top to bottom in the paper's order: the printed mean
    (configuration − comparator at matched compute, held-out accuracy as a fraction) as a dot and its
    95% paired-t interval as a bar, blue when the interval lies above 0, red below, grey across it;
    the printed test at the right; a grey band at ±0.02. ``data`` has one row per comparison: study,
    row id, tick label, y position, mean, ci_low, ci_high, colour and printed test.
    """
    n = len(rows)
    fig, ax = subplots(figsize=(15, 1.6 + 0.34 * max(n, 1)))
    ax.axvspan(-BAND, BAND, color="0.88", zorder=0, label="±0.02 band")
    ax.axvline(0, color="0.35", lw=0.8, zorder=1)
    labels, data = [], []
    for i, pr in enumerate(rows):
        r = pr.row
        m, lo, hi = value(r.mean), value(r.ci_low), value(r.ci_high)
        color = "tab:blue" if lo > 0 else "tab:red" if hi < 0 else "0.3"
        y = n - 1 - i
        ax.plot([lo, hi], [y, y], color=color, lw=2, solid_capstyle="butt", zorder=2)
        ax.plot([m], [y], "o", color=color, ms=5, zorder=3)
        labels.append(f"{r.label} — {r.model} (n={r.n}) [{pr.study}]")
        test = r.test or ""
        test = test if len(test) <= 52 else test[:51] + "…"
        ax.annotate(test, xy=(1.005, y), xycoords=("axes fraction", "data"), va="center", fontsize=7.5, color="0.25")
        data.append({"study": pr.study, "id": r.id, "label": labels[-1], "y": y, "mean": m, "ci_low": lo,
                     "ci_high": hi, "color": color, "test": test})
    ax.set_yticks(range(n - 1, -1, -1))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_ylim(-0.8, n - 0.2)
    ax.set_xlabel("Δ held-out accuracy, configuration − comparator at matched compute (fraction; 0.01 = 1 point), 95% paired-t CI")
    ax.set_title(f"{TITLES.get(figure, f'Figure {figure}')}\n(rebuilt from reported summaries in registry/*/reported.toml; "
                 "blue: CI above 0, red: below 0; printed test at right)", fontsize=10)
    ax.grid(axis="x", color="0.8", lw=0.5)
    ax.legend(loc="lower left", fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.36, right=0.72, top=1 - 0.9 / fig.get_figheight(), bottom=0.6 / fig.get_figheight())
    cols = ["study", "id", "label", "y", "mean", "ci_low", "ci_high", "color", "test"]
    return fig, pd.DataFrame(data, columns=cols)


def plot_figure(rows, figure: int, path: Path) -> Path:
    """Draw Figure 7 or 8 (:func:`draw`) and write it to ``path``."""
    fig, _ = draw(rows, figure)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    return path


def build(out_dir: Path, root: Path | None = None) -> Path:
    from figures.paper_tables import figure_rows

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    base = _root(root)
    paths = [plot_figure(figure_rows(base, f), f, out_dir / f"figure{f}_forest.png") for f in (7, 8)]
    return paths[0]
