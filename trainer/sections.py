"""The trainer's settings, one pydantic model per section of a recipe (``task``, ``model``,
``rollout``, ``update``, ``credit``, ``selection``, ``rewards``, ``evaluation``, ``engine``) with
the dense-rewards paper's matched-compute recipe as defaults (§2.3, §C.1
"Implementation"). ``trainer.config`` assembles them into ``TrainerConfig`` and reads plans into them;
every setting is documented in ``docs/trainer.md``. No torch here.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["CreditRuleName", "CreditSection", "EngineSection", "EvaluationSection", "ModelSection", "RewardsSection", "RolloutSection", "SandboxSettings", "SECTIONS", "SelectionRuleName", "SelectionSection", "TaskSection", "TinyModel", "UpdateSection", "WarmStart"]

class _Strict(BaseModel):
    # defer_build: the validator is made on first use, once for the outer model (a plan, a recipe),
    # not once per class as each is defined: lock and verify start faster
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class TinyModel(_Strict):
    """A tiny transformers causal LM built from its config (no hub), for CPU studies."""

    arch: Literal["qwen2", "llama"] = "qwen2"
    hidden_size: int = Field(96, gt=0)
    layers: int = Field(2, gt=0)
    heads: int = Field(4, gt=0)
    intermediate_size: int = Field(256, gt=0)
    init_seed: int = Field(0, ge=0)


class WarmStart(_Strict):
    """Supervised warm start of the tiny model on worked solutions (cached by a hash of these)."""

    steps: int = Field(300, ge=0)
    batch_size: int = Field(32, gt=0)
    learning_rate: float = Field(3e-3, gt=0)
    seed: int = Field(0, ge=0)
    answer_noise: float = Field(0.0, ge=0, lt=1)  # share of examples boxing a wrong answer (N ± 1, 2)


class SandboxSettings(_Strict):
    """The program judge of ``task = "code"`` (``trainer/rewards/sandbox/``; docs/multi-reward.md,
    "Program channels in training"). Timeouts are the multi-reward paper's (App. C.4); tests may shorten them."""

    small_timeout_s: float = Field(10.0, gt=0)  # paper: 10 s per small test
    mid_timeout_s: float = Field(30.0, gt=0)  # paper: 30 s for the mid-size test
    large_timeout_s: float = Field(30.0, gt=0)  # not stated in the paper: the mid-size value
    max_workers: int = Field(4, gt=0)  # programs judged at once (the paper's evaluation: 64)
    memory_mb: int = Field(1024, gt=0)  # RLIMIT_AS per test
    stop_on_failure: bool = False  # stop a program's small/mid tests at its first failure
    network: Literal["auto", "require", "off"] = "auto"  # "require": refuse to run without a network namespace
    cpu_basis: Literal["program", "process"] = "program"  # T without / with the interpreter's start-up
    # main/calibration code rewards without an OS sandbox (bubblewrap) are refused unless true
    allow_weak_isolation: bool = Field(False, strict=True)


class TaskSection(_Strict):
    """The training pool and the synthetic task's evaluation sets (docs/data.md)."""

    # "math"/"gsm8k": the MATH / GSM8K training split (train_file, else the hub), evaluation overlaps removed
    name: Literal["synthetic", "file", "code", "math", "gsm8k"] = "synthetic"
    train_file: str = ""  # name="file", "math", "gsm8k": MATH/GSM8K-layout JSONL or Parquet; name="code": code layout ("": built-in)
    levels: list[int] = [1, 2, 3]  # synthetic task: its difficulty levels; "math": MATH levels (1-5) kept in the pool
    train_problems: int = Field(2000, gt=0)
    seed: int = Field(0, ge=0)


class ModelSection(_Strict):
    """The starting policy: the tiny model (warm-started) or a local transformers folder."""

    name: str = "tiny"  # "tiny" or a local transformers model folder
    sha256: str = ""  # "sha256:<hex>": the run refuses other weights (warmstart.weights_sha256); "": any
    tiny: TinyModel = TinyModel()
    warm_start: WarmStart = WarmStart()
    enable_thinking: bool = False  # Qwen3 chat templates: non-thinking mode (paper §2.3)
    template_date: str = "26 Jul 2024"  # Llama-3 chat templates insert a date: fix it (C.1)

    @field_validator("sha256")
    @classmethod
    def _check_sha256(cls, v: str) -> str:
        if v and not re.fullmatch(r"sha256:[0-9a-f]{64}", v):
            raise ValueError(f"expected 'sha256:' and 64 lowercase hex digits (as in a run's meta.json), got {v!r}")
        return v


class RolloutSection(_Strict):
    """One iteration's sampling (dense-rewards paper §C.1 "Implementation")."""

    prompts_per_iteration: int = Field(8, gt=0)
    group_size: int = Field(8, gt=0)
    completion_limit: int = Field(380, gt=0)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)


