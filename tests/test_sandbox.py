"""The program sandbox (trainer/sandbox.py): judging, limits, and hostile programs.

Short timeouts (1-2 s) keep the file fast. OS-layer checks (network namespace, uid drop,
RLIMIT_NPROC) assert only what ``probe_isolation`` says this machine grants.
"""

from __future__ import annotations

import os
import time

import pytest

from trainer.sandbox import (
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
    assert res.passed and t.cpu_seconds > 0.05 and t.program_cpu_seconds > 0.04
    assert not res.fast  # well above 60 ms of CPU
    quick = sb.run_program("print(1)", [ProgramTest("", "1")])
    slow_limits = Sandbox(limits(sb.limits.scratch_root, fast_threshold_s=10.0))
    assert slow_limits.run_program("print(1)", [ProgramTest("", "1")]).fast
    assert quick.max_cpu_seconds < 0.02  # T excludes interpreter start-up (cpu_basis="program")
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
    assert probe_isolation(sb.limits.python, sb.limits.drop_uid, sb.limits.network) is iso  # cached
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
        assert "PermissionError" in res.per_test[0].detail
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
    import trainer.sandbox as mod

    def no_process(*a, **k):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(mod.subprocess, "Popen", no_process)
    res = sb.run_program("print(7)", [ProgramTest("", "7")])
    assert not res.passed and res.per_test[0].status == "error"
    assert res.per_test[0].detail.startswith("sandbox: could not start")
