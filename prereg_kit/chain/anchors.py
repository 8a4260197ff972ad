"""Anchors of the lock chain outside ``plan.lock``: git's history of the file, and the head a reader holds.

A chain rewritten consistently (every entry, every hash) is a valid chain; only something the
author cannot rewrite as well catches it:

- **git**: every committed version of ``plan.lock`` in HEAD's history must be a prefix of the next
  committed version and of the working file, entry by entry (the chain may only grow). A committed
  entry that differs or is gone later is a violation naming the commit and the entry. It proves
  nothing about entries never committed, nor against a rewritten git history (a history pushed
  where others see it is what makes it hard to rewrite).
- **the shared head**: the hash of an entry the author published (a paper, a registration).
  ``prereg verify --head`` fails unless the chain has an entry with exactly that hash; since each
  entry's hash covers the one before it (``prev``), finding it in a valid chain proves every entry
  up to it unchanged. It proves nothing about entries appended after it.

The git plan-entry anchors (the commit each plan entry records) stay in
:func:`prereg_kit.chain.lock.check_git_anchors`; ``docs/locking.md`` states what each anchor proves.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import PreregError
from .gitinfo import blob_at, path_commits, repo_path
from .lock import Chain

log = logging.getLogger(__name__)

_HEX64 = re.compile(r"(?:sha256:)?([0-9a-f]{64})", re.IGNORECASE)


def entry_summary(e: dict[str, Any]) -> dict[str, Any]:
    """The fields that name an entry to a reader: index, kind, time, hash."""
    return {k: e.get(k) for k in ("index", "kind", "time", "hash")}


def parse_head(value: str) -> str:
    """``--head`` as the chain writes hashes (``sha256:<64 hex>``, lower case); 64 hex alone is accepted."""
    m = _HEX64.fullmatch(value.strip())
    if not m:
        raise PreregError(f"--head {value!r}: not an entry hash (sha256:<64 hex digits>, as `prereg verify --json` prints it)")
    return "sha256:" + m.group(1).lower()


@dataclass
class HeadCheck:
    """The reader's shared head against the chain: the entry that has it, or a violation."""

    given: str
    entry: dict[str, Any] | None
    line: str  # the info line when found, the violation when not

    def record(self) -> dict[str, Any]:
        return {"given": self.given, "found": self.entry is not None,
                "entry": None if self.entry is None else entry_summary(self.entry)}


def check_shared_head(chain: Chain, head: str) -> HeadCheck:
    """Find the entry whose hash is ``head`` (already :func:`parse_head`-ed) in a chain that
    :func:`prereg_kit.chain.lock.read_chain` verified: found, the chain up to it is the one shared."""
    lp, last = chain.path, chain.head
    for e in chain.entries:
        if e["hash"] == head:
            after = last["index"] - e["index"]
            return HeadCheck(head, e, f"shared head {head[:19]}… is entry {e['index']} ({e['kind']}, {e['time']}): "
                                      f"the chain up to it is unchanged" + (f"; {after} entr{'y' if after == 1 else 'ies'} "
                                                                            "appended since" if after else ""))
    return HeadCheck(head, None, f"{lp}: the shared head {head[:19]}… is no entry of the chain "
                                 f"({len(chain.entries)} entries, head entry {last['index']} {last['hash'][:19]}…): "
                                 "the chain was rewritten, or is not the one shared")


@dataclass
class GitHistory:
    """``plan.lock`` in git: how many commits hold it, how much of the working chain they cover,
    and any committed entry that a later version rewrote."""

    in_repo: bool = False
    commits: int = 0
    last_commit: str | None = None
    last_date: str | None = None
    covered: int = 0  # entries of the working chain that the newest committed version holds
    restarts: int = 0  # committed versions replaced by a chain from a later lock
    violations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        return {"in_repo": self.in_repo, "commits": self.commits, "last_commit": self.last_commit,
                "last_commit_date": self.last_date, "entries_committed": self.covered}


