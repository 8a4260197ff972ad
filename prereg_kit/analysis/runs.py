"""The runs a study's analysis reads: verified, loaded, held to the plan's design, admitted.

Dense-rewards paper §2.3, §C.1, App. D: before any reading, the lock chain, the plan, the runs'
seals and the run-timing audit are verified (``prereg_kit.study.verify``); the run logs are loaded
(main stage) and the plan's design is enforced (``prereg_kit.study.design``): an unreadable run log, a
planned run that is missing (unless the plan allows missing seeds) or an evaluation on other
problems than the plan's is a violation, named run by run; a plan's ``[[sources]]`` add their
runs (``prereg_kit.analysis.sources``), held to the same design. :func:`admitted_curves` then applies
the plan's admission rules to one set's curves. ``prereg analyze`` (``prereg_kit.analysis.analyze``) and
the figures' :func:`study_curves` read through here, so both refuse the same studies.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .. import readings as rd
from ..chain.lock import Chain
from ..errors import PreregError, ViolationError
from ..plan import Plan, PlanFile, load_plan, resolve_plan_path
from ..runlog import StudyRuns, load_study
from ..runlog.memory import release_memory
from ..study.design import eval_problem_violations, missing_runs
from ..study.verify import verify_study
from .looks import restrict_to_look
from .sources import load_sources, merged, open_sources, run_folders, source_records

HINT = "(use --exploratory to analyze anyway, with every result labelled exploratory)"


def check_verified(study_dir: Path, exploratory: bool, tsa_ca=None) -> tuple[list[str], dict, list[str], Chain | None]:
    """``prereg verify`` as an analysis reads it: its lines, its summary, its notes and the lock chain
    it read (None when unreadable), which the analysis passes on instead of reading ``plan.lock`` again."""
    rep = verify_study(study_dir, tsa_ca=tsa_ca)
    lines = list(rep.info) + [f"warning: {w}" for w in rep.warnings]
    notes = []
    bad = rep.violations + rep.problems
    if bad and not exploratory:
        cls = PreregError if rep.problems else ViolationError  # as verify: unusable input (2) first
        raise cls(*[f"{b} (preregistration check failed)" if not b.startswith("  ") else b for b in bad], HINT)  # the path first
    if bad:
        notes += [f"preregistration check failed: {b.strip()}" for b in bad]
        lines += [f"FAILED: {b.strip()}" for b in bad]
    else:
        lines.append("lock chain intact; plan unchanged since its last entry; run timing audit clean")
    summary = {"exit_code": rep.exit_code, "violations": rep.violations, "problems": rep.problems,
               "warnings": rep.warnings,
               "entries": [{k: e[k] for k in ("index", "kind", "time", "content_sha256")} for e in rep.chain.plan_entries]
               if rep.chain else [],
               "seals": len(rep.chain.seals) if rep.chain else 0,
               "head": {k: rep.chain.head[k] for k in ("index", "kind", "time", "hash")} if rep.chain else None}
    return lines, summary, notes, rep.chain




@dataclass
class VerifiedRuns:
    """A study's main-stage runs as the analysis admits them to be read: the lock verified, run
    start times audited, seals checked, the plan's design enforced (``prereg verify`` and
    ``prereg_kit.study.design``). The main runs' evaluation rows are held once, by set, in ``sets``;
    ``runs.evals`` keeps their columns and no rows."""

    plan_path: Path
    plan_file: PlanFile
    lock_lines: list[str]
    lock_summary: dict
    runs: StudyRuns
    design_exclusions: pd.DataFrame
    notes: list[str]
    sets: rd.SetRows  # each set's rows of the main runs' evaluations, split once
    drift: dict = field(default_factory=dict)  # drift flags by (set, levels): read once per analysis
    look: int = 0  # the sequential look read (0: the plan has none)
    chain: Chain | None = None  # the lock chain as verified, read once (None: unreadable, --exploratory)
    sources: list[dict] = field(default_factory=list)  # the studies [[sources]] read: identity, runs (analysis.sources)

    def rows_of(self, eval_sets: list[str]) -> pd.DataFrame:
        """The evaluation rows of ``eval_sets`` (a new frame when more than one)."""
        frames = [self.sets(s) for s in dict.fromkeys(eval_sets)]
        return frames[0] if len(frames) == 1 else pd.concat(frames)


def verified_runs(study_dir: str | Path, *, exploratory: bool = False, progress: bool | None = None,
                   tsa_ca: str | Path | None = None, look: int | None = None) -> VerifiedRuns:
    plan_path = resolve_plan_path(study_dir)
    study_dir = plan_path.parent
    lock_lines, lock_summary, notes, chain = check_verified(study_dir, exploratory, tsa_ca)
    pf = load_plan(plan_path)
    st = load_study(study_dir, progress=progress)
    folders, studies = {}, []
    if pf.plan.sources:  # other studies' configurations: added to the plan, their runs to this study's
        plan, studies = open_sources(pf, chain, notes)
        st = merged(st, load_sources(studies, [s.name for s in plan.evaluation.sets], progress=progress))
        pf, folders = dataclasses.replace(pf, plan=plan), run_folders(study_dir, studies)
    release_memory()  # what loading freed (per-run tables), before the design check's working arrays
    pf, st, k = restrict_to_look(pf, st, look, notes)  # a sequential plan: only the look's seeds
    plan = pf.plan
    design_ex = enforce_design(study_dir, plan, st, exploratory, notes, folders=folders)
    release_memory()
    for prob in st.problems:
        if prob.kind != "corrupt":
            notes.append(f"run log: {prob}")
    if not len(st.meta):
        raise PreregError(f"{study_dir}: no run logs under runs/ (run `prereg run {study_dir}` or `prereg dry-run`)")
    main = st.meta[st.meta["stage"] == "main"]
    if len(main) < len(st.meta):
        notes.append(f"{len(st.meta) - len(main)} non-main run(s) under runs/ left out of the analysis")
    keep = st.evals if len(main) == len(st.meta) else st.evals.merge(main[["configuration", "seed"]], on=["configuration", "seed"])
    st = dataclasses.replace(st, evals=keep.iloc[:0].copy())  # the rows live on in their sets only (a view would keep them)
    sets = rd.SetRows(keep, consume=True)  # at hundreds of runs the rows are most of the memory
    release_memory()
    return VerifiedRuns(plan_path, pf, lock_lines, lock_summary, st, design_ex, notes, sets, look=k, chain=chain,
                        sources=source_records(studies, plan, st.meta))


def admitted_curves(v: VerifiedRuns, eval_set: str, verifier: str, metric: str,
              levels: tuple[int, ...] = ()) -> tuple[rd.AdmissionResult, pd.DataFrame]:
    """Curves of ``metric`` on ``eval_set`` (its problems of ``levels``; all when empty) kept by
    the plan's admission rules, and the drift flags."""
    adm = v.plan_file.plan.admission
    try:
        evals = rd.select_levels(v.sets(eval_set), eval_set, levels)
        curves = rd.accuracy_curve(evals, eval_set=eval_set, verifier=verifier, metric=metric)
        flags = v.drift.get((eval_set, levels))
        if flags is None:  # the curve just read is one of the two drift compares: not read again
            known = {verifier: curves} if metric == "accuracy" and verifier in ("default", "strict") else None
            flags = v.drift[(eval_set, levels)] = rd.drift_flags(evals, eval_set=eval_set, threshold=adm.drift_threshold,
                                                                 known=known)
        a = rd.apply_admission(curves, iterations=v.runs.iterations, min_iteration=adm.min_iterations,
                               meta=v.runs.meta, statuses=("complete",) if adm.require_complete else None,
                               flags=flags, drop_drifted_evaluations=adm.drifted == "exclude")
    except rd.ReadingError as e:
        raise PreregError(f"{v.plan_path.parent}: {e}") from None
    return a, flags


