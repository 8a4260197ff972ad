"""The studies a plan takes configurations from (``[[sources]]``), opened through their lock chains.

A source is another study's folder beside this one (``"../S34"``): its plan as its lock chain
holds it, never as its file now says. Three steps use it:

- **lock and amend** (:func:`pin_sources`, called by :mod:`prereg_kit.chain.lock`): every source
  must be locked; its named configurations must exist in its locked plan; its evaluation sets
  named by this plan and its samples per problem must be this plan's; no chain of sources leads
  back to this study; and the plan with the sources' configurations added (:func:`with_sources`)
  must pass the cross-checks that need their seeds and run lengths. Each source's identity is
  recorded in the lock entry: its study id, its lock (the hash of its chain's first entry) and its
  last plan entry (index, hash, content hash, time);
- **verify and analyze** (:func:`open_source` with the pinned record): the source's chain must
  still start with that lock and end its plan entries at that entry, otherwise one line names the
  source and what changed (locked again, amended, no lock, a configuration gone). ``prereg
  verify`` then verifies the source as a study of its own (``prereg_kit.study.verify``);
- **the analysis** reads the plan returned by :func:`with_sources`: each source configuration
  ``<name>/<configuration>`` with the seeds, budget and run length its own plan gives it.

A source's folder must lie inside the folder that holds this study (symbolic links followed),
and not be this study: a plan reads its neighbours, nothing elsewhere on the machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import LockError, PreregError, ViolationError
from ..plan import PLAN_FILE, Configuration, Plan, PlanFile, Source, cross_check, validate_plan
from ..plan.tomlpos import format_path
from .chainfile import Chain, read_chain

MAX_SOURCE_DEPTH = 16  # studies reading studies reading studies …: deeper is refused


def label(src: Source) -> str:
    """How every line about a source names it: ``source S34 (../S34)``."""
    return f"source {src.prefix} ({src.study})"


def source_folder(plan_dir: Path, src: Source) -> Path:
    """The source's folder on disk, refused (one line naming it) when it leads outside the folder
    that holds this study, is this study, or holds no plan."""
    here = Path(plan_dir).resolve()
    base = here.parent
    target = (here / src.study).resolve()  # symbolic links followed: a link out of the folder is caught here
    if target == here:
        raise PreregError(f"{label(src)}: is this study itself: a plan cannot read its own configurations as a source")
    if not target.is_relative_to(base):
        raise PreregError(f"{label(src)}: leads to {target}, outside {base}, the folder that holds this study: "
                          "a source is a study beside this one")
    if not target.is_dir():
        raise PreregError(f"{label(src)}: no such study folder ({target})")
    if not (target / PLAN_FILE).is_file():
        raise PreregError(f"{label(src)}: {target} holds no {PLAN_FILE}")
    return target


@dataclass(frozen=True)
class SourceStudy:
    """One source opened: its folder, its lock chain, the plan entry read and the plan it locked."""

    source: Source
    folder: Path
    chain: Chain
    entry: dict[str, Any]  # the last plan entry (lock or amendment) of its chain
    plan: Plan  # its plan as that entry locked it

    @property
    def label(self) -> str:
        return label(self.source)

    def record(self) -> dict[str, Any]:
        """What this plan's lock entry keeps of the source: enough to tell any later lock or amendment."""
        e = self.entry
        return {"name": self.source.prefix, "study": self.source.study, "study_id": self.plan.study.id,
                "lock": self.chain.entries[0]["hash"], "entry": e["index"], "entry_hash": e["hash"],
                "content_sha256": e["content_sha256"], "time": e["time"]}

    def line(self) -> str:
        """One line for the report: which study, under which lock and entry."""
        e = self.entry
        return (f"{self.label}: study {self.plan.study.id}, lock {self.chain.entries[0]['hash'][:19]}…, "
                f"plan entry {e['index']} ({e['kind']}, {e['time']}); configurations {', '.join(self.source.configurations)}")


def open_source(plan_dir: Path, src: Source, pinned: dict[str, Any] | None = None) -> SourceStudy:
    """Open one source through its lock chain. ``pinned``: the record this plan's lock entry kept
    (:meth:`SourceStudy.record`); the chain must still hold it as its lock and its last plan entry.
    Without it (at lock) the chain's last plan entry is read. Every refusal is one line naming the source."""
    folder = source_folder(plan_dir, src)
    try:
        chain = read_chain(folder / PLAN_FILE)
    except LockError:
        raise LockError(f"{label(src)}: not locked (no plan.lock): a source is read as its lock holds it; "
                        f"lock it first (`prereg lock {folder}`)") from None
    except ViolationError as e:
        raise ViolationError(f"{label(src)}: its lock chain is broken: {e.lines[0] if e.lines else e}") from None
    entry = chain.last
    if pinned is not None:
        lock = chain.entries[0]["hash"]
        if lock != pinned.get("lock"):
            raise ViolationError(f"{label(src)}: locked again since this plan pinned it: its lock is {lock[:19]}…, "
                                 f"this plan pinned {str(pinned.get('lock'))[:19]}…")
        if entry["hash"] != pinned.get("entry_hash"):
            raise ViolationError(f"{label(src)}: amended since this plan pinned it (its plan entry {entry['index']}, "
                                 f"{entry['time']}; this plan pinned entry {pinned.get('entry')}): amend this plan to "
                                 "read the source as it now stands")
    try:
        plan = validate_plan(entry["content"], source=f"{chain.path} (entry {entry['index']})")
    except PreregError as e:
        raise PreregError(f"{label(src)}: its locked plan does not validate: {e.lines[0] if e.lines else e}") from None
    for c in src.configurations:
        if c not in plan.configurations:
            raise PreregError(f"{label(src)}: has no configuration {c!r} (its locked plan has: "
                              f"{', '.join(plan.configurations) or 'none of its own'})")
    return SourceStudy(src, folder, chain, entry, plan)


