"""The CPU studies behind the run-log figures, read through the analysis.

Each CPU study keeps its lock and sealed run logs in the registry (``registry/cpu-*/plan.lock``
and ``runs/``; ``make cpu-studies`` trains them in place). The figures read them only through
:func:`prereg_kit.analysis.analyze.study_curves`: the same lock verification, run audit, seal checks,
design and admission rules as ``prereg analyze``. Building figures never trains: a study whose
runs are missing or incomplete is an error naming the command that produces them.
"""

from __future__ import annotations

from pathlib import Path

from prereg_kit.analysis.analyze import study_curves
from prereg_kit.errors import PreregError
from prereg_kit.plan import load_plan
from prereg_kit.runlog import RunLogError, read_meta, uses_elected_anchor
from prereg_kit.study.jobs import stage_runs

REPO = Path(__file__).resolve().parents[1]
REGISTRY = REPO / "registry"


class MissingRunsError(RuntimeError):
    """A CPU study has no complete, locked runs to draw."""


def missing_runs(study: Path) -> list[str]:
    """What keeps ``study`` from being drawn (empty when its plan is locked and unchanged and
    every main run of the plan is complete)."""

    if not (study / "plan.lock").exists():
        return ["no plan.lock"]
    try:
        _, runs = stage_runs(study)  # main runs: the plan locked and unchanged
    except PreregError as e:
        return list(e.lines)
    out = []
    for r in runs:
        try:
            status = read_meta(r.folder).status
        except RunLogError:
            status = "missing"
        if status != "complete":
            out.append(f"{r.folder.relative_to(study).as_posix()}: {status}")
    return out


def needs_election(study: Path) -> bool:
    """A configuration takes the elected anchor: the study needs ``prereg elect`` before its runs."""
    plan = load_plan(study).plan
    return any(uses_elected_anchor(plan.resolved_config(c)) for c in plan.configurations)


def registry_study(name: str, *, registry: Path = REGISTRY) -> Path:
    """``registry/<name>`` when its locked main runs are all complete; else :class:`MissingRunsError`
    naming what is missing and the commands that train it (figures never train)."""
    d = registry / name
    gaps = missing_runs(d)
    if not gaps:
        return d
    rel = d.relative_to(REPO).as_posix() if d.is_relative_to(REPO) else str(d)
    steps = []
    if needs_election(d) and not (d / "election.json").exists():
        steps.append(f"prereg elect {rel} (with the Makefile's ELECT_ARGS)")
    steps += [f"prereg lock {rel}/plan.toml", f"prereg run {rel}"]
    more = f" (and {len(gaps) - 3} more)" if len(gaps) > 3 else ""
    raise MissingRunsError(f"{rel}: no complete runs to draw ({'; '.join(gaps[:3])}{more}); "
                           f"train them first: {' && '.join(steps)} (or `make cpu-studies`)")


def primary_curves(study: Path, metric: str = "accuracy"):
    """``(plan, curves of the study, admitted curves of metric)``: the primary set under the plan's
    verifier, as :func:`prereg_kit.analysis.analyze.study_curves` admits them (its ``iterations`` too)."""

    sc = study_curves(study, metric=metric)
    return sc.plan, sc, sc.curves
