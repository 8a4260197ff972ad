"""What git says about a file: the commit of its work tree, whether the file is committed and clean,
when a commit was made, which commits touched a file and what it held at each (the outside anchors
of the lock chain); and committing that one file (``[integrity] commit = true``)."""

from __future__ import annotations

import hashlib
import subprocess
from datetime import datetime
from pathlib import Path


def _git(cwd: Path, *args: str, text: bool = True) -> str | bytes | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=text, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() if text else out.stdout


def git_status(path: str | Path) -> dict | None:
    """``{"commit", "tracked", "clean", "path"}`` for ``path``, or None outside a git work tree.

    ``commit`` is HEAD (None before the first commit); ``tracked``: the file is in the index;
    ``clean``: tracked and no uncommitted change to it; ``path``: the file's path from the
    repository root (what ``git show COMMIT:PATH`` takes).
    """
    p = Path(path).resolve()
    where = repo_path(p)
    if where is None:
        return None
    commit = _git(p.parent, "rev-parse", "--verify", "-q", "HEAD")
    tracked = _git(p.parent, "ls-files", "--error-unmatch", "--", p.name) is not None
    changes = _git(p.parent, "status", "--porcelain", "--", p.name)
    return {"commit": commit or None, "tracked": tracked, "clean": tracked and changes == "", "path": where}


def repo_path(path: str | Path) -> str | None:
    """``path`` from its repository's root (what ``git show COMMIT:PATH`` takes), or None outside
    a git work tree (two git calls, where :func:`git_status` makes five)."""
    p = Path(path).resolve()
    if _git(p.parent, "rev-parse", "--is-inside-work-tree") != "true":
        return None
    return (_git(p.parent, "rev-parse", "--show-prefix") or "") + p.name


def in_work_tree(folder: str | Path) -> bool:
    return _git(Path(folder).resolve(), "rev-parse", "--is-inside-work-tree") == "true"


def commit_time(folder: str | Path, commit: str) -> datetime | None:
    """The committer date of ``commit`` in the repository around ``folder``; None if it is unknown there."""
    out = _git(Path(folder).resolve(), "show", "-s", "--format=%cI", f"{commit}^{{commit}}")
    return datetime.fromisoformat(out) if out else None


def blob_sha256(folder: str | Path, commit: str, path: str) -> str | None:
    """``sha256:<hex>`` of file ``path`` (from the repository root) as committed in ``commit``."""
    data = blob_at(folder, commit, path)
    return None if data is None else "sha256:" + hashlib.sha256(data).hexdigest()


def path_commits(path: str | Path) -> list[tuple[str, str]] | None:
    """``[(commit, committer date ISO)]`` of the commits of HEAD's history that touched file
    ``path``, oldest first (one ``git log``); None outside a work tree or before the first commit."""
    p = Path(path).resolve()
    out = _git(p.parent, "log", "--reverse", "--topo-order", "--format=%H %cI", "--", p.name)
    if out is None:
        return None
    return [tuple(line.split(" ", 1)) for line in out.splitlines() if " " in line]  # type: ignore[misc]


def blob_at(folder: str | Path, commit: str, path: str) -> bytes | None:
    """The bytes of file ``path`` (from the repository root) as committed in ``commit``."""
    data = _git(Path(folder).resolve(), "show", f"{commit}:{path}", text=False)
    return data if isinstance(data, bytes) else None


def _run(cwd: Path, *args: str, timeout: float = 60) -> tuple[int, str]:
    """``git ARGS`` in ``cwd``: (exit status, its output in one line); 127 when git cannot run."""
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, f"git could not run ({e})"
    return out.returncode, " ".join((out.stderr or out.stdout).split())


def commit_refusal(path: str | Path) -> str | None:
    """Why ``path`` could not be committed now (not in a git work tree, no committer identity),
    or None when it can."""
    p = Path(path).resolve()
    if not in_work_tree(p.parent):
        return f"{p.parent} is not in a git work tree"
    code, msg = _run(p.parent, "var", "GIT_COMMITTER_IDENT", timeout=10)
    if code:
        return f"git has no committer identity here ({msg[:200] or 'set user.name and user.email'})"
    return None


def commit_file(path: str | Path, message: str) -> tuple[str | None, str]:
    """Commit file ``path`` alone (``git add`` it, then ``git commit --only`` it: whatever else is
    staged stays staged, uncommitted). ``(commit, "")``, or ``(None, git's reason)``."""
    p = Path(path).resolve()
    code, msg = _run(p.parent, "add", "--", p.name)
    if code == 0:
        code, msg = _run(p.parent, "commit", "-q", "--only", "-m", message, "--", p.name)
    if code:
        return None, msg[:300] or f"git exited {code}"
    return _git(p.parent, "rev-parse", "HEAD"), ""
