"""Reproducible CPU studies: a warm start identical across torch thread counts, the weights' hash
in every run's metadata and its pin in the recipe, and reruns of the committed cpu-grpo study."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
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

from prereg_kit.cli import app
from prereg_kit.runlog import read_meta, read_run
from trainer.config import ConfigError, parse_config
from trainer.core.assets import prepare_assets, weight_files, weights_sha256
from trainer.launch import plan_jobs

CPU_GRPO = ROOT / "registry" / "cpu-grpo"
# The columns of an evaluation row that a rerun must reproduce exactly (all but the seconds)
EVAL_COLUMNS = ["eval_index", "iteration", "eval_set", "problem_id", "eval_seed", "tokens", "updates", "samples",
                "correct", "correct_strict", "boxed", "greedy_correct"]
OTHER = "sha256:" + "0" * 64


def _plan(recipe: str = "") -> str:
    return run_plan(id="repro", comparator="frozen", treatment="grpo", configurations="""\
[configurations.grpo]
[configurations.frozen]
overrides = { learning_rate = 0.0 }
""", tokens=300, eval_every="B/2", samples=2, n_problems=4, smoke_configurations='["grpo"]', recipe=recipe)


@pytest.fixture(scope="module")
def cache(trainer_cache) -> Path:
    return trainer_cache  # conftest: one warm start per worker, shared with the other modules that train


def _study(tmp_path: Path, cache: Path | None, recipe: str = "") -> Path:
    d = tmp_path / "study"
    d.mkdir(parents=True)
    (d / "plan.toml").write_text(_plan(recipe))
    if cache is not None:
        (d / ".cache").symlink_to(cache, target_is_directory=True)  # one warm start for the module's tests
    return d


def _assets(study: Path):
    _, jobs = plan_jobs(study, "smoke", ["grpo"], [0])
    spec = jobs[0].spec
    return spec, prepare_assets(spec.config, spec.cache_dir, spec.study_dir, 4)


def _cli(*args):
    return CliRunner().invoke(app, [*map(str, args)])


# --- the warm start and its hash ---------------------------------------------------------------

def test_warm_start_is_identical_across_thread_counts_and_restores_the_callers_settings(tmp_path, monkeypatch):
    import trainer.core.assets as ws

    before = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(),
              torch.is_deterministic_algorithms_warn_only_enabled())
    inside = []  # the settings the build itself ran under
    train = ws._train_warm_start

    def spy(*args):
        inside.append((torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(),
                       torch.is_deterministic_algorithms_warn_only_enabled()))
        return train(*args)

    monkeypatch.setattr(ws, "_train_warm_start", spy)
    built = {}
    try:
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            torch.use_deterministic_algorithms(threads == 2, warn_only=threads == 2)  # the caller's own choice
            torch.manual_seed(123)
            study = _study(tmp_path / f"t{threads}", None)  # a cache of its own: a real build each time
            spec, assets = _assets(study)
            built[threads] = (assets.model_path.name, assets.model_sha256)
            assert torch.get_num_threads() == threads  # the caller's settings are back
            assert torch.are_deterministic_algorithms_enabled() is (threads == 2)
            assert torch.is_deterministic_algorithms_warn_only_enabled() is (threads == 2)
            assert torch.initial_seed() == 123  # nor is the caller's RNG touched
            info = json.loads((assets.model_path / "warmstart.json").read_text())
            assert info["model_sha256"] == assets.model_sha256 and info["settings"]["threads"] == 1
    finally:
        torch.set_num_threads(before[0])
        torch.use_deterministic_algorithms(before[1], warn_only=before[2])
    assert len(set(built.values())) == 1, built  # same cache key, same weights
    assert inside == [(1, True, False)] * 3  # each build on one thread, deterministic kernels or an error


def test_weights_sha256_is_the_sha256_of_the_weight_files_in_sorted_order(tmp_path):
    m = tmp_path / "m"
    m.mkdir()
    (m / "config.json").write_text("{}")
    (m / "tokenizer.json").write_text("{}")  # not a weight file
    (m / "model-00002-of-00002.safetensors").write_bytes(b"second")
    (m / "model-00001-of-00002.safetensors").write_bytes(b"first")
    (m / "pytorch_model.bin").write_bytes(b"ignored while safetensors exist")
    assert [f.name for f in weight_files(m)] == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert weights_sha256(m) == "sha256:" + hashlib.sha256(b"firstsecond").hexdigest()
    for f in m.glob("*.safetensors"):
        f.unlink()
    assert weights_sha256(m) == "sha256:" + hashlib.sha256(b"ignored while safetensors exist").hexdigest()
    (m / "pytorch_model.bin").unlink()
    with pytest.raises(ConfigError, match=r"^\S+/m: no weight files \(\*\.safetensors"):
        weights_sha256(m)


@pytest.mark.parametrize("value, reason", [
    ("abc", "expected 'sha256:' and 64 lowercase hex digits"),
    ("sha256:" + "A" * 64, "lowercase"),  # sha256sum prints lowercase: an uppercase pin would never match
    ("0" * 64, "expected 'sha256:'"),
    ("sha256:" + "0" * 63, "64 lowercase hex digits"),
])
def test_a_malformed_pin_is_a_one_line_recipe_error(value, reason):
    with pytest.raises(ConfigError) as e:
        parse_config({"model_sha256": value})
    assert e.value.lines == [e.value.lines[0]] and e.value.lines[0].startswith("recipe: model_sha256: ")
    assert reason in e.value.lines[0] and repr(value) in e.value.lines[0]


@pytest.mark.slow  # trains the tiny model
def test_a_run_records_the_weights_hash_and_a_matching_pin_runs(tmp_path, cache):
    study = _study(tmp_path / "a", cache)
    spec, assets = _assets(study)
    assert assets.model_sha256 == weights_sha256(assets.model_path)
    assert assets.model_sha256 == "sha256:" + hashlib.sha256((assets.model_path / "model.safetensors").read_bytes()).hexdigest()
    pinned = _study(tmp_path / "b", cache, recipe=f'model_sha256 = "{assets.model_sha256}"\n')
    spec, _ = _assets(pinned)
    threads = torch.get_num_threads()
    try:
        from trainer.loop import train

        train(spec)
    finally:
        torch.set_num_threads(threads)
    meta = read_meta(spec.run_dir)
    assert meta.status == "complete" and meta.model_extra["model_sha256"] == assets.model_sha256
    from trainer.loop import optional_packages

    assert meta.model_extra["packages"] == optional_packages() and "transformers" in meta.model_extra["packages"]


def test_prereg_run_refuses_a_warm_start_other_than_the_pinned_one(tmp_path, cache):
    study = _study(tmp_path, cache, recipe=f'model_sha256 = "{OTHER}"\n')
    _, assets = _assets(_study(tmp_path / "ref", cache))
    res = _cli("run", study, "--stage", "smoke")
    assert res.exit_code == 2, res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.output
    assert errors[0] == (f"error: recipe: model_sha256: the warm start at {study / '.cache' / assets.model_path.name} "
                        f"has weights {assets.model_sha256}, the recipe pins {OTHER}")
    assert not (study / "stages").exists()  # refused before any run started


def test_a_run_process_refuses_a_pinned_hash_that_differs(tmp_path, cache):
    """The run process checks too (a spec written by hand, or a launcher that skipped the check)."""
    study = _study(tmp_path, cache, recipe=f'model_sha256 = "{OTHER}"\n')
    _, jobs = plan_jobs(study, "smoke", ["grpo"], [0])
    folder = jobs[0].folder
    folder.mkdir(parents=True)
    jobs[0].spec.save(folder / "spec.json")
    proc = subprocess.run([sys.executable, "-m", "trainer", str(folder / "spec.json")], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: recipe: model_sha256: the warm start at ")
    assert f", the recipe pins {OTHER}" in proc.stderr and "has weights sha256:" in proc.stderr
    assert not (folder / "meta.json").exists()


def test_an_edited_cached_warm_start_is_refused(tmp_path, cache):
    study = _study(tmp_path, None)
    shutil.copytree(cache, study / ".cache", symlinks=True)  # a copy to tamper with
    _, assets = _assets(study)
    weights = assets.model_path / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of the last weight
    weights.write_bytes(bytes(data))
    with pytest.raises(ConfigError) as e:
        _assets(study)
    now = "sha256:" + hashlib.sha256(bytes(data)).hexdigest()
    assert e.value.lines == [f"{assets.model_path}: weight files changed since the warm start was built "
                             f"(built {assets.model_sha256}, now {now}); delete the folder to rebuild it"]
    shutil.rmtree(assets.model_path)
    _, rebuilt = _assets(study)  # as the message says: a rebuild gives the original weights
    assert rebuilt.model_sha256 == assets.model_sha256


def test_a_local_model_folder_is_pinned_the_same_way(tmp_path, cache):
    spec, assets = _assets(_study(tmp_path, cache))
    model = tmp_path / "model"
    shutil.copytree(assets.model_path, model)
    (model / "warmstart.json").unlink()

    def local(pin: str):
        cfg = parse_config({**spec.config.model_dump(), "model": str(model), "model_sha256": pin})
        return prepare_assets(cfg, spec.cache_dir, spec.study_dir, 4)

    assert local(assets.model_sha256).model_sha256 == assets.model_sha256
    with pytest.raises(ConfigError) as e:
        local(OTHER)
    assert e.value.lines == [f"recipe: model_sha256: the model at {model} has weights {assets.model_sha256}, "
                             f"the recipe pins {OTHER}"]


# --- reruns of the committed cpu-grpo study ----------------------------------------------------

def _eval_frame(run_dir: Path):
    ev = read_run(run_dir).evals
    return ev[EVAL_COLUMNS].sort_values(["eval_index", "eval_set", "problem_id"]).reset_index(drop=True)


def _differences(got, want) -> str:
    """'' when the evaluation columns agree exactly; else one line: the first differing cell and
    the mean accuracy of each evaluation, rerun against reference."""
    if got.shape != want.shape:
        return f"{len(got)} evaluation rows against {len(want)}"
    for col in EVAL_COLUMNS:
        same = (got[col].eq(want[col]).fillna(False) | (got[col].isna() & want[col].isna())).tolist()
        if not all(same):
            i = same.index(False)
            return (f"{same.count(False)} rows differ in {col!r}, first eval {got['eval_index'][i]} "
                    f"problem {got['problem_id'][i]}: {got[col][i]} against {want[col][i]}; accuracy by "
                    f"evaluation, rerun [{_accuracies(got)}] against [{_accuracies(want)}]")
    return ""


def test_the_rerun_comparison_passes_only_on_identical_rows():
    committed = _eval_frame(CPU_GRPO / "runs" / "grpo" / "seed-0")
    assert committed["greedy_correct"].isna().all()  # missing on both sides counts as equal
    assert _differences(committed.copy(), committed) == ""
    edited = committed.copy()
    edited.loc[100, "correct"] += 1  # one sample of one problem at one evaluation
    diff = _differences(edited, committed)
    assert diff.startswith(f"1 rows differ in 'correct', first eval {committed['eval_index'][100]} "
                           f"problem {committed['problem_id'][100]}: ")
    assert "accuracy by evaluation, rerun [" in diff
    edited = committed.copy()
    edited.loc[0, "greedy_correct"] = True  # a value where the reference has none
    assert _differences(edited, committed).startswith("1 rows differ in 'greedy_correct'")
    assert _differences(committed.iloc[:-1], committed) == f"{len(committed) - 1} evaluation rows against {len(committed)}"


def _accuracies(frame) -> str:
    by_eval = frame.groupby("eval_index")
    return ", ".join(f"{v:.3f}" for v in by_eval["correct"].sum() / by_eval["samples"].sum())


def _prereg_run(study: Path, hash_seed: str, stage: str = "main") -> tuple[Path, float]:
    """``prereg run STUDY --stage STAGE --configs grpo --seeds 0`` in a process of its own (its own
    string hash seed, so an order that depends on set or dict hashing would show); the run folder
    and seconds."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "prereg_kit", "run", str(study), "--stage", stage, "--configs", "grpo",
                           "--seeds", "0"], capture_output=True, text=True, timeout=1800,
                          env=dict(os.environ, PYTHONHASHSEED=hash_seed,
                                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))))
    seconds = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return (study / "runs" if stage == "main" else study / "stages" / stage) / "grpo" / "seed-0", seconds


