"""The multi-reward paper's Figure 3: the exact conditional-mean recursion of the three-action tabular model, per rule.

Panels 1-5: pi_t(a_j | x) under GRPO, Dr.GRPO, MO-GRPO, exact PG (all on the additive reward) and
TAG (lam = 1), from the primary-leading start (0.8, 0.01, 0.19) at eta = 0.3, rho = 0.5, n = 8,
alpha = 0.1; the GRPO panel overlays three seeds of sampled tabular GRPO. Panel 6: the paper's two
slow cases (GRPO takeover, 1.0e6 iterations; TAG selection, 1.2e6 iterations).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analyses.tabular import iterations_to_reach, run_recursion, sampled_trajectory
from prereg_kit.progress import shown_path
from prereg_kit.report.plots import save, subplots

OUTPUT = "p2_fig3_tabular_trajectories.png"
DESCRIPTION = ("Paper 2 Figure 3: exact tabular recursion pi_t(a_j|x) under GRPO, Dr.GRPO, MO-GRPO, exact PG "
               "and TAG (eta=0.3, rho=0.5, n=8, alpha=0.1), sampled GRPO overlaid, and the paper's two "
               "slow cases (1.0e6 / 1.2e6 iterations)")
INPUTS = "analyses.tabular (computed; no data files)"

INIT = (0.8, 0.01, 0.19)
SETTING = dict(eta=0.3, rho=0.5, n=8, alpha=0.1)
STEPS = 10**5
SAMPLED_STEPS = 40_000
SAMPLED_SEEDS = (0, 1, 2)
PANELS = [
    ("grpo", "GRPO (z-score), additive reward"),
    ("dr_grpo", "Dr.GRPO (r − r̄), additive reward"),
    ("mo_grpo", "MO-GRPO (per-channel z-scores)"),
    ("pg", "exact policy gradient, additive reward"),
    ("tag", "TAG (GRPO on R_TAG, λ = 1)"),
]
COLORS = ("tab:gray", "tab:red", "tab:blue")
LABELS = ("a₀ (neither)", "a₁ (auxiliary-favoring)", "a₂ (primary-favoring)")
SLOW_STEPS = 1_400_000
SLOW_CASES = [
    ("grpo", dict(eta=0.8, rho=0.5, lam=1.0), INIT, 1, "GRPO, ρ=0.5, η=0.8: π(a₁) (paper: 1.0×10⁶)"),
    ("tag", dict(eta=0.95, rho=0.1, lam=0.5), (0.3, 0.5, 0.2), 2, "TAG λ=0.5, ρ=0.1, η=0.95: π(a₂) (paper: 1.2×10⁶)"),
]


def _grid(steps: int, points: int = 400) -> np.ndarray:
    return np.unique(np.geomspace(1, steps, points).astype(np.int64))


def draw(steps: int = STEPS, sampled_steps: int = SAMPLED_STEPS, slow_steps: int = SLOW_STEPS):
    """The figure and the trajectories it plots.

    Panels 1-5 (GRPO, Dr.GRPO, MO-GRPO, exact PG, TAG): pi_t(a_0 | x), pi_t(a_1 | x), pi_t(a_2 | x) of
    the exact conditional-mean recursion for t on a log grid up to ``steps``, the iteration where the
    rule's winner (a_1, or a_2 under TAG) first reaches 0.99 marked when it is within ``steps``; the
    GRPO panel overlays sampled tabular GRPO (three seeds, up to ``sampled_steps``). Panel 6: the
    paper's two slow cases, the winner's probability on a linear grid up to ``slow_steps``.

    ``data`` has one row per plotted point: panel (the rule, or ``"slow:<rule>"``), kind
    (``"exact"`` or ``"sampled"``), seed (sampled only), t and pi_0, pi_1, pi_2 (the slow cases'
    rows carry all three), and ``data.attrs["t99"]`` maps each panel to its 0.99 iteration (None when
    not reached within the horizon). The defaults are the paper's horizons (tens of seconds);
    shorter horizons draw the same panels in a second or two once the recursion is compiled.
    """
    fig, axes = subplots(2, 3, figsize=(16, 9.5), sharey=True)
    grid = _grid(steps)
    frames, t99s = [], {}

    def rows(panel, kind, ts, traj, seed=None):
        frames.append(pd.DataFrame({"panel": panel, "kind": kind, "seed": seed, "t": ts,
                                    "pi_0": traj[:, 0], "pi_1": traj[:, 1], "pi_2": traj[:, 2]}))

    for ax, (rule, title) in zip(axes.flat, PANELS):
        ts, traj = run_recursion(INIT, rule=rule, steps=steps, record_at=grid, lam=1.0, **SETTING)
        rows(rule, "exact", ts, traj)
        for j in range(3):
            ax.plot(ts, traj[:, j], color=COLORS[j], lw=2.2, label=f"{LABELS[j]}, exact recursion")
        if rule == "grpo":
            sgrid = grid[grid <= sampled_steps]
            for k, seed in enumerate(SAMPLED_SEEDS):
                s = sampled_trajectory(INIT, rule="grpo", steps=sampled_steps, seed=seed, **SETTING)[sgrid]
                rows(rule, "sampled", sgrid, s, seed)
                for j in range(3):
                    ax.plot(sgrid, s[:, j], color=COLORS[j], lw=0.8, ls="--", alpha=0.8,
                            label="sampled GRPO, 3 seeds (dashed)" if (j, k) == (1, 0) else None)
        winner = 2 if rule == "tag" else 1
        t99 = iterations_to_reach(INIT, rule=rule, action=winner, threshold=0.99, lam=1.0, max_iter=steps, **SETTING)
        t99s[rule] = t99
        if t99 is not None:
            ax.axvline(t99, color=COLORS[winner], lw=0.8, ls=":")
            right = t99 > 1000  # keep the label inside the axes
            ax.text(t99 * (0.8 if right else 1.25), 0.3, f"π(a{winner}) ≥ 0.99\nat t = {t99:,}",
                    color=COLORS[winner], fontsize=9, ha="right" if right else "left")
        ax.set_title(title, fontsize=11)
        ax.legend(fontsize=8, loc="center left")

    ax = axes.flat[5]
    long_grid = np.arange(0, slow_steps + 1, max(slow_steps // 700, 1))
    for rule, kw, init, action, label in SLOW_CASES:
        ts, traj = run_recursion(init, rule=rule, n=8, alpha=0.1, steps=slow_steps, record_at=long_grid, **kw)
        rows(f"slow:{rule}", "exact", ts, traj)
        t99 = iterations_to_reach(init, rule=rule, n=8, alpha=0.1, action=action, threshold=0.99,
                                  max_iter=slow_steps, **kw)
        t99s[f"slow:{rule}"] = t99
        ours = f"{t99 / 1e6:.2f}×10⁶" if t99 is not None else f"not within {slow_steps:,}"
        ax.plot(ts / 1e6, traj[:, action], color=COLORS[action], lw=2.2, label=f"{label}; ours {ours}")
        if t99 is not None:
            ax.axvline(t99 / 1e6, color=COLORS[action], lw=0.8, ls=":")
    ax.axhline(0.99, color="k", lw=0.6, ls=":")
    ax.set_title("the paper's slow cases (n=8, α=0.1; linear time axis)", fontsize=11)
    ax.legend(fontsize=8, loc="center left")
    ax.set_xlabel("iteration t (millions of updates, linear scale)")

    for ax in axes.flat:
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[:5]:
        ax.set_xscale("log")
        ax.set_xlabel("iteration t (updates, log scale)")
    for ax in axes[:, 0]:
        ax.set_ylabel("policy probability π_t(a_j | x)")
    fig.suptitle("Three-action tabular model (paper 2 Fig. 3): exact conditional-mean recursion from "
                 "π₀ = (0.8, 0.01, 0.19), η = 0.3, ρ = 0.5, n = 8, α = 0.1 —\nsymmetric rules hand the policy to "
                 "the auxiliary-favoring a₁ (Theorem 1); TAG selects the primary-favoring a₂ (Theorem 2)",
                 fontsize=13, y=0.985)
    data = pd.concat(frames, ignore_index=True)
    data.attrs["t99"] = t99s
    return fig, data


def build(out_dir: Path) -> Path:
    fig, _ = draw()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return save(fig, out_dir / OUTPUT, dpi=110, rect=(0, 0, 1, 0.955))


if __name__ == "__main__":
    print(shown_path(build(Path(__file__).parent / "out")))
