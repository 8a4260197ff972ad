"""Run-timing audit: did every main-stage run start after the plan was fixed?

Paper 1 §2.3 / C.1 ("Preregistration"), extract §3.18: the paper checks that each plan's last
change preceded the study's first main training run; calibration, pilot and smoke stages may
start before a plan is final. Rules, applied to each run's ``meta.json`` (main runs under ``runs/``, other stages under
``stages/<stage>/``):

- a non-main run is always admissible (it is listed, not flagged);
- a main run must have been launched under a plan hash that some lock entry has, and must
  have started after the plan was first locked and after the entry it ran under;
- a main run under a superseded entry is a violation when a later amendment changed any key
  that applies to it: every key except those under ``configurations.<other configuration>``.
  (S2's amendments "added rules for parts of the study before those parts ran": adding or
  changing another configuration does not touch a finished run.)
- a main run with ``anchor = "elected"`` (multi-reward paper §4.5: the anchor is elected by
  probes before joint training) recorded the sha256 of the ``election.json`` it read; it is a
  violation when the study's ``election.json`` is now missing or hashes differently (the election
  was edited or rerun after the run read it). A run that recorded no hash (an older trainer) is a
  warning, not a violation.
- the main runs come from one trainer (``meta.trainer``; runs that predate the key read as
  ``builtin``) unless the locked plan says ``[study] mixed_trainers = true``: runs of two
  trainers differ in more than the intervention (their generation, timing and evaluation code),
  so pooling them must be preregistered. When the plan's ``[study] trainer`` names one trainer
  other than ``builtin`` or ``external``, every main run must carry that name.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .lock import Chain, format_time
from .runlog import ELECTION_FILE, RunLogError, RunMeta, election_sha256, find_runs, read_meta, uses_elected_anchor


@dataclass
class AuditReport:
    violations: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # unreadable run metadata
    admitted: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    n_runs: int = 0


def _applies_to(key: str, configuration: str) -> bool:
    if key.startswith("configurations."):
        return key.split(".", 2)[1].split("[", 1)[0] == configuration
    return True


def audit_runs(study_dir: str | Path, chain: Chain, *, study_id: str | None = None) -> AuditReport:
    """Audit the start time, stage and plan hash of every run under ``study_dir/runs``."""
    report = AuditReport()
    by_hash: dict[str, int] = {}
    for e in chain.plan_entries:
        by_hash[e["content_sha256"]] = e["index"]  # latest entry with that content wins
    election_now = election_sha256(study_dir)
    trainers: Counter[str] = Counter()
    for folder in find_runs(study_dir, all_stages=True):
        try:
            meta = read_meta(folder)
        except RunLogError as e:
            report.problems.append(str(e))
            continue
        report.n_runs += 1
        name = f"{meta.configuration}/seed-{meta.seed}"
        if study_id is not None and meta.study != study_id:
            report.violations.append(f"{name}: belongs to study {meta.study!r}, not {study_id!r}")
            continue
        if meta.stage != "main":
            when = "before" if meta.started_at < chain.locked_at else "after"
            report.admitted.append(f"{name}: {meta.stage} run started {when} the lock (allowed)")
            continue
        report.violations.extend(_main_run_violations(name, meta, chain, by_hash))
        _check_election(report, name, meta, election_now, Path(study_dir) / ELECTION_FILE)
        trainers[meta.trainer] += 1
    study = chain.last["content"].get("study", {})  # the plan as locked
    report.violations.extend(trainer_violations(trainers, plan_trainer=str(study.get("trainer", "builtin")),
                                                mixed=study.get("mixed_trainers", False) is True))
    return report


ANY_ONE_TRAINER = ("builtin", "external")  # plan trainers that accept runs of any one trainer


def trainer_violations(counts: Counter[str] | dict[str, int], *, plan_trainer: str = "builtin",
                       mixed: bool = False) -> list[str]:
    """The main runs' trainers (``meta.trainer`` → run count) against the plan: more than one is a
    violation unless ``mixed`` (``[study] mixed_trainers = true``); a plan trainer other than
    ``builtin``/``external`` must be the one every main run names."""
    listed = ", ".join(f"{t!r} ({n} run{'s' * (n != 1)})" for t, n in sorted(counts.items()))
    if mixed or not counts:
        return []
    if len(counts) > 1:
        return [f"main runs come from {len(counts)} trainers: {listed}; a study that mixes trainers "
                "preregisters `[study] mixed_trainers = true`"]
    if plan_trainer not in ANY_ONE_TRAINER and plan_trainer not in counts:
        return [f"the plan's [study] trainer is {plan_trainer!r}, but the main runs were trained by {listed}"]
    return []


def _short(h: str) -> str:
    return h[:19] + "…" if len(h) > 19 else h


def _check_election(report: AuditReport, name: str, meta: RunMeta, now: str, path: Path) -> None:
    """A main run that read ``election.json`` must find the same file there now."""
    elected = uses_elected_anchor(meta.config)
    if not (elected or meta.election_sha256):
        return
    if not meta.election_sha256:
        report.warnings.append(f"{name}: anchor = 'elected' but the run recorded no election hash (an older trainer); "
                               f"{path.name} not checked against it")
    elif not now:
        report.violations.append(f"{name}: main run read election {_short(meta.election_sha256)}, but {path} is missing")
    elif now != meta.election_sha256:
        report.violations.append(f"{name}: {path} changed after the run read it (run recorded "
                                 f"{_short(meta.election_sha256)}, the file is now {_short(now)})")


def _main_run_violations(name: str, meta: RunMeta, chain: Chain, by_hash: dict[str, int]) -> list[str]:
    started = format_time(meta.started_at)
    if meta.started_at < chain.locked_at:
        return [f"{name}: main run started {started}, before the plan was locked ({chain.entries[0]['time']})"]
    idx = by_hash.get(meta.plan_hash)
    if idx is None:
        return [f"{name}: main run launched under plan hash {meta.plan_hash[:19]}…, which no lock entry has"]
    if meta.started_at < chain.time(idx):
        return [f"{name}: main run started {started}, before entry {idx} it claims ({chain.entries[idx]['time']})"]
    out = []
    for later in chain.plan_entries:
        if later["index"] <= idx:
            continue
        keys = [c["key"] for c in later.get("changes", []) if _applies_to(c["key"], meta.configuration)]
        if keys:
            out.append(f"{name}: main run under superseded entry {idx}; amendment {later['index']} "
                       f"({later['time']}) changed {', '.join(keys[:4])}{' …' if len(keys) > 4 else ''}")
    return out
