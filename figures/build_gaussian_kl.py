"""The multi-reward paper's Figure 8: reverse versus forward KL for a Gaussian probe that invents a mode.

Base N(0,1), probe (1-eps) N(delta,1) + eps N(Delta,1). Panels: (a) KL_fwd and KL_rev against the
separation Delta at eps = 5%, exact (quadrature) and Monte-Carlo (N = 2048, 20 seeds, mean +- SD),
with the paper's approximations; (b) their ratio against l - 1; (c) benign drift delta with the
invented mode on/off at Delta = 6; (d) the three cases side by side (invented mode, benign drift,
mode dropping).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from analyses.kl import approx_kl, gaussian_mode_kl, mode_dropping_kl
from prereg_kit.progress import shown_path
from prereg_kit.report.plots import save, subplots

OUTPUT = "p2_fig8_gaussian_kl.png"
DESCRIPTION = ("Paper 2 Figure 8: forward vs reverse KL of a Gaussian probe with an invented mode (eps=5%) "
               "against the separation, their ratio, benign drift, and mode dropping (exact and N=2048 Monte-Carlo)")
INPUTS = "analyses.kl (computed; no data files)"

EPS = 0.05
SEPARATIONS = np.arange(0.5, 10.01, 0.25)
MC_SEPARATIONS = np.arange(1.0, 10.01, 1.0)
MC_SEEDS = range(20)
DRIFTS = np.linspace(0.0, 1.5, 16)
FWD, REV = "tab:blue", "tab:red"


def draw(separations=SEPARATIONS, mc_separations=MC_SEPARATIONS, mc_seeds=MC_SEEDS, drifts=DRIFTS):
    """The figure and the numbers it plots, at eps = 5%.

    ``data`` holds four tidy tables: ``"exact"`` (per separation Delta: exact KL_fwd and KL_rev, the
    paper's approximations eps and eps(l-1), and the ratio KL_rev / KL_fwd; panels a and b),
    ``"mc"`` (per Monte-Carlo separation: mean and SD over the seeds of KL_fwd, KL_rev and their
    ratio, N = 2048 each; panels a and b), ``"drift"`` (per benign drift delta at Delta = 6: KL_fwd
    and KL_rev with the invented mode, delta^2/2 without it, and KL_rev - KL_fwd; panel c) and
    ``"cases"`` (KL_fwd and KL_rev of the invented mode, benign drift and mode dropping; panel d).
    The defaults are the paper's grids; smaller ones draw the same panels faster.
    """
    separations = np.asarray(separations, dtype=float)
    mc_separations = np.asarray(mc_separations, dtype=float)
    drifts = np.asarray(drifts, dtype=float)
    mc_seeds = list(mc_seeds)
    exact = np.array([gaussian_mode_kl(EPS, s) for s in separations])
    approx = np.array([approx_kl(EPS, s) for s in separations])
    mc = np.array([[gaussian_mode_kl(EPS, s, method="mc", n=2048, seed=k) for k in mc_seeds] for s in mc_separations])
    fig, axes = subplots(2, 2, figsize=(14, 10.5))

    ax = axes[0, 0]
    ax.plot(separations, exact[:, 0], color=FWD, lw=2.2, label="KL_fwd = D(π₀‖π_T), exact")
    ax.plot(separations, exact[:, 1], color=REV, lw=2.2, label="KL_rev = D(π_T‖π₀), exact")
    ax.plot(separations, approx[:, 0], color=FWD, ls="--", lw=1.2, label="approx. ε (paper)")
    ok = approx[:, 1] > 0
    ax.plot(separations[ok], approx[ok, 1], color=REV, ls="--", lw=1.2, label="approx. ε(ℓ−1), ℓ = log ε + Δ²/2 (paper)")
    for j, c in ((0, FWD), (1, REV)):
        ax.errorbar(mc_separations, mc[:, :, j].mean(axis=1), yerr=mc[:, :, j].std(axis=1, ddof=1), fmt="o", ms=4,
                    color=c, capsize=3, label=f"Monte-Carlo N=2048 (mean ± SD, {len(mc_seeds)} seeds)" if j else None)
    ax.axhline(-math.log(1 - EPS), color="k", lw=0.8, ls=":", label="Lemma B.1(i) bound −log(1−ε)")
    ax.set_yscale("log")
    ax.set_ylim(1e-3, 5)
    ax.set_xlabel("separation Δ of the invented mode (units of the base SD)")
    ax.set_ylabel("KL divergence (nats)")
    ax.set_title(f"(a) invented mode of weight ε = {EPS:.0%}: forward KL saturates at ≈ ε,\nreverse KL grows like εΔ²/2")
    ax.legend(fontsize=8.5, loc="lower right")

    ax = axes[0, 1]
    ax.plot(separations, exact[:, 1] / exact[:, 0], color="k", lw=2.2, label="KL_rev / KL_fwd, exact")
    ell = np.log(EPS) + separations**2 / 2
    ax.plot(separations[ell > 1], ell[ell > 1] - 1, color="k", ls="--", lw=1.2, label="ℓ − 1 (paper's approximation)")
    r = mc[:, :, 1] / mc[:, :, 0]
    ax.errorbar(mc_separations, r.mean(axis=1), yerr=r.std(axis=1, ddof=1), fmt="o", ms=4, color="tab:purple",
                capsize=3, label=f"Monte-Carlo N=2048 (mean ± SD, {len(mc_seeds)} seeds)")
    i6 = int(np.argmin(np.abs(separations - 6)))
    ax.annotate(f"Δ=6: {exact[i6, 0]:.4f} vs {exact[i6, 1]:.3f} ({exact[i6, 1] / exact[i6, 0]:.1f}×)\n"
                "paper: 0.0505 vs 0.704 (14×)", (6, exact[i6, 1] / exact[i6, 0]), xytext=(1.0, 35),
                arrowprops=dict(arrowstyle="->"), fontsize=9)
    ax.set_yscale("log")
    ax.set_xlabel("separation Δ of the invented mode (units of the base SD)")
    ax.set_ylabel("ratio KL_rev / KL_fwd (dimensionless)")
    ax.set_title(f"(b) ratio of the two directions at ε = {EPS:.0%}: grows without bound in Δ²")
    ax.legend(fontsize=8.5, loc="lower right")

    ax = axes[1, 0]
    on = np.array([gaussian_mode_kl(EPS, 6.0, d) for d in drifts])
    ax.plot(drifts, on[:, 0], color=FWD, lw=2.2, label="KL_fwd, drift + invented mode (ε=5%, Δ=6)")
    ax.plot(drifts, on[:, 1], color=REV, lw=2.2, label="KL_rev, drift + invented mode (ε=5%, Δ=6)")
    ax.plot(drifts, drifts**2 / 2, color="k", lw=1.2, ls="--", label="either direction, drift only: δ²/2")
    ax.plot(drifts, on[:, 1] - on[:, 0], color="tab:purple", lw=1.5, ls="-.", label="KL_rev − KL_fwd (paper: 0.65 → 0.63)")
    ax.set_xlabel("benign location drift δ of the bulk (units of the base SD)")
    ax.set_ylabel("KL divergence (nats)")
    ax.set_title("(c) benign drift: the forward excess ε is swamped by δ²/2;\nthe reverse excess ε(ℓ−1) is not")
    ax.legend(fontsize=8.5, loc="upper left")

    ax = axes[1, 1]
    cases = {
        "invented mode\nε=5%, Δ=6": gaussian_mode_kl(EPS, 6.0),
        "benign drift\nδ=0.5, ε=0": gaussian_mode_kl(0.0, 6.0, 0.5),
        "mode dropping\nbase ½N(0,1)+½N(6,1),\nprobe N(6,1)": mode_dropping_kl(6.0, 0.5),
    }
    x = np.arange(len(cases))
    vals = np.array(list(cases.values()))
    for j, (c, name) in enumerate(((FWD, "KL_fwd (forgetting monitor)"), (REV, "KL_rev (invention monitor)"))):
        bars = ax.bar(x + (j - 0.5) * 0.38, vals[:, j], width=0.38, color=c, label=name)
        ax.bar_label(bars, fmt="%.3g", fontsize=9)
    ax.set_xticks(x, list(cases))
    ax.set_yscale("log")
    ax.set_ylim(1e-2, 40)
    ax.set_ylabel("KL divergence (nats)")
    ax.set_title("(d) the directions are complementary: mode dropping reverses the ratio\n(paper: 8.31 vs 0.689)")
    ax.legend(fontsize=9, loc="upper left")

    for a in axes.flat:
        a.grid(alpha=0.3, which="both" if a is not axes[1, 1] else "major")
    fig.suptitle("Reverse vs forward KL on Gaussians (paper 2 Fig. 8): base π₀ = N(0,1), "
                 "probe π_T = (1−ε)N(δ,1) + εN(Δ,1)", fontsize=13, y=0.995)
    data = {
        "exact": pd.DataFrame({"separation": separations, "kl_fwd": exact[:, 0], "kl_rev": exact[:, 1],
                               "approx_fwd": approx[:, 0], "approx_rev": approx[:, 1],
                               "ratio": exact[:, 1] / exact[:, 0]}),
        "mc": pd.DataFrame({"separation": mc_separations, "kl_fwd_mean": mc[:, :, 0].mean(axis=1),
                            "kl_fwd_sd": mc[:, :, 0].std(axis=1, ddof=1), "kl_rev_mean": mc[:, :, 1].mean(axis=1),
                            "kl_rev_sd": mc[:, :, 1].std(axis=1, ddof=1), "ratio_mean": r.mean(axis=1),
                            "ratio_sd": r.std(axis=1, ddof=1), "seeds": len(mc_seeds)}),
        "drift": pd.DataFrame({"drift": drifts, "kl_fwd": on[:, 0], "kl_rev": on[:, 1], "drift_only": drifts**2 / 2,
                               "excess": on[:, 1] - on[:, 0]}),
        "cases": pd.DataFrame({"case": [c.split("\n")[0] for c in cases], "kl_fwd": vals[:, 0], "kl_rev": vals[:, 1]}),
    }
    return fig, data


def build(out_dir: Path) -> Path:
    fig, _ = draw()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return save(fig, out_dir / OUTPUT, dpi=110, rect=(0, 0, 1, 0.97))


if __name__ == "__main__":
    print(shown_path(build(Path(__file__).parent / "out")))
