"""What the run-log format admits from other trainers, and what it refuses: unsplit step time,
absent strict/boxed columns, unknown or uncommon evaluation sampling seeds, runs of two trainers.
Each rule is tried with inputs built to slip past it."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prereg_kit.analysis.analyze import UNSPLIT, analyze_study
from prereg_kit.chain.lock import lock_plan, parse_time
from prereg_kit.chain.seal import seal_runs
from prereg_kit.errors import PreregError, ViolationError
from prereg_kit.plan import load_plan
from prereg_kit.readings import accuracy_curve, check_pairing, drift_flags, refuse_unlogged, runs_without
from prereg_kit.report import write_report
from prereg_kit.runlog import (
    ITERATION_COLUMNS,
    RunLogError,
    RunLogWriter,
    RunMeta,
    load_study,
    read_run,
    run_dir,
    utc_now,
    validate_frame,
)
from prereg_kit.simulate.synth import generate_study
from prereg_kit.study.audit import trainer_violations
from prereg_kit.study.verify import verify_study

PLAN = """\
[study]
id = "fmt"
title = "Format admission"
question = "Does trt beat ctl on runs of another trainer?"
comparator = "ctl"
seeds = "0-3"

[configurations.ctl]
[configurations.trt]
overrides = { lr = 2 }

[budget]
tokens = 64000
eval_every = "B/16"

[evaluation]
samples = 4
sets = [{ name = "math", n_problems = 30 }]

[[contrasts]]
id = "C1"
treatment = "trt"
control = "ctl"
tier = "primary"

[[contrasts]]
id = "C2"
treatment = "trt"
control = "ctl"
tier = "secondary"
verifier = "strict"

[[contrasts]]
id = "C3"
treatment = "trt"
control = "ctl"
tier = "secondary"
at = "time"

[[families]]
name = "primary"
members = ["C1"]

[statistics]
bootstrap_resamples = 200
"""


def make_study(folder: Path, plan: str = PLAN, **synth) -> Path:
    """A locked plan and sealed synthetic main runs started after the lock."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plan.toml").write_text(plan)
    pf = load_plan(folder / "plan.toml")
    now = parse_time(lock_plan(folder / "plan.toml").entry["time"])
    generate_study(folder, study="fmt", plan_hash=pf.content_sha256, configurations={"ctl": 0.0, "trt": 0.08},
                   seeds=range(4), budget_tokens=64000, eval_sets={"math": 30}, samples=4, rng=5,
                   started_at=now + timedelta(microseconds=1), spacing=timedelta(microseconds=1), **synth)
    seal_runs(folder)
    return folder


@pytest.fixture(scope="module")
def default_study(tmp_path_factory) -> Path:
    """``make_study`` with the defaults, built once for the tests that only read it."""
    return make_study(tmp_path_factory.mktemp("default") / "s")


def with_keys(plan: str = PLAN, *, study: str = "", evaluation: str = "") -> str:
    return plan.replace('seeds = "0-3"\n', f'seeds = "0-3"\n{study}\n').replace("samples = 4\n", f"samples = 4\n{evaluation}\n")


def it_row(i: int, **kw) -> dict:
    return {"iteration": i, "tokens_rollout": 10, "tokens_continuation": 0, "tokens_discarded": 0, "updates": i + 1} | kw


STAGES = dict(seconds_selection=0.1, seconds_generation=1.0, seconds_credit=0.2, seconds_update=0.3, seconds_weight_sync=0.1)


# ------------------------------------------------------------------------------ iterations: seconds_step


def test_unsplit_rows_read_with_their_step_time():
    df = validate_frame(pd.DataFrame([it_row(0, seconds_step=2.0), it_row(1, seconds_step=3.5)]), ITERATION_COLUMNS,
                        where="iterations.jsonl")
    assert df["seconds_selection"].isna().all()
    from prereg_kit.runlog import add_derived
    d = add_derived(df)
    assert d["seconds_total"].tolist() == [2.0, 3.5] and d["cum_train_seconds"].tolist() == [2.0, 5.5]
    # a split row with an informative step time: the stages count
    split = add_derived(validate_frame(pd.DataFrame([it_row(0, seconds_step=99.0, **STAGES)]), ITERATION_COLUMNS, where="x"))
    assert split["seconds_total"].iloc[0] == pytest.approx(1.7)


