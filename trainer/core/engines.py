"""Generation engines: sample completions of the policy (HF ``generate`` on the training model;
vLLM when installed) and lay them out as ``Rollouts`` for the training forward pass.

Sampling is driven by explicit per-request random numbers: request r of a call draws its
uniforms from ``numpy.random.default_rng([noise_seed, key_r])`` and each token is chosen by the
inverse CDF of the (temperature, top-p) distribution at that uniform. Two policies that are
given the same seed therefore draw with *common random numbers* request by request, whatever
the batch layout (the coupling evaluation needs across configurations of a seed).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np
import torch

from trainer.config import derive_seed
from trainer.core.policy import Policy
from trainer.errors import ConfigError


@dataclass
class Rollouts:
    """Completions of one generation call, laid out for the training forward pass.

    ``sequences`` = left-padded prompts (``prompt_len`` columns) then completions; the mask covers
    prompt tokens and completion tokens up to and including EOS. ``lengths`` are generated tokens
    per completion (EOS included; padding after EOS is not generated and not counted).
    """

    sequences: torch.Tensor  # [N, P + T] token ids
    attention_mask: torch.Tensor  # [N, P + T]
    prompt_len: int
    completion_mask: torch.Tensor  # [N, T] float, 1 on generated tokens
    lengths: torch.Tensor  # [N] int
    truncated: torch.Tensor  # [N] bool: cut at the completion limit without EOS
    texts: list[str]

    @property
    def n(self) -> int:
        return int(self.sequences.shape[0])

    @property
    def completion_ids(self) -> torch.Tensor:
        return self.sequences[:, self.prompt_len:]

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum())


def request_uniforms(noise_seed: int, keys: Sequence[int], steps: int) -> torch.Tensor:
    """Uniforms [N, steps]: row r from ``default_rng([noise_seed, keys[r]])`` (per-request seeds)."""
    out = np.empty((len(keys), steps), dtype=np.float64)
    for r, k in enumerate(keys):
        out[r] = np.random.default_rng([int(noise_seed), int(k)]).random(steps)
    return torch.from_numpy(out)


def sample_tokens(scores: torch.Tensor, u: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Token ids by inverse-CDF sampling of softmax(scores / T), restricted to the top-p nucleus.

    The CDF runs over token ids in vocabulary order, so equal uniforms give equal tokens when two
    policies' distributions are close (common random numbers). ``temperature == 0`` is greedy.
    """
    if temperature == 0:
        return scores.argmax(-1)
    probs = torch.softmax(scores.double() / temperature, dim=-1)
    if top_p < 1.0:  # keep the smallest most-probable set whose mass reaches top_p
        sp, idx = probs.sort(dim=-1, descending=True)
        drop = (sp.cumsum(-1) - sp) >= top_p
        probs = probs.scatter(-1, idx, sp.masked_fill(drop, 0.0))
    cdf = probs.cumsum(-1)
    target = (u.to(cdf) * cdf[:, -1]).unsqueeze(-1)
    return torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_(max=scores.shape[-1] - 1)


class _CommonRandomSampler:
    """A ``generate`` logits processor that makes the choice itself (generation runs greedy)."""

    def __init__(self, uniforms: torch.Tensor, prompt_len: int, temperature: float, top_p: float):
        self.u, self.prompt_len, self.temperature, self.top_p = uniforms, prompt_len, temperature, top_p

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        t = input_ids.shape[1] - self.prompt_len
        tok = sample_tokens(scores, self.u[:, t].to(scores.device), self.temperature, self.top_p)
        out = torch.full_like(scores, -math.inf)
        return out.scatter_(1, tok.unsqueeze(-1), 0.0)


