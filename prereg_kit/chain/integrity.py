"""The anchors a plan declares (``[integrity]``), applied as the chain is written.

Every write of ``plan.lock`` (the lock, and every append: amendments, run seals, looks, gradient
seals, calibration amendments) goes through :func:`prereg_kit.chain.lock.lock_plan` or
:func:`prereg_kit.chain.lock.append_entries`, which call :func:`prepare` before the file is
replaced and :meth:`Pending.commit` after. The plan *in force* at an entry decides: for a plan
entry (lock, amendment) its own content, for any other entry the last plan entry before it.

- ``"rfc3161"`` declared: each new entry's hash is stamped by the plan's TSA before the chain is
  written; the receipts go to ``<study>/timestamps/<64 hex>.tsr`` first and are removed again if
  the chain cannot be written, so an entry and its receipt are written together or not at all. A
  TSA that does not answer refuses the append (one line; nothing written).
- ``"git"`` with ``commit = true``: refused before anything is written when the study is not in a
  git work tree (or git has no committer identity); after the write, ``plan.lock`` alone is
  committed with a message naming the entries.

The stamping call is a :data:`Stamper` (an entry hash → the DER receipt), passed in by the caller
or, by default, a request to the plan's ``tsa_url`` (:func:`tsa_stamper`); whatever it returns must
verify as a receipt of that entry before anything is written.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import PreregError
from ..plan import Integrity, declared_integrity
from .entry import PLAN_KINDS
from .gitinfo import commit_file, commit_refusal
from .timestamp.base import TimestampError, digest_of, receipt_name
from .timestamp.receipt import verify_receipt
from .timestamp.request import request_timestamp
from .timestamp.study import TIMESTAMPS_DIR

Stamper = Callable[[str], bytes]
"""An entry's ``hash`` (``sha256:<64 hex>``) → an RFC 3161 receipt (DER) stamping it."""

log = logging.getLogger(__name__)


def in_force(entries: list[dict[str, Any]], i: int) -> Integrity:
    """The ``[integrity]`` of the plan in force at entry ``i``: its own content for a plan entry,
    else the last plan entry's before it."""
    for e in reversed(entries[: i + 1]):
        if e.get("kind") in PLAN_KINDS:
            return declared_integrity(e.get("content"))
    return declared_integrity(None)


def in_force_all(entries: list[dict[str, Any]]) -> list[Integrity]:
    """:func:`in_force` of every entry, in one pass (each plan entry's table read once)."""
    out, cur = [], declared_integrity(None)
    for e in entries:
        if e.get("kind") in PLAN_KINDS:
            cur = declared_integrity(e.get("content"))
        out.append(cur)
    return out


def tsa_ca_path(study: Path, integrity: Integrity) -> Path | None:
    """The plan's ``tsa_ca``, relative to the study folder."""
    return None if integrity.tsa_ca is None else study / integrity.tsa_ca


def tsa_stamper(url: str, trusted: Path | None = None, *, timeout: float = 30) -> Stamper:
    """A :data:`Stamper` that asks the TSA at ``url`` (checked against ``trusted`` when given)."""
    return lambda entry_hash: request_timestamp(digest_of(entry_hash), url, timeout=timeout, trusted=trusted)


def describe_entry(e: dict[str, Any]) -> str:
    """An entry in a few words, for a commit message: ``entry 9 (seal runs/B/seed-0)``, ``entry 12 (look 2)``."""
    kind = e.get("kind", "?")
    what = {"seal": e.get("run"), "look": e.get("look"),
            "gradient": e.get("test"), "amendment": e.get("reason")}.get(kind)
    what = " ".join(str(what).split())[:80] if what else ""
    return f"entry {e.get('index')} ({kind}{' ' + what if what else ''})"


def commit_message(lp: Path, new: list[dict[str, Any]]) -> str:
    head = f"{lp.name}: " + (describe_entry(new[0]) if len(new) == 1 else
                             f"entries {new[0]['index']}–{new[-1]['index']} ({', '.join(sorted({e['kind'] for e in new}))})")
    body = "" if len(new) == 1 else "\n\n" + "\n".join(describe_entry(e) for e in new)
    return f"{head}{body}\n\nAppended by prereg-kit ([integrity] commit = true)."