@dataclass
class StudyCurves:
    """Admitted curves of one metric of a verified study, for figures: the same verification,
    seal checks, design and admission rules as :func:`analyze_study`."""

    plan: Plan
    curves: pd.DataFrame  # configuration, seed, eval_index, tokens, train_seconds, updates, accuracy (the metric's value)
    iterations: pd.DataFrame  # the main runs' iteration rows (with running sums)
    exclusions: pd.DataFrame
    notes: list[str]


def study_curves(study_dir: str | Path, *, metric: str = "accuracy", eval_set: str | None = None,
                 verifier: str | None = None, progress: bool | None = False) -> StudyCurves:
    """Curves of ``metric`` (default the primary set under the plan's verifier; ``math_verify``
    reads as ``default``) of a study whose lock, audit, seals and design verify, after its
    admission rules. Refuses what ``prereg analyze`` refuses."""
    v = verified_runs(study_dir, progress=progress)
    plan = v.plan_file.plan
    ver = verifier or (plan.evaluation.verifier if plan.evaluation.verifier != "math_verify" else "default")
    a, _ = admitted_curves(v, eval_set or plan.evaluation.primary, ver, metric)
    its = v.runs.iterations.merge(v.runs.meta.loc[v.runs.meta["stage"] == "main", ["configuration", "seed"]],
                                  on=["configuration", "seed"])
    return StudyCurves(plan, a.kept, its, a.exclusions, v.notes)




