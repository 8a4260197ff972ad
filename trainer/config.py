"""Trainer settings: the recipe a plan's ``[recipe]`` table (plus a configuration's overrides)
resolves to, and the run spec a launcher hands to one run process.

Defaults are the dense-rewards paper's matched-compute recipe (§2.3 "Implementation", C.1;
extract §1.0, §3.1-3.2): 8 prompts × G = 8 completions, temperature 1, top-p 1, 380 tokens,
Adam (0.9, 0.999, 1e-8) without weight decay, clip 1, constant lr 1e-6, no KL, no ratio clipping.
The settings come in sections (``task``, ``model``, ``rollout``, ``update``, ``credit``,
``selection``, ``rewards``, ``evaluation``, ``engine``), one pydantic model each; the flat keys of
older plans (``mc_k = 4`` for ``credit.mc_k``) are read into them through ``FLAT_KEYS``. Every
setting is documented in ``docs/trainer.md`` (a test holds the two together). No torch here.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from prereg_kit.plan import Plan, merge_tables
from prereg_kit.stages import Stage
from trainer.errors import ConfigError
from trainer.rewards.spec import check_reward_config

__all__ = ["ConfigError", "EvalSetSpec", "RunSpec", "SandboxSettings", "SECTIONS", "TinyModel", "TrainerConfig",
           "WarmStart", "config_of", "derive_seed", "flat_keys", "merge_recipe", "parse_config", "plan_flat_keys",
           "recipe_of", "sectioned", "settings_hash", "updated"]


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
    """The program judge of ``task = "code"`` (``trainer/rewards/sandbox/``; docs/multi-reward.md,
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


class TaskSection(_Strict):
    """The training pool and the synthetic task's evaluation sets (docs/data.md)."""

    name: Literal["synthetic", "file", "code"] = "synthetic"
    train_file: str = ""  # name="file": MATH/GSM8K-layout JSONL or Parquet; name="code": code layout ("": built-in)
    levels: list[int] = [1, 2, 3]  # synthetic (math or code) task: difficulty levels of pool and eval set
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
    """One iteration's sampling (§2.3; extract §3.1)."""

    prompts_per_iteration: int = Field(8, gt=0)
    group_size: int = Field(8, gt=0)
    completion_limit: int = Field(380, gt=0)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)


class UpdateSection(_Strict):
    """The update: Adam, gradient clip, learning-rate schedule (§2.3; extract §3.2); the reuse
    variants' multi-step update (extract §3.10: VinePPO-style "4 steps per batch" = 2 × 2, clip 0.2)."""

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
    ppo_clip: float = Field(0.0, ge=0, lt=1)  # ratio clip ε of the multi-step update (0: unclipped ratio)


CreditRuleName = Literal["outcome", "monte_carlo", "equal_iteration", "shuffled", "implicit", "critic_td",
                     "critic_baseline", "vineppo", "continuation_reuse"]


class CreditSection(_Strict):
    """Per-token credit: outcome-only GRPO (eq. 1-2) or a dense rule (paper 1 §3.6-3.9, extract
    §1.E; docs/interventions.md "Dense rewards")."""

    rule: CreditRuleName = "outcome"
    advantage_eps: float = Field(1e-6, gt=0)  # ε of eq. (1)
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

    @model_validator(mode="after")
    def _check(self) -> "CreditSection":
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
    """Prompt selection (paper 1 C.1 "Prompt filters", extract §3.8; docs/interventions.md)."""

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
    aggregation: dict[str, Any] = {}  # the aggregation table (rule, lam, beta, ...; docs/multi-reward.md)
    anchor: str = ""  # "": aggregation.anchor (index); a channel name; "elected": <study>/election.json
    sandbox: SandboxSettings = SandboxSettings()  # task "code": the program judge's limits


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

