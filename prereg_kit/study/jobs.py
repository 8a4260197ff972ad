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

from ..chain.lock import check_plan, lock_path, read_chain
from ..errors import PreregError, ViolationError
from ..plan import Plan, PlanFile, format_tokens, load_plan
from ..plan.designs import seed_text
from ..runlog import run_dir


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


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _grouped(names: list[str], value_of) -> list[tuple[str, list[str]]]:
    """``names`` grouped by ``value_of(name)`` (a text), in order of first appearance."""
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(value_of(n), []).append(n)
    return list(groups.items())


def _budget_text(plan: Plan, name: str) -> str:
    b = plan.budget_of(name)
    return f"{format_tokens(b.tokens)} generated tokens" if b.tokens is not None else _count(b.iterations, "iteration")


def _per_group(groups: list[tuple[str, list[str]]]) -> str:
    """``30K generated tokens each`` for one group, else ``30K (a, b); 21M (c)``."""
    if len(groups) == 1:
        return f"{groups[0][0]} each"
    return "; ".join(f"{text} ({', '.join(cs)})" for text, cs in groups)


def stage_summary(plan: Plan, stage: str = "main") -> str:
    """What a stage runs, counted as the trainer counts it (runnable configurations × their seeds
    in this stage), in one line: ``2 configurations × 31 seeds (0-30) = 62 runs, B = 30K generated
    tokens each``; configurations that differ in seeds or budget are named with theirs, and those
    marked ``runnable = false`` are named apart (the trainer refuses them)."""
    names = plan.configurations_for(stage)
    runnable = [c for c in names if plan.configurations[c].runnable]
    seeds = _grouped(runnable, lambda c: seed_text(sorted(plan.seeds_for(stage, c))))
    n_runs = sum(len(plan.seeds_for(stage, c)) for c in runnable)
    if len(seeds) <= 1:
        n_seeds = len(plan.seeds_for(stage, runnable[0])) if runnable else 0
        runs = f"{_count(len(runnable), 'configuration')} × {_count(n_seeds, 'seed')}" + (f" ({seeds[0][0]})" if seeds else "")
    else:
        runs = _count(len(runnable), "configuration") + " (" + "; ".join(
            f"{', '.join(cs)}: {_count(len(plan.seeds_for(stage, cs[0])), 'seed')} ({text})" for text, cs in seeds) + ")"
    budget = f", B = {_per_group(_grouped(runnable, lambda c: _budget_text(plan, c)))}" if runnable else ""
    lengths = _grouped(runnable, lambda c: f"{plan.train_to(c, stage):g}B")
    if lengths and lengths != [("1B", runnable)]:
        budget += f", trained to {_per_group(lengths).removesuffix(' each')}"
    off = [c for c in names if c not in runnable]
    rest = f"; not runnable: {', '.join(off)} (runnable = false)" if off else ""
    return f"{runs} = {_count(n_runs, 'run')}{budget}{rest}"


def run_summary(plan: Plan) -> list[str]:
    """What a plan names to run, one line per stage: the main stage, then each other stage whose
    configurations, seeds or run lengths are not the main stage's (``stage smoke: …``); a plan
    with the main stage alone gives one line without a prefix (:func:`stage_summary`)."""
    main = stage_summary(plan, "main")
    others = [s.name for s in plan.stages if s.name != "main" and stage_summary(plan, s.name) != main]
    if not others:
        return [main]
    return [f"stage main: {main}"] + [f"stage {name}: {stage_summary(plan, name)}" for name in others]


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


__all__ = ["PlannedRun", "lock_state", "planned_runs", "require_locked", "run_summary", "stage_runs", "stage_summary"]
