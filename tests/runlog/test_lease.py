"""The writer lease: a fresh note of another host holds a run even where the OS lock does not
reach; an expired one is taken over; ``wait_s`` waits for it; the heartbeat advances; a writer
whose lease was taken writes nothing more (fencing)."""

from __future__ import annotations

import json
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from paths import ROOT

from prereg_kit.runlog import WRITER_NOTE, RunBusyError, RunLock, RunLogWriter, RunMeta, read_run, run_busy, utc_now
from prereg_kit.runlog.writerlock import heartbeat_age, lease_seconds, read_note


def _note(folder: Path, host: str = "node-b", age: float = 0.0, token: str = "f" * 32, **extra) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    beat = (utc_now() - timedelta(seconds=age)).isoformat()
    note = {"pid": 4242, "host": host, "since": beat, "argv": ["trainer"], "token": token, "heartbeat": beat, **extra}
    tmp = folder / f"{WRITER_NOTE}.{token}.tmp"
    tmp.write_text(json.dumps(note) + "\n")
    tmp.replace(folder / WRITER_NOTE)  # as the writers do: a whole note or none
    return note


def _meta() -> RunMeta:
    return RunMeta(study="s", configuration="a", seed=0, plan_hash="sha256:x", started_at=utc_now())


ROW = {"iteration": 0, "tokens_rollout": 10, "tokens_continuation": 0, "tokens_discarded": 0, "seconds_step": 1.0,
       "updates": 1}


def test_a_fresh_lease_of_another_host_refuses_a_second_writer(tmp_path):
    f = tmp_path / "run"
    note = _note(f, age=5)
    with pytest.raises(RunBusyError, match=r"another writer holds this run: pid 4242 on node-b since .*heartbeat [56] s ago "
                                           r"\(lease 120 s, on another machine\); nothing was written"):
        RunLock(f).acquire()  # the OS lock is free: only the lease says no
    assert json.loads((f / WRITER_NOTE).read_text()) == note
    with pytest.raises(RunBusyError):
        RunLogWriter(f, _meta(), fsync=False)
    assert not (f / "meta.json").exists()
    busy = run_busy(f)
    assert busy is not None and "pid 4242 on node-b" in busy and "live lease of another machine" in busy


@pytest.mark.parametrize("note_kw, why", [
    ({"age": 121}, "stale writer lease of pid 4242 on node-b"),  # expired
    ({"host": socket.gethostname(), "age": 0}, "stale writer lock of pid 4242"),  # this host: the OS lock decides
    ({"heartbeat": "yesterday"}, "stale writer lock of pid 4242"),  # unreadable heartbeat: no lease
    ({"heartbeat": None}, "stale writer lock"),
])
def test_an_expired_or_local_or_unreadable_lease_is_taken_over_as_stale(tmp_path, note_kw, why):
    f = tmp_path / "run"
    _note(f, **note_kw)
    assert run_busy(f) is None
    with RunLock(f) as lock:
        assert lock.stale and why in lock.stale
        assert read_note(f)["token"] == lock.token and read_note(f)["host"] == socket.gethostname()
    assert not (f / WRITER_NOTE).exists()


def test_wait_s_waits_for_the_lease_to_expire_then_takes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PREREG_LEASE_S", "0.8")
    f = tmp_path / "run"
    _note(f, age=0)
    with pytest.raises(RunBusyError, match=r"\(waited 0 s\)|lease 1 s"):
        RunLock(f, wait_s=0.2).acquire()
    _note(f, age=0)
    t0 = time.monotonic()
    with RunLock(f, wait_s=10) as lock:
        waited = time.monotonic() - t0
        assert 0.5 < waited < 5 and "stale writer lease" in lock.stale


def test_wait_s_refuses_a_lease_that_keeps_beating(tmp_path, monkeypatch):
    monkeypatch.setenv("PREREG_LEASE_S", "0.5")
    f = tmp_path / "run"
    _note(f)
    stop = threading.Event()

    def beat():  # the other machine is alive: its heartbeat keeps moving
        while not stop.wait(0.05):
            _note(f)

    t = threading.Thread(target=beat, daemon=True)
    t.start()
    try:
        t0 = time.monotonic()
        with pytest.raises(RunBusyError, match="on node-b"):
            RunLock(f, wait_s=1.0).acquire()
        assert time.monotonic() - t0 >= 0.9
    finally:
        stop.set()
        t.join()


