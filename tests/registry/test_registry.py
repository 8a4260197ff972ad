"""The registry: the papers' studies as plans that validate and lock, their reported results as
records that parse, the recheck of every printed p-value, the CLI, and the figure builders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from paths import ROOT
from typer.testing import CliRunner

from prereg_kit.chain.lock import amend_plan, lock_plan, read_chain
from prereg_kit.cli import app
from prereg_kit.plan import load_plan
from prereg_kit.registry import (
    Endpoint,
    EndpointCheck,
    ReportedRow,
    check_endpoint,
    family_holm_ranges,
    find_study,
    load_reported,
    printed_interval,
    recheck,
    recheck_endpoint,
    recheck_row,
    registry_states,
    study_dirs,
)
from prereg_kit.study.verify import verify_study

REGISTRY = ROOT / "registry"
H6_STUDIES = ["equal-iteration-7b", "equal-iteration-smollm3", "equal-iteration-prm", "equal-iteration-numina"]  # Tables 23-26
PAPER_STUDIES = ["equal-iteration"] + [f"S{i:02d}" for i in range(1, 36)] + H6_STUDIES
MR_GRIDS = ["mr-correct-brief", "mr-correct-negative", "mr-three-channel", "mr-code-fast", "mr-code-noop"]
MR_NEW = ["mr-llama-negative", "mr-llama-brief", "mr-q30b", "mr-lambda-sweep", "mr-six-percent"]  # locked when written
ALL_PLANS = sorted(REGISTRY.glob("*/plan.toml"))
runner = CliRunner()


def _run(*args):
    res = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in res.output
    return res


# --------------------------------------------------------------------------- plans


def test_every_paper_study_and_grid_is_in_the_registry():
    have = {d.name for d in study_dirs(REGISTRY)}
    assert set(PAPER_STUDIES + MR_GRIDS) <= have
    ids = {load_plan(REGISTRY / s).plan.study.id for s in PAPER_STUDIES}
    assert ids == {"equal-iteration"} | {f"S{i}" for i in range(1, 36)} | set(H6_STUDIES)


@pytest.mark.parametrize("plan", ALL_PLANS, ids=[p.parent.name for p in ALL_PLANS])
def test_every_registry_plan_validates_and_locks(plan, tmp_path):
    """Each plan, copied and locked; a plan with [[sources]] after its sources, copied beside it and
    locked first (the order `prereg lock` needs: a source is pinned by its lock)."""
    sources = load_plan(plan).plan.sources
    d = tmp_path / plan.parent.name
    d.mkdir()
    for s in sources:
        (d / s.study).mkdir()
        shutil.copyfile((plan.parent / s.study / "plan.toml"), d / s.study / "plan.toml")
        lock_plan(d / s.study / "plan.toml")
    shutil.copyfile(plan, d / "plan.toml")
    assert lock_plan(d / "plan.toml").status == "locked"
    assert verify_study(d).exit_code == 0


def test_no_lock_files_in_the_dense_rewards_studies():
    assert not [s for s in PAPER_STUDIES if (REGISTRY / s / "plan.lock").exists()]


@pytest.mark.parametrize("study", MR_GRIDS + MR_NEW)
def test_multi_reward_plans_are_locked_and_evaluate_only_at_the_final_checkpoint(study):
    """The multi-reward plans are locked in the registry; the grids' eval_every slip (B/16 against their
    own comment: evaluation only at the final checkpoint), their per-metric contrasts and the rewriting
    of their citations (line numbers of the papers' plain-text copies → sections and tables; text
    keys only) are dated amendments, and every plan verifies clean (no edit since its last entry)."""
    d = REGISTRY / study
    assert verify_study(d).exit_code == 0
    chain = read_chain(d / "plan.toml")
    plan = load_plan(d).plan
    assert plan.budget.eval_every == "B/1"
    kinds = [e["kind"] for e in chain.entries]
    if study in MR_GRIDS:
        assert kinds == ["lock", "amendment", "amendment", "amendment"]
        first = chain.entries[1]
        assert [(c["key"], c["old"], c["new"]) for c in first["changes"]] == [("budget.eval_every", "B/16", "B/1")]
        assert "final checkpoint" in first["reason"]
        assert all(c["key"].startswith("contrasts") for c in chain.entries[2]["changes"])
        cites = chain.entries[3]
        assert "Citations rewritten" in cites["reason"] and cites["changes"]
        text_keys = ("source", "description", "rules")
        assert all(c["key"].rsplit(".", 1)[-1] in text_keys for c in cites["changes"]), cites["changes"]
    else:
        assert kinds == ["lock"]


def test_plans_record_what_the_paper_fixes():
    s25 = load_plan(REGISTRY / "S25").plan
    assert s25.study.seeds == list(range(5, 17)) and s25.budget.tokens == 12_250_000
    assert [f.members for f in s25.families] == [["P1", "P2"]]
    s35 = load_plan(REGISTRY / "S35").plan
    assert s35.families[0].members == ["T1", "T2", "T3", "T4"] and s35.train_to("mc_k4") == 4.0
    assert s35.contrast("T1").reading_point.kind == "control_time"
    for sid, margin in (("S28", 0.01), ("S31", 0.01), ("S32", 0.01), ("S33", 0.01), ("S34", 0.02)):
        assert load_plan(REGISTRY / sid).plan.statistics.margin == margin
    s26 = load_plan(REGISTRY / "S26").plan
    assert {f.name for f in s26.families} == {"equivalence", "superiority"}
    # values the paper does not state are said to be not stated
    assert "not stated" in (REGISTRY / "S02" / "plan.toml").read_text()
    assert "not stated" in (REGISTRY / "S14" / "plan.toml").read_text()


def _with(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def test_s1_learning_rate_amendment_replays(tmp_path):
    """S1's dated amendment: lock the pre-pilot plan, then amend the learning rate to 1e-6."""
    text = (REGISTRY / "S01" / "plan.toml").read_text()
    d = tmp_path / "S01"
    d.mkdir()
    (d / "plan.toml").write_text(_with(text, "learning_rate = 1e-6 ", "learning_rate = 1e-5 "))
    lock_plan(d / "plan.toml")
    (d / "plan.toml").write_text(text)
    e = amend_plan(d / "plan.toml", "pilot: 1e-5 degraded every configuration; the stability probe selected 1e-6").entry
    assert [(c["key"], c["old"], c["new"]) for c in e["changes"]] == [("recipe.update.learning_rate", 1e-5, 1e-6)]
    assert verify_study(d).exit_code == 0
    rep = load_reported(REGISTRY / "S01")
    assert "learning rate" in rep.amendments[0].description.lower()


