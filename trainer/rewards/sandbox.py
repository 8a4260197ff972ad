"""Program sandbox for the code channels (multi-reward paper, DeepCoder-RT; P2:L35, L113).

The paper's judge (P2:L113): "R_P = 1 iff all tests pass in a sandbox (isolated python3 -I
subprocess per test; 10 s per small test, 30 s for the mid-size test, the large-input test last
and only for programs that passed everything before it). T is the largest CPU time over the
executed tests, large input included" and "a program that times out counts as slow" (P2:L35).

What one test run is here (``docs/multi-reward.md`` lists what this machine enforces):

* a fresh ``python3 -I`` process (isolated mode: no env vars, no user site, no cwd on sys.path)
  inside an OS sandbox where the machine grants one (isolation mode ``"bwrap"``): bubblewrap
  with new mount, PID, network, IPC, UTS and user namespaces, a read-only root holding only the
  interpreter (``/usr``, its prefix, stdlib and site-packages), a fresh ``/proc``, a minimal
  ``/dev``, and private size-capped tmpfs on ``/tmp``, ``/dev/shm`` and the scratch folder's
  path (its cwd); no host folder is writable or needs to be reachable by the sandbox uid; when
  the trainer runs as root, bubblewrap itself runs under an unprivileged uid/gid
  (``SandboxLimits.drop_uid`` + slot) so RLIMIT_NPROC bites;
* without bubblewrap (or user namespaces) the weaker modes of ``probe_isolation``: ``unshare -n
  -p -f`` (network and PID namespaces, the host filesystem visible under the dropped uid), a
  plain uid drop, or nothing but rlimits. ``Isolation.os_sandbox`` says which; the trainer
  refuses main-stage code rewards without it unless the recipe allows weak isolation;
* the program gets its test's input on stdin and nothing else: the expected output never
  leaves this process (``outputs_match`` compares here), and no task file, study folder or
  trainer folder is inside the OS sandbox;
* a small trusted bootstrap (``_BOOT``) that reads the program from an inherited descriptor,
  sets RLIMIT_CPU / AS / NPROC / FSIZE / NOFILE / CORE, installs an audit hook
  (``sys.addaudithook``) that ends the process (exit 86) on any attempt to open or change a path
  outside the scratch folder (reads of the interpreter's own library are allowed), list a folder
  outside it, create a socket, start a process (fork, exec, spawn, system, subprocess), send a
  signal, walk the heap (gc.get_objects/referrers), or import ctypes/_posixsubprocess/
  multiprocessing/socket, and only then runs the program as ``__main__``;
* cwd = a fresh scratch folder (bwrap: a tmpfs at its path), removed afterwards; stdin/stdout/
  stderr are files (RLIMIT_FSIZE caps the output, so a program printing forever fails with
  EFBIG, not the trainer's memory);
* its own session (``start_new_session``): at the end, timeout or not, the namespace init and
  then the whole process group are SIGKILLed before the leader is reaped;
* CPU time from the child's rusage (``os.wait4``, user + system, the whole tree); T is, by
  default (``cpu_basis="program"``), that minus the interpreter's start-up (measured in the
  child before the program's first line) minus the sandbox's fixed overhead (calibrated on the
  empty program): the paper's no-op channel 1[T < 3 ms] needs T without start-up.

The audit hook is a second, in-process layer: it binds what it calls when it is installed (a
program that rebinds ``builtins.isinstance`` or ``posixpath`` functions does not change it), but
a determined program can still get past it (e.g. a path object that answers differently on
each call); the OS layers are the boundary. No torch, no global mutable state: the machine
probe is a cached pure function.
"""

from __future__ import annotations

import functools
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
from dataclasses import dataclass, field
from typing import Literal, Sequence

__all__ = [
    "Isolation",
    "ProgramResult",
    "ProgramTest",
    "Sandbox",
    "SandboxLimits",
    "SandboxUnavailableError",
    "TestResult",
    "VIOLATION_EXIT",
    "outputs_match",
    "probe_isolation",
    "run_program",
    "run_programs",
]

Size = Literal["small", "mid", "large"]
Status = Literal["ok", "wrong", "error", "timeout", "killed"]
Mode = Literal["bwrap", "ns-root", "ns-user", "uid", "plain"]

VIOLATION_EXIT = 86  # exit code of a program the audit hook stopped
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_NOBODY = 65534  # the uid inside bubblewrap when the trainer is root and drops no uid