def evaluation_problems(plan: Plan, s: SourceStudy) -> list[str]:
    """This plan reads the source's runs on its own evaluation sets: each set it names must be a
    set of the source with the same problems count, levels and schedule, and the samples per
    problem must be the same (pass@k reads them)."""
    out = []
    theirs = {e.name: e for e in s.plan.evaluation.sets}
    for e in plan.evaluation.sets:
        t = theirs.get(e.name)
        if t is None:
            out.append(f"{s.label}: has no evaluation set {e.name!r} (it evaluates on {', '.join(theirs)})")
        elif (t.n_problems, sorted(t.levels), t.at) != (e.n_problems, sorted(e.levels), e.at):
            out.append(f"{s.label}: its evaluation set {e.name!r} is not this plan's (n_problems, levels, at: "
                       f"{t.n_problems}, {t.levels}, {t.at} against {e.n_problems}, {e.levels}, {e.at})")
    if s.plan.evaluation.samples != plan.evaluation.samples:
        out.append(f"{s.label}: evaluates {s.plan.evaluation.samples} samples per problem, this plan "
                   f"{plan.evaluation.samples}")
    return out


def with_sources(plan: Plan, studies: list[SourceStudy]) -> Plan:
    """The plan with each source's configurations added as ``<name>/<configuration>``, with the
    seeds, run length and budget its own plan gives it (a budget only where it is not this plan's B
    and evaluation interval); never re-validated as a plan (names with ``/`` are not folder names)."""
    extra: dict[str, Configuration] = {}
    ours = plan.budget
    for s in studies:
        for c in s.source.configurations:
            b = s.plan.budget_of(c)
            same = b.axis == ours.axis and b.value == ours.value and _interval(b) == _interval(ours)
            own = s.plan.configurations[c]
            extra[f"{s.source.prefix}/{c}"] = Configuration(
                description=f"{s.label}: {own.description}".rstrip(": "),
                budget=None if same else b.model_copy(update={"train_to": "B"}),
                seeds=s.plan.configuration_seeds(c), train_to=f"{s.plan.train_to(c):g}B")
    return plan.model_copy(update={"configurations": {**plan.configurations, **extra}})


def _interval(b) -> int:
    return b.eval_interval_tokens() if b.tokens is not None else b.eval_interval_iterations()


def plan_problems(plan: Plan, path: Path, studies: list[SourceStudy]) -> list[str]:
    """What the plan with its sources' configurations fails: each source's evaluation against this
    plan's, then the cross-checks that need the sources' seeds and run lengths (a contrast read at
    2B of a source that trains to B, a contrast's seeds no pair runs)."""
    out = [line for s in studies for line in evaluation_problems(plan, s)]
    out += [f"{path}: {format_path(key)}: {msg}" for key, msg in cross_check(with_sources(plan, studies))]
    return out


def find_cycle(plan_dir: Path, plan: Plan) -> list[str] | None:
    """A chain of sources that leads back to this study or repeats itself, as the study folders'
    names in order (``["T11", "S34", "T11"]``); None when there is none. Each source is followed
    through its locked plan; one that cannot be opened ends its branch (its own verification says why)."""
    start = Path(plan_dir).resolve()

    def walk(folder: Path, p: Plan, path: list[Path]) -> list[Path] | None:
        if len(path) > MAX_SOURCE_DEPTH:
            return path
        for src in p.sources:
            target = (folder / src.study).resolve()
            if target in path:
                return path + [target]
            try:
                nxt = validate_plan(read_chain(target / PLAN_FILE).last["content"])
            except PreregError:
                continue
            if (found := walk(target, nxt, path + [target])) is not None:
                return found
        return None

    found = walk(start, plan, [start])
    return None if found is None else [f.name for f in found]


def pin_sources(pf: PlanFile) -> list[dict[str, Any]]:
    """The records of the plan's sources for its lock or amendment entry (:meth:`SourceStudy.record`),
    after every check of the module docstring; the first problem refuses the lock, naming the source."""
    studies = [open_source(pf.path.parent, s) for s in pf.plan.sources]
    cycle = find_cycle(pf.path.parent, pf.plan)
    if cycle is not None:
        raise PreregError(f"{pf.path}: its sources lead back to a study they started from: {' → '.join(cycle)}"
                          + (f" (or deeper than {MAX_SOURCE_DEPTH} studies)" if len(cycle) > MAX_SOURCE_DEPTH else ""))
    problems = plan_problems(pf.plan, pf.path, studies)
    if problems:
        raise PreregError(*problems)
    return [s.record() for s in studies]


def pinned_records(entry: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The source records a plan entry kept, by source name."""
    return {r.get("name"): r for r in entry.get("sources") or [] if isinstance(r, dict)}


__all__ = ["MAX_SOURCE_DEPTH", "SourceStudy", "evaluation_problems", "find_cycle", "label", "open_source",
           "pin_sources", "pinned_records", "plan_problems", "source_folder", "with_sources"]