@dataclass
class Pending:
    """What the declared anchors still have to do around one write of ``plan.lock``."""

    lock: Path
    entries: list[dict[str, Any]]
    receipts: dict[str, bytes] = field(default_factory=dict)  # file name → DER, for timestamps/
    ca_copies: dict[str, bytes] = field(default_factory=dict)  # tsa-ca-<sha256 prefix>.pem → certificate
    commit_after: bool = False
    written: list[Path] = field(default_factory=list)

    def write_receipts(self) -> None:
        """Keep the receipts in ``<study>/timestamps/`` (before the chain is written)."""
        if not self.receipts:
            return
        folder = self.lock.parent / TIMESTAMPS_DIR
        folder.mkdir(exist_ok=True)
        for name, data in {**self.ca_copies, **self.receipts}.items():
            target = folder / name
            tmp = target.with_name(name + ".tmp")
            tmp.write_bytes(data)
            tmp.replace(target)
            if name in self.receipts:
                self.written.append(target)

    def discard_receipts(self) -> None:
        """The chain was not written: its receipts would stamp no entry."""
        for p in self.written:
            p.unlink(missing_ok=True)

    def commit(self) -> str | None:
        """After the write: commit ``plan.lock`` alone when the plan asks; the commit, or None."""
        if not self.commit_after:
            return None
        sha, why = commit_file(self.lock, commit_message(self.lock, self.entries))
        if sha is None:
            raise PreregError(f"{self.lock}: {describe_entry(self.entries[-1])} was written but not committed, though the "
                              f"plan declares [integrity] commit = true: git said: {why} (commit plan.lock by hand)")
        log.info("%s: committed in %s", self.lock, sha[:12])
        return sha


def prepare(lock: Path, prior: list[dict[str, Any]], new: list[dict[str, Any]], *,
            stamper: Stamper | None = None) -> Pending:
    """Before ``new`` entries are written after ``prior``: refuse when a declared git commit cannot
    be made, and stamp every entry under a plan declaring ``rfc3161`` (``stamper``, else the plan's
    TSA). Raises :class:`PreregError` (nothing written yet) when either fails."""
    pending = Pending(lock, new)
    study = lock.parent
    for e, integrity in zip(new, in_force_all([*prior, *new])[len(prior):]):
        if integrity.commits and not pending.commit_after:
            why = commit_refusal(lock)
            if why is not None:
                raise PreregError(f"{lock}: the plan declares [integrity] anchors = [\"git\"] with commit = true, but {why}: "
                                  "nothing written (commit from a git work tree, or amend the plan to commit = false)")
            pending.commit_after = True
        if integrity.stamped:
            pending.receipts[receipt_name(e["hash"])] = _stamp(e, integrity, study, stamper, pending)
    return pending


def _stamp(e: dict[str, Any], integrity: Integrity, study: Path, stamper: Stamper | None, pending: Pending) -> bytes:
    ca = tsa_ca_path(study, integrity)
    if ca is not None:
        try:
            data = ca.read_bytes()
        except OSError as err:
            raise PreregError(f"[integrity] tsa_ca = {integrity.tsa_ca!r}: cannot read {ca} ({err.strerror}): "
                              "nothing written") from None
        pending.ca_copies[f"tsa-ca-{hashlib.sha256(data).hexdigest()[:12]}.pem"] = data
    stamp = stamper or tsa_stamper(integrity.tsa_url, ca)
    try:
        receipt = stamp(e["hash"])
        verify_receipt(receipt, digest_of(e["hash"]), trusted=ca)
    except TimestampError as err:
        raise TimestampError(f"{describe_entry(e)} could not be stamped, though the plan declares [integrity] "
                             f"anchors = [\"rfc3161\"]: {err}: nothing written") from None
    return receipt


__all__ = ["Pending", "Stamper", "commit_message", "describe_entry", "in_force", "in_force_all", "prepare", "tsa_ca_path", "tsa_stamper"]