@pytest.mark.parametrize("row, expect", [
    (it_row(2, seconds_selection=0.1, seconds_generation=1.0, seconds_credit=0.2, seconds_step=1.3),
     r"iterations.jsonl: line 3: stage seconds: give the five seconds_\* columns or seconds_step, not neither/a mix "
     r"\(got 3 of the five \(seconds_selection, seconds_generation, seconds_credit\) and seconds_step\)"),
    (it_row(2), r"iterations.jsonl: line 3: stage seconds: .* \(got none\)"),
    (it_row(2, seconds_step=None), r"line 3: stage seconds: .* \(got none\)"),
    (it_row(2, **{k: v for k, v in STAGES.items() if k != "seconds_credit"}),
     r"line 3: field 'seconds_credit': missing or null \(stage seconds"),
    (it_row(2, **(STAGES | {"seconds_update": None}), seconds_step=1.7), r"line 3: stage seconds: .*and seconds_step"),
    (it_row(2, seconds_step=-0.5), r"line 3: field 'seconds_step': expected a finite number >= 0, got -0.5"),
    (it_row(2, seconds_step=float("inf")), r"line 3: field 'seconds_step': expected a finite number >= 0, got inf"),
    (it_row(2, seconds_step=float("nan"), **STAGES | {"seconds_credit": None}), r"line 3: field 'seconds_credit': missing"),
    (it_row(2, **STAGES, seconds_step=-1.0), r"line 3: field 'seconds_step': expected a finite number >= 0"),
    (it_row(2, seconds_step="1.5"), r"line 3: field 'seconds_step': expected a finite number >= 0, got '1.5'"),
])
def test_stage_seconds_rule_refuses_every_mix(row, expect):
    rows = [it_row(0, seconds_step=1.0), it_row(1, seconds_step=1.0), row]
    with pytest.raises(RunLogError, match=expect):
        validate_frame(pd.DataFrame(rows), ITERATION_COLUMNS, where="iterations.jsonl")


def test_writer_and_reader_refuse_a_mixed_row_in_the_file(tmp_path):
    folder = run_dir(tmp_path, "ctl", 0)
    w = RunLogWriter(folder, RunMeta(study="s", configuration="ctl", seed=0, plan_hash="x", started_at=utc_now()), fsync=False)
    with pytest.raises(RunLogError, match=r"\(not written\): line 1: stage seconds"):
        w.log_iteration(it_row(0, seconds_generation=1.0, seconds_step=1.0))
    w.log_iteration(it_row(0, seconds_step=1.0))
    w.finish("complete", keep_jsonl=True)
    assert read_run(folder).meta.trainer == "builtin"  # the default, for runs that predate the key
    # a hand-edited JSON-lines file: the reader refuses it the same way, naming its line
    (folder / "iterations.parquet").unlink()
    with open(folder / "iterations.jsonl", "a") as fh:
        fh.write(json.dumps(it_row(1, seconds_step=1.0, seconds_update=0.5)) + "\n")
    with pytest.raises(RunLogError, match=r"iterations.jsonl: line 2: stage seconds"):
        read_run(folder)


def test_stage_shares_read_unavailable_and_time_readings_still_work(tmp_path):
    a = analyze_study(make_study(tmp_path / "s", unsplit_time=True), progress=False)
    cf = a.configurations.set_index("configuration")
    assert (cf["stage_shares"] == UNSPLIT).all() and cf["share_generation"].isna().all()
    assert (cf["hours_at_B"] > 0).all()
    c3 = a.contrasts.set_index("contrast").loc["C3"]  # at T*: cumulative training seconds, unsplit
    assert c3["n"] == 4 and np.isfinite(c3["mean"])
    write_report(a, tmp_path / "rep")
    assert "unavailable (time not split by stage)" in (tmp_path / "rep" / "report.md").read_text()
    st = load_study(tmp_path / "s")
    assert st.iterations["seconds_step"].notna().all() and st.iterations["seconds_generation"].isna().all()


