"""The frozen process-reward model (PRM) of the dense-rewards paper's pilots (App. E,
"Process rewards from a frozen PRM": Qwen2.5-Math-PRM-7B): loading it, cutting a
completion into reasoning steps, and scoring each step.

* **Steps.** A completion is cut at ``credit.prm_step_separator`` (default ``"\\n\\n"``, the
  separator Qwen2.5-Math-PRM is trained on); empty pieces are dropped. A step's last token is the
  first completion token at which the decoded prefix covers the step's text
  (:func:`step_end_tokens`); the last step ends at the completion's last token.
* **Scores.** The PRM reads the problem and the steps, each followed by ``credit.prm_step_token``
  (``"<extra_0>"`` for Qwen2.5-Math-PRM), rendered with the PRM's chat template when it has one
  (system turn "Please reason step by step, and put your final answer within \\boxed{}.", as the
  model card does). The score of step k is the probability of the positive class at the k-th step
  token: softmax of the two logits, class 1 (a single logit: its sigmoid).
* **Loading.** Like the policy (``trainer.core.policy.load_policy``): a local model folder, the
  path taken relative to the study; or a hub id that is already in the local Hugging Face cache
  (the trainer never downloads). A folder whose config names a ``…ForTokenClassification``
  architecture loads with ``AutoModelForTokenClassification``; any other (Qwen2.5-Math-PRM's
  ``Qwen2ForProcessRewardModel``) with ``AutoModel`` and ``trust_remote_code``, running the code
  the model folder ships. The PRM is frozen: eval mode, no gradients, bf16 on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from trainer.core.policy import quiet_transformers
from trainer.errors import ConfigError

SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


@dataclass
class ProcessRewardModel:
    """A frozen PRM with its tokenizer and the id of its step token."""

    model: Any
    tokenizer: Any
    device: torch.device
    step_token: str
    step_token_id: int

    def render(self, problem: str, steps: Sequence[str]) -> str:
        """The PRM's input: the problem, then the steps each closed by the step token."""
        # A step token inside a step's text would shift every score after it: it is removed.
        answer = "".join(s.replace(self.step_token, "") + self.step_token for s in steps)
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(
                [{"role": "system", "content": SYSTEM}, {"role": "user", "content": problem},
                 {"role": "assistant", "content": answer}], tokenize=False, add_generation_prompt=False)
        return f"{problem}\n\n{answer}"

    @torch.no_grad()
    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]], batch: int = 8) -> list[list[float]]:
        """Per completion, the PRM's probability that each step is correct (one score per step)."""
        out: list[list[float]] = []
        for s in range(0, len(problems), batch):
            texts = [self.render(p, st) for p, st in zip(problems[s:s + batch], steps[s:s + batch])]
            enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            ids, attn = enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device)
            logits = self.model(input_ids=ids, attention_mask=attn)[0].float()
            probs = logits.sigmoid()[..., 0] if logits.shape[-1] == 1 else logits.softmax(-1)[..., 1]
            for row, st in zip(range(ids.shape[0]), steps[s:s + batch]):
                got = probs[row][(ids[row] == self.step_token_id) & (attn[row] > 0)].tolist()
                if len(got) != len(st):  # the tokenizer split the step token
                    raise ValueError(f"the PRM input has {len(got)} step tokens {self.step_token!r} for {len(st)} steps")
                out.append(got)
        return out


def resolve_prm(name: str, study_dir: str | Path) -> str:
    """The folder to load: ``name`` as a path (relative to the study) when that folder exists,
    else the hub id itself, which ``from_pretrained(local_files_only=True)`` finds in the cache."""
    p = Path(name).expanduser()
    p = p if p.is_absolute() else Path(study_dir) / p
    return str(p) if p.is_dir() else name


def load_prm(name: str, study_dir: str | Path, device: torch.device, step_token: str) -> ProcessRewardModel:
    """Load the frozen PRM (module docstring, "Loading")."""
    from transformers import AutoConfig, AutoModel, AutoModelForTokenClassification, AutoTokenizer

    quiet_transformers()
    src = resolve_prm(name, study_dir)
    try:
        conf = AutoConfig.from_pretrained(src, trust_remote_code=True, local_files_only=True)
    except (OSError, ValueError):
        raise ConfigError(f"credit.prm_model: {name!r} is neither a model folder (looked in {Path(study_dir) / name}) "
                          "nor a hub id in the local cache; the trainer never downloads models") from None
    tok = AutoTokenizer.from_pretrained(src, trust_remote_code=True, local_files_only=True)
    tok.padding_side = "right"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    step_id = tok.convert_tokens_to_ids(step_token)
    if step_id is None or step_id == tok.unk_token_id or tok.decode([step_id]) != step_token:
        raise ConfigError(f"credit.prm_step_token: {step_token!r} is not one token of the PRM's tokenizer ({src})")
    arch = (getattr(conf, "architectures", None) or [""])[0]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if arch.endswith("ForTokenClassification"):
        model = AutoModelForTokenClassification.from_pretrained(src, dtype=dtype, local_files_only=True)
    else:
        model = AutoModel.from_pretrained(src, dtype=dtype, trust_remote_code=True, local_files_only=True)
    model.to(device).eval().requires_grad_(False)
    return ProcessRewardModel(model, tok, device, step_token, int(step_id))


def split_steps(text: str, separator: str) -> list[tuple[str, int]]:
    """The non-empty steps of a completion and the character offset where each one's text ends."""
    steps, start = [], 0
    for piece in text.split(separator):
        end = start + len(piece)
        if piece.strip():
            steps.append((piece.strip(), end - (len(piece) - len(piece.rstrip()))))
        start = end + len(separator)
    return steps


def step_end_tokens(tokenizer: Any, ids: Sequence[int], ends: Sequence[int]) -> list[int]:
    """For each step's end offset in the decoded completion, the index of the completion token
    that completes it: the first h with len(decode(ids[:h + 1])) ≥ end (binary search); the last
    step always ends at the last token."""
    n = len(ids)
    out = []
    for e in ends:
        lo, hi = 0, n - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if len(tokenizer.decode(list(ids[:mid + 1]), skip_special_tokens=True)) >= e:
                hi = mid
            else:
                lo = mid + 1
        out.append(lo)
    if out:
        out[-1] = n - 1
    return out