# The recipe's keys before it had sections: flat key -> (section, key). A plan may still use them;
# the launcher names each with its new place (``flat_keys``).
FLAT_KEYS: dict[str, tuple[str, str]] = {
    "task": ("task", "name"), "train_file": ("task", "train_file"), "task_levels": ("task", "levels"),
    "task_train_problems": ("task", "train_problems"), "task_seed": ("task", "seed"),
    "model": ("model", "name"), "model_sha256": ("model", "sha256"), "tiny": ("model", "tiny"),
    "warm_start": ("model", "warm_start"), "enable_thinking": ("model", "enable_thinking"),
    "template_date": ("model", "template_date"),
    **{k: ("rollout", k) for k in RolloutSection.model_fields},
    **{k: ("update", k) for k in UpdateSection.model_fields},
    "credit": ("credit", "rule"), **{k: ("credit", k) for k in CreditSection.model_fields if k != "rule"},
    "selection": ("selection", "rule"),
    **{k: ("selection", k) for k in SelectionSection.model_fields if k != "rule"},
    "reward_verifier": ("rewards", "verifier"), "channels": ("rewards", "channels"),
    "aggregation": ("rewards", "aggregation"), "anchor": ("rewards", "anchor"), "sandbox": ("rewards", "sandbox"),
    "eval_batch_size": ("evaluation", "batch_size"),
    "engine": ("engine", "name"), **{k: ("engine", k) for k in EngineSection.model_fields if k != "name"},
}


def _is_flat(key: str, value: Any) -> bool:
    """A flat key; ``task``, ``model``, ``credit``, ``selection`` and ``engine`` are flat when they
    hold a name and sections when they hold a table."""
    return key in FLAT_KEYS and not (key in SECTIONS and isinstance(value, dict))


