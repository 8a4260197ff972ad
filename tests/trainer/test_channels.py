"""Reward channels (trainer/rewards/channels.py): math channels by hand, program channels via the sandbox."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.rewards.channels import (
    Brief,
    Channel,
    Completion,
    Correct,
    Negative,
    ProgramFast,
    extract_program,
    get_channel,
    problem_tests,
    score_channels,
)
from trainer.rewards.sandbox import ProgramResult, ProgramTest, Sandbox, SandboxLimits, TestResult


def prog(passed: bool, t: float, timed_out: bool = False) -> ProgramResult:
    status = "timeout" if timed_out else ("ok" if passed else "wrong")
    return ProgramResult(passed=passed, per_test=[TestResult(status, t, t)], max_cpu_seconds=t, fast=False,
                         timed_out=timed_out, skipped_large=False, network_isolated=True, uid_dropped=True)


def test_correct_uses_the_verifier():
    c = get_channel("correct")
    assert c.score(r"so \boxed{\frac{1}{2}}", 10, {"answer": "0.5"}) == 1.0
    assert c.score("The answer is 12", 10, {"gold": "12"}) == 1.0
    assert get_channel("correct", verifier="strict").score("The answer is 12", 10, {"answer": "12"}) == 0.0
    assert c.score(r"\boxed{13}", 10, {"answer": "12"}) == 0.0


def test_brief_counts_tokens():
    b = get_channel("brief", threshold=200)
    assert b.score("x", 199, {}) == 1.0 and b.score("x", 200, {}) == 0.0
    assert b.score("x", list(range(5)), {}) == 1.0  # token ids: their count
    assert Brief().threshold == 200


@pytest.mark.parametrize("text,expected", [
    (r"\boxed{-3}", 1.0),
    (r"\boxed{-\frac{1}{2}}", 1.0),
    (r"\boxed{3}", 0.0),
    (r"\boxed{0}", 0.0),
    ("so x = -7", 1.0),  # default rule: last number
    ("5-3", 0.0),  # a minus after a digit is not a sign
    (r"\boxed{\text{no}}", 0.0),  # not a number
    ("no number at all", 0.0),
    ("<think>-5</think> the answer is 4", 0.0),  # the reasoning prefix is ignored
])
def test_negative_final_answer(text, expected):
    assert get_channel("negative").score(text, 10, {}) == expected


def test_negative_strict_needs_a_box():
    assert Negative(strict=True).score("so x = -7", 10, {}) == 0.0
    assert Negative(strict=True).score(r"\boxed{-7}", 10, {}) == 1.0


def test_program_channels_from_results():
    pc, pf = get_channel("program_correct"), get_channel("program_fast")
    noop = get_channel("program_fast", threshold_s=0.003)
    assert pc.score("", 0, {}, prog(True, 0.01)) == 1.0 and pc.score("", 0, {}, prog(False, 0.01)) == 0.0
    assert pf.score("", 0, {}, prog(True, 0.059)) == 1.0 and pf.score("", 0, {}, prog(True, 0.06)) == 0.0
    assert pf.score("", 0, {}, prog(False, 0.001)) == 1.0  # speed is judged alone
    assert pf.score("", 0, {}, prog(False, 0.001, timed_out=True)) == 0.0  # a timeout is slow
    assert noop.score("", 0, {}, prog(True, 0.002)) == 1.0 and noop.score("", 0, {}, prog(True, 0.004)) == 0.0
    with pytest.raises(ValueError, match="sandbox result"):
        pc.score("", 0, {})


def test_registry():
    for name in ("correct", "brief", "negative", "program_correct", "program_fast"):
        ch = get_channel(name)
        assert isinstance(ch, Channel) and ch.name == name
    with pytest.raises(ValueError, match="unknown channel 'speed'"):
        get_channel("speed")
    with pytest.raises(ValueError, match="bad parameters"):
        get_channel("brief", limit=3)


def test_score_channels_matrix():
    chans = [Correct(), Brief(threshold=5), Negative()]
    comps = [Completion(r"\boxed{-2}", 3), Completion(r"\boxed{2}", 9), r"\boxed{-2}"]
    probs = [{"answer": "-2"}, {"answer": "2"}, {"answer": "3"}]
    S = score_channels(chans, comps, probs)
    assert S.shape == (3, 3) and S.dtype == np.float64
    assert S.tolist() == [[1, 1, 1], [1, 0, 0], [0, 1, 1]]  # a bare string has 0 tokens
    with pytest.raises(ValueError, match="completions for"):
        score_channels(chans, comps, probs[:2])
    with pytest.raises(ValueError, match="program channels"):
        score_channels([get_channel("program_correct")], comps, probs)


def test_extract_program_and_tests():
    text = "Plan.\n```\nnot this\n```\n```python\nprint(1)\n```\nthen\n```text\nout\n```"
    assert extract_program(text) == "print(1)\n"
    assert extract_program("```\nprint(2)\n```") == "print(2)\n"
    assert extract_program("no code") == ""
    tests = problem_tests({"tests": [{"input": "1", "output": "2"}, ProgramTest("a", "b", "large"),
                                     {"input": "x", "expected": "y", "size": "mid"}]})
    assert [(t.input, t.expected, t.size) for t in tests] == [("1", "2", "small"), ("a", "b", "large"),
                                                              ("x", "y", "mid")]


def test_score_channels_runs_the_sandbox_once_per_completion(tmp_path):
    sb = Sandbox(SandboxLimits(small_timeout_s=2.0, memory_bytes=256 << 20, scratch_root=str(tmp_path),
                               max_workers=2, fast_threshold_s=10.0))
    problem = {"tests": [{"input": "2 3", "output": "5"}, {"input": "1 1", "output": "2", "size": "large"}]}
    comps = ["```python\na, b = map(int, input().split())\nprint(a + b)\n```",
             "```python\nprint(5)\n```",
             "```python\nimport os\nprint(open('/etc/passwd').read())\n```"]
    chans = [get_channel("program_correct"), ProgramFast(threshold_s=5.0)]
    S = score_channels(chans, comps, [problem] * 3, sandbox=sb)
    assert S[:, 0].tolist() == [1, 0, 0]
    assert S[0, 1] == 1.0  # far below 5 s of CPU
