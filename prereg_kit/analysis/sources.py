"""The runs of the configurations a plan takes from other studies (``[[sources]]``), read as the
analysis reads its own.

Each source is opened as this plan's last lock entry pinned it (``prereg_kit.chain.sources``;
``prereg verify`` has verified it as a study of its own by then: its chain, plan, seals, audit and
design). Its main-stage runs of the named configurations are loaded from its own folder, renamed
``<source>/<configuration>``, and their evaluation rows kept on the sets this plan names; the
plan the analysis reads is the plan with those configurations added (their seeds, budget and run
length as the source's plan gives them). The design check then holds them to that plan like the
plan's own runs: every planned run there, every evaluation on the same problems as every other
run's, the source's own runs included (dense-rewards paper, the "seeds pooled over several
studies of the same configurations" of Tables 4, 8, 10 and 11).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pandas as pd

from ..chain.lock import Chain
from ..chain.sources import SourceStudy, open_source, pinned_records, plan_problems, with_sources
from ..errors import PreregError
from ..plan import Plan, PlanFile
from ..runlog import StudyRuns, load_study
from ..runlog.text import TEXT_COLUMNS, sorted_categories
from .designs import seed_list


def open_sources(pf: PlanFile, chain: Chain | None, notes: list[str]) -> tuple[Plan, list[SourceStudy]]:
    """The plan with its sources' configurations added, and the sources opened as ``chain``'s last
    plan entry pinned them. Without a readable chain (``--exploratory``) each source is read as
    its own chain now stands, and a note says so."""
    pinned = pinned_records(chain.last) if chain is not None else {}
    studies = []
    for src in pf.plan.sources:
        rec = pinned.get(src.prefix)
        if rec is None:
            notes.append(f"source {src.prefix} ({src.study}): no lock of it pinned by this plan's lock: read as its "
                         "own lock chain now stands")
        studies.append(open_source(pf.path.parent, src, rec))
    problems = plan_problems(pf.plan, pf.path, studies)
    if problems:
        raise PreregError(*problems)
    return with_sources(pf.plan, studies), studies


def run_folders(study_dir: Path, studies: list[SourceStudy]) -> dict[str, str]:
    """Each source configuration's run folder as seen from this study (``../S34/runs/filter``)."""
    return {f"{s.source.prefix}/{c}": Path(os.path.relpath(s.folder / "runs" / c, study_dir)).as_posix()
            for s in studies for c in s.source.configurations}


def load_sources(studies: list[SourceStudy], eval_sets: list[str], *, progress: bool | None) -> list[StudyRuns]:
    """Each source's main runs of its named configurations, renamed ``<source>/<configuration>``,
    their evaluation rows on ``eval_sets`` only. A run that cannot be read stays a ``corrupt``
    problem with its path (the design check names it)."""
    out = []
    for s in studies:
        st = load_study(s.folder, progress=progress, configurations=list(s.source.configurations))
        names = {c: f"{s.source.prefix}/{c}" for c in s.source.configurations}
        main = st.meta[(st.meta["stage"] == "main") & st.meta["configuration"].isin(list(names))]
        keep = main[["configuration", "seed"]]
        its = st.iterations.merge(keep, on=["configuration", "seed"])
        ev = st.evals[st.evals["eval_set"].isin(eval_sets)]
        ev = ev.merge(keep, on=["configuration", "seed"]) if len(main) < len(st.meta) else ev
        out.append(StudyRuns(_renamed(main, names), _renamed(its, names), _renamed(ev, names), st.problems))
    return out


def _renamed(df: pd.DataFrame, names: dict[str, str]) -> pd.DataFrame:
    df = df.copy()
    df["configuration"] = df["configuration"].astype(str).map(names).fillna(df["configuration"].astype(str))
    return df


def merged(own: StudyRuns, sourced: list[StudyRuns]) -> StudyRuns:
    """The plan's own runs and its sources' in one set of frames, ordered as a study's are."""
    if not sourced:
        return own
    parts = [own, *sourced]
    meta = pd.concat([p.meta for p in parts], ignore_index=True).sort_values(["configuration", "seed"], ignore_index=True)
    its = pd.concat([p.iterations for p in parts if len(p.iterations)] or [own.iterations], ignore_index=True)
    evals = pd.concat([p.evals.astype({c: str for c in ("configuration",) + TEXT_COLUMNS if c in p.evals})
                       for p in parts if len(p.evals)] or [own.evals], ignore_index=True)
    for c in ("configuration",) + TEXT_COLUMNS:
        if c in evals:
            evals[c] = sorted_categories(evals[c])
    return dataclasses.replace(own, meta=meta, iterations=its, evals=evals,
                               problems=[p for x in parts for p in x.problems])


def source_records(studies: list[SourceStudy], plan: Plan, meta: pd.DataFrame) -> list[dict[str, Any]]:
    """``results.json`` ``sources``: per source its identity as read (study, lock, plan entry) and,
    per configuration read from it, the main runs and their seeds."""
    out = []
    for s in studies:
        confs = {}
        for c in s.source.configurations:
            name = f"{s.source.prefix}/{c}"
            seeds = sorted(int(x) for x in meta.loc[(meta["configuration"] == name) & (meta["stage"] == "main"), "seed"])
            confs[name] = {"configuration": c, "runs": len(seeds), "seeds": seed_list(seeds) if seeds else "",
                           "planned_seeds": seed_list(plan.configuration_seeds(name))}
        out.append({**s.record(), "folder": str(s.folder), "configurations": confs})
    return out


__all__ = ["load_sources", "merged", "open_sources", "run_folders", "source_records"]
