"""``[[gradient_tests]]``: gradient tests at one fixed policy, as a plan preregisters them.

A gradient test measures, on fixed batches at one policy, each named configuration's update
direction u_b against a Monte-Carlo reference gradient ĥ_b (dense-rewards paper §2.4, App. A,
App. I; the equal-iteration probe, §H.3). The plan fixes which configurations, the baseline of
the relative efficiencies, the number of batches, the reference estimator and, optionally, the
a + b/k fit over Monte-Carlo k (§C.3.2, S25) and conditions on the results (e.g. "per-token efficiency of mc_k4 ≥ 0.8").

The models here hold one entry; :func:`gradient_problems` holds the rules against the rest of
the plan (configurations exist, the batches can be shared, ids are unique). See
``docs/gradient-tests.md`` "In a study".
"""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .fields import INT_MAX, Name, _short


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


# Credit rules that spend continuation tokens (their update has a Monte-Carlo k), and rules that
# keep state across batches (a critic's buffer): the latter get warm-up batches by default. The
# core names no trainer: these, and the built-in trainer's defaults where a recipe is silent, are
# the trainer's (trainer.interventions.credit_rules, trainer.config), held equal by a test.
CONTINUATION_RULES = ("monte_carlo", "equal_iteration", "shuffled", "vineppo", "continuation_reuse")
RECIPE_DEFAULTS = {"rollout.prompts_per_iteration": 8, "rollout.group_size": 8, "rollout.completion_limit": 380,
                   "credit.rule": "outcome", "credit.mc_k": 4, "credit.mc_segments": 6}
STATEFUL_RULES = ("critic_td", "critic_baseline")
DEFAULT_WARMUP = 4
METRICS = ("per_update", "per_token", "alignment")
# The recipe keys whose values the batches share: the starting model, the task (prompt pool) and
# the rollout settings. Flat keys of older plans are mapped to their section (trainer/config.py
# FLAT_KEYS; the core names no trainer, so the few that matter here are listed).
SHARED_SECTIONS = ("model", "task", "rollout")
_FLAT = {"model": "model.name", "model_sha256": "model.sha256", "tiny": "model.tiny", "warm_start": "model.warm_start",
         "enable_thinking": "model.enable_thinking", "template_date": "model.template_date", "task": "task.name",
         "train_file": "task.train_file", "task_levels": "task.levels", "task_train_problems": "task.train_problems",
         "task_seed": "task.seed", **{k: f"rollout.{k}" for k in (
             "prompts_per_iteration", "group_size", "completion_limit", "temperature", "top_p")}}


class Reference(_Model):
    """The reference gradient ĥ: Monte-Carlo progress credit (segment s gets p̂_s − p̂_{s−1},
    p̂_0 = ``prior``, R at the end) from ``continuations`` continuations at ``cuts`` interior cuts,
    on fresh completions of the batch's prompts (E⟨u, ĥ⟩ = ⟨E u, ∇J⟩) or on the batch's own
    completions (H.3's half A)."""

    on: Literal["fresh_completions", "same_completions"] = "fresh_completions"
    completions: int | None = Field(default=None, gt=0, le=4096)  # per prompt; default: the test's
    cuts: int = Field(default=3, ge=1, le=1024)
    continuations: int = Field(default=4, gt=0, le=1024)
    continuation_limit: int = Field(default=200, gt=0, le=1_000_000)
    prior: float = Field(default=0.5, ge=0, le=1)
    top_p: float = Field(default=1.0, gt=0, le=1)

    @model_validator(mode="after")
    def _same(self) -> "Reference":
        if self.on == "same_completions" and self.completions is not None:
            raise ValueError("completions: a reference on the batch's own completions draws none of its own")
        return self


class Condition(_Model):
    """A preregistered condition on one configuration's result: ``metric`` (its estimate, or a
    bound of its interval) at least or at most a threshold."""

    configuration: str
    metric: Literal["per_update", "per_token", "alignment"]
    at_least: float | None = None
    at_most: float | None = None
    on: Literal["estimate", "lower", "upper"] = "estimate"

    @model_validator(mode="after")
    def _one_bound(self) -> "Condition":
        if (self.at_least is None) == (self.at_most is None):
            raise ValueError("give exactly one of at_least and at_most")
        return self

    @property
    def bound(self) -> float:
        return self.at_least if self.at_least is not None else self.at_most  # type: ignore[return-value]

    @property
    def direction(self) -> str:
        return "≥" if self.at_least is not None else "≤"

    def met(self, value: float) -> bool:
        """Whether ``value`` meets the condition (NaN never does)."""
        if value != value:
            return False
        return value >= self.bound if self.at_least is not None else value <= self.bound

    def describe(self) -> str:
        what = {"estimate": "", "lower": " (CI lower bound)", "upper": " (CI upper bound)"}[self.on]
        return f"{self.configuration} {self.metric}{what} {self.direction} {self.bound:g}"


