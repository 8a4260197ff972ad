"""Multi-reward evaluation metrics in plans and `prereg analyze` (relative accuracy, collapse),
and the election file under the run audit — on hand-built run logs with hand-computed answers."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from math import comb

import numpy as np
import pandas as pd
import pytest
from plans import lock_at, plan_text
from test_readings import TRT, frame, run_rows
from typer.testing import CliRunner

from prereg_kit.analysis.analyze import analyze_study
from prereg_kit.chain.seal import seal_runs
from prereg_kit.cli import app
from prereg_kit.errors import PlanError, PreregError
from prereg_kit.plan import load_plan
from prereg_kit.readings import PairingError, ReadingError, accuracy_curve, problem_accuracy, relative_accuracy_curves
from prereg_kit.report import write_report
from prereg_kit.runlog import RunLogWriter, RunMeta, election_sha256, run_dir
from prereg_kit.study.verify import verify_study

T0 = datetime(2026, 2, 1, 12, 0, tzinfo=timezone.utc)
H = timedelta(hours=1)


def p4(c: int, n: int = 8) -> float:
    """pass@4 from n samples with c correct: 1 − C(n−c, 4)/C(n, 4)."""
    return 1 - comb(n - c, 4) / comb(n, 4)


# ------------------------------------------------------------------ readings


def test_collapse_flag_against_hand_computation():
    # acc in tenths per evaluation, SAMPLES = 10: pass@4 of c = 10·acc correct out of 10
    acc = [0.3, 0.2, 0.3, 0.1, 0.5]
    ev = frame(run_rows("a", 0, **{**TRT, "acc": acc}))
    c = accuracy_curve(ev, eval_set="math", metric="collapse")
    base = p4(3, 10)
    want = [float(p4(round(a * 10), 10) < base) for a in acc]
    assert want == [0, 1, 0, 1, 0] and c["accuracy"].tolist() == want
    # the strict verifier: strict = default − 0.1, so the flags are those of acc − 0.1
    s = accuracy_curve(ev, eval_set="math", verifier="strict", metric="collapse")
    base_s = p4(2, 10)
    assert s["accuracy"].tolist() == [float(p4(round((a - 0.1) * 10), 10) < base_s) for a in acc]
    with pytest.raises(ReadingError, match="per-run flag"):
        problem_accuracy(ev, eval_set="math", metric="collapse")
    with pytest.raises(ReadingError, match="no evaluation 0"):
        accuracy_curve(ev[ev["eval_index"] > 0], eval_set="math", metric="collapse")
    late = ev.copy()
    late.loc[late["eval_index"] == 0, "updates"] = 1
    with pytest.raises(ReadingError, match="after 1 updates"):
        accuracy_curve(late, eval_set="math", metric="collapse")


def _ref_study(ref_acc_at_b=0.5):
    """trt/ctl/ref runs of seeds 0, 1; every run reaches B = 100 at evaluation 3 (tokens 104)."""
    toks = dict(tokens=[0, 40, 80, 104, 130], seconds=[0, 1, 2, 3, 4], updates=[0, 1, 2, 3, 4])
    return frame(
        run_rows("trt", 0, **toks, acc=[0.1, 0.2, 0.3, 0.4, 0.5]),
        run_rows("trt", 1, **toks, acc=[0.1, 0.2, 0.3, 0.6, 0.5]),
        run_rows("ctl", 0, **toks, acc=[0.1, 0.2, 0.3, 0.2, 0.5]),
        run_rows("ctl", 1, **toks, acc=[0.1, 0.2, 0.3, 0.3, 0.5]),
        run_rows("ref", 0, **toks, acc=[0.1, 0.2, 0.3, ref_acc_at_b, 0.5]),
        run_rows("ref", 1, **toks, acc=[0.1, 0.2, 0.3, 0.8, 0.5]),
    )


def test_relative_accuracy_curves_divide_by_the_reference_at_b():
    from prereg_kit.readings import ReadingPoint, paired_readings

    curves = accuracy_curve(_ref_study(), eval_set="math")
    rel = relative_accuracy_curves(curves, "ref", 100)
    assert rel.exclusions.empty
    pr = paired_readings(rel.kept, "trt", "ctl", ReadingPoint("tokens", budget=100))
    t = pr.table.set_index("seed")
    assert t.loc[0, "treatment"] == pytest.approx(0.4 / 0.5) and t.loc[0, "control"] == pytest.approx(0.2 / 0.5)
    assert t.loc[1, "treatment"] == pytest.approx(0.6 / 0.8) and t.loc[1, "control"] == pytest.approx(0.3 / 0.8)
    # the reference reads exactly 1 at B
    ref_b = rel.kept[(rel.kept["configuration"] == "ref") & (rel.kept["eval_index"] == 3)]
    assert ref_b["accuracy"].tolist() == pytest.approx([1.0, 1.0])
    # a reference at 0 makes the ratio undefined: an error naming the seed
    with pytest.raises(ReadingError, match="'ref' seed 0 has accuracy 0 .* undefined"):
        relative_accuracy_curves(accuracy_curve(_ref_study(0.0), eval_set="math"), "ref", 100)
    # a seed without a reference run: refused, or excluded and listed
    no1 = curves[~((curves["configuration"] == "ref") & (curves["seed"] == 1))]
    with pytest.raises(PairingError, match="seed 1: the reference 'ref'"):
        relative_accuracy_curves(no1, "ref", 100)
    a = relative_accuracy_curves(no1, "ref", 100, allow_missing=True)
    assert set(a.kept["seed"]) == {0} and set(a.exclusions["rule"]) == {"no_reference"}
    assert sorted(a.exclusions["configuration"]) == ["ctl", "trt"]
    with pytest.raises(PairingError, match="has no runs"):
        relative_accuracy_curves(curves, "nope", 100)


# ------------------------------------------------------------------ the plan

MR_PLAN = plan_text(
    id="mr", title="Multi-reward metrics", comparator="primary_only", seeds="[0, 1, 2]",
    question="Does TAG keep the reference's accuracy while additive aggregation collapses?",
    configurations="[configurations.primary_only]\n[configurations.additive]\n[configurations.tag]\n",
    tokens=100, eval_every="B/2", evaluation='samples = 8\nreference = "primary_only"\n', n_problems=2,
    primary="R1", treatment="tag", control="additive", metric="relative_accuracy", contrasts="""\