def test_s2_two_amendments_replay(tmp_path):
    """S2's two dated amendments added rules before the parts they govern ran."""
    text = (REGISTRY / "S02" / "plan.toml").read_text()
    plan = load_plan(REGISTRY / "S02").plan
    rules = [r for r in plan.admission.rules if r.startswith("Amendment")]
    assert len(rules) == 2
    d = tmp_path / "S02"
    d.mkdir()
    line = next(ln for ln in text.splitlines() if ln.startswith("rules = ") and "Amendment 1" in ln)
    drop = lambda keep: text.replace(line, "rules = " + json.dumps(rules[:keep], ensure_ascii=False))  # noqa: E731
    (d / "plan.toml").write_text(drop(0))
    lock_plan(d / "plan.toml")
    (d / "plan.toml").write_text(drop(1))
    amend_plan(d / "plan.toml", "amendment 1: rules for a part of the study before it ran")
    (d / "plan.toml").write_text(text)
    amend_plan(d / "plan.toml", "amendment 2: rules for a further part before it ran")
    chain = read_chain(d / "plan.toml")
    assert [e["kind"] for e in chain.entries] == ["lock", "amendment", "amendment"]
    assert verify_study(d).exit_code == 0
    assert len(load_reported(REGISTRY / "S02").amendments) == 2


# --------------------------------------------------------------------------- reported records


@pytest.mark.parametrize("study", PAPER_STUDIES + MR_GRIDS + MR_NEW)
def test_every_reported_record_parses_and_names_plan_contrasts(study):
    rep = load_reported(REGISTRY / study)
    plan = load_plan(REGISTRY / study).plan
    assert rep.study == plan.study.id
    ids = {c.id for c in plan.contrasts}
    assert all(r.contrast in ids for r in rep.rows if r.contrast)
    assert rep.rows or rep.endpoints
    assert all(r.source for r in rep.rows)


def test_extract_rows_are_all_recorded():
    rows = [r for s in PAPER_STUDIES for r in load_reported(REGISTRY / s).rows]
    assert sum(r.figure == 7 for r in rows) == 31 and sum(r.figure == 8 for r in rows) == 28
    assert sum(r.table == "3" and not r.rebuilt for r in rows) == 14  # every surviving Table 3 row
    assert sum(r.table == "15" or (r.source.startswith("Table 15")) for r in rows) == 12
    assert len(rows) >= 200


def test_recheck_of_the_registry_has_no_unexplained_mismatch():
    res = recheck(REGISTRY, PAPER_STUDIES)
    assert res.exit_code == 0, [(r.study, r.row, r.checks) for r in res.unexplained]
    c = res.counts()
    assert c["consistent"] >= 240 and c["inconsistent"] == 0, c  # 247 with the cross-row checks (was 187)
    rows = {(r.study, r.row): r for r in res.rows}
    # one of each cross-row check as the registry records it (tests/registry/test_relations.py tests each)
    assert rows["S20", "L3455-filter-36"].status == "consistent"  # pooled from S15 and S20 ...
    assert any(t["test"] == "pooled_half_width" for t in rows["S15", "L3390-filter"].tests)  # ... named in S15
    assert any(t["test"] == "difference_sd" for t in rows["S25", "T3-k2"].tests)
    assert any(t["test"] == "same_low" for t in rows["S19", "T1-l5"].tests)
    assert rows["S12", "T9-calibration-random"].status == "consistent"
    explained = {(r.study, r.row) for r in res.rows if r.status == "explained"}
    assert explained == {("S3", "E-reuse")}
    inferred = {r.study for r in res.rows if "inferred" in r.basis}
    assert {"S1", "S8", "S9"} <= inferred


