"""Locking a plan and recording dated amendments in a hash chain (``plan.lock``).

Dense-rewards paper §2.3 and §C.1 "Preregistration": each study fixed its plan before its
runs, later edits were dated amendments, and the timing was audited. ``plan.lock`` holds entries
``[lock, amendment, amendment, ...]``; each entry records

- ``raw_sha256``: sha256 of the plan file's bytes (any edit at all changes it);
- ``content_sha256``: sha256 of the canonical parsed content (comment-only edits keep it);
- ``content``: the parsed plan itself, so later diffs can name the keys that changed;
- ``time`` (UTC), ``tool_version``, ``git`` (commit; whether the plan was committed and clean);
- for amendments, ``reason`` and ``changes`` (key, old → new);
- for a plan with ``[[sources]]``, ``sources``: each source study's lock and last plan entry as it
  is pinned (:mod:`prereg_kit.chain.sources`);
- ``prev``: the previous entry's ``hash``; ``hash``: sha256 of the entry's canonical JSON
  without ``hash``. Changing any earlier entry breaks the chain.

Completed runs are *sealed* into the same chain (entries of kind ``seal``, written by
:mod:`prereg_kit.chain.seal`): the hashes of a run's files, chained after the plan entries they ran
under. Every entry's time is the clock's at the moment it is appended — no caller can choose it —
and times never decrease along the chain. Appends take an OS lock beside the file
(``.plan.lock.guard``), so runs that finish at once, or an amendment during runs, never lose an
entry: a writer waits for it with retries, saying so in the log, for up to 10 minutes
(``PREREG_CHAIN_LOCK_TIMEOUT_S``), and the file is replaced whole (temp file, fsync, rename) or not
at all, even on a full disk.

The file itself is written in one canonical JSON form (:mod:`prereg_kit.chain.chainfile`, which
also reads it back), so any hand edit, even of white space, is detected. Someone who rewrites the whole chain consistently is not detected by the file alone:
the git commit recorded in each entry (:func:`check_git_anchors`: the commit must exist no later
than the entry and hold the plan it hashed), git's history of ``plan.lock`` and the head a reader
holds (:mod:`prereg_kit.chain.anchors`) and external timestamps (:mod:`prereg_kit.chain.timestamp`) are the
outside anchors; ``docs/locking.md`` states what each layer catches. The anchors a plan declares
(``[integrity]``) are applied at every write here (:mod:`prereg_kit.chain.integrity`): entries
stamped as they are written, ``plan.lock`` committed after each.
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from .. import __version__
from ..errors import LockError, PreregError, ViolationError, writing
from ..plan import PlanFile, load_plan, read_toml, resolve_plan_path
from ..plan.canonical import canonical_json, content_hash, normalized, sha256_hex
from ..plan.diff import changed_keys, describe
from .chainfile import FORMAT, Chain, entry_hash, lock_path, read_chain, serialize
from .entry import format_time, parse_time
from .gitinfo import blob_sha256, commit_time, git_status, in_work_tree
from .integrity import Stamper, prepare
from .sources import pin_sources

GUARD_PREFIX = "."  # .plan.lock.guard beside plan.lock: the OS lock held while the chain is appended to
GUARD_TIMEOUT_S = 600.0  # how long an append waits in all for other processes' appends before it gives up
GUARD_TIMEOUT_ENV = "PREREG_CHAIN_LOCK_TIMEOUT_S"  # sets that bound (a test sets a short one)
_FIRST_TRY_S, _LONGEST_TRY_S = 0.25, 30.0  # each try waits twice as long as the one before, up to this

log = logging.getLogger(__name__)


def utc_now() -> datetime:
    """The clock every chain entry takes its time from (UTC)."""
    return datetime.now(timezone.utc)


def _finish_entry(fields: dict[str, Any], head: dict[str, Any] | None, now: datetime) -> dict[str, Any]:
    """``fields`` as the next entry after ``head``: index, time from the clock, prev and hash."""
    entry = {**fields, "index": 0 if head is None else head["index"] + 1, "time": format_time(now),
             "prev": None if head is None else head["hash"]}
    entry["hash"] = entry_hash(entry)
    return entry


def _plan_fields(pf: PlanFile, *, kind: str, reason: str = "", changes: list | None = None,
                 sources: list | None = None) -> dict[str, Any]:
    """A plan entry's fields; ``sources``: the identities of the studies the plan takes configurations
    from, pinned as they are locked now (:func:`prereg_kit.chain.sources.pin_sources`)."""
    fields: dict[str, Any] = {
        "kind": kind,
        "plan": pf.path.name,
        "raw_sha256": pf.raw_sha256,
        "content_sha256": pf.content_sha256,
        "content": normalized(pf.data),
        "tool_version": __version__,
        "git": git_status(pf.path),
    }
    if pf.plan.sources:
        fields["sources"] = sources if sources is not None else pin_sources(pf)
    if kind == "amendment":
        fields["reason"] = reason
        fields["changes"] = changes or []
        fields["comment_only"] = not changes
    return fields


def _write(lp: Path, entries: list[dict[str, Any]]) -> None:
    """Replace ``lp`` with the chain ``entries``, whole or not at all: a temp file written and
    fsynced (a full disk can surface only at the fsync), then renamed over the lock file."""
    tmp = lp.with_suffix(".lock.tmp")
    data = serialize({"format": FORMAT, "entries": entries}).encode("utf-8")
    with writing(lp, f"nothing was appended: {lp.name} is as it was"):
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            tmp.unlink(missing_ok=True)  # the chain itself was never touched
            raise
        tmp.replace(lp)  # atomic: a crash never leaves half a lock


def guard_timeout() -> float:
    """How long an append waits in all for the chain's OS lock: ``PREREG_CHAIN_LOCK_TIMEOUT_S``
    when set, else :data:`GUARD_TIMEOUT_S`."""
    raw = os.environ.get(GUARD_TIMEOUT_ENV, "").strip()
    if not raw:
        return GUARD_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise PreregError(f"{GUARD_TIMEOUT_ENV}={raw!r}: expected a positive number of seconds")
    return value


@contextmanager
def chain_guard(plan_path: str | Path, timeout_s: float | None = None) -> Iterator[None]:
    """Hold the OS lock that serializes appends to ``plan.lock`` (runs sealing at once, an amendment
    during runs). Readers need no lock: the file is only ever replaced whole, atomically.

    Another process's append is waited for in tries of 0.25 s, 0.5 s, 1 s, … (at most 30 s each,
    polling less often as they grow), with a log line after each try that found the lock held, for
    ``timeout_s`` in all (default :func:`guard_timeout`); then :class:`LockError`, nothing written.
    """
    from filelock import FileLock, Timeout  # ~50 ms to import: only writers pay it, never `prereg verify`

    lp = lock_path(plan_path)
    guard = lp.with_name(f"{GUARD_PREFIX}{lp.name}.guard")
    total = guard_timeout() if timeout_s is None else timeout_s
    lock = FileLock(guard)
    t0, attempt = time.monotonic(), _FIRST_TRY_S
    while True:
        left = total - (time.monotonic() - t0)
        try:
            lock.acquire(timeout=max(0.0, min(attempt, left)), poll_interval=min(attempt / 20, 0.5))
            break
        except Timeout:
            waited = time.monotonic() - t0
            if waited >= total:
                raise LockError(f"{guard}: other processes have held the lock chain for over {total:g} s; nothing was "
                                f"written (is a `prereg` process stuck? {GUARD_TIMEOUT_ENV} sets the wait)") from None
            log.warning("%s: waiting for the lock chain: another process is appending to it (%.1f s so far, "
                        "giving up after %g s)", lp, waited, total)
            attempt = min(2 * attempt, _LONGEST_TRY_S)
    try:
        yield
    finally:
        lock.release()


def _clock_after(chain: Chain, what: str) -> datetime:
    """The clock's time, refused when it reads before the chain's last entry (times never go back)."""
    now = utc_now()
    if now < chain.time(-1):
        raise PreregError(f"{chain.path}: the clock reads {format_time(now)}, before the last entry "
                          f"({chain.head['time']}): {what} refused (is this machine's clock wrong?)")
    return now


def _write_anchored(lp: Path, prior: list[dict[str, Any]], new: list[dict[str, Any]], stamper: Stamper | None) -> None:
    """Write the chain ``prior + new`` with the anchors the plan in force declares
    (:mod:`prereg_kit.chain.integrity`): each new entry stamped and its receipt kept before the
    write (removed if the write fails), ``plan.lock`` committed after it."""
    pending = prepare(lp, prior, new, stamper=stamper)
    pending.write_receipts()
    try:
        _write(lp, [*prior, *new])
    except BaseException:
        pending.discard_receipts()
        raise
    pending.commit()


def append_entries(plan_path: str | Path, make: Callable[[Chain], list[dict[str, Any]]], *, what: str,
                   stamper: Stamper | None = None) -> list[dict[str, Any]]:
    """Append entries to an existing chain under its OS lock; ``make(chain)`` returns the new
    entries' fields (without index, time, prev, hash), computed from the chain as it is now.

    Returns the entries written (none when ``make`` returns none). Times come from the clock. The
    plan's ``[integrity]`` anchors apply to every entry (``stamper``: how ``rfc3161`` stamps,
    default the plan's TSA; :mod:`prereg_kit.chain.integrity`).
    """
    with chain_guard(plan_path):
        chain = read_chain(plan_path)
        fields = make(chain)
        if not fields:
            return []
        now = _clock_after(chain, what)
        head, new = chain.head, []
        for f in fields:
            head = _finish_entry(f, head, now)
            new.append(head)
        _write_anchored(chain.path, chain.entries, new, stamper)
        return new


@dataclass(frozen=True)
class LockResult:
    status: str  # "locked" | "unchanged" | "amended"
    entry: dict[str, Any]
    path: Path


PlanFileCheck = Callable[[PlanFile], None]
"""A further check of a validated plan before anything is written (``prereg lock`` passes the
recipe check against the plan's trainer); it raises :class:`PreregError` to refuse."""


def lock_plan(plan_path: str | Path, *, check: PlanFileCheck | None = None, stamper: Stamper | None = None) -> LockResult:
    """Validate and lock a plan at the current time. Re-locking an unchanged plan is a no-op; a
    changed one is refused (amend it instead). ``check`` runs on the validated plan first. The
    plan's ``[integrity]`` anchors apply to the lock entry as to every later one (``stamper``)."""
    pf = load_plan(plan_path)
    if check is not None:
        check(pf)
    lp = lock_path(pf.path)
    with chain_guard(pf.path):
        if lp.exists():
            chain = read_chain(pf.path)
            last = chain.last
            if pf.raw_sha256 == last["raw_sha256"]:
                return LockResult("unchanged", last, lp)
            what = "only comments or layout changed" if pf.content_sha256 == last["content_sha256"] else "its content changed"
            raise ViolationError(
                f"{pf.path}: already locked ({last['time']}) and {what} since; "
                f"record the change with `prereg amend {pf.path} --reason \"...\"`")
        entry = _finish_entry(_plan_fields(pf, kind="lock"), None, utc_now())
        _write_anchored(lp, [], [entry], stamper)
    return LockResult("locked", entry, lp)


def amend_plan(plan_path: str | Path, reason: str, *, check: PlanFileCheck | None = None,
               stamper: Stamper | None = None) -> LockResult:
    """Append a dated amendment (the current time) with its reason and the keys that changed (old → new).
    ``check`` runs on the validated plan first; ``stamper`` as for :func:`append_entries`."""
    resolve_plan_path(plan_path)  # a path that leads to no plan is the first thing to say
    if not reason or not reason.strip():
        raise PreregError("an amendment needs a reason: --reason \"why the plan changed\"")
    pf = load_plan(plan_path)
    if check is not None:
        check(pf)

    def make(chain: Chain) -> list[dict[str, Any]]:
        last = chain.last
        pinned = pin_sources(pf) if pf.plan.sources else None
        old = {r.get("name"): r.get("entry_hash") for r in last.get("sources") or []}
        repinned = [{"key": f"sources.{r['name']} (its plan entry)", **({"old": old[r["name"]]} if r["name"] in old else {}),
                     "new": r["entry_hash"]} for r in pinned or [] if old.get(r["name"]) != r["entry_hash"]]
        if pf.raw_sha256 == last["raw_sha256"] and not repinned:  # a source locked or amended again: pinned anew
            raise ViolationError(f"{pf.path}: unchanged since entry {last['index']} ({last['time']}): nothing to amend")
        changes = changed_keys(last["content"], normalized(pf.data)) + repinned
        return [_plan_fields(pf, kind="amendment", reason=reason.strip(), changes=changes, sources=pinned)]

    entry = append_entries(pf.path, make, what="the amendment", stamper=stamper)[0]
    return LockResult("amended", entry, lock_path(pf.path))


def check_git_anchors(chain: Chain, plan_path: str | Path) -> tuple[list[str], list[str]]:
    """The git commits recorded in the plan entries, checked against the repository around the plan.

    A plan entry records HEAD when it was written (``git.commit``) and whether the plan file was
    committed and clean. Where the study is in a git work tree: an entry dated before its recorded
    commit was made is back-dated (violation); an entry that says the plan was committed and clean
    must hash to the plan as that commit holds it (violation otherwise); a commit this repository
    does not have (rewritten history, a shallow clone, a copied study) is a warning. Returns
    ``(violations, warnings)``; nothing is checked outside a work tree.
    """
    violations: list[str] = []
    warnings: list[str] = []
    folder = resolve_plan_path(plan_path).parent
    if not in_work_tree(folder):
        return violations, warnings
    lp = chain.path
    for e in chain.plan_entries:
        git = e.get("git") or {}
        commit = git.get("commit")
        if not commit:
            continue
        when = commit_time(folder, commit)
        if when is None:
            warnings.append(f"{lp}: entry {e['index']}: recorded git commit {commit[:12]} is not in this repository "
                            "(rewritten history, a shallow clone or a copied study): not checked")
            continue
        if when > parse_time(e["time"]):
            violations.append(f"{lp}: entry {e['index']} is dated {e['time']}, before the git commit it records "
                              f"({commit[:12]}, made {format_time(when)}): the entry was back-dated")
        if git.get("clean"):
            path = git.get("path") or _repo_path(plan_path)
            held = blob_sha256(folder, commit, path) if path else None
            if held != e["raw_sha256"]:
                violations.append(f"{lp}: entry {e['index']} says the plan was committed and clean at {commit[:12]}, "
                                  f"but {path} there {'hashes ' + held[:19] + '…' if held else 'does not exist'}, "
                                  f"not {e['raw_sha256'][:19]}…")
    return violations, warnings


def _repo_path(plan_path: str | Path) -> str | None:
    st = git_status(resolve_plan_path(plan_path))
    return st["path"] if st else None


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


__all__ = ["format_time", "parse_time", "lock_plan", "amend_plan", "append_entries", "read_chain", "check_plan", "check_git_anchors", "lock_path",
           "chain_guard", "guard_timeout", "Chain", "LockResult", "PlanCheck", "canonical_json", "FORMAT"]
