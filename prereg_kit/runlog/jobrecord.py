"""Which executor job trains a run: ``executor.json`` in the run folder.

The study folder on a shared filesystem is the contract between the machine that submits a
study and the workers that train it (docs/scale-out.md). Beside the run log, each run folder
holds one small record of the executor job behind it, written by the submitter when the job is
queued and updated by the worker when an attempt starts and ends:

``executor`` (``local``, ``slurm``, ``ray``), ``job_id`` (Slurm ``12345_3``, a Ray task id, a local
pid), ``submitted_at``, ``attempts`` (how many times a worker started the run: requeues and
retries count), ``host`` and ``started_at`` of the last attempt, ``state`` (``queued``,
``running``, ``exited``), ``exit_code`` and ``result`` of the last attempt that ended.

It is bookkeeping for ``prereg status``, never evidence: the analysis reads only the run log,
the seal leaves it out (it is written again after a run ends and is sealed), and a missing or
unreadable record only means the executor is unknown.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path
from typing import Any

from ..errors import writing
from .schema import utc_now

JOB_RECORD = "executor.json"
JOB_STATES = ("queued", "running", "exited")


def read_job_record(folder: str | Path) -> dict[str, Any] | None:
    """The run's executor record, or None when there is none or it cannot be read."""
    try:
        rec = json.loads((Path(folder) / JOB_RECORD).read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def write_job_record(folder: str | Path, **fields: Any) -> dict[str, Any]:
    """Merge ``fields`` into the run's executor record and write it atomically; returns the record.

    Last writer wins: the submitter writes before the job can start, the worker after."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rec = read_job_record(folder) or {}
    rec.update(fields)
    tmp = folder / f"{JOB_RECORD}.{os.getpid()}.{threading.get_ident()}.tmp"  # two launchers never share a temp file
    with writing(folder / JOB_RECORD):
        try:
            tmp.write_bytes((json.dumps(rec, sort_keys=True) + "\n").encode())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    tmp.replace(folder / JOB_RECORD)
    return rec


def record_submitted(folder: str | Path, executor: str, job_id: str) -> dict[str, Any]:
    """The submitter queued the run as ``job_id`` of ``executor``."""
    return write_job_record(folder, executor=executor, job_id=str(job_id), submitted_at=utc_now().isoformat(),
                            state="queued", exit_code=None, result="")


def record_started(folder: str | Path, executor: str | None = None, job_id: str | None = None) -> dict[str, Any]:
    """A worker starts an attempt at the run (on this host, now); counts the attempt."""
    rec = read_job_record(folder) or {}
    extra = {k: v for k, v in (("executor", executor), ("job_id", job_id)) if v is not None}
    return write_job_record(folder, **extra, attempts=int(rec.get("attempts", 0)) + 1, host=socket.gethostname(),
                            pid=os.getpid(), started_at=utc_now().isoformat(), state="running",
                            exit_code=None, result="")


def record_exited(folder: str | Path, exit_code: int, result: str) -> dict[str, Any]:
    """The attempt ended with ``exit_code``; ``result`` is the one line the launcher reports.

    Only the attempt that started last writes its end: an earlier attempt that lost the run to a
    later one (a requeued or retried worker) leaves the later one's record alone."""
    rec = read_job_record(folder) or {}
    if rec.get("state") == "running" and (rec.get("host"), rec.get("pid")) != (socket.gethostname(), os.getpid()):
        return rec
    return write_job_record(folder, state="exited", exit_code=int(exit_code), result=str(result)[:300],
                            ended_at=utc_now().isoformat())


__all__ = ["JOB_RECORD", "JOB_STATES", "read_job_record", "record_exited", "record_started", "record_submitted",
           "write_job_record"]
