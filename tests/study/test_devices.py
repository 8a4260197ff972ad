"""Device-consistent timing: a contrast read at matched training time is refused when its main runs
ran on more than one device type (unless the plan preregisters `[study] mixed_devices = true`),
naming each device type with its runs; token- and update-matched contrasts never are. Each rule is
tried with inputs built to slip past it: one run of one arm, CPU models, imports that did not say."""

from __future__ import annotations

import json
import tomllib

import pandas as pd
import pytest
from importfiles import locked_study
from test_format_admission import PLAN, make_study, with_keys
from test_import_core import _prereg
from test_import_trackers_e2e import NO_CRN, _import
from typer.testing import CliRunner

from prereg_kit.analysis.analyze import analyze_study
from prereg_kit.errors import PreregError, ViolationError
from prereg_kit.plan import load_plan, validate_plan
from prereg_kit.report import write_report
from prereg_kit.runlog import read_meta
from prereg_kit.study.audit import check_device, device_summary, device_type, split_device
from prereg_kit.study.verify import verify_study

H200, A100 = "cuda:NVIDIA H200", "cuda:NVIDIA A100-SXM4-80GB"
RUNNABLE = PLAN.replace("overrides = { lr = 2 }", "overrides = { learning_rate = 2e-6 }")  # passes `prereg verify`'s recipe check
TOKENS_ONLY = RUNNABLE.replace('at = "time"\n', 'at = "updates"\n')


def _cli(*args: str):
    return CliRunner().invoke(_prereg(), list(args))


def test_device_type_reads_meta_and_cpu_model():
    assert device_type({"device": H200}) == H200
    assert device_type({"device": "cpu", "cpu": "AMD EPYC 7763 / AVX2"}) == "cpu (AMD EPYC 7763 / AVX2)"
    assert device_type({"device": "cpu", "cpu": float("nan")}) == "cpu"  # a load_study row without the field
    assert device_type({"device": ""}) == device_type({}) == "unknown"
    assert split_device("cpu (AMD EPYC 7763 / AVX2)") == ("cpu", "AMD EPYC 7763 / AVX2")
    assert split_device(H200) == (H200, None)
    for ok in (H200, "cpu", "unknown", "cpu (Intel Xeon / AVX512)", "xpu:Intel Max 1550"):
        assert check_device(ok) == ok
    for bad in ("NVIDIA H100", "", "   ", "cuda:", ":H100", "cpu ()", "cuda 12:H100"):
        with pytest.raises(PreregError, match="is not a device"):
            check_device(bad)


def test_arms_on_two_gpu_types_are_refused_by_verify_and_analyze(tmp_path):
    s = make_study(tmp_path / "s", plan=RUNNABLE, devices={"ctl": H200, "trt": A100})
    rep = verify_study(s)
    assert rep.exit_code == 1
    (v,) = [v for v in rep.violations if "device types" in v]
    assert v == (f"contrast C3 (at time, matched training time): its main runs ran on 2 device types: "
                 f"'{A100}' (trt/seed-0, trt/seed-1, trt/seed-2, trt/seed-3), '{H200}' (ctl/seed-0, ctl/seed-1, "
                 "ctl/seed-2, ctl/seed-3); training seconds on different devices are not matched compute: "
                 "preregister `[study] mixed_devices = true`, or read the contrast at matched tokens")
    assert not any("C1" in x or "C2" in x for x in rep.violations)  # token-matched contrasts are not refused
    with pytest.raises(ViolationError, match="C3 .*2 device types") as e:
        analyze_study(s, progress=False)
    assert e.value.exit_code == 1
    for command in ("verify", "analyze"):
        res = _cli(command, str(s))
        assert res.exit_code == 1, res.output
        flat = " ".join(res.output.split())
        assert A100 in flat and H200 in flat and "trt/seed-0" in flat and "mixed_devices" in flat
    a = analyze_study(s, progress=False, exploratory=True)  # exploratory: read, labelled
    assert any("2 device types" in n for n in a.notes) and a.exploratory


