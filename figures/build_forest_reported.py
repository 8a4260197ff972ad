"""Figures 7-8 of the dense-rewards paper (forest plots of every matched-compute comparison),
rebuilt from the registry's reported summaries: printed mean and 95% paired-t interval per row,
grouped under the figures' bold block headers, over a grey band at ±0.02 (as in the captions), on
the paper's shared x-axis with ticks −0.15 … 0.05. Writes ``figure7_forest.png`` and ``figure8_forest.png``.

The paper's figures draw each seed as a grey dot (Figure 7's caption; "Figures 7 and 8 show the same
contrasts with their per-seed values", §C.2), but its text prints no per-seed values for any
plotted row (the per-seed lists of S12 in §C.4.1 are random choice − filter and target
0.7 − target 1/2, which the figures do not plot), so the registry carries none and :func:`build`
draws no seed dots. :func:`draw` draws them for any row given per-seed values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from figures.paper_tables import PrintedRow, printed_test, value
from prereg_kit.report.plots import subplots

OUTPUT = "figure7_forest.png"
DESCRIPTION = ("Figures 7-8 (figure7_forest.png, figure8_forest.png): forest plots of every matched-compute "
               "comparison under the paper's block headers, on its x-axis (−0.15 … 0.05) with a ±0.02 band, "
               "rebuilt from reported summaries (no seed dots: no per-seed values are printed)")
INPUTS = "registry/*/reported.toml (rows with figure = 7 or 8)"

TITLES = {7: "Figure 7 — every matched-compute comparison, part 1",
          8: "Figure 8 — every matched-compute comparison, part 2"}
BAND = 0.02
XTICKS = (-0.15, -0.10, -0.05, 0.0, 0.05)
"""The x-axis ticks printed under both figures."""
XLIM = (-0.165, 0.055)
"""Fixed x-limits: the printed ticks plus the margin that keeps the widest printed interval
(S1's −0.160, Figure 7) and the highest (+0.042, Figure 7) inside; the paper prints no limits."""
SEED_COLOR = "0.6"


def _root(root) -> Path:
    return Path(root) if root is not None else Path(__file__).resolve().parents[1] / "registry"


def draw(blocks: Sequence[tuple[str, Sequence[PrintedRow]]], figure: int,
         seeds: Mapping[tuple[str, str], Sequence[float]] | None = None):
    """The forest plot of Figure 7 or 8 and the numbers it plots.

    ``blocks`` is :func:`figures.paper_tables.figure_blocks`: the paper's block headers with their
    rows, top to bottom in the paper's order. Each header takes a bold y-tick row of its own
    (:data:`figures.paper_tables.FIGURE_BLOCKS`); each comparison gets the printed mean (configuration − comparator at
    matched compute, held-out accuracy as a fraction) as a dot and its 95% paired-t interval as a bar,
    blue when the interval lies above 0, red below, grey across it (Figure 7's caption); the printed test
    at the right, with TOST at ±0.02 as in Table 3's test column (:func:`printed_test`,
    Table 3's caption), also for the studies that preregistered ±0.01; a grey band at ±0.02; fixed x-limits :data:`XLIM` and the paper's ticks
    :data:`XTICKS`. ``seeds`` maps (study, row id) to per-seed differences, drawn as
    grey dots (gid ``"seeds"``) on the row (Figure 7's caption); rows without them get none.

    ``data`` has one row per comparison: study, row id, block, tick label, y position, mean,
    ci_low, ci_high, colour, printed test and number of seed dots.
    """
    seeds = dict(seeds or {})
    n = sum(1 + len(rows) for _, rows in blocks)
    fig, ax = subplots(figsize=(15, 1.6 + 0.34 * max(n, 1)))
    ax.axvspan(-BAND, BAND, color="0.88", zorder=0, label="±0.02 band")
    ax.axvline(0, color="0.35", lw=0.8, zorder=1)
    labels, bold, data = [], [], []
    y = n - 1
    for head, rows in blocks:
        labels.append(head)
        bold.append(True)
        y -= 1
        for pr in rows:
            r = pr.row
            m, lo, hi = value(r.mean), value(r.ci_low), value(r.ci_high)
            color = "tab:blue" if lo > 0 else "tab:red" if hi < 0 else "0.3"
            per_seed = [float(v) for v in seeds.get((pr.study, r.id), ())]
            if per_seed:
                (dots,) = ax.plot(per_seed, [y] * len(per_seed), "o", color=SEED_COLOR, ms=2.5, alpha=0.8, zorder=2)
                dots.set_gid("seeds")
            (bar,) = ax.plot([lo, hi], [y, y], color=color, lw=2, solid_capstyle="butt", zorder=3)
            (dot,) = ax.plot([m], [y], "o", color=color, ms=5, zorder=4)
            bar.set_gid("ci")
            dot.set_gid("mean")
            labels.append(f"{r.label} — {r.model} (n={r.n}) [{pr.study}]")
            bold.append(False)
            # the same test text as Table 3's column: TOST at ±0.02 also for the ±0.01 studies
            test = printed_test(pr)[0]
            test = test if len(test) <= 52 else test[:51] + "…"
            ax.annotate(test, xy=(1.005, y), xycoords=("axes fraction", "data"), va="center", fontsize=7.5, color="0.25")
            data.append({"study": pr.study, "id": r.id, "block": head, "label": labels[-1], "y": y, "mean": m,
                         "ci_low": lo, "ci_high": hi, "color": color, "test": test, "seeds": len(per_seed)})
            y -= 1
    ax.set_yticks(range(n - 1, -1, -1))
    ax.set_yticklabels(labels, fontsize=8)
    for tick, b in zip(ax.get_yticklabels(), bold):
        if b:
            tick.set_fontweight("bold")
    ax.set_ylim(-0.8, n - 0.2)
    ax.set_xlim(*XLIM)
    ax.set_xticks(XTICKS)
    ax.set_xticklabels([f"{t:.2f}".replace("-", "−") for t in XTICKS])
    ax.set_xlabel("Δ held-out accuracy, configuration − comparator at matched compute (fraction; 0.01 = 1 point), 95% paired-t CI")
    n_seeds = sum(d["seeds"] for d in data)
    seeds_note = "grey dots: seeds" if n_seeds else "no seed dots: no per-seed values printed"
    ax.set_title(f"{TITLES.get(figure, f'Figure {figure}')}\n(rebuilt from reported summaries in registry/*/reported.toml; "
                 f"blue: CI above 0, red: below 0; {seeds_note}; printed test at right)", fontsize=10)
    ax.grid(axis="x", color="0.8", lw=0.5)
    ax.legend(loc="lower left", fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.36, right=0.72, top=1 - 0.9 / fig.get_figheight(), bottom=0.6 / fig.get_figheight())
    cols = ["study", "id", "block", "label", "y", "mean", "ci_low", "ci_high", "color", "test", "seeds"]
    return fig, pd.DataFrame(data, columns=cols)


def plot_figure(blocks, figure: int, path: Path) -> Path:
    """Draw Figure 7 or 8 (:func:`draw`) and write it to ``path``."""
    fig, _ = draw(blocks, figure)
    fig.savefig(path, dpi=110, metadata={"Software": None})
    return path


def build(out_dir: Path, root: Path | None = None) -> Path:
    from figures.paper_tables import figure_blocks

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    base = _root(root)
    paths = [plot_figure(figure_blocks(base, f), f, out_dir / f"figure{f}_forest.png") for f in (7, 8)]
    return paths[0]
