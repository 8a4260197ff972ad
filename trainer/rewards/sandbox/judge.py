"""Running a program's tests in the sandbox and judging them (multi-reward paper App. C.4): per-test limits,
CPU time T (calibrated start-up overhead removed), R_P = every test passed, ``fast`` = T below
the threshold, timeouts slow. Isolation is ``isolation.probe_isolation``'s; the child's first
code is ``boot._BOOT``."""

from __future__ import annotations

import json
import math
import os
import queue
import select
import shutil
import signal
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, Sequence

from trainer.data.problems import ProgramTest, Size
from trainer.rewards.sandbox.boot import _BOOT
from trainer.rewards.sandbox.isolation import _SAFE_PATH, _interpreter_roots, _popen_ids, probe_isolation

Status = Literal["ok", "wrong", "error", "timeout", "killed"]
VIOLATION_EXIT = 86  # exit code of a program the audit hook stopped


@dataclass(frozen=True)
class SandboxLimits:
    """Per-test limits. Timeouts are the paper's (App. C.4); the rest are ours (not stated)."""

    small_timeout_s: float = 10.0  # paper: 10 s per small test
    mid_timeout_s: float = 30.0  # paper: 30 s for the mid-size test
    large_timeout_s: float = 30.0  # not stated in the paper; we use the mid-size value
    cpu_limit_s: float | None = None  # RLIMIT_CPU; None: the test's timeout, rounded up
    memory_bytes: int = 1 << 30  # RLIMIT_AS
    max_processes: int = 32  # RLIMIT_NPROC (tasks, threads included, of the sandbox uid)
    file_size_bytes: int = 16 << 20  # RLIMIT_FSIZE: any file the program writes, stdout included
    open_files: int = 64  # RLIMIT_NOFILE
    tmpfs_bytes: int = 64 << 20  # bwrap: size of each private tmpfs (/tmp, /dev/shm)
    fast_threshold_s: float = 0.060  # Correct & fast: 1[T < 60 ms] (App. C.4); no-op: 0.003
    cpu_basis: Literal["process", "program"] = "program"  # T without / with interpreter start-up
    python: str = "python3"  # resolved on a fixed PATH, as the paper's "python3 -I"
    bwrap: str | None = "bwrap"  # bubblewrap, resolved on the same PATH; None: do not try it
    network: Literal["auto", "require", "off"] = "auto"  # "off": do not try any namespace
    drop_uid: int | None = 61337  # run as this uid/gid when the trainer is root (None: don't)
    audit_guard: bool = True  # the in-process guard (tests turn it off to test the OS layer)
    stop_on_failure: bool = False  # stop a program's small/mid tests at the first failure
    max_workers: int = 4  # programs judged at once by run_programs
    scratch_root: str | None = None  # where scratch folders go (default: the temp dir)

    def timeout_for(self, size: Size) -> float:
        return {"small": self.small_timeout_s, "mid": self.mid_timeout_s, "large": self.large_timeout_s}[size]



@dataclass(frozen=True)
class TestResult:
    """One executed test. ``cpu_seconds`` is the process's user+system CPU time (wait4)."""

    status: Status
    cpu_seconds: float
    wall_seconds: float
    size: Size = "small"
    exit_code: int | None = None  # None when killed by a signal
    signal: int | None = None
    startup_cpu_seconds: float = 0.0  # interpreter + bootstrap, before the program's first line
    program_cpu_seconds: float = 0.0  # cpu − start-up − the sandbox's calibrated fixed overhead
    detail: str = ""  # why it failed: a stderr tail, the blocked action, the signal

    __test__ = False  # not a pytest class


@dataclass(frozen=True)
class ProgramResult:
    """A program judged on its tests: R_P = ``passed``; T = ``max_cpu_seconds``; speed = ``fast``.

    ``fast`` is 1[T < threshold] with a timeout counting as slow (§6, App. C.4); it does not require
    correctness (the auxiliary channel is judged alone; "correct & fast" is the joint outcome).
    """

    passed: bool
    per_test: list[TestResult]
    max_cpu_seconds: float
    fast: bool
    timed_out: bool
    skipped_large: bool  # a large-input test was not run because an earlier test failed
    network_isolated: bool
    uid_dropped: bool
    isolation: str = ""  # the judge's isolation mode (Isolation.mode)



