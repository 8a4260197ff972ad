"""The vLLM engine's wiring, against a stand-in `vllm` module (vLLM itself needs a GPU and is not
installed here): per-request seeds from (noise seed, request key), completions laid out like the
HF engine's, weights pushed into the vLLM model by `sync_weights`, and a clear error without vLLM.
What this cannot check — real vLLM sampling and its internal model layout — is said in docs/trainer.md.
"""

from __future__ import annotations

import os
import sys
import types

import numpy as np
import pytest
import torch

from trainer.config import ConfigError, TrainerConfig, derive_seed
from trainer.core.engines import VLLMEngine
from trainer.core.policy import Policy


class _Params:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _FakeLLM:
    """Records what the engine asks for; samples token ids from each request's own seed."""

    def __init__(self, **kw):
        self.kwargs, self.loaded, self.vocab, self.eos = kw, [], 20, None
        runner = types.SimpleNamespace(model=types.SimpleNamespace(load_weights=lambda it: self.loaded.extend(n for n, _ in it)))
        self.llm_engine = types.SimpleNamespace(model_executor=types.SimpleNamespace(
            driver_worker=types.SimpleNamespace(model_runner=runner)))
        _FakeLLM.last = self

    def generate(self, prompts, params, use_tqdm=False):
        outs = []
        for p in params:
            rng = np.random.default_rng(p.seed)
            n = int(rng.integers(1, p.max_tokens + 1))
            ids = rng.integers(3, self.vocab, size=n).tolist()
            if n < p.max_tokens:
                ids.append(self.eos)  # stopped at EOS, as vLLM reports it
            outs.append(types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=ids)]))
        return outs


@pytest.fixture
def policy(tmp_path, monkeypatch):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from trainer.data.synthetic import build_tokenizer

    tok = build_tokenizer(tmp_path / "tok")
    tok.padding_side = "left"
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2, intermediate_size=64))
    fake = types.ModuleType("vllm")
    fake.LLM, fake.SamplingParams = _FakeLLM, _Params
    monkeypatch.setitem(sys.modules, "vllm", fake)
    _isolated_env(monkeypatch)  # the engine sets VLLM_ENABLE_V1_MULTIPROCESSING; leave the process as found
    pol = Policy(model, tok, torch.device("cpu"), None, TrainerConfig(engine="vllm"), str(tmp_path))
    return pol


def test_per_request_seeds_and_layout(policy):
    eng = VLLMEngine(policy)
    eng.llm.eos = policy.eos_id
    assert eng.llm.kwargs["dtype"] == "bfloat16" and eng.llm.kwargs["gpu_memory_utilization"] == 0.3
    prompts = ["Compute 1+2.", "Compute 3+4.", "Compute 5+6.", "Compute 7+8."]
    a = eng.generate(prompts, noise_seed=7, keys=range(4), limit=8, temperature=1.0, top_p=1.0)
    assert a.sequences.shape[0] == 4 and a.completion_mask.shape == (4, 8)
    assert ((a.lengths >= 1) & (a.lengths <= 8)).all()
    # a request's completion depends on its key only, not on its place in the batch
    b = eng.generate(prompts[::-1], noise_seed=7, keys=[3, 2, 1, 0], limit=8, temperature=1.0, top_p=1.0)
    assert a.texts == b.texts[::-1]
    c = eng.generate(prompts, noise_seed=8, keys=range(4), limit=8, temperature=1.0, top_p=1.0)
    assert a.texts != c.texts
    seeds = {derive_seed(7, k, "request") for k in range(4)}
    assert len(seeds) == 4


def test_sync_weights_pushes_every_parameter(policy):
    eng = VLLMEngine(policy)
    eng.sync_weights()
    assert eng.llm.loaded == [n for n, _ in policy.model.named_parameters()]


def test_clear_error_without_vllm(policy, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ConfigError, match="needs the vllm package"):
        VLLMEngine(policy)


class _FakeV1LLM(_FakeLLM):
    """vLLM's V1 engine: no ``model_executor`` on ``llm_engine``; ``apply_model`` runs a function
    on the worker's model (in this process when V1 multiprocessing is off)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.env_at_init = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
        self.llm_engine = types.SimpleNamespace()
        self.model = types.SimpleNamespace(load_weights=lambda it: self.loaded.extend(n for n, _ in it))

    def apply_model(self, func):
        return [func(self.model)]


def _isolated_env(monkeypatch, value=None):
    """Restore the variable after the test, whatever the engine sets."""
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "restore-me")
    if value is None:
        monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING")
    else:
        monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", value)


def test_sync_weights_v1_engine_through_apply_model(policy, monkeypatch):
    # the V1 layout has no llm_engine.model_executor: the pre-V1 path would raise AttributeError
    _isolated_env(monkeypatch)
    sys.modules["vllm"].LLM = _FakeV1LLM
    eng = VLLMEngine(policy)
    assert eng.llm.env_at_init == "0"  # the engine lives in this process, where weights can be copied
    assert not hasattr(eng.llm.llm_engine, "model_executor")
    eng.sync_weights()
    assert eng.llm.loaded == [n for n, _ in policy.model.named_parameters()]


def test_refuses_a_multiprocess_v1_engine(policy, monkeypatch):
    _isolated_env(monkeypatch, "1")
    with pytest.raises(ConfigError, match="VLLM_ENABLE_V1_MULTIPROCESSING='1'"):
        VLLMEngine(policy)


def test_sync_weights_names_an_unknown_layout(policy, monkeypatch):
    _isolated_env(monkeypatch)
    eng = VLLMEngine(policy)
    eng.llm.llm_engine = types.SimpleNamespace(model_executor=types.SimpleNamespace())  # near miss: no driver_worker
    with pytest.raises(ConfigError, match="neither LLM.apply_model nor"):
        eng.sync_weights()
