"""User-facing errors: one clear line each, and the exit code the CLI should use.

Exit codes follow ``prereg verify``: 0 clean, 1 violations (the input is usable but breaks the
preregistration), 2 unusable input (bad plan, unreadable lock or log). A full disk met while writing
is one line naming the file (:func:`writing`), exit 2.
"""

from __future__ import annotations

import errno
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


class PreregError(Exception):
    """An error the user can act on. ``lines`` are printed one per line, without traceback."""

    exit_code = 2

    def __init__(self, *lines: str, exit_code: int | None = None):
        self.lines = [ln for ln in lines if ln]
        if exit_code is not None:
            self.exit_code = exit_code
        super().__init__("\n".join(self.lines))


def needs_extra(what: str, package: str, extra: str) -> str:
    """The one line for an optional package that is not installed, naming the extra that brings it."""
    return f"{what} needs the {package} package, which is not installed: pip install 'prereg-kit[{extra}]'"


# Distributions whose import name is not their project name with "-" → "_".
_MODULE_OF = {"mlflow-skinny": "mlflow", "pyyaml": "yaml"}


def extra_for(module: str) -> str | None:
    """The extra of prereg-kit that brings the top-level module ``module`` (e.g. ``torch`` →
    ``train``), read from the installed package's own requirements (``pyproject.toml``'s
    optional dependencies: one source); the first extra that lists it, ``dev`` last; None when
    no extra brings it (a core dependency, or not ours)."""
    import importlib.metadata as md  # only when a module is missing
    import re

    try:
        reqs = md.requires("prereg-kit") or []
    except md.PackageNotFoundError:
        return None
    found: list[str] = []
    for req in reqs:
        name = re.match(r"[A-Za-z0-9._-]+", req)
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", req)
        if not name or not extra:
            continue
        dist = name.group(0).lower()
        if _MODULE_OF.get(dist, dist.replace("-", "_").replace(".", "_")) == module:
            found.append(extra.group(1))
    found.sort(key=lambda e: e == "dev")  # stable: declaration order, the development extra last
    return found[0] if found else None


class MissingExtraError(PreregError, ImportError):
    """An optional package that a feature needs is missing or refuses to run (exit code 2)."""


class PlanError(PreregError):
    """A plan file that does not parse or validate (exit code 2)."""


class LockError(PreregError):
    """A lock file that is missing, malformed or tampered with."""


class ViolationError(PreregError):
    """The preregistration is broken: the plan changed after locking, runs started too early."""

    exit_code = 1


# no space left; the user's quota spent (a name some platforms lack)
DISK_FULL = frozenset(c for c in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if c is not None)


class DiskFullError(PreregError):
    """A write that failed because the disk (or the user's quota) is full (exit code 2)."""


def disk_full_line(path: str | Path | None, e: OSError) -> str:
    """The one line for a full disk: the file that could not be written and the system's words."""
    where = f"writing {path}" if path else "writing a file the system did not name"
    return f"disk full {where}: {e.strerror or e} [errno {e.errno}]; free some space and run the command again"


@contextmanager
def writing(path: str | Path, note: str = "") -> Iterator[None]:
    """Turn a full disk met inside the block into :class:`DiskFullError` naming ``path`` (``note``
    appended: what was left as it was); any other error passes unchanged."""
    try:
        yield
    except OSError as e:
        if e.errno not in DISK_FULL:
            raise
        raise DiskFullError(disk_full_line(path, e) + (f" ({note})" if note else "")) from None
