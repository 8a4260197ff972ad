"""The program sandbox (trainer/rewards/sandbox/): judging, limits, and hostile programs.

Short timeouts (1-2 s) keep the file fast. OS-layer checks (network namespace, uid drop,
RLIMIT_NPROC) assert only what ``probe_isolation`` says this machine grants.
"""

from __future__ import annotations

import os
import time

import pytest

from trainer.rewards.sandbox import (
    VIOLATION_EXIT,
    ProgramTest,
    Sandbox,
    SandboxLimits,
    outputs_match,
    probe_isolation,
    run_program,
)

FAIL = {"wrong", "error", "timeout", "killed"}
ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
TESTS = [ProgramTest("3 4\n", "7\n"), ProgramTest("10 -2\n", "8")]


@pytest.fixture(scope="module")
def scratch_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("sbx"))


def limits(root: str, **kw) -> SandboxLimits:
    base = dict(small_timeout_s=1.0, mid_timeout_s=1.5, large_timeout_s=2.0, memory_bytes=256 << 20,
                max_processes=16, file_size_bytes=1 << 20, scratch_root=root, max_workers=2)
    base.update(kw)
    return SandboxLimits(**base)


@pytest.fixture(scope="module")
def sb(scratch_root):
    return Sandbox(limits(scratch_root))


@pytest.fixture(scope="module")
def sb_os(scratch_root):
    """The OS layer alone: the audit hook off."""
    return Sandbox(limits(scratch_root, audit_guard=False))


@pytest.fixture(scope="module")
def sb_weak(scratch_root):
    """The fallback without an OS sandbox (bubblewrap not tried): the weak layers and the hook."""
    return Sandbox(limits(scratch_root, bwrap=None))


@pytest.fixture(scope="module")
def sb_weak_os(scratch_root):
    """Neither the OS sandbox nor the hook: what a program reaches once the hook is bypassed."""
    return Sandbox(limits(scratch_root, bwrap=None, audit_guard=False))


