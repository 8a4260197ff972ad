"""What isolation this machine grants the program judge: bubblewrap with its namespaces, ``unshare``,
a uid drop, or rlimits alone (``probe_isolation``, a cached pure function), and the command
prefix that puts a test process inside it."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from typing import Literal

Mode = Literal["bwrap", "ns-root", "ns-user", "uid", "plain"]

_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_NOBODY = 65534  # the uid inside bubblewrap when the trainer is root and drops no uid


class SandboxUnavailableError(RuntimeError):
    """The isolation the limits require (``network="require"``) is not available here."""



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

