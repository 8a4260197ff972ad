"""Tables 3–4's layout for the registry studies that have run logs: every contrast of the CPU
studies, from `prereg analyze` (not from reported summaries), with a forest plot per study.
"""

from __future__ import annotations

from pathlib import Path

from figures.cpu_studies import registry_study
from prereg_kit.analysis.analyze import analyze_study
from prereg_kit.report import contrast_table
from prereg_kit.report.plots import forest_plot

OUTPUT = "cpu_contrasts.md"
DESCRIPTION = "CPU studies: every contrast from `prereg analyze` of their run logs, in Tables 3-4's layout, with forest plots (cpu_forest_<study>.png)"
INPUTS = "run logs of registry/cpu-grpo, registry/cpu-interventions and registry/cpu-multireward (committed in the registry, read through the analysis)"
STUDIES = ("cpu-grpo", "cpu-interventions", "cpu-multireward")


def build(out_dir: Path, study_dirs: list[Path] | None = None) -> Path:
    dirs = study_dirs if study_dirs is not None else [registry_study(s) for s in STUDIES]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    md = ["# CPU studies: every contrast, from their run logs", "",
          "Computed by `prereg analyze` from the studies' own run logs (kept with the studies in "
          "`registry/cpu-*/runs/`). Δ is treatment − control in the contrast's metric (held-out "
          "accuracy unless a metric column says otherwise; fractions, 0.01 = one point), paired by seed, 95% paired-t interval; primary contrasts Holm-adjusted in their family; "
          "† exploratory.", ""]
    for d in dirs:
        a = analyze_study(Path(d), progress=False)
        sid = a.plan.study.id
        forest_plot(a.contrasts, a.per_seed, out_dir / f"cpu_forest_{sid}.png", margin=a.plan.statistics.margin,
                    title=f"{sid}: every contrast from its run logs (treatment − control)")
        md += [f"## {sid}: {a.plan.study.title}", "", contrast_table(a.contrasts), "",
               f"![forest plot](cpu_forest_{sid}.png)", ""]
    path = out_dir / OUTPUT
    path.write_text("\n".join(md) + "\n")
    return path