def survivors(root: str) -> list[str]:
    """Live (non-zombie) processes still running a program of this test session."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if root.encode() in cmd and state != "Z":
            out.append(d)
    return out


def assert_contained(sb: Sandbox, res, root: str) -> None:
    assert not res.passed and res.per_test and res.per_test[0].status in FAIL
    assert survivors(root) == []
    assert os.listdir(root) == []  # every scratch folder removed


# ---------------------------------------------------------------------------------------------
# Judging
# ---------------------------------------------------------------------------------------------
def test_outputs_match_whitespace_normalized():
    assert outputs_match("7\n", "7")
    assert outputs_match("1  2\t3 \n\n", "1 2 3")
    assert outputs_match("\n1\n2\n", "1\n2\n\n")
    assert not outputs_match("1 2", "1\n2")
    assert not outputs_match("7", "8")


def test_correct_wrong_and_error(sb, scratch_root):
    ok = sb.run_program(ADD, TESTS)
    assert ok.passed and [t.status for t in ok.per_test] == ["ok", "ok"]
    assert all(t.cpu_seconds > 0 and t.startup_cpu_seconds > 0 for t in ok.per_test)
    assert ok.max_cpu_seconds == max(t.program_cpu_seconds for t in ok.per_test)
    wrong = sb.run_program("print(7)", TESTS)
    assert not wrong.passed and [t.status for t in wrong.per_test] == ["ok", "wrong"]
    err = sb.run_program("raise SystemExit(3)", TESTS[:1])
    assert err.per_test[0].status == "error" and err.per_test[0].exit_code == 3
    syntax = sb.run_program("def (:", TESTS[:1])
    assert syntax.per_test[0].status == "error" and "SyntaxError" in syntax.per_test[0].detail
    assert os.listdir(scratch_root) == []


def test_cpu_time_and_fast_flag(sb):
    busy = "s = 0\nfor i in range(2_000_000):\n    s += i\nprint(s)\n"
    res = sb.run_program(busy, [ProgramTest("", str(sum(range(2_000_000))))])
    t = res.per_test[0]
    assert res.passed and t.cpu_seconds > 0.05 and t.program_cpu_seconds > 0.04, t
    assert not res.fast  # well above 60 ms of CPU
    quick = sb.run_program("print(1)", [ProgramTest("", "1")])
    slow_limits = Sandbox(limits(sb.limits.scratch_root, fast_threshold_s=10.0))
    assert slow_limits.run_program("print(1)", [ProgramTest("", "1")]).fast
    # T excludes interpreter start-up (cpu_basis="program"): a ratio to the busy program, not an absolute time
    assert quick.max_cpu_seconds < t.program_cpu_seconds / 2
    t = quick.per_test[0]
    assert t.cpu_seconds > t.startup_cpu_seconds > 0 and t.program_cpu_seconds == quick.max_cpu_seconds
    process = Sandbox(limits(sb.limits.scratch_root, cpu_basis="process"))
    assert process.overhead_cpu_seconds == 0.0
    whole = process.run_program("print(1)", [ProgramTest("", "1")])
    assert whole.max_cpu_seconds == whole.per_test[0].cpu_seconds > 0.005


def test_large_test_runs_last_and_only_after_a_pass(sb):
    tests = [ProgramTest("1 1", "2", "large"), ProgramTest("1 2", "3"), ProgramTest("2 2", "4", "mid")]
    res = sb.run_program(ADD, tests)
    assert res.passed and [t.size for t in res.per_test] == ["small", "mid", "large"]
    bad = sb.run_program("print(3)", tests)
    assert not bad.passed and bad.skipped_large
    assert [t.size for t in bad.per_test] == ["small", "mid"]  # large never ran
    stop = Sandbox(limits(sb.limits.scratch_root, stop_on_failure=True))
    assert len(stop.run_program("print(0)", tests).per_test) == 1


def test_files_inside_scratch_are_allowed_and_common_idioms_work(sb):
    src = ("import sys, gc, threading, resource, collections, heapq, math, itertools, bisect\n"
           "gc.disable(); sys.setrecursionlimit(10**6)\n"
           "resource.setrlimit(resource.RLIMIT_STACK, resource.getrlimit(resource.RLIMIT_STACK))\n"
           "open('f.txt', 'w').write(input())\n"
           "out = []\n"
           "t = threading.Thread(target=lambda: out.append(open('f.txt').read()))\n"
           "t.start(); t.join(); print(out[0])\n")
    res = sb.run_program(src, [ProgramTest("hello", "hello")])
    assert res.passed, res.per_test[0].detail


def test_concurrency_is_bounded_and_results_keep_order(sb):
    progs = [(f"import time\ntime.sleep(0.3)\nprint({i})", [ProgramTest("", str(i))]) for i in range(4)]
    t0 = time.monotonic()
    res = sb.run_programs(progs)
    assert [r.passed for r in res] == [True] * 4
    assert time.monotonic() - t0 >= 0.55  # 4 programs × 0.3 s on 2 workers: at least 2 rounds


def test_isolation_report_matches_results(sb):
    iso = sb.isolation
    res = sb.run_program("print(1)", [ProgramTest("", "1")])
    assert res.network_isolated == iso.network_isolated and res.uid_dropped == (iso.uid is not None)
    assert probe_isolation(sb.limits.python, sb.limits.drop_uid, sb.limits.network, sb.limits.bwrap) is iso  # cached
    if os.geteuid() == 0 and iso.uid is None:
        assert not iso.nproc_enforced


def test_run_program_convenience(scratch_root):
    assert run_program(ADD, TESTS, limits=limits(scratch_root)).passed


# ---------------------------------------------------------------------------------------------
# Hostile programs, the full sandbox: each contained, scored as a failure, the trainer survives
# ---------------------------------------------------------------------------------------------
HOSTILE = {
    "fork_bomb": "import os\nwhile True:\n    os.fork()\n",
    "infinite_loop": "while True:\n    pass\n",
    "sleep_forever": "import time\ntime.sleep(1000)\n",
    "huge_allocation": "x = bytearray(10**11)\n",
    "growing_allocation": "x = []\nwhile True:\n    x.append(' ' * 10**7)\n",
    "read_etc_passwd": "print(open('/etc/passwd').read())\n",
    "read_outside_relative": "print(open('../../../../../../etc/hostname').read())\n",
    "list_root": "import os\nprint(os.listdir('/'))\n",
    "socket": "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)\n",
    "socket_via_import_trick": "s = __import__('_socket')\n",
    "write_outside": "open('/tmp/prk_sandbox_escape.txt', 'w').write('x')\n",
    "symlink_outside": "import os\nos.symlink('/etc/passwd', 'p')\nprint(open('p').read())\n",
    "subprocess": "import subprocess\nsubprocess.run(['id'])\n",
    "os_system": "import os\nos.system('id')\n",
    "background_child": "import os, time\nif os.fork() == 0:\n    time.sleep(1000)\nprint(7)\n",
    "ctypes": "import ctypes\nctypes.CDLL(None).fork()\n",
    "gc_walk": "import gc\nprint(len(gc.get_objects()))\n",
    "kill_parent": "import os\nos.kill(os.getppid(), 9)\n",
    "output_flood": "while True:\n    print('x' * 10000)\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_contained(sb, scratch_root, name):
    before = os.getpid()
    res = sb.run_program(HOSTILE[name], [ProgramTest("", "7")])
    assert os.getpid() == before  # the calling process is alive and the same
    assert_contained(sb, res, scratch_root)
    t = res.per_test[0]
    if name in ("infinite_loop", "sleep_forever"):
        assert t.status == "timeout" and not res.fast and res.timed_out
        assert t.wall_seconds < sb.limits.small_timeout_s + 1.5
    if name.startswith(("read_", "list_", "write_", "symlink", "subprocess", "os_system", "fork_bomb",
                        "background", "ctypes", "gc_walk", "kill_parent", "socket")):
        assert t.status == "error" and t.exit_code == VIOLATION_EXIT, t.detail
        assert "sandbox: blocked" in t.detail
    assert not os.path.exists("/tmp/prk_sandbox_escape.txt")


# ---------------------------------------------------------------------------------------------
# The OS layer alone (audit hook off): what the kernel enforces here
# ---------------------------------------------------------------------------------------------
def test_os_fork_bomb_bounded_and_killed(sb_os, scratch_root):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    res = sb_os.run_program(bomb, [ProgramTest("", "7")])
    assert_contained(sb_os, res, scratch_root)
    assert res.per_test[0].status in ("timeout", "error", "killed")
    if sb_os.isolation.nproc_enforced:  # RLIMIT_NPROC bites: a plain fork bomb fails fast
        raw = sb_os.run_program("import os\nwhile True:\n    os.fork()\n", [ProgramTest("", "7")])
        assert_contained(sb_os, raw, scratch_root)
        assert "BlockingIOError" in raw.per_test[0].detail or raw.per_test[0].status == "timeout"


def test_os_background_child_is_killed(sb_os, scratch_root):
    src = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(1000)\nprint(7)\n"
    res = sb_os.run_program(src, [ProgramTest("", "7")])
    if sb_os.isolation.pid_namespace:  # even a setsid() escapee dies with the namespace
        assert res.passed
        assert survivors(scratch_root) == []
    else:  # without a PID namespace only the group kill applies: use a child in the group
        src = "import os, time\nif os.fork() == 0:\n    time.sleep(1000)\nprint(7)\n"
        assert sb_os.run_program(src, [ProgramTest("", "7")]).passed
        assert survivors(scratch_root) == []


def test_os_network_unreachable(sb_os, scratch_root):
    if not sb_os.isolation.network_isolated:
        pytest.skip("no network namespace on this machine")
    src = "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)\nprint(7)\n"
    res = sb_os.run_program(src, [ProgramTest("", "7")])
    assert_contained(sb_os, res, scratch_root)
    assert "unreachable" in res.per_test[0].detail or "Errno" in res.per_test[0].detail


def test_os_uid_drop_blocks_privileged_files(sb_os, scratch_root):
    if sb_os.isolation.uid is None:
        pytest.skip("programs run as the trainer's user here")
    for src in ("print(open('/etc/shadow').read())", "open('/root/prk_escape', 'w').write('x')"):
        res = sb_os.run_program(src, [ProgramTest("", "7")])
        assert_contained(sb_os, res, scratch_root)
        # under bubblewrap the file is not in the program's view at all
        reason = "FileNotFoundError" if sb_os.isolation.os_sandbox else "PermissionError"
        assert reason in res.per_test[0].detail
    assert not os.path.exists("/root/prk_escape")


def test_os_memory_limit(sb_os, scratch_root):
    res = sb_os.run_program("x = bytearray(10**9)\nprint(7)", [ProgramTest("", "7")])
    assert_contained(sb_os, res, scratch_root)
    assert "MemoryError" in res.per_test[0].detail


def test_os_cpu_limit_counts_as_timeout(scratch_root):
    # wall timeout longer than the CPU limit: RLIMIT_CPU (1 s) must stop the loop first
    sbx = Sandbox(limits(scratch_root, small_timeout_s=5.0, cpu_limit_s=1, audit_guard=False))
    res = sbx.run_program("while True:\n    pass\n", [ProgramTest("", "7")])
    t = res.per_test[0]
    assert t.status == "timeout" and res.timed_out and not res.fast
    assert t.detail == "CPU limit 1 s" and t.wall_seconds < 4.5
    assert survivors(scratch_root) == []


def test_spawn_failure_is_a_scored_failure_not_a_crash(sb, monkeypatch):
    import trainer.rewards.sandbox.judge as mod

    def no_process(*a, **k):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(mod.subprocess, "Popen", no_process)
    res = sb.run_program("print(7)", [ProgramTest("", "7")])
    assert not res.passed and res.per_test[0].status == "error"
    assert res.per_test[0].detail.startswith("sandbox: could not start")


# ---------------------------------------------------------------------------------------------
# The OS sandbox (bubblewrap): a program that switched the audit hook off sees nothing of the host
# ---------------------------------------------------------------------------------------------
# Three lines that switched the old hook's file checks off (it called builtins.isinstance).
BYPASS = ("import builtins\n_isinstance = builtins.isinstance\n"
          "builtins.isinstance = lambda o, t: True if t is int else _isinstance(o, t)\n")


def need_os_sandbox(sbx: Sandbox) -> None:
    if not sbx.isolation.os_sandbox:
        pytest.skip("no OS sandbox here (bubblewrap missing or unusable): " + "; ".join(sbx.isolation.notes))


@pytest.fixture
def host(tmp_path):
    """What a program must not reach: a world-readable study folder in the trainer's temp dir
    holding a task file with the expected output, and host Unix sockets (a path and an abstract
    name) that record any connection."""
    import secrets
    import shutil
    import socket
    import tempfile
    import threading

    token = "PRK-SECRET-" + secrets.token_hex(8)
    study = tempfile.mkdtemp(prefix="prk-study-")  # /tmp: readable by anyone, unlike pytest's tmp_path
    os.chmod(study, 0o755)
    os.makedirs(os.path.join(study, ".cache"), mode=0o755)
    task = os.path.join(study, ".cache", "code-train.jsonl")
    with open(task, "w") as f:
        f.write('{"prompt": "p", "tests": [{"input": "", "output": "%s"}]}\n' % token)
    os.chmod(task, 0o644)
    sock_path = os.path.join(study, "judge.sock")
    servers = [socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)]
    servers[0].bind(sock_path)
    os.chmod(sock_path, 0o777)
    abstract = "\0prk-" + token
    servers[1].bind(abstract)
    hits: list[bytes] = []

    def serve(s):
        s.listen(4)
        s.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = s.accept()
            except OSError:
                continue
            hits.append(conn.recv(64) or b"(connected)")
            conn.close()

    stop = threading.Event()
    threads = [threading.Thread(target=serve, args=(s,), daemon=True) for s in servers]
    for t in threads:
        t.start()
    info = {"token": token, "study": study, "task": task, "sock": sock_path, "abstract": abstract, "hits": hits}
    yield info
    stop.set()
    for t in threads:
        t.join()
    for s in servers:
        s.close()
    shutil.rmtree(study)


# A program that prints the expected output from wherever it can read it: files in its view (the
# cwd, /tmp, /dev/shm, the trainer's folders and the study folder by their host paths, anything
# under / except the interpreter), other processes' command lines and environments, its fds.
SEARCH = BYPASS + r'''
import os, re, stat
pat = re.compile(rb"PRK-SECRET-[0-9a-f]{16}")
def scan(path, regular=True):
    try:
        if regular and not stat.S_ISREG(os.stat(path).st_mode):
            return  # FIFOs and devices would block or never end
        with open(path, "rb") as f:
            m = pat.search(f.read(1 << 20))
    except Exception:
        return
    if m:
        print(m.group().decode())
        raise SystemExit(0)
skip = ("/usr", "/proc", "/sys", "/dev")
for top in [%(extra)s, os.getcwd(), "/tmp", "/dev/shm", "/"]:
    for d, subs, files in os.walk(top):
        if d.startswith(skip) and d != "/" and not d.startswith("/dev/shm"):
            subs[:] = []
            continue
        subs[:] = [s for s in subs if not os.path.join(d, s).startswith(skip)]
        for n in files:
            scan(os.path.join(d, n))
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for what in ("cmdline", "environ"):
            scan(f"/proc/{pid}/{what}", regular=False)
for fd in os.listdir("/proc/self/fd"):
    scan(f"/proc/self/fd/{fd}")
print("nothing found")
'''


def search_program(host) -> str:
    extra = ", ".join(repr(p) for p in (host["study"], os.path.dirname(host["task"]), os.getcwd(),
                                        __import__("tempfile").gettempdir()))
    return SEARCH % {"extra": extra}


def test_bwrap_program_cannot_read_the_expected_output_anywhere(sb, sb_os, sb_weak_os, scratch_root, host):
    """The reward hack: print the expected output instead of computing it. The answer is a
    random token only the task file holds, so a pass means the program read it."""
    need_os_sandbox(sb)
    tests = [ProgramTest("", host["token"])]
    direct = BYPASS + f"print(open({host['task']!r}).read().split('output\": \"')[1][:27])\n"
    for sbx in (sb, sb_os):  # the full judge, and the OS layer alone (as if the hook were bypassed)
        for src in (direct, search_program(host)):
            res = sbx.run_program(src, tests)
            assert not res.passed, (sbx.limits.audit_guard, res.per_test[0].detail)
            assert survivors(scratch_root) == [] and os.listdir(scratch_root) == []
    # Positive control: without the OS sandbox and without the hook the same programs do find it,
    # so the failures above are the sandbox's doing, not a broken search.
    assert not sb_weak_os.isolation.os_sandbox
    assert sb_weak_os.run_program(direct, tests).passed
    assert sb_weak_os.run_program(search_program(host), tests).passed


# Probes: each prints "sealed" when the host thing is out of reach and something else when not,
# so a pass under the OS layer alone means the program ran and found nothing.
PROBES = {
    "etc_hostname": "try:\n    print(open('/etc/hostname').read())\nexcept OSError:\n    print('sealed')\n",
    "etc_passwd": "try:\n    print(open('/etc/passwd').read()[:40])\nexcept OSError:\n    print('sealed')\n",
    "study_task_file": "try:\n    print(open(%(task)r).read())\nexcept OSError:\n    print('sealed')\n",
    "study_folder": "import os\ntry:\n    print(os.listdir(%(study)r))\nexcept OSError:\n    print('sealed')\n",
    "trainer_cwd": "import os\ntry:\n    print(os.listdir(%(cwd)r))\nexcept OSError:\n    print('sealed')\n",
    "unix_socket": ("import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(%(sock)r)\n"
                    "    s.send(b'escaped'); print('connected')\nexcept OSError:\n    print('sealed')\n"),
    "abstract_socket": ("import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(%(abstract)r)\n"
                        "    s.send(b'escaped'); print('connected')\nexcept OSError:\n    print('sealed')\n"),
    "list_root": ("import os\nbad = set(os.listdir('/')) - %(top)r\n"
                  "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
                  "print('sealed' if not bad and len(pids) <= 2 else (sorted(bad), len(pids)))\n"),
    "host_network": ("import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=1)\n"
                     "    print('connected')\nexcept OSError:\n    print('sealed')\n"),
}


def allowed_top(sbx: Sandbox) -> set[str]:
    """What / may hold inside the sandbox: its mounts, the interpreter's binds, the scratch path."""
    iso = sbx.isolation
    tops = {"proc", "dev", "tmp"} | {p.split("/")[1] for p in iso.binds} | {path.split("/")[1] for _, path in iso.links}
    return tops | {os.path.realpath(sbx.limits.scratch_root).split("/")[1]}


