"""``plan.lock`` as a file: its one canonical text, each entry's hash, and the chain read back and
checked (:func:`read_chain`). Writing it (lock, amendments, appends) is :mod:`prereg_kit.chain.lock`;
:mod:`prereg_kit.chain.sources` reads other studies' chains through here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import LockError, ViolationError
from ..plan import resolve_plan_path
from ..plan.canonical import content_hash
from .entry import KINDS, PLAN_KINDS, parse_time

FORMAT = "prereg-lock/1"


def lock_path(plan_path: str | Path) -> Path:
    """``plan.toml`` → ``plan.lock`` beside it."""
    return resolve_plan_path(plan_path).with_suffix(".lock")


def serialize(doc: dict[str, Any]) -> str:
    """The one canonical text of a lock file."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def entry_hash(entry: dict[str, Any]) -> str:
    return content_hash({k: v for k, v in entry.items() if k != "hash"})


@dataclass(frozen=True)
class Chain:
    """A verified lock chain: plan entries (lock, amendments) and run seals, in order."""

    path: Path
    entries: list[dict[str, Any]]

    @property
    def plan_entries(self) -> list[dict[str, Any]]:
        return [e for e in self.entries if e["kind"] in PLAN_KINDS]

    @property
    def seals(self) -> list[dict[str, Any]]:
        return [e for e in self.entries if e["kind"] == "seal"]

    @property
    def gradient_seals(self) -> list[dict[str, Any]]:
        return [e for e in self.entries if e["kind"] == "gradient"]

    @property
    def last(self) -> dict[str, Any]:
        """The last plan entry (lock or amendment): the plan as it stands locked."""
        return self.plan_entries[-1]

    @property
    def head(self) -> dict[str, Any]:
        """The last entry of any kind: what an external timestamp of the chain covers."""
        return self.entries[-1]

    @property
    def locked_at(self) -> datetime:
        return parse_time(self.entries[0]["time"])

    def time(self, i: int) -> datetime:
        return parse_time(self.entries[i]["time"])


def read_chain(plan_path: str | Path) -> Chain:
    """Read ``plan.lock`` and check that it is canonical and its hash chain intact.

    Missing lock: :class:`LockError` (exit 2). A lock that was edited: :class:`ViolationError`.
    """
    lp = lock_path(plan_path)
    try:
        text = lp.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LockError(f"{lp}: no lock file: the plan is not locked (run `prereg lock {resolve_plan_path(plan_path)}`)") from None
    except UnicodeDecodeError:
        raise ViolationError(f"{lp}: not UTF-8 text: the lock file was edited or damaged") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ViolationError(f"{lp}:{e.lineno}: not valid JSON ({e.msg}): the lock file was edited or damaged") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("entries"), list) or not doc["entries"]:
        raise ViolationError(f"{lp}: not a {FORMAT} lock file with entries: it was edited or damaged")
    if serialize(doc) != text:
        raise ViolationError(f"{lp}: the file differs from its canonical form: it was edited by hand")
    entries = doc["entries"]
    prev = None
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or e.get("index") != i:
            raise ViolationError(f"{lp}: entry {i}: malformed or out of order: the chain is broken")
        if e.get("prev") != prev:
            raise ViolationError(f"{lp}: entry {i}: does not chain to entry {i - 1}: an earlier entry was changed")
        if e.get("hash") != entry_hash(e):
            raise ViolationError(f"{lp}: entry {i}: its hash does not match its content: the entry was edited")
        kind = e.get("kind")
        if kind not in KINDS or (kind == "lock") != (i == 0):
            raise ViolationError(f"{lp}: entry {i}: kind {kind!r} out of place (the chain starts with one lock, "
                                 "then amendments and seals): the chain was edited")
        if kind in PLAN_KINDS and content_hash(e.get("content")) != e.get("content_sha256"):
            raise ViolationError(f"{lp}: entry {i}: content does not match content_sha256: the entry was edited")
        try:
            t = parse_time(e["time"])
        except (KeyError, TypeError, ValueError):
            raise ViolationError(f"{lp}: entry {i}: no valid time: the entry was edited") from None
        if i and t < parse_time(entries[i - 1]["time"]):
            raise ViolationError(f"{lp}: entry {i}: dated {e['time']}, before entry {i - 1} "
                                 f"({entries[i - 1]['time']}): times in the chain never go back")
        prev = e["hash"]
    return Chain(lp, entries)


__all__ = ["FORMAT", "Chain", "entry_hash", "lock_path", "read_chain", "serialize"]