class SandboxUnavailableError(RuntimeError):
    """The isolation the limits require (``network="require"``) is not available here."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-test limits. Timeouts are the paper's (P2:L113); the rest are ours (not stated)."""

    small_timeout_s: float = 10.0  # paper: 10 s per small test
    mid_timeout_s: float = 30.0  # paper: 30 s for the mid-size test
    large_timeout_s: float = 30.0  # not stated in the paper; we use the mid-size value
    cpu_limit_s: float | None = None  # RLIMIT_CPU; None: the test's timeout, rounded up
    memory_bytes: int = 1 << 30  # RLIMIT_AS
    max_processes: int = 32  # RLIMIT_NPROC (tasks, threads included, of the sandbox uid)
    file_size_bytes: int = 16 << 20  # RLIMIT_FSIZE: any file the program writes, stdout included
    open_files: int = 64  # RLIMIT_NOFILE
    tmpfs_bytes: int = 64 << 20  # bwrap: size of each private tmpfs (/tmp, /dev/shm)
    fast_threshold_s: float = 0.060  # Correct & fast: 1[T < 60 ms] (P2:L35); no-op: 0.003
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
class ProgramTest:
    """One stdin/stdout test. ``size`` picks the timeout; "large" runs last, only after a pass.

    Only ``input`` reaches the program (on stdin); ``expected`` stays in the judge's process."""

    input: str
    expected: str
    size: Size = "small"


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

    ``fast`` is 1[T < threshold] with a timeout counting as slow (P2:L35); it does not require
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


@dataclass(frozen=True)
class Isolation:
    """What the OS layer gives on this machine for one interpreter (see ``probe_isolation``).

    ``mode``: "bwrap" (bubblewrap: mount, PID, network, IPC, UTS and user namespaces, a minimal
    read-only root; the only OS sandbox), then the weak modes: "ns-root" (root: ``unshare -n -p
    -f`` and a uid drop), "ns-user" (not root: ``unshare -r -n -p -f`` in a user namespace),
    "uid" (root, no unshare: a plain uid drop), "plain" (nothing but rlimits, the group kill and
    the audit hook). In the weak modes the program sees the host's filesystem.
    """

    python: str
    mode: Mode
    unshare: str | None
    network_isolated: bool
    pid_namespace: bool  # everything the program started dies with it, zombies included
    uid: int | None  # the first uid programs run as (one per concurrent slot from here), if dropped
    nproc_enforced: bool  # RLIMIT_NPROC bites (not for root: the kernel exempts it)
    notes: tuple[str, ...] = field(default=())
    bwrap: str | None = None  # "bwrap": the bubblewrap binary
    binds: tuple[str, ...] = ()  # "bwrap": host folders bound read-only at the same path
    links: tuple[tuple[str, str], ...] = ()  # "bwrap": (target, path) top-level symlinks (/bin -> usr/bin)
    bwrap_options: tuple[str, ...] = ()  # "bwrap": optional options this version has (--size, --disable-userns)
    shell: str = "/bin/sh"  # the namespace's PID 1 ("bwrap": the host's /bin/sh resolved, inside a bind)

    @property
    def os_sandbox(self) -> bool:
        """True when the program's filesystem view is a minimal sandbox (mode "bwrap")."""
        return self.mode == "bwrap"

    def visible(self, path: str) -> bool:
        """Whether the host ``path`` is readable inside the sandbox's filesystem view: under a
        read-only bind in mode "bwrap"; everything is visible in the weak modes."""
        if not self.os_sandbox:
            return True
        rp = os.path.realpath(path)
        return any(rp == b or rp.startswith(b.rstrip(os.sep) + os.sep) for b in self.binds)

    def prefix(self, uid: int | None, scratch: str | None = None, tmpfs_bytes: int = 64 << 20) -> list[str]:
        """The command before ``python -I``.

        A network + PID namespace whose init is ``sh``, so that the program is an ordinary
        process (the kernel drops default-action signals such as SIGXCPU sent to a namespace
        init), and its exit status (128+signal for a signal) is passed on. "bwrap": inside
        bubblewrap, with a private tmpfs at ``scratch`` (the same path as the host's scratch
        folder, which stays outside) as its cwd; "ns-*": ``unshare``. When PID 1 dies, the
        kernel kills and reaps everything left in the namespace.
        """
        if self.mode == "bwrap":
            return self._bwrap_argv(uid, scratch, tmpfs_bytes)
        if self.mode == "ns-root":
            ids = ["-S", str(uid), "-G", str(uid)] if uid is not None else []
            return [self.unshare, "-n", "-p", "-f", "--kill-child", *ids, "/bin/sh", "-c", _SH]
        if self.mode == "ns-user":
            return [self.unshare, "-r", "-n", "-p", "-f", "--kill-child", "/bin/sh", "-c", _SH]
        return []

    def _bwrap_argv(self, uid: int | None, scratch: str | None, tmpfs_bytes: int) -> list[str]:
        # --die-with-parent: if the trainer dies mid-test, the sandbox dies with it.
        # --as-pid-1 with sh as PID 1 (as for "ns-*"): bubblewrap's own reaper is not reaped by
        # its outer process, so the program's CPU time would never reach wait4.
        argv = [self.bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
                "--as-pid-1", "--hostname", "sandbox"]
        if "--disable-userns" in self.bwrap_options:  # no nested user namespaces (less kernel surface)
            argv.append("--disable-userns")
        if uid is None and os.geteuid() == 0:  # root without a uid drop: not root inside
            argv += ["--uid", str(_NOBODY), "--gid", str(_NOBODY)]
        for b in self.binds:
            argv += ["--ro-bind", b, b]
        for target, path in self.links:
            argv += ["--symlink", target, path]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        # Writable: private tmpfs only (size-capped, gone when the sandbox ends): /tmp, /dev/shm
        # and the scratch folder's path. No host folder is bound writable, and none needs to be
        # reachable by the dropped uid.
        for tmp in dict.fromkeys(("/tmp", "/dev/shm", scratch or "/tmp")):
            if "--size" in self.bwrap_options:
                argv += ["--size", str(tmpfs_bytes)]
            argv += ["--tmpfs", tmp]
        argv += ["--remount-ro", "/dev", "--chdir", scratch or "/tmp"]
        return [*argv, "--remount-ro", "/", "--", self.shell, "-c", _SH]