def test_split_runs_keep_their_stage_shares(default_study):
    a = analyze_study(default_study, progress=False)
    assert not (a.configurations["stage_shares"] == UNSPLIT).any()
    assert a.configurations["share_generation"].between(0.5, 0.6).all()


# ------------------------------------------------------------------------------ evals: strict and boxed


def test_strict_contrast_on_runs_without_correct_strict_is_refused_by_name(tmp_path):
    s = make_study(tmp_path / "s", strict_columns=False, trainer="verl",
                   plan=with_keys(study='trainer = "verl"'))
    with pytest.raises(PreregError, match=r"contrast C2: verifier 'strict' needs column correct_strict, which "
                                          r"runs/ctl/seed-0 does not log \(trained by 'verl'; .*\); and 7 more run"):
        analyze_study(s, progress=False)
    # dry-run's path: the contrast becomes a 'not read' row and the others are read
    a = analyze_study(s, progress=False, not_read=True)
    c = a.contrasts.set_index("contrast")
    assert c.loc["C2", "status"] == "not read" and "correct_strict" in c.loc["C2", "verdict_reason"]
    assert c.loc["C1", "n"] == 4 and np.isfinite(c.loc["C1", "mean"])
    assert any("drift (default − strict) not checked for 8 run(s)" in n for n in a.notes)


def test_one_run_without_correct_strict_is_enough_to_refuse(tmp_path):
    ev = pd.DataFrame({"configuration": ["a", "a", "b", "b"], "seed": [0, 1, 0, 1], "eval_set": "m",
                       "correct_strict": pd.array([1, 2, None, 3], dtype="Int64")})
    meta = pd.DataFrame({"configuration": ["b"], "seed": [0], "trainer": ["openrlhf"]})
    assert runs_without(ev, "correct_strict") == [("b", 0)]
    assert runs_without(ev, "correct_strict", configurations=["a"]) == []
    assert runs_without(ev, "boxed") == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]  # column absent altogether
    with pytest.raises(PreregError, match=r"contrast X: verifier 'strict' needs column correct_strict, which runs/b/seed-0 "
                                          r"does not log \(trained by 'openrlhf'"):
        refuse_unlogged(ev, meta, contrast="X", metric="pass@2", verifier="strict", eval_sets=["m"], configurations=["a", "b"])
    with pytest.raises(PreregError, match=r"contrast Y: metric boxed_rate needs column boxed, which runs/a/seed-0"):
        refuse_unlogged(ev, meta, contrast="Y", metric="boxed_rate", verifier="default", eval_sets=["m"], configurations=["a"])
    # the default verifier needs neither; another set's gaps do not count
    refuse_unlogged(ev, meta, contrast="Z", metric="accuracy", verifier="default", eval_sets=["m"], configurations=["b"])
    refuse_unlogged(ev, meta, contrast="Z", metric="accuracy", verifier="strict", eval_sets=["other"], configurations=["b"])


def test_reading_strict_accuracy_directly_refuses_and_drift_leaves_such_runs_unflagged(tmp_path, default_study):
    make_study(tmp_path / "s", strict_columns=False)
    ev = load_study(tmp_path / "s").evals
    with pytest.raises(Exception, match=r"verifier 'strict' needs column correct_strict, which runs/ctl/seed-0"):
        accuracy_curve(ev, eval_set="math", verifier="strict")
    flags = drift_flags(ev, eval_set="math")
    assert flags["accuracy_strict"].isna().all() and not flags["drifted"].any()
    # a study where one run lacks it: the others keep their strict accuracies
    both = pd.concat([ev, load_study(default_study).evals.assign(configuration="full")], ignore_index=True)
    fl = drift_flags(both, eval_set="math")
    assert fl.loc[fl.configuration == "full", "accuracy_strict"].notna().all()
    assert fl.loc[fl.configuration != "full", "accuracy_strict"].isna().all()


