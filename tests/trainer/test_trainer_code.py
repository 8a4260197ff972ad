"""Program channels in training (task = "code"): the synthetic code task, the code file layout,
tests reaching the channels, the recipe checks, and short real runs with the sandbox (additive
and TAG; a hostile infinite-loop completion scored 0). Short sandbox timeouts keep it fast."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from plans import run_plan

from trainer.config import ConfigError, RunSpec, parse_config
from trainer.data.codetask import (
    CODE_LEVEL_CAPACITY,
    code_prompt,
    expression_of,
    gold_program,
    make_code_problems,
    noisy_solution,
    write_code_task,
)
from trainer.data.problems import DataError, Problem, find_near_duplicates, load_problems
from trainer.data.synthetic import TaskError
from trainer.data.verifiers import get_verifier
from trainer.rewards.channels import extract_program, judge_programs
from trainer.rewards.sandbox import ProgramTest, Sandbox, SandboxLimits, probe_isolation

SHORT = {"small_timeout_s": 0.5, "mid_timeout_s": 0.5, "large_timeout_s": 2.0, "max_workers": 2}
LOOP = "```python\nwhile True:\n    pass\n```"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory) -> Sandbox:
    return Sandbox(SandboxLimits(small_timeout_s=0.5, mid_timeout_s=0.5, large_timeout_s=1.0, max_workers=2,
                                 scratch_root=str(tmp_path_factory.mktemp("sbx"))))


# ---------------------------------------------------------------------------------------------
# The synthetic code task
# ---------------------------------------------------------------------------------------------
def test_synthetic_code_task_is_deterministic(tmp_path):
    a, b = make_code_problems(30, seed=3), make_code_problems(30, seed=3)
    assert a == b and a != make_code_problems(30, seed=4)
    assert [p.level for p in a[:6]] == [1, 2, 3, 1, 2, 3] and len({p.prompt for p in a}) == 30
    p = a[0]
    assert p.is_code and p.answer == "" and [t.size for t in p.tests] == ["small"] * 3 + ["large"]
    assert p.solution == gold_program(expression_of(p.prompt)) and p.prompt == code_prompt(expression_of(p.prompt))
    assert len(make_code_problems(CODE_LEVEL_CAPACITY[1], levels=[1], seed=0)) == 81
    with pytest.raises(TaskError, match="only 81"):
        make_code_problems(82, levels=[1], seed=0)
    with pytest.raises(TaskError, match="subset"):
        make_code_problems(3, levels=[4], seed=0)
    # files: same problems on every write, through the real loader (code layout), disjoint sets
    tr1, ev1 = write_code_task(tmp_path / "a", n_train=40, n_eval=12, seed=5)
    tr2, ev2 = write_code_task(tmp_path / "b", n_train=40, n_eval=12, seed=5)
    assert tr1.read_text() == tr2.read_text() and ev1.read_text() == ev2.read_text()
    train, ev = load_problems(tr1), load_problems(ev1)
    assert len(train) == 40 and len(ev) == 12 and all(q.is_code and q.solution for q in train)
    assert not find_near_duplicates(list(train), list(ev)) and len(train.without_near_duplicates(ev)) == 40
    assert not {q.prompt for q in train} & {q.prompt for q in ev}


def test_gold_programs_pass_their_own_tests(sandbox):
    probs = make_code_problems(6, seed=0)  # two of each level
    rng = np.random.default_rng(0)
    texts = [p.solution for p in probs] + [noisy_solution(p.solution, rng) for p in probs[:2]]
    res = judge_programs(sandbox, texts, probs + probs[:2])
    assert [r.passed for r in res] == [True] * 6 + [False, False]
    assert all(len(r.per_test) == 4 and not r.timed_out and r.fast for r in res[:6])  # the large test ran
    assert res[6].skipped_large and not res[6].timed_out
    assert extract_program(gold_program("a*b+7")) == "f = lambda a, b: a*b+7\nprint(f(*map(int, input().split())))\n"


# ---------------------------------------------------------------------------------------------
# Tests reach the channels; the recipe checks
# ---------------------------------------------------------------------------------------------
def test_problem_tests_reach_the_channels():
    pytest.importorskip("torch")
    from trainer.core.reward_step import make_rewarder

    cfg = parse_config({"task": "code", "channels": ["program_correct", "program_fast"],
                        "aggregation": {"rule": "tag"}, "sandbox": SHORT})
    rw = make_rewarder(cfg)
    assert rw.sandbox is not None and rw.names == ["program_correct", "program_fast"]
    p, q = make_code_problems(2, seed=1)
    # correct, and slow (≈0.1-0.2 s of CPU) on the large test only
    slow = ("```python\na, b = map(int, input().split())\nfor _ in range(5 * 10**6 if a > 10**5 else 0):\n    pass\n"
            f"print({expression_of(q.prompt)})\n```")
    # the same text on two problems: judged against each problem's own tests
    texts = [p.solution, p.solution, LOOP, "no program", q.solution, p.solution, slow, "```python\nprint(0)\n```"]
    res = rw(get_verifier("default"), texts, [20] * 8, [p] * 4 + [q] * 4, 4, rng=np.random.default_rng(0))
    assert res.rewards.tolist() == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.5, 0.0]
    assert res.log["channel/program_correct"] == pytest.approx(4 / 8)
    assert res.log["program/timeout_rate"] == pytest.approx(1 / 8) and res.log["program/judged"] == 7
    assert res.log["program/start_errors"] == 0 and res.log["program/seconds"] > 0


def test_code_recipe_checks_and_default_reward():
    pytest.importorskip("torch")
    from trainer.core.evaluate import eval_channels
    from trainer.core.program_judge import sandbox_limits
    from trainer.core.reward_step import make_rewarder

    bad = [({"task": "code", "channels": ["correct"]}, "math verifier"),
           ({"task": "code", "channels": ["program_correct", "negative"]}, "math verifier"),
           ({"task": "code", "credit": "monte_carlo"}, "credit.rule = 'outcome'"),
           ({"task": "code", "selection": "dynamic"}, "dynamic"),
           ({"channels": ["program_fast"]}, "needs task.name = 'code'"),
           ({"task": "code", "task_levels": [4]}, "levels"),
           ({"task": "code", "sandbox": {"small_timeout_s": 0}}, "sandbox.small_timeout_s")]
    for data, msg in bad:
        with pytest.raises(ConfigError) as e:
            parse_config(data)
        assert len(e.value.lines) == 1 and msg in e.value.lines[0], (data, e.value.lines)
    cfg = parse_config({"task": "code", "sandbox": SHORT})
    rw = make_rewarder(cfg)  # no channels: program_correct alone, eq. 1 on R_P
    assert rw.names == ["program_correct"] and rw.agg.rule == "primary" and rw.multi
    lim = sandbox_limits(cfg.rewards.sandbox)
    assert (lim.small_timeout_s, lim.large_timeout_s, lim.max_workers, lim.memory_bytes) == (0.5, 2.0, 2, 1 << 30)
    assert [c.name for c in eval_channels(cfg)] == ["program_fast"]
    cfg2 = parse_config({"task": "code", "channels": ["program_correct", {"name": "program_fast", "threshold_s": 0.003},
                                                      {"name": "brief", "threshold": 50}]})
    assert [(c.name, getattr(c, "threshold_s", None)) for c in eval_channels(cfg2)] == [
        ("program_fast", 0.003), ("brief", None)]
    assert parse_config({}).rewards.sandbox.small_timeout_s == 10.0 and parse_config({}).task.name == "synthetic"


# ---------------------------------------------------------------------------------------------
# The file task (real data): JSONL / Parquet in the code layout
# ---------------------------------------------------------------------------------------------
def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


ROWS = [
    {"id": "add", "prompt": "Print a+b.", "level": 2, "solution": "a, b = map(int, input().split())\nprint(a + b)",
     "tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "expected": "10", "size": "mid"},
               {"input": "1000000 2\n", "output": "1000002\n", "size": "large"}]},
    {"prompt": "Print the input.", "tests": json.dumps([{"input": "x\n", "output": "x\n", "testtype": "stdin"}])},
]


def test_file_task_loads_a_tiny_jsonl(tmp_path, sandbox):
    pool = load_problems(_jsonl(tmp_path / "code.jsonl", ROWS))
    p, q = pool
    assert p.id == "add" and p.level == 2 and p.answer == "" and q.id == "code:2" and q.solution is None
    assert p.tests == (ProgramTest("1 2\n", "3\n"), ProgramTest("5 5\n", "10", "mid"),
                       ProgramTest("1000000 2\n", "1000002\n", "large"))
    assert q.tests == (ProgramTest("x\n", "x\n"),)  # tests given as JSON text
    assert p.solution.startswith("```python\n")  # a bare reference program is fenced for the extractor
    assert [r.passed for r in judge_programs(sandbox, [p.solution, p.solution], [p, q])] == [True, False]
    assert len(pool.with_tests()) == 2 and len(pool.numeric_only()) == 0
    pd = pytest.importorskip("pandas")
    pd.DataFrame([{**ROWS[0], "tests": json.dumps(ROWS[0]["tests"])}]).to_parquet(tmp_path / "code.parquet")
    assert load_problems(tmp_path / "code.parquet")[0].tests == p.tests
    bad = [({"prompt": "x", "tests": []}, "non-empty list"),
           ({"prompt": "x", "tests": [{"input": "1"}]}, "needs 'input' and 'output'"),
           ({"prompt": "x", "tests": [{"input": "1", "output": "1", "size": "huge"}]}, "size 'huge'"),
           ({"prompt": "x", "tests": [{"input": "1", "output": "1", "testtype": "functional"}]}, "only stdin"),
           ({"prompt": "x", "tests": "[oops"}, "not valid JSON")]
    for rec, msg in bad:
        with pytest.raises(DataError, match=re.escape(msg)):
            load_problems(_jsonl(tmp_path / "bad.jsonl", [rec]))
    # a code run reads the file task and code evaluation sets; a math set in a code run is refused
    from trainer.core.evaluate import load_eval_sets

    (tmp_path / "math.jsonl").write_text(json.dumps({"problem": "1+1?", "solution": "\\boxed{2}"}) + "\n")
    cfg = parse_config({"task": "code", "train_file": "code.jsonl"})
    base = dict(study="s", configuration="c", seed=0, plan_hash="h", study_dir=str(tmp_path), run_dir=str(tmp_path / "r"),
                cache_dir=str(tmp_path / "cache"), budget_tokens=100, eval_interval=50, config=cfg)
    sets = load_eval_sets(RunSpec(**base, eval_sets=[{"name": "held", "source": "code.jsonl"}]), None)
    assert [x.tests for x in sets[0].problems] == [x.tests for x in pool]
    with pytest.raises(ConfigError, match="problem 'm:1' is math"):
        load_eval_sets(RunSpec(**base, eval_sets=[{"name": "m", "source": "math.jsonl"}]), None)


def test_problem_stays_backward_compatible():
    p = Problem("p", "Compute 1+1.", "2", 1, "s", "1+1=2.")
    assert p.tests == () and not p.is_code and p.numeric_answer == 2.0


# ---------------------------------------------------------------------------------------------
# Short real runs
# ---------------------------------------------------------------------------------------------
PLAN = run_plan(
    id="tinycode", title="Tiny code test", question="Do the program channels train?",
    comparator="additive", treatment="tag", task="code", task_levels="[1, 2]", task_train_problems=100,
    warm_steps=20, completion_limit=64, recipe="""\
