"""Preregistered sequential looks: the [sequential] table, the spent α inside Holm, the looks in
the lock chain (each attack on them is caught), the audit's stop rule, the family-wise error under
the null by simulation, and `prereg analyze --look` / `prereg dry-run --repeat` end to end."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from paths import ROOT
from plans import SMALL_PLAN, amend_at, clock_at, lock_at

from prereg_kit.analysis.looks import look_units, looks_of_differences, looks_power, rule_changes
from prereg_kit.chain.lock import append_entries, entry_hash, read_chain, serialize
from prereg_kit.chain.look_chain import look_chain_problems, record_look, stopped_run_findings
from prereg_kit.errors import PlanError, ViolationError
from prereg_kit.plan import load_plan
from prereg_kit.stats.group_sequential import conditional_power, look_threshold, repeated_p, sequential_holm

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)
SEQ = SMALL_PLAN + '\n[sequential]\nlooks = [2, 3]\nfutility = { kind = "conditional-power", below = 0.1 }\n'


@pytest.mark.parametrize("table, field, words", [
    ("looks = [3, 2]", "sequential.looks", "strictly increasing"),
    ("looks = [1, 3]", "sequential.looks", "at least 2 seeds"),
    ("looks = [2, 4]", "sequential.looks", "the plan's seed count (3 seeds)"),
    ("looks = [2, 3]\nspending = \"power\"", "sequential", "needs rho"),
    ("looks = [2, 3]\nrho = 2.0", "sequential", "rho is the exponent"),
    ("looks = [2, 3]\ncontrasts = [\"C2\"]", "sequential.contrasts", "only primary"),
    ("looks = [2, 3]\ncontrasts = [\"C9\"]", "sequential.contrasts", "unknown contrast"),
    ("looks = [2, 3]\nfutility = { kind = \"conditional-power\", below = 1.5 }", "sequential.futility.below", "less than 1"),
    ("looks = [2, 3]\nalpha_spending = \"pocock\"", "sequential.alpha_spending", ""),
])
def test_plan_errors_name_the_field(tmp_path, table, field, words):
    p = tmp_path / "plan.toml"
    p.write_text(SMALL_PLAN + "\n[sequential]\n" + table + "\n")
    with pytest.raises(PlanError) as e:
        load_plan(p)
    text = "\n".join(e.value.lines)
    assert field in text and words in text, text


def test_a_valid_table_loads_with_defaults(tmp_path):
    p = tmp_path / "plan.toml"
    p.write_text(SEQ)
    seq = load_plan(p).plan.sequential
    assert seq.looks == [2, 3] and seq.spending == "obrien-fleming" and seq.futility.below == 0.1


def test_a_one_sided_contrast_cannot_be_looked_at(tmp_path):
    p = tmp_path / "plan.toml"
    p.write_text(SEQ.replace('tier = "primary"', 'tier = "primary"\nalternative = "greater"', 1))
    with pytest.raises(PlanError, match="sequential.contrasts.*two-sided"):
        load_plan(p)


# ------------------------------------------------------------------------------ the rule


def test_repeated_p_and_sequential_holm_agree():
    """Holm at α on the repeated p-values is the step-down on the look's nominal p (the module rule)."""
    info = (3.0, 6.0)
    rng = np.random.default_rng(0)
    for _ in range(40):
        p = rng.uniform(0, 0.06, size=3)
        for look in (1, 2):
            rej = sequential_holm(p, 0.05, info, look)
            rp = np.array([repeated_p(x, info, look) for x in p])
            order = np.argsort(rp)
            holm = np.zeros(3, bool)
            for j, i in enumerate(order):
                if rp[i] > 0.05 / (3 - j) + 1e-9:
                    break
                holm[i] = True
            assert (rej == holm).all(), (p, look)


def test_an_interim_look_spends_less_than_the_fixed_test():
    """O'Brien–Fleming at half the information: the look must reach p ≈ .003, not .05; the last
    look nearly .05 (the check an unadjusted look would get past)."""
    assert look_threshold(0.05, (3, 6), 1) == pytest.approx(0.00305, abs=2e-5)
    assert 0.045 < look_threshold(0.05, (3, 6), 2) < 0.05
    assert not sequential_holm([0.01], 0.05, (3, 6), 1)[0]  # a fixed-sample test would reject this
    assert sequential_holm([0.01], 0.05, (3, 6), 2)[0]
    assert conditional_power(0.0, (3, 6), 1, 1.97) < 0.1 < conditional_power(2.0, (3, 6), 1, 1.97)


# ------------------------------------------------------------------------------ simulation


