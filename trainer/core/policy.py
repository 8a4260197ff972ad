"""The policy: a transformers causal LM with its tokenizer and chat template, on the run's device
and precision, and the forward passes other parts read from it (token log-probabilities, hidden
states). Generation is in ``trainer.core.engines``, the update in ``trainer.core.update``.

Dense-rewards paper §C.1 "Implementation": float32 master weights, bf16 autocast
compute on GPU, deterministic kernels where torch offers them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainer.config import TrainerConfig
from trainer.data.synthetic import load_tokenizer
from trainer.errors import ConfigError


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
    import warnings

    from transformers.utils import logging as hf_logging

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
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_transformers()
    device = pick_device(cfg)
    path = str(model_path)
    if not (Path(path) / "config.json").is_file():
        raise ConfigError(f"{path}: not a transformers model folder (no config.json); the trainer never downloads models")
    if (Path(path) / "synthetic_tokenizer.json").is_file():
        # The synthetic task's tokenizer: AutoTokenizer would pick the model type's class instead.
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
# Forward passes: token log-probabilities and hidden states
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


@torch.no_grad()
def hidden_states(policy: Policy, input_ids: torch.Tensor, attention_mask: torch.Tensor, columns,
                  layer: int = -1) -> torch.Tensor:
    """The policy's hidden state ``hidden_states[layer]`` (−1: the last layer, after the final
    norm) at the given sequence columns: [n, d] for one column index, [n, len(columns), d] for
    several; float32 on the CPU. One no-grad forward pass in eval mode over left-padded
    sequences (positions count real tokens only). The learned critic's and the prompt critic's
    features."""
    pos = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    was_training = policy.model.training
    policy.model.eval()
    with policy.autocast():
        out = policy.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos,
                           output_hidden_states=True, use_cache=False, logits_to_keep=1)
    policy.model.train(was_training)
    h = out.hidden_states[layer].float()
    if isinstance(columns, torch.Tensor):
        columns = columns.to(h.device)
    return h[:, columns].cpu()