@pytest.mark.parametrize("name", sorted(PROBES))
def test_bwrap_host_is_out_of_reach_after_the_hook_bypass(sb, sb_os, scratch_root, host, name):
    need_os_sandbox(sb_os)
    src = BYPASS + PROBES[name] % {**host, "cwd": os.getcwd(), "top": allowed_top(sb_os)}
    alone = sb_os.run_program(src, [ProgramTest("", "sealed")])  # the OS layer alone
    assert alone.passed, alone.per_test[0].detail or "the probe reached the host"
    full = sb.run_program(src, [ProgramTest("", "sealed")])  # both layers: sealed, or stopped by the hook
    t = full.per_test[0]
    assert full.passed or (t.status == "error" and t.exit_code == VIOLATION_EXIT), t.detail
    assert host["hits"] == [] and survivors(scratch_root) == [] and os.listdir(scratch_root) == []


@pytest.mark.parametrize("name", ["study_task_file", "study_folder", "unix_socket", "list_root"])
def test_probes_reach_the_host_without_the_os_sandbox(sb_weak_os, host, name):
    """Positive control for the probes above: with neither the OS sandbox nor the hook, each
    does reach the host (so "sealed" under bubblewrap is the sandbox's doing)."""
    import tempfile

    if not os.stat(tempfile.gettempdir()).st_mode & 0o001:
        pytest.skip("the temp dir is not traversable by other users here")
    src = BYPASS + PROBES[name] % {**host, "cwd": os.getcwd(), "top": allowed_top(sb_weak_os)}
    res = sb_weak_os.run_program(src, [ProgramTest("", "sealed")])
    assert not res.passed and res.per_test[0].status == "wrong", res.per_test[0].detail
    if name == "unix_socket":
        time.sleep(0.5)
        assert host["hits"] == [b"escaped"]


