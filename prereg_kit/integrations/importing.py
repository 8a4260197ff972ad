"""The import core: another trainer's run, as read from its logs, written as a prereg run log.

An importer (verl, OpenRLHF, TRL's ``trainer_state.json``, a tracker export) reads the tool's
files into an :class:`ImportedRun`: the run-log iteration rows (generated tokens of every kind,
cumulative updates, stage seconds or one unsplit step time) and one evaluation row per
evaluation x set x problem. :func:`write_imported_run` places it in the study as
``runs/<configuration>/seed-<n>/`` under the same rules as a run of the built-in trainer:

- the configuration and seed must be ones the plan's stage runs (dense-rewards paper §2.3, C.1:
  seeds and configurations are fixed before the runs), and a main-stage import needs a locked,
  unchanged plan (:func:`prereg_kit.study.jobs.require_locked`);
- a run folder that already holds files is never overwritten, and a run is written only inside
  the study (a symbolic link on the way to its folder is refused before anything is written);
- each evaluation is placed at the compute spent before it: cumulative generated tokens,
  training seconds and updates after the iterations it follows (dense-rewards paper §2.3: accuracy is
  read at matched generated tokens), 0 for the evaluation before training;
- the run's start time must be known, and a main run must have started after the plan was locked
  (dense-rewards paper §C.1): the import asks the audit's own rule (:func:`prereg_kit.study.audit.main_run_problems`)
  before it writes, so a run trained before the lock is refused at import with both times named;
  the run is recorded under the plan entry in force when it started;
- the run is written through :class:`prereg_kit.runlog.RunLogWriter` (so it is validated like
  every run), marked complete, and a main run is sealed into the lock chain; a refused import
  leaves nothing behind (the folders it made are removed).
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .. import __version__
from ..chain.lock import read_chain
from ..chain.seal import seal_runs
from ..errors import PreregError, ViolationError
from ..plan import load_plan
from ..runlog import (
    STAGE_SECONDS,
    TOKEN_KINDS,
    RunLogError,
    RunLogWriter,
    RunMeta,
    check_inside,
    read_meta,
    run_dir,
    utc_now,
    write_meta,
)
from ..study.audit import check_device, main_run_problems, plan_entry_at, split_device
from ..study.jobs import require_locked
from .jsonlines import written

STEP_SECONDS = "seconds_step"  # one unsplit training time per iteration, for a trainer that does not split stages
# Beyond any real step, and what keeps a run's cumulative counts exact: a step generates fewer than
# 2^40 tokens (cumulative int64 counts then hold millions of steps) and takes less than 10^9 s
MAX_STEP_TOKENS = 2**40
MAX_STEP_SECONDS = 1e9
MAX_STEP = 2**53  # a step number beyond any run's (and still exact as a float)


@dataclass
class ImportedRun:
    """One run of another trainer, in run-log terms (see the module docstring).

    ``iterations``: ``iteration`` (0-based, 0..n-1 without gaps), ``tokens_rollout``,
    ``tokens_continuation``, ``tokens_discarded``, ``updates`` (cumulative), and either the five
    ``seconds_*`` stages or ``seconds_step``; optional ``reward_mean``, ``mixed_share``,
    ``length_mean``, ``truncation_rate`` and any extra columns (kept as they are).
    ``evaluations``: ``iteration`` (iterations done before it; 0 = before training),
    ``eval_set``, ``problem_id``, ``samples``, ``correct``; optional ``correct_strict``,
    ``boxed``, ``greedy_correct``, ``level``, ``log_length``, ``eval_seed`` and extras.
    """

    trainer: str
    importer: str
    iterations: pd.DataFrame
    evaluations: pd.DataFrame
    config: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    device: str = "unknown"
    start_source: str = "--started-at"  # where started_at was read: named when the audit refuses it


def file_record(path: str | Path, root: str | Path | None = None) -> dict[str, str]:
    """``{"path": relative to root, "sha256": "sha256:<hex>"}`` of a file an importer read."""
    p = Path(path)
    rel = p.name if root is None else (p.relative_to(root).as_posix() if p != Path(root) else p.name)
    return {"path": rel, "sha256": "sha256:" + hashlib.sha256(p.read_bytes()).hexdigest()}


def step_seconds(iterations: pd.DataFrame) -> np.ndarray:
    """Training seconds of each iteration: the sum of the five stages, else the unsplit step time.

    A row must have all five stages or none of them and a step time: a partial split would make a
    stage share out of a guess.
    """
    have = [c for c in STAGE_SECONDS if c in iterations.columns]
    stages = iterations[have].notna().to_numpy() if have else np.zeros((len(iterations), 0), dtype=bool)
    full = stages.all(axis=1) & (len(have) == len(STAGE_SECONDS))
    partial = stages.any(axis=1) & ~full
    step = (iterations[STEP_SECONDS].notna().to_numpy() if STEP_SECONDS in iterations.columns
            else np.zeros(len(iterations), dtype=bool))
    bad = np.flatnonzero(partial | (~full & ~step))
    if bad.size:
        i = int(bad[0])
        missing = [c for c in STAGE_SECONDS if c not in have or pd.isna(iterations[c].iloc[i])]
        raise PreregError(f"iteration {int(iterations['iteration'].iloc[i])}: needs all five stage times or an unsplit "
                          f"{STEP_SECONDS} (missing: {', '.join(missing)})")
    total = np.where(full, iterations[have].sum(axis=1, min_count=1).to_numpy(dtype=float) if have else 0.0,
                     iterations[STEP_SECONDS].to_numpy(dtype=float) if STEP_SECONDS in iterations.columns else 0.0)
    return total


def place_evaluations(iterations: pd.DataFrame, evaluations: pd.DataFrame) -> pd.DataFrame:
    """Evaluation rows with ``eval_index`` (order of distinct ``iteration``) and the cumulative
    ``tokens``, ``train_seconds`` and ``updates`` after the iterations each evaluation follows."""
    n = len(iterations)
    it = iterations["iteration"].to_numpy()
    if n and not np.array_equal(it, np.arange(n)):
        k = int(np.flatnonzero(it != np.arange(n))[0])
        raise PreregError(f"iterations: row {k + 1} is iteration {it[k]}, expected {k}: the iterations must run 0..n-1 "
                          "without gaps (a missing iteration's tokens would be missing from every later evaluation)")
    if not len(evaluations):
        return evaluations.copy()
    tokens = np.concatenate([[0], np.cumsum(iterations[list(TOKEN_KINDS)].to_numpy(dtype=np.int64).sum(axis=1))])
    seconds = np.concatenate([[0.0], np.cumsum(step_seconds(iterations))])
    updates = np.concatenate([[0], iterations["updates"].to_numpy(dtype=np.int64)])
    ev = evaluations.copy()
    at = pd.to_numeric(ev["iteration"], errors="coerce").to_numpy()
    bad = np.flatnonzero(np.isnan(at) | (at < 0) | (at > n) | (np.mod(np.nan_to_num(at), 1) != 0))
    if bad.size:
        v = ev["iteration"].iloc[int(bad[0])]
        raise PreregError(f"evaluations: row {int(bad[0]) + 1}: iteration {v.item() if isinstance(v, np.generic) else v!r} is not "
                          f"between 0 and the {n} iterations logged")
    at = at.astype(np.int64)
    order = {v: k for k, v in enumerate(sorted(set(at.tolist())))}
    ev["eval_index"] = [order[v] for v in at]
    ev["iteration"] = at
    ev["tokens"], ev["train_seconds"], ev["updates"] = tokens[at], seconds[at], updates[at]
    return ev.sort_values(["eval_index", "eval_set"], kind="stable", ignore_index=True)


def iterations_from_lengths(steps: pd.DataFrame, *, where: str, length_key: str, responses_per_step: int | np.ndarray,
                            seconds_key: str, updates_per_step: int | np.ndarray,
                            optional: dict[str, str] | None = None) -> pd.DataFrame:
    """Iteration rows for a trainer that logs a mean completion length and one step time per step.

    ``steps``: one row per training step (``step`` 1..n, every step present; ``line`` names where
    it was read). Generated tokens = mean completion length x completions of the step (one number,
    or one per step where the tool logs it; the tool's
    token counters include prompts); ``seconds_step`` = the step time, unsplit; updates cumulative
    (``updates_per_step``: one number, or one per step). ``optional`` maps run-log columns
    (``reward_mean``, ``truncation_rate`` ...) to logged keys. A length or time that is missing,
    not a finite number >= 0, or a step of 2^40 tokens or more is refused naming the step's
    line, the key and the value.
    """
    steps = steps.sort_values("step", ignore_index=True)
    want = np.arange(1, len(steps) + 1)
    got = steps["step"].to_numpy()
    if not len(steps) or not np.array_equal(got, want):
        k = int(np.flatnonzero(got != want)[0]) if len(steps) and len(got) == len(want) else min(len(got), len(want))
        at = f"step {got[k]} where {k + 1} was due" if k < len(got) else "no training steps"
        raise PreregError(f"{where}: {at}: every training step must be logged (a logging interval above 1 drops "
                          "steps, and their tokens with them: log every step)")
    lines = steps["line"].to_numpy() if "line" in steps.columns else np.full(len(steps), "")
    for key in (length_key, seconds_key):
        if key not in steps.columns:
            raise PreregError(f"{where}: key {key!r} is not logged (have: {', '.join(sorted(map(str, steps.columns)))[:300]})")
        v = pd.to_numeric(steps[key], errors="coerce").to_numpy(dtype=float)
        bad = np.flatnonzero(~np.isfinite(v) | (v < 0))
        if bad.size:
            i = int(bad[0])
            raw = steps[key].iloc[i]
            raise PreregError(f"{where}:{lines[i]}: step {got[i]}: key {key!r} "
                              + ("missing or null" if raw is None or (isinstance(raw, float) and np.isnan(raw))
                                 else f"is {written(raw)}, expected a number >= 0"))
    length = steps[length_key].to_numpy(dtype=float)
    tokens = length * np.asarray(responses_per_step, dtype=float)
    over = np.flatnonzero(tokens >= MAX_STEP_TOKENS)
    if over.size:
        i = int(over[0])
        raise PreregError(f"{where}:{lines[i]}: step {got[i]}: key {length_key!r} is {written(steps[length_key].iloc[i])}: "
                          "times the step's completions that is above 2^40 tokens, which no step reaches")
    seconds = steps[seconds_key].to_numpy(dtype=float)
    over = np.flatnonzero(seconds >= MAX_STEP_SECONDS)
    if over.size:
        i = int(over[0])
        raise PreregError(f"{where}:{lines[i]}: step {got[i]}: key {seconds_key!r} is {written(steps[seconds_key].iloc[i])}: "
                          "above 10^9 seconds, which no step takes")
    out = pd.DataFrame({"iteration": np.arange(len(steps)), "tokens_rollout": np.rint(tokens).astype(np.int64),
                        "tokens_continuation": 0, "tokens_discarded": 0, STEP_SECONDS: seconds,
                        "updates": np.cumsum(np.broadcast_to(np.asarray(updates_per_step, dtype=np.int64), len(steps))),
                        "length_mean": length})
    for col, key in (optional or {}).items():
        if key in steps.columns:
            out[col] = pd.to_numeric(steps[key], errors="coerce").to_numpy(dtype=float)
    return out


def check_target(study_dir: str | Path, configuration: str, seed: int, stage: str):
    """The study's plan if ``configuration`` / ``seed`` are a run of ``stage`` that may be imported
    (a main-stage run needs a locked, unchanged plan); ``prereg import`` checks this before it reads
    the other trainer's files, so a wrong study path is named first."""
    pf = load_plan(study_dir)
    plan = pf.plan
    if stage != "main" and plan.stage(stage) is None:
        raise PreregError(f"{pf.path}: the plan has no stage {stage!r} (have: {', '.join(s.name for s in plan.stages) or 'none'})")
    names = plan.configurations_for(stage)
    if configuration not in names:
        raise PreregError(f"--configuration: {configuration!r} is not a configuration of stage {stage!r} of {pf.path} "
                          f"(have: {', '.join(names)})")
    seeds = plan.seeds_for(stage, configuration)
    if seed not in seeds:
        raise PreregError(f"--seed: {seed} is not a seed of configuration {configuration!r} in stage {stage!r} of "
                          f"{pf.path} (have: {', '.join(map(str, seeds))})")
    if stage == "main":
        require_locked(pf)
    return pf


