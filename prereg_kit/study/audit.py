"""Run-timing audit: did every main-stage run start after the plan was fixed?

Dense-rewards paper §2.3 and §C.1 "Preregistration": the paper checks that each plan's last
change preceded the study's first main training run; calibration, pilot and smoke stages may
start before a plan is final. Rules, applied to each run's ``meta.json`` (main runs under ``runs/``, other stages under
``stages/<stage>/``):

- a non-main run is always admissible (it is listed, not flagged);
- a main run must have been launched under a plan hash that some lock entry has, and must
  have started after the plan was first locked and after the entry it ran under;
- a main run under a superseded entry is a violation when a later amendment changed any key
  that applies to it: every key except those under ``configurations.<other configuration>``
  and ``integrity`` (how the chain is anchored from then on: no run trains or is read by it).
  (S2's amendments "added rules for parts of the study before those parts ran": adding or
  changing another configuration does not touch a finished run.)
- a main run with ``anchor = "elected"`` (multi-reward paper §5.1: the anchor is elected by
  probes before joint training) recorded the sha256 of the ``election.json`` it read; it is a
  violation when the study's ``election.json`` is now missing or hashes differently (the election
  was edited or rerun after the run read it). A run that recorded no hash (an older trainer) is a
  warning, not a violation.
- the main runs come from one trainer (``meta.trainer``; runs that predate the key read as
  ``builtin``) unless the locked plan says ``[study] mixed_trainers = true``: runs of two
  trainers differ in more than the intervention (their generation, timing and evaluation code),
  so pooling them must be preregistered. When the plan's ``[study] trainer`` names one trainer
  other than ``builtin`` or ``external``, every main run must carry that name.
- a contrast read at matched training time (``time``: T*, dense-rewards paper App. D; ``control_time``:
  the control's time to B, S35, App. F; ``time_to_target``: seconds to the control's accuracy,
  §C.6.8) compares seconds, and seconds on two kinds of device measure the devices as well as
  the configurations. The main runs its configurations and seeds name must share one device type
  (:func:`device_type`) unless the locked plan says ``[study] mixed_devices = true``; one
  violation per such contrast names each device type with its runs. Contrasts read at tokens,
  updates, iterations or spans of evaluations are never refused for devices, and nothing else
  reads seconds to decide a verdict (``[budget] time_hours`` is only reported; the training-time
  axes of the figures are pictures, noted when the devices differ: :func:`device_summary`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping

from ..chain.lock import Chain, format_time, parse_time
from ..chain.look_chain import look_chain_problems, stopped_run_findings
from ..errors import PreregError
from ..plan import Contrast, Plan, validate_plan
from ..runlog import ELECTION_FILE, RunLogError, RunMeta, election_sha256, find_runs, read_meta, uses_elected_anchor


@dataclass
class AuditReport:
    violations: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # unreadable run metadata
    admitted: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    n_runs: int = 0
    devices: "DeviceSummary | None" = None  # the main runs' device types, checked against time contrasts


def _applies_to(key: str, configuration: str) -> bool:
    if key == "integrity" or key.startswith("integrity."):  # how the chain is anchored, not how a run ran
        return False
    if key.startswith("configurations."):
        return key.split(".", 2)[1].split("[", 1)[0] == configuration
    return True


def audit_runs(study_dir: str | Path, chain: Chain, *, study_id: str | None = None) -> AuditReport:
    """Audit the start time, stage and plan hash of every run under ``study_dir/runs``."""
    report = AuditReport()
    plan_entries = chain.plan_entries  # built from the whole chain (every seal too): once, not per run
    by_hash = _entries_by_hash(plan_entries)
    election_now = election_sha256(study_dir)
    trainers: Counter[str] = Counter()
    devices: dict[tuple[str, int], str] = {}
    started: list[tuple[str, int, Any]] = []  # main runs, for the sequential looks' stop rule
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
        report.violations.extend(_main_run_violations(name, meta, chain, by_hash, plan_entries))
        _check_election(report, name, meta, election_now, Path(study_dir) / ELECTION_FILE)
        trainers[meta.trainer] += 1
        devices[(meta.configuration, meta.seed)] = device_type(meta)
        started.append((meta.configuration, meta.seed, meta.started_at))
    report.violations.extend(look_chain_problems(chain))
    beyond, overruns = stopped_run_findings(chain, started)
    report.violations.extend(beyond)
    report.warnings.extend(overruns)
    study = chain.last["content"].get("study", {})  # the plan as locked
    report.violations.extend(trainer_violations(trainers, plan_trainer=str(study.get("trainer", "builtin")),
                                                mixed=study.get("mixed_trainers", False) is True))
    try:  # the plan as locked; one that no longer validates is reported by `prereg verify` itself
        locked = validate_plan(chain.last["content"], source=str(chain.path))
    except PreregError:
        return report
    report.devices = device_summary(locked, devices)
    report.violations.extend(report.devices.violations)
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


def plan_entry_at(chain: Chain, when: datetime) -> dict[str, Any] | None:
    """The plan entry (lock or amendment) in force at ``when``: the last one dated at or before it;
    None before the lock."""
    found = None
    for e in chain.plan_entries:
        if parse_time(e["time"]) <= when:
            found = e
    return found


def main_run_problems(name: str, meta: RunMeta, chain: Chain) -> list[str]:
    """What the audit will say of one main run's timing and plan entry (see :func:`audit_runs`):
    started before the lock or before the entry its plan hash names, or launched under an entry
    that a later amendment superseded for its configuration. Empty when the run is admissible;
    an importer asks before it writes, so the refusal comes at import, not at the next verify."""
    plan_entries = chain.plan_entries
    return _main_run_violations(name, meta, chain, _entries_by_hash(plan_entries), plan_entries)


def _entries_by_hash(plan_entries: list[dict]) -> dict[str, list[int]]:
    """Plan hash -> the plan entries that have it, in chain order (an amendment of comments only
    keeps the hash of the entry before it)."""
    out: dict[str, list[int]] = {}
    for e in plan_entries:
        out.setdefault(e["content_sha256"], []).append(e["index"])
    return out


def _main_run_violations(name: str, meta: RunMeta, chain: Chain, by_hash: dict[str, list[int]],
                         plan_entries: list[dict]) -> list[str]:
    started = format_time(meta.started_at)
    if meta.started_at < chain.locked_at:
        return [f"{name}: main run started {started}, before the plan was locked ({chain.entries[0]['time']})"]
    claimed = by_hash.get(meta.plan_hash)
    if not claimed:
        return [f"{name}: main run launched under plan hash {meta.plan_hash[:19]}…, which no lock entry has"]
    # the entry the run claims: the last with its hash in force when it started (else the first,
    # which it then started before)
    before = [i for i in claimed if chain.time(i) <= meta.started_at]
    idx = before[-1] if before else claimed[0]
    if meta.started_at < chain.time(idx):
        return [f"{name}: main run started {started}, before entry {idx} it claims ({chain.entries[idx]['time']})"]
    out = []
    for later in plan_entries:
        if later["index"] <= idx:
            continue
        keys = [c["key"] for c in later.get("changes", []) if _applies_to(c["key"], meta.configuration)]
        if keys:
            out.append(f"{name}: main run under superseded entry {idx}; amendment {later['index']} "
                       f"({later['time']}) changed {', '.join(keys[:4])}{' …' if len(keys) > 4 else ''}")
    return out


# ------------------------------------------------------------------------------- device types

# Reading points whose value is decided by training seconds (prereg_kit.readings.points, spans).
TIME_KINDS = ("time", "control_time", "time_to_target")
_MAX_NAMED = 4  # runs named per device type before "(+n more)"
REMEDY = "preregister `[study] mixed_devices = true`, or read the contrast at matched tokens"


def device_type(meta: Any) -> str:
    """What a run's seconds were measured on: ``meta.device`` (``"cpu"``, ``"cuda:NVIDIA H200"``,
    ``"unknown"`` for an import that did not say), and for CPU runs ``"cpu (<meta.cpu>)"`` when the
    run recorded its CPU model and kernel capability (CPU timing differs across CPU models).
    ``meta``: a :class:`RunMeta` or a mapping (a row of ``load_study``'s meta frame)."""
    get = meta.get if isinstance(meta, Mapping) else (lambda k, d=None: getattr(meta, k, d))
    device = str(get("device", "") or "").strip() or "unknown"
    cpu = get("cpu", None)
    if device == "cpu" and isinstance(cpu, str) and cpu.strip():
        return f"cpu ({cpu.strip()})"
    return device


def split_device(text: str) -> tuple[str, str | None]:
    """A device type as :func:`device_type` writes it → (``meta.device``, ``meta.cpu``):
    ``"cpu (AMD EPYC 7763 / AVX2)"`` → ``("cpu", "AMD EPYC 7763 / AVX2")``; others unchanged."""
    t = text.strip()
    if t.startswith("cpu (") and t.endswith(")") and len(t) > 6:
        return "cpu", t[5:-1].strip()
    return t, None


def check_device(text: str, option: str = "--device") -> str:
    """A device an import states: ``cpu``, ``cpu (<model>)``, ``<kind>:<name>`` (``cuda:NVIDIA H100
    80GB HBM3``, as ``torch.cuda.get_device_name`` gives it) or ``unknown``; a bare name is refused,
    since it could never match the built-in trainer's ``cuda:<name>``."""
    t = " ".join(text.split())
    kind, sep, name = t.partition(":")
    if t in ("cpu", "unknown") or split_device(t)[1] or (sep and kind.strip() and name.strip() and " " not in kind):
        return t
    raise PreregError(f"{option}: {text!r} is not a device: write cpu, \"cpu (<CPU model>)\", unknown or <kind>:<name> "
                      "as torch names it, e.g. \"cuda:NVIDIA H100 80GB HBM3\"")


def time_matched(c: Contrast) -> bool:
    """Whether training seconds decide the contrast's reading (its point is one of TIME_KINDS)."""
    return c.reading_point.kind in TIME_KINDS


@dataclass
class DeviceSummary:
    """The main runs' device types: ``counts`` (device type → main runs), ``violations`` (one per
    time-matched contrast whose runs ran on more than one device type, unless the plan allows it)
    and ``notes`` (what the report says beside the time-matched contrasts when it does)."""

    counts: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _listing(groups: dict[str, list[str]]) -> str:
    parts = []
    for dev, names in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        more = len(names) - _MAX_NAMED
        parts.append(f"{dev!r} ({', '.join(names[:_MAX_NAMED])}{f' … (+{more} more)' if more > 0 else ''})")
    return ", ".join(parts)


def device_summary(plan: Plan, devices: Mapping[tuple[str, int], str]) -> DeviceSummary:
    """Check the device types of the main runs (``(configuration, seed)`` → :func:`device_type`)
    against the plan's time-matched contrasts: the runs of each such contrast's configurations on
    the seeds it reads must share one device type unless ``[study] mixed_devices = true``."""
    out = DeviceSummary(counts=dict(sorted(Counter(devices.values()).items())))
    timed = []
    for c in plan.contrasts:
        if not time_matched(c):
            continue
        names, seeds = c.configuration_names(), set(plan.contrast_seeds(c))
        runs = sorted(((conf, s) for conf, s in devices if conf in names and s in seeds),
                      key=lambda r: (names.index(r[0]), r[1]))
        groups: dict[str, list[str]] = {}
        for conf, s in runs:
            groups.setdefault(devices[(conf, s)], []).append(f"{conf}/seed-{s}")
        timed.append(c.id)
        if len(groups) < 2:
            continue
        what = f"contrast {c.id} (at {c.reading_point}, matched training time): its main runs ran on {len(groups)} device types: {_listing(groups)}"
        if plan.study.mixed_devices:
            out.notes.append(f"{what}; the plan preregisters `[study] mixed_devices = true`, so its training times "
                             "compare the devices as well as the configurations")
        else:
            hint = ("; an import that did not state its device records 'unknown' (`prereg import ... --device`)"
                    if "unknown" in groups else "")
            out.violations.append(f"{what}; training seconds on different devices are not matched compute: {REMEDY}{hint}")
    if len(out.counts) > 1 and not out.notes:
        out.notes.append(f"the main runs ran on {len(out.counts)} device types ("
                         + ", ".join(f"{d!r}: {n}" for d, n in out.counts.items()) + "): "
                         + ("no contrast is read at matched time; " if not timed else "")
                         + "training hours and the time axes of the figures compare the devices as well as the configurations")
    return out


def run_devices(meta: Any) -> dict[tuple[str, int], str]:
    """``(configuration, seed)`` → device type of each main run in ``load_study``'s meta frame."""
    main = meta[meta["stage"] == "main"]
    return {(str(r["configuration"]), int(r["seed"])): device_type(r) for r in main.to_dict("records")}
