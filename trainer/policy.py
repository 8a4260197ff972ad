"""The policy: a transformers causal LM with its tokenizer and chat template, its generation
engines (HF ``generate``; vLLM when installed) and its one on-policy update.

Paper 1 §2.3 "Implementation" and C.1 (extract §3.1-3.2): float32 master weights and Adam
state, bf16 autocast compute on GPU, one Adam step per iteration (β = (0.9, 0.999), ε = 1e-8,
no weight decay), gradient-norm clip 1, no KL, no ratio clipping; micro-batching that changes
neither the update nor the token count.

Sampling is driven by explicit per-request random numbers: request r of a call draws its
uniforms from ``numpy.random.default_rng([noise_seed, key_r])`` and each token is chosen by the
inverse CDF of the (temperature, top-p) distribution at that uniform. Two policies that are
given the same seed therefore draw with *common random numbers* request by request, whatever
the batch layout (the coupling evaluation needs across configurations of a seed).
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np
import torch

from trainer.config import ConfigError, TrainerConfig, derive_seed


# --------------------------------------------------------------------------------------------
# Device, precision, determinism
# --------------------------------------------------------------------------------------------
def pick_device(cfg: TrainerConfig) -> torch.device:
    """``auto``: the (first visible) GPU when CUDA exists, else the CPU."""
    if cfg.engine.device == "cuda" or (cfg.engine.device == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError("device = 'cuda' but torch sees no CUDA device")
        return torch.device("cuda")
    return torch.device("cpu")


def autocast_dtype(cfg: TrainerConfig, device: torch.device) -> torch.dtype | None:
    """bf16 autocast on GPU (paper: float32 master weights, bf16 compute); none on CPU."""
    if cfg.engine.precision == "float32":
        return None
    if cfg.engine.precision == "bf16-autocast" or (cfg.engine.precision == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def set_determinism(cfg: TrainerConfig, device: torch.device) -> None:
    """Fixed threads and deterministic kernels where torch offers them (bit-exact resume on CPU)."""
    if cfg.engine.threads:
        torch.set_num_threads(cfg.engine.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = False


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work, so stage timings measure the stage (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def quiet_transformers() -> None:
    """No progress bars or advisory warnings from transformers in run logs."""
    import warnings  # noqa: PLC0415

    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning, module="torch.nn.modules.module")


# --------------------------------------------------------------------------------------------
# The policy model
# --------------------------------------------------------------------------------------------
@dataclass
class Policy:
    """A causal LM in float32 (master weights) with its tokenizer and how prompts are rendered."""

    model: Any
    tokenizer: Any
    device: torch.device
    amp_dtype: torch.dtype | None
    cfg: TrainerConfig
    path: str = ""

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def render(self, problem_text: str) -> str:
        """The chat-rendered prompt: one user turn plus the assistant header.

        Qwen3 templates get ``enable_thinking=False`` (non-thinking mode) and Llama-3 templates a
        fixed ``date_string`` (paper C.1); templates that do not use them ignore them.
        """
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": problem_text}], tokenize=False, add_generation_prompt=True,
            enable_thinking=self.cfg.model.enable_thinking, date_string=self.cfg.model.template_date,
        )

    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.eos_token_id)


def load_policy(cfg: TrainerConfig, model_path: str | Path) -> Policy:
    """Load a saved causal LM and tokenizer (local folder; no hub) in float32 on the run's device."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    quiet_transformers()
    device = pick_device(cfg)
    path = str(model_path)
    if not (Path(path) / "config.json").is_file():
        raise ConfigError(f"{path}: not a transformers model folder (no config.json); the trainer never downloads models")
    if (Path(path) / "synthetic_tokenizer.json").is_file():
        # The synthetic task's tokenizer: AutoTokenizer would pick the model type's class instead.
        from trainer.synthetic import load_tokenizer  # noqa: PLC0415

        tok = load_tokenizer(path)
    else:
        tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"  # prompts are left-padded so completions start at one column
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device)
    model.generation_config.pad_token_id = tok.pad_token_id
    return Policy(model, tok, device, autocast_dtype(cfg, device), cfg, path)


