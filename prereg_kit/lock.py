"""Locking a plan and recording dated amendments in a hash chain (``plan.lock``).

Paper 1 §2.3 and C.1 ("Preregistration"), extract §3.18: each study fixed its plan before its
runs, later edits were dated amendments, and the timing was audited. ``plan.lock`` holds entries
``[lock, amendment, amendment, ...]``; each entry records

- ``raw_sha256``: sha256 of the plan file's bytes (any edit at all changes it);
- ``content_sha256``: sha256 of the canonical parsed content (comment-only edits keep it);
- ``content``: the parsed plan itself, so later diffs can name the keys that changed;
- ``time`` (UTC), ``tool_version``, ``git`` (commit; whether the plan was committed and clean);
- for amendments, ``reason`` and ``changes`` (key, old → new);
- ``prev``: the previous entry's ``hash``; ``hash``: sha256 of the entry's canonical JSON
  without ``hash``. Changing any earlier entry breaks the chain.

The file itself is written in one canonical JSON form, so any hand edit, even of white space,
is detected. (Someone who rewrites the whole chain consistently is not; the recorded git commit
is the outside anchor for that.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import __version__
from .canonical import canonical_json, content_hash, normalized, sha256_hex
from .diff import changed_keys, describe
from .errors import LockError, PreregError, ViolationError
from .gitinfo import git_status
from .plan import PlanFile, load_plan, read_toml, resolve_plan_path

FORMAT = "prereg-lock/1"


def lock_path(plan_path: str | Path) -> Path:
    """``plan.toml`` → ``plan.lock`` beside it."""
    return resolve_plan_path(plan_path).with_suffix(".lock")


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def parse_time(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def serialize(doc: dict[str, Any]) -> str:
    """The one canonical text of a lock file."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def entry_hash(entry: dict[str, Any]) -> str:
    return content_hash({k: v for k, v in entry.items() if k != "hash"})


@dataclass(frozen=True)
class Chain:
    """A verified lock chain."""

    path: Path
    entries: list[dict[str, Any]]

    @property
    def last(self) -> dict[str, Any]:
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
        if content_hash(e.get("content")) != e.get("content_sha256"):
            raise ViolationError(f"{lp}: entry {i}: content does not match content_sha256: the entry was edited")
        try:
            t = parse_time(e["time"])
        except (KeyError, TypeError, ValueError):
            raise ViolationError(f"{lp}: entry {i}: no valid time: the entry was edited") from None
        if i and t < parse_time(entries[i - 1]["time"]):
            raise ViolationError(f"{lp}: entry {i}: dated before entry {i - 1}")
        prev = e["hash"]
    return Chain(lp, entries)


def _new_entry(pf: PlanFile, prev: dict | None, *, kind: str, now: datetime,
               reason: str = "", changes: list | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "index": 0 if prev is None else prev["index"] + 1,
        "kind": kind,
        "plan": pf.path.name,
        "time": _iso(now),
        "raw_sha256": pf.raw_sha256,
        "content_sha256": pf.content_sha256,
        "content": normalized(pf.data),
        "tool_version": __version__,
        "git": git_status(pf.path),
        "prev": None if prev is None else prev["hash"],
    }
    if kind == "amendment":
        entry["reason"] = reason
        entry["changes"] = changes or []
        entry["comment_only"] = not changes
    entry["hash"] = entry_hash(entry)
    return entry


def _write(lp: Path, entries: list[dict[str, Any]]) -> None:
    tmp = lp.with_suffix(".lock.tmp")
    tmp.write_text(serialize({"format": FORMAT, "entries": entries}), encoding="utf-8")
    tmp.replace(lp)  # atomic: a crash never leaves half a lock


@dataclass(frozen=True)
class LockResult:
    status: str  # "locked" | "unchanged" | "amended"
    entry: dict[str, Any]
    path: Path


def lock_plan(plan_path: str | Path, *, now: datetime | None = None) -> LockResult:
    """Validate and lock a plan. Re-locking an unchanged plan is a no-op; a changed one is refused."""
    pf = load_plan(plan_path)
    lp = lock_path(pf.path)
    if lp.exists():
        chain = read_chain(pf.path)
        last = chain.last
        if pf.raw_sha256 == last["raw_sha256"]:
            return LockResult("unchanged", last, lp)
        what = "only comments or layout changed" if pf.content_sha256 == last["content_sha256"] else "its content changed"
        raise ViolationError(
            f"{pf.path}: already locked ({last['time']}) and {what} since; "
            f"record the change with `prereg amend {pf.path} --reason \"...\"`")
    entry = _new_entry(pf, None, kind="lock", now=now or utc_now())
    _write(lp, [entry])
    return LockResult("locked", entry, lp)


def amend_plan(plan_path: str | Path, reason: str, *, now: datetime | None = None) -> LockResult:
    """Append a dated amendment with its reason and the keys that changed (old → new)."""
    if not reason or not reason.strip():
        raise PreregError("an amendment needs a reason: --reason \"why the plan changed\"")
    pf = load_plan(plan_path)
    chain = read_chain(pf.path)
    last = chain.last
    if pf.raw_sha256 == last["raw_sha256"]:
        raise ViolationError(f"{pf.path}: unchanged since entry {last['index']} ({last['time']}): nothing to amend")
    t = now or utc_now()
    if t < chain.time(-1):
        raise PreregError(f"{pf.path}: the clock reads {_iso(t)}, before the last entry ({last['time']})")
    changes = changed_keys(last["content"], normalized(pf.data))
    entry = _new_entry(pf, last, kind="amendment", now=t, reason=reason.strip(), changes=changes)
    _write(chain.path, [*chain.entries, entry])
    return LockResult("amended", entry, chain.path)


@dataclass(frozen=True)
class PlanCheck:
    """The plan on disk against the last lock entry."""

    state: str  # "clean" | "comment-only" | "changed"
    changes: list[dict[str, Any]]

    def lines(self, plan_path: Path) -> list[str]:
        if self.state == "comment-only":
            return [f"{plan_path}: changed since the last lock entry in comments or layout only (meaning unchanged)"]
        if self.state == "changed":
            return [f"{plan_path}: changed since the last lock entry; record it with `prereg amend`:"] + [
                f"  {describe(c)}" for c in self.changes]
        return []


def check_plan(plan_path: str | Path, chain: Chain) -> PlanCheck:
    """Compare the plan file with the chain's last entry (raw bytes, then parsed content)."""
    raw, data = read_toml(resolve_plan_path(plan_path))
    last = chain.last
    if sha256_hex(raw) == last["raw_sha256"]:
        return PlanCheck("clean", [])
    if content_hash(data) == last["content_sha256"]:
        return PlanCheck("comment-only", [])
    return PlanCheck("changed", changed_keys(last["content"], normalized(data)))


__all__ = ["lock_plan", "amend_plan", "read_chain", "check_plan", "lock_path", "Chain", "LockResult",
           "PlanCheck", "canonical_json", "FORMAT"]
