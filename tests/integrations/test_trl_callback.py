"""PreregCallback without training: TRL's arguments and the trainer's events are driven by hand
(a fake TrainerState; the evaluator replaced by one that logs fixed rows), so token counting,
the placement of evaluations, the refusals, the main-process rule and resume are checked in
seconds. A real GRPOTrainer runs in tests/integrations/test_trl_integration.py (slow)."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
from paths import ROOT

pytest.importorskip("trl")
pytest.importorskip("torch")

import torch
from transformers import TrainerControl
from trl import GRPOConfig

import prereg_kit.integrations.trl as trlmod
from prereg_kit.chain.lock import lock_plan
from prereg_kit.errors import PreregError
from prereg_kit.integrations.trl import PreregCallback, check_args
from prereg_kit.integrations.trl_rewards import (
    TokenCounter,
    VerifierReward,
    reward_functions,
)
from prereg_kit.runlog import (
    ITERATION_COLUMNS,
    read_meta,
    read_run,
)
from trainer.core.assets import Assets
from trainer.core.evaluate import EvalSet

pytestmark = pytest.mark.skipif("seconds_step" not in {c.name for c in ITERATION_COLUMNS},
                                reason="the run-log format has no unsplit seconds_step yet")
PLAN = ROOT / "examples" / "trl_grpo" / "plan.toml"  # B = 2500 tokens, evaluations every B/4 = 625


@pytest.fixture
def study(tmp_path: Path) -> Path:
    d = tmp_path / "study"
    d.mkdir()
    shutil.copy(PLAN, d / "plan.toml")
    lock_plan(d / "plan.toml")
    return d


def grpo_args(tmp_path: Path, **kw) -> GRPOConfig:
    base = {"output_dir": str(tmp_path / "out"), "per_device_train_batch_size": 16, "num_generations": 8,
            "max_completion_length": 40, "learning_rate": 1e-4, "lr_scheduler_type": "constant", "logging_steps": 1,
            "report_to": [], "use_cpu": True, "temperature": 1.0, "top_p": 1.0, "beta": 0.0}
    return GRPOConfig(**{**base, **kw})


class Evaluations:
    """Stands in for the evaluator: one row per call, with the counters it was given."""

    def __init__(self):
        self.calls: list[tuple[int, int, int]] = []

    def __call__(self, engine, policy, sets, c, spec, sandbox=None, record=None):
        self.calls.append((c.eval_index, c.iteration, c.total_tokens))
        if record is not None:  # the problem's 4 samples, 1 correct
            record("heldout", SimpleNamespace(id="p0", prompt="What is 0+1?", answer="1"), ["\\boxed{1}", "2", "7", "x"])
        return [{"eval_index": c.eval_index, "iteration": c.iteration, "eval_set": "heldout", "problem_id": "p0",
                 "eval_seed": 7, "tokens": c.total_tokens, "train_seconds": c.train_seconds, "updates": c.updates,
                 "samples": 4, "correct": 1, "correct_strict": 1, "boxed": 1}]


def make(study: Path, monkeypatch, configuration="grpo", seed=0, **kw) -> tuple:
    cb = PreregCallback(study, configuration, seed, **kw)
    cb._assets = Assets(model_path=study, train_file=None, synthetic_eval=None, model_sha256="")
    ev = Evaluations()
    monkeypatch.setattr(trlmod, "run_evaluation", ev)
    monkeypatch.setattr(trlmod, "load_eval_sets", lambda spec, path: [EvalSet("heldout", ())])
    return cb, ev


MODEL = torch.nn.Linear(1, 1)
TOK = SimpleNamespace(padding_side="right")


def state(step=0, main=True):
    return SimpleNamespace(global_step=step, is_world_process_zero=main)


def step(cb, args, st, control, lengths, logs=None, *, count=True):
    """One optimizer step that generated completions of ``lengths`` tokens, as TRL reports it."""
    cb.on_step_begin(args, st, control)
    if count:
        cb.reward_functions()[0](completions=["x"] * len(lengths), answer=["1"] * len(lengths),
                                 completion_ids=[[0] * n for n in lengths])
    st.global_step += 1
    cb.on_step_end(args, st, control)
    log = {"loss": 0.0, "num_tokens": 1000.0 * st.global_step, "completions/mean_length": sum(lengths) / len(lengths),
           "completions/clipped_ratio": 0.0, "reward": 0.5, "rewards/prereg_default/mean": 0.5,
           "frac_reward_zero_std": 0.25}
    cb.on_log(args, st, control, logs={**log, **(logs or {})}, model=MODEL)


def test_tokens_are_counted_exactly_and_cross_checked(study, tmp_path, monkeypatch):
    cb, _ = make(study, monkeypatch)
    args, st, control = grpo_args(tmp_path), state(), TrainerControl()
    cb.on_train_begin(args, st, control, model=MODEL, processing_class=TOK)
    step(cb, args, st, control, [20] * 15 + [33])
    it = read_run(cb.run_dir).iterations
    assert it["tokens_rollout"].tolist() == [333]
    assert it["length_mean"].tolist() == [333 / 16] and it["trl_num_tokens"].tolist() == [1000.0]
    assert it["mixed_share"].tolist() == [0.75] and it["updates"].tolist() == [1]
    assert it["seconds_step"].iloc[0] >= 0 and it["seconds_generation"].isna().all()
    # TRL's mean disagreeing with what the reward function saw by more than rounding: refused
    with pytest.raises(PreregError, match="the reward functions saw 16 completions and 320 tokens"):
        step(cb, args, st, control, [20] * 16, logs={"completions/mean_length": 20.1})


def test_without_a_counting_reward_the_mean_length_is_used(study, tmp_path, monkeypatch):
    cb, _ = make(study, monkeypatch)
    args, st, control = grpo_args(tmp_path), state(), TrainerControl()
    cb.on_train_begin(args, st, control, model=MODEL, processing_class=TOK)
    step(cb, args, st, control, [21] * 16, count=False, logs={"rewards/other/mean": 1.0})
    it = read_run(cb.run_dir).iterations
    assert it["tokens_rollout"].tolist() == [336]
    cb.on_train_end(args, st, control)  # stopped before B: incomplete, and the count's source is said
    assert read_meta(cb.run_dir).status == "stopped" and "mean_length" in read_meta(cb.run_dir).source["tokens"]
    assert "mixed_share" not in it or it["mixed_share"].isna().all()  # two reward functions: not 0/1


def test_evaluations_at_first_iteration_reaching_each_interval_and_stop_at_train_to(study, tmp_path, monkeypatch):
    cb, ev = make(study, monkeypatch)
    args, st, control = grpo_args(tmp_path), state(), TrainerControl()
    cb.on_train_begin(args, st, control, model=MODEL, processing_class=TOK)
    per = [300, 300, 100, 500, 700, 10, 10, 600]  # cumulative 300 600 700 1200 1900 1910 1920 2520
    for n in per:
        assert not control.should_training_stop
        step(cb, args, st, control, [n // 16] * 15 + [n - 15 * (n // 16)])
    # evaluation 0 at the start, then at 700 (≥625), 1900 (≥1250 and ≥1875), 2520 (≥2500: the last)
    assert ev.calls == [(0, 0, 0), (1, 3, 700), (2, 5, 1900), (3, 8, 2520)]
    assert control.should_training_stop and control.should_save
    cb.on_train_end(args, st, control)
    run = read_run(cb.run_dir, strict=True)
    assert read_meta(cb.run_dir).status == "complete" and read_meta(cb.run_dir).trainer == "trl"
    assert run.iterations["tokens_rollout"].tolist() == per
    assert (cb.run_dir / "seal.json").exists() or read_meta(cb.run_dir).status == "complete"


def _train_to_the_end(cb, tmp_path):
    args, st, control = grpo_args(tmp_path), state(), TrainerControl()
    cb.on_train_begin(args, st, control, model=MODEL, processing_class=TOK)
    while not control.should_training_stop:
        step(cb, args, st, control, [20] * 16)
    cb.on_train_end(args, st, control)


def _emitted(capsys, caplog) -> str:
    out = capsys.readouterr()
    return "\n".join([out.out, out.err, *(r.getMessage() for r in caplog.records)])


def test_a_main_stage_run_reports_progress_blind(study, tmp_path, monkeypatch, capsys, caplog):
    """Like the built-in trainer's progress lines in the main stage (trainer.progress_lines,
    blind): iteration, tokens and evaluations, never an accuracy, a reward or a contrast; through
    the prereg_kit logger, nothing printed."""
    caplog.set_level(logging.DEBUG, logger="prereg_kit")
    cb, ev = make(study, monkeypatch)  # the fake evaluator's rows: 1 of 4 samples correct (0.25)
    monkeypatch.setattr(trlmod, "accuracy", lambda *a, **k: pytest.fail("an accuracy computed in the main stage"))
    _train_to_the_end(cb, tmp_path)
    assert len(ev.calls) == 5 and read_meta(cb.run_dir).status == "complete"
    text = _emitted(capsys, caplog)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[:2] == ["grpo seed 0: started", "grpo seed 0: evaluation 0 at iteration 0, 0 / 2.5K tokens"]
    assert "grpo seed 0: evaluation 4 at iteration 8, 2.6K / 2.5K tokens" in lines
    assert re.fullmatch(r"grpo seed 0: complete at iteration 8, 2\.6K / 2\.5K tokens \(\d+ s\)", lines[-1])
    assert all(r.name.startswith("prereg_kit.") for r in caplog.records)
    assert not re.search(r"acc|reward|contrast|0\.25|correct", text, re.IGNORECASE), text
    assert capsys.readouterr() == ("", "")


PILOT = """
[[stages]]
name = "pilot"
configurations = ["grpo"]
seeds = [0]
"""


def test_a_pilot_run_shows_what_the_built_in_trainer_shows_there(tmp_path, monkeypatch, caplog):
    d = tmp_path / "pilot-study"
    d.mkdir()
    (d / "plan.toml").write_text(PLAN.read_text() + PILOT)
    caplog.set_level(logging.INFO, logger="prereg_kit")
    cb, _ = make(d, monkeypatch, stage="pilot")
    _train_to_the_end(cb, tmp_path)
    lines = [r.getMessage() for r in caplog.records]
    assert "grpo seed 0: evaluation 1 at iteration 2, 640 / 2.5K tokens, acc 0.250" in lines
    assert re.fullmatch(r"grpo seed 0: complete at iteration 8, 2\.6K / 2\.5K tokens, acc 0\.250 \(\d+ s\)", lines[-1])


def test_an_incomplete_run_warns_through_the_logger(study, tmp_path, monkeypatch, capsys, caplog):
    caplog.set_level(logging.INFO, logger="prereg_kit")
    cb, _ = make(study, monkeypatch)
    args, st, control = grpo_args(tmp_path), state(), TrainerControl()
    cb.on_train_begin(args, st, control, model=MODEL, processing_class=TOK)
    step(cb, args, st, control, [20] * 16)
    cb.on_train_end(args, st, control)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "the run is incomplete: resume it" in warned[0].getMessage()
    assert caplog.records[-2].getMessage().startswith("grpo seed 0: stopped at iteration 1, 320 / 2.5K tokens")
    assert capsys.readouterr() == ("", "")


def test_live_evaluation_outputs_are_kept_for_read_outputs(study, tmp_path, monkeypatch):
    """outputs=PATH: each live evaluation's completions, one line each, as rescore.read_outputs
    reads them; a resume keeps the lines of the evaluations its log keeps."""
    from prereg_kit.integrations.rescore import read_outputs

    out = tmp_path / "outputs.jsonl"
    out.write_text('{"eval_index": 0, "stale": true}\n')  # a fresh run starts the file anew
    cb, _ = make(study, monkeypatch, outputs=out)
    args, st, control = grpo_args(tmp_path), state(), TrainerControl()
    cb.on_train_begin(args, st, control, model=MODEL, processing_class=TOK)
    for _ in range(5):  # evaluations after iterations 2 and 4; then the process dies
        step(cb, args, st, control, [20] * 16)
    cb.writer.__exit__(None, None, None)
    assert [json.loads(x)["step"] for x in out.read_text().splitlines()] == [0] * 4 + [2] * 4 + [4] * 4
    cb2, _ = make(study, monkeypatch, outputs=out)
    st2, control2 = state(step=2), TrainerControl()  # TRL resumes from checkpoint-2: evaluation 2 is redone
    cb2.on_train_begin(args, st2, control2, model=MODEL, processing_class=TOK)
    assert [json.loads(x)["eval_index"] for x in out.read_text().splitlines()] == [0] * 4 + [1] * 4
    while not control2.should_training_stop:
        step(cb2, args, st2, control2, [20] * 16)
    rows = read_outputs(out, eval_set=None)
    assert rows["iteration"].tolist() == [0, 2, 4, 6, 8] and rows["problem_id"].unique().tolist() == ["p0"]
    assert rows["samples"].tolist() == [4] * 5 and rows["correct"].tolist() == [1] * 5
    with pytest.raises(PreregError, match="outputs = .* with evaluate = 'deferred'"):
        PreregCallback(study, "grpo", 0, evaluate="deferred", outputs=out)


def test_iterations_span_optimizer_steps(study, tmp_path, monkeypatch):
    """gradient_accumulation_steps = 2, steps_per_generation = 4: a generation batch spans 2 steps;
    logging at every step puts its metrics in the first log only, and the row closes at the second."""
    cb, _ = make(study, monkeypatch)
    args = grpo_args(tmp_path, per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=4)
    st, control = state(), TrainerControl()
    cb.on_train_begin(args, st, control, model=MODEL, processing_class=TOK)
    step(cb, args, st, control, [10] * 16)
    cb.on_step_begin(args, st, control)
    st.global_step += 1
    cb.on_step_end(args, st, control)
    cb.on_log(args, st, control, logs={"loss": 0.1}, model=MODEL)
    it = read_run(cb.run_dir).iterations
    assert it["tokens_rollout"].tolist() == [160] and it["updates"].tolist() == [2]


@pytest.mark.parametrize("kw, msg", [
    ({"logging_steps": 2}, "logging_steps = 2 merges or drops"),
    ({"logging_strategy": "epoch"}, "logging_strategy = 'epoch'"),
    ({"logging_steps": 0.5}, "logging_steps = 0.5"),
    ({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "steps_per_generation": 4,
      "logging_steps": 4}, "a divisor of 2"),
    ({"per_device_train_batch_size": 8, "gradient_accumulation_steps": 2, "steps_per_generation": 3,
      "num_generations": 8}, "not a multiple of gradient_accumulation_steps"),
    ({"eval_strategy": "steps", "eval_steps": 5}, "eval_strategy must be 'no'"),
    ({"num_generations": 4}, "num_generations = 4 but configuration 'grpo' preregisters rollout.group_size = 8"),
    ({"max_completion_length": 41}, "max_completion_length = 41"),
    ({"temperature": 0.9}, "temperature = 0.9"),
    ({"learning_rate": 1.0001e-4}, "learning_rate"),
    ({"per_device_train_batch_size": 24}, "rollout.prompts_per_iteration = 2"),
    ({"lr_scheduler_type": "linear"}, "lr_scheduler_type = 'linear'"),
    ({"warmup_steps": 2}, "warmup 2"),
])
def test_settings_it_cannot_account_for_are_refused(study, tmp_path, monkeypatch, kw, msg):
    cb, _ = make(study, monkeypatch)
    with pytest.raises(PreregError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        cb.on_train_begin(grpo_args(tmp_path, **kw), state(), TrainerControl(), model=MODEL, processing_class=TOK)
    assert not cb.run_dir.exists()


def test_logging_every_generation_span_is_accepted(tmp_path, study, monkeypatch):
    cb, _ = make(study, monkeypatch)
    args = grpo_args(tmp_path, per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=4,
                     logging_steps=2)
    assert check_args(args, cb.cfg, "grpo") == 2


def test_unlocked_changed_or_unnamed_runs_are_refused(tmp_path, study):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(PLAN, bare / "plan.toml")
    with pytest.raises(PreregError, match="main-stage runs need a locked plan"):
        PreregCallback(bare, "grpo", 0)
    text = (study / "plan.toml").read_text()
    (study / "plan.toml").write_text(text.replace('tokens = "2500"', 'tokens = "2600"'))
    with pytest.raises(PreregError, match="prereg amend"):
        PreregCallback(study, "grpo", 0)
    (study / "plan.toml").write_text(text)
    with pytest.raises(PreregError, match="configuration 'GRPO' is not in the stage"):
        PreregCallback(study, "GRPO", 0)
    with pytest.raises(PreregError, match=r"seed 3 is not a seed of configuration 'grpo' \(have: 0, 1, 2\)"):
        PreregCallback(study, "grpo", 3)
    with pytest.raises(PreregError, match="expected 'live' or 'deferred'"):
        PreregCallback(study, "grpo", 0, evaluate="later")


def test_a_non_main_process_writes_nothing_but_stops_with_the_main_one(study, tmp_path, monkeypatch):
    cb, ev = make(study, monkeypatch)
    args, st, control = grpo_args(tmp_path), state(main=False), TrainerControl()
    cb.on_train_begin(args, st, control, model=MODEL, processing_class=TOK)
    for _ in range(8):
        step(cb, args, st, control, [20] * 16)
    cb.on_train_end(args, st, control)
    assert control.should_training_stop and cb.counters.total_tokens == 2560
    assert ev.calls == [] and not cb.run_dir.exists()


def test_resume_truncates_to_the_checkpoint_and_continues(study, tmp_path, monkeypatch):
    cb, _ev = make(study, monkeypatch)
    args, st, control = grpo_args(tmp_path), state(), TrainerControl()
    cb.on_train_begin(args, st, control, model=MODEL, processing_class=TOK)
    for _ in range(5):  # 5 × 320 tokens: evaluations after iterations 2 (640) and 4 (1280); then a crash
        step(cb, args, st, control, [20] * 16)
    cb.writer.__exit__(None, None, None)  # the process dies: the log stays 'running'
    cb2, ev2 = make(study, monkeypatch)
    st2, control2 = state(step=2), TrainerControl()  # TRL resumes from checkpoint-2
    cb2.on_train_begin(args, st2, control2, model=MODEL, processing_class=TOK)
    assert ev2.calls == []  # evaluation 0 and the one at iteration 2 are kept
    assert (cb2.counters.iteration, cb2.counters.eval_index, cb2.counters.total_tokens) == (2, 2, 640)
    while not control2.should_training_stop:
        step(cb2, args, st2, control2, [20] * 16)
    cb2.on_train_end(args, st2, control2)
    run = read_run(cb2.run_dir, strict=True)
    assert run.iterations["iteration"].tolist() == list(range(8))
    assert sorted(run.evals["eval_index"].unique()) == [0, 1, 2, 3, 4]
    assert read_meta(cb2.run_dir).status == "complete" and len(read_meta(cb2.run_dir).resumes) == 1
    with pytest.raises(PreregError, match="already complete"):
        PreregCallback(study, "grpo", 0)


def test_reward_functions_from_a_thread_pool():
    counter = TokenCounter()
    assert VerifierReward("strict")(completions=["4", "\\boxed{4}"], answer=["4", "4"]) == [0.0, 1.0]
    fn = VerifierReward("default", counter)
    texts = [f"so \\boxed{{{i % 7}}}" for i in range(400)]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: fn(completions=[texts[i]], answer=[str(i % 7 if i % 2 else 99)],
                                         completion_ids=[[0] * 3]), range(400)))
    assert [g[0] for g in got] == [1.0 if i % 2 else 0.0 for i in range(400)]
    assert counter.take() == (1200, 400) and counter.take() == (0, 0)


def test_math_verify_reward_from_a_thread_pool():
    pytest.importorskip("math_verify")
    mv = VerifierReward("math_verify")
    with ThreadPoolExecutor(4) as pool:  # math-verify's signal timeouts refuse non-main threads
        got = list(pool.map(lambda a: mv(completions=[[{"role": "assistant", "content": "\\boxed{1/2}"}]], answer=[a]),
                            ["0.5", "1/2", "3"]))
    assert got == [[1.0], [1.0], [0.0]]


def test_reward_functions_follow_the_recipe_and_refuse_what_trl_cannot_train(study):
    assert [f.__name__ for f in reward_functions(study, "grpo")] == ["prereg_default"]
    text = (study / "plan.toml").read_text()
    (study / "plan.toml").write_text(text.replace('overrides = { learning_rate = 0.0 }',
                                                  'overrides = { learning_rate = 0.0, credit = "rloo" }'))
    with pytest.raises(PreregError, match="credit.rule = 'rloo'"):
        reward_functions(study, "frozen")
    with pytest.raises(PreregError, match="'answer' column"):
        VerifierReward()(completions=["x"], completion_ids=[[1]])


def test_module_imports_without_torch_and_names_the_extra(monkeypatch):
    code = "import sys, prereg_kit.integrations.trl; assert 'torch' not in sys.modules and 'trl' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    monkeypatch.setitem(sys.modules, "trl", None)
    with pytest.raises(PreregError, match=r"pip install 'prereg-kit\[trl\]'"):
        trlmod._build()


class SavableModel(torch.nn.Linear):
    def __init__(self):
        super().__init__(1, 1)

    def save_pretrained(self, path):
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "config.json").write_text("{}")


def test_deferred_evaluation_records_checkpoints_and_scores_them_later(study, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import prereg_kit.integrations.trl_deferred as deferred
    from prereg_kit.integrations.trl_command import app
    from trainer.core import engines, policy

    cb, ev = make(study, monkeypatch, evaluate="deferred")
    tok = SimpleNamespace(padding_side="left", save_pretrained=lambda p: None)
    args, st, control = grpo_args(tmp_path), state(), TrainerControl()
    with pytest.raises(PreregError, match="save_total_limit = 2 would remove"):
        cb.on_train_begin(grpo_args(tmp_path, save_total_limit=2), st, control, model=SavableModel(), processing_class=tok)
    cb.on_train_begin(args, st, control, model=SavableModel(), processing_class=tok)
    while not control.should_training_stop:
        step(cb, args, st, control, [20] * 16)
        if control.should_save:  # TRL saves checkpoint-<step> after the log
            SavableModel().save_pretrained(tmp_path / "out" / f"checkpoint-{st.global_step}")
            control.should_save = False
    cb.on_train_end(args, st, control)
    assert ev.calls == [] and read_meta(cb.run_dir).status == "stopped"  # not complete before its evaluations
    pending = deferred.read_pending(cb.run_dir)
    assert [(e["eval_index"], e["iteration"], e["tokens"]) for e in pending] == [
        (0, 0, 0), (1, 2, 640), (2, 4, 1280), (3, 6, 1920), (4, 8, 2560)]
    assert [Path(e["checkpoint"]).name for e in pending] == [f"checkpoint-{s}" for s in (0, 2, 4, 6, 8)]
    loaded = []
    monkeypatch.setattr(policy, "load_policy", lambda cfg, path: loaded.append(Path(path).name) or "policy")
    monkeypatch.setattr(engines, "HFEngine", lambda p: "engine")
    monkeypatch.setattr(deferred, "evaluate", ev)
    monkeypatch.setattr(deferred, "load_eval_sets", lambda spec, path: [])
    monkeypatch.setattr(deferred, "prepare_assets", lambda *a, **k: SimpleNamespace(synthetic_eval=None))
    r = CliRunner().invoke(app, [str(study)])
    assert r.exit_code == 0, r.output
    assert loaded == [f"checkpoint-{s}" for s in (0, 2, 4, 6, 8)]
    assert ev.calls == [(0, 0, 0), (1, 2, 640), (2, 4, 1280), (3, 6, 1920), (4, 8, 2560)]
    run = read_run(cb.run_dir, strict=True)
    assert read_meta(cb.run_dir).status == "complete" and run.evals["eval_index"].tolist() == [0, 1, 2, 3, 4]
    assert "nothing pending" in CliRunner().invoke(app, [str(study)]).output  # complete: never rescored


def test_a_run_resumed_after_its_last_evaluation_only_finishes(study, tmp_path, monkeypatch):
    cb, _ev = make(study, monkeypatch)
    args, st, control = grpo_args(tmp_path), state(), TrainerControl()
    cb.on_train_begin(args, st, control, model=MODEL, processing_class=TOK)
    while not control.should_training_stop:
        step(cb, args, st, control, [20] * 16)
    cb.writer.__exit__(None, None, None)  # killed before on_train_end: the log says 'running'
    cb2, ev2 = make(study, monkeypatch)
    control2 = TrainerControl()
    cb2.on_train_begin(args, state(step=8), control2, model=MODEL, processing_class=TOK)
    assert control2.should_training_stop and ev2.calls == []
    step(cb2, args, state(step=8), control2, [20] * 16)  # TRL's one step before it checks: not logged
    cb2.on_train_end(args, state(step=9), control2)
    run = read_run(cb2.run_dir, strict=True)
    assert len(run.iterations) == 8 and read_meta(cb2.run_dir).status == "complete"
