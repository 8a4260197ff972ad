"""One writer per run: the OS lock on ``.writer.lock`` and the note naming its holder."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

from filelock import FileLock, Timeout

from .folder import _atomic_write_bytes
from .schema import RunBusyError, utc_now, WRITER_LOCK, WRITER_NOTE


class RunLock:
    """The one-writer lock of a run folder (``.writer.lock``), held from :meth:`acquire` to :meth:`release`.

    Not blocking: a second writer gets :class:`RunBusyError` at once, naming the holder from its
    note (``.writer.json``: pid, host, start time, command). ``stale``: the note of an earlier
    holder that ended without releasing (killed or crashed) — its OS lock died with it, so this
    writer takes over and reports it.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.stale: str | None = None
        self._lock: FileLock | None = None

    @property
    def held(self) -> bool:
        return self._lock is not None and self._lock.is_locked

    def acquire(self) -> "RunLock":
        if self.held:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(self.folder / WRITER_LOCK, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise RunBusyError(f"{self.folder}: another writer holds this run ({_holder(self.folder)}); "
                               "nothing was written — wait for it or stop it") from None
        self._lock = lock
        note = self.folder / WRITER_NOTE
        if note.exists():
            self.stale = f"stale writer lock of {_holder(self.folder)}: it ended without releasing (killed or crashed)"
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": utc_now().isoformat(), "argv": sys.argv[:4]}
        _atomic_write_bytes(note, (json.dumps(me) + "\n").encode(), fsync=False)
        return self

    def release(self) -> None:
        if not self.held:
            return
        (self.folder / WRITER_NOTE).unlink(missing_ok=True)
        assert self._lock is not None
        self._lock.release()
        self._lock = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _holder(folder: Path) -> str:
    try:
        h = json.loads((folder / WRITER_NOTE).read_text())
        return f"pid {h['pid']} on {h['host']} since {h['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"


def run_busy(folder: str | Path) -> str | None:
    """Who writes ``folder`` now (one line), or None when no writer holds it. A probe: it takes the
    lock and lets it go at once, so it never blocks a writer for longer than that."""
    folder = Path(folder)
    if not (folder / WRITER_LOCK).exists():
        return None
    lock = FileLock(folder / WRITER_LOCK, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        return _holder(folder)
    lock.release()
    return None