def _plan(tmp_path, looks="[3, 6]", seeds="[0, 1, 2, 3, 4, 5]", futility="none", members='["C1", "C3"]'):
    text = SMALL_PLAN.replace("seeds = [0, 1, 2]", f"seeds = {seeds}").replace('members = ["C1"]', f"members = {members}")
    tier = "primary" if "C3" in members else "secondary"
    text += f'\n[[contrasts]]\nid = "C3"\ntreatment = "B"\ncontrol = "A"\nat = "2B"\ntier = "{tier}"\n'
    text = text.replace('tokens = "1M"', 'tokens = "1M"\ntrain_to = "2B"')
    text += f'\n[sequential]\nlooks = {looks}\nfutility = {{ kind = "{futility}" }}\n'
    p = tmp_path / "plan.toml"
    p.write_text(text)
    return load_plan(p).plan


def _fwer(plan, n_rep: int, seed: int, effect: float = 0.0, naive: bool = False) -> tuple[float, list]:
    rng = np.random.default_rng(seed)
    n = plan.sequential.looks[-1]
    hits, runs = 0, []
    for _ in range(n_rep):
        d = {"C1": rng.normal(effect, 1.0, n), "C3": rng.normal(0.0, 1.0, n)}
        if naive:  # every look tested at the fixed-sample α: optional stopping
            from prereg_kit import stats
            hits += any(stats.paired_t(d[c][:k]).p <= 0.025 for c in d for k in plan.sequential.looks)
            continue
        r = looks_of_differences(d, plan)
        runs.append(r)
        hits += r[-1] in ("stop: efficacy", "final: efficacy")
    return hits / n_rep, runs


def test_family_wise_error_stays_at_alpha_under_the_null(tmp_path):
    """Two primary contrasts in one Holm family, looks at 3 and 6 seeds, no effect: the chance of
    any rejection at any look stays within α + 3 Monte-Carlo SE; testing each look at the
    Bonferroni share without spending does not (the check this test tries to get past)."""
    plan = _plan(tmp_path)
    n_rep = 3000
    fwer, _ = _fwer(plan, n_rep, seed=1)
    slack = 3 * np.sqrt(0.05 * 0.95 / n_rep)
    assert fwer <= 0.05 + slack, fwer
    naive, _ = _fwer(plan, n_rep, seed=1, naive=True)
    assert naive > 0.05 + slack, naive


def test_family_wise_error_with_three_looks_and_pocock(tmp_path):
    plan = _plan(tmp_path, looks="[4, 8, 12]", seeds='"0-11"', members='["C1", "C3"]')
    plan = plan.model_copy(update={"sequential": plan.sequential.model_copy(update={"spending": "pocock"})})
    fwer, runs = _fwer(plan, 2000, seed=2)
    assert fwer <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 2000), fwer
    power = looks_power(runs, plan)
    assert list(power["look"]) == [1, 2, 3] and power["rejected_by_look"].is_monotonic_increasing


def test_power_at_the_final_look_and_futility(tmp_path):
    plan = _plan(tmp_path, futility="conditional-power", members='["C1"]')
    _, runs = _fwer(plan, 400, seed=3, effect=1.5)
    power = looks_power(runs, plan)
    assert power["rejected_by_look"].iloc[-1] > 0.6
    _, null_runs = _fwer(plan, 400, seed=4)
    assert looks_power(null_runs, plan)["stop_futility"].iloc[0] > 0.05  # futility stops some null studies early


def test_the_looks_read_a_paired_t_on_its_units_at_its_degrees_of_freedom(tmp_path):
    """A paired contrast's looks have its seeds as units, a pooled one seeds × pairs; a contrast
    whose test is not the t has none (its p meets the z boundary)."""
    plan = _plan(tmp_path)
    assert look_units(plan, "C1") == (3, 6)
    c1 = plan.contrasts[0]
    pooled = c1.model_copy(update={"design": "pooled", "pairs": [["B", "A"], ["B", "A"]]})
    wilcoxon = c1.model_copy(update={"test": "wilcoxon"})
    assert look_units(plan.model_copy(update={"contrasts": [pooled]}), "C1") == (6, 12)
    assert look_units(plan.model_copy(update={"contrasts": [wilcoxon]}), "C1") is None


def test_a_look_recorded_with_z_boundaries_is_reread_with_the_t_ones():
    """registry/cpu-grpo-sequential recorded look 1 (p = .074 at 2 seeds) against z 2.963 and its
    final look (p = .0012 at 4 seeds) against the z boundary's nominal p .0490. Look 1's t boundary
    (208.7 on 1 df) has the same nominal p (.00305, all the α it spends); the final look's is lower
    (about .047): a note for each says the decision stands."""
    study = ROOT / "registry" / "cpu-grpo-sequential"
    plan = load_plan(study / "plan.toml").plan
    first, final = rule_changes(read_chain(study / "plan.toml"), plan, 2)
    assert first.startswith("look 1, contrast C1: recorded (lock entry 6) against boundary z 2.963")
    assert "t(1) 208.68" in first and "0.003051, the same)" in first and first.endswith("the recorded decision stands")
    assert final.startswith("look 2, contrast C1: recorded (lock entry 11) against boundary z 1.969")
    assert "t(3) 3.2" in final and final.endswith("the recorded decision stands")


