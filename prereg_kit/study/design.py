"""The plan's design, enforced on the run folders: exactly the configurations, seeds, stages and
evaluation problems the plan names.

The dense-rewards paper fixes each study's seeds and evaluation sets before its runs (§2.3,
§C.1 "Preregistration") and names seeds added after a result as optional stopping (S11). A run
log that the plan did not ask for, or a planned run that is absent, changes what a contrast means,
so neither is ever used or dropped silently:

- :func:`unexpected_runs` (checked by ``prereg verify`` at any time): every folder under
  ``runs/`` must be ``<configuration>/seed-<n>`` for a configuration and seed of the plan's main
  stage, holding a main-stage run whose ``meta.json`` names the same configuration and seed; every
  folder under ``stages/`` must be a non-main stage the plan has, with that stage's
  configurations and seeds. Anything else is listed by name.
- :func:`missing_runs` (checked by ``prereg analyze``): every planned main run must be there —
  unless the plan's ``admission.allow_missing_seeds`` says a missing seed is an exclusion.
- :func:`eval_problem_violations` (``prereg analyze``): every evaluation of every run holds
  exactly the plan's evaluation sets, each with the plan's ``n_problems`` and the same problem ids
  as every other evaluation of that set.

The anchor election's probe runs (multi-reward paper §5.1; ``prereg elect``) are calibration-stage
runs that ``election.json`` names (``probes[].run_dir``, e.g.
``stages/calibration/probe-correct/seed-0``): they are expected where the election says they are.
Hidden files (a leading ``.``, e.g. an editor's or the OS's) are ignored.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ..plan import Plan
from ..runlog import ELECTION_FILE, META_FILE, RunLogError, read_meta
from ..runlog.groups import group_numbers, rows_by_group
from ..runlog.text import text_codes
from .jobs import planned_runs

if TYPE_CHECKING:
    import pandas as pd

_SEED_DIR = re.compile(r"^seed-(0|[1-9][0-9]*)$")


def _visible(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if not p.name.startswith("."))


def election_probes(study_dir: str | Path) -> set[str]:
    """The probe run folders ``election.json`` names (relative to the study); none without one."""
    try:
        rec = json.loads((Path(study_dir) / ELECTION_FILE).read_text())
        return {str(p["run_dir"]) for p in rec.get("probes", []) if isinstance(p, dict) and "run_dir" in p}
    except (OSError, ValueError, TypeError, AttributeError):
        return set()


def _check_tree(base: Path, study: Path, stage: str, plan: Plan, probes: set[str]) -> list[str]:
    """Violations under one stage's folder (``runs/`` for main, ``stages/<stage>/`` otherwise)."""
    out: list[str] = []
    planned = plan.stage(stage) is not None
    configs = plan.configurations_for(stage) if planned else []
    rel = lambda p: p.relative_to(study).as_posix()  # noqa: E731
    for cdir in _visible(base):
        if not cdir.is_dir():
            out.append(f"{rel(cdir)}: a file where only configuration folders belong")
            continue
        if any(p.startswith(rel(cdir) + "/") for p in probes):
            out += [f"{rel(sdir)}: not a probe run that {ELECTION_FILE} names" for sdir in _visible(cdir)
                    if rel(sdir) not in probes]
            continue
        if not planned:
            out.append(f"{rel(cdir)}: the plan has no {stage} stage, and {ELECTION_FILE} names no probe run here")
            continue
        if cdir.name not in configs:
            out.append(f"{rel(cdir)}: configuration {cdir.name!r} is not in the plan's {stage} stage "
                       f"(have: {', '.join(configs)})")
            continue
        for sdir in _visible(cdir):
            m = _SEED_DIR.match(sdir.name)
            if not sdir.is_dir() or not m:
                out.append(f"{rel(sdir)}: not a run folder (runs are {rel(cdir)}/seed-<n>)")
                continue
            seed = int(m.group(1))
            if seed not in (seeds := plan.seeds_for(stage, cdir.name)):
                out.append(f"{rel(sdir)}: seed {seed} is not a seed of the plan's {stage} stage "
                           f"({_seed_list(seeds)})")  # the configuration's own seeds where it has them
                continue
            if not (sdir / META_FILE).is_file():
                out.append(f"{rel(sdir)}: a run folder without {META_FILE}")
                continue
            try:
                meta = read_meta(sdir)
            except RunLogError:
                continue  # the audit reports unreadable metadata
            if (meta.configuration, meta.seed) != (cdir.name, seed):
                out.append(f"{rel(sdir)}: {META_FILE} says configuration {meta.configuration!r} seed {meta.seed}, "
                           "not the folder's (a run moved or renamed)")
            elif meta.stage != stage:
                out.append(f"{rel(sdir)}: a {meta.stage}-stage run in the {stage} stage's folder")
    return out


def _seed_list(seeds: list[int]) -> str:
    s = sorted(seeds)
    if s == list(range(s[0], s[-1] + 1)) and len(s) > 3:
        return f"seeds {s[0]}-{s[-1]}"
    return "seeds " + ", ".join(map(str, s))


def unexpected_runs(study_dir: str | Path, plan: Plan) -> list[str]:
    """Folders and runs under ``runs/`` and ``stages/`` that the plan does not name, one line each."""
    study = Path(study_dir)
    out: list[str] = []
    probes = election_probes(study)
    if (study / "runs").is_dir():
        out += _check_tree(study / "runs", study, "main", plan, set())
    stages_dir = study / "stages"
    if stages_dir.is_dir():
        names = [s.name for s in plan.stages if s.name != "main"]
        for sdir in _visible(stages_dir):
            probed = any(p.startswith(f"stages/{sdir.name}/") for p in probes)
            if not sdir.is_dir() or (sdir.name not in names and not probed):
                out.append(f"stages/{sdir.name}: not a stage of the plan (have: {', '.join(names) or 'main only'})")
                continue
            out += _check_tree(sdir, study, sdir.name, plan, probes)
    return out


