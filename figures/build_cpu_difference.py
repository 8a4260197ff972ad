"""The dense-rewards paper's Figure 3 form from the CPU studies' run logs: treatment − control against training time.

Every primary contrast of ``registry/cpu-grpo`` and ``registry/cpu-interventions``: per seed both
runs interpolated linearly in training time on one grid, the mean difference and a 95% t band.
"""

from __future__ import annotations

from pathlib import Path

from figures.cpu_studies import primary_curves
from prereg_kit.report.plots import difference_figure

OUTPUT = "cpu_difference_vs_time.png"
DESCRIPTION = "CPU studies: primary differences (treatment − control) against training time, mean and 95% band (paper 1 Figure 3's form)"
INPUTS = "run logs of registry/cpu-grpo and registry/cpu-interventions (committed in the registry, read through the analysis)"
STUDIES = ("cpu-grpo", "cpu-interventions")


def draw(study_dirs: list[Path]):
    """The figure and its data (:func:`prereg_kit.report.plots.difference_figure`): each study's primary
    token-read contrasts, treatment − control over training time."""
    import pandas as pd

    frames, pairs = [], []
    for d in study_dirs:
        plan, _, curves = primary_curves(Path(d))
        frames.append(curves.assign(configuration=plan.study.id + ":" + curves["configuration"]))
        pairs += [(c.id, f"{plan.study.id}:{c.treatment}", f"{plan.study.id}:{c.control}")
                  for c in plan.contrasts if c.tier == "primary" and c.reading_point.kind == "tokens"]
    return difference_figure(pd.concat(frames, ignore_index=True), pairs,
                             title="CPU studies: primary differences over training time (from run logs)")


def build(out_dir: Path, study_dirs: list[Path] | None = None) -> Path:
    from figures.cpu_studies import registry_study
    from prereg_kit.report.plots import save

    fig, _ = draw(study_dirs if study_dirs is not None else [registry_study(s) for s in STUDIES])
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return save(fig, Path(out_dir) / OUTPUT)
