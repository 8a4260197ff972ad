"""The CPU multi-reward study (registry/cpu-multireward), from its run logs and its election record.

Three panels: held-out accuracy (the primary channel) and the negative-answer rate (the shortcut
channel) against generated tokens, per configuration (seed mean, min–max band); and the anchor
election's probes: per-token reverse and forward KL of each single-channel probe from the base
policy (multi-reward paper §5.1, §6.4), the elected channel marked. Additive aggregation drifting onto
the shortcut shows as accuracy falling while the negative rate rises (the paper's §4 and Figure 3, told
on a tiny model).
"""

from __future__ import annotations

import json
from pathlib import Path

from figures.cpu_studies import primary_curves
from prereg_kit.report.plots import subplots

OUTPUT = "cpu_multireward.png"
DESCRIPTION = ("CPU multi-reward study: accuracy and negative-answer rate against generated tokens per aggregation rule "
               "(primary-only, additive, TAG with the elected anchor), and the election probes' reverse/forward KL")
INPUTS = "run logs and election.json of registry/cpu-multireward"
STUDY = "cpu-multireward"


def election_bars(ax, election: dict) -> None:
    """Grouped bars: reverse and forward KL per probe channel; the elected channel's label starred."""
    import numpy as np

    chans = list(election["kl_rev"])
    x = np.arange(len(chans))
    ax.bar(x - 0.2, [election["kl_rev"][c] for c in chans], 0.4, label="reverse KL (sampled from the probe)")
    ax.bar(x + 0.2, [election["kl_fwd"][c] for c in chans], 0.4, label="forward KL (sampled from the base)")
    ax.set_xticks(x, [f"{c} ★ elected" if c == election["elected"] else c for c in chans])
    ax.set_xlabel("probe trained on this channel alone")
    ax.set_ylabel("KL from the base policy (nats per token)")
    ax.set_title("anchor election: the probe that moved least is elected", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")


def draw(study: Path):
    """The figure and its data: one row per (metric, configuration, evaluation) with the seed-mean
    tokens and the mean, min and max of the metric over seeds (accuracy and negative_rate)."""
    import pandas as pd


    d = Path(study)
    fig, axes = subplots(1, 3, figsize=(17, 4.6))
    data = []
    for ax, metric, label in ((axes[0], "accuracy", "held-out accuracy (fraction)"),
                              (axes[1], "negative_rate", "negative-answer rate (fraction of samples)")):
        plan, _, curves = primary_curves(d, metric=metric)
        for i, (name, g) in enumerate(curves.groupby("configuration", sort=True)):
            by = g.groupby("eval_index")
            x = by["tokens"].mean() / 1e3
            # distinct styles and widths so coinciding curves (TAG = primary-only here) stay visible
            (line,) = ax.plot(x, by["accuracy"].mean(), marker="os^D"[i % 4], ms=7 - 2 * (i % 3),
                              lw=3.2 - 1.1 * (i % 3), ls=("-", "--", ":")[i % 3], label=str(name))
            ax.fill_between(x, by["accuracy"].min(), by["accuracy"].max(), color=line.get_color(), alpha=0.12, lw=0)
            data.append(pd.DataFrame({"metric": metric, "configuration": str(name), "tokens": by["tokens"].mean(),
                                      "mean": by["accuracy"].mean(), "min": by["accuracy"].min(),
                                      "max": by["accuracy"].max()}).reset_index())
        ax.axvline(plan.budget.tokens / 1e3, color="black", ls="--", lw=0.8, label="B")
        ax.set_xlabel("generated tokens (thousands)")
        ax.set_ylabel(label)
        n_seeds = curves.groupby("configuration")["seed"].nunique().max()
        ax.set_title(f"{label.split(' (')[0]}: seed mean, band = min–max over {n_seeds} seeds", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    election_bars(axes[2], json.loads((d / "election.json").read_text()))
    # what the curves show, not a verdict: the preregistered drift test (C4) was inconclusive at 3 seeds
    fig.suptitle(f"{plan.study.id}: the shortcut channel's rate and accuracy under additive, TAG and primary-only "
                 "(seed means; the report's contrasts test them)\n"
                 "(where TAG's curve lies on primary-only's, the runs were identical: docs/multi-reward.md)", fontsize=11)
    return fig, pd.concat(data, ignore_index=True)


def build(out_dir: Path, study_dir: Path | None = None) -> Path:
    from figures.cpu_studies import registry_study
    from prereg_kit.report.plots import save

    fig, _ = draw(Path(study_dir) if study_dir is not None else registry_study(STUDY))
    return save(fig, Path(out_dir) / OUTPUT, dpi=110)