def test_bwrap_shm_and_tmp_writes_stay_in_the_sandbox(sb_os, scratch_root):
    """64 MiB written to /dev/shm (and /tmp) land in private size-capped tmpfs that end with
    the program: nothing reaches the host's /dev/shm or temp dir."""
    need_os_sandbox(sb_os)
    import secrets

    tag = "prk-leak-" + secrets.token_hex(6)
    src = BYPASS + f"""
import os
total = 0
for where in ("/dev/shm", "/tmp"):
    for i in range(64):
        try:
            with open(os.path.join(where, "{tag}-%d" % i), "wb") as f:
                f.write(b"x" * (1 << 20))
            total += 1 << 20
        except OSError:
            break
print("wrote" if total >= 64 << 20 else total)
"""
    res = sb_os.run_program(src, [ProgramTest("", "wrote")])
    assert res.passed, res.per_test[0].detail  # the writes happened, inside the sandbox
    for folder in ("/dev/shm", "/tmp", __import__("tempfile").gettempdir()):
        if os.path.isdir(folder):
            assert not [n for n in os.listdir(folder) if n.startswith(tag)], folder
    assert survivors(scratch_root) == [] and os.listdir(scratch_root) == []


def test_bwrap_tmpfs_is_size_capped(scratch_root):
    sbx = Sandbox(limits(scratch_root, audit_guard=False, tmpfs_bytes=4 << 20))
    need_os_sandbox(sbx)
    if "--size" not in sbx.isolation.bwrap_options:
        pytest.skip("this bubblewrap has no --size")
    src = ("import os\nn = 0\ntry:\n    for i in range(64):\n        open('/dev/shm/f%d' % i, 'wb').write(b'x' * (1 << 19))\n"
           "        n += 1\nexcept OSError as e:\n    print('full', e.errno)\n")
    res = sbx.run_program(src, [ProgramTest("", "full 28")])  # ENOSPC long before 32 MiB
    assert res.passed, res.per_test[0].detail


