"""The isolated program judge for the code channels (multi-reward paper, DeepCoder-RT; App. C.4).

The paper's judge (App. C.4): "R_P = 1 iff all tests pass in a sandbox (isolated python3 -I
subprocess per test; 10 s per small test, 30 s for the mid-size test, the large-input test last
and only for programs that passed everything before it). T is the largest CPU time over the
executed tests, large input included" and "a program that times out counts as slow" (§6).

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
Modules: ``isolation`` (what the machine grants: bubblewrap, namespaces, a uid drop),
``boot`` (the trusted bootstrap that runs first in the child), ``judge`` (running a program's
tests under limits, timing and scoring them). This package re-exports their public names.
"""

from trainer.data.problems import ProgramTest, Size
from trainer.rewards.sandbox.isolation import Isolation, SandboxUnavailableError, probe_isolation
from trainer.rewards.sandbox.judge import (
    VIOLATION_EXIT,
    ProgramResult,
    Sandbox,
    SandboxLimits,
    TestResult,
    outputs_match,
    run_program,
    run_programs,
)

__all__ = [
    "Size",
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