def test_recheck_details_match_the_statistics_notes():
    rows = {(r.study, r.row): r for r in recheck(REGISTRY, ["S1", "S8", "S26", "S17"]).rows}
    # S1: the printed Holm p fits a family of three, not two (docs/statistics.md)
    assert rows["S1", "T3-mc-k4"].status == "consistent" and "m=3 (inferred)" in rows["S1", "T3-mc-k4"].basis
    assert rows["S8", "F7-filter"].status == "consistent"
    # S26's TD TOST Holm value: exact Holm over its printed family, at the edge of rounding
    td = rows["S26", "L3115-td"]
    assert td.status == "consistent" and "exact Holm" in td.checks[0]
    # S17's non-inferiority Holm value
    assert rows["S17", "L4345-P2"].status == "consistent"


def test_recheck_row_flags_and_explains():
    bad = ReportedRow(id="x", label="x", n=24, mean="+0.007", ci_low="+0.002", ci_high="+0.012", p=".08", source="t")
    assert recheck_row("T", bad).status == "inconsistent"
    explained = bad.model_copy(update={"explanation": "a typo in the paper"})
    assert recheck_row("T", explained).status == "explained"
    off = ReportedRow(id="y", label="y", n=24, mean="+0.010", ci_low="+0.002", ci_high="+0.012", source="t")
    assert recheck_row("T", off).status == "inconsistent"  # mean off the interval's centre
    boot = ReportedRow(id="z", label="z", n=5, mean="-0.1", ci_low="-0.2", ci_high="-0.05", ci_kind="bootstrap", source="t")
    assert recheck_row("T", boot).status == "no test"  # without d_z only the estimate's place is checked
    with pytest.raises(ValueError):
        ReportedRow(id="w", label="w", p=".05", source="t")  # a printed test without an interval


def test_bootstrap_rows_are_checked_against_n_and_d_z():
    # Table 17, α = 4: −0.105 [−0.144, −0.061], n = 6, d_z −1.83 (s ≈ 0.057, width ≈ 1.46 s)
    row = ReportedRow(id="a4", label="a4", n=6, mean="-0.105", ci_low="-0.144", ci_high="-0.061", ci_kind="bootstrap",
                      d_z="-1.83", source="t")
    r = recheck_row("T", row)
    assert r.status == "consistent" and r.tests[0]["test"] == "bootstrap_width" and r.tests[0]["match"]
    # attacks: a d_z that gives another SD, an interval twice as wide, an estimate outside its interval
    for bad in ({"d_z": "-0.90"}, {"ci_low": "-0.190", "ci_high": "-0.020"}, {"mean": "-0.150"}):
        assert recheck_row("T", row.model_copy(update=bad)).status == "inconsistent", bad
    assert recheck_row("T", row.model_copy(update={"d_z": "-0.90", "explanation": "typo"})).status == "explained"
    # n = 3: the interval is the observed range, between √3·s and 2·s wide (Table 22's self-log-ratio row)
    three = row.model_copy(update={"n": 3, "mean": "-0.313", "ci_low": "-0.355", "ci_high": "-0.275", "d_z": "-7.81"})
    assert recheck_row("T", three).status == "consistent"
    assert recheck_row("T", three.model_copy(update={"ci_low": "-0.365"})).status == "inconsistent"  # wider than 2·s
    # a ratio without n (Table 6's efficiencies): the estimate inside its interval, nothing more
    eff = ReportedRow(id="e", label="e", mean="1.56", ci_low="1.28", ci_high="2.03", unit="ratio", ci_kind="bootstrap", source="t")
    assert recheck_row("T", eff).status == "no test"
    assert recheck_row("T", eff.model_copy(update={"mean": "2.10"})).status == "inconsistent"


def test_bootstrap_interval_recomputed_from_per_seed_values():
    # §G.5: the disagreement gate minus ungated, five printed per-seed differences
    row = ReportedRow(id="g", label="g", n=5, mean="+0.056", ci_low="+0.007", ci_high="+0.094", ci_kind="bootstrap",
                      per_seed=["-0.035", "+0.050", "+0.070", "+0.080", "+0.115"], source="t")
    r = recheck_row("T", row)
    assert r.status == "consistent" and {t["test"] for t in r.tests} == {"bootstrap_low", "bootstrap_high"}
    for bad in ({"ci_low": "+0.020"}, {"ci_high": "+0.110"}, {"mean": "+0.060"}, {"n": 6}):
        assert recheck_row("T", row.model_copy(update=bad)).status == "inconsistent", bad


