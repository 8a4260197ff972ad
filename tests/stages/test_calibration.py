"""The calibration stage's budget and truncation rules and the learning-rate stability probe
(dense-rewards paper §C.1 "Implementation", §C.5.3, §C.5.4; collapse event §H.2): exact values at
and around every boundary, and the plan written through a dated amendment."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import pytest
from plans import SMALL_PLAN
from typer.testing import CliRunner

from prereg_kit.chain.lock import lock_plan, read_chain
from prereg_kit.cli import app
from prereg_kit.errors import PreregError
from prereg_kit.runlog import RunLogWriter, RunMeta, run_dir, utc_now
from prereg_kit.stages.calibration import apply_calibration, calibrated_budget, truncation_limit
from prereg_kit.stages.probe import probe_study, select_rate, unstable


# ---- the budget rule ---------------------------------------------------------------------------
@pytest.mark.parametrize("b", [12_250_000, 17_250_000, 21_000_000, 22_250_000, 10_000_000, 8_250_000])
def test_budget_rule_reproduces_the_papers_budgets(b):
    # every mean in (B − 250k, B] / 48 gives B: the paper's B values are fixed points of the rule
    assert calibrated_budget(Fraction(b, 48)) == b
    assert calibrated_budget(Fraction(b - 250_000, 48) + Fraction(1, 10**9)) == b
    assert calibrated_budget(Fraction(b, 48) + Fraction(1, 10**9)) == b + 250_000


def test_budget_rule_boundaries_and_refusals():
    assert calibrated_budget(1) == 250_000  # 48 tokens rounds up
    assert calibrated_budget(Fraction(250_000, 48)) == 250_000  # exactly one multiple
    assert calibrated_budget(250_000 / 48) == 250_000  # the float of it: no spurious round-up
    assert calibrated_budget(5209) == 250_032 // 250_000 * 250_000 + 250_000  # 48·5209 = 250,032 → 500,000
    assert calibrated_budget(255_208) == 12_250_000 and calibrated_budget(255_209) == 12_500_000
    # a mean of integer token counts, kept exact: (255,208 + 255,209 + 255,209) / 3 · 48 = 12,250,080 → 12.5M
    assert calibrated_budget(Fraction(255_208 + 255_209 + 255_209, 3)) == 12_500_000
    for bad in [0, -1, -0.5, math.nan, math.inf, True, "255208", None]:
        with pytest.raises(ValueError):
            calibrated_budget(bad)


# ---- the truncation rule -----------------------------------------------------------------------
def test_truncation_rule_reproduces_the_llama_calibrations_and_its_boundary():
    assert truncation_limit([0.33]) == 768  # Llama-3.2-3B (S24, §C.5.3)
    assert truncation_limit([0.375]) == 768  # Llama-3.2-1B (S27, §C.5.4)
    assert truncation_limit([0.25]) == 768 and truncation_limit([0.2, 0.3]) == 768  # at the threshold: raised
    assert truncation_limit([0.2499999]) == 380 and truncation_limit([0.0]) == 380
    assert truncation_limit([0.9], 768) == 768 and truncation_limit([0.9], 512) == 512  # a 380 limit only
    assert truncation_limit([0.30], threshold=0.33) == 380 and truncation_limit([0.33], threshold=0.33) == 768
    for bad in [[], [1.5], [-0.1], [math.nan], [True], ["0.4"]]:
        with pytest.raises(ValueError):
            truncation_limit(bad)
    for t in (0, -0.1, 1.5):
        with pytest.raises(ValueError):
            truncation_limit([0.4], threshold=t)


# ---- the stage written into the plan -----------------------------------------------------------
CAL_PLAN = SMALL_PLAN + """
[[stages]]
name = "main"

[[stages]]
name = "calibration"
configurations = ["B"]
seeds = [0]