def _cpu_grpo_copy(folder: Path) -> Path:
    """The committed plan with its lock chain up to its last plan entry (the committed runs'
    seals stay behind: the rerun seals its own run)."""
    from prereg_kit.chain.lock import read_chain, serialize

    folder.mkdir(parents=True)
    shutil.copy(CPU_GRPO / "plan.toml", folder / "plan.toml")
    chain = read_chain(CPU_GRPO)
    doc = {"format": "prereg-lock/1", "entries": chain.entries[: chain.last["index"] + 1]}
    (folder / "plan.lock").write_text(serialize(doc))
    return folder


@pytest.fixture(scope="module")
def cpu_grpo_rerun(tmp_path_factory) -> tuple[Path, float]:
    """cpu-grpo's ``grpo`` seed 0 trained once with this code (on the shipped warm start)."""
    return _prereg_run(_cpu_grpo_copy(tmp_path_factory.mktemp("rerun") / "cpu-grpo"), "1")


@pytest.mark.slow
def test_two_fresh_runs_of_cpu_grpo_agree_exactly(cpu_grpo_rerun, tmp_path):
    """The training run is deterministic: a second process (another hash seed) trains the plan's
    smoke stage, the same run to 0.25 B, and gives the first quarter's evaluation and iteration rows
    exactly (seconds aside); it also shows the comparison below can pass."""
    first, _ = cpu_grpo_rerun
    study = _cpu_grpo_copy(tmp_path / "cpu-grpo")
    (study / ".cache").symlink_to(first.parents[2] / ".cache", target_is_directory=True)  # the same warm start
    second, seconds = _prereg_run(study, "2", stage="smoke")
    print(f"second run, to 0.25 B: {seconds:.1f} s")
    got = _eval_frame(second)
    want = _eval_frame(first)
    assert got["eval_index"].nunique() >= 3  # evaluations at 0, B/8 and 0.25 B
    assert _differences(got, want[want["eval_index"] <= got["eval_index"].max()].reset_index(drop=True)) == ""
    a, b = (read_run(f).iterations for f in (first, second))
    keep = [c for c in a.columns if "seconds" not in c]
    assert len(b) >= 4 and b[keep].equals(a[keep].iloc[:len(b)])
    assert read_meta(first).model_extra["model_sha256"] == read_meta(second).model_extra["model_sha256"]