def test_boxed_rate_reads_the_boxed_column(default_study):
    from prereg_kit.readings import problem_accuracy
    ev = load_study(default_study).evals
    pa = problem_accuracy(ev, eval_set="math", metric="boxed_rate")
    assert pa["accuracy"].between(0, 1).all() and pa["accuracy"].mean() > 0.9


# ------------------------------------------------------------------------------ common random numbers


def test_crn_true_refuses_unknown_sampling_seeds_naming_the_key(tmp_path):
    s = make_study(tmp_path / "s", eval_seeds="unknown")
    with pytest.raises(PreregError, match=r"configuration 'trt' seed 0: evaluation 0 does not log its sampling seed "
                                          r"\(eval_seed null\).*`\[evaluation\] common_random_numbers = false`"):
        analyze_study(s, progress=False)


def test_crn_true_refuses_differing_sampling_seeds(tmp_path):
    s = make_study(tmp_path / "s", eval_seeds="differ")
    with pytest.raises(PreregError, match=r"common random numbers broken\); .*common_random_numbers = false"):
        analyze_study(s, progress=False)


def test_pairing_skips_only_the_sampling_seed_when_crn_is_false():
    rows = []
    for c, seed_shift, n in (("t", 0, 3), ("c", 7, 3)):
        for s in (0, 1):
            for e in (0, 1):
                rows.append({"configuration": c, "seed": s, "eval_index": e, "eval_seed": 100 * e + seed_shift,
                             "n_problems": n, "problem_set": "abc"})
    curves = pd.DataFrame(rows)
    assert len(check_pairing(curves, "t", "c"))  # different sampling seeds: refused with CRN
    assert not len(check_pairing(curves, "t", "c", common_random_numbers=False))
    nulls = curves.assign(eval_seed=pd.array([pd.NA] * len(curves), dtype="Int64"))
    assert "common_random_numbers = false" in check_pairing(nulls, "t", "c")["reason"].iloc[0]
    assert not len(check_pairing(nulls, "t", "c", common_random_numbers=False))
    # seeds and problems are still checked
    other = curves.copy()
    other.loc[(other.configuration == "c") & (other.seed == 1), "problem_set"] = "xyz"
    assert check_pairing(other, "t", "c", common_random_numbers=False)["reason"].str.contains("problems differ").any()
    assert check_pairing(curves[~((curves.configuration == "c") & (curves.seed == 1))], "t", "c",
                         common_random_numbers=False)["reason"].str.contains("has none").any()


@pytest.mark.parametrize("seeds", ["differ", "unknown"])
def test_crn_false_pairs_runs_and_the_report_says_so(tmp_path, seeds):
    s = make_study(tmp_path / "s", eval_seeds=seeds, plan=with_keys(evaluation="common_random_numbers = false"))
    a = analyze_study(s, progress=False)
    assert (a.contrasts["n"] == 4).all()
    write_report(a, tmp_path / "rep")
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "not by their evaluation sampling seeds" in md and md.count("common_random_numbers = false") == 1
    res = json.loads((tmp_path / "rep" / "results.json").read_text())
    assert res["common_random_numbers"] is False


def test_crn_default_leaves_reports_as_they_were(default_study, tmp_path):
    a = analyze_study(default_study, progress=False)
    write_report(a, tmp_path / "rep")
    assert "common_random_numbers" not in (tmp_path / "rep" / "report.md").read_text()
    assert "common_random_numbers" not in json.loads((tmp_path / "rep" / "results.json").read_text())


def test_plan_keys_are_typed():
    import tomllib

    from prereg_kit.plan import validate_plan
    raw = tomllib.loads(with_keys(study="mixed_trainers = true", evaluation="common_random_numbers = false"))
    p = validate_plan(raw, source="plan.toml")
    assert p.study.mixed_trainers is True and p.evaluation.common_random_numbers is False
    for bad in (with_keys(study='mixed_trainers = "yes"'), with_keys(evaluation="common_random_numbers = 0"),
                with_keys(evaluation="common_random_number = false")):
        with pytest.raises(PreregError):
            validate_plan(tomllib.loads(bad), source="plan.toml")