def _entries(data: bytes) -> list[dict[str, Any]] | None:
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    entries = doc.get("entries") if isinstance(doc, dict) else None
    return entries if isinstance(entries, list) and all(isinstance(e, dict) for e in entries) else None


def _first_difference(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> int | None:
    """The first index where ``old`` is not a prefix of ``new``; None when it is."""
    for i, e in enumerate(old):
        if i >= len(new) or new[i] != e:
            return i
    return None


def check_git_history(chain: Chain) -> GitHistory:
    """Every committed version of ``chain.path`` a prefix of the next and of the working chain.

    One ``git log`` and one ``git show`` per commit. A commit where the file is absent or not a
    chain is skipped (a warning for the latter): the versions around it are compared instead.
    """
    lp = chain.path
    where = repo_path(lp)  # the history needs only the file's path in its repository
    res = GitHistory(in_repo=where is not None)
    if where is None:
        res.info.append(f"git: {lp.name} is not in a git work tree: git does not anchor the chain")
        return res
    commits = path_commits(lp) or []
    prev: tuple[str, str, list[dict[str, Any]]] | None = None
    for sha, date in commits:
        data = blob_at(lp.parent, sha, where)
        if data is None:  # deleted in this commit: compare the versions around it
            continue
        entries = _entries(data)
        if entries is None:
            res.warnings.append(f"{lp}: as committed in {sha[:12]} ({date}) it is not a lock chain: that version not compared")
            continue
        if prev is not None:
            _compare(res, lp, prev, entries, f"commit {sha[:12]} ({date})")
        prev = (sha, date, entries)
        res.commits += 1
    if prev is None:
        res.info.append(f"git: {lp.name} was never committed: git does not anchor the chain (commit it, and push it "
                        "where others see it)")
        return res
    sha, date, entries = prev
    _compare(res, lp, prev, chain.entries, "the working file")
    res.last_commit, res.last_date = sha, date
    res.covered = min(len(entries), len(chain.entries))
    n = len(chain.entries)
    log.debug("%s: %d committed version(s) compared", lp, res.commits)
    if not res.violations:
        again = f" (started again from a later lock {res.restarts} time(s))" if res.restarts else ""
        res.info.append(f"git: {lp.name} in {res.commits} commit(s), each a prefix of the next{again}; entries 0–{res.covered - 1} "
                        f"as committed in {sha[:12]} ({date}) are unchanged"
                        + (f"; entries {res.covered}–{n - 1} not committed yet" if res.covered < n else ""))
    return res


def _compare(res: GitHistory, lp, old: tuple[str, str, list[dict[str, Any]]], new: list[dict[str, Any]], where: str) -> None:
    sha, date, entries = old
    i = _first_difference(entries, new)
    if i is None:
        return
    kind = entries[i].get("kind", "?")
    if i == 0 and new and new[0].get("kind") == "lock" and str(new[0].get("time", "")) > max(
            str(e.get("time", "")) for e in entries):
        # A lock entry later than everything the old chain holds is a new preregistration under
        # the same path, not an edit of the old one: runs started before it fail the audit, and no
        # shared head of the old chain is in it. Shown on every verify, never silent. A lock entry
        # rewritten with its old time (or any earlier one) is an edit: a violation, below.
        res.restarts += 1
        res.warnings.append(f"{lp}: the chain was started again from a new lock in {where} (the chain as committed "
                            f"in {sha[:12]} ({date}) is kept in git's history): a reader holding the earlier "
                            "chain's head sees it is gone")
        return
    what = "is gone from" if i >= len(new) else "differs in"
    res.violations.append(f"{lp}: entry {i} ({kind}) as committed in {sha[:12]} ({date}) {what} {where}: "
                          "a committed entry was rewritten (the chain may only grow)")


__all__ = ["GitHistory", "HeadCheck", "check_git_history", "check_shared_head", "entry_summary", "parse_head"]