def _rollouts(policy: Policy, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
              completions: torch.Tensor, limit: int) -> Rollouts:
    """Lay out prompts + raw completions (anything after the first EOS is padding)."""
    n, t = completions.shape
    eos = completions == policy.eos_id
    has_eos = eos.any(-1)
    first = torch.where(has_eos, eos.float().argmax(-1), torch.full((n,), t, device=eos.device))
    lengths = torch.where(has_eos, first + 1, torch.full_like(first, t))
    cmask = (torch.arange(t, device=completions.device)[None, :] < lengths[:, None])
    pad = policy.tokenizer.pad_token_id
    completions = completions.masked_fill(~cmask, pad)
    texts = policy.tokenizer.batch_decode(
        [row[:int(n_)].tolist() for row, n_ in zip(completions.cpu(), lengths.cpu())], skip_special_tokens=True)
    return Rollouts(
        sequences=torch.cat([prompt_ids, completions], 1),
        attention_mask=torch.cat([prompt_mask, cmask.long()], 1),
        prompt_len=int(prompt_ids.shape[1]),
        completion_mask=cmask.float(),
        lengths=lengths.cpu(),
        truncated=(~has_eos & (lengths >= limit)).cpu(),
        texts=texts,
    )


def concat_rollouts(parts: Sequence[tuple[object, Sequence[int]]], pad_id: int):
    """One ``Rollouts`` from rows of several generation calls (prompts re-padded on the left,
    completions on the right; positions follow the attention mask, so log-probabilities are
    unchanged)."""
    P = max(r.prompt_len for r, rows in parts if len(rows))
    T = max(r.completion_mask.shape[1] for r, rows in parts if len(rows))
    seqs, attn, cmask, lengths, trunc, texts = [], [], [], [], [], []
    for r, rows in parts:
        if not len(rows):
            continue
        idx = torch.as_tensor(list(rows), dtype=torch.long)
        s, a = r.sequences[idx.to(r.sequences.device)], r.attention_mask[idx.to(r.sequences.device)]
        p, t = r.prompt_len, r.sequences.shape[1] - r.prompt_len
        seqs.append(torch.nn.functional.pad(s, (P - p, T - t), value=pad_id))
        attn.append(torch.nn.functional.pad(a, (P - p, T - t), value=0))
        cmask.append(torch.nn.functional.pad(r.completion_mask[idx.to(r.completion_mask.device)], (0, T - t), value=0.0))
        lengths.append(r.lengths[idx])
        trunc.append(r.truncated[idx])
        texts.extend(r.texts[i] for i in rows)
    return Rollouts(torch.cat(seqs), torch.cat(attn), P, torch.cat(cmask), torch.cat(lengths), torch.cat(trunc), texts)


class Engine(Protocol):
    """A generation engine: sample completions; after each update, take the new weights."""

    name: str

    def generate(self, prompts: Sequence[str], *, noise_seed: int, keys: Sequence[int], limit: int,
                 temperature: float, top_p: float, batch_size: int | None = None) -> Rollouts: ...

    def sync_weights(self) -> None: ...


class HFEngine:
    """HF ``generate`` on the training model itself (CPU or GPU): no weight copy is needed."""

    name = "hf"

    def __init__(self, policy: Policy):
        self.policy = policy

    def _encode(self, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.policy.tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
        return enc["input_ids"].to(self.policy.device), enc["attention_mask"].to(self.policy.device)

    @torch.no_grad()
    def generate(self, prompts, *, noise_seed, keys, limit, temperature, top_p, batch_size=None):
        from transformers import GenerationConfig, LogitsProcessorList

        pol = self.policy
        ids, mask = self._encode(prompts)
        u = request_uniforms(noise_seed, keys, limit)
        gc = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=limit, top_k=None, top_p=None,
                              temperature=None, pad_token_id=pol.tokenizer.pad_token_id, eos_token_id=pol.eos_id)
        was_training = pol.model.training
        pol.model.eval()
        chunks = []
        step = batch_size or len(prompts)
        for s in range(0, len(prompts), step):
            proc = _CommonRandomSampler(u[s:s + step], ids.shape[1], temperature, top_p)
            with pol.autocast():
                out = pol.model.generate(input_ids=ids[s:s + step], attention_mask=mask[s:s + step],
                                         generation_config=gc, logits_processor=LogitsProcessorList([proc]))
            chunks.append(out[:, ids.shape[1]:])
        pol.model.train(was_training)
        width = max(c.shape[1] for c in chunks)  # generate stops early once every row has ended
        pad = pol.tokenizer.pad_token_id
        comp = torch.cat([torch.nn.functional.pad(c, (0, width - c.shape[1]), value=pad) for c in chunks], 0)
        return _rollouts(pol, ids, mask, comp, limit)

    def sync_weights(self) -> None:
        pass  # generation uses the training weights directly