def _check_sets(pf, evaluations: pd.DataFrame) -> None:
    # the analysis reads the plan's sets by name: a set it does not know would be silently unread
    have = [s.name for s in pf.plan.evaluation.sets]
    unknown = sorted(set(evaluations["eval_set"].astype(str)) - set(have)) if len(evaluations) else []
    if unknown:
        raise PreregError(f"evaluations: set {unknown[0]!r} is not an evaluation set of {pf.path} (have: {', '.join(have)}); "
                          "name the set the outputs belong to (--eval-set)")


def write_imported_run(study_dir: str | Path, configuration: str, seed: int, run: ImportedRun, *,
                       stage: str = "main", seal: bool = True) -> Path:
    """Write ``run`` as the run log of ``configuration`` / ``seed`` of ``stage``; return its folder.

    Refuses (one line each, before anything is written) a configuration or seed the stage does not
    have, a main-stage import of an unlocked or changed plan, a folder that already has files or is
    reached through a symbolic link, a run without a start time, a main run that started before
    the lock (or under an entry an amendment superseded for its configuration), and iteration or
    evaluation rows the run-log format does not admit. Main runs are sealed. A refusal after the
    first file was written removes what this import made.
    """
    pf = check_target(study_dir, configuration, seed, stage)
    study = pf.path.parent
    folder = run_dir(study, configuration, seed, stage=stage)
    try:
        check_inside(study, folder)
    except RunLogError as e:
        raise PreregError(f"{e}; nothing imported") from None
    if folder.exists() and any(folder.iterdir()):
        raise PreregError(f"{folder}: already holds files; an import never overwrites a run (remove the folder to import again)")
    if run.started_at is None:
        raise PreregError(f"{run.importer}: the run's start time is not in its logs: give it (--started-at, UTC, e.g. "
                          "2026-01-31T12:00:00Z); the audit checks that a main run started after the plan was locked")
    iterations = run.iterations.reset_index(drop=True)
    step_seconds(iterations)  # refuse a half-split row before anything is written
    evals = place_evaluations(iterations, run.evaluations)
    _check_sets(pf, evals)
    plan_hash = pf.content_sha256
    if stage == "main":
        chain = read_chain(pf.path)
        entry = plan_entry_at(chain, run.started_at)
        plan_hash = entry["content_sha256"] if entry is not None else plan_hash
    source = {**run.source, "importer": run.importer, "imported_at": utc_now().isoformat(), "importer_version": __version__}
    device, cpu = split_device(check_device(run.device))  # "cpu (<model>)" → device cpu, meta.cpu <model>
    meta = RunMeta(study=pf.plan.study.id, configuration=configuration, seed=seed, stage=stage,
                   plan_hash=plan_hash, config=run.config, started_at=run.started_at, device=device,
                   tool_version=__version__, trainer=run.trainer, source=source, **({"cpu": cpu} if cpu else {}))
    if stage == "main":
        problems = main_run_problems(f"{configuration}/seed-{seed}", meta, chain)
        if problems:
            raise ViolationError(f"{problems[0]} (start time from {run.start_source}); nothing imported")
    made = [p for p in [folder, *folder.parents] if study in p.parents and not p.exists()]
    try:
        w = RunLogWriter(folder, meta, buffered=True)  # a whole run at once: straight to Parquet
        try:
            w.log_iterations(iterations)
            w.log_eval_rows(evals)
        except RunLogError as e:
            w.finish("failed", compact=False)
            raise PreregError(f"{e}; nothing imported") from None
        w.finish("complete")
        if run.ended_at is not None:
            write_meta(folder, read_meta(folder).model_copy(update={"ended_at": run.ended_at}))
        if stage == "main" and seal:
            res = seal_runs(study, [folder])
            if res.refused:
                raise PreregError(f"{folder}: not sealed: {res.refused[0]}; nothing imported")
    except BaseException:
        _remove_made(folder, made)
        raise
    return folder


