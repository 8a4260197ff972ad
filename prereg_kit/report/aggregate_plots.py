"""Performance-profile figure (rliable's score distributions, Agarwal et al. 2021, Fig. 5's form):
for each configuration the share of run × task scores above τ, with its pointwise stratified-
bootstrap band, from :func:`prereg_kit.stats.performance_profile`; the legend (a line per
configuration, an entry for the bands) to the right of the panel. Drawn on a figure pyplot never
sees (:func:`prereg_kit.report.plots.subplots`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ..stats import PerformanceProfile
from .plots import band_entry, legend_outside, save, subplots


def draw_performance_profile(profiles: Mapping[str, PerformanceProfile], *, title: str,
                             xlabel: str = "score τ"):
    """The figure and its axes: one step-free line per configuration (fraction of scores > τ)
    and its shaded interval; refuses an empty mapping or profiles on different thresholds."""
    if not profiles:
        raise ValueError("no profiles to draw: give at least one configuration")
    taus = {p.taus for p in profiles.values()}
    if len(taus) != 1:
        raise ValueError("profiles must share their thresholds τ to be drawn on one axis")
    fig, ax = subplots(figsize=(7.5, 4.0))
    for name, prof in profiles.items():
        x = np.array(prof.taus)
        (line,) = ax.plot(x, prof.fraction, lw=1.8, label=name)
        ax.fill_between(x, prof.ci_low, prof.ci_high, color=line.get_color(), alpha=0.2, lw=0)
    level = next(iter(profiles.values())).confidence
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction of runs × tasks with score > τ")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{title}\n(bands: {100 * level:g}% stratified bootstrap)", fontsize=10)
    legend_outside(ax, *band_entry(ax, f"band: {100 * level:g}% stratified bootstrap"))  # never over a curve
    ax.grid(alpha=0.3)
    return fig, ax


def performance_profile_figure(profiles: Mapping[str, PerformanceProfile], path: Path, *, title: str,
                               xlabel: str = "score τ") -> Path:
    """Draw :func:`draw_performance_profile` and write it to ``path``."""
    fig, _ = draw_performance_profile(profiles, title=title, xlabel=xlabel)
    return save(fig, path)
