"""The dense-rewards paper's Figure 4 prompt-selection panels from the CPU intervention study's run logs.

Per seed, the gain of a selection configuration over outcome-only GRPO at B (held-out accuracy,
fraction) against (a) its change in the share of mixed-outcome groups (mean over iterations to B,
selection − outcome) and (b) its candidates' mean predicted success (mean over the iterations
after the warm-up). The paper's account: selection helps when it raises the share of mixed groups,
which happens when the candidates' predicted success sits below 1/2.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from figures.cpu_studies import primary_curves
from prereg_kit import readings as rd
from prereg_kit.report.plots import subplots

OUTPUT = "cpu_selection_panels.png"
DESCRIPTION = "CPU intervention study: gain of the critic filter (and its random-choice control) over outcome-only GRPO against the change in mixed groups and against the candidates' mean predicted success (paper 1 Figure 4's form)"
INPUTS = "run logs of registry/cpu-interventions (committed in the registry, read through the analysis)"
STUDY = "cpu-interventions"
ARMS = {"critic_filter": "#1f4e9c", "random_choice": "#999999"}


def selection_points(study_dir: Path, comparator: str = "outcome"):
    """One row per (arm, seed) of a trained study: see :func:`points_from`."""

    plan, st, curves = primary_curves(Path(study_dir))
    return points_from(curves, st.iterations, plan.budget.tokens, comparator)


def points_from(curves, iterations, budget: float, comparator: str = "outcome"):
    """Per (arm, seed): gain at B over the comparator, Δ mixed share (mean over iterations to B),
    and the candidates' mean predicted success after the warm-up (``sel_pred_candidates``)."""
    import pandas as pd

    at_b = rd.read_at_tokens(curves, budget).set_index(["configuration", "seed"])["accuracy"]
    its = iterations[iterations["cum_tokens"] <= budget * 1.0001]
    mixed = its.groupby(["configuration", "seed"])["mixed_share"].mean()
    pred = (its[its.get("sel_warmup", False) == False].groupby(["configuration", "seed"])["sel_pred_candidates"].mean()  # noqa: E712
            if "sel_pred_candidates" in its else pd.Series(dtype=float))
    rows = []
    for arm in ARMS:
        for seed in sorted(set(curves.loc[curves["configuration"] == arm, "seed"])):
            if (comparator, seed) not in at_b.index:
                continue
            rows.append({"arm": arm, "seed": seed, "gain": at_b[(arm, seed)] - at_b[(comparator, seed)],
                         "d_mixed": mixed.get((arm, seed), np.nan) - mixed.get((comparator, seed), np.nan),
                         "pred_candidates": pred.get((arm, seed), np.nan)})
    return pd.DataFrame(rows, columns=["arm", "seed", "gain", "d_mixed", "pred_candidates"])


def draw(study: Path):
    """The figure and its data (:func:`selection_points`: one row per arm and seed)."""

    pts = selection_points(study)
    fig, axes = subplots(1, 2, figsize=(11, 4.3), sharey=True)
    for arm, color in ARMS.items():
        p = pts[pts["arm"] == arm]
        axes[0].scatter(p["d_mixed"], p["gain"], color=color, label=arm, s=30)
        axes[1].scatter(p["pred_candidates"], p["gain"], color=color, label=arm, s=30)
    for ax in axes:
        ax.axhline(0, color="black", lw=0.8)
        ax.grid(alpha=0.3)
    axes[1].axvline(0.5, color="black", ls=":", lw=0.8, label="target 1/2")
    axes[0].set_xlabel("change in share of mixed-outcome groups (arm − outcome-only, mean to B)")
    axes[1].set_xlabel("candidates' mean predicted success (after warm-up)")
    axes[0].set_ylabel("gain in held-out accuracy at B (fraction, per seed)")
    axes[0].set_title("(a) gain against the change in mixed groups", fontsize=10)
    axes[1].set_title("(b) gain against the candidates' predicted success", fontsize=10)
    axes[1].legend(fontsize=8)
    fig.suptitle("CPU intervention study: when does prompt selection help? (per seed, from run logs)")
    return fig, pts


def build(out_dir: Path, study_dir: Path | None = None) -> Path:
    from figures.cpu_studies import registry_study
    from prereg_kit.report.plots import save

    fig, _ = draw(study_dir if study_dir is not None else registry_study(STUDY))
    return save(fig, Path(out_dir) / OUTPUT, dpi=110)