def test_bwrap_scratch_is_private_and_writable(sb_os, scratch_root):
    """The cwd is a private tmpfs at the scratch path: writable by the program, absent on the host."""
    need_os_sandbox(sb_os)
    src = ("import os\nopen('f.txt', 'w').write(input())\nprint(open('f.txt').read(), os.getcwd().startswith(%r))\n"
           % os.path.realpath(scratch_root))
    res = sb_os.run_program(src, [ProgramTest("hello", "hello True")])
    assert res.passed, res.per_test[0].detail
    assert res.isolation == "bwrap" and os.listdir(scratch_root) == []


def test_bwrap_kills_the_sandbox_when_the_judge_dies(scratch_root):
    """--die-with-parent: a program outlives neither its judge process nor its timeout."""
    import signal
    import subprocess
    import sys
    import textwrap

    probe = Sandbox(limits(scratch_root))
    need_os_sandbox(probe)
    script = textwrap.dedent(f"""
        from trainer.rewards.sandbox import Sandbox, SandboxLimits, ProgramTest
        sb = Sandbox(SandboxLimits(small_timeout_s=30, scratch_root={scratch_root!r}, max_workers=1, cpu_basis="process"))
        print("ready", flush=True)
        sb.run_program("import time\\ntime.sleep(1000)", [ProgramTest("", "")])
    """)
    judge = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    try:
        assert judge.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        while not survivors(scratch_root) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert survivors(scratch_root), "the program never started"
        judge.send_signal(signal.SIGKILL)
        judge.wait(timeout=30)
        deadline = time.monotonic() + 5
        while survivors(scratch_root) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert survivors(scratch_root) == []
    finally:
        judge.kill()
        judge.wait(timeout=30)  # a killed process ends; one that does not is this test's failure, not a hang
    for d in os.listdir(scratch_root):  # the killed judge could not remove its scratch folder
        __import__("shutil").rmtree(os.path.join(scratch_root, d))


