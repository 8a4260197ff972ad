"""``prereg verify``: everything that says a study ran as it was locked.

In order, so that the first line of a refusal names the first thing that went wrong:

1. the lock chain (canonical, hashes chained, times never going back);
2. the plan file against its last plan entry;
3. the outside anchors: the head the reader holds (``--head``), git's history of ``plan.lock``
   (every committed version a prefix of the next and of the file) and the git commits recorded in
   the plan entries (``prereg_kit.chain.anchors``, ``prereg_kit.chain.lock.check_git_anchors``);
4. external timestamps of the chain, when the study has any (``prereg_kit.chain.timestamp``), the
   receipts the reader keeps (``--receipts``), and the anchors the plan declares (``[integrity]``:
   every entry stamped, committed); then one line on the latest entry an outside anchor proves,
   or on what is not proven when the plan declares none;
5. the seals of completed runs (``prereg_kit.chain.seal``) and of gradient-test results
   (``prereg_kit.chain.gradient_seal``): every sealed file as it was sealed;
6. the run-timing audit (``prereg_kit.study.audit``);
7. the design: no run folder the locked plan does not name (``prereg_kit.study.design``);
8. the sources (``[[sources]]``): each still locked as this plan's last entry pinned it
   (``prereg_kit.chain.sources``), then verified as a study of its own, steps 1–8, each of its
   lines prefixed with the source's name; a chain of sources that leads back is refused.

Exit codes: 0 clean (warnings allowed: comment-only edits), 1 violations, 2 unusable input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..callables import callable_module
from ..chain.anchors import (
    check_declared_anchors,
    check_git_history,
    check_reader_receipts,
    check_shared_head,
    entry_summary,
    latest_proven,
    parse_head,
    proven_line,
)
from ..chain.gradient_seal import check_gradient_seals
from ..chain.lock import Chain, check_git_anchors, check_plan, read_chain
from ..chain.seal import SealCheck, check_seals
from ..chain.sources import MAX_SOURCE_DEPTH, SourceStudy, label, open_source, pinned_records, plan_problems
from ..chain.timestamp import StudyTimestamps, check_study_timestamps
from ..errors import PreregError
from ..plan import Plan, PlanFile, load_plan, resolve_plan_path, validate_plan
from ..runlog import ELECTION_FILE, election_sha256
from .audit import AuditReport, audit_runs
from .design import unexpected_runs


@dataclass
class VerifyReport:
    plan_path: Path
    chain: Chain | None = None
    violations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)
    audit: AuditReport | None = None
    seals: SealCheck | None = None
    timestamps: StudyTimestamps | None = None
    anchors: dict | None = None  # the head, the shared head's entry, git's coverage (--json)
    sources: list[SourceStudy] = field(default_factory=list)  # the sources opened as pinned, and verified

    @property
    def exit_code(self) -> int:
        return 2 if self.problems else 1 if self.violations else 0


def verify_study(path: str | Path, *, tsa_ca: str | Path | None = None,
                 check: Callable[[PlanFile], None] | None = None, head: str | None = None,
                 receipts: str | Path | None = None, _within: tuple[Path, ...] = ()) -> VerifyReport:
    """Check ``PLAN`` or ``STUDY_DIR``: chain intact, plan unchanged in meaning, anchors, seals, runs
    after the lock, no unplanned runs. ``tsa_ca``: the TSA root certificate to check the study's
    timestamp receipts against (default: the certificates kept with them). ``check``: a further
    check of the plan as it validates (``prereg verify``: its recipe against its trainer); what it
    raises is unusable input. ``head``: the chain entry hash the author shared (``sha256:<hex>``):
    a violation unless an entry of the chain has it. ``receipts``: a folder of RFC 3161 receipts
    the reader kept; each must stamp an entry of the chain (a violation naming the file otherwise).
    ``_within``: the study folders whose sources led here (a cycle is refused)."""
    plan_path = resolve_plan_path(path)
    report = VerifyReport(plan_path)
    shared = parse_head(head) if head is not None else None  # a malformed hash is unusable input, before any check
    try:
        chain = read_chain(plan_path)
    except PreregError as e:
        (report.violations if e.exit_code == 1 else report.problems).extend(e.lines)
        return report
    report.chain = chain
    n_amend = len(chain.plan_entries) - 1
    report.info.append(f"locked {chain.entries[0]['time']}; {n_amend} amendment{'s' * (n_amend != 1)}"
                       + (f", last {chain.last['time']}" if n_amend else ""))
    try:
        pc = check_plan(plan_path, chain)
    except PreregError as e:
        report.problems.extend(e.lines)
        return report
    if pc.state == "comment-only":
        report.warnings.extend(pc.lines(plan_path))
    elif pc.state == "changed":
        report.violations.extend(pc.lines(plan_path))
    study_id = chain.last["content"].get("study", {}).get("id")
    try:  # the locked content must still validate under this tool version, and an edited plan too
        pf = load_plan(plan_path)
        if check is not None:
            check(pf)
    except PreregError as e:
        report.problems.extend(e.lines)
    anchors: dict = {"head": entry_summary(chain.head), "shared_head": None}
    hc = None
    if shared is not None:
        hc = check_shared_head(chain, shared)
        (report.info if hc.entry else report.violations).append(hc.line)
        anchors["shared_head"] = hc.record()
    hist = check_git_history(chain)
    report.violations.extend(hist.violations)
    report.warnings.extend(hist.warnings)
    report.info.extend(hist.info)
    anchors["git"] = hist.record()
    report.anchors = anchors
    git_bad, git_warn = check_git_anchors(chain, plan_path)
    report.violations.extend(git_bad)
    report.warnings.extend(git_warn)
    study = plan_path.parent
    ts = check_study_timestamps(study, chain.entries, trusted=tsa_ca)
    report.timestamps = ts
    report.violations.extend(ts.violations)
    report.problems.extend(ts.problems)
    report.warnings.extend(ts.warnings)
    report.info.extend(ts.info)
    reader = None
    if receipts is not None:
        reader = check_reader_receipts(chain, receipts, trusted=tsa_ca)
        report.violations.extend(reader.violations)
        report.problems.extend(reader.problems)
        report.info.extend(reader.info)
        anchors["receipts"] = reader.record()
    checks = [c for c in (ts.report.checks if ts.report else []) if c.problem is None and c.entry is not None]
    declared = check_declared_anchors(chain, hist, {c.name for c in checks})
    report.violations.extend(declared.violations)
    # whose TSA roots the receipt was checked against: the author keeps timestamps/ and the
    # certificates in it, so only --tsa-ca makes it the reader's own check
    roots = "--tsa-ca" if tsa_ca is not None else "certificates kept in timestamps/ by the author"
    stamped = {c.entry: f"{c.name} (TSA roots: {roots if c.info.chain_checked else 'none, self-consistent only'})"
               for c in sorted(checks, key=lambda c: c.name)}
    proven = latest_proven(chain, hist=hist, shared=hc, receipts=stamped, reader=reader)
    report.info.append(proven_line(proven, declared.declared, len(chain.entries)))
    anchors["declared"] = declared.declared
    anchors["latest_proven"] = proven
    seals = check_seals(study, chain)
    report.seals = seals
    report.violations.extend(seals.violations)
    report.info.extend(seals.info)
    grad = check_gradient_seals(study, chain)  # sealed gradient-test results, as sealed
    report.violations.extend(grad.violations)
    report.warnings.extend(grad.warnings)
    report.info.extend(grad.info)
    audit = audit_runs(study, chain, study_id=study_id)
    report.audit = audit
    report.violations.extend(audit.violations)
    report.problems.extend(audit.problems)
    report.warnings.extend(audit.warnings)
    report.info.extend(audit.admitted)
    if audit.n_runs:
        report.info.append(f"{audit.n_runs} run(s) audited")
    if audit.devices and audit.devices.counts:
        report.info.append("main runs by device: " + ", ".join(f"{d!r} ({n})" for d, n in audit.devices.counts.items()))
    try:  # the design as locked, whatever the file says now
        locked = validate_plan(chain.last["content"], source=f"{chain.path} (entry {chain.last['index']})")
    except PreregError as e:
        report.problems.extend(e.lines)
    else:
        report.violations.extend(unexpected_runs(study, locked))
        _verify_sources(report, plan_path, locked, chain, _within + (study.resolve(),), tsa_ca)
    el = election_sha256(plan_path.parent)
    if el:
        report.info.append(f"{ELECTION_FILE}: {el[:19]}…{_election_summary(plan_path.parent / ELECTION_FILE)}")
    return report


def _verify_sources(report: VerifyReport, plan_path: Path, locked: Plan, chain: Chain, within: tuple[Path, ...],
                    tsa_ca: str | Path | None) -> None:
    """Step 8: each source as this plan's last entry pinned it, verified as a study of its own."""
    pinned = pinned_records(chain.last)
    for src in locked.sources:
        if src.prefix not in pinned:
            report.violations.append(f"{label(src)}: plan entry {chain.last['index']} pins no lock of it: lock or "
                                     "amend the plan with this tool to pin it")
            continue
        try:
            s = open_source(plan_path.parent, src, pinned[src.prefix])
        except PreregError as e:
            (report.violations if e.exit_code == 1 else report.problems).extend(e.lines)
            continue
        if s.folder in within or len(within) > MAX_SOURCE_DEPTH:
            report.problems.append(f"{s.label}: the sources lead back to a study they started from: "
                                   + " → ".join(p.name for p in (*within, s.folder)))
            continue
        sub = verify_study(s.folder, tsa_ca=tsa_ca, _within=within)
        for mine, theirs in ((report.violations, sub.violations), (report.problems, sub.problems),
                             (report.warnings, sub.warnings)):
            mine.extend(x if x.startswith("  ") else f"{s.label}: {x}" for x in theirs)
        runs = f"; {sub.audit.n_runs} run(s) audited" if sub.audit and sub.audit.n_runs else ""
        report.info.append(s.line() + runs)
        report.sources.append(s)
    if report.sources and len(report.sources) == len(locked.sources):
        report.problems.extend(plan_problems(locked, plan_path, report.sources))


def _election_summary(path: Path) -> str:
    try:
        rec = json.loads(path.read_text())
        return f" (elected {rec['elected']!r}, {rec.get('time', 'time not recorded')})"
    except (OSError, ValueError, KeyError, TypeError):
        return " (unreadable record)"


callable_module(__name__, verify_study)  # pk.verify(study): the module is callable (prereg_kit.callables)