def test_one_run_of_one_arm_is_named(tmp_path):
    s = make_study(tmp_path / "s", devices={"ctl": H200, "trt": {0: H200, 1: H200, 2: A100, 3: H200}})
    (v,) = [v for v in verify_study(s).violations if "device types" in v]
    assert v.endswith(f", '{A100}' (trt/seed-2); training seconds on different devices are not matched compute: "
                      "preregister `[study] mixed_devices = true`, or read the contrast at matched tokens")
    assert f"'{H200}' (trt/seed-0, trt/seed-1, trt/seed-3, ctl/seed-0 … (+3 more))" in v


def test_a_contrast_on_seeds_that_ran_on_one_device_is_not_refused(tmp_path):
    plan = PLAN.replace('at = "time"\n', 'at = "time"\nseeds = [0, 1, 3]\n')
    s = make_study(tmp_path / "s", plan=plan, devices={"ctl": H200, "trt": {0: H200, 1: H200, 2: A100, 3: H200}})
    assert verify_study(s).exit_code == 0


@pytest.mark.parametrize("at,refused", [("control-time", True), ("time_to_target", True), ("updates", False),
                                        ("first_half", False), ("B", False)])
def test_which_reading_points_are_time_matched(at, refused):
    raw = tomllib.loads(PLAN.replace('at = "time"\n', f'at = "{at}"\n'))
    plan = validate_plan(raw, source="plan.toml")
    runs = {(c, s): (H200 if c == "ctl" else A100) for c in ("ctl", "trt") for s in range(4)}
    assert bool(device_summary(plan, runs).violations) is refused


def test_every_arm_of_a_pooled_contrast_counts():
    raw = tomllib.loads(PLAN.replace("[configurations.trt]", "[configurations.x]\n[configurations.y]\n[configurations.trt]")
                        .replace('treatment = "trt"\ncontrol = "ctl"\ntier = "secondary"\nat = "time"',
                                 'design = "pooled"\npairs = [["trt", "ctl"], ["y", "x"]]\ntier = "secondary"\nat = "time"'))
    plan = validate_plan(raw, source="plan.toml")
    runs = {(c, s): H200 for c in ("ctl", "trt", "x", "y") for s in range(4)}
    assert device_summary(plan, runs).violations == []
    runs[("y", 1)] = A100  # an arm of the second pair only
    (v,) = device_summary(plan, runs).violations
    assert f"'{A100}' (y/seed-1)" in v


def test_mixed_devices_true_reads_and_notes_it(tmp_path):
    s = make_study(tmp_path / "s", plan=with_keys(RUNNABLE, study="mixed_devices = true"), devices={"ctl": H200, "trt": A100})
    assert verify_study(s).exit_code == 0
    assert _cli("verify", str(s)).exit_code == 0
    a = analyze_study(s, progress=False)
    assert a.devices.counts == {A100: 4, H200: 4}
    (note,) = a.devices.notes
    assert note.startswith("contrast C3 (at time, matched training time): its main runs ran on 2 device types")
    assert "mixed_devices = true" in note
    write_report(a, tmp_path / "rep")
    results = json.loads((tmp_path / "rep" / "results.json").read_text())
    assert results["devices"] == {A100: 4, H200: 4} and note in results["notes"]
    md = (tmp_path / "rep" / "report.md").read_text()
    contrasts_section = md.split("## Contrasts", 1)[1].split("##", 1)[0]
    assert f"Devices: {note}." in contrasts_section


def test_token_only_contrasts_with_mixed_devices_are_read(tmp_path):
    s = make_study(tmp_path / "s", plan=TOKENS_ONLY, devices={"ctl": H200, "trt": A100})
    assert verify_study(s).exit_code == 0
    assert _cli("analyze", str(s), "--resamples", "200").exit_code == 0
    a = analyze_study(s, progress=False)
    (note,) = a.devices.notes  # the time axes of the figures still compare the devices: said, not refused
    assert "no contrast is read at matched time" in note


def test_one_device_type_is_silent(tmp_path):
    s = make_study(tmp_path / "s", devices=H200)
    assert verify_study(s).exit_code == 0
    a = analyze_study(s, progress=False)
    assert a.devices.counts == {H200: 8} and a.devices.notes == []