_SH = '"$0" "$@"; exit $?'  # not a bare exec: sh must stay PID 1 of the namespace


# ---------------------------------------------------------------------------------------------
# The bootstrap: trusted code that runs first in the child, then execs the program.
# argv[1] is a JSON object of limits and paths (see Sandbox._argv).
# ---------------------------------------------------------------------------------------------
_BOOT = r'''
import os, sys, json, resource
def _boot():
    p = json.loads(sys.argv[1])
    with os.fdopen(p["src_fd"], "rb") as f:
        src = f.read()
    sys.argv = ["<program>"]
    R = resource
    lim = [(R.RLIMIT_CPU, (p["cpu"], p["cpu"] + 1)), (R.RLIMIT_AS, (p["as"], p["as"])),
           (R.RLIMIT_FSIZE, (p["fsize"], p["fsize"])), (R.RLIMIT_NOFILE, (p["nofile"], p["nofile"])),
           (R.RLIMIT_CORE, (0, 0))]
    if p["nproc"] is not None:
        lim.append((R.RLIMIT_NPROC, (p["nproc"], p["nproc"])))
    for what, val in lim:
        R.setrlimit(what, val)
    if p["guard"]:
        _guard(p["scratch"], tuple(p["read_roots"]))
    ru = R.getrusage(R.RUSAGE_SELF)
    os.write(p["rep_fd"], repr(ru.ru_utime + ru.ru_stime).encode())
    os.close(p["rep_fd"])
    return compile(src, "<program>", "exec")

def _private_realpath():
    # posixpath.realpath with private globals: a copy of posixpath's functions whose builtins,
    # os and stat are frozen as they are now, so the program cannot rebind what it calls.
    import builtins, posixpath, stat, types
    g = dict(vars(posixpath))
    g["__builtins__"] = dict(vars(builtins))
    g["os"] = types.SimpleNamespace(**vars(os))
    g["stat"] = types.SimpleNamespace(**vars(stat))
    for k, v in list(g.items()):
        if type(v) is types.FunctionType:
            f = types.FunctionType(v.__code__, g, v.__name__, v.__defaults__, v.__closure__)
            f.__kwdefaults__ = v.__kwdefaults__
            g[k] = f
    return g["realpath"]

def _guard(scratch, read_roots):
    # Everything the hook calls is bound here, at install time: rebinding builtins.isinstance,
    # os.fsdecode or posixpath functions later does not change what the hook sees.
    _isinstance, _type, _hasattr, _Exception = isinstance, type, hasattr, Exception
    _str, _bytes, _int = str, bytes, int
    _as_str, _startswith, _partition, _decode = str.__str__, str.startswith, str.partition, bytes.decode
    _str_repr, _int_repr = str.__repr__, int.__repr__
    _fspath, _write, _exit = os.fspath, os.write, os._exit
    _enc = sys.getfilesystemencoding()
    _real = _private_realpath()
    W = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    def text(a):  # an exact str for a path argument (str/bytes subclasses copied, not asked)
        if not _isinstance(a, (_str, _bytes)):
            a = _fspath(a)
        return _as_str(a) if _isinstance(a, _str) else _decode(a, _enc, "surrogateescape")
    def roots_of(roots):
        return tuple((r, r if r.endswith("/") else r + "/") for r in roots)
    def inside(path, roots):
        if _isinstance(path, _int):
            return True  # an already open descriptor (0, 1, 2 or one it opened legally)
        try:
            rp = _real(text(path))
        except _Exception:
            return False
        for r, rs in roots:
            if rp == r or _startswith(rp, rs):
                return True
        return False
    def shown(a):  # the blocked argument, without calling the program's own __repr__
        if _isinstance(a, (_str, _bytes)):
            return _str_repr(text(a))
        if _isinstance(a, _int):
            return _int_repr(a)
        return "<" + _as_str(_type(a).__name__) + ">"
    def stop(event, args):
        msg = "sandbox: blocked %s (%s)\n" % (event, ", ".join(shown(a) for a in args[:2]))
        _write(2, msg[:500].encode("utf-8", "replace"))
        _exit(86)
    W_EVENTS = {"os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.symlink", "os.link",
                "os.chmod", "os.chown", "os.utime", "os.truncate", "os.chdir", "os.chflags",
                "os.lchflags", "os.setxattr", "os.removexattr", "shutil.rmtree"}
    R_EVENTS = {"os.listdir", "os.scandir", "os.getxattr", "os.listxattr", "glob.glob"}
    DENY = {"os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
            "os.kill", "os.killpg", "os.startfile", "subprocess.Popen", "pty.spawn",
            "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.remote_exec"}
    DENY_PREFIX = ("socket.", "ctypes.", "_ctypes", "winreg.")
    # gc itself stays importable (gc.disable() is a common speed idiom); its object walks do not.
    DENY_MOD = {"ctypes", "_ctypes", "_posixsubprocess", "multiprocessing", "_multiprocessing",
                "_xxsubinterpreters", "_interpreters", "cffi", "_socket", "socket", "ssl", "_ssl", "pty"}
    scratch = roots_of((_real(scratch),))
    allowed_read = scratch + roots_of(("/dev/null", "/dev/urandom") + read_roots)
    def pathy(a):
        return _isinstance(a, (_str, _bytes)) or _hasattr(_type(a), "__fspath__")
    def hook(event, args):
        if event == "open":
            path, flags = args[0], args[2]
            if _isinstance(flags, _int) and flags & W:
                if not inside(path, scratch):
                    stop(event, args)
            elif not inside(path, allowed_read):
                stop(event, args)
        elif event == "import":
            if _partition(_as_str(args[0]), ".")[0] in DENY_MOD:
                stop(event, args)
        elif event in DENY or _startswith(event, DENY_PREFIX):
            stop(event, args)
        elif event in W_EVENTS:
            for a in args[:2]:
                if pathy(a) and not inside(a, scratch):
                    stop(event, args)
        elif event in R_EVENTS:
            a = args[0] if args else "."
            if pathy(a) and not inside(a, allowed_read):
                stop(event, args)
    sys.addaudithook(hook)

_code = _boot()
_main = type(sys)("__main__")  # a clean __main__: the program sees none of the bootstrap's names
_main.__builtins__ = __builtins__
sys.modules["__main__"] = _main
exec(_code, _main.__dict__)
'''