# ---------------------------------------------------------------------------------------------
# The audit hook, hardened: what it calls is bound when it is installed
# ---------------------------------------------------------------------------------------------
TAMPER = {
    "isinstance": BYPASS + "print(open('/etc/hostname').read())\n",
    "posixpath": ("import os, posixpath\nposixpath._joinrealpath = lambda path, rest, strict, seen: (os.getcwd(), True)\n"
                  "posixpath.realpath = os.path.realpath = lambda p, **k: os.getcwd()\n"
                  "print(open('/etc/hostname').read())\n"),
    "os_functions": ("import os\nos.fsdecode = os.fspath = lambda p: os.getcwd()\nos.lstat = lambda p: os.stat('.')\n"
                     "print(open(b'/etc/hostname').read())\n"),
    "str_subclass_path": ("class S(str):\n    def startswith(self, *a):\n        return True\n"
                          "    def partition(self, sep):\n        return ('', sep, '')\n"
                          "print(open(S('/etc/hostname')).read())\n"),
    "str_subclass_import": ("class S(str):\n    def partition(self, sep):\n        return ('math', sep, '')\n"
                            "s = __import__(S('_socket'))\nprint('imported')\n"),
    "listdir": BYPASS + "import os\nprint(os.listdir('/etc'))\n",
}


