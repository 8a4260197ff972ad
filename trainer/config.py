"""Trainer settings: the recipe a plan's ``[recipe]`` table (plus a configuration's overrides)
resolves to, and the run spec a launcher hands to one run process.

Defaults are the dense-rewards paper's matched-compute recipe (§2.3 "Implementation", C.1;
extract §1.0, §3.1-3.2): 8 prompts × G = 8 completions, temperature 1, top-p 1, 380 tokens,
Adam (0.9, 0.999, 1e-8) without weight decay, clip 1, constant lr 1e-6, no KL, no ratio clipping.
Every field is documented in ``docs/trainer.md``. No torch here.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from prereg_kit.errors import PreregError
from prereg_kit.stages import Stage


class ConfigError(PreregError):
    """A recipe or run spec the trainer cannot use (exit code 2)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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
    """The program judge of ``task = "code"`` (``trainer/sandbox.py``; docs/multi-reward.md,
    "Program channels in training"). Timeouts are the paper's (P2:L113); tests may shorten them."""

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


class TrainerConfig(_Strict):
    """One configuration's resolved recipe (paper defaults; see docs/trainer.md)."""

    # --- task and model
    task: Literal["synthetic", "file", "code"] = "synthetic"
    train_file: str = ""  # task="file": MATH/GSM8K-layout JSONL or Parquet; task="code": code layout ("": built-in)
    task_levels: list[int] = [1, 2, 3]  # synthetic (math or code) task: difficulty levels of pool and eval set
    task_train_problems: int = Field(2000, gt=0)
    task_seed: int = Field(0, ge=0)
    model: str = "tiny"  # "tiny" or a local transformers model folder
    model_sha256: str = ""  # "sha256:<hex>": the run refuses other weights (warmstart.weights_sha256); "": any
    tiny: TinyModel = TinyModel()
    warm_start: WarmStart = WarmStart()
    sandbox: SandboxSettings = SandboxSettings()  # task = "code": the program judge's limits
    enable_thinking: bool = False  # Qwen3 chat templates: non-thinking mode (paper §2.3)
    template_date: str = "26 Jul 2024"  # Llama-3 chat templates insert a date: fix it (C.1)
    # --- one iteration (§2.3; extract §3.1)
    prompts_per_iteration: int = Field(8, gt=0)
    group_size: int = Field(8, gt=0)
    completion_limit: int = Field(380, gt=0)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    reward_verifier: Literal["default", "strict", "math_verify"] = "default"
    credit: Literal["outcome", "monte_carlo", "equal_iteration", "shuffled", "implicit", "critic_td",
                    "critic_baseline", "vineppo", "continuation_reuse"] = "outcome"  # dense rules: docs/interventions.md
    advantage_eps: float = Field(1e-6, gt=0)
    # --- the update (§2.3; extract §3.2)
    learning_rate: float = Field(1e-6, ge=0)
    lr_schedule: Literal["constant", "linear"] = "constant"
    adam_beta1: float = Field(0.9, ge=0, lt=1)
    adam_beta2: float = Field(0.999, ge=0, lt=1)
    adam_eps: float = Field(1e-8, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    micro_batch_size: int = Field(0, ge=0)  # completions per forward/backward; 0 = all at once
    # --- machinery
    engine: Literal["hf", "vllm"] = "hf"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "float32", "bf16-autocast"] = "auto"
    threads: int = Field(0, ge=0)  # torch CPU threads in the run process; 0 = torch's default
    eval_batch_size: int = Field(512, gt=0)  # sequences per generation call during evaluation
    checkpoint_every: int = Field(0, ge=0)  # extra checkpoints every N iterations (0: at evaluations only)
    keep_checkpoint: bool = False  # keep the last checkpoint once the run is complete
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=1)
    # --- multi-reward (docs/multi-reward.md "Wiring in the trainer")
    channels: list[str | dict[str, Any]] = []  # [] = the verifier reward; else "name" or {name = ..., params}
    aggregation: dict[str, Any] = {}  # trainer.aggregate.parse_aggregation table (rule, lam, beta, ...)
    anchor: str = ""  # "": aggregation.anchor (index); a channel name; "elected": <study>/election.json

    # --- dense rewards (paper 1 §3.6-3.9, extract §1.E; docs/interventions.md "Dense rewards")
    mc_k: int = Field(4, gt=0)  # continuations per interior cut (S1: 4; S25: 1, 2)
    mc_segments: int = Field(6, ge=2)  # segments per completion: mc_segments − 1 interior cuts
    mc_cuts: list[int] = []  # explicit interior cut offsets in tokens; [] = round(i·limit/mc_segments)
    mc_continuation_limit: int = Field(0, ge=0)  # cap per continuation; 0 = rest of the completion limit
    mc_prompt_value: float = Field(0.5, ge=0, le=1)  # p̂_0, the value before the first token (L5411)
    mc_end_value: Literal["outcome", "none"] = "outcome"  # V at the end: R, or no credit on the last segment
    eq_alpha: float = Field(1.0, ge=0)  # α of c = A + α·w (equal_iteration, shuffled, implicit)
    eq_norm: Literal["max", "coequal"] = "max"  # batch max |w|, or co-equal standardization of A and w
    eq_gate: Literal["none", "opposition", "disagreement"] = "none"  # §G gates, before centering
    critic_start_iteration: int = Field(4, ge=1)  # first iteration index (0-based) scored by the critic
    critic_ridge: float = Field(1.0, gt=0)  # ridge penalty on standardized features
    critic_layer: int = -1  # hidden-state layer of the features (-1: last, after the final norm)
    critic_window: int = Field(32, ge=1)  # earlier iterations the critic is fit on (the latest ones)
    length_lambda: float = Field(0.0, ge=0)  # λ of the group-relative length reward (0: off)
    # reuse variants (extract §3.10; trainer/reuse.py): VinePPO-style "4 steps per batch" = 2 × 2, clip 0.2
    ppo_epochs: int = Field(1, ge=1)  # passes over each iteration's sequences
    ppo_minibatches: int = Field(1, ge=1)  # minibatches per pass, one clipped optimizer step each
    ppo_clip: float = Field(0.0, ge=0, lt=1)  # ratio clip ε of the multi-step update (0: unclipped ratio)

    # --- prompt selection (paper 1 C.1 "Prompt filters", extract §3.8; docs/interventions.md "Prompt selection")
    selection: Literal["none", "critic", "history", "level", "random_choice", "dynamic"] = "none"
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

    @field_validator("model_sha256")
    @classmethod
    def _check_model_sha256(cls, v: str) -> str:
        if v and not re.fullmatch(r"sha256:[0-9a-f]{64}", v):
            raise ValueError(f"expected 'sha256:' and 64 lowercase hex digits (as in a run's meta.json), got {v!r}")
        return v

    @model_validator(mode="after")
    def _check_selection(self) -> "TrainerConfig":
        n = self.prompts_per_iteration
        if self.selection in ("critic", "history", "level", "random_choice") and self.candidates < n:
            raise ValueError(f"candidates: {self.candidates} < prompts_per_iteration ({n})")
        if self.selection in ("critic", "history", "level") and self.keep_nearest + self.keep_random != n:
            raise ValueError(f"keep_nearest + keep_random must equal prompts_per_iteration ({n})")
        if self.selection == "dynamic" and self.dynamic_max_groups < n:
            raise ValueError(f"dynamic_max_groups: {self.dynamic_max_groups} < prompts_per_iteration ({n})")
        return self

    @model_validator(mode="after")
    def _check_dense(self) -> "TrainerConfig":
        if self.mc_cuts and (sorted(set(self.mc_cuts)) != self.mc_cuts or self.mc_cuts[0] < 1
                             or self.mc_cuts[-1] >= self.completion_limit):
            raise ValueError("mc_cuts: strictly increasing offsets in 1 .. completion_limit − 1")
        if self.credit == "implicit" and self.eq_gate == "disagreement":
            raise ValueError("eq_gate = 'disagreement' needs continuations; the implicit reward has none")
        self._check_reuse()
        return self

    def _check_reuse(self) -> None:
        """The reuse variants' preconditions (docs/interventions.md, "Reuse variants")."""
        if self.credit == "vineppo" and self.group_size < 2:
            raise ValueError("credit = 'vineppo': V(prompt) is a leave-one-out group mean; group_size must be ≥ 2")
        if self.credit == "vineppo" and self.mc_end_value == "none":
            raise ValueError("credit = 'vineppo' takes V(end) = R (mc_end_value = 'outcome')")
        if self.credit == "vineppo" and (self.channels or self.aggregation):
            raise ValueError("credit = 'vineppo' replaces the group advantage with 0/1 values; no reward channels")
        if self.credit == "continuation_reuse" and self.mc_k < 2:
            raise ValueError("credit = 'continuation_reuse': leave-one-out among the draws needs mc_k ≥ 2 "
                             "(with k = 1 every continuation's advantage is 0)")
        if self.credit == "continuation_reuse" and self.length_lambda:
            raise ValueError("credit = 'continuation_reuse' does not take the length reward (length_lambda)")
        if self.ppo_minibatches > self.prompts_per_iteration * self.group_size:
            raise ValueError("ppo_minibatches: more minibatches than completions per iteration")
        multi = self.ppo_epochs * self.ppo_minibatches > 1 or self.credit == "continuation_reuse"
        if multi and self.aggregation.get("rule") == "additive_kl":
            raise ValueError("the reuse update has no KL term: additive_kl needs one step per iteration")

    @model_validator(mode="after")
    def _check(self) -> "TrainerConfig":
        if self.task == "file" and not self.train_file:
            raise ValueError("task = 'file' needs train_file")
        if self.task in ("synthetic", "code") and not set(self.task_levels) <= {1, 2, 3}:
            raise ValueError("task_levels: synthetic levels are 1, 2, 3")
        if self.channels or self.aggregation or self.anchor or self.task == "code":
            from trainer.rewards import check_reward_config  # noqa: PLC0415

            check_reward_config(self)
        return self