def test_cpu_runs_on_two_cpu_models_are_refused(tmp_path):
    epyc, xeon = "cpu (AMD EPYC 7763 64-Core Processor / AVX2)", "cpu (Intel(R) Xeon(R) Platinum 8480+ / AVX512)"
    s = make_study(tmp_path / "s", devices={"ctl": epyc, "trt": {0: epyc, 1: epyc, 2: epyc, 3: xeon}})
    assert read_meta(s / "runs" / "trt" / "seed-3").model_extra["cpu"] == xeon[5:-1]
    (v,) = [v for v in verify_study(s).violations if "device types" in v]
    assert f"'{xeon}' (trt/seed-3)" in v
    # a CPU run that recorded no model is another device type than one that did
    s2 = make_study(tmp_path / "s2", devices={"ctl": epyc, "trt": "cpu"})
    assert any("'cpu' (trt/seed-0" in v for v in verify_study(s2).violations)


def test_imports_that_did_not_say_are_refused_beside_gpu_runs(tmp_path):
    s = make_study(tmp_path / "s", devices={"ctl": H200, "trt": "unknown"})
    (v,) = verify_study(s).violations
    assert f"'{H200}' (ctl/seed-0, ctl/seed-1, ctl/seed-2, ctl/seed-3), 'unknown' (trt/seed-0, trt/seed-1, trt/seed-2, trt/seed-3)" in v
    assert v.endswith("`prereg import ... --device`)")


def test_import_device_option_states_the_device(tmp_path):
    """A imported with `--device`, B without it: refused, `unknown` named; B imported with the same
    `--device` reads; a bare GPU name is refused at import."""
    timed = NO_CRN + '\n[[contrasts]]\nid = "T1"\ntreatment = "B"\ncontrol = "A"\ntier = "secondary"\nat = "time"\n'
    runner = CliRunner()
    for b_device, code in (None, 1), (H200, 0):
        root = tmp_path / f"exit{code}"
        study = locked_study(root / "study", timed)
        for c in ("A", "B"):
            for s in (0, 1, 2):
                dev = H200 if c == "A" else b_device
                res = _import(runner, study, "wandb", root, c, s, *(["--device", dev] if dev else []))
                assert res.exit_code == 0, res.output
        assert read_meta(study / "runs" / "A" / "seed-0").device == H200
        res = runner.invoke(_prereg(), ["verify", str(study)])
        assert res.exit_code == code, res.output
        if code:
            flat = " ".join(res.output.split())
            assert "'unknown' (B/seed-0, B/seed-1, B/seed-2)" in flat and f"'{H200}' (A/seed-0" in flat
    study = locked_study(tmp_path / "bare" / "study", timed)
    res = _import(runner, study, "wandb", tmp_path / "bare", "A", 0, "--device", "NVIDIA H200")
    assert res.exit_code == 2 and res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "is not a device" in " ".join(res.output.split()) and "Traceback" not in res.output
    assert not (study / "runs" / "A" / "seed-0" / "meta.json").exists()


def test_near_miss_plan_keys_are_refused_with_the_closest_name(tmp_path):
    for bad, hint in (("mixed_device = true", "study.mixed_device: unknown key; did you mean 'mixed_devices'?"),
                      ("mixed_devices = \"yes\"", "study.mixed_devices: input should be a valid boolean"),
                      ("Mixed_Devices = true", "did you mean 'mixed_devices'?")):
        (tmp_path / "plan.toml").write_text(with_keys(study=bad))
        with pytest.raises(PreregError) as e:
            load_plan(tmp_path / "plan.toml")
        assert hint in str(e.value), e.value
    (tmp_path / "plan.toml").write_text(with_keys(study="mixed_devices = true"))
    assert load_plan(tmp_path / "plan.toml").plan.study.mixed_devices is True
    assert validate_plan(tomllib.loads(PLAN), source="plan.toml").study.mixed_devices is False


def test_load_study_carries_the_cpu_model(tmp_path):
    s = make_study(tmp_path / "s", devices={"ctl": "cpu (M / AVX2)", "trt": H200})
    from prereg_kit.runlog import load_study
    meta = load_study(s).meta
    assert meta.set_index(["configuration", "seed"]).loc[("ctl", 0), "cpu"] == "M / AVX2"
    assert pd.isna(meta.set_index(["configuration", "seed"]).loc[("trt", 0), "cpu"])