def test_p_values_printed_beside_d_z_are_recomputed_from_d_z_and_n():
    # Table 17, α = 4: one-sided paired-t p = 0.0033 (§H.4) beside d_z −1.83, n = 6
    row = ReportedRow(id="a4", label="a4", n=6, mean="-0.105", ci_low="-0.144", ci_high="-0.061", ci_kind="bootstrap",
                      d_z="-1.83", dz_p_less="0.0033", source="t")
    r = recheck_row("T", row)
    assert r.status == "consistent" and r.tests[0]["test"] == "dz_p_less" and r.tests[0]["match"]
    # attacks: a p that d_z and n cannot give, the wrong direction, a two-sided reading
    for bad in ({"dz_p_less": "0.0040"}, {"dz_p_less": None, "dz_p_greater": "0.0033"},
                {"dz_p_less": None, "dz_p": "0.0033"}):
        assert recheck_row("T", row.model_copy(update=bad)).status == "inconsistent", bad
    # a row without an interval is checkable through d_z alone (Table 24, α = 5: −0.092, d_z −0.77, n = 10)
    bare = ReportedRow(id="s5", label="s5", n=10, mean="-0.092", d_z="-0.77", dz_p_less="0.02", source="t")
    assert recheck_row("T", bare).status == "consistent"
    assert recheck_row("T", bare.model_copy(update={"dz_p_less": "0.04"})).status == "inconsistent"
    # TOST at the row's margin (Table 17, α = 0.25: paired-t TOST p = 0.025 at ±0.03)
    tost = ReportedRow(id="t", label="t", n=14, mean="-0.005", ci_low="-0.026", ci_high="+0.018", ci_kind="bootstrap",
                       d_z="-0.12", dz_tost_p="0.025", margin=0.03, source="t")
    assert recheck_row("T", tost).status == "consistent"
    assert recheck_row("T", tost.model_copy(update={"margin": 0.02})).status == "inconsistent"
    with pytest.raises(ValueError, match="needs n and d_z"):
        ReportedRow(id="w", label="w", n=10, dz_p=".05", source="t")
    with pytest.raises(ValueError, match="needs the mean"):
        ReportedRow(id="w", label="w", n=10, d_z="0.5", dz_tost_p=".05", source="t")


def test_registry_bootstrap_rows_are_all_checked():
    rows = [r for r in recheck(REGISTRY, ["equal-iteration", "S02"]).rows]
    assert all(r.status in ("consistent", "no test") for r in rows)
    assert sum(r.status == "consistent" for r in rows if r.study == "equal-iteration") >= 23


def test_printed_interval_reads_numbers_ranges_and_units():
    assert printed_interval("0.82×") == pytest.approx((0.815, 0.825))
    assert printed_interval("33%") == pytest.approx((32.5, 33.5))
    assert printed_interval("0.254-0.282") == pytest.approx((0.2535, 0.2825))
    assert printed_interval("2.8–23") == pytest.approx((2.75, 23.5))
    assert printed_interval("−0.05") == pytest.approx((-0.055, -0.045))
    assert printed_interval("307 ms") == pytest.approx((306.5, 307.5))
    for bad in ("below base", "0.5-0.2", "0.1 / 0.2", ""):
        with pytest.raises(ValueError):
            printed_interval(bad)


def test_endpoint_checks_recompute_within_rounding_and_catch_a_wrong_value():
    """A printed ratio, difference, rounding or ordering is consistent only when values inside every
    printed number's rounding interval satisfy it (0.579 / 0.708 = 0.8178: printed 0.82, not 0.80)."""
    ok = lambda **kw: check_endpoint(EndpointCheck(**kw))[0]  # noqa: E731
    assert ok(rule="ratio", of=["0.579", "0.708"], printed="0.82")
    assert not ok(rule="ratio", of=["0.579", "0.708"], printed="0.80")
    assert not ok(rule="ratio", of=["0.579", "0.708"], printed="0.83")
    assert ok(rule="difference", of=["0.481", "0.453"], printed="3", scale=100)  # "3-5 pp"
    assert not ok(rule="difference", of=["0.481", "0.453"], printed="3")  # the same difference as a fraction
    assert not ok(rule="difference", of=["0.634", "0.581"], printed="6", scale=100)
    assert ok(rule="rounds_to", of=["0.634"], printed="0.63") and not ok(rule="rounds_to", of=["0.636"], printed="0.63")
    assert ok(rule="within", of=["0.274"], printed="0.26-0.29") and not ok(rule="within", of=["0.31"], printed="0.26-0.29")
    assert ok(rule="less", of=["307", "359"]) and not ok(rule="less", of=["359", "307"])
    assert ok(rule="greater", of=["0.215", "0.164"]) and not ok(rule="greater", of=["0.164", "0.215"])
    # an ordering holds if some values within rounding satisfy it: 0.50 < 0.5 is attainable, 0.51 < 0.5 is not
    assert ok(rule="less", of=["0.50", "0.5"]) and not ok(rule="less", of=["0.56", "0.5"])
    # the recomputed interval is the interval arithmetic of the printed ones
    _, (lo, hi), line = check_endpoint(EndpointCheck(rule="ratio", of=["0.172", "0.201"], printed="0.86"))
    assert (lo, hi) == pytest.approx((0.1715 / 0.2015, 0.1725 / 0.2005)) and "0.86" in line