# ------------------------------------------------------------------------------ the lock chain


def _locked(tmp_path):
    d = tmp_path / "study"
    d.mkdir()
    (d / "plan.toml").write_text(SEQ)
    lock_at(d / "plan.toml", T0)
    return d / "plan.toml"


def _seal(plan_path, seeds, t):
    with clock_at(t):
        append_entries(plan_path, lambda c: [{"kind": "seal", "configuration": conf, "seed": s}
                                             for s in seeds for conf in ("A", "B")], what="seal")


def _look(plan_path, k, seeds, decision="continue to look 2", p=0.2):
    chain = read_chain(plan_path)
    return {"look": k, "looks": [2, 3], "seeds": seeds, "configurations": ["A", "B"], "decision": decision,
            "plan_entry": chain.last["index"], "plan_hash": chain.last["content_sha256"],
            "contrasts": [{"contrast": "C1", "p": p, "repeated_p": 0.5, "decision": decision}]}


def _rewrite(plan_path, entries):
    """Rewrite the chain consistently (indices, prev, hashes): what a forger would do."""
    prev = None
    for i, e in enumerate(entries):
        e["index"], e["prev"] = i, prev
        e["hash"] = entry_hash(e)
        prev = e["hash"]
    (plan_path.parent / "plan.lock").write_text(serialize({"format": "prereg-lock/1", "entries": entries}))


def test_looks_are_recorded_in_order_and_once(tmp_path):
    plan = _locked(tmp_path)
    _seal(plan, [0, 1], T0 + timedelta(hours=1))
    with clock_at(T0 + timedelta(hours=2)):
        with pytest.raises(ViolationError, match="look 1 has no entry"):  # skip a look
            record_look(plan, _look(plan, 2, [0, 1, 2], "final"))
        state, entry = record_look(plan, _look(plan, 1, [0, 1]))
        assert state == "recorded" and entry["kind"] == "look"
        assert record_look(plan, _look(plan, 1, [0, 1]))[0] == "unchanged"  # the same look read again
        with pytest.raises(ViolationError, match="already recorded"):  # the same look, another result
            record_look(plan, _look(plan, 1, [0, 1], p=0.01))
    _seal(plan, [2], T0 + timedelta(hours=3))
    with clock_at(T0 + timedelta(hours=4)):
        record_look(plan, _look(plan, 2, [0, 1, 2], "final"))
        with pytest.raises(ViolationError, match="already recorded"):  # re-record look 1 after look 2
            record_look(plan, _look(plan, 1, [0, 1], p=0.3))
    assert look_chain_problems(read_chain(plan)) == []


def test_forged_chains_are_flagged(tmp_path):
    plan = _locked(tmp_path)
    _seal(plan, [0, 1, 2], T0 + timedelta(hours=1))
    base = json.loads((plan.parent / "plan.lock").read_text())["entries"]
    t = "2026-01-05T15:00:00Z"
    look1 = {**_look(plan, 1, [0, 1]), "kind": "look", "time": t}
    look2 = {**_look(plan, 2, [0, 1, 2], "final"), "kind": "look", "time": t}
    # skip a look
    _rewrite(plan, [dict(e) for e in base] + [dict(look2)])
    assert any("no entry for look 1" in x for x in look_chain_problems(read_chain(plan)))
    # re-record look 1 after look 2
    _rewrite(plan, [dict(e) for e in base] + [dict(look1), dict(look2), {**look1, "contrasts": [{"contrast": "C1", "p": 0.01}]}])
    problems = look_chain_problems(read_chain(plan))
    assert any("look 1 recorded again" in x for x in problems), problems
    _rewrite(plan, [dict(e) for e in base] + [dict(look2), dict(look1)])
    assert any("look 1 recorded after look 2" in x for x in look_chain_problems(read_chain(plan)))
    # back-date a look: before the seals of its runs
    early = {**look1, "time": "2026-01-05T12:30:00Z"}
    _rewrite(plan, [dict(base[0]), early] + [dict(e) for e in base[1:]])
    assert any("not sealed before it" in x for x in look_chain_problems(read_chain(plan)))
    # ... or dated before the entry it follows
    _rewrite(plan, [dict(e) for e in base] + [{**look1, "time": "2026-01-05T12:30:00Z"}])
    with pytest.raises(ViolationError, match="times in the chain never go back"):
        read_chain(plan)
    # edit a look entry without rewriting the chain
    _rewrite(plan, [dict(e) for e in base] + [dict(look1)])
    doc = json.loads((plan.parent / "plan.lock").read_text())
    doc["entries"][-1]["decision"] = "stop: efficacy"
    (plan.parent / "plan.lock").write_text(serialize(doc))
    with pytest.raises(ViolationError, match="hash does not match"):
        read_chain(plan)