channels = ["program_correct", "program_fast"]
sandbox = { small_timeout_s = 0.5, mid_timeout_s = 0.5, large_timeout_s = 1.0, max_workers = 2 }
""", configurations="""\
[configurations.additive]
overrides = { aggregation = { rule = "additive" } }
[configurations.tag]
overrides = { aggregation = { rule = "tag", lam = 1.0 } }
""", tokens=2 * 4 * 64 * 2, eval_every="B/2", samples=3, n_problems=3,
    smoke_configurations='["additive", "tag"]')


class _Injecting:
    """The run's engine, with completion 0 of a training call replaced by an infinite loop and
    completion 1 of every call by the gold program of its prompt (so groups are mixed)."""

    def __init__(self, engine):
        self.engine = engine

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, prompts, **kw):
        roll = self.engine.generate(prompts, **kw)
        expr = re.search(r"prints (\S+) on one line", prompts[1]).group(1)
        roll.texts[1] = gold_program(expr)
        if "batch_size" not in kw:  # training calls (evaluation passes its batch size)
            roll.texts[0] = LOOP
        return roll


@pytest.mark.slow  # trains the tiny model
@pytest.mark.parametrize("config", ["additive", "tag"])
def test_short_code_run_logs_channels_and_survives_a_hostile_program(tmp_path_factory, config, monkeypatch):
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import trainer.loop as loop
    from prereg_kit.runlog import read_run
    from trainer.launch import plan_jobs

    cache = tmp_path_factory.getbasetemp() / "codecache"  # shared: one warm start for both runs
    cache.mkdir(exist_ok=True)
    study = tmp_path_factory.mktemp("study")
    (study / "plan.toml").write_text(PLAN)
    (study / ".cache").symlink_to(cache, target_is_directory=True)
    seen: list = []
    real_rewards = loop.iteration_rewards

    def spy(r, it, problems, roll):
        out = real_rewards(r, it, problems, roll)
        seen.append((out[0].tolist(), dict(r.reward_log)))
        return out

    monkeypatch.setattr(loop, "iteration_rewards", spy)
    monkeypatch.setattr(loop, "make_engine", lambda policy, _real=loop.make_engine: _Injecting(_real(policy)))
    _, jobs = plan_jobs(study, "smoke", [config], [0])
    threads = torch.get_num_threads()
    try:
        loop.train(jobs[0].spec)
    finally:
        torch.set_num_threads(threads)
    run = read_run(jobs[0].spec.run_dir, strict=True)
    it, ev = run.iterations, run.evals
    assert not run.problems and run.meta.status == "complete" and 2 <= len(it) <= 3
    # the judge's isolation is recorded (a smoke run may go on with weak isolation)
    lim = SandboxLimits()
    assert run.meta.model_extra["judge_isolation"] == probe_isolation(lim.python, lim.drop_uid, lim.network, lim.bwrap).mode
    for col in ("channel/program_correct", "channel/program_fast", "shaped_reward", "program/seconds",
                "program/timeout_rate"):
        assert col in it.columns and it[col].notna().all(), col
    # the hostile completion: a timeout, scored 0; the gold one scored 1 (both rules: R_P = R_A = 1)
    assert [rw[0] for rw, _ in seen] == [0.0] * len(it) and [rw[1] for rw, _ in seen] == [1.0] * len(it)
    assert (it["program/timeout_rate"] >= 1 / 8).all()
    # the judge's time is part of the credit stage
    assert (it["seconds_credit"] >= it["program/seconds"]).all()
    # evaluation: correct = programs passing every test; the fast rate as ch_ columns
    assert {"ch_program_fast", "ch_correct_program_fast"} <= set(ev.columns)
    assert (ev["ch_correct_program_fast"] <= ev["correct"]).all() and (ev["correct"] == ev["correct_strict"]).all()
    first = ev[ev["problem_id"] == ev["problem_id"].iloc[0]]
    assert (first["correct"] >= 1).all() and (first["boxed"] >= 1).all()  # the injected gold sample
