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

- **receipts the reader keeps** (``prereg verify --receipts DIR``): RFC 3161 receipts copied
  earlier (from an exported registration, say). Each must stamp an entry still in the chain,
  unchanged; one that stamps no entry names the chain as rewritten after it was made.

The plan says which anchors it relies on (``[integrity]``, :mod:`prereg_kit.plan.integrity`);
:func:`check_declared_anchors` holds the chain to them: under ``rfc3161`` every entry has its
receipt, under ``git`` the file is committed (under ``commit = true``, every entry). With none
declared, verify says in one line what is not proven. :func:`latest_proven` names the latest
entry some outside anchor proves.

The git plan-entry anchors (the commit each plan entry records) stay in
:func:`prereg_kit.chain.lock.check_git_anchors`; ``docs/locking.md`` states what each anchor proves.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import PreregError
from .gitinfo import blob_at, path_commits, repo_path
from .integrity import in_force_all
from .lock import Chain
from .timestamp import (
    EXTRA_HINT,
    RECEIPT_SUFFIX,
    TIMESTAMPS_DIR,
    CertSource,
    TimestampError,
    receipt_name,
    stamped_digest,
    verify_receipt,
)
from .timestamp.receipt import load_certs

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




# ---------------------------------------------------------------------------------------------
# receipts the reader keeps


@dataclass
class ReaderReceipts:
    """``--receipts DIR`` against the chain: the entries the receipts prove (index → file), and
    each receipt that proves nothing of this chain (a violation naming the file)."""

    folder: Path
    proven: dict[int, str] = field(default_factory=dict)  # entry → the receipt on it (earliest name)
    violations: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "proven": {str(i): n for i, n in sorted(self.proven.items())},
                "violations": list(self.violations)}


def check_reader_receipts(chain: Chain, folder: str | Path, *,
                          trusted: CertSource | list | None = None) -> ReaderReceipts:
    """Every ``*.tsr`` in ``folder`` (any file name: the digest is read from the receipt) must
    verify and stamp an entry of ``chain``; a receipt on entry ``k`` proves entries ``0..k``
    unchanged since its TSA time. TSA roots: ``trusted``, else the ``*.pem`` files in ``folder``."""
    folder = Path(folder)
    res = ReaderReceipts(folder)
    if not folder.is_dir():
        res.problems.append(f"--receipts {folder}: no such folder")
        return res
    files = sorted(folder.glob(f"*{RECEIPT_SUFFIX}"))
    if not files:
        res.problems.append(f"--receipts {folder}: no receipts (*{RECEIPT_SUFFIX}) in it")
        return res
    kept = sorted(folder.glob("*.pem"))
    try:
        roots = load_certs(trusted if trusted is not None else kept) or None
    except TimestampError as e:  # the reader's roots cannot be read: unusable input
        res.problems.append(f"--receipts {folder}: {e}")
        return res
    except ImportError as e:
        res.problems.append(f"--receipts {folder}: receipts need the 'timestamp' extra ({e.name} is not installed): {EXTRA_HINT}")
        return res
    index = {e["hash"]: e["index"] for e in chain.entries}
    checked = 0
    for p in files:
        try:
            data = p.read_bytes()
            digest = stamped_digest(data, name=str(p))
            info = verify_receipt(data, digest, trusted=roots, name=str(p))
        except OSError as e:
            res.violations.append(f"{p}: unreadable ({e.strerror or e}): it proves nothing")
            continue
        except TimestampError as e:
            res.violations.append(str(e))
            continue
        checked += 1
        i = index.get("sha256:" + digest.hex())
        if i is None:
            res.violations.append(f"{p}: stamps {digest.hex()[:16]}… (at {info.gen_time.isoformat()}), which is no entry of "
                                  f"{chain.path}: the chain was rewritten after the receipt was made (or it is another study's)")
            continue
        res.proven.setdefault(i, p.name)
    source = "the given certificates" if trusted is not None else (
        ", ".join(p.name for p in kept) + f" in {folder}" if kept else "nothing: self-consistent only")
    if res.proven:
        top = max(res.proven)
        res.info.append(f"--receipts {folder}: {checked} of {len(files)} receipt(s) verify (TSA roots: {source}); "
                        f"entries 0–{top} unchanged since they were stamped ({res.proven[top]} on entry {top})")
    return res


# ---------------------------------------------------------------------------------------------
# the anchors the plan declares, and the latest entry an anchor proves

NOT_PROVEN = ("no outside anchor declared ([integrity] anchors in the plan): the chain proves internal consistency "
              "only; a rewrite with a rehashed chain would pass")


@dataclass
class DeclaredCheck:
    """The chain held to the anchors its plans declare (``[integrity]``)."""

    declared: list[str] = field(default_factory=list)  # every anchor some plan entry declares
    violations: list[str] = field(default_factory=list)


def _ranges(indices: list[int]) -> str:
    out, start = [], None
    for k, i in enumerate(indices):
        if start is None:
            start = i
        if k + 1 == len(indices) or indices[k + 1] != i + 1:
            out.append(str(start) if start == i else f"{start}–{i}")
            start = None
    return ", ".join(out)