[[stages]]
name = "pilot"
configurations = ["A", "B"]
seeds = [0, 1]
"""


def _study(tmp_path: Path, plan: str = CAL_PLAN) -> Path:
    d = tmp_path / "study"
    d.mkdir(parents=True)
    (d / "plan.toml").write_text(plan)
    return d


def _run(study: Path, cfg: str, seed: int, stage: str, *, config: dict, tokens: list[int], trunc: list[float],
         accuracy: list[float] | None = None, status: str = "complete") -> Path:
    folder = run_dir(study, cfg, seed, stage=stage)
    meta = RunMeta(study="t1", configuration=cfg, seed=seed, stage=stage, plan_hash="sha256:x", config=config,
                   started_at=utc_now())
    w = RunLogWriter(folder, meta, fsync=False)
    cum = 0
    for i, (t, tr) in enumerate(zip(tokens, trunc)):
        w.log_iteration({"iteration": i, "tokens_rollout": t, "tokens_continuation": 0, "tokens_discarded": 0,
                         "seconds_selection": 0.0, "seconds_generation": 1.0, "seconds_credit": 0.0,
                         "seconds_update": 0.0, "seconds_weight_sync": 0.0, "updates": i + 1, "truncation_rate": tr})
    for k, acc in enumerate(accuracy or []):  # evaluation k after k iterations, 10 problems × 10 samples
        cum = sum(tokens[:k])
        w.log_eval_rows([{"eval_index": k, "iteration": k, "eval_set": "test", "problem_id": f"p{j}", "eval_seed": 0,
                          "tokens": cum, "train_seconds": float(k), "updates": k, "samples": 10,
                          "correct": round(acc * 10), "correct_strict": 0, "boxed": 0} for j in range(10)])
    w.finish(status)
    return folder


def test_calibration_writes_the_budget_into_a_locked_plan_as_an_amendment(tmp_path):
    d = _study(tmp_path)
    lock_plan(d)
    cfg = {"rollout": {"completion_limit": 768}}
    # mean of 255,208, 255,209, 255,210 = 255,209 → 48 × 255,209 = 12,250,032 → 12.5M
    _run(d, "B", 0, "calibration", config=cfg, tokens=[255_208, 255_209, 255_210], trunc=[0.9, 0.5, 0.1])
    cal = apply_calibration(d)
    assert cal.budget == 12_500_000 and cal.new_limit is None
    text = (d / "plan.toml").read_text()
    assert 'tokens = "12.5M"' in text and "# A small plan for tests." in text  # comments kept
    chain = read_chain(d)
    last = chain.last
    assert last["kind"] == "amendment" and "12,500,000" in last["reason"] and "255,209.0" in last["reason"]
    assert any("budget" in json.dumps(c) for c in last["changes"])
    printed = "\n".join(cal.lines())
    assert "B = 48 × 255,209.0 (B) rounded up to 250,000 = 12,500,000" in printed and "amendment" in printed
    # run it again: nothing changes, no second amendment
    again = apply_calibration(d)
    assert "nothing to amend" in "\n".join(again.lines()) and len(read_chain(d).entries) == len(chain.entries)


def test_the_truncation_rule_raises_the_limit_first_and_sets_the_runs_aside(tmp_path):
    d = _study(tmp_path)
    _run(d, "B", 0, "calibration", config={"rollout": {"completion_limit": 380}}, tokens=[1000, 1000, 1000],
         trunc=[0.33, 0.1, 0.1])  # the base model's samples: iteration 0's share
    probe = d / "stages" / "calibration" / "probe-correct" / "seed-0"  # an anchor-election probe: not the rule's
    probe.mkdir(parents=True)
    cal = apply_calibration(d)  # not locked: written into the plan, said so
    assert cal.new_limit == 768 and cal.budget is None
    text = (d / "plan.toml").read_text()
    assert "rollout.completion_limit = 768" in text and 'tokens = "1M"' in text  # B is left for the rerun
    assert not (d / "stages" / "calibration" / "B" / "seed-0").exists() and probe.is_dir()
    assert (d / "calibration-at-380" / "B" / "seed-0" / "meta.json").is_file()  # kept, out of the stage
    assert "not locked" in cal.amendment and "again" in "\n".join(cal.lines())
    from prereg_kit.plan import load_plan

    assert load_plan(d).plan.recipe["rollout"]["completion_limit"] == 768
    # the rerun at 768: the rule no longer applies, B is measured and written
    _run(d, "B", 0, "calibration", config={"rollout": {"completion_limit": 768}}, tokens=[400_000] * 3, trunc=[0.5] * 3)
    assert apply_calibration(d).budget == 19_250_000  # 48 × 400,000 = 19.2M → 19.25M


def test_calibration_refuses_what_it_cannot_measure(tmp_path):
    d = _study(tmp_path)
    with pytest.raises(PreregError, match="no calibration runs"):
        apply_calibration(d)
    _run(d, "B", 0, "calibration", config={"rollout": {"completion_limit": 768}}, tokens=[10, 10], trunc=[0, 0],
         status="failed")
    with pytest.raises(PreregError, match=r"seed-0: a calibration run needs iterations 0-2 complete; it has 2"):
        apply_calibration(d)
    e = _study(tmp_path / "e", CAL_PLAN.replace("overrides = { learning_rate = 2e-6 }",
                                                "overrides = { learning_rate = 2e-6, rollout.completion_limit = 512 }"))
    _run(e, "B", 0, "calibration", config={"rollout": {"completion_limit": 380}}, tokens=[10] * 3, trunc=[0.5] * 3)
    with pytest.raises(PreregError, match="configurations B override completion_limit"):
        apply_calibration(e)
    assert "512" in (e / "plan.toml").read_text()  # nothing written
    z = _study(tmp_path / "z")
    _run(z, "B", 0, "calibration", config={"rollout": {"completion_limit": 768}}, tokens=[0] * 3, trunc=[0.5] * 3)
    with pytest.raises(PreregError, match="B/seed-0: tokens per iteration must be positive"):
        apply_calibration(z)
    f = _study(tmp_path / "f")
    _run(f, "B", 0, "calibration", config={}, tokens=[10] * 3, trunc=[0.5] * 3)
    with pytest.raises(PreregError, match="do not record rollout.completion_limit"):
        apply_calibration(f)


# ---- the learning-rate stability probe ----------------------------------------------------------
def test_probe_criterion_at_its_boundaries():
    assert unstable([0.3, 0.6, 0.46]) is None  # 0.14 below the peak, above the start
    assert unstable([0.3, 0.6, 0.45]).startswith("collapsed")  # exactly 0.15 below the peak
    assert unstable([0.5, 0.49]).startswith("degraded") and unstable([0.5, 0.5]) is None
    assert unstable([0.5, 0.7, 0.56], collapse_drop=0.1).startswith("collapsed")
    for bad in [[0.5], [], [0.5, 1.2], [0.5, math.nan], [-0.1, 0.2]]:
        with pytest.raises(ValueError):
            unstable(bad)
    with pytest.raises(ValueError):
        unstable([0.5, 0.5], collapse_drop=0)


def test_probe_selects_the_largest_rate_whose_every_run_is_stable():
    curves = {1e-6: {"s0": [0.3, 0.4], "s1": [0.3, 0.35]}, 2e-6: {"s0": [0.3, 0.45], "s1": [0.3, 0.42]},
              3e-6: {"s0": [0.3, 0.5], "s1": [0.3, 0.6, 0.29]}, 1e-5: {"s0": [0.3, 0.0]}}
    chosen, verdicts = select_rate(curves)
    assert chosen == 2e-6  # 3e-6 fails on one seed (degraded and collapsed: collapse named first)
    assert [v.stable for v in verdicts] == [True, True, False, False]
    assert verdicts[2].reasons == ["s1: collapsed: final 0.290 is 0.310 below its peak 0.600 (≥ 0.15)"]
    assert select_rate({1e-5: {"s0": [0.3, 0.1]}})[0] is None
    for bad in [{0.0: {"s": [0.1, 0.2]}}, {math.nan: {"s": [0.1, 0.2]}}, {1e-6: {}}]:
        with pytest.raises(ValueError):
            select_rate(bad)


def test_probe_on_a_pilot_stage_and_its_command(tmp_path):
    d = _study(tmp_path)
    for seed in (0, 1):
        _run(d, "A", seed, "pilot", config={"update": {"learning_rate": 1e-6}}, tokens=[100] * 3, trunc=[0] * 3,
             accuracy=[0.3, 0.4, 0.5])
        _run(d, "B", seed, "pilot", config={"update": {"learning_rate": 3e-6}}, tokens=[100] * 3, trunc=[0] * 3,
             accuracy=[0.3, 0.6, 0.2 if seed else 0.6])
    res = probe_study(d)
    assert res.selected == 1e-6 and res.eval_set == "test"
    out = CliRunner().invoke(app, ["probe", str(d)])
    assert out.exit_code == 0, out.output
    assert "learning rate 3e-06: fails the probe" in out.output and "B/seed-1: collapsed" in out.output
    assert "selected learning rate: 1e-06" in out.output
    bad = CliRunner().invoke(app, ["probe", str(d), "--eval-set", "tset"])  # a near-miss name
    assert bad.exit_code != 0 and "'tset' is not an evaluation set of the plan (have: test)" in bad.output
    bad = CliRunner().invoke(app, ["probe", str(d), "--stage", "smoke"])
    assert bad.exit_code != 0 and "no stage 'smoke'" in bad.output
    short = _study(tmp_path / "short")
    _run(short, "A", 0, "pilot", config={"update": {"learning_rate": 1e-6}}, tokens=[100] * 3, trunc=[0] * 3,
         accuracy=[0.3])
    with pytest.raises(PreregError, match=r"A/seed-0: the probe needs evaluation 0 .* evaluations \[0\]"):
        probe_study(short)
    import shutil

    shutil.rmtree(run_dir(d, "B", 1, stage="pilot"))
    with pytest.raises(PreregError, match="seed-1: no run"):
        probe_study(d)