def test_endpoint_check_records_refuse_what_recheck_could_not_read():
    for bad in ({"rule": "ratio", "of": ["0.5"], "printed": "1"},            # a ratio needs two operands
                {"rule": "rounds_to", "of": ["0.5", "0.4"], "printed": "1"},  # a rounding takes one
                {"rule": "less", "of": ["1", "2"], "printed": "1"},           # an ordering prints no result
                {"rule": "ratio", "of": ["1", "2"]},                          # a ratio needs its printed result
                {"rule": "ratio", "of": ["high", "2"], "printed": "1"},       # not a number
                {"rule": "mean", "of": ["1", "2"], "printed": "1"}):          # no such rule
        with pytest.raises(ValueError):
            EndpointCheck(**bad)


def test_recheck_endpoint_statuses():
    base = dict(id="e", label="e", metric="R_P", value="0.579 (0.82×)", source="t")
    assert recheck_endpoint("T", Endpoint(**base)).status == "not checkable"
    good = Endpoint(**base, checks=[EndpointCheck(rule="ratio", of=["0.579", "0.708"], printed="0.82")])
    r = recheck_endpoint("T", good)
    assert r.status == "consistent" and r.tests[0]["match"] and r.test == "endpoint: ratio"
    wrong = Endpoint(**base, checks=[EndpointCheck(rule="ratio", of=["0.579", "0.708"], printed="0.82"),
                                     EndpointCheck(rule="less", of=["0.9", "0.708"])])
    r = recheck_endpoint("T", wrong)
    assert r.status == "inconsistent" and "MISMATCH" in r.checks[1] and [t["match"] for t in r.tests] == [True, False]
    assert recheck_endpoint("T", wrong.model_copy(update={"explanation": "the paper's typo"})).status == "explained"
    zero = Endpoint(**base, checks=[EndpointCheck(rule="ratio", of=["0.5", "0.0"], printed="1")])
    assert recheck_endpoint("T", zero).status == "inconsistent"  # a zero denominator cannot be recomputed


def test_recheck_checks_the_multi_reward_endpoints():
    """Every multi-reward endpoint is rechecked; none is inconsistent, and those with a check hold."""
    mr = [d.name for d in study_dirs(REGISTRY) if d.name.startswith("mr-")]
    res = recheck(REGISTRY, mr)
    eps = {(r.study, r.row): r for r in res.rows if r.test.startswith("endpoint")}
    n_ep = sum(len(load_reported(REGISTRY / s).endpoints) for s in mr)
    assert len(eps) == n_ep >= 44
    assert res.counts()["inconsistent"] == 0 and res.exit_code == 0
    assert sum(r.status == "consistent" for r in eps.values()) >= 35
    assert eps["mr-q30b", "b-additive"].status == "consistent"
    assert eps["mr-code-fast", "symmetric"].status == "not checkable"  # "below base": no base value printed


def test_exact_holm_ranges_are_monotone_bounds():
    plan = load_plan(REGISTRY / "S15").plan
    rows = load_reported(REGISTRY / "S15").rows
    ex = family_holm_ranges(rows, plan)
    assert set(ex) == {"P1", "P2"}
    assert ex["P2"][0] <= 0.011 <= ex["P2"][1] and ex["P1"][0] <= 0.039 <= ex["P1"][1]


# --------------------------------------------------------------------------- a small registry for the CLI and builders

SMALL_REPORTED = '''
study = "S25"
paper = "dense-rewards"
[[rows]]
id = "a"
contrast = "P1"
label = "Monte-Carlo reward, k=1"
model = "Qwen2.5"
n = 12
mean = "-0.068"
ci_low = "-0.076"
ci_high = "-0.060"
tier = "primary"
test = "Holm p=1.5x10^-9"
holm_p = "1.5x10^-9"
source = "Figure 7"
line = 2714
figure = 7
table = "3"
block = "Dense rewards within a completion"
[[rows]]
id = "b"
label = "Random choice"
model = "Qwen2.5"
n = 12
mean = "-0.001"
ci_low = "-0.008"
ci_high = "+0.005"
test = "TOST p<.001"
tost_p = "<.001"
source = "Figure 8"
line = 2827
figure = 8
table = "4"
block = "Random choice of the filter's candidates"
rebuilt = true
'''


@pytest.fixture
def small_registry(tmp_path) -> Path:
    root = tmp_path / "registry"
    (root / "S25").mkdir(parents=True)
    shutil.copyfile(REGISTRY / "S25" / "plan.toml", root / "S25" / "plan.toml")
    (root / "S25" / "reported.toml").write_text(SMALL_REPORTED)
    (root / "cpu-x").mkdir()  # a plan without a reported record (the CPU studies)
    shutil.copyfile(REGISTRY / "S16" / "plan.toml", root / "cpu-x" / "plan.toml")
    return root