def outputs_match(actual: str, expected: str) -> bool:
    """Whitespace-normalized comparison: per line, runs of whitespace collapse to one space and
    ends are stripped; blank lines at the start and end are ignored."""

    def norm(s: str) -> list[str]:
        lines = [" ".join(ln.split()) for ln in s.splitlines()]
        while lines and not lines[-1]:
            lines.pop()
        while lines and not lines[0]:
            lines.pop(0)
        return lines

    return norm(actual) == norm(expected)


def _count_tasks(uid: int) -> int:
    """Tasks (threads included) that ``uid`` owns now: RLIMIT_NPROC counts these."""
    n = 0
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/status") as f:
                    st = f.read()
            except OSError:
                continue
            fields = dict(ln.split(":", 1) for ln in st.splitlines() if ":" in ln)
            if int(fields.get("Uid", "-1").split()[0]) == uid:
                n += int(fields.get("Threads", "1"))
    return n


def _rmtree(path: str) -> None:
    def onerror(func, p, _exc):  # a program may leave read-only folders behind
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=onerror)


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Sandbox:
    """Runs programs on tests under ``limits``; thread-safe (no preexec_fn, no shared state).

    At most ``limits.max_workers`` tests run at once, each in a slot; with a uid drop, slot i
    runs as uid ``drop_uid + i`` so that one program's RLIMIT_NPROC use never starves another's.
    """

    def __init__(self, limits: SandboxLimits | None = None):
        self.limits = limits or SandboxLimits()
        lim = self.limits
        if lim.max_workers < 1:
            raise ValueError("sandbox: max_workers must be ≥ 1")
        self.isolation = probe_isolation(lim.python, lim.drop_uid, lim.network, lim.bwrap)
        self._read_roots = tuple(_interpreter_roots(self.isolation.python))
        self._slots: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in range(lim.max_workers):
            self._slots.put(i)
        self.overhead_cpu_seconds = 0.0
        if lim.cpu_basis == "program":
            self.overhead_cpu_seconds = self._calibrate()

    def _calibrate(self, runs: int = 5) -> float:
        """CPU of the empty program beyond its measured start-up (wrapper processes, the
        interpreter's shutdown): the median of a few runs, subtracted from every test's T."""
        probe = ProgramTest("", "", "small")
        vals = sorted(t.cpu_seconds - t.startup_cpu_seconds
                      for t in (self.run_test(b"", probe) for _ in range(runs)))
        return max(0.0, vals[len(vals) // 2])

    # -- one program -------------------------------------------------------------------------
    def run_program(self, source: str, tests: Sequence[ProgramTest]) -> ProgramResult:
        """Judge ``source``: small/mid tests in order, then the large ones if all passed."""
        lim = self.limits
        first = [t for t in tests if t.size != "large"]
        large = [t for t in tests if t.size == "large"]
        results: list[TestResult] = []
        src = source.encode("utf-8", "surrogatepass")
        for t in first:
            results.append(self.run_test(src, t))
            if lim.stop_on_failure and results[-1].status != "ok":
                break
        all_ok = len(results) == len(first) and all(r.status == "ok" for r in results)
        if all_ok:
            for t in large:  # the large-input test: last, only after everything else passed
                results.append(self.run_test(src, t))
                if results[-1].status != "ok":
                    break
        passed = all_ok and len(results) == len(tests) and all(r.status == "ok" for r in results)
        cpu = [r.cpu_seconds if lim.cpu_basis == "process" else r.program_cpu_seconds for r in results]
        t_max = max(cpu, default=0.0)
        timed_out = any(r.status == "timeout" for r in results)
        return ProgramResult(
            passed=passed, per_test=results, max_cpu_seconds=t_max,
            fast=(not timed_out) and t_max < lim.fast_threshold_s, timed_out=timed_out,
            skipped_large=bool(large) and not all_ok,
            network_isolated=self.isolation.network_isolated,
            uid_dropped=self.isolation.uid is not None, isolation=self.isolation.mode,
        )

    def run_programs(self, items: Sequence[tuple[str, Sequence[ProgramTest]]]) -> list[ProgramResult]:
        """Judge many programs, at most ``limits.max_workers`` at a time, results in order."""
        with ThreadPoolExecutor(max_workers=self.limits.max_workers) as ex:
            return list(ex.map(lambda it: self.run_program(it[0], it[1]), items))

    # -- one test ----------------------------------------------------------------------------
    def run_test(self, source: bytes | str, test: ProgramTest) -> TestResult:
        """One fresh process on one test; its scratch folder is gone when this returns."""
        if isinstance(source, str):
            source = source.encode("utf-8", "surrogatepass")
        slot = self._slots.get()  # blocks while max_workers tests run
        try:
            uid = None if self.isolation.uid is None else self.isolation.uid + slot
            return self._run_in_scratch(source, test, uid)
        finally:
            self._slots.put(slot)

    def _run_in_scratch(self, source: bytes, test: ProgramTest, uid: int | None) -> TestResult:
        top = tempfile.mkdtemp(prefix="prk-sbx-", dir=self.limits.scratch_root)
        try:
            os.chmod(top, 0o711)  # traversable by the sandbox uid, not listable
            work = os.path.join(top, "work")  # bwrap: a private tmpfs at this path, nothing on the host
            if not self.isolation.os_sandbox:
                os.mkdir(work, 0o700)
                if uid is not None:
                    os.chown(work, uid, uid)
            io_dir = os.path.join(top, "io")  # the trainer's side: stdin/stdout files, the source
            os.mkdir(io_dir, 0o700)
            paths = {k: os.path.join(io_dir, k) for k in ("stdin", "stdout", "stderr", "src")}
            with open(paths["stdin"], "wb") as f:
                f.write(test.input.encode("utf-8", "surrogatepass"))
            with open(paths["src"], "wb") as f:
                f.write(source)
            return self._spawn(paths, work, test, uid)
        finally:
            _rmtree(top)

    def _nproc(self, uid: int | None) -> int | None:
        iso, lim = self.isolation, self.limits
        if not iso.nproc_enforced:
            return None
        if uid is not None:
            return lim.max_processes
        # Not root, no uid drop: the count is per user, so allow what the user already runs.
        return _count_tasks(os.getuid()) + lim.max_processes

    def _spawn(self, paths: dict[str, str], work: str, test: ProgramTest, uid: int | None) -> TestResult:
        lim, iso = self.limits, self.isolation
        timeout = lim.timeout_for(test.size)
        cpu_limit = max(1, math.ceil(timeout if lim.cpu_limit_s is None else lim.cpu_limit_s))
        src_fd = os.open(paths["src"], os.O_RDONLY)
        rep_r, rep_w = os.pipe()
        params = {
            "src_fd": src_fd, "rep_fd": rep_w, "cpu": cpu_limit,
            "as": lim.memory_bytes, "fsize": lim.file_size_bytes, "nofile": lim.open_files,
            "nproc": self._nproc(uid), "guard": lim.audit_guard, "scratch": work,
            "read_roots": list(self._read_roots),
        }
        argv = [*iso.prefix(uid, work, lim.tmpfs_bytes), iso.python, "-I", "-c", _BOOT, json.dumps(params)]
        env = {"PATH": _SAFE_PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": work, "TMPDIR": work}
        t0 = time.monotonic()
        try:
            with open(paths["stdin"], "rb") as fin, open(paths["stdout"], "wb") as fout, \
                    open(paths["stderr"], "wb") as ferr:
                proc = subprocess.Popen(argv, stdin=fin, stdout=fout, stderr=ferr, env=env,
                                        cwd=os.path.dirname(work) if iso.os_sandbox else work,
                                        pass_fds=(src_fd, rep_w), close_fds=True,
                                        start_new_session=True, **_popen_ids(iso, uid))
        except OSError as e:  # the machine could not start a process (EAGAIN, ENOMEM): a failure
            os.close(rep_r)
            return TestResult("error", 0.0, time.monotonic() - t0, size=test.size,
                              detail=f"sandbox: could not start the program: {e}")
        finally:
            os.close(src_fd)
            os.close(rep_w)
        try:
            timed_out = not _wait_exit(proc.pid, timeout)
            # A killed tree is reaped by the kernel, not by its parents, so its CPU time never
            # reaches wait4: read it from /proc first.
            tree_cpu = _tree_cpu(proc.pid) if timed_out else 0.0
            if timed_out and iso.pid_namespace:
                # Kill the namespace's init (unshare's child): the kernel then kills and reaps
                # everything in the namespace, and unshare reaps its child, so no zombie is left.
                for child in _children(proc.pid):
                    _kill(child)
                _wait_exit(proc.pid, 2.0)
            _killpg(proc.pid)  # the leader is unreaped, so its pid (= the group id) is not reused
            _, status, ru = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not reap it again
            wall = time.monotonic() - t0
            _killpg(proc.pid)  # without a PID namespace, orphans may outlive the leader
            startup = _read_float(rep_r)
        finally:
            os.close(rep_r)
        cpu = max(ru.ru_utime + ru.ru_stime, tree_cpu)  # the whole tree: unshare, sh, the program
        rc = proc.returncode
        if iso.pid_namespace and rc > 128:  # sh reports a signal as 128 + its number
            rc = -(rc - 128)
        sig = -rc if rc < 0 else None
        program_cpu = max(0.0, cpu - startup - self.overhead_cpu_seconds)
        common = dict(cpu_seconds=cpu, wall_seconds=wall, size=test.size, startup_cpu_seconds=startup,
                      program_cpu_seconds=program_cpu, exit_code=None if sig else rc, signal=sig)
        err = _read_tail(paths["stderr"], 400)
        if timed_out:
            common.update(exit_code=None, signal=int(signal.SIGKILL))
            return TestResult("timeout", detail=f"wall-clock timeout {timeout:g} s", **common)
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= cpu_limit - 0.05):
            # RLIMIT_CPU (soft: SIGXCPU, hard: SIGKILL one second later) is a timeout too
            return TestResult("timeout", detail=f"CPU limit {cpu_limit} s", **common)
        if sig is not None:
            return TestResult("killed", detail=f"signal {_signame(sig)}; {err}", **common)
        if rc != 0:
            return TestResult("error", detail=err, **common)
        ok = outputs_match(_read_head(paths["stdout"], lim.file_size_bytes), test.expected)
        return TestResult("ok" if ok else "wrong", detail="" if ok else "output differs", **common)


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _tree_cpu(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its descendants, reaped children included."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo, seen = 0.0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
        todo.extend(_children(p))
    return total


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_exit(pid: int, timeout: float) -> bool:
    """Wait until ``pid`` exits (without reaping it) or ``timeout`` passes; True if it exited."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is not None:
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            return bool(poller.poll(max(0, int(timeout * 1000))))
        finally:
            os.close(pidfd)
    deadline = time.monotonic() + timeout  # no pidfd: poll waitid without reaping
    delay = 0.002
    while True:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(0.05, delay * 2)


def _read_float(fd: int) -> float:
    os.set_blocking(fd, False)
    try:
        data = os.read(fd, 64)
    except BlockingIOError:
        return 0.0
    try:
        return float(data.decode())
    except ValueError:
        return 0.0


def _read_head(path: str, limit: int) -> str:
    with open(path, "rb") as f:
        return f.read(limit).decode("utf-8", "replace")


def _read_tail(path: str, n: int) -> str:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - n))
        return f.read().decode("utf-8", "replace").strip()


def run_program(source: str, tests: Sequence[ProgramTest], *, limits: SandboxLimits | None = None) -> ProgramResult:
    """Judge one program (see ``Sandbox.run_program``)."""
    return Sandbox(limits).run_program(source, tests)


def run_programs(items: Sequence[tuple[str, Sequence[ProgramTest]]], *,
                 limits: SandboxLimits | None = None) -> list[ProgramResult]:
    """Judge many programs with bounded concurrency (see ``Sandbox.run_programs``)."""
    return Sandbox(limits).run_programs(items)
