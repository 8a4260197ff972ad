"""Readings over spans of evaluations, tokens/time to a target, log length, per-level accuracy and
sets scored only at the start and B: hand-made curves with known answers, hostile plans refused."""

from __future__ import annotations

import itertools
import tomllib

import numpy as np
import pandas as pd
import pytest
from plans import SMALL_PLAN

from prereg_kit.errors import PlanError
from prereg_kit.plan import ReadingPoint, parse_reading_point, validate_plan
from prereg_kit.readings import (
    ReadingError,
    accuracy_curve,
    first_crossing,
    paired_readings,
    problem_accuracy,
    read_span,
    select_levels,
    share_to_target,
    span_positions,
    target_curves,
    to_target,
)

B = 1600.0
TOK16 = np.array([0] + [k * 100 + 3 for k in range(1, 17)], dtype=float)  # every B/16, a little past each


# ------------------------------------------------------------------------------------ spans


def test_span_positions_follow_the_first_evaluation_at_or_after_each_end():
    assert span_positions(TOK16, "first_half", B) == (1, 8)
    assert span_positions(TOK16, "second_half", B) == (9, 16)
    assert span_positions(TOK16, "all_evals", B) == (1, 16)  # "all sixteen evaluations": not the start
    exact = np.array([0] + [k * 100 for k in range(1, 17)], dtype=float)
    assert span_positions(exact, "first_half", B) == (1, 8)
    quarter = np.array([0, 400, 800, 1200, 1600], dtype=float)
    assert span_positions(quarter, "first_half", B) == (1, 2)
    assert span_positions(quarter, "second_half", B) == (3, 4)


def test_span_positions_refuse_short_or_empty_runs():
    assert span_positions(np.array([0.0]), "first_half", B) is None  # only the start
    assert span_positions(TOK16[:10], "second_half", B) is None  # stops before B
    assert span_positions(TOK16[:10], "all_evals", B) is None
    assert span_positions(np.array([0.0, 2000.0]), "second_half", B) is None  # one evaluation closes both halves
    with pytest.raises(ReadingError, match="unknown span"):
        span_positions(TOK16, "first-half", B)


def _curves(acc: dict[tuple[str, int], list[float]], tokens=TOK16, seconds=None) -> pd.DataFrame:
    rows = []
    for (c, s), a in acc.items():
        for e, v in enumerate(a):
            rows.append(dict(configuration=c, seed=s, eval_index=e, tokens=tokens[e],
                             train_seconds=(seconds or {}).get(c, 1.0) * tokens[e], updates=e, accuracy=v,
                             eval_seed=e, n_problems=2, problem_set="x", eval_set="math", verifier="default"))
    return pd.DataFrame(rows)


def test_read_span_is_the_mean_of_the_span_evaluations():
    acc = list(np.linspace(0.1, 0.5, 17))
    r = read_span(_curves({("t", 0): acc}), "first_half", B).iloc[0]
    assert r["reached"] and r["eval_lo"] == 1 and r["eval_hi"] == 8
    assert r["accuracy"] == pytest.approx(np.mean(acc[1:9]))
    r = read_span(_curves({("t", 0): acc}), "all_evals", B).iloc[0]
    assert r["accuracy"] == pytest.approx(np.mean(acc[1:]))
    short = read_span(_curves({("t", 0): acc[:5]}, tokens=TOK16[:5]), "second_half", B).iloc[0]
    assert not short["reached"] and "second half" in short["note"]


def _eval_rows(acc: dict[tuple[str, int], list[list[int]]]) -> pd.DataFrame:
    """Eval rows: ``acc[run][e][j]`` correct of 10 samples for problem j at evaluation e."""
    rows = []
    for (c, s), by_e in acc.items():
        for e, per in enumerate(by_e):
            for j, k in enumerate(per):
                rows.append(dict(configuration=c, seed=s, eval_index=e, iteration=e, eval_set="math",
                                 problem_id=f"p{j}", eval_seed=7 * s + e, tokens=int(TOK16[e]), train_seconds=float(e),
                                 updates=e, samples=10, correct=k, correct_strict=k, boxed=10, greedy_correct=pd.NA,
                                 level=1 + j % 5, log_length=np.log(100 + 10 * k + s)))
    return pd.DataFrame(rows)


def test_span_pairing_and_per_problem_matrices_agree_with_a_direct_mean():
    rng = np.random.default_rng(1)
    runs = {(c, s): rng.integers(0, 11, (17, 5)).tolist() for c in ("t", "c") for s in range(4)}
    ev = _eval_rows(runs)
    curves = accuracy_curve(ev, eval_set="math")
    pa = problem_accuracy(ev, eval_set="math")
    for kind, (lo, hi) in {"first_half": (1, 8), "second_half": (9, 16), "all_evals": (1, 16)}.items():
        pr = paired_readings(curves, "t", "c", ReadingPoint(kind).at_budget(B), problem_acc=pa)
        for i, s in enumerate(pr.table["seed"]):
            want_t = np.array(runs[("t", s)])[lo:hi + 1].mean(axis=0) / 10
            want_c = np.array(runs[("c", s)])[lo:hi + 1].mean(axis=0) / 10
            assert pr.treatment_matrix[i] == pytest.approx(want_t)
            assert pr.table["difference"].iloc[i] == pytest.approx(want_t.mean() - want_c.mean())