# --------------------------------------------------------------------------------------------
# Rollouts and sampling
# --------------------------------------------------------------------------------------------
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
        from transformers import GenerationConfig, LogitsProcessorList  # noqa: PLC0415

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
    the error without vLLM) is tested against a stand-in module (tests/test_trainer_vllm_stub.py);
    real vLLM needs a GPU and has not been run by this project yet. Per-request seeds are derived like the HF engine's, but vLLM's
    sampler is its own: the two engines do not draw identical tokens from identical seeds.
    """

    name = "vllm"

    def __init__(self, policy: Policy):
        try:
            from vllm import LLM  # noqa: PLC0415
        except ImportError:
            raise ConfigError("engine = 'vllm' needs the vllm package (pip install prereg-kit[vllm])") from None
        self.policy = policy
        self.llm = LLM(model=policy.path, dtype="bfloat16", seed=0, enable_prefix_caching=False,
                       gpu_memory_utilization=policy.cfg.engine.vllm_gpu_memory_utilization)

    def generate(self, prompts, *, noise_seed, keys, limit, temperature, top_p, batch_size=None):
        from vllm import SamplingParams  # noqa: PLC0415

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
        worker_model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        worker_model.load_weights(((n, p.detach()) for n, p in self.policy.model.named_parameters()))


def make_engine(policy: Policy) -> Engine:
    return VLLMEngine(policy) if policy.cfg.engine.name == "vllm" else HFEngine(policy)


# --------------------------------------------------------------------------------------------
# The update
# --------------------------------------------------------------------------------------------
def token_logprobs(policy: Policy, seqs: torch.Tensor, attn: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """log π_θ(a_{g,h} | x, a_{g,<h}) for every completion position h: [N, T] (float32)."""
    t = seqs.shape[1] - prompt_len
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # left padding: positions count real tokens only
    with policy.autocast():
        out = policy.model(input_ids=seqs, attention_mask=attn, position_ids=pos, logits_to_keep=t + 1,
                           use_cache=False)
    logits = out.logits[:, :-1].float()  # positions P-1 .. P+T-2 predict completion tokens
    return logits.log_softmax(-1).gather(-1, seqs[:, prompt_len:].unsqueeze(-1)).squeeze(-1)


def make_optimizer(policy: Policy) -> torch.optim.Optimizer:
    """Adam, β = (0.9, 0.999), ε = 1e-8, no weight decay (a positive weight_decay uses AdamW)."""
    c = policy.cfg.update
    params = [p for p in policy.model.parameters() if p.requires_grad]
    kw = dict(lr=c.learning_rate, betas=(c.adam_beta1, c.adam_beta2), eps=c.adam_eps, foreach=False)
    if c.weight_decay > 0:
        return torch.optim.AdamW(params, weight_decay=c.weight_decay, **kw)
    return torch.optim.Adam(params, weight_decay=0.0, **kw)


def learning_rate_at(cfg: TrainerConfig, tokens_before: int, budget_tokens: int) -> float:
    """Constant (paper default), or ``linear``: lr·(1 − f), f the budget share generated before
    the iteration starts, reaching 0 at B (S32, extract §3.2; learning_rate is the peak)."""
    if cfg.update.lr_schedule == "linear":
        return cfg.update.learning_rate * max(0.0, 1.0 - tokens_before / budget_tokens)
    return cfg.update.learning_rate


def update_step(policy: Policy, optimizer: torch.optim.Optimizer, roll: Rollouts, credit: torch.Tensor,
                lr: float, *, ref: Policy | None = None, kl_beta: float = 0.0) -> dict[str, float]:
    """One on-policy optimizer step on all completions of the iteration (paper eq. 2).

    The loss is −Σ_g Σ_h c_{g,h} log π(a_{g,h}) / N, N the iteration's completions, computed in
    micro-batches of ``micro_batch_size`` completions whose gradients add up to the same sum.

    ``ref`` and ``kl_beta`` > 0 (multi-reward rule ``additive_kl``): the loss adds
    β·Σ_g Σ_h k3_{g,h} / N, k3 = exp(d) − d − 1 with d = log π_ref − log π_θ on the sampled
    tokens, the non-negative unbiased per-token estimator of KL(π_θ ‖ π_ref) (Schulman's k3, as in
    GRPO); ``kl`` (per generated token) is logged.
    """
    from trainer.credit import policy_loss  # noqa: PLC0415

    model = policy.model
    model.train()
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    n = roll.n
    mb = policy.cfg.update.micro_batch_size or n
    credit = credit.to(policy.device)
    cmask = roll.completion_mask.to(policy.device)
    total = 0.0
    use_kl = ref is not None and kl_beta > 0
    kl_sum = 0.0
    t0 = time.perf_counter()
    for s in range(0, n, mb):
        sl = slice(s, s + mb)
        logp = token_logprobs(policy, roll.sequences[sl], roll.attention_mask[sl], roll.prompt_len)
        loss = policy_loss(logp, credit[sl], cmask[sl], n_completions=n)
        if use_kl:
            with torch.no_grad():
                ref_logp = token_logprobs(ref, roll.sequences[sl], roll.attention_mask[sl], roll.prompt_len)
            d = ref_logp - logp
            k3 = (torch.exp(d) - d - 1.0) * cmask[sl]
            loss = loss + kl_beta * k3.sum() / n
            kl_sum += float(k3.detach().sum())
        loss.backward()
        total += float(loss.detach())
    synchronize(policy.device)
    fwd_bwd = time.perf_counter() - t0
    params = [p for p in model.parameters() if p.requires_grad]
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, policy.cfg.update.grad_clip))
    optimizer.step()
    out = {"loss": total, "grad_norm": grad_norm, "lr": lr, "fwd_bwd_seconds": fwd_bwd}
    if use_kl:
        out["kl"] = kl_sum / max(1.0, float(cmask.sum()))
    return out