# ------------------------------------------------------------------------------ mixed trainers


def test_two_trainers_are_refused_with_their_run_counts(tmp_path):
    s = make_study(tmp_path / "s", trainer={"ctl": "builtin", "trt": "verl"})
    rep = verify_study(s)
    assert rep.exit_code == 1
    assert ("main runs come from 2 trainers: 'builtin' (4 runs), 'verl' (4 runs); a study that mixes trainers "
            "preregisters `[study] mixed_trainers = true`") in rep.violations
    with pytest.raises(ViolationError, match="main runs come from 2 trainers") as e:
        analyze_study(s, progress=False)
    assert e.value.exit_code == 1
    assert set(load_study(s).meta["trainer"]) == {"builtin", "verl"}


def test_one_run_of_another_trainer_is_enough(tmp_path):
    s = make_study(tmp_path / "s", trainer="trl")
    meta = json.loads((s / "runs" / "trt" / "seed-3" / "meta.json").read_text())
    meta["trainer"] = "TRL"  # a near-miss name is another trainer
    (s / "runs" / "trt" / "seed-3" / "meta.json").write_text(json.dumps(meta))
    seal_check = verify_study(s).violations
    assert any("'TRL' (1 run), 'trl' (7 runs)" in v for v in seal_check)


def test_mixed_trainers_true_admits_them(tmp_path):
    s = make_study(tmp_path / "s", trainer={"ctl": "builtin", "trt": "verl"},
                   plan=with_keys(study="mixed_trainers = true"))
    assert verify_study(s).exit_code == 0
    a = analyze_study(s, progress=False)
    assert (a.contrasts["n"] == 4).all()


def test_plan_trainer_names_the_runs_trainer(tmp_path):
    # a plan that names one trainer: runs of another are refused; builtin and external take any one
    assert trainer_violations(Counter(verl=6), plan_trainer="trl") == [
        "the plan's [study] trainer is 'trl', but the main runs were trained by 'verl' (6 runs)"]
    assert trainer_violations(Counter(trl=6), plan_trainer="trl") == []
    assert trainer_violations(Counter(verl=6), plan_trainer="external") == []
    assert trainer_violations(Counter(verl=6), plan_trainer="builtin") == []
    assert trainer_violations(Counter(builtin=5, verl=1), plan_trainer="external")[0].startswith("main runs come from 2")
    assert trainer_violations(Counter(builtin=5, verl=1), plan_trainer="trl", mixed=True) == []
    assert trainer_violations(Counter(), plan_trainer="trl") == []
    s = make_study(tmp_path / "s", trainer="verl", plan=with_keys(study='trainer = "trl"'))
    assert verify_study(s).violations == [
        "the plan's [study] trainer is 'trl', but the main runs were trained by 'verl' (8 runs)"]


def test_non_main_runs_do_not_count_as_a_second_trainer(tmp_path):
    s = make_study(tmp_path / "s", trainer="verl", plan=with_keys(study='trainer = "external"'))
    generate_study(s, study="fmt", configurations={"ctl": 0.0}, seeds=[0], budget_tokens=64000,
                   eval_sets={"math": 30}, samples=4, stage="pilot", trainer="builtin")
    assert not any("trainer" in v for v in verify_study(s).violations)


def test_cli_exit_codes_for_two_trainers(tmp_path):
    from typer.testing import CliRunner

    from prereg_kit.cli import app
    s = make_study(tmp_path / "s", trainer={"ctl": "openrlhf", "trt": "verl"},
                   plan=with_keys(study='trainer = "external"'))  # imported runs: no recipe to check
    for cmd in (["verify", str(s)], ["analyze", str(s)]):
        r = CliRunner().invoke(app, cmd)
        assert r.exit_code == 1, (cmd, r.output)
        assert "'openrlhf' (4 runs), 'verl' (4 runs)" in " ".join(r.output.split())
