"""Real runs of the tiny model: a valid run log, resume after SIGKILL, and `prereg run`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from paths import ROOT

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch
from plans import run_plan
from typer.testing import CliRunner

from prereg_kit.chain.lock import lock_plan
from prereg_kit.cli import app
from prereg_kit.runlog import read_meta, read_run
from trainer.launch import plan_jobs, stage_run_dir


# A study small enough for tests: a 1-layer hidden-32 model, a 30-step warm start, 2 prompts × 4.
def _plan(tokens: int) -> str:
    return run_plan(
        id="tiny", title="Tiny trainer test", question="Does the trainer run?", comparator="frozen",
        treatment="grpo", seeds="[0, 1]", configurations="""\
[configurations.grpo]
[configurations.frozen]
overrides = { learning_rate = 0.0 }
""", tokens=tokens, eval_every="B/4", samples=2, greedy=True, n_problems=6,
        smoke_configurations='["grpo"]', train_to="0.5B")


@pytest.fixture(scope="module")
def cache(trainer_cache) -> Path:
    return trainer_cache  # conftest: one warm start per worker, shared with the other modules that train


def _study(tmp_path: Path, cache: Path, tokens: int = 600) -> Path:
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(_plan(tokens))
    (d / ".cache").symlink_to(cache, target_is_directory=True)  # share the warm start between tests
    return d


def _spec(study: Path, config: str = "grpo", seed: int = 0, stage: str = "smoke", run_dir: Path | None = None):
    _, jobs = plan_jobs(study, stage, [config], [seed])
    spec = jobs[0].spec
    if run_dir is not None:
        spec = spec.model_copy(update={"run_dir": str(run_dir)})
    return spec


def _train(spec):
    from trainer.loop import train

    threads = torch.get_num_threads()
    try:
        return train(spec)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow  # trains the tiny model
def test_short_real_run_writes_a_valid_run_log(tmp_path, cache):
    study = _study(tmp_path, cache)
    spec = _spec(study, stage="smoke")
    c = _train(spec)
    run = read_run(spec.run_dir, strict=True)
    assert run.meta.status == "complete" and run.meta.plan_hash == spec.plan_hash and run.meta.stage == "smoke"
    assert not run.problems
    it, ev = run.iterations, run.evals
    assert it["iteration"].tolist() == list(range(len(it)))
    assert (it["tokens_rollout"] > 0).all() and (it["tokens_rollout"] <= 8 * 24).all()
    assert it["updates"].tolist() == list(range(1, len(it) + 1))
    assert set(ev["eval_set"]) == {"heldout"} and (ev["samples"] == 2).all()
    per_eval = ev.groupby("eval_index")
    assert (per_eval.size() == 6).all() and per_eval["eval_seed"].nunique().eq(1).all()
    tokens = per_eval["tokens"].first().tolist()
    stop = spec.stop_tokens
    assert tokens[0] == 0 and tokens[-1] >= stop and tokens[-2] < stop  # stops after the eval at or after 0.5B
    assert tokens[-1] == it["tokens_total"].sum() == c.total_tokens
    assert ev["greedy_correct"].notna().all()
    assert (ev["correct_strict"] <= ev["samples"]).all()
    assert set(run.meta.model_extra["excluded_seconds"]) == {"evaluation", "logging", "checkpoint"}
    assert not (Path(spec.run_dir) / "checkpoint").exists()  # deleted once complete


def _rows(folder):
    run = read_run(folder)
    it = run.iterations.drop(columns=[c for c in run.iterations.columns if "seconds" in c])
    ev = run.evals.drop(columns=["train_seconds"])
    return it, ev, run


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, cache):
    """The 4000-token study and its smoke run trained without interruption, once for the module."""
    root = tmp_path_factory.mktemp("uninterrupted")
    study = _study(root, cache, tokens=4000)
    ref = _spec(study, run_dir=root / "ref")
    _train(ref)
    return study, ref


@pytest.mark.slow  # trains the tiny model
@pytest.mark.parametrize("kill_after_rows", [1, 12])
def test_resume_after_sigkill_gives_identical_rows(tmp_path, uninterrupted, kill_after_rows):
    study, ref = uninterrupted
    spec = _spec(study, run_dir=tmp_path / "killed")
    Path(spec.run_dir).mkdir(parents=True)
    spec_path = Path(spec.run_dir) / "spec.json"
    spec.save(spec_path)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "trainer", str(spec_path)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = Path(spec.run_dir) / "iterations.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if rows.exists() and rows.read_bytes().count(b"\n") >= kill_after_rows:
            break
        time.sleep(0.005)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert read_meta(spec.run_dir).status == "running"  # killed mid-run
    _train(spec)  # resume in-process from the last checkpoint
    it_ref, ev_ref, _ = _rows(ref.run_dir)
    it, ev, run = _rows(spec.run_dir)
    resumes = run.meta.model_extra["resumes"]
    assert run.meta.status == "complete" and len(resumes) == 1
    if kill_after_rows > 10:  # past the first in-run evaluation: resumed from a mid-run checkpoint
        assert resumes[0]["at_iteration"] > 0 and resumes[0]["at_eval"] > 1
    assert it.equals(it_ref) and ev.equals(ev_ref)
    assert not run.problems


def _cli(*args):
    return CliRunner().invoke(app, [*map(str, args)])


def test_prereg_run_refuses_unlocked_or_changed_plan_for_main_stage(tmp_path, cache):
    study = _study(tmp_path, cache)
    res = _cli("run", study)
    assert res.exit_code == 1 and "locked" in res.output
    lock_plan(study / "plan.toml")
    plan = study / "plan.toml"
    plan.write_text(plan.read_text().replace("learning_rate = 1e-3", "learning_rate = 2e-3"))
    res = _cli("run", study)
    assert res.exit_code == 1 and "amend" in res.output
    assert not (study / "runs").exists()
    res = _cli("run", study, "--stage", "smoke", "--configs", "nope")
    assert res.exit_code == 2 and "nope" in res.output


@pytest.mark.slow  # trains the tiny model
def test_prereg_run_smoke_then_skips_completed_runs(tmp_path, cache):
    study = _study(tmp_path, cache)
    res = _cli("run", study, "--stage", "smoke")  # an unlocked plan may run its smoke stage
    assert res.exit_code == 0, res.output
    folder = stage_run_dir(study, "grpo", 0, "smoke")
    meta = read_meta(folder)
    assert meta.status == "complete" and meta.stage == "smoke"
    assert (folder / "spec.json").is_file() and not (study / "runs").exists()
    res = _cli("run", study, "--stage", "smoke")
    assert res.exit_code == 0 and "1 complete (skipped)" in res.output
    assert read_meta(folder).ended_at == meta.ended_at
    # a trainer started on the complete run by hand leaves it alone: exit 3, not a byte changed
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.name != "train.log"}
    proc = subprocess.run([sys.executable, "-m", "trainer", str(folder / "spec.json")], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    assert proc.returncode == 3 and "already complete" in proc.stderr and "Traceback" not in proc.stderr
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.name != "train.log"} == before


@pytest.mark.slow
def test_two_prereg_run_processes_on_one_study(tmp_path, cache):
    """The second `prereg run` on a run another process is training exits 1 naming the holder;
    the first completes with every row, sealed, and the study verifies."""
    study = _study(tmp_path, cache, tokens=4000)
    lock_plan(study / "plan.toml")
    folder = study / "runs" / "grpo" / "seed-0"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "prereg_kit", "run", str(study), "--configs", "grpo", "--seeds", "0"]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 240
    while not (folder / ".writer.json").exists() and first.poll() is None and time.time() < deadline:
        time.sleep(0.05)  # the trainer holds the run's one-writer lock from here on
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    # two launchers that both found the run free: the trainer's own lock stops the second one
    trainer = subprocess.run([sys.executable, "-m", "trainer", str(folder / "spec.json")], env=env,
                             capture_output=True, text=True, timeout=240)
    out1, _ = first.communicate(timeout=600)
    assert first.returncode == 0, out1
    assert second.returncode == 1, second.stderr
    assert "grpo seed 0: failed (another writer holds this run: pid" in second.stderr and "Traceback" not in second.stderr
    assert trainer.returncode in (2, 3), trainer.stderr  # 3: it started after the first had finished
    if trainer.returncode == 2:
        assert trainer.stderr.startswith(f"error: {folder}: another writer holds this run (pid ")
    run = read_run(folder, strict=True)
    assert run.meta.status == "complete" and not run.problems
    it, ev = run.iterations, run.evals  # every row, once: nothing of the first run was lost
    assert it["iteration"].tolist() == list(range(len(it))) and it["tokens_total"].sum() >= 4000
    per_eval = ev.groupby("eval_index").size()
    assert per_eval.index.tolist() == list(range(len(per_eval))) and (per_eval == 6).all()
    assert ev["tokens"].max() == it["tokens_total"].sum()
    from prereg_kit.study.verify import verify_study

    rep = verify_study(study)
    assert rep.exit_code == 0, rep.violations
    assert rep.seals.sealed["runs/grpo/seed-0"]["files"].keys() >= {"meta.json", "evals.parquet"}


def test_a_main_run_started_by_hand_obeys_the_lock(tmp_path):
    """`python -m trainer spec.json` for a main-stage run checks the lock itself: a spec written
    while the plan was locked is refused once the plan has changed, and a plan never locked is
    refused too, before the run folder is created."""
    from prereg_kit.errors import ViolationError
    from trainer.loop import train

    (tmp_path / "cache").mkdir()
    study = _study(tmp_path, tmp_path / "cache")  # nothing is trained: the refusal comes first
    lock_plan(study / "plan.toml")
    spec = _spec(study, stage="main")
    plan = study / "plan.toml"
    plan.write_text(plan.read_text().replace("samples = 2", "samples = 3"))
    with pytest.raises(ViolationError) as e:
        train(spec)
    assert "main-stage runs refused until the change is recorded with `prereg amend`" in e.value.lines[-1]
    (study / "plan.lock").unlink()
    with pytest.raises(ViolationError) as e:
        train(spec)
    assert "main-stage runs need a locked plan" in e.value.lines[0]
    assert not Path(spec.run_dir).exists()
    spec.save(tmp_path / "spec.json")
    res = subprocess.run([sys.executable, "-m", "trainer", str(tmp_path / "spec.json")], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 2 and "main-stage runs need a locked plan" in res.stderr