def check_declared_anchors(chain: Chain, hist: GitHistory, valid_receipts: set[str]) -> DeclaredCheck:
    """Each anchor the plan in force declares, present for each entry it covers.

    ``rfc3161``: the entry's receipt ``timestamps/<64 hex>.tsr`` is among ``valid_receipts`` (the
    study's receipts that verified); one that is missing is a violation here, one that is present
    but did not verify was reported by the timestamp check (naming the file). The ``timestamps/``
    folder gone is one line. ``git``: ``plan.lock`` in a work tree and committed; with
    ``commit = true`` every entry it covers committed.
    """
    res = DeclaredCheck()
    lp, entries = chain.path, chain.entries
    folder = lp.parent / TIMESTAMPS_DIR
    stamped, committed, git = [], [], False
    for i, integrity in enumerate(in_force_all(entries)):
        for a in integrity.anchors:
            if a not in res.declared:
                res.declared.append(a)
        git |= "git" in integrity.anchors
        if integrity.stamped:
            stamped.append(i)
        if integrity.commits:
            committed.append(i)
    if stamped and not folder.is_dir():
        res.violations.append(f"{folder}: gone, though the plan declares [integrity] anchors = [\"rfc3161\"]: entries "
                              f"{_ranges(stamped)} have no receipt (a receipt is kept as each entry is written)")
    elif stamped:
        for i in stamped:
            name = receipt_name(entries[i]["hash"])
            if name not in valid_receipts and not (folder / name).exists():
                res.violations.append(f"{lp}: entry {i} ({entries[i]['kind']}, {entries[i]['time']}) has no receipt "
                                      f"{TIMESTAMPS_DIR}/{name}, though the plan in force declares [integrity] anchors = "
                                      "[\"rfc3161\"]: the receipt was deleted, or the entry was written (or rewritten) "
                                      "without its TSA")
    if git and not hist.in_repo:
        res.violations.append(f"{lp}: the plan declares [integrity] anchors = [\"git\"], but {lp.name} is not in a git "
                              "work tree: git anchors nothing")
    elif git and not hist.commits:
        res.violations.append(f"{lp}: the plan declares [integrity] anchors = [\"git\"], but {lp.name} was never "
                              "committed: git anchors nothing")
    elif committed and hist.covered < len(entries):
        late = [i for i in committed if i >= hist.covered]
        if late:
            res.violations.append(f"{lp}: entries {_ranges(late)} are not committed, though the plan declares [integrity] "
                                  "commit = true (each append commits plan.lock): commit it, and find why it was not")
    return res


def latest_proven(chain: Chain, *, hist: GitHistory | None = None, shared: HeadCheck | None = None,
                  receipts: dict[int, str] | None = None, reader: ReaderReceipts | None = None) -> dict[str, Any] | None:
    """The latest entry an outside anchor proves, with what proves it: the newest committed version
    of ``plan.lock`` (when no committed entry was rewritten), the shared head, a study receipt
    (``receipts``: entry → receipt name, each verified) or a reader's receipt. An anchor on entry
    ``k`` proves ``0..k`` (each entry's hash covers the one before). None when nothing does."""
    found: list[tuple[int, dict[str, str]]] = []
    if hist is not None and hist.commits and not hist.violations and hist.covered:
        found.append((hist.covered - 1, {"anchor": "git", "by": f"commit {hist.last_commit} ({hist.last_date})"}))
    if shared is not None and shared.entry is not None:
        found.append((shared.entry["index"], {"anchor": "head", "by": f"--head {shared.given}"}))
    for i, name in (receipts or {}).items():
        found.append((i, {"anchor": "rfc3161", "by": f"{TIMESTAMPS_DIR}/{name}"}))
    if reader is not None:
        for i, name in reader.proven.items():
            found.append((i, {"anchor": "receipts", "by": str(reader.folder / name)}))
    if not found:
        return None
    top = max(i for i, _ in found)
    return {**entry_summary(chain.entries[top]), "proven_by": [f for i, f in found if i == top]}


def proven_line(proven: dict[str, Any] | None, declared: list[str], n_entries: int) -> str:
    """The one line ``verify`` prints on what outside anchors prove."""
    if proven is None:
        return NOT_PROVEN if not declared else f"no entry is proven by an outside anchor (declared: {', '.join(declared)})"
    by = "; ".join(f"{p['anchor']}: {p['by']}" for p in proven["proven_by"])
    head = n_entries - 1
    tail = "the head" if proven["index"] == head else f"{head - proven['index']} later entr{'y' if head - proven['index'] == 1 else 'ies'} not proven"
    pre = "" if declared else "no outside anchor declared ([integrity] anchors in the plan); "
    return f"{pre}latest proven entry {proven['index']} ({proven['kind']}, {tail}) by {by}"


__all__ = ["DeclaredCheck", "GitHistory", "HeadCheck", "NOT_PROVEN", "ReaderReceipts", "check_declared_anchors",
           "check_git_history", "check_reader_receipts", "check_shared_head", "entry_summary", "latest_proven",
           "parse_head", "proven_line"]
