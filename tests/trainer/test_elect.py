"""Anchor election: probe jobs, the per-token KL, election.json and `prereg elect`."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch
from test_trainer_multireward import mr_study
from typer.testing import CliRunner

from prereg_kit.chain.lock import lock_plan, read_chain
from prereg_kit.cli import app
from prereg_kit.errors import PreregError
from prereg_kit.study.audit import audit_runs
from trainer.core.reward_step import make_rewarder
from trainer.elect import probe_jobs, sequence_kl


def test_probe_jobs_are_single_channel_calibration_runs(tmp_path, trainer_cache):
    study = mr_study(tmp_path, trainer_cache, tokens=400)
    _, name, cfg, jobs = probe_jobs(study, tokens="B/4")
    assert name == "tag" and [j.configuration for j in jobs] == ["probe-correct", "probe-negative"]
    for j, ch in zip(jobs, ["correct", "negative"]):
        c = j.spec.config
        assert c.rewards.channels == [ch] and c.rewards.aggregation == {"rule": "primary"} and c.rewards.anchor == "" and c.engine.keep_checkpoint
        assert j.spec.stage == "calibration" and j.spec.budget_tokens == 100
        assert j.folder == study / "stages" / "calibration" / f"probe-{ch}" / "seed-0"
    assert probe_jobs(study, tokens="50")[3][0].spec.budget_tokens == 50
    assert probe_jobs(study)[3][0].spec.budget_tokens == 200 and probe_jobs(study)[3][0].spec.stop_iterations is None
    with pytest.raises(PreregError, match="not a configuration"):
        probe_jobs(study, configuration="nope")


def test_probe_jobs_for_t_steps(tmp_path, trainer_cache):
    from trainer.elect import UNBOUNDED_TOKENS

    study = mr_study(tmp_path, trainer_cache, tokens=400)
    jobs = probe_jobs(study, steps=3)[3]
    assert all(j.spec.stop_iterations == 3 and j.spec.budget_tokens == UNBOUNDED_TOKENS for j in jobs)
    with pytest.raises(PreregError, match="--steps or --tokens, not both"):
        probe_jobs(study, steps=3, tokens="B/2")
    with pytest.raises(PreregError, match="positive number"):
        probe_jobs(study, steps=0)
    res = CliRunner().invoke(app, ["elect", str(study), "--steps", "3", "--tokens", "B/2"])
    assert res.exit_code == 2 and "not both" in res.output


def test_schedule_stops_after_t_iterations():
    from trainer.core.budget import Counters, Schedule

    c = Counters()
    sched = Schedule(interval=10**15, stop_tokens=10**15, stop_iterations=3, counters=c)
    seen = []
    while not c.done:
        before = c.total_tokens
        c.add_iteration({"rollout": 50}, {}, updates=1)
        if sched.eval_due(before, c.total_tokens):
            c.done = sched.finished(c.total_tokens)
            seen.append(c.iteration)
    assert seen == [3] and c.iteration == 3
    assert not Schedule(100, 1000).finished(999) and Schedule(100, 1000).finished(1000)  # tokens alone, as before


def test_sequence_kl_is_zero_for_identical_policies():
    from test_trainer_credit import _tiny_policy

    class Tok:  # a tokenizer stand-in: prompts are lists of ids already
        pad_token_id = 0
        eos_token_id = 10

        def __call__(self, prompts, **_):
            ids = torch.tensor([[int(x) for x in p.split()] for p in prompts])
            return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

        def batch_decode(self, rows, **_):
            return [" ".join(map(str, r)) for r in rows]

    p, q = _tiny_policy(), _tiny_policy()
    for pol in (p, q):
        pol.tokenizer = Tok()
    prompts = ["1 2 3", "4 5 6"] * 3
    kl, n = sequence_kl(p, q, prompts, noise_seed=1, limit=6)
    assert n > 0 and kl == pytest.approx(0.0, abs=1e-6)
    with torch.no_grad():
        for w in q.model.parameters():
            w.add_(0.5 * torch.randn_like(w))
    kl2, _ = sequence_kl(p, q, prompts, noise_seed=1, limit=6)
    assert kl2 > 0.01


@pytest.mark.slow
def test_prereg_elect_end_to_end(tmp_path, trainer_cache):
    """T-step probes, election.json, reuse; a real main run records the election's hash, and an
    edit of election.json afterwards is a violation of `prereg verify`."""
    from prereg_kit.runlog import election_sha256, read_meta
    from prereg_kit.study.verify import verify_study
    from trainer.launch import plan_jobs
    from trainer.loop import train

    study = mr_study(tmp_path, trainer_cache, tokens=160)
    res = CliRunner().invoke(app, ["elect", str(study), "--steps", "2", "--prompts", "3", "--samples", "2"])
    assert res.exit_code == 0, res.output
    rec = json.loads((study / "election.json").read_text())
    assert rec["elected"] in ("correct", "negative") and set(rec["kl_rev"]) == {"correct", "negative"}
    assert rec["elected"] == min(rec["kl_rev"], key=rec["kl_rev"].get)
    assert all(p["iterations"] == 2 and p["tokens_rev"] > 0 and p["status"] == "complete" for p in rec["probes"])
    assert rec["probe_stop"] == "steps" and rec["probe_steps"] == 2 and rec["probe_tokens"] is None
    assert rec["lock"] == {"locked": False} and rec["plan_raw_sha256"].startswith("sha256:")
    cfg = probe_jobs(study, steps=2)[2]
    assert make_rewarder(cfg, study).anchor_name == rec["elected"]
    # probes are calibration runs: admissible before the lock
    lock_plan(study / "plan.toml")
    rep = audit_runs(study, read_chain(study / "plan.toml"))
    assert not rep.violations and len(rep.admitted) == 2
    # a second election reuses the complete probes; another stopping rule does not
    res = CliRunner().invoke(app, ["elect", str(study), "--steps", "2", "--prompts", "3", "--samples", "2"])
    assert res.exit_code == 0 and "0 to run" in res.output
    rec2 = json.loads((study / "election.json").read_text())
    assert rec2["lock"]["locked"] and rec2["lock"]["plan_state"] == "clean" and rec2["lock"]["entries"] == 1
    res = CliRunner().invoke(app, ["elect", str(study), "--tokens", "B/2"])
    assert res.exit_code == 2 and "trained with --steps 2" in res.output
    # a main run with anchor = "elected" records the hash of the election it read
    _, jobs = plan_jobs(study, "main", ["tag"], [0])
    spec = jobs[0].spec.model_copy(update={"train_to": 0.5})
    threads = torch.get_num_threads()
    try:
        train(spec)
    finally:
        torch.set_num_threads(threads)
    assert read_meta(spec.run_dir).election_sha256 == election_sha256(study) != ""
    assert verify_study(study).exit_code == 0
    (study / "election.json").write_text(json.dumps({**rec2, "elected": "negative"}, indent=2) + "\n")
    res = CliRunner().invoke(app, ["verify", str(study)])
    assert res.exit_code == 1 and "tag/seed-0: " in res.output and "changed after the run read it" in res.output