def test_the_heartbeat_advances_and_stops_on_release(tmp_path, monkeypatch):
    monkeypatch.setenv("PREREG_LEASE_S", "0.6")  # a beat every 0.1 s
    f = tmp_path / "run"
    lock = RunLock(f).acquire()
    first = read_note(f)
    assert set(first) >= {"pid", "host", "since", "argv", "token", "heartbeat"} and len(first["token"]) == 32
    time.sleep(0.45)
    later = read_note(f)
    assert later["heartbeat"] > first["heartbeat"] and later["token"] == first["token"]
    assert heartbeat_age(later) < 0.3
    beat = lock._beat
    lock.release()
    assert not beat.is_alive() and not (f / WRITER_NOTE).exists()
    assert beat.daemon  # never keeps the process alive


def test_a_writer_that_lost_its_lease_writes_nothing_more(tmp_path):
    f = tmp_path / "run"
    w = RunLogWriter(f, _meta(), fsync=False)
    w.log_iteration(ROW)
    size = (f / "iterations.jsonl").stat().st_size
    meta_before = (f / "meta.json").read_bytes()
    taker = _note(f, token="a" * 32, age=0)  # another machine took the run over
    with pytest.raises(RunBusyError, match=r"run: lost the run to pid 4242 on node-b .*; nothing more was written"):
        w.log_iteration({**ROW, "iteration": 1})
    with pytest.raises(RunBusyError, match="lost the run"):
        w.log_eval_rows([{"eval_index": 0, "iteration": 0, "eval_set": "t", "problem_id": "p", "tokens": 0,
                          "train_seconds": 0.0, "updates": 0, "samples": 1, "correct": 0}])
    with pytest.raises(RunBusyError, match="lost the run"):
        w.finish("complete")
    assert (f / "iterations.jsonl").stat().st_size == size and (f / "evals.jsonl").stat().st_size == 0
    assert (f / "meta.json").read_bytes() == meta_before and not (f / "iterations.parquet").exists()
    assert json.loads((f / WRITER_NOTE).read_text()) == taker  # the new holder's note is left alone
    assert len(read_run(f).iterations) == 1


def test_the_heartbeat_never_overwrites_the_note_of_the_writer_that_took_over(tmp_path, monkeypatch):
    monkeypatch.setenv("PREREG_LEASE_S", "0.6")
    f = tmp_path / "run"
    with RunLock(f) as lock:
        taker = _note(f, token="b" * 32)
        time.sleep(0.35)
        assert json.loads((f / WRITER_NOTE).read_text()) == taker
        assert lock.lost and "node-b" in lock.lost and not lock._beat.is_alive()
    assert json.loads((f / WRITER_NOTE).read_text()) == taker


def test_the_lease_length_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("PREREG_LEASE_S", "30")
    assert lease_seconds() == 30 and RunLock("x").lease_s == 30
    for bad in ("0", "-5", "soon"):
        monkeypatch.setenv("PREREG_LEASE_S", bad)
        assert lease_seconds() == 120
    monkeypatch.delenv("PREREG_LEASE_S")
    assert lease_seconds() == 120


def test_the_trainer_waits_as_the_environment_says():
    src = (ROOT / "trainer" / "loop.py").read_text()
    assert 'RunLock(spec.run_dir, wait_s=float(os.environ.get("PREREG_LEASE_WAIT_S", "0")))' in src


def test_a_seal_skips_the_note_being_renewed_but_nothing_else(tmp_path):
    from prereg_kit.chain.seal import run_files

    f = tmp_path / "run"
    f.mkdir()
    (f / "meta.json").write_text("{}")
    (f / f"{WRITER_NOTE}.{'c' * 32}.tmp").write_text("{}")  # a heartbeat between write and rename
    for near in ("writer.json.x.tmp", ".writer.json.x.tmpx", ".writer.jsonx.tmp"):
        (f / near).write_text("{}")
    assert sorted(run_files(f)) == [".writer.json.x.tmpx", ".writer.jsonx.tmp", "meta.json", "writer.json.x.tmp"]
