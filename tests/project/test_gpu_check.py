"""benchmarks/gpu_check.py on the CPU: the tiny model through the trainer's iteration with the HF
engine (and the vLLM phase against a stand-in `vllm` module), every JSON field present, the token
accounting agreeing with the raw completions — and the check seen to fail when the trainer's
count is broken (EOS left out, padding counted). What needs a GPU (CUDA, bf16, real vLLM, the
throughput) is not verified here: docs/performance.md, "The GPU path"."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest
from paths import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
FAST = ["--tiny", "--limit", "24"]  # the paper's 8 × 8 iteration, a short limit


@pytest.fixture(scope="module")
def gc():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop("gpu_check", None)


def _run(gc, tmp_path, *extra, iterations=("--warmup", "0", "--iterations", "1")) -> tuple[int, dict]:
    out = tmp_path / "gc.json"
    rc = gc.main([*FAST, *iterations, "--out", str(out), *extra])
    return rc, json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_tiny_cpu_run_passes_with_every_field(gc, tmp_path):
    out = tmp_path / "summary.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--engines", "hf", "--iterations", "2", "--warmup", "1",
                          "--limit", "24", "--out", str(out)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "token accounting: OK" in res.stdout and "7,913 generated tokens/s" in res.stdout
    _check_fields(gc, json.loads(out.read_text(encoding="utf-8")), warmup=1, timed=2)
    assert "vllm" not in json.loads(out.read_text(encoding="utf-8"))["engines"]


def test_fields_and_accounting_in_process(gc, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "vllm", None)  # vLLM asked for but not importable: skipped, and said
    rc, s = _run(gc, tmp_path, "--engines", "hf,vllm", iterations=("--warmup", "1", "--iterations", "1"))
    assert rc == 0
    _check_fields(gc, s, warmup=1, timed=1)
    assert s["engines"]["vllm"] == {"status": "skipped: vLLM not installed"}
    out = capsys.readouterr().out
    assert "vLLM: not installed — skipped" in out and "vllm: skipped: vLLM not installed" in out


def _check_fields(gc, s: dict, warmup: int, timed: int) -> None:
    assert set(gc.SUMMARY_FIELDS) <= set(s) and s["ok"] and s["accounting_ok"] and s["forced_full_length"]
    hf = s["engines"]["hf"]
    assert set(gc.ENGINE_FIELDS) <= set(hf)
    assert hf["iterations_timed"] == timed and hf["iterations_warmup"] == warmup
    assert hf["tokens_timed"] == timed * 64 * 24  # forced full length: every completion reaches the limit
    assert sum(hf["stage_shares"].values()) == pytest.approx(1.0)
    assert hf["tokens_per_second"] == pytest.approx(hf["tokens_timed"] / hf["train_seconds_timed"])
    assert hf["ratio_to_paper"] == pytest.approx(hf["tokens_per_second"] / (12.25e6 / (0.43 * 3600)))
    assert hf["peak_gpu_memory_gib"] is None
    assert hf["accounting"] == {"ok": True, "calls_checked": warmup + timed, "problems": []}
    assert [r["tokens_rollout"] for r in hf["rows"]] == [64 * 24] * (warmup + timed)
    assert s["cross_engine"]["status"].startswith("not run")


def test_counted_length_rule(gc):
    eos = 9
    assert gc.counted_length([9, 1, 2], eos, 5) == 1  # EOS first: one generated token
    assert gc.counted_length([1, 2, 9, 9, 0], eos, 5) == 3  # up to and including the first EOS
    assert gc.counted_length([1, 2, 3, 4, 5, 9], eos, 5) == 5  # EOS past the limit does not count
    assert gc.counted_length([1, 2], eos, 5) == 2
    assert gc.counted_length([0, 0, 0, 0, 0], eos, 5) == 5  # padding ids drawn by the model are tokens


@pytest.mark.slow
def test_natural_length_exercises_the_eos_rule(gc, tmp_path):
    rc, s = _run(gc, tmp_path, "--engines", "hf", "--natural-length", iterations=("--warmup", "1", "--iterations", "2"))
    assert rc == 0 and s["accounting_ok"] and not s["forced_full_length"]
    rows = s["engines"]["hf"]["rows"]
    assert all(r["length_mean"] < 24 for r in rows)  # 512-token vocabulary: many completions end at EOS
    assert s["engines"]["hf"]["tokens_timed"] < 2 * 64 * 24


@pytest.mark.parametrize("breakage", ["eos_left_out", pytest.param("padding_counted", marks=pytest.mark.slow),
                                      pytest.param("one_extra_token", marks=pytest.mark.slow)])
def test_broken_accounting_is_caught(gc, tmp_path, monkeypatch, capsys, breakage):
    import trainer.core.engines as engines

    if breakage == "eos_left_out":  # lengths without the EOS token
        orig = engines._rollouts

        def broken(*a, **kw):
            r = orig(*a, **kw)
            r.lengths = r.lengths - (~r.truncated).long()
            return r

        monkeypatch.setattr(engines, "_rollouts", broken)
    elif breakage == "padding_counted":  # every column counted, padding after EOS included
        monkeypatch.setattr(engines.Rollouts, "tokens", property(lambda self: int(self.completion_mask.numel())))
    else:
        monkeypatch.setattr(engines.Rollouts, "tokens", property(lambda self: int(self.lengths.sum()) + 1))
    rc, s = _run(gc, tmp_path, "--engines", "hf", "--natural-length")
    assert rc == 1 and not s["ok"] and not s["accounting_ok"]
    problems = s["engines"]["hf"]["accounting"]["problems"]
    assert problems and all(p.startswith("iteration ") for p in problems)
    assert "token accounting: FAILED" in capsys.readouterr().out


class _Params:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _FakeLLM:
    """vLLM's offline LLM as the engine uses it: per-request seeds, EOS masked before min_tokens,
    weights loaded through ``apply_model``."""

    def __init__(self, model, **kw):
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(model)
        self.eos, self.vocab, self.loaded = tok.eos_token_id, len(tok), 0
        self.model = types.SimpleNamespace(load_weights=self._load)

    def _load(self, weights):
        self.loaded += sum(1 for _ in weights)

    def apply_model(self, func):
        return [func(self.model)]

    def generate(self, prompts, params, use_tqdm=False):
        outs = []
        for p in params:
            rng = np.random.default_rng(p.seed)
            ids = []
            while len(ids) < p.max_tokens:
                t = int(rng.integers(0, self.vocab))
                if t == self.eos and len(ids) < getattr(p, "min_tokens", 0):
                    continue
                ids.append(t)
                if t == self.eos:
                    break
            outs.append(types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=ids)]))
        return outs


@pytest.fixture
def fake_vllm(monkeypatch):
    fake = types.ModuleType("vllm")
    fake.LLM, fake.SamplingParams, fake.__version__ = _FakeLLM, _Params, "stand-in"
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "restore-me")
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING")
    return fake


# both lengths train an iteration of each engine (slow step); the stand-in's phase stays in the
# default suite through test_vllm_stand_in_ignoring_the_limit_is_caught
@pytest.mark.slow
@pytest.mark.parametrize("natural", [False, True])
def test_vllm_phase_and_cross_engine_check_against_a_stand_in(gc, tmp_path, fake_vllm, natural):
    rc, s = _run(gc, tmp_path, "--engines", "hf,vllm", *(["--natural-length"] if natural else []))
    assert rc == 0, s
    assert s["versions"]["vllm"] == "stand-in" and s["engines"]["vllm"]["status"] == "ran"
    assert s["engines"]["vllm"]["accounting"]["calls_checked"] == 1 + 2  # the iteration + one call of each engine
    cross = s["cross_engine"]
    assert cross["status"] == "ran" and cross["hf"]["accounting"] == "ok" and cross["vllm"]["accounting"] == "ok"
    if natural:
        assert cross["vllm"]["tokens"] < 64 * 24
    else:
        assert cross["hf"]["tokens"] == cross["vllm"]["tokens"] == 64 * 24


def test_vllm_stand_in_ignoring_the_limit_is_caught(gc, tmp_path, fake_vllm, monkeypatch):
    # a stand-in that stops at EOS although min_tokens asks for the full limit: the forced-length check refuses it
    monkeypatch.setattr(fake_vllm, "SamplingParams", lambda **kw: _Params(**{k: v for k, v in kw.items() if k != "min_tokens"}))
    rc, s = _run(gc, tmp_path, "--engines", "vllm")
    assert rc == 1 and any("shorter than 24" in p for p in s["engines"]["vllm"]["accounting"]["problems"])


def test_engine_names_are_checked(gc, tmp_path):
    with pytest.raises(SystemExit):
        gc.parse_args(["--engines", "hf,vLLM "])
    with pytest.raises(SystemExit):
        gc.parse_args(["--engines", ","])


@pytest.mark.slow  # a warm-up iteration of the tiny model is needed before the deadline can cut in
def test_deadline_stops_timing_and_says_so(gc, tmp_path, capsys):
    # past the deadline after the warm-up: no timed iteration, no throughput, the accounting still checked
    rc, s = _run(gc, tmp_path, "--engines", "hf", "--deadline-s", "0", iterations=("--warmup", "1", "--iterations", "3"))
    hf = s["engines"]["hf"]
    assert rc == 0 and hf["cut_short"] and hf["iterations_timed"] == 0 and hf["tokens_per_second"] is None
    assert hf["accounting"]["calls_checked"] == 1
    assert "hf: no timed iteration (deadline)" in capsys.readouterr().out