def test_registry_states_and_cli(small_registry):
    states = {s.folder: s for s in registry_states(small_registry)}
    assert states["S25"].plan_valid and states["S25"].reported_rows == 2 and states["cpu-x"].reported_rows is None
    lock_plan(small_registry / "S25" / "plan.toml")
    (small_registry / "S25" / "runs" / "outcome" / "seed-5").mkdir(parents=True)
    (small_registry / "S25" / "report").mkdir()
    (small_registry / "S25" / "report" / "report.md").write_text("# report\n")
    s = {s.folder: s for s in registry_states(small_registry)}["S25"]
    assert (s.locked, s.runs, s.report) == ("yes", 1, True)
    res = _run("registry", "--root", small_registry)
    assert res.exit_code == 0 and "S25" in res.output and "cpu-x" in res.output and "2 rows" in res.output
    (small_registry / "cpu-x" / "plan.toml").write_text("[study]\nid = 1\n")
    res = _run("registry", "--root", small_registry)
    assert res.exit_code == 2 and "✗" in res.output


def test_recheck_cli(small_registry):
    res = _run("recheck", "--all", "--root", small_registry)
    assert res.exit_code == 0 and "consistent" in res.output and "cpu-x" in res.output
    assert _run("recheck", "s25", "--root", small_registry).exit_code == 0  # by plan id, any case
    assert find_study(small_registry, "S25").name == "S25"
    assert _run("recheck", "--root", small_registry).exit_code == 2  # neither a study nor --all
    assert _run("recheck", "S99", "--root", small_registry).exit_code == 2
    assert _run("recheck", "cpu-x", "--root", small_registry).exit_code == 2  # no reported record
    rep = small_registry / "S25" / "reported.toml"
    rep.write_text(rep.read_text().replace('tost_p = "<.001"', 'tost_p = ".30"'))
    res = _run("recheck", "--all", "--root", small_registry)
    assert res.exit_code == 1 and "unexplained mismatch" in res.output
    rep.write_text(rep.read_text().replace('rebuilt = true', 'rebuilt = true\nexplanation = "printed as .30 in the paper"'))
    assert _run("recheck", "--all", "--root", small_registry).exit_code == 0
    rep.write_text(rep.read_text() + "\nbogus = 1\n")
    res = _run("recheck", "--all", "--root", small_registry)
    assert res.exit_code == 2 and "bogus" in res.output


def test_a_plan_that_does_not_load_stops_its_recheck(small_registry):
    """Never rechecked against default margins in place of the plan's own: the plan's error, named."""
    plan = small_registry / "S25" / "plan.toml"
    plan.write_text(plan.read_text().replace("[study]", "[study]\nbogus_key = 1", 1))
    res = _run("recheck", "S25", "--root", small_registry)
    assert res.exit_code == 2 and "plan.toml" in res.output and "bogus_key" in res.output, res.output


def test_builders_run_on_small_inputs_and_reproduce(small_registry, tmp_path):
    from figures import build_forest_reported, build_recheck_table, build_table3_4

    for mod in (build_table3_4, build_forest_reported, build_recheck_table):
        assert mod.OUTPUT and mod.DESCRIPTION and mod.INPUTS
        first = mod.build(tmp_path / "a", root=small_registry)
        second = mod.build(tmp_path / "b", root=small_registry)
        assert first.name == mod.OUTPUT and first.exists()
        if first.suffix in (".md", ".csv"):
            assert first.read_text() == second.read_text()
    md = (tmp_path / "a" / "table3_4.md").read_text()
    assert "rebuilt from reported summaries" in md and "Random choice †" in md
    assert (tmp_path / "a" / "figure8_forest.png").stat().st_size > 1000
    assert "2 consistent" in (tmp_path / "a" / "recheck_table.md").read_text()
    assert (tmp_path / "a" / "table3.csv").read_text() == (tmp_path / "b" / "table3.csv").read_text()


