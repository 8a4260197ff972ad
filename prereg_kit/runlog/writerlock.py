"""One writer per run: the OS lock on ``.writer.lock`` and the lease note naming its holder.

The OS lock (``filelock``) is authoritative on one machine. It does not reach across machines on
every shared filesystem (NFS without lock support grants it to both sides), so the holder note
``.writer.json`` is also a lease: it carries the holder's ``token`` (uuid4 hex) and a
``heartbeat`` (UTC ISO time) that a daemon thread refreshes every ``lease/6`` seconds while the
lock is held. A note written by another host whose heartbeat is younger than the lease is a live
writer on another machine, even when the OS lock looks free. Fencing: the writer checks before
each append that the note still carries its token, so a writer whose lease was taken over
(it stalled past the lease, its machine was cut off) writes nothing more.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import uuid
import weakref
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from ..errors import writing
from .schema import WRITER_LOCK, WRITER_NOTE, RunBusyError, utc_now

LEASE_ENV = "PREREG_LEASE_S"


def lease_seconds() -> float:
    """The lease (seconds): ``PREREG_LEASE_S``, default 120; read when a lock is made, so a test
    or a cluster with a slow filesystem can set it."""
    try:
        v = float(os.environ.get(LEASE_ENV, "120"))
    except ValueError:
        v = 120.0
    return v if v > 0 else 120.0


LEASE_S = lease_seconds()  # the value at import; RunLock reads the environment again when made


def read_note(folder: str | Path) -> dict[str, Any] | None:
    """The holder note of a run folder, or None when there is none or it cannot be read."""
    try:
        note = json.loads((Path(folder) / WRITER_NOTE).read_text())
    except (OSError, ValueError):
        return None
    return note if isinstance(note, dict) else None


def heartbeat_age(note: dict[str, Any] | None, now: datetime | None = None) -> float | None:
    """Seconds since the note's heartbeat (None: no note, or a note without a readable heartbeat)."""
    try:
        beat = datetime.fromisoformat(str(note["heartbeat"]))  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        return None
    if beat.tzinfo is None:
        beat = beat.replace(tzinfo=timezone.utc)
    return max(0.0, ((now or utc_now()) - beat).total_seconds())


def _settled_note(folder: Path) -> dict[str, Any] | None:
    # A note that exists but does not parse is being replaced by a writer that does not rename
    # atomically (or a shared filesystem lags): look again before calling the run free.
    for _ in range(5):
        note = read_note(folder)
        if note is not None or not (folder / WRITER_NOTE).exists():
            return note
        time.sleep(0.02)
    return None


def _foreign_live(note: dict[str, Any] | None, lease: float) -> bool:
    # The OS lock is authoritative on this host; the lease speaks only for other machines.
    if note is None or note.get("host") == socket.gethostname():
        return False
    age = heartbeat_age(note)
    return age is not None and age < lease


def _describe(note: dict[str, Any] | None) -> str:
    if note is None:
        return "holder unknown"
    try:
        line = f"pid {note['pid']} on {note['host']} since {note['since']}"
    except (KeyError, TypeError):
        return "holder unknown"
    age = heartbeat_age(note)
    return line + (f", heartbeat {age:.0f} s ago" if age is not None else "")


def _write_note(folder: Path, note: dict[str, Any]) -> None:
    # A temp name of our own: two machines renaming one shared ``.tmp`` could swap halves.
    tmp = folder / f"{WRITER_NOTE}.{note['token']}.tmp"
    with writing(folder / WRITER_NOTE):
        try:
            tmp.write_text(json.dumps(note) + "\n")
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    tmp.replace(folder / WRITER_NOTE)


