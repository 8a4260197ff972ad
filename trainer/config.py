"""Trainer settings: the recipe a plan's ``[recipe]`` table (plus a configuration's overrides)
resolves to, and the run spec a launcher hands to one run process.

Defaults are the dense-rewards paper's matched-compute recipe (§2.3 "Models and recipe",
§C.1 "Implementation"): 8 prompts × G = 8 completions, temperature 1, top-p 1, 380 tokens,
Adam (0.9, 0.999, 1e-8) without weight decay, clip 1, constant lr 1e-6, no KL, no ratio clipping.
The settings come in sections (``task``, ``model``, ``rollout``, ``update``, ``credit``,
``selection``, ``rewards``, ``evaluation``, ``engine``), one pydantic model each
(``trainer.sections``, re-exported here); the flat keys of
older plans (``mc_k = 4`` for ``credit.mc_k``) are read into them through ``FLAT_KEYS``. Every
setting is documented in ``docs/trainer.md`` (a test holds the two together). No torch here.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from prereg_kit.errors import writing
from prereg_kit.plan import Plan, merge_tables
from prereg_kit.stages import Stage
from trainer.errors import ConfigError
from trainer.keys import suggest
from trainer.rewards.spec import check_reward_config

__all__ = ["ConfigError", "EvalSetSpec", "RunSpec", "SandboxSettings", "SECTIONS", "TinyModel", "TrainerConfig",
           "WarmStart", "config_of", "derive_seed", "flat_keys", "merge_recipe", "parse_config", "plan_flat_keys",
           "recipe_of", "sectioned", "settings_hash", "suggest_key", "updated"]


from trainer.sections import (  # noqa: F401
    SECTIONS,
    CreditRuleName,
    CreditSection,
    EngineSection,
    EvaluationSection,
    ModelSection,
    RewardsSection,
    RolloutSection,
    SandboxSettings,
    SelectionRuleName,
    SelectionSection,
    TaskSection,
    TinyModel,
    UpdateSection,
    WarmStart,
    _Strict,
)

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
        loo = ("vineppo", "rloo", "prm_baseline")  # a leave-one-out group mean of the outcomes
        if c.rule in loo and self.rollout.group_size < 2:
            raise ValueError(f"credit.rule = {c.rule!r}: V(prompt) is a leave-one-out group mean; "
                             "rollout.group_size must be ≥ 2")
        if c.rule in loo + ("prm_reward",) and (r.channels or r.aggregation):
            raise ValueError(f"credit.rule = {c.rule!r} replaces the group advantage with 0/1 outcome values; "
                             "no reward channels")
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
        if t.name == "math" and not (t.levels and set(t.levels) <= {1, 2, 3, 4, 5}):
            raise ValueError("task.levels: MATH levels are 1 to 5 (e.g. levels = [4, 5])")
        if t.name in ("math", "gsm8k") and self.model.name == "tiny" and not t.train_file:
            raise ValueError(f"task.name = {t.name!r} with model.name = 'tiny': the warm start reads task.train_file; give one")
        r = self.rewards
        if r.channels or r.aggregation or r.anchor or t.name == "code":
            check_reward_config(self)
        return self


def suggest_key(path: str) -> str:
    """``; did you mean 'credit.mc_k'?`` for an unknown key path of these settings, or ""."""
    return suggest(path, {name: list(model.model_fields) for name, model in SECTIONS.items()}, FLAT_KEYS)


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
            if err["type"] == "extra_forbidden":
                msg = "unknown key" + suggest_key(".".join(str(x) for x in err["loc"]))
            else:
                msg = err["msg"].removeprefix("Value error, ")
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
    budget_tokens: int | None = Field(None, gt=0)  # B in generated tokens
    budget_iterations: int | None = Field(None, gt=0)  # B in iterations (exactly one of the two)
    eval_interval: int = Field(gt=0)  # B/16 by default: generated tokens, or iterations with budget_iterations
    train_to: float = Field(1.0, gt=0)  # run length as a multiple of B
    stop_iterations: int | None = Field(None, gt=0)  # also stop after this many iterations (election probes: T steps)
    eval_sets: list[EvalSetSpec]
    eval_samples: int = Field(8, gt=0)
    eval_temperature: float = Field(1.0, ge=0)
    eval_top_p: float = Field(1.0, gt=0, le=1)
    eval_greedy: bool = False
    config: TrainerConfig
    tool_version: str = ""
    trackers: list[str] = Field(default_factory=list)  # live trackers of the run (`prereg run --tracker`; trainer.core.tracking)

    @model_validator(mode="after")
    def _one_budget(self) -> "RunSpec":
        if (self.budget_tokens is None) == (self.budget_iterations is None):
            raise ValueError("a run spec needs exactly one of budget_tokens and budget_iterations")
        return self

    @property
    def stop_tokens(self) -> int | None:
        """The run ends after the evaluation at or after k·B generated tokens (None: iteration budget)."""
        return None if self.budget_tokens is None else int(round(self.train_to * self.budget_tokens))

    @property
    def iteration_stop(self) -> int | None:
        """The run ends after k·N iterations (iteration budget N: "B" is the evaluation after
        iteration N) or after the election probes' cap, whichever comes first."""
        n = None if self.budget_iterations is None else int(round(self.train_to * self.budget_iterations))
        return min((c for c in (self.stop_iterations, n) if c is not None), default=None)

    def save(self, path: str | Path) -> None:
        """Write the spec as JSON to ``path`` (a full disk: one line naming it)."""
        with writing(path):
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
