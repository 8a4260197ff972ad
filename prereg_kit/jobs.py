"""Which runs a plan asks for, and the rule that main-stage runs need a locked, unchanged plan.

A study's runs are its configurations × seeds for each stage (dense-rewards paper §2.3, C.1: the
seeds and configurations are fixed before the runs). Main-stage runs — the ones the analysis
reads — start only from a plan that is locked and whose content is unchanged since its last lock
entry (comment-only edits are allowed); calibration, pilot and smoke runs may run on an unlocked
plan. Every trainer (the built-in one, or another behind the ``prereg_kit.runners`` entry point)
asks these functions rather than deciding for itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from .errors import PreregError, ViolationError
from .lock import check_plan, lock_path, read_chain
from .plan import Plan, PlanFile, load_plan
from .runlog import run_dir


@dataclass(frozen=True)
class PlannedRun:
    """One run a plan asks for: a configuration and seed of a stage, and the folder its log goes to."""

    configuration: str
    seed: int
    stage: str
    folder: Path


def planned_runs(plan: Plan, stage: str = "main") -> list[tuple[str, int]]:
    """Every (configuration, seed) of a stage, in the plan's order."""
    return [(c, s) for c in plan.configurations_for(stage) for s in plan.seeds_for(stage, c)]


def require_locked(plan_file: PlanFile | str | Path) -> None:
    """Refuse main-stage runs of an unlocked plan or one changed since its last lock entry.

    ``plan_file``: a loaded :class:`~prereg_kit.plan.PlanFile`, or a study folder or plan path.
    Raises :class:`~prereg_kit.errors.ViolationError` naming the plan and what to do.
    """
    path = plan_file.path if isinstance(plan_file, PlanFile) else load_plan(plan_file).path
    try:
        chain = read_chain(path)
    except PreregError as e:
        raise ViolationError(f"{e.lines[0]}; main-stage runs need a locked plan", *e.lines[1:]) from None  # the lock's path first
    pc = check_plan(path, chain)
    if pc.state == "changed":
        raise ViolationError(*pc.lines(path), f"{path}: main-stage runs refused until the change is recorded with `prereg amend`")


def lock_state(plan_path: str | Path) -> dict[str, Any]:
    """The plan's lock state now: ``{"locked": False}``, or the chain's length, its last entry's
    hash and time, and whether the plan still matches it (``clean``, ``comment-only``,
    ``changed``); ``{"locked": False, "error": ...}`` for a lock that does not verify."""
    if not lock_path(plan_path).exists():
        return {"locked": False}
    try:
        chain = read_chain(plan_path)
        state = check_plan(plan_path, chain).state
    except PreregError as e:
        return {"locked": False, "error": " ".join(e.lines)[:300]}
    return {"locked": True, "entries": len(chain.entries), "last_entry_hash": chain.last["hash"],
            "last_entry_time": chain.last["time"], "plan_state": state}


def stage_runs(study_dir: str | Path, stage: str = "main", configs: Sequence[str] | None = None,
               seeds: Sequence[int] | None = None) -> tuple[PlanFile, list[PlannedRun]]:
    """The runs of a stage (optionally a subset named by ``configs`` / ``seeds``), in the plan's order.

    Main-stage runs need a locked, unchanged plan (:func:`require_locked`); a stage the plan does
    not have, or a configuration or seed outside the stage, is an error naming what the stage has.
    """
    pf = load_plan(study_dir)
    plan = pf.plan
    if plan.stage(stage) is None and stage != "main":
        raise PreregError(f"{pf.path}: the plan has no stage {stage!r} (have: {', '.join(s.name for s in plan.stages)})")
    if stage == "main":
        require_locked(pf)
    study = pf.path.parent
    names, all_seeds = plan.configurations_for(stage), plan.all_seeds(stage)
    for bad in [c for c in configs or [] if c not in names]:
        raise PreregError(f"--configs: {bad!r} is not a configuration of stage {stage!r} (have: {', '.join(names)})")
    for bad in [s for s in seeds or [] if s not in all_seeds]:
        raise PreregError(f"--seeds: {bad} is not a seed of stage {stage!r} (have: {', '.join(map(str, all_seeds))})")
    runs = [PlannedRun(c, s, stage, run_dir(study, c, s, stage=stage)) for c, s in planned_runs(plan, stage)
            if (not configs or c in configs) and (seeds is None or s in seeds)]
    return pf, runs


__all__ = ["PlannedRun", "lock_state", "planned_runs", "require_locked", "stage_runs"]