def _run_of(path: str, study_dir: Path, folders: dict[str, str]) -> tuple[str, int]:
    p = Path(path)
    shown = Path(os.path.relpath(p.parent, study_dir)).as_posix()
    name = next((c for c, f in folders.items() if f == shown), p.parent.name)  # a source's run: its name here
    try:
        return name, int(p.name.removeprefix("seed-"))
    except ValueError:
        return name, -1


def enforce_design(study_dir: Path, plan: Plan, st: StudyRuns, exploratory: bool, notes: list[str],
                   folders: dict[str, str] | None = None) -> pd.DataFrame:
    """Exactly the runs and evaluation problems the plan names (``prereg_kit.study.design``).

    Violations, in the order of their cause: run logs that cannot be read, planned runs that are
    missing, evaluations on other problems. Refused unless ``exploratory``; a missing run the
    plan allows (``admission.allow_missing_seeds``) and, when exploratory, every run left out are
    returned as exclusions (configuration, seed, eval_index, rule, reason). ``folders``: the run
    folders of the configurations taken from other studies (``analysis.sources.run_folders``)."""
    folders = folders or {}
    rows, violations = [], []
    unreadable = {}

    def folder(c: str, s: int) -> str:
        return f"{folders.get(c, f'runs/{c}')}/seed-{s}"

    for prob in st.problems:
        if prob.kind == "corrupt":
            key = _run_of(prob.path, study_dir, folders)
            unreadable[key] = prob
            violations.append(f"{Path(os.path.relpath(prob.path, study_dir)).as_posix()}: unreadable run log: "
                              f"{prob.message.removeprefix('run left out: ')}")
            rows.append((*key, pd.NA, "unreadable", prob.message.removeprefix("run left out: ")))
    main = st.meta[st.meta["stage"] == "main"]
    present = set(zip(main["configuration"], main["seed"].astype(int))) | set(unreadable)
    for c, s in missing_runs(plan, present):
        if plan.admission.allow_missing_seeds:
            rows.append((c, s, pd.NA, "missing", "no run log (the plan's admission rules allow missing seeds)"))
        else:
            violations.append(f"{folder(c, s)}: a planned run is missing (the plan names seeds "
                              f"{', '.join(map(str, plan.seeds_for('main', c)))} of configuration {c!r})")
            rows.append((c, s, pd.NA, "missing", "no run log"))
    keep = st.evals if len(main) == len(st.meta) else st.evals.merge(main[["configuration", "seed"]], on=["configuration", "seed"])
    for c, s, what in eval_problem_violations(keep, plan):
        violations.append(f"{folder(c, s)}: {what}")
        rows.append((c, s, pd.NA, "evaluation_problems", what))
    if violations and not exploratory:
        raise ViolationError(*[f"design check failed: {v}" for v in violations], HINT)
    notes.extend(f"design check failed: {v}" for v in violations)
    return rd.exclusions_table(rows)


__all__ = ["HINT", "VerifiedRuns", "StudyCurves", "admitted_curves", "check_verified", "enforce_design",
           "study_curves", "verified_runs"]