class RunLock:
    """The one-writer lock of a run folder (``.writer.lock``), held from :meth:`acquire` to :meth:`release`.

    A second writer gets :class:`RunBusyError` naming the holder from its note (``.writer.json``:
    pid, host, start time, command, heartbeat): at once when the OS lock is held; when only a
    fresh lease of another host holds the run, after waiting up to ``wait_s`` for it to expire.
    ``stale``: the note of an earlier holder that ended without releasing (killed or crashed, or
    another host's lease that expired) — this writer takes over and reports it.
    ``lost``: set when another writer took the lease from this one (:meth:`check` raises).
    """

    def __init__(self, folder: str | Path, wait_s: float = 0.0) -> None:
        self.folder = Path(folder)
        self.wait_s = max(0.0, float(wait_s))
        self.lease_s = lease_seconds()
        self.stale: str | None = None
        self.lost: str | None = None
        self.token: str | None = None
        self._lock: FileLock | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._note: dict[str, Any] = {}

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
        try:
            note = self._wait_for_foreign_lease()
        except BaseException:
            lock.release()
            raise
        self._lock = lock
        if note is not None:
            age = heartbeat_age(note)
            if note.get("host") != socket.gethostname() and age is not None:
                self.stale = (f"stale writer lease of {_describe(note)} (lease {self.lease_s:.0f} s): "
                              "its host stopped renewing it (killed, crashed or cut off)")
            else:
                self.stale = f"stale writer lock of {_describe(note)}: it ended without releasing (killed or crashed)"
        self.token = uuid.uuid4().hex
        self.lost = None
        now = utc_now().isoformat()
        self._note = {"pid": os.getpid(), "host": socket.gethostname(), "since": now, "argv": sys.argv[:4],
                      "token": self.token, "heartbeat": now}
        _write_note(self.folder, self._note)
        self._stop = threading.Event()
        # The thread holds only a weak reference: a lock dropped without release is collected
        # (its OS lock with it), as before leases, and its heartbeat stops.
        weakref.finalize(self, self._stop.set)
        self._beat = threading.Thread(target=_heartbeat, args=(weakref.ref(self), self._stop, self.lease_s / 6),
                                      name=f"prereg-lease {self.folder.name}", daemon=True)
        self._beat.start()
        return self

    def _wait_for_foreign_lease(self) -> dict[str, Any] | None:
        """The note left in the folder once no other host's lease is live; refuses after ``wait_s``."""
        deadline = time.monotonic() + self.wait_s
        note = _settled_note(self.folder)
        while _foreign_live(note, self.lease_s):
            left = deadline - time.monotonic()
            if left <= 0:
                waited = f" (waited {self.wait_s:.0f} s)" if self.wait_s else ""
                raise RunBusyError(f"{self.folder}: another writer holds this run: {_describe(note)} "
                                   f"(lease {self.lease_s:.0f} s, on another machine){waited}; nothing was written — "
                                   f"wait for it or stop it (PREREG_LEASE_WAIT_S waits for the lease to expire)")
            time.sleep(min(left, max(0.05, self.lease_s / 12)))
            note = _settled_note(self.folder)
        return note

    def _beat_once(self) -> bool:
        """Renew the lease; False once another writer took it (never overwrite the new holder's note)."""
        note = read_note(self.folder)
        if note is None or note.get("token") != self.token:
            self.lost = _describe(note) if note else "nobody (the note was removed)"
            return False
        self._note["heartbeat"] = utc_now().isoformat()
        try:
            _write_note(self.folder, self._note)
        except OSError:
            pass  # a filesystem hiccup: the next beat tries again, the lease spans six beats
        return True

    def check(self) -> None:
        """Fencing: raise :class:`RunBusyError` unless this lock still holds the lease."""
        if not self.held:
            return
        note = read_note(self.folder)
        if note is not None and note.get("token") == self.token:
            return
        self.lost = _describe(note) if note else "nobody (the note was removed)"
        raise RunBusyError(f"{self.folder}: lost the run to {self.lost}; nothing more was written")

    def release(self) -> None:
        if not self.held:
            return
        self._stop.set()
        if self._beat is not None and self._beat is not threading.current_thread():
            self._beat.join(timeout=5)
        self._beat = None
        note = read_note(self.folder)
        if note is None or note.get("token") == self.token:  # never remove a new holder's note
            (self.folder / WRITER_NOTE).unlink(missing_ok=True)
        assert self._lock is not None
        self._lock.release()
        self._lock = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _heartbeat(ref: "weakref.ref[RunLock]", stop: threading.Event, period: float) -> None:
    while not stop.wait(period):
        lock = ref()
        if lock is None:
            return
        if not lock._beat_once():
            return
        del lock  # hold no reference while waiting


def _holder(folder: Path) -> str:
    return _describe(read_note(folder))


def run_busy(folder: str | Path) -> str | None:
    """Who writes ``folder`` now (one line), or None when no writer holds it. A probe: it takes the
    lock and lets it go at once, so it never blocks a writer for longer than that. A fresh lease
    of another host holds the run even when the OS lock looks free (a filesystem whose locks do
    not reach across machines)."""
    folder = Path(folder)
    note = read_note(folder)
    if (folder / WRITER_LOCK).exists():
        lock = FileLock(folder / WRITER_LOCK, timeout=0)
        try:
            lock.acquire()
        except Timeout:
            return _describe(note)
        lock.release()
    if _foreign_live(note, lease_seconds()):
        return f"{_describe(note)} (a live lease of another machine)"
    return None