def parse_config(data: dict[str, Any], *, where: str = "recipe") -> TrainerConfig:
    """Validate a resolved recipe; unknown keys and bad values become one-line ConfigErrors."""
    try:
        return TrainerConfig.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            key = ".".join(str(x) for x in err["loc"]) or "(recipe)"
            msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
            lines.append(f"{where}: {key}: {msg}")
        raise ConfigError(*lines) from None


class EvalSetSpec(_Strict):
    name: str
    source: str = ""
    n_problems: int | None = None
    levels: list[int] = []


class RunSpec(_Strict):
    """Everything one run process needs, written by the launcher as ``<run_dir>/spec.json``."""

    study: str
    configuration: str
    seed: int
    stage: Stage = "main"
    plan_hash: str
    study_dir: str
    run_dir: str
    cache_dir: str
    budget_tokens: int = Field(gt=0)  # B
    eval_interval: int = Field(gt=0)  # B/16 by default, in generated tokens
    train_to: float = Field(1.0, gt=0)  # run length as a multiple of B
    stop_iterations: int | None = Field(None, gt=0)  # also stop after this many iterations (election probes: T steps)
    eval_sets: list[EvalSetSpec]
    eval_samples: int = Field(8, gt=0)
    eval_temperature: float = Field(1.0, ge=0)
    eval_top_p: float = Field(1.0, gt=0, le=1)
    eval_greedy: bool = False
    config: TrainerConfig
    tool_version: str = ""

    @property
    def stop_tokens(self) -> int:
        """The run ends after the evaluation at or after this many generated tokens (k·B)."""
        return int(round(self.train_to * self.budget_tokens))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.model_dump_json(indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "RunSpec":
        try:
            return cls.model_validate_json(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"{path}: no run spec") from None
        except ValidationError as e:
            raise ConfigError(f"{path}: invalid run spec: {e.errors()[0]['msg']}") from None


def derive_seed(run_seed: int, index: int, purpose: str) -> int:
    """A sampling seed from (run seed, iteration or evaluation index, purpose).

    A pure function, so every configuration of a seed draws the same random numbers for the
    same purpose and index: evaluation uses common random numbers across configurations
    (paper §2.3, evaluation paragraph), and a resumed run redraws what it drew before.
    """
    h = hashlib.sha256(f"prereg-kit/{int(run_seed)}/{int(index)}/{purpose}".encode()).digest()
    return int.from_bytes(h[:8], "little") >> 1  # 63 bits: fits torch and numpy seeds


def settings_hash(obj: Any) -> str:
    """A short stable hash of JSON-able settings (cache keys of the warm start and the task)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