def _interpreter_roots(python: str) -> list[str]:
    """Folders the program may read: the interpreter's own library (sys.path, prefix)."""
    out = subprocess.run(
        [python, "-I", "-c", "import sys,json;print(json.dumps([p for p in sys.path if p]"
         "+[sys.prefix,sys.base_prefix,sys.exec_prefix]))"],
        capture_output=True, text=True, timeout=30, env={"PATH": _SAFE_PATH}, check=True,
    )
    roots = {os.path.realpath(p) for p in json.loads(out.stdout)}
    return sorted(r for r in roots if r not in ("/", ""))


_TOP_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def _interpreter_binds(exe: str, shell: str) -> tuple[list[str], list[tuple[str, str]]]:
    """What the OS sandbox's root holds: ``/usr``, the interpreter's folder, prefixes, standard
    library and site-packages, the folder of ``shell`` (the namespace's PID 1) (read-only
    binds, outermost only), and the top-level library
    folders (as the host's symlinks, e.g. ``/lib -> usr/lib``, or binds). Folders that ``.pth``
    files add (editable installs of projects) are left out: ``-S`` skips them."""
    code = ("import sys,site,json;print(json.dumps(sys.path+site.getsitepackages()"
            "+[sys.prefix,sys.base_prefix,sys.exec_prefix,sys.base_exec_prefix]))")
    out = subprocess.run([exe, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30,
                         env={"PATH": _SAFE_PATH}, check=True)
    paths = [*json.loads(out.stdout), "/usr", os.path.dirname(exe), os.path.dirname(os.path.realpath(exe)),
             os.path.dirname(shell)]
    links: list[tuple[str, str]] = []
    for top in _TOP_LINKS:
        if os.path.islink(top):
            links.append((os.readlink(top), top))
        elif os.path.isdir(top):
            paths.append(top)
    # a zip on sys.path (python311.zip) is bound through its folder when it exists
    real = {os.path.realpath(p) for p in paths if p}
    dirs = sorted(r for r in real if os.path.isdir(r) and r != "/")
    outer = [d for d in dirs if not any(d != o and d.startswith(o.rstrip(os.sep) + os.sep) for o in dirs)]
    return outer, links


def _bwrap_options(bwrap: str) -> tuple[str, ...]:
    """The optional bubblewrap options this binary has (``--size``: 0.7; ``--disable-userns``: 0.8)."""
    try:
        r = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30, env={"PATH": _SAFE_PATH})
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(o for o in ("--size", "--disable-userns") if o in r.stdout + r.stderr)