class VLLMEngine:
    """vLLM colocated with the trainer (bf16), weights copied in after each update.

    Optional and lazily imported. Its wiring (per-request seeds, completion layout, weight sync,
    the error without vLLM) is tested against a stand-in module (tests/trainer/test_trainer_vllm_stub.py);
    real vLLM needs a GPU and has not been run by this project yet. Per-request seeds are derived like the HF engine's, but vLLM's
    sampler is its own: the two engines do not draw identical tokens from identical seeds.
    """

    name = "vllm"

    def __init__(self, policy: Policy):
        try:
            from vllm import LLM
        except ImportError:
            raise ConfigError("engine = 'vllm' needs the vllm package (pip install prereg-kit[vllm])") from None
        # vLLM's V1 engine runs in a child process by default, where the trainer's weights cannot
        # be copied in; the colocated engine must live in this process (as verl and TRL run it).
        mp = os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        if mp != "0":
            raise ConfigError(f"engine = 'vllm' copies weights in-process: VLLM_ENABLE_V1_MULTIPROCESSING={mp!r} "
                              "must be unset or '0'")
        self.policy = policy
        self.llm = LLM(model=policy.path, dtype="bfloat16", seed=0, enable_prefix_caching=False,
                       gpu_memory_utilization=policy.cfg.engine.vllm_gpu_memory_utilization)

    def generate(self, prompts, *, noise_seed, keys, limit, temperature, top_p, batch_size=None):
        from vllm import SamplingParams

        pol = self.policy
        params = [SamplingParams(n=1, temperature=temperature, top_p=top_p, max_tokens=limit,
                                 seed=derive_seed(noise_seed, k, "request")) for k in keys]
        outs = self.llm.generate(list(prompts), params, use_tqdm=False)
        pad = pol.tokenizer.pad_token_id
        comp = torch.full((len(prompts), limit), pad, dtype=torch.long)
        for i, o in enumerate(outs):
            toks = list(o.outputs[0].token_ids)[:limit]
            comp[i, :len(toks)] = torch.tensor(toks, dtype=torch.long)
        enc = pol.tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
        return _rollouts(pol, enc["input_ids"].to(pol.device), enc["attention_mask"].to(pol.device),
                         comp.to(pol.device), limit)

    def sync_weights(self) -> None:
        """Copy every training parameter into vLLM's model (its ``load_weights`` maps HF names
        onto its fused layers and casts to bf16). vLLM ≥ 0.8 (V1 engine, the only one from 0.11)
        has no ``model_executor.driver_worker.model_runner`` on ``llm_engine``: its public
        ``LLM.apply_model`` runs the copy on the model in the (in-process) worker instead."""
        weights = [(n, p.detach()) for n, p in self.policy.model.named_parameters()]
        if hasattr(self.llm, "apply_model"):
            self.llm.apply_model(lambda model: model.load_weights(iter(weights)))
            return
        try:  # vLLM before apply_model: the pre-V1 engine's layout
            worker_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        except AttributeError:
            raise ConfigError("engine = 'vllm': this vLLM version has neither LLM.apply_model nor "
                              "llm_engine.model_executor.driver_worker.model_runner.model; weights cannot be synced") from None
        worker_model.load_weights(iter(weights))


def make_engine(policy: Policy) -> Engine:
    return VLLMEngine(policy) if policy.cfg.engine.name == "vllm" else HFEngine(policy)