# ------------------------------------------------------------------------------------ to target


def test_first_crossing_interpolates_linearly_and_reports_never_as_inf():
    x = [0, 100, 200, 300]
    assert first_crossing(x, [0.1, 0.2, 0.4, 0.5], 0.3) == pytest.approx(150)
    assert first_crossing(x, [0.1, 0.2, 0.4, 0.5], 0.4) == 200  # exactly at an evaluation
    assert first_crossing(x, [0.5, 0.2, 0.4, 0.5], 0.3) == 0  # starts above: crosses at once
    assert first_crossing(x, [0.1, 0.35, 0.2, 0.5], 0.3) == pytest.approx(80)  # the first crossing, not a later one
    assert first_crossing(x, [0.1, 0.2, 0.2, 0.25], 0.3) == np.inf


def _target_study(n_seeds=4, reach=True):
    """Treatment rises linearly to 0.5 at B, control to 0.4 (plus a seed offset)."""
    acc = {}
    f = TOK16 / B
    for s in range(n_seeds):
        off = 0.01 * s
        acc[("t", s)] = list(0.1 + (0.4 if reach else 0.2) * f + off)
        acc[("c", s)] = list(0.1 + 0.3 * f + off)
    return _curves(acc, seconds={"t": 2.0, "c": 1.0})


def test_to_target_point_estimate_matches_a_hand_computation():
    curves = _target_study()
    point = ReadingPoint("to_target").at_budget(B)
    share, target = share_to_target(target_curves(curves, "t", "c", point), point)
    ctl_at_b = np.mean([0.1 + 0.3 * TOK16[16] / B + 0.01 * s for s in range(4)])
    assert target == pytest.approx(ctl_at_b)
    mean_t = 0.1 + 0.4 * TOK16 / B + 0.015
    k = int(np.flatnonzero(mean_t >= target)[0])
    x = TOK16[k - 1] + (target - mean_t[k - 1]) / (mean_t[k] - mean_t[k - 1]) * (TOK16[k] - TOK16[k - 1])
    assert share == pytest.approx(x / B)
    # on the training-time axis the treatment is twice as slow per token: the share is of the control's time
    tpoint = ReadingPoint("time_to_target").at_budget(B)
    tshare, _ = share_to_target(target_curves(curves, "t", "c", tpoint), tpoint)
    assert tshare == pytest.approx(2 * x / TOK16[16])


def test_to_target_bootstrap_matches_exact_enumeration_of_seed_resamples():
    rng = np.random.default_rng(5)
    acc = {}
    for s in range(4):
        lead = rng.uniform(-0.02, 0.08)
        acc[("t", s)] = list(0.1 + (0.3 + lead) * TOK16 / B + rng.normal(0, 0.01, 17))
        acc[("c", s)] = list(0.1 + 0.3 * TOK16 / B + rng.normal(0, 0.01, 17))
    curves = _curves(acc)
    point = ReadingPoint("to_target").at_budget(B)
    tc = target_curves(curves, "t", "c", point)
    exact = np.sort([share_to_target(tc, point, np.array(idx))[0] for idx in itertools.product(range(4), repeat=4)])
    r = to_target(curves, "t", "c", point, n_resamples=20_000, seed=0)
    # the percentile of an equally weighted enumeration, the same inverted-CDF rule
    for got, q in ((r["ci_low"], 0.025), (r["ci_high"], 0.975)):
        want = exact[int(np.ceil(q * len(exact))) - 1]
        near = exact[max(0, int(np.ceil(q * len(exact))) - 12):int(np.ceil(q * len(exact))) + 12]
        assert near.min() <= got <= near.max(), (got, want)
    assert r["p_no_saving"] == pytest.approx(np.mean(exact >= 1), abs=0.02)


def test_to_target_not_reached_is_inf_and_missing_control_reading_is_refused():
    curves = _target_study(reach=False)
    r = to_target(curves, "t", "c", ReadingPoint("to_target").at_budget(B), n_resamples=200)
    assert np.isinf(r["share"]) and np.isinf(r["ci_high"]) and all(np.isinf(x) for x in r["per_seed"])
    short = curves[~((curves["configuration"] == "c") & (curves["seed"] == 2) & (curves["eval_index"] > 10))]
    with pytest.raises(ReadingError, match="'c' seed 2: no evaluation at or after"):
        to_target(short, "t", "c", ReadingPoint("to_target").at_budget(B), n_resamples=10)
    with pytest.raises(ReadingError, match="share no seed"):
        to_target(curves[(curves["configuration"] == "t") | (curves["seed"] > 9)], "t", "c",
                  ReadingPoint("to_target").at_budget(B), n_resamples=10)