def flat_keys(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(flat key, its sectioned path) for every flat key in one recipe table, in file order."""
    return [(k, ".".join(FLAT_KEYS[k])) for k, v in data.items() if _is_flat(k, v)]


def sectioned(data: dict[str, Any]) -> dict[str, Any]:
    """One recipe table (a plan's ``[recipe]`` or a configuration's overrides) in sectioned form.

    Flat keys move to their section; giving one setting both ways is an error, since neither
    could be said to win.
    """
    out: dict[str, Any] = {}
    for k, v in data.items():
        if not _is_flat(k, v):
            out[k] = dict(v) if isinstance(v, dict) and k in SECTIONS else v
    for k, v in data.items():
        if _is_flat(k, v):
            section, key = FLAT_KEYS[k]
            table = out.setdefault(section, {})
            if not isinstance(table, dict):
                continue  # the section's own validation names the bad value
            if key in table:
                raise ConfigError(f"{k}: given twice, as {k!r} and as {section}.{key}; keep {section}.{key}")
            table[key] = v
    return out


def merge_recipe(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """A configuration's overrides applied to the shared recipe, both sectioned first (tables
    merge key by key, so overriding ``credit.mc_k`` keeps the recipe's ``credit.rule``)."""
    return merge_tables(sectioned(base), sectioned(over))


class TrainerConfig(_Strict):
    """One configuration's resolved recipe, in sections (paper defaults; see docs/trainer.md)."""

    task: TaskSection = TaskSection()
    model: ModelSection = ModelSection()
    rollout: RolloutSection = RolloutSection()
    update: UpdateSection = UpdateSection()
    credit: CreditSection = CreditSection()
    selection: SelectionSection = SelectionSection()
    rewards: RewardsSection = RewardsSection()
    evaluation: EvaluationSection = EvaluationSection()
    engine: EngineSection = EngineSection()

    @model_validator(mode="before")
    @classmethod
    def _sections(cls, data: Any) -> Any:
        """Flat keys (older plans, run specs and run metadata) are read into their sections."""
        return sectioned(data) if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _check_selection(self) -> "TrainerConfig":
        s, n = self.selection, self.rollout.prompts_per_iteration
        if s.rule in ("critic", "history", "level", "random_choice") and s.candidates < n:
            raise ValueError(f"selection.candidates: {s.candidates} < rollout.prompts_per_iteration ({n})")
        if s.rule in ("critic", "history", "level") and s.keep_nearest + s.keep_random != n:
            raise ValueError(f"selection.keep_nearest + keep_random must equal rollout.prompts_per_iteration ({n})")
        if s.rule == "dynamic" and s.dynamic_max_groups < n:
            raise ValueError(f"selection.dynamic_max_groups: {s.dynamic_max_groups} < rollout.prompts_per_iteration ({n})")
        return self

    @model_validator(mode="after")
    def _check_dense(self) -> "TrainerConfig":
        c, limit = self.credit, self.rollout.completion_limit
        if c.mc_cuts and (sorted(set(c.mc_cuts)) != c.mc_cuts or c.mc_cuts[0] < 1 or c.mc_cuts[-1] >= limit):
            raise ValueError("credit.mc_cuts: strictly increasing offsets in 1 .. rollout.completion_limit − 1")
        self._check_reuse()
        return self

    def _check_reuse(self) -> None:
        """The reuse variants' preconditions (docs/interventions.md, "Reuse variants")."""
        c, u, r = self.credit, self.update, self.rewards
        if c.rule == "vineppo" and self.rollout.group_size < 2:
            raise ValueError("credit.rule = 'vineppo': V(prompt) is a leave-one-out group mean; "
                             "rollout.group_size must be ≥ 2")
        if c.rule == "vineppo" and (r.channels or r.aggregation):
            raise ValueError("credit.rule = 'vineppo' replaces the group advantage with 0/1 values; no reward channels")
        if u.ppo_minibatches > self.rollout.prompts_per_iteration * self.rollout.group_size:
            raise ValueError("update.ppo_minibatches: more minibatches than completions per iteration")
        multi = u.ppo_epochs * u.ppo_minibatches > 1 or c.rule == "continuation_reuse"
        if multi and r.aggregation.get("rule") == "additive_kl":
            raise ValueError("the reuse update has no KL term: additive_kl needs one step per iteration")

    @model_validator(mode="after")
    def _check(self) -> "TrainerConfig":
        t = self.task
        if t.name == "file" and not t.train_file:
            raise ValueError("task.name = 'file' needs task.train_file")
        if t.name in ("synthetic", "code") and not set(t.levels) <= {1, 2, 3}:
            raise ValueError("task.levels: synthetic levels are 1, 2, 3")
        r = self.rewards
        if r.channels or r.aggregation or r.anchor or t.name == "code":
            check_reward_config(self)
        return self


def _as_written(loc: tuple, written: dict[str, str]) -> str:
    """An error's key path in the words of the recipe: a flat key stays flat in the message."""
    path = ".".join(str(x) for x in loc)
    for new, old in written.items():
        if path == new or path.startswith(new + "."):
            return old + path[len(new):]
    return path or "(recipe)"


def parse_config(data: dict[str, Any], *, where: str = "recipe",
                 written: dict[str, str] | None = None) -> TrainerConfig:
    """Validate a resolved recipe (sectioned, or with flat keys); unknown keys and bad values
    become one-line ConfigErrors naming each key as the recipe wrote it (``written``: sectioned
    path -> flat key, when the flat keys were already moved)."""
    written = dict(written or {}) | {new: old for old, new in flat_keys(data)}
    try:
        return TrainerConfig.model_validate(data)  # the before-validator reads flat keys into sections
    except ConfigError as e:
        raise ConfigError(*(f"{where}: {line}" for line in e.lines)) from None
    except ValidationError as e:
        lines = []
        for err in e.errors():
            key = _as_written(err["loc"], written)
            msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
            lines.append(f"{where}: {key}: {msg}")
        raise ConfigError(*lines) from None


def recipe_of(plan: Plan, configuration: str) -> dict[str, Any]:
    """A plan configuration's recipe, sectioned: the plan's ``[recipe]`` with the configuration's
    overrides merged table by table (flat and sectioned keys may be mixed between the two)."""
    return merge_recipe(plan.recipe, plan.configurations[configuration].overrides)


def config_of(plan: Plan, configuration: str, *, where: str = "") -> TrainerConfig:
    """A plan configuration's validated settings (``recipe_of``, then ``parse_config``)."""
    where = where or f"configuration {configuration!r}"
    try:
        data = recipe_of(plan, configuration)
    except ConfigError as e:
        raise ConfigError(*(f"{where}: {line}" for line in e.lines)) from None
    overrides = plan.configurations[configuration].overrides
    written = {new: old for old, new in flat_keys(plan.recipe) + flat_keys(overrides)}
    return parse_config(data, where=where, written=written)


def plan_flat_keys(plan: Plan) -> list[tuple[str, str]]:
    """(key path in the plan, its sectioned place) for every flat recipe key a plan still uses."""
    out = [(f"recipe.{k}", f"recipe.{new}") for k, new in flat_keys(plan.recipe)]
    for name, c in plan.configurations.items():
        out += [(f"configurations.{name}.{k}", f"configurations.{name}.{new}") for k, new in flat_keys(c.overrides)]
    return out


def updated(cfg: TrainerConfig, changes: dict[str, Any]) -> TrainerConfig:
    """``cfg`` with ``changes`` (sectioned tables, merged key by key) applied and validated again."""
    return parse_config(merge_recipe(cfg.model_dump(mode="json"), changes), where="settings")


class EvalSetSpec(_Strict):
    name: str
    source: str = ""
    n_problems: int | None = None
    levels: list[int] = []
    at: list[Literal["start", "B"]] | None = None  # None: every evaluation; else only the start and/or B


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