[[contrasts]]
id = "K1"
treatment = "additive"
control = "primary_only"
tier = "secondary"
metric = "collapse"

[[contrasts]]
id = "A1"
treatment = "tag"
control = "additive"
tier = "secondary"

""", tail="\n[statistics]\nbootstrap_resamples = 200\n")


def _plan_error(tmp_path, text) -> str:
    (tmp_path / "plan.toml").write_text(text)
    with pytest.raises(PlanError) as e:
        load_plan(tmp_path / "plan.toml")
    return str(e.value)


def _line(text: str, needle: str) -> int:
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


def test_plan_names_the_metrics_and_checks_the_reference(tmp_path):
    (tmp_path / "plan.toml").write_text(MR_PLAN)
    plan = load_plan(tmp_path / "plan.toml").plan
    assert plan.evaluation.reference == "primary_only"
    assert [c.metric for c in plan.contrasts] == ["relative_accuracy", "collapse", None]
    bad = MR_PLAN.replace('reference = "primary_only"', 'reference = "rp_only"')
    msg = _plan_error(tmp_path, bad)
    assert f"plan.toml:{_line(bad, 'reference =')}: evaluation.reference: unknown configuration 'rp_only'" in msg
    none = MR_PLAN.replace('reference = "primary_only"\n', "")
    msg = _plan_error(tmp_path, none)
    assert f":{_line(none, 'relative_accuracy')}: contrasts[0].metric: metric relative_accuracy needs [evaluation] reference" in msg
    timed = MR_PLAN.replace('metric = "collapse"', 'metric = "collapse"\nat = "time"')
    msg = _plan_error(tmp_path, timed)
    assert f":{_line(timed, 'at = ')}: contrasts[1].at: metric collapse is read at token reading points only" in msg
    few = MR_PLAN.replace("samples = 8", "samples = 2")
    assert "metric collapse compares pass@4: it needs [evaluation] samples >= 4" in _plan_error(tmp_path, few)
    assert "unknown metric 'relative'" in _plan_error(tmp_path, MR_PLAN.replace('"relative_accuracy"', '"relative"'))


# ------------------------------------------------------------------ analyze end to end

# correct counts (problem 1, problem 2) out of 8 at evaluations 0 (base), 1 (B/2), 2 (B)
BASE = (2, 2)  # shared by every configuration of a seed (common random numbers): pass@4 = p4(2)
COUNTS = {
    "primary_only": {0: (4, 4), 1: (2, 4), 2: (6, 2)},
    "additive": {0: (1, 0), 1: (0, 0), 2: (2, 2)},  # seeds 0 and 1 collapse; seed 2 equals its base
    "tag": {0: (4, 3), 1: (3, 3), 2: (5, 3)},
}


def _write_run(study, config, seed, plan_hash, *, anchor="", election="", sectioned=False):
    cfg = ({"rewards": {"anchor": anchor}} if sectioned else {"anchor": anchor}) if anchor else {}
    meta = RunMeta(study="mr", configuration=config, seed=seed, plan_hash=plan_hash, started_at=T0 + H,
                   config=cfg, election_sha256=election)
    w = RunLogWriter(run_dir(study, config, seed), meta, fsync=False)
    its = [{"iteration": i, "tokens_rollout": 25, "tokens_continuation": 0, "tokens_discarded": 0,
            "seconds_selection": 0.0, "seconds_generation": 1.0, "seconds_credit": 0.0, "seconds_update": 0.0,
            "seconds_weight_sync": 0.0, "updates": i + 1} for i in range(4)]
    w.log_iterations(its)
    for e, (it, counts) in enumerate([(0, BASE), (2, BASE), (4, COUNTS[config][seed])]):
        w.log_eval_rows([{"eval_index": e, "iteration": it, "eval_set": "heldout", "problem_id": f"p{j}",
                          "eval_seed": 1000 * seed + e, "tokens": 25 * it, "train_seconds": float(it),
                          "updates": it, "samples": 8, "correct": c, "correct_strict": c, "boxed": 8}
                         for j, c in enumerate(counts)])
    w.finish("complete")
    seal_runs(study, [run_dir(study, config, seed)])  # as a trainer seals a completed main run


@pytest.fixture(scope="module")
def mr_study(tmp_path_factory):
    d = tmp_path_factory.mktemp("mr") / "study"
    d.mkdir()
    (d / "plan.toml").write_text(MR_PLAN)
    h = lock_at(d / "plan.toml", T0).entry["content_sha256"]
    for config in COUNTS:
        for seed in range(3):
            _write_run(d, config, seed, h)
    return d


def _acc(counts):
    return sum(counts) / 16


def test_analyze_reads_relative_accuracy_and_collapse(mr_study):
    a = analyze_study(mr_study, progress=False)
    c = a.contrasts.set_index("contrast")
    ps = a.per_seed.set_index(["contrast", "seed"])
    ref = COUNTS["primary_only"]
    for s in range(3):  # relative accuracy: each arm over the reference, same seed, at B
        assert ps.loc[("R1", s), "treatment_value"] == pytest.approx(_acc(COUNTS["tag"][s]) / _acc(ref[s]))
        assert ps.loc[("R1", s), "control_value"] == pytest.approx(_acc(COUNTS["additive"][s]) / _acc(ref[s]))
    assert ps.loc[("R1", 0), "difference"] == pytest.approx(0.75)  # 7/16 ÷ 1/2 − 1/16 ÷ 1/2
    assert c.loc["R1", "mean"] == pytest.approx(np.mean([0.75, 1.0, 0.5]))
    assert c.loc["R1", "metric"] == "relative_accuracy" and c.loc["R1", "reference"] == "primary_only"
    assert np.isnan(c.loc["R1", "crossed_ci_low"])  # a per-seed ratio: no crossed bootstrap
    assert any("no crossed seed-by-problem bootstrap for metric relative_accuracy" in n for n in a.notes)
    # collapse: pass@4 at B below the run's own evaluation 0
    base = (p4(2) + p4(2)) / 2
    want = {s: float((p4(COUNTS["additive"][s][0]) + p4(COUNTS["additive"][s][1])) / 2 < base) for s in range(3)}
    assert want == {0: 1.0, 1: 1.0, 2: 0.0}
    for s in range(3):
        assert ps.loc[("K1", s), "treatment_value"] == want[s] and ps.loc[("K1", s), "control_value"] == 0.0
    assert c.loc["K1", "mean"] == pytest.approx(2 / 3) and c.loc["K1", "reference"] == ""
    # accuracy is unchanged by all this
    assert c.loc["A1", "mean"] == pytest.approx(np.mean([_acc(COUNTS["tag"][s]) - _acc(COUNTS["additive"][s]) for s in range(3)]))
    # the configuration table: mean per-seed ratio to the reference, share of seeds collapsed
    cf = a.configurations.set_index("configuration")
    assert cf.loc["primary_only", "relative_accuracy_at_B"] == pytest.approx(1.0)
    assert cf.loc["tag", "relative_accuracy_at_B"] == pytest.approx(np.mean([0.875, 1.0, 1.0]))
    assert cf.loc["additive", "relative_accuracy_at_B"] == pytest.approx(np.mean([0.125, 0.0, 0.5]))
    assert cf.loc["additive", "n_collapsed"] == 2 and cf.loc["additive", "collapse_rate"] == pytest.approx(2 / 3)
    assert cf.loc["tag", "collapse_rate"] == 0 and cf.loc["primary_only", "collapse_rate"] == 0


def test_report_shows_the_metrics(mr_study, tmp_path):
    a = analyze_study(mr_study, progress=False)
    write_report(a, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "| R1 | primary | tag − additive | relative_accuracy (÷ primary_only) | B | 3 | +0.750 [" in md
    assert "| K1 | secondary | additive − primary_only | collapse | B | 3 | +0.667 [" in md
    assert "| A1 | secondary | tag − additive | accuracy | B | 3 |" in md
    assert "relative to primary_only (mean ratio)" in md and "| additive | 3 | 0.104 | 0.21× | 2 / 3 (67%) |" in md
    cs = pd.read_csv(tmp_path / "contrasts.csv").set_index("contrast")
    assert cs.loc["R1", "reference"] == "primary_only" and cs.loc["K1", "metric"] == "collapse"
    res = json.loads((tmp_path / "results.json").read_text())
    assert {r["configuration"]: r["collapse_rate"] for r in res["configurations"]}["additive"] == pytest.approx(2 / 3)


def test_zero_reference_is_a_one_line_error(tmp_path):
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(MR_PLAN)
    h = lock_at(d / "plan.toml", T0).entry["content_sha256"]
    saved = COUNTS["primary_only"][1]
    COUNTS["primary_only"][1] = (0, 0)
    try:
        for config in COUNTS:
            for seed in range(3):
                _write_run(d, config, seed, h)
    finally:
        COUNTS["primary_only"][1] = saved
    with pytest.raises(PreregError, match=r"contrast R1 \(tag − additive\): relative_accuracy: the reference "
                                          r"'primary_only' seed 1 has accuracy 0 at 100 tokens .* undefined"):
        analyze_study(d, progress=False)


# ------------------------------------------------------------------ the election under the audit


def _elected_study(tmp_path):
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(MR_PLAN)
    (d / "election.json").write_text(json.dumps({"elected": "correct", "time": "2026-02-01T11:00:00Z"}) + "\n")
    h = lock_at(d / "plan.toml", T0).entry["content_sha256"]
    el = election_sha256(d)
    assert el.startswith("sha256:") and len(el) == 71
    for config in COUNTS:
        for seed in range(3):
            _write_run(d, config, seed, h, anchor="elected" if config == "tag" else "",
                       election=el if config == "tag" else "")
    return d


def test_election_edited_after_the_runs_is_a_violation(tmp_path):
    d = _elected_study(tmp_path)
    rep = verify_study(d)
    assert rep.exit_code == 0, rep.violations
    assert any(line.startswith("election.json: sha256:") and "elected 'correct'" in line for line in rep.info)
    res = CliRunner().invoke(app, ["verify", str(d)])
    assert res.exit_code == 0, res.output
    # the election is edited after the runs read it
    (d / "election.json").write_text(json.dumps({"elected": "negative"}) + "\n")
    rep = verify_study(d)
    assert rep.exit_code == 1 and len(rep.violations) == 3
    assert rep.violations[0].startswith("tag/seed-0: ") and "election.json changed after the run read it" in rep.violations[0]
    res = CliRunner().invoke(app, ["verify", str(d)])
    assert res.exit_code == 1
    assert "violation: tag/seed-0: " in res.output and "changed after the run read it" in res.output
    # analyze refuses the same way (exit 1) unless exploratory
    res = CliRunner().invoke(app, ["analyze", str(d), "--resamples", "50"])
    assert res.exit_code == 1 and "tag/seed-1" in res.output
    # a missing election file is a violation too
    (d / "election.json").unlink()
    rep = verify_study(d)
    assert rep.exit_code == 1 and "election.json is missing" in rep.violations[0]


def test_run_without_a_recorded_election_hash_is_a_warning(tmp_path):
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(MR_PLAN)
    h = lock_at(d / "plan.toml", T0).entry["content_sha256"]
    _write_run(d, "tag", 0, h, anchor="elected")  # an older trainer: no hash
    rep = verify_study(d)
    assert rep.exit_code == 0 and any("recorded no election hash" in w for w in rep.warnings)


def test_the_anchor_is_read_from_sectioned_settings_too(tmp_path):
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(MR_PLAN)
    h = lock_at(d / "plan.toml", T0).entry["content_sha256"]
    _write_run(d, "tag", 0, h, anchor="elected", sectioned=True)  # rewards.anchor, no hash
    rep = verify_study(d)
    assert rep.exit_code == 0 and any("recorded no election hash" in w for w in rep.warnings)


def test_a_resumed_run_keeps_its_election(tmp_path):
    from prereg_kit.runlog import RunLogError

    folder = tmp_path / "run"
    meta = RunMeta(study="mr", configuration="tag", seed=0, plan_hash="sha256:x", started_at=T0,
                   election_sha256="sha256:" + "a" * 64)
    RunLogWriter(folder, meta, fsync=False)
    RunLogWriter(folder, meta, resume=True, fsync=False)  # same election: resumes
    other = meta.model_copy(update={"election_sha256": "sha256:" + "b" * 64})
    with pytest.raises(RunLogError, match="cannot resume: election_sha256 .*election.json changed"):
        RunLogWriter(folder, other, resume=True, fsync=False)
