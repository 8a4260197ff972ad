"""``prereg verify``: the lock chain, the plan against its last entry, and the run-timing audit.

Exit codes: 0 clean (warnings allowed: comment-only edits), 1 violations, 2 unusable input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .audit import AuditReport, audit_runs
from .errors import PreregError
from .lock import Chain, check_plan, read_chain
from .plan import load_plan, resolve_plan_path
from .runlog import ELECTION_FILE, election_sha256


@dataclass
class VerifyReport:
    plan_path: Path
    chain: Chain | None = None
    violations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)
    audit: AuditReport | None = None

    @property
    def exit_code(self) -> int:
        return 2 if self.problems else 1 if self.violations else 0


def verify_study(path: str | Path) -> VerifyReport:
    """Check ``PLAN`` or ``STUDY_DIR``: chain intact, plan unchanged in meaning, runs after the lock."""
    plan_path = resolve_plan_path(path)
    report = VerifyReport(plan_path)
    try:
        chain = read_chain(plan_path)
    except PreregError as e:
        (report.violations if e.exit_code == 1 else report.problems).extend(e.lines)
        return report
    report.chain = chain
    n_amend = len(chain.entries) - 1
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
        load_plan(plan_path)
    except PreregError as e:
        report.problems.extend(e.lines)
    audit = audit_runs(plan_path.parent, chain, study_id=study_id)
    report.audit = audit
    report.violations.extend(audit.violations)
    report.problems.extend(audit.problems)
    report.warnings.extend(audit.warnings)
    report.info.extend(audit.admitted)
    if audit.n_runs:
        report.info.append(f"{audit.n_runs} run(s) audited")
    el = election_sha256(plan_path.parent)
    if el:
        report.info.append(f"{ELECTION_FILE}: {el[:19]}…{_election_summary(plan_path.parent / ELECTION_FILE)}")
    return report


def _election_summary(path: Path) -> str:
    try:
        rec = json.loads(path.read_text())
        return f" (elected {rec['elected']!r}, {rec.get('time', 'time not recorded')})"
    except (OSError, ValueError, KeyError, TypeError):
        return " (unreadable record)"
