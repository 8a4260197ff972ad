"""Timestamps of a study's lock chain: receipts matched to chain entries, stamping an entry, and
the study-level check ``prereg verify`` runs."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Iterable

from ..entry import format_time, parse_time
from .base import (
    _ENTRY_HASH,
    _RECEIPT_NAME,
    RECEIPT_SUFFIX,
    CertSource,
    TimestampError,
    TimestampInfo,
    _libs,
    digest_of,
    receipt_name,
)
from .receipt import _load_certs, verify_receipt
from .request import request_timestamp

# ---------------------------------------------------------------------------------------------
# receipts of a chain


@dataclass(frozen=True)
class ReceiptCheck:
    """One receipt file: the chain entry it stamps (index, or None) and what it proves, or why not."""

    name: str
    entry: int | None
    info: TimestampInfo | None
    problem: str | None = None


@dataclass
class ReceiptReport:
    """The receipts of a study checked against its chain.

    A receipt on entry ``k`` proves entries ``0..k`` (each entry's ``prev`` covers the one before).
    ``proven[i]`` is the earliest valid receipt covering entry ``i`` (at equal TSA times, the one
    on the nearest entry).
    """

    checks: list[ReceiptCheck]
    n_entries: int
    proven: dict[int, ReceiptCheck] = field(default_factory=dict)

    @property
    def problems(self) -> list[str]:
        return [c.problem for c in self.checks if c.problem]

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        """One line per entry (proven when, by which receipt) and one per problem."""
        out = []
        for i in range(self.n_entries):
            c = self.proven.get(i)
            if c is None:
                out.append(f"entry {i}: no timestamp")
            else:
                trust = "trusted" if c.info.chain_checked else "TSA not checked against trusted roots"
                via = "" if c.entry == i else f" (through entry {c.entry})"
                out.append(f"entry {i}: existed by {c.info.gen_time.isoformat()} per {c.info.tsa}"
                           f" [{c.name}{via}; {trust}]")
        return out + self.problems


def check_receipts(entries: list[dict], receipts: dict[str, bytes], *,
                   trusted: CertSource | Iterable[CertSource] | None = None) -> ReceiptReport:
    """Which chain entries the receipts prove, at which TSA times, and which receipts are bad.

    ``receipts`` maps a receipt's file name (``<64 hex of the entry hash>.tsr``) to its bytes. A
    receipt whose digest is no entry's hash is reported: it stamped a chain that was rewritten
    since (or belongs to another study). A misnamed, unparseable, forged or untrusted receipt is
    reported too; the report's ``ok`` is False if any receipt has a problem.
    """
    _libs()
    index = {}
    for i, e in enumerate(entries):
        m = _ENTRY_HASH.match(str(e.get("hash", "")))
        if m:
            index[m.group(1)] = i
    trusted_certs = _load_certs(trusted)
    checks = []
    for name in sorted(receipts):
        m = _RECEIPT_NAME.match(Path(name).name)
        if not m:
            checks.append(ReceiptCheck(name, None, None,
                                       f"{name}: a receipt is named <64 hex of the entry hash>.tsr"))
            continue
        hexd = m.group(1)
        entry = index.get(hexd)
        try:
            info = verify_receipt(receipts[name], bytes.fromhex(hexd), trusted=trusted_certs or None,
                                  name=name)
        except TimestampError as e:
            checks.append(ReceiptCheck(name, entry, None, str(e)))
            continue
        if entry is None:
            checks.append(ReceiptCheck(name, None, info,
                                       f"{name} stamps {hexd[:16]}… (at {info.gen_time.isoformat()}), which "
                                       f"is no entry of the chain: the chain was rewritten after it was stamped"))
            continue
        checks.append(ReceiptCheck(name, entry, info))
    report = ReceiptReport(checks, len(entries))
    for c in checks:
        if c.problem is None and c.entry is not None:
            for i in range(c.entry + 1):
                best = report.proven.get(i)
                # earliest time; at equal times the receipt on the nearest entry
                if best is None or (c.info.gen_time, c.entry) < (best.info.gen_time, best.entry):
                    report.proven[i] = c
    return report


# ---------------------------------------------------------------------------------------------
# a study's receipts: <study>/timestamps/<64 hex>.tsr, checked by `prereg verify`

TIMESTAMPS_DIR = "timestamps"
CLOCK_SKEW = timedelta(minutes=5)  # an entry may read up to this much later than its TSA time
LATE_PROOF = timedelta(days=1)  # a lock first stamped later than this proves only the later time


def stamp_entry(study_dir: str | Path, entry: dict, url: str, *, trusted: CertSource | None = None,
                timeout: float = 30) -> Path:
    """Obtain a receipt for ``entry`` (usually the chain's head) from the TSA at ``url`` and keep it
    in ``<study>/timestamps/``; with ``trusted`` (the TSA's CA certificate, a file), the receipt must
    verify against it, and a copy of the certificate is kept beside the receipts for offline checks."""
    folder = Path(study_dir) / TIMESTAMPS_DIR
    receipt = request_timestamp(digest_of(entry["hash"]), url, timeout=timeout, trusted=trusted)
    folder.mkdir(exist_ok=True)
    if trusted is not None:
        data = Path(trusted).read_bytes()
        (folder / f"tsa-ca-{hashlib.sha256(data).hexdigest()[:12]}.pem").write_bytes(data)
    target = folder / receipt_name(entry["hash"])
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(receipt)
    tmp.replace(target)
    return target


@dataclass
class StudyTimestamps:
    """``prereg verify``'s reading of a study's receipts (empty lists when it has none)."""

    violations: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)
    report: ReceiptReport | None = None


def check_study_timestamps(study_dir: str | Path, entries: list[dict], *,
                           trusted: CertSource | Iterable[CertSource] | None = None) -> StudyTimestamps:
    """Check every receipt in ``<study>/timestamps/`` against the chain ``entries``.

    A receipt that fails (forged, misnamed, untrusted) or stamps no entry of the chain (the chain was
    rewritten after it was stamped) is a violation. An entry whose recorded time is later than its
    TSA time by more than :data:`CLOCK_SKEW` is a warning (its machine's clock ran ahead), and so
    is a lock first stamped more than :data:`LATE_PROOF` after its recorded time: only the TSA's
    time is proven. ``trusted``: the TSA roots to check against; by default the ``*.pem`` files kept
    in the folder (kept by the author, so a reader should compare their fingerprints with the TSA's
    published root).
    """
    out = StudyTimestamps()
    folder = Path(study_dir) / TIMESTAMPS_DIR
    receipts = {}
    for p in sorted(folder.glob(f"*{RECEIPT_SUFFIX}")) if folder.is_dir() else []:
        try:
            receipts[p.name] = p.read_bytes()
        except OSError as e:  # a folder, a file without read permission: no proof of anything
            out.violations.append(f"{TIMESTAMPS_DIR}/{p.name}: unreadable ({e.strerror or e}): it proves nothing")
    if not receipts:
        return out
    kept = sorted(folder.glob("*.pem"))
    roots = trusted if trusted is not None else (kept or None)
    try:
        rep = check_receipts(entries, receipts, trusted=roots)
    except TimestampError as e:  # the extra is missing, or a trusted certificate is unreadable
        out.problems.append(f"{folder}: {e}")
        return out
    out.report = rep
    out.violations.extend(f"{TIMESTAMPS_DIR}/{c.problem}" for c in rep.checks if c.problem)  # each names its receipt
    source = ("the given certificates" if trusted is not None else
              f"{', '.join(p.name for p in kept)} kept in {TIMESTAMPS_DIR}/" if kept else "nothing: self-consistent only")
    head = len(entries) - 1
    proof = rep.proven.get(head)
    stamped = {c.entry for c in rep.checks if c.problem is None and c.entry is not None}
    out.info.append(f"{len(receipts)} timestamp receipt(s); TSA roots: {source}; "
                    + (f"the head (entry {head}) existed by {format_time(proof.info.gen_time)} per {proof.info.tsa}"
                       if proof else f"latest proven entry {max(stamped)} of {head}" if stamped else "no entry proven"))
    for i, e in enumerate(entries):
        c = rep.proven.get(i)
        if c is None or c.entry != i:
            continue
        claimed = parse_time(e["time"])
        if claimed - c.info.gen_time > CLOCK_SKEW:
            out.warnings.append(f"entry {i} is dated {e['time']}, after its TSA time {format_time(c.info.gen_time)}: "
                                "the clock of the machine that wrote it ran ahead")
    first = rep.proven.get(0)
    if first is not None:
        claimed = parse_time(entries[0]["time"])
        if first.info.gen_time - claimed > LATE_PROOF:
            out.warnings.append(f"the lock (entry 0) is dated {entries[0]['time']} but was first timestamped "
                                f"{format_time(first.info.gen_time)}: only the later time is proven")
    return out