class GradientTest(_Model):
    """One ``[[gradient_tests]]`` entry (keys and defaults: docs/gradient-tests.md)."""

    id: Name
    description: str = ""
    configurations: list[str] = Field(min_length=1)
    baseline: str | None = None  # default: [study] comparator
    batches: int = Field(default=96, ge=2, le=1_000_000)
    prompts: int | None = Field(default=None, gt=0, le=65_536)  # default: rollout.prompts_per_iteration
    completions: int | None = Field(default=None, gt=0, le=65_536)  # default: rollout.group_size
    policy: str = Field(default="initial", min_length=1, max_length=1000)
    seed: int = Field(default=0, ge=0, le=INT_MAX)
    subspace: int = Field(default=24, ge=1, le=65_536)
    warmup: int | None = Field(default=None, ge=0, le=1_000_000)  # default: 4 with a stateful rule, else 0
    reference: Reference = Reference()
    # configurations measured by this test only, never trained (S25's k = 8 and 16, S3's reuse
    # rules): recipe overrides, as a configuration's ``overrides``
    variants: dict[Name, dict[str, Any]] = {}
    fit: list[str] = []
    conditions: list[Condition] = []

    @field_validator("configurations", "fit")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        dup = [n for i, n in enumerate(v) if n in v[:i]]
        if dup:
            raise ValueError(f"{_short(dup[0])} is listed twice")
        return v

    @field_validator("policy")
    @classmethod
    def _policy(cls, v: str) -> str:
        # a model folder inside the study: never absolute, never outside it
        if v != "initial" and (v.startswith(("/", "\\", "~")) or ".." in v.replace("\\", "/").split("/") or ":" in v):
            raise ValueError(f"\"initial\" or a model folder relative to the study (inside it), got {_short(v)}")
        return v

    def baseline_of(self, comparator: str) -> str:
        return self.baseline or comparator


def with_variants(plan: Any, t: GradientTest) -> Any:
    """The plan with the test's ``variants`` added as configurations (for resolving their
    recipes); the study's design is the plan's own, without them."""
    if not t.variants:
        return plan
    return plan.with_configurations({n: {"description": f"variant of gradient test {t.id}", "overrides": o}
                                     for n, o in t.variants.items()})