# ------------------------------------------------------------------------------------ metrics


def test_log_length_is_the_mean_of_the_logged_per_problem_log_lengths():
    runs = {("t", 0): [[3, 5, 7]] * 17, ("c", 0): [[1, 1, 1]] * 17}
    ev = _eval_rows(runs)
    cv = accuracy_curve(ev, eval_set="math", metric="log_length")
    got = cv[(cv["configuration"] == "t") & (cv["eval_index"] == 4)]["accuracy"].iloc[0]
    assert got == pytest.approx(np.mean(np.log([130, 150, 170])))
    with pytest.raises(ReadingError, match="log_length.*not logged"):
        accuracy_curve(ev.drop(columns="log_length"), eval_set="math", metric="log_length")
    with pytest.raises(ReadingError, match="not logged"):
        accuracy_curve(ev.assign(log_length=np.where(ev["problem_id"] == "p1", np.nan, ev["log_length"])),
                       eval_set="math", metric="log_length")


def test_levels_select_problems_and_refuse_logs_without_levels():
    runs = {("t", 0): [[10, 0, 5, 0, 10, 2]] * 3}
    ev = _eval_rows(runs)  # levels 1, 2, 3, 4, 5, 1
    cv = accuracy_curve(select_levels(ev, "math", [1]), eval_set="math")
    assert cv["accuracy"].iloc[0] == pytest.approx((1.0 + 0.2) / 2)
    assert cv["n_problems"].iloc[0] == 2
    other = ev.assign(eval_set="other")
    assert len(select_levels(pd.concat([ev, other]), "math", [5])) == 3 + len(other)  # other sets untouched
    with pytest.raises(ReadingError, match="no problem level"):
        select_levels(ev.drop(columns="level"), "math", [5])
    with pytest.raises(ReadingError, match="no problem of these levels"):
        select_levels(ev, "math", [9])
    assert select_levels(ev, "math", []) is ev


# ------------------------------------------------------------------------------------ plans


def _plan(extra_contrast: str = "", sets: str = '[{ name = "test", n_problems = 10 }]') -> str:
    text = SMALL_PLAN.replace('sets = [{ name = "test", n_problems = 10 }]', f"sets = {sets}")
    if extra_contrast:
        text = text.replace("[[families]]", f"[[contrasts]]\nid = \"X\"\ntreatment = \"B\"\ncontrol = \"A\"\n{extra_contrast}\n\n[[families]]")
    return text


def _validate(text: str):
    return validate_plan(tomllib.loads(text), source="plan.toml", text=text)


def _errors(text: str) -> str:
    with pytest.raises(PlanError) as ei:
        _validate(text)
    return "\n".join(ei.value.lines)


@pytest.mark.parametrize("at", ["first_half", "second_half", "all_evals", "to_target", "time_to_target", "to_target:B",
                                "first_half:B"])
def test_new_reading_points_parse_and_round_trip(at):
    tier = "exploratory" if "target" in at else "secondary"
    plan = _validate(_plan(f'at = "{at}"\ntier = "{tier}"'))
    rp = plan.contrast("X").reading_point
    assert parse_reading_point(str(rp)) == rp


@pytest.mark.parametrize("at", ["first-half", "firsthalf", "first_half:", "to_target:0B", "to_target:2", "half",
                                "to target", "all_evaluations", "to_target:-1B"])
def test_near_miss_reading_points_are_refused(at):
    assert "expected a reading point" in _errors(_plan(f'at = "{at}"\ntier = "secondary"'))


def test_a_reading_past_the_run_length_is_refused():
    assert "trains only to 1B" in _errors(_plan('at = "to_target:2B"\ntier = "exploratory"'))
    assert "trains only to 1B" in _errors(_plan('at = "first_half:2B"\ntier = "secondary"'))


def test_to_target_must_be_a_non_primary_superiority_reading_of_accuracy():
    err = _errors(_plan('at = "to_target"\ntier = "primary"').replace('members = ["C1"]', 'members = ["C1", "X"]'))
    assert "cannot be primary" in err
    assert "takes no kind 'equivalence'" in _errors(_plan('at = "to_target"\ntier = "secondary"\nkind = "equivalence"\nmargin = 0.02'))
    assert "not metric log_length" in _errors(_plan('at = "time_to_target"\ntier = "secondary"\nmetric = "log_length"'))