class UpdateSection(_Strict):
    """The update: Adam, gradient clip, learning-rate schedule (§C.1 "Implementation"); the
    reuse variants' multi-step update (App. E: VinePPO-style "4 steps per batch" = 2 × 2, clip 0.2)."""

    learning_rate: float = Field(1e-6, ge=0)
    lr_schedule: Literal["constant", "linear"] = "constant"
    adam_beta1: float = Field(0.9, ge=0, lt=1)
    adam_beta2: float = Field(0.999, ge=0, lt=1)
    adam_eps: float = Field(1e-8, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    micro_batch_size: int = Field(0, ge=0)  # completions per forward/backward; 0 = all at once
    ppo_epochs: int = Field(1, ge=1)  # passes over each iteration's sequences
    ppo_minibatches: int = Field(1, ge=1)  # minibatches per pass, one clipped optimizer step each
    # Ratio clip of the multi-step update: ε (ratio in [1 − ε, 1 + ε]) or [ε_low, ε_high], the
    # multi-reward paper's clip-higher 0.2/0.28 (App. C.4); 0: unclipped ratio.
    ppo_clip: float | tuple[float, float] = 0.0

    @field_validator("ppo_clip", mode="before")
    @classmethod
    def _clip(cls, v: Any) -> float | tuple[float, float]:
        pair = isinstance(v, (list, tuple))
        parts = tuple(v) if pair else (v,)
        if (pair and len(parts) != 2) or not all(isinstance(e, (int, float)) and not isinstance(e, bool) for e in parts):
            raise ValueError(f"a number ε or a pair [ε_low, ε_high], got {v!r}")
        for e in parts:
            if not 0 <= e < 1:
                raise ValueError(f"each ε must be in [0, 1), got {e}")
        return (float(parts[0]), float(parts[1])) if pair else float(v)

    @property
    def clip_range(self) -> tuple[float, float]:
        """(ε_low, ε_high): the ratio is clipped to [1 − ε_low, 1 + ε_high]."""
        return self.ppo_clip if isinstance(self.ppo_clip, tuple) else (self.ppo_clip, self.ppo_clip)


CreditRuleName = Literal["outcome", "monte_carlo", "equal_iteration", "shuffled", "implicit", "critic_td",
                     "critic_baseline", "vineppo", "continuation_reuse", "rloo", "prm_reward", "prm_baseline"]


class CreditSection(_Strict):
    """Per-token credit: outcome-only GRPO (eq. 1-2) or a dense rule (dense-rewards paper §2.2, §C.1,
    App. G; docs/interventions.md "Dense rewards")."""

    rule: CreditRuleName = "outcome"
    advantage_eps: float = Field(1e-6, gt=0)  # ε of eq. (1)
    mc_k: int = Field(4, gt=0)  # continuations per interior cut (S1: 4; S25: 1, 2)
    mc_segments: int = Field(6, ge=2)  # segments per completion: mc_segments − 1 interior cuts
    mc_cuts: list[int] = []  # explicit interior cut offsets in tokens; [] = round(i·limit/mc_segments)
    mc_continuation_limit: int = Field(0, ge=0)  # cap per continuation; 0 = rest of the completion limit
    mc_prompt_value: float = Field(0.5, ge=0, le=1)  # p̂_0, the value before the first token (Table 16 caption)
    mc_end_value: Literal["outcome", "none"] = "outcome"  # V at the end: R, or no credit on the last segment
    eq_alpha: float = Field(1.0, ge=0)  # α of c = A + α·w (equal_iteration, shuffled, implicit)
    eq_norm: Literal["max", "coequal"] = "max"  # batch max |w|, or co-equal standardization of A and w
    eq_gate: Literal["none", "opposition", "disagreement"] = "none"  # §G gates, before centering
    critic_start_iteration: int = Field(4, ge=1)  # first iteration index (0-based) scored by the critic
    critic_ridge: float = Field(1.0, gt=0)  # ridge penalty on standardized features
    critic_layer: int = -1  # hidden-state layer of the features (-1: last, after the final norm)
    critic_window: int = Field(32, ge=1)  # earlier iterations the critic is fit on (the latest ones)
    length_lambda: float = Field(0.0, ge=0)  # λ of the group-relative length reward (0: off)
    # The frozen process-reward model of S4's pilots (Qwen2.5-Math-PRM-7B; dense-rewards paper App. E).
    prm_model: str = ""  # local model folder (relative to the study) or a hub id already in the local cache
    prm_step_separator: str = Field("\n\n", min_length=1)  # steps of a completion (Qwen2.5-Math-PRM's convention)
    prm_step_token: str = Field("<extra_0>", min_length=1)  # the PRM scores each step at this token
    prm_add_outcome: bool = False  # prm_reward: add the outcome advantage A_g ("with the outcome reward added")

    @model_validator(mode="after")
    def _check(self) -> "CreditSection":
        if self.rule in ("prm_reward", "prm_baseline") and not self.prm_model.strip():
            raise ValueError(f"rule = {self.rule!r} needs credit.prm_model (a local model folder or hub id)")
        if self.prm_add_outcome and self.rule != "prm_reward":
            raise ValueError("prm_add_outcome applies to rule = 'prm_reward' only")
        if self.rule == "implicit" and self.eq_gate == "disagreement":
            raise ValueError("eq_gate = 'disagreement' needs continuations; the implicit reward has none")
        if self.rule == "vineppo" and self.mc_end_value == "none":
            raise ValueError("rule = 'vineppo' takes V(end) = R (mc_end_value = 'outcome')")
        if self.rule == "continuation_reuse" and self.mc_k < 2:
            raise ValueError("rule = 'continuation_reuse': leave-one-out among the draws needs mc_k ≥ 2 "
                             "(with k = 1 every continuation's advantage is 0)")
        if self.rule == "continuation_reuse" and self.length_lambda:
            raise ValueError("rule = 'continuation_reuse' does not take the length reward (length_lambda)")
        return self


SelectionRuleName = Literal["none", "critic", "history", "level", "random_choice", "dynamic"]


class SelectionSection(_Strict):
    """Prompt selection (dense-rewards paper §C.1 "Prompt filters"; docs/interventions.md)."""

    rule: SelectionRuleName = "none"
    candidates: int = Field(24, gt=0)  # candidates per iteration: prompt_stream_batch(pool, seed, it, candidates)
    target: float = Field(0.5, ge=0, le=1)  # predicted success the filters aim at
    keep_nearest: int = Field(6, ge=0)  # candidates kept by nearness of p̂ to the target
    keep_random: int = Field(2, ge=0)  # others kept, drawn uniformly from the remaining candidates
    warmup_prompts: int = Field(32, ge=0)  # until this many prompts are trained: the first candidates
    prompt_critic_window: int = Field(32, ge=1)  # iterations of (feature, group mean) pairs the prompt critic is fit on
    prompt_critic_ridge: float = Field(1.0, gt=0)  # ridge λ of the prompt critic (raw features, free intercept)
    prompt_critic_layer: int = -1  # hidden-state layer at the last prompt token (-1: last, after the final norm)
    recent_window: int = Field(32, ge=1)  # iterations behind the history/level filters' "recent mean reward"
    dynamic_max_groups: int = Field(96, gt=0)  # dynamic sampling: groups generated per iteration at most


class RewardsSection(_Strict):
    """The training reward: the verifier, reward channels, their aggregation rule and anchor, the
    program judge (docs/multi-reward.md "Wiring in the trainer")."""

    verifier: Literal["default", "strict", "math_verify"] = "default"
    channels: list[str | dict[str, Any]] = []  # [] = the verifier reward; else "name" or {name = ..., params}
    aggregation: dict[str, Any] = {}  # the aggregation table (rule, lam, beta, ...; docs/multi-reward.md); "X" = { rule = "X" }
    anchor: str = ""  # "": aggregation.anchor (index); a channel name; "elected": <study>/election.json
    sandbox: SandboxSettings = SandboxSettings()  # task "code": the program judge's limits

    @field_validator("aggregation", mode="before")
    @classmethod
    def _rule_name(cls, v: Any) -> Any:
        """A rule name alone stands for the table with that rule and the paper's constants."""
        return {"rule": v} if isinstance(v, str) else v


class EvaluationSection(_Strict):
    """How evaluation generates (what is evaluated, and how often, is the plan's)."""

    batch_size: int = Field(512, gt=0)  # sequences per generation call during evaluation


class EngineSection(_Strict):
    """Where and how the run computes; none of it changes what is drawn."""

    name: Literal["hf", "vllm"] = "hf"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "float32", "bf16-autocast"] = "auto"
    threads: int = Field(0, ge=0)  # torch CPU threads in the run process; 0 = torch's default
    checkpoint_every: int = Field(0, ge=0)  # extra checkpoints every N iterations (0: at evaluations only)
    keep_checkpoint: bool = False  # keep the last checkpoint once the run is complete
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=1)


SECTIONS: dict[str, type[_Strict]] = {
    "task": TaskSection, "model": ModelSection, "rollout": RolloutSection, "update": UpdateSection,
    "credit": CreditSection, "selection": SelectionSection, "rewards": RewardsSection,
    "evaluation": EvaluationSection, "engine": EngineSection,
}
