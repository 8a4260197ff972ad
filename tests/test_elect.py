"""Anchor election (issue 7): probe jobs, the per-token KL, election.json and `prereg elect`."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from test_trainer_multireward import mr_cache, mr_study  # noqa: E402,F401
from typer.testing import CliRunner  # noqa: E402

from prereg_kit.audit import audit_runs  # noqa: E402
from prereg_kit.cli import app  # noqa: E402
from prereg_kit.errors import PreregError  # noqa: E402
from prereg_kit.lock import lock_plan, read_chain  # noqa: E402
from trainer.elect import probe_jobs, sequence_kl  # noqa: E402
from trainer.rewards import make_rewarder  # noqa: E402


def test_probe_jobs_are_single_channel_calibration_runs(tmp_path, mr_cache):  # noqa: F811
    study = mr_study(tmp_path, mr_cache, tokens=400)
    _, name, cfg, jobs = probe_jobs(study, tokens="B/4")
    assert name == "tag" and [j.configuration for j in jobs] == ["probe-correct", "probe-negative"]
    for j, ch in zip(jobs, ["correct", "negative"]):
        c = j.spec.config
        assert c.channels == [ch] and c.aggregation == {"rule": "primary"} and c.anchor == "" and c.keep_checkpoint
        assert j.spec.stage == "calibration" and j.spec.budget_tokens == 100
        assert j.folder == study / "stages" / "calibration" / f"probe-{ch}" / "seed-0"
    assert probe_jobs(study, tokens="50")[3][0].spec.budget_tokens == 50
    with pytest.raises(PreregError, match="not a configuration"):
        probe_jobs(study, configuration="nope")


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
def test_prereg_elect_end_to_end(tmp_path, mr_cache):  # noqa: F811
    study = mr_study(tmp_path, mr_cache, tokens=160)
    res = CliRunner().invoke(app, ["elect", str(study), "--tokens", "B/2", "--prompts", "3", "--samples", "2"])
    assert res.exit_code == 0, res.output
    rec = json.loads((study / "election.json").read_text())
    assert rec["elected"] in ("correct", "negative") and set(rec["kl_rev"]) == {"correct", "negative"}
    assert rec["elected"] == min(rec["kl_rev"], key=rec["kl_rev"].get)
    assert all(p["iterations"] >= 1 and p["tokens_rev"] > 0 and p["status"] == "complete" for p in rec["probes"])
    cfg = probe_jobs(study)[2]
    assert make_rewarder(cfg, study).anchor_name == rec["elected"]
    # probes are calibration runs: admissible before the lock
    lock_plan(study / "plan.toml")
    rep = audit_runs(study, read_chain(study / "plan.toml"))
    assert not rep.violations and len(rep.admitted) == 2
    # a second election reuses the complete probes
    res = CliRunner().invoke(app, ["elect", str(study), "--tokens", "B/2", "--prompts", "3", "--samples", "2"])
    assert res.exit_code == 0 and "0 to run" in res.output