@pytest.mark.parametrize("metric", ["log-length", "loglength", "log_lengths", "Log_length"])
def test_near_miss_metric_names_are_refused(metric):
    assert "unknown metric" in _errors(_plan(f'metric = "{metric}"\ntier = "secondary"'))


def test_levels_are_checked_against_the_set_and_the_metric():
    assert _validate(_plan('levels = [5]\ntier = "secondary"')).contrast("X").levels == [5]
    assert "greater than or equal to 1" in _errors(_plan('levels = [0]\ntier = "secondary"'))
    assert "duplicate levels" in _errors(_plan('levels = [5, 5]\ntier = "secondary"'))
    assert "input should be a valid integer" in _errors(_plan('levels = ["5"]\ntier = "secondary"'))
    lv = '[{ name = "test", n_problems = 10, levels = [3, 4] }]'
    assert "levels [5] are not in set 'test'" in _errors(_plan('levels = [4, 5]\ntier = "secondary"', sets=lv))
    assert "metric log_length takes none" in _errors(_plan('levels = [4]\nmetric = "log_length"\ntier = "secondary"'))


START_B = '[{ name = "test", n_problems = 10 }, { name = "extra", n_problems = 5, at = ["start", "B"] }]'


def test_sets_scored_at_the_start_and_B_are_read_at_B_only():
    plan = _validate(_plan('eval_set = "extra"\ntier = "secondary"', sets=START_B))
    assert plan.evaluation.sets[1].at == ["start", "B"] and not plan.evaluation.sets[1].every_evaluation
    for at in ("first_half", "time", "updates", "2B", "control-time"):
        assert "is scored only at start and B" in _errors(_plan(f'eval_set = "extra"\nat = "{at}"\ntier = "secondary"',
                                                                sets=START_B))
    only_start = START_B.replace('["start", "B"]', '["start"]')
    assert 'read it at "B"' in _errors(_plan('eval_set = "extra"\ntier = "secondary"', sets=only_start))


@pytest.mark.parametrize("at,why", [("[]", "once each"), ('["start", "start"]', "once each"),
                                    ('["end"]', "input should be 'start' or 'B'"), ('"B"', "valid list")])
def test_hostile_set_schedules_are_refused(at, why):
    assert why in _errors(_plan(sets=f'[{{ name = "test", n_problems = 10, at = {at} }}]'))


def test_the_primary_set_is_scored_at_every_evaluation():
    sets = '[{ name = "extra", n_problems = 5, at = ["start", "B"] }, { name = "test", n_problems = 10 }]'
    assert "is the primary set" in _errors(_plan(sets=sets))
    ok = _plan(sets=sets).replace("[evaluation]", '[evaluation]\nprimary_set = "test"')
    assert _validate(ok).evaluation.primary == "test"


# ------------------------------------------------------------------------------------ dynamics, report, record


def test_training_dynamics_stop_at_B_and_read_old_logs_as_na():
    from prereg_kit.readings import training_dynamics
    from prereg_kit.report import dynamics_table

    its = pd.DataFrame({"configuration": ["a"] * 4 + ["b"] * 2, "seed": [0, 0, 1, 1, 0, 0],
                        "cum_tokens": [50, 100, 60, 120, 100, 200], "mixed_share": [0.2, 0.4, 0.6, 0.8, 0.5, 0.9],
                        "all_wrong_share": [0.8, 0.6, 0.4, 0.2, np.nan, np.nan]})
    reads = pd.DataFrame({"configuration": ["a", "a", "b"], "seed": [0, 1, 0], "tokens": [100.0, 60.0, 100.0]})
    dyn = training_dynamics(its, reads).set_index("configuration")
    assert dyn.loc["a", "mixed_share"] == pytest.approx((0.3 + 0.6) / 2)  # seed 1 stops at its reading (60)
    assert dyn.loc["b", "mixed_share"] == pytest.approx(0.5) and np.isnan(dyn.loc["b", "all_wrong_share"])
    assert np.isnan(dyn.loc["a", "all_correct_share"])  # a column no log carries
    table = "\n".join(dynamics_table(dyn.reset_index()))
    assert "| a | 2 | n/a | 45.0% | 55.0% | n/a |" in table and "| b | 1 | n/a | 50.0% | n/a | n/a |" in table
    assert dynamics_table(training_dynamics(its, reads.iloc[:0])) == []


def test_a_to_target_row_is_recorded_as_a_share():
    from prereg_kit.registry.record import record_row

    row = dict(contrast="X", treatment="t", control="c", at="to_target", n=6, mean=0.78, ci_low=0.71, ci_high=np.inf,
               tier="exploratory", kind="superiority", target=0.446, t=np.nan, metric="accuracy")
    r = record_row(row, source="s")
    assert (r["mean"], r["ci_low"], r["ci_high"], r["ci_kind"]) == ("0.7800", "0.7100", "n.r.", "none")
    assert "0.4460" in r["note"]