def test_an_amendment_of_the_looks_after_a_look_is_flagged(tmp_path):
    plan = _locked(tmp_path)
    _seal(plan, [0, 1], T0 + timedelta(hours=1))
    with clock_at(T0 + timedelta(hours=2)):
        record_look(plan, _look(plan, 1, [0, 1]))
    plan.write_text(SEQ.replace('below = 0.1', 'below = 0.2'))
    amend_at(plan, "a looser futility rule", T0 + timedelta(hours=3))
    assert any("the lock fixes the looks" in x for x in look_chain_problems(read_chain(plan)))


def test_a_seed_run_after_a_stop_is_flagged(tmp_path):
    plan = _locked(tmp_path)
    _seal(plan, [0, 1], T0 + timedelta(hours=1))
    with clock_at(T0 + timedelta(hours=2)):
        record_look(plan, _look(plan, 1, [0, 1], "stop: efficacy"))
    chain = read_chain(plan)
    runs = [("A", 0, T0), ("B", 1, T0), ("B", 2, T0 + timedelta(hours=1)), ("A", 2, T0 + timedelta(hours=3))]
    bad, overrun = stopped_run_findings(chain, runs)
    assert len(bad) == 1 and "A/seed-2" in bad[0] and "optional continuation" in bad[0]
    assert len(overrun) == 1 and "B/seed-2" in overrun[0]
    # a look that said continue flags nothing
    assert stopped_run_findings(chain, [(c, s, t) for c, s, t in runs if s < 2]) == ([], [])


# ------------------------------------------------------------------------------ end to end


def test_analyze_look_by_look_and_dry_run_power(tmp_path, lock_reads):
    """A synthetic study of a two-look plan: the final look before look 1 is refused; look 1 reads
    seeds 0-2 only and is recorded; the final look's report shows both looks; a dry run with
    --repeat reports stopping per look and the power."""
    from typer.testing import CliRunner

    from prereg_kit.cli import app
    from prereg_kit.simulate.dryrun import dry_run

    plan = _plan(tmp_path, members='["C1"]', futility="conditional-power")
    assert plan.sequential.looks == [3, 6]
    res = dry_run(tmp_path / "plan.toml", {"C1": 0.03}, out=tmp_path / "dr", repeat=2, n_resamples=50, progress=False)
    assert (tmp_path / "dr" / "report" / "looks_power.csv").is_file()
    assert list(res.power.attrs["looks"]["look"]) == [1, 2]
    study = str(tmp_path / "dr")
    run = CliRunner().invoke(app, ["analyze", study, "--look", "2", "--resamples", "50"])
    assert run.exit_code == 1 and "look 1 has no entry" in run.stderr, run.stderr
    run = CliRunner().invoke(app, ["analyze", study, "--look", "1", "--resamples", "50", "--json"])
    assert run.exit_code == 0, run.stderr
    rows = {r["contrast"]: r for r in json.loads(run.stdout)["contrasts"]}
    assert rows["C1"]["n"] == 3 and rows["C1"]["seeds"] == "0-2"
    assert json.loads(run.stdout)["sequential"]["look"] == 1
    if rows["C1"]["verdict"].startswith("continue"):  # an interim look gives no hypothesis reading yet
        hyp = json.loads(run.stdout)["hypotheses"][0]
        assert hyp["reading"].startswith("(an interim look") and "gave no reading" not in hyp["reading"]
    lock_reads.clear()
    run = CliRunner().invoke(app, ["analyze", study, "--resamples", "50"])
    assert run.exit_code == 0, run.stderr
    # one read by the analysis (verify, then the look takes that chain), one by the look's record,
    # which re-reads the chain under its OS lock before it appends
    assert lock_reads == [tmp_path / "dr" / "plan.lock"] * 2
    report = (tmp_path / "dr" / "report" / "report.md").read_text()
    assert "## Sequential looks" in report and "| 1 of 2 | 0, 1, 2 | C1 | t(2) " in report and "| 2 of 2 |" in report
    kinds = [e["kind"] for e in read_chain(tmp_path / "dr" / "plan.toml").entries]
    assert kinds.count("look") == 2


def test_an_interim_look_reads_no_hypothesis_yet(tmp_path):
    import pandas as pd

    from prereg_kit.analysis.verdicts import read_hypotheses

    plan = _plan(tmp_path, members='["C1"]')
    df = pd.DataFrame({"contrast": ["C1"], "verdict": ["continue to look 2"]})
    hyp = read_hypotheses(plan, df).iloc[0]
    assert hyp["outcome"] == "continue to look 2" and hyp["reading"].startswith("(an interim look")