def test_forest_figures_plot_the_reported_means_and_intervals(small_registry):
    """Figures 7-8 of the dense-rewards paper: one axis, the paper's block header, then a mean dot and a 95%
    interval bar per reported row at its printed values, coloured by the interval's side of 0, with
    the row's label, the ±0.02 band, the paper's fixed x-axis and grey seed dots
    for rows given per-seed values (one dot per value)."""
    from figures.build_forest_reported import XLIM, XTICKS, draw
    from figures.paper_tables import figure_blocks

    for figure, (head, label, mean, lo, hi, color, test) in {
            7: ("Dense rewards", "Monte-Carlo reward, k=1 — Qwen2.5 (n=12) [S25]", -0.068, -0.076, -0.060, "tab:red", "Holm p=1.5x10^-9"),
            8: ("Choice of prompts, Qwen2.5-1.5B", "Random choice — Qwen2.5 (n=12) [S25]", -0.001, -0.008, 0.005, "0.3", "TOST p<.001")}.items():
        blocks = figure_blocks(small_registry, figure)
        assert [b for b, _ in blocks] == [head]
        (row,) = blocks[0][1]
        per_seed = [0.01 * i - 0.06 for i in range(12)]
        for seeds in ({}, {(row.study, row.row.id): per_seed}):
            fig, data = draw(blocks, figure, seeds=seeds)
            (ax,) = fig.axes
            assert ax.get_xlabel().startswith("Δ held-out accuracy, configuration − comparator at matched compute")
            assert ax.get_xlabel().endswith("95% paired-t CI") and ax.get_ylabel() == ""
            assert ax.get_title().startswith(f"Figure {figure} — every matched-compute comparison")
            assert ax.get_xlim() == pytest.approx((-0.165, 0.055)) == XLIM
            assert list(ax.get_xticks()) == pytest.approx([-0.15, -0.10, -0.05, 0.0, 0.05]) == list(XTICKS)
            assert [t.get_text() for t in ax.get_xticklabels()] == ["−0.15", "−0.10", "−0.05", "0.00", "0.05"]
            ticks = ax.get_yticklabels()
            assert [t.get_text() for t in ticks] == [head, label]
            assert [t.get_fontweight() for t in ticks] == ["bold", "normal"]
            dots = [ln for ln in ax.lines if ln.get_gid() == "seeds"]
            assert sum(len(d.get_xdata()) for d in dots) == len(seeds.get((row.study, row.row.id), ()))
            assert int(data["seeds"].sum()) == len(seeds.get((row.study, row.row.id), ()))
            if seeds:
                assert np.allclose(dots[0].get_xdata(), per_seed) and set(dots[0].get_ydata()) == {0}
            (bar,) = [ln for ln in ax.lines if ln.get_gid() == "ci"]
            (dot,) = [ln for ln in ax.lines if ln.get_gid() == "mean"]
            assert np.allclose(bar.get_xdata(), [lo, hi]) and np.allclose(dot.get_xdata(), [mean])
            assert list(bar.get_ydata()) == [0, 0] and list(dot.get_ydata()) == [0]
            assert bar.get_color() == dot.get_color() == color
            assert [t.get_text() for t in ax.texts] == [test]
            band = ax.patches[0]
            assert band.get_label() == "±0.02 band" and (band.get_x(), band.get_width()) == pytest.approx((-0.02, 0.04))
            assert data[["block", "label", "mean", "ci_low", "ci_high", "color"]].values.tolist() == [[head, label, mean, lo, hi, color]]


def _printed(text: str) -> float:
    return float(text.replace("−", "-"))


def test_forest_figures_on_the_registry_plot_every_reported_row_top_down():
    """On the registry itself: every row reported for Figure 7 (8) is drawn, in source-line order
    from the top, at the numbers its reported.toml prints, under the paper's block headers (FIGURE_BLOCKS), with
    no seed dots: no plotted row has
    per-seed values in the paper's text or the registry."""
    from figures.build_forest_reported import XLIM, XTICKS, draw
    from figures.paper_tables import FIGURE_BLOCKS, figure_blocks

    for figure in (7, 8):
        printed = [(d.name, r) for d in study_dirs(REGISTRY) if (d / "reported.toml").exists()
                   for r in load_reported(d).rows if r.figure == figure and r.mean is not None and r.ci_low is not None]
        printed.sort(key=lambda x: (x[1].line or 0, load_reported(REGISTRY / x[0]).study))
        blocks = figure_blocks(REGISTRY, figure)
        assert [b for b, _ in blocks] == [h for _, h in FIGURE_BLOCKS[figure]]
        fig, data = draw(blocks, figure)
        (ax,) = fig.axes
        assert ax.get_xlim() == pytest.approx(XLIM) and list(ax.get_xticks()) == pytest.approx(list(XTICKS))
        n = len(printed)
        bars = [ln for ln in ax.lines if ln.get_gid() == "ci"]
        means = [ln for ln in ax.lines if ln.get_gid() == "mean"]
        assert n > 20 and len(data) == n and len(bars) == len(means) == n
        assert not [ln for ln in ax.lines if ln.get_gid() == "seeds"] and data["seeds"].sum() == 0
        heads = dict((h, line) for line, h in FIGURE_BLOCKS[figure])
        expected, k = [], len(blocks) + n - 1
        for d, r in printed:
            head = max((line, h) for h, line in heads.items() if line < r.line)[1]
            if not expected or expected[-1][0] != head:
                expected.append((head, []))
            expected[-1][1].append((d, r))
        labels = []
        for head, rows in expected:
            labels.append(head)
            k -= 1
            for d, r in rows:
                labels.append(f"{r.label} — {r.model} (n={r.n})" + f" [{load_reported(REGISTRY / d).study}]")
                j = [x for x in range(n) if data["label"][x] == labels[-1] and data["block"][x] == head]
                assert j and data["y"][j[0]] == k
                k -= 1
        for i, (_, r) in enumerate(printed):
            bar, dot = bars[i], means[i]
            assert bar.get_ydata()[0] == dot.get_ydata()[0] == data["y"][i]
            assert np.allclose(bar.get_xdata(), [_printed(r.ci_low), _printed(r.ci_high)]) and dot.get_xdata()[0] == pytest.approx(_printed(r.mean))
            assert bar.get_color() == ("tab:blue" if _printed(r.ci_low) > 0 else "tab:red" if _printed(r.ci_high) < 0 else "0.3")
        ticks = ax.get_yticklabels()
        assert [t.get_text() for t in ticks] == labels
        assert [t.get_text() for t in ticks if t.get_fontweight() == "bold"] == [h for h, _ in expected]
        assert list(data["y"]) == sorted(data["y"], reverse=True)