@pytest.mark.parametrize("name", sorted(TAMPER))
def test_hook_survives_tampering(sb_weak, scratch_root, name):
    """Without the OS sandbox (the weak fallback) the hook is the only file guard: tampering
    with builtins, os, posixpath or str methods must not switch it off."""
    res = sb_weak.run_program(TAMPER[name], [ProgramTest("", "x")])
    t = res.per_test[0]
    assert t.status == "error" and t.exit_code == VIOLATION_EXIT and "sandbox: blocked" in t.detail, t.detail
    assert survivors(scratch_root) == [] and os.listdir(scratch_root) == []


# ---------------------------------------------------------------------------------------------
# Without an OS sandbox: the probe says so, and the weak layers still contain what they did
# ---------------------------------------------------------------------------------------------
def test_probe_reports_why_there_is_no_os_sandbox(scratch_root):
    missing = Sandbox(limits(scratch_root, bwrap="/nonexistent/bwrap"))
    iso = missing.isolation
    assert iso.mode != "bwrap" and not iso.os_sandbox and iso.bwrap is None and iso.binds == ()
    assert any("bubblewrap '/nonexistent/bwrap' not found" in n for n in iso.notes)
    assert any("no OS sandbox" in n for n in iso.notes)
    assert iso.visible("/etc/hostname")  # weak: the host's files are in the program's view
    res = missing.run_program(ADD, TESTS)
    assert res.passed and res.isolation == iso.mode
    off = probe_isolation(missing.limits.python, missing.limits.drop_uid, "off", "bwrap")
    assert off.mode in ("uid", "plain") and any("network = 'off'" in n for n in off.notes)
    assert any("not tried" in n for n in probe_isolation("python3", 61337, "auto", None).notes)