def _host_folders() -> list[str]:
    """Host folders that must stay outside the OS sandbox: the trainer's cwd and temp dir."""
    try:
        cwd = [os.getcwd()]
    except OSError:  # a removed cwd holds nothing
        cwd = []
    return [os.path.realpath(p) for p in (*cwd, tempfile.gettempdir())]


@functools.lru_cache(maxsize=16)
def probe_isolation(python: str = "python3", drop_uid: int | None = 61337,
                    network: str = "auto", bwrap: str | None = "bwrap") -> Isolation:
    """Find the strongest isolation this machine grants, by trying it (cached per arguments).

    Order: "bwrap" (root: under ``drop_uid``, then without), "ns-root" (root and ``drop_uid``),
    "ns-root" without the uid drop, "ns-user" (not root), "uid", "plain". A candidate counts
    when ``python -I`` starts under it and reports the expected uid; "bwrap" also needs its
    read-only binds to leave out the trainer's cwd and temp dir. Why a stronger candidate was
    passed over is in ``notes``. ``network="require"`` raises when no network namespace is
    available; ``network="off"`` tries no namespace (and so no bubblewrap).
    """
    exe = python if os.path.isabs(python) else shutil.which(python, path=_SAFE_PATH)
    if exe is None:
        raise SandboxUnavailableError(f"sandbox: interpreter {python!r} not found on {_SAFE_PATH}")
    root = os.geteuid() == 0
    unshare = shutil.which("unshare", path=_SAFE_PATH)
    bw = None if bwrap is None else (bwrap if os.path.isabs(bwrap) else shutil.which(bwrap, path=_SAFE_PATH))
    shell = os.path.realpath("/bin/sh")  # bwrap: the real file, so its folder is what gets bound
    notes: list[str] = []
    cands: list[tuple[str, int | None]] = []
    binds: list[str] = []
    links: list[tuple[str, str]] = []
    options: tuple[str, ...] = ()
    if network == "off":
        notes.append("network = 'off': no namespaces tried (no OS sandbox)")
    elif bwrap is None:
        notes.append("bubblewrap not tried (SandboxLimits.bwrap = None)")
    elif bw is None or not os.access(bw, os.X_OK):
        notes.append(f"bubblewrap {bwrap!r} not found on {_SAFE_PATH} (Debian/Ubuntu: apt-get install bubblewrap)")
    elif not os.path.exists("/bin/sh"):
        notes.append("no /bin/sh for the sandbox's PID 1: bubblewrap not used")
    else:
        binds, links = _interpreter_binds(exe, shell)
        exposed = [(b, h) for h in _host_folders() for b in binds if h == b or h.startswith(b.rstrip(os.sep) + os.sep)]
        if exposed:
            notes.append(f"bubblewrap not used: the interpreter's folder {exposed[0][0]} holds the trainer's "
                         f"folder {exposed[0][1]}")
        else:
            options = _bwrap_options(bw)
            if "--size" not in options:
                notes.append("bubblewrap without --size: /tmp and /dev/shm tmpfs not size-capped")
            if root and drop_uid is not None:
                cands.append(("bwrap", drop_uid))
            cands.append(("bwrap", None))
    if network != "off" and unshare and os.path.exists("/bin/sh"):
        if root and drop_uid is not None:
            cands.append(("ns-root", drop_uid))
        cands.append(("ns-root", None) if root else ("ns-user", None))
    elif network != "off":
        notes.append("no unshare binary or /bin/sh: no network or PID namespace")
    if root and drop_uid is not None:
        cands.append(("uid", drop_uid))
    cands.append(("plain", None))
    for mode, uid in cands:
        ns = mode.startswith("ns-") or mode == "bwrap"
        iso = Isolation(exe, mode, unshare, ns, ns, uid, uid is not None or not root,  # type: ignore[arg-type]
                        bwrap=bw if mode == "bwrap" else None, binds=tuple(binds) if mode == "bwrap" else (),
                        links=tuple(links) if mode == "bwrap" else (), bwrap_options=options if mode == "bwrap" else (),
                        shell=shell if mode == "bwrap" else "/bin/sh")
        why = _try(iso)
        if why:
            notes.append(f"unavailable: {mode}{f' as uid {uid}' if uid is not None else ''}: {why}")
            continue
        if not ns:
            if network == "require":
                raise SandboxUnavailableError("sandbox: network isolation required but unavailable")
            notes.append("network NOT isolated: sockets are stopped by the in-process audit hook "
                         "only; no PID namespace: orphans are killed with the process group")
        if mode != "bwrap":
            notes.append("no OS sandbox: the program sees the host's filesystem (world-readable files, "
                         "host Unix sockets, /tmp and /dev/shm) as its uid; the audit hook is the only guard")
        if not iso.nproc_enforced:
            notes.append("root without a uid drop: RLIMIT_NPROC does not bite; forks are stopped "
                         "by the audit hook and bounded by the timeout and the group kill")
        return Isolation(exe, mode, unshare, ns, ns, uid, iso.nproc_enforced, tuple(notes),  # type: ignore[arg-type]
                         iso.bwrap, iso.binds, iso.links, iso.bwrap_options, iso.shell)
    raise SandboxUnavailableError(f"sandbox: cannot start {exe} at all")


def _popen_ids(iso: Isolation, uid: int | None) -> dict:
    """A uid drop done by Popen itself (modes "uid" and "bwrap": no unshare to do it)."""
    if iso.mode in ("uid", "bwrap") and uid is not None:
        return {"user": uid, "group": uid, "extra_groups": []}
    return {}


def _try(iso: Isolation) -> str:
    """Why ``python -I`` cannot run under ``iso`` as its uid ("" when it can)."""
    argv = [*iso.prefix(iso.uid), iso.python, "-I", "-c", "import os;print(os.getuid())"]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd="/",
                           env={"PATH": _SAFE_PATH}, **_popen_ids(iso, iso.uid))
    except (OSError, subprocess.SubprocessError) as e:
        return str(e)
    if r.returncode != 0:
        return (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:200]
    want = iso.uid if iso.uid is not None else (_NOBODY if iso.mode == "bwrap" and os.geteuid() == 0 else None)
    if want is not None and r.stdout.strip() != str(want):
        return f"runs as uid {r.stdout.strip()!r}, not {want}"
    return ""


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