def _flat_settings(config: dict[str, Any]) -> dict[str, Any]:
    """``{"rollout.completion_limit": 380, ...}``: the shared-section values of one resolved recipe."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key in SHARED_SECTIONS and isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        elif key in _FLAT:
            out[_FLAT[key]] = value
    return out


def credit_of(config: dict[str, Any]) -> dict[str, Any]:
    """The credit table of a resolved recipe (``credit = "monte_carlo"``, ``mc_k = 4`` in flat plans)."""
    c = config.get("credit")
    table = dict(c) if isinstance(c, dict) else ({"rule": c} if isinstance(c, str) else {})
    for k in ("mc_k", "mc_segments", "mc_cuts", "mc_continuation_limit"):
        if k in config and k not in table:
            table[k] = config[k]
    table.setdefault("rule", RECIPE_DEFAULTS["credit.rule"])
    return table


def rollout_of(config: dict[str, Any]) -> dict[str, Any]:
    """The rollout settings of a resolved recipe (the trainer's defaults where the plan is silent)."""
    flat = _flat_settings(config)
    return {k: flat.get(f"rollout.{k}", RECIPE_DEFAULTS[f"rollout.{k}"])
            for k in ("prompts_per_iteration", "group_size", "completion_limit")}


def resolved_spec(t: GradientTest, plan: Any) -> dict[str, Any]:
    """The test's plan entry with its defaults resolved (baseline, prompts, completions, warmup,
    reference completions): what ``meta.json`` records as ``spec``."""
    plan = with_variants(plan, t)
    recipes = {n: plan.resolved_config(n) for n in t.configurations if n in plan.configurations}
    first = rollout_of(next(iter(recipes.values()), plan.recipe))
    stateful = any(credit_of(r)["rule"] in STATEFUL_RULES for r in recipes.values())
    spec = t.model_dump(mode="json")
    spec.update(baseline=t.baseline_of(plan.study.comparator), prompts=t.prompts or first["prompts_per_iteration"],
                completions=t.completions or first["group_size"],
                warmup=t.warmup if t.warmup is not None else (DEFAULT_WARMUP if stateful else 0))
    if t.reference.on == "fresh_completions":
        spec["reference"]["completions"] = t.reference.completions or spec["completions"]
    return spec


def _near(name: str, have: list[str]) -> str:
    close = difflib.get_close_matches(name, have, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else f" (have: {', '.join(have)[:200]})"


def gradient_problems(plan: Any) -> list[tuple[tuple, str]]:
    """The rules between ``[[gradient_tests]]`` and the rest of the plan, as (key path, message):
    configurations exist, the baseline is one of the test's, ``fit`` names Monte-Carlo
    configurations of the test with different k, conditions name a configuration of the test,
    ids are unique and no contrast's, and the configurations share model, task and rollout
    settings (the batches are shared), naming the first key that differs."""
    errs: list[tuple[tuple, str]] = []
    contrast_ids = {c.id for c in plan.contrasts}
    seen: set[str] = set()
    design = plan
    for ti, t in enumerate(design.gradient_tests):
        where = ("gradient_tests", ti)
        for n in t.variants:
            if n in design.configurations:
                errs.append((where + ("variants", n), f"{n!r} is a configuration of the study: a variant needs a name of its own"))
        plan = with_variants(design, t)
        have = list(plan.configurations)
        if t.id in seen:
            errs.append((where + ("id",), f"duplicate gradient test id {t.id!r}"))
        elif t.id in contrast_ids:
            errs.append((where + ("id",), f"{t.id!r} is a contrast id too: a gradient test needs an id of its own"))
        seen.add(t.id)
        known = [n for n in t.configurations if n in plan.configurations]
        for n in t.configurations:
            if n not in plan.configurations:
                errs.append((where + ("configurations",), f"unknown configuration {_short(n)}{_near(n, have)}"))
        base = t.baseline_of(plan.study.comparator)
        if base not in t.configurations:
            key = ("baseline",) if t.baseline is not None else ("configurations",)
            errs.append((where + key, f"the baseline {_short(base)} is not one of the test's configurations"
                         + ("" if t.baseline is not None else " (the default baseline is [study] comparator)")))
        recipes = {n: plan.resolved_config(n) for n in known}
        for n in t.fit:
            if n not in t.configurations:
                errs.append((where + ("fit",), f"{_short(n)} is not one of the test's configurations{_near(n, t.configurations)}"))
            elif n in recipes and credit_of(recipes[n])["rule"] not in CONTINUATION_RULES:
                errs.append((where + ("fit",), f"{n!r} has credit rule {credit_of(recipes[n])['rule']!r}: the a + b/k "
                             f"fit needs Monte-Carlo configurations ({', '.join(CONTINUATION_RULES)})"))
        ks = [credit_of(recipes[n]).get("mc_k", RECIPE_DEFAULTS["credit.mc_k"]) for n in t.fit if n in recipes]
        if t.fit and len(set(ks)) < 2:
            errs.append((where + ("fit",), f"the a + b/k fit needs at least two different k (have k = {sorted(set(ks))})"))
        for ci, c in enumerate(t.conditions):
            if c.configuration not in t.configurations:
                errs.append((where + ("conditions", ci, "configuration"),
                             f"{_short(c.configuration)} is not one of the test's configurations{_near(c.configuration, t.configurations)}"))
        errs += _shared_batches(t, recipes, where)
    return errs


def _shared_batches(t: GradientTest, recipes: dict[str, dict], where: tuple) -> list[tuple[tuple, str]]:
    """The first model, task or rollout key on which a configuration differs from the first one."""
    if len(recipes) < 2:
        return []
    first_name, *rest = recipes
    ref = _flat_settings(recipes[first_name])
    for n in rest:
        other = _flat_settings(recipes[n])
        for key in sorted(set(ref) | set(other)):
            if ref.get(key) != other.get(key):
                shown = lambda x: "(unset)" if x is None else _short(x, 40)  # noqa: E731
                return [(where + ("configurations",), f"{n!r} differs from {first_name!r} in {key} "
                         f"({shown(other.get(key))} vs {shown(ref.get(key))}): the configurations of one gradient "
                         "test share the model, task and rollout settings (the batches are shared)")]
    return []


__all__ = ["Condition", "CONTINUATION_RULES", "credit_of", "RECIPE_DEFAULTS", "GradientTest", "gradient_problems", "METRICS", "Reference",
           "resolved_spec", "rollout_of", "STATEFUL_RULES", "with_variants"]