@pytest.mark.slow
def test_committed_cpu_grpo_run_is_reproduced_by_this_code__retrain_cpu_studies_if_this_fails(cpu_grpo_rerun):
    """Rerun of registry/cpu-grpo's grpo seed 0 against its committed evaluation rows, exactly.

    Fails while the committed runs were trained by other code or on another warm start; the
    message names both weights hashes. Retraining the CPU studies (``make cpu-studies``) fixes it."""
    from trainer.loop import cpu_kind

    rerun, seconds = cpu_grpo_rerun
    print(f"rerun with warm start: {seconds:.1f} s")
    committed = CPU_GRPO / "runs" / "grpo" / "seed-0"
    trained_on = read_meta(committed).model_extra.get("cpu")
    if trained_on is not None and trained_on != cpu_kind():  # other kernels: bit-identity is not promised
        pytest.skip(f"the committed runs were trained on {trained_on}, this machine is {cpu_kind()}: "
                    "CPU runs reproduce bit for bit only on the same CPU kind (docs/trainer.md)")
    diff = _differences(_eval_frame(rerun), _eval_frame(committed))
    was = read_meta(committed).model_extra.get("model_sha256")
    now = read_meta(rerun).model_extra["model_sha256"]
    why = ("the committed run records no model_sha256 (trained before it was recorded)" if not was
           else f"same warm start {now}: the training differs" if was == now
           else f"other warm start: committed {was}, rerun {now} (other code, or another CPU's kernels)")
    assert not diff, f"{committed} is not reproduced here: {diff}; {why}; retrain the CPU studies (make cpu-studies)"