def _remove_made(folder: Path, made: list[Path]) -> None:
    """Undo a refused import: its run folder's files, and each folder it created that is now empty."""
    if folder.is_dir() and not folder.is_symlink():
        if folder in made:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            for p in folder.iterdir():
                if p.is_file() or p.is_symlink():
                    p.unlink()
    for d in sorted(made, key=lambda p: len(p.parts), reverse=True):
        try:
            d.rmdir()
        except OSError:
            pass


def import_summary(folder: Path, run: ImportedRun, *, configuration: str, seed: int, stage: str) -> dict[str, Any]:
    """What an import wrote, as ``prereg import ... --json`` prints it: the run folder, its
    iterations, generated tokens, evaluations and evaluation rows, whether it was sealed, the
    start time and where it came from, and the importer's notes."""
    it, ev = run.iterations, run.evaluations
    tokens = int(it[list(TOKEN_KINDS)].to_numpy(dtype=np.int64).sum()) if len(it) else 0
    return {"run": str(folder), "importer": run.importer, "trainer": run.trainer, "configuration": configuration,
            "seed": seed, "stage": stage, "iterations": int(len(it)), "tokens": tokens,
            "evaluations": int(ev["iteration"].nunique()) if len(ev) else 0, "evaluation_rows": int(len(ev)),
            "sealed": stage == "main", "started_at": run.started_at.isoformat() if run.started_at else None,
            "start_source": run.start_source, "notes": list(run.source.get("notes", []))}


__all__ = ["MAX_STEP", "MAX_STEP_SECONDS", "MAX_STEP_TOKENS", "STEP_SECONDS", "ImportedRun", "check_target", "file_record",
           "import_summary", "iterations_from_lengths", "place_evaluations", "step_seconds", "write_imported_run"]
