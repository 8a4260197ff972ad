"""What git says about a file: the commit of its work tree, and whether the file is committed and clean."""

from __future__ import annotations

import subprocess
from pathlib import Path


def _git(cwd: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_status(path: str | Path) -> dict | None:
    """``{"commit", "tracked", "clean"}`` for ``path``, or None outside a git work tree.

    ``commit`` is HEAD (None before the first commit); ``tracked``: the file is in the index;
    ``clean``: tracked and no uncommitted change to it.
    """
    p = Path(path).resolve()
    if _git(p.parent, "rev-parse", "--is-inside-work-tree") != "true":
        return None
    commit = _git(p.parent, "rev-parse", "--verify", "-q", "HEAD")
    tracked = _git(p.parent, "ls-files", "--error-unmatch", "--", p.name) is not None
    changes = _git(p.parent, "status", "--porcelain", "--", p.name)
    return {"commit": commit or None, "tracked": tracked, "clean": tracked and changes == ""}
