"""Accuracy against generated tokens and against training time in the CPU studies (from run logs).

One row of panels per study (``registry/cpu-grpo``, ``registry/cpu-interventions``): per
configuration the mean over seeds with a min–max band, the budget B marked.
"""

from __future__ import annotations

from pathlib import Path

from figures.cpu_studies import primary_curves
from prereg_kit.report.plots import subplots, time_unit

OUTPUT = "cpu_accuracy_curves.png"
DESCRIPTION = "CPU studies: held-out accuracy against generated tokens and training time, per configuration (run logs)"
INPUTS = "run logs of registry/cpu-grpo and registry/cpu-interventions (committed in the registry, read through the analysis)"
STUDIES = ("cpu-grpo", "cpu-interventions")


def draw(study_dirs: list[Path]):
    """The figure and the tidy data it plots: one row per (study, configuration, evaluation) with
    the seed-mean tokens and training seconds and the mean, min and max accuracy over seeds."""
    import pandas as pd


    dirs = list(study_dirs)
    fig, axes = subplots(len(dirs), 2, figsize=(12, 4.2 * len(dirs)), squeeze=False)
    data = []
    for row, d in zip(axes, dirs):
        plan, _, curves = primary_curves(Path(d))
        div, unit = time_unit(float(curves["train_seconds"].max()))
        for name, g in curves.groupby("configuration", sort=True):
            by = g.groupby("eval_index")
            for ax, x in zip(row, (by["tokens"].mean() / 1e3, by["train_seconds"].mean() / div)):
                (line,) = ax.plot(x, by["accuracy"].mean(), marker=".", label=str(name))
                ax.fill_between(x, by["accuracy"].min(), by["accuracy"].max(), color=line.get_color(), alpha=0.12, lw=0)
            data.append(pd.DataFrame({"study": plan.study.id, "configuration": str(name),
                                      "tokens": by["tokens"].mean(), "train_seconds": by["train_seconds"].mean(),
                                      "accuracy_mean": by["accuracy"].mean(), "accuracy_min": by["accuracy"].min(),
                                      "accuracy_max": by["accuracy"].max()}).reset_index())
        row[0].axvline(plan.budget.tokens / 1e3, color="black", ls="--", lw=0.8, label="B")
        row[0].set_xlabel("generated tokens (thousands)")
        row[1].set_xlabel(f"training time ({unit}; evaluation excluded)")
        n_seeds = curves.groupby("configuration")["seed"].nunique().max()
        for ax in row:
            ax.set_ylabel("held-out accuracy (fraction)")
            ax.set_title(f"{plan.study.id}: seed mean, band = min–max over {n_seeds} seeds", fontsize=10)
            ax.grid(alpha=0.3)
        row[0].legend(fontsize=8)
    fig.suptitle("CPU studies, from their run logs: accuracy at matched tokens and over training time")
    return fig, pd.concat(data, ignore_index=True)


def build(out_dir: Path, study_dirs: list[Path] | None = None) -> Path:
    from figures.cpu_studies import registry_study
    from prereg_kit.report.plots import save

    fig, _ = draw(study_dirs if study_dirs is not None else [registry_study(s) for s in STUDIES])
    return save(fig, Path(out_dir) / OUTPUT, dpi=110)