def test_table3_test_column_is_tost_at_002_with_001_values_in_the_text(tmp_path):
    """Table 3's test column gives TOST at ±0.02 also for the ±0.01 studies (its caption):
    S33's two primary rows (TOST at ±0.01 p=.14, §C.4.6) and S32's V2 (±0.01 p=.015, §C.6.6) get the
    ±0.02 p from the printed summary (‡), their ±0.01 values go to the text; S31's T2 (Table 4) uses
    the printed ±0.02 value (p<10^-4, §C.5.6)."""
    import csv

    from figures import build_table3_4
    from prereg_kit.stats.summary import from_summary

    build_table3_4.build(tmp_path)
    F8_QWEN25 = "Figure 8, Qwen2.5-1.5B block, row Critic prompt filter, "  # the rows' sources
    t3 = {(r["study"], r["source"]): r for r in csv.DictReader(open(tmp_path / "table3.csv"))}
    t4 = {(r["study"], r["source"]): r for r in csv.DictReader(open(tmp_path / "table4.csv"))}
    p200 = from_summary("+0.007", "+0.001", "+0.013", 24, margin=0.02).tost_p
    assert 1e-5 < p200 < 1e-3
    assert t3[("S33", F8_QWEN25 + "third study, fresh seeds")]["test"] == "Holm p=.034; TOST p≈8×10^-5 ‡"
    assert t3[("S33", F8_QWEN25 + "1,543 further test problems")]["test"] == "Holm p=1.3×10^-5; TOST p≈1×10^-8 ‡"
    assert t3[("S32", F8_QWEN25 + "decaying learning rate, both configurations")]["test"] == "V2: Holm p=.59; TOST p≈1×10^-5 ‡"
    assert t4[("S31", "Figure 8, Qwen2.5-1.5B block, row Critic filter, target 0.25, L3–5 pool")]["test"] == "T2: Holm p=.73; TOST p<10^-4"
    assert t3[("S26", "Table 3, row Learned critic, baseline form, Qwen2.5-1.5B")]["test"] == "Holm p=.016, TOST p<10^-5"  # a ±0.02 study: as printed
    assert not any("±0.01" in r["test"] for r in [*t3.values(), *t4.values()])
    md = (tmp_path / "table3_4.md").read_text()
    text3 = md.split("## Table 3")[1].split("## Table 4")[0]
    assert "- S33, Critic prompt filter (Qwen2.5-1.5B, third study, fresh seeds): TOST at ±0.01 p=.14" in text3
    assert "- S32, Critic prompt filter, decaying learning rate (Qwen2.5-1.5B, both configurations): TOST at ±0.01 p=.015" in text3


def test_forest_figures_right_hand_test_is_tost_at_002_as_in_table3(tmp_path):
    """Figures 7-8's right-hand test text is Table 3's test column (TOST at ±0.02, its caption),
    never the ±0.01 value of the studies that preregistered it; a row quoting "TOST(±0.01)" in a
    ±0.02 study, or in a folder without a plan, keeps its printed text."""
    from figures.build_forest_reported import draw
    from figures.build_table3_4 import table_test
    from figures.paper_tables import PrintedRow, figure_blocks, printed_rows, printed_test

    every = printed_rows(REGISTRY)
    shown = []
    for figure in (7, 8):
        fig, data = draw(figure_blocks(REGISTRY, figure), figure)
        (ax,) = fig.axes
        texts = [t.get_text() for t in ax.texts]
        assert texts == list(data["test"]) and not any("±0.01" in t for t in texts)
        shown += texts
    assert "Holm p=.034; TOST p≈8×10^-5 ‡" in shown and "V2: Holm p=.59; TOST p≈1×10^-5 ‡" in shown
    assert "T2: Holm p=.73; TOST p<10^-4" in shown
    for pr in every:
        if pr.row.figure in (7, 8):
            assert printed_test(pr)[0] == table_test(pr, REGISTRY, every)[0]
    # near misses: a ±0.02 study (S26) and a folder with no plan keep "TOST(±0.01)" as printed
    s33 = next(pr for pr in every if pr.study == "S33" and "TOST(±0.01)" in (pr.row.test or ""))
    s26 = next(pr for pr in every if pr.study == "S26")
    moved = PrintedRow(s26.study, s26.folder, s33.row, str(REGISTRY))
    assert printed_test(moved) == (s33.row.test, "")
    assert printed_test(PrintedRow("S33", "S33", s33.row, str(tmp_path))) == (s33.row.test, "")
    assert printed_test(PrintedRow("S33", "S33", s33.row)) == (s33.row.test, "")  # registry not known
    assert printed_test(PrintedRow("S33", "S33", s33.row), REGISTRY)[1] == "TOST at ±0.01 p=.14"