def test_probe_refuses_bwrap_when_the_interpreter_folder_holds_the_trainer(monkeypatch):
    import trainer.rewards.sandbox.isolation as mod

    monkeypatch.setattr(mod, "_host_folders", lambda: ["/usr/lib/prk-trainer"])
    iso = mod.probe_isolation.__wrapped__("python3", 61337, "auto", "bwrap")  # not the cached result
    assert iso.mode != "bwrap" and any("holds the trainer's folder /usr/lib/prk-trainer" in n for n in iso.notes)


def test_bwrap_view_is_the_interpreter_only(sb):
    need_os_sandbox(sb)
    iso = sb.isolation
    assert iso.visible(iso.python) and iso.visible(os.__file__.replace(os.path.dirname(os.__file__), "/usr/lib"))
    assert not iso.visible(os.getcwd()) and not iso.visible("/etc/hostname") and not iso.visible("/tmp/x")
    assert all(not b.startswith(("/tmp", "/etc", "/home", "/root", "/work")) for b in iso.binds)


WEAK_HOSTILE = ["fork_bomb", "infinite_loop", "read_etc_passwd", "socket", "background_child", "output_flood",
                "write_outside"]


@pytest.mark.parametrize("name", WEAK_HOSTILE)
def test_weak_fallback_still_contains_hostile_programs(sb_weak, scratch_root, name):
    assert not sb_weak.isolation.os_sandbox
    res = sb_weak.run_program(HOSTILE[name], [ProgramTest("", "7")])
    assert_contained(sb_weak, res, scratch_root)
    assert not os.path.exists("/tmp/prk_sandbox_escape.txt")