def missing_runs(plan: Plan, present: set[tuple[str, int]]) -> list[tuple[str, int]]:
    """Planned main runs that are not in ``present`` (configuration, seed), in the plan's order."""
    return [k for k in planned_runs(plan) if k not in present]


def _problem_sets(rows: pd.DataFrame) -> tuple[pd.Series, list]:
    """Per (configuration, seed, eval_index), sorted, its set of problems as the bytes of its
    distinct problem codes in ascending order (one code per distinct problem id; equal bytes,
    equal sets), and those code arrays: one sort of all rows, then a slice per evaluation, without
    building a Python set per evaluation."""
    import numpy as np  # lock and verify import this module without numpy/pandas
    import pandas as pd

    keys = ["configuration", "seed", "eval_index"]
    gid = group_numbers(rows, keys)
    codes = text_codes(rows["problem_id"])[0]
    order = rows_by_group(gid, codes)
    gs, cs = gid[order], codes[order]
    n = int(gid.max()) + 1 if len(gid) else 0
    bounds = np.r_[0, np.searchsorted(gs, np.arange(1, n)), len(gs)]
    group = np.repeat(np.arange(n), np.diff(bounds))  # as np.split at the bounds: rows before group 0's start join it
    first = np.r_[True, (cs[1:] != cs[:-1]) | (group[1:] != group[:-1])]
    ucs, ugroup = cs[first], group[first]
    ub = np.searchsorted(ugroup, np.arange(n + 1))
    parts = [ucs[ub[i]:ub[i + 1]] for i in range(n)]
    first = order[bounds[:-1]]  # a row of each group, in group order: the groups' keys
    index = pd.MultiIndex.from_frame(rows[keys].take(first).reset_index(drop=True))
    return pd.Series([p.tobytes() for p in parts], index=index, dtype=object), parts


def _runs_in_order(evals: pd.DataFrame) -> pd.DataFrame:
    """``evals[["configuration", "seed"]].drop_duplicates()``, from the rows where the run
    changes (a run's rows are together, so this is a few rows, not a hash of every row)."""
    import numpy as np

    key = evals[["configuration", "seed"]]
    cfg, seed = text_codes(key["configuration"])[0], key["seed"].to_numpy()
    same = (cfg[1:] == cfg[:-1]) & (seed[1:] == seed[:-1])
    return key[np.r_[True, ~same]].drop_duplicates()


def eval_problem_violations(evals: pd.DataFrame, plan: Plan) -> list[tuple[str, int, str]]:
    """Every evaluation of every run must hold the plan's evaluation sets, each with the same
    problems (the plan's ``n_problems`` of them, when it names a number). One
    ``(configuration, seed, what)`` per run and set: the first evaluation that differs, and how
    (the run folder is ``runs/<configuration>/seed-<seed>``).

    ``evals``: the study's eval rows with ``configuration`` and ``seed`` columns.
    """
    if not len(evals):
        return []
    import numpy as np

    out: list[tuple[str, int, str]] = []
    planned = {s.name: s for s in plan.evaluation.sets}
    runs = _runs_in_order(evals)
    extra = evals[~evals["eval_set"].isin(list(planned))]
    for (c, s), g in extra.groupby(["configuration", "seed"], sort=True):
        names = sorted(g["eval_set"].unique())
        out.append((c, int(s), f"evaluation set(s) {', '.join(map(repr, names))} are not in the plan "
                                f"(have: {', '.join(planned)})"))
    narrow = evals[["configuration", "seed", "eval_index", "problem_id"]]  # the columns the check reads
    by_set = evals.groupby("eval_set", sort=False, observed=True).indices  # each set's rows, selected once
    for name, spec in planned.items():
        rows = narrow.take(by_set[name]) if name in by_set else narrow.iloc[:0]
        have = rows[["configuration", "seed"]].drop_duplicates()
        lacking = runs.merge(have, how="left", indicator=True)
        for r in lacking[lacking["_merge"] == "left_only"].itertuples(index=False):
            out.append((r.configuration, int(r.seed), f"never evaluated on the plan's set {name!r}"))
        if not len(rows):
            continue
        sets, parts = _problem_sets(rows)
        size = {k: len(p) for k, p in zip(sets, parts)}
        counts = sets.value_counts()
        reference = counts.index[0]
        if spec.n_problems is not None:
            sized = [x for x in counts.index if size[x] == spec.n_problems]
            reference = sized[0] if sized else reference
        ref = parts[sets.tolist().index(reference)]
        n_ref = len(ref)
        ok = (sets == reference).to_numpy()
        if spec.n_problems is not None:
            ok = ok & (n_ref == spec.n_problems)
        seen: set[tuple[str, int]] = set()
        for i in np.flatnonzero(~ok):
            (c, s, e), problems = sets.index[i], parts[i]
            if (c, s) in seen:
                continue
            seen.add((c, s))
            if spec.n_problems is not None and len(problems) != spec.n_problems:
                how = f"has {len(problems)} problems, the plan names {spec.n_problems}"
            else:
                how = (f"differs from the other runs' {n_ref} problems "
                       f"({len(np.setdiff1d(ref, problems))} missing, {len(np.setdiff1d(problems, ref))} extra)")
            out.append((c, int(s), f"evaluation {e} of set {name!r} {how}"))
    return out


__all__ = ["planned_runs", "unexpected_runs", "missing_runs", "eval_problem_violations"]
