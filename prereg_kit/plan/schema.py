"""The plan's tables as models (pydantic; unknown keys are errors) and the checks across them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..margin import plan_margin
from ..stages import Stage

from .fields import (_check_seeds, COLLAPSE_K, _cut, DERIVED_METRICS, _FRACTION, INT_MAX, _METRIC,
    METRICS_HELP, Multiple, Name, parse_multiple, parse_reading_point, parse_tokens, ReadingPoint, Seeds,
    _short, Tokens)


# --------------------------------------------------------------------------- schema


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Study(_Model):
    id: Name
    title: str = Field(min_length=1)
    question: str = Field(min_length=1)
    comparator: str
    seeds: Seeds
    description: str = ""
    source: str = ""
    model: str = ""
    tags: list[str] = []
    # which trainer makes the runs: "builtin", another runner's entry-point name, or "external"
    # (runs made elsewhere and imported); `prereg lock` checks the recipe against an installed one
    trainer: str = Field(default="builtin", min_length=1, max_length=100)

    _seeds_ok = field_validator("seeds")(_check_seeds)


class Hypothesis(_Model):
    id: Name
    statement: str = Field(min_length=1)
    prediction: str = Field(min_length=1)
    contrasts: list[str] = []
    readings: dict[str, str] = Field(min_length=1, description="possible outcome → how it will be read")


class Budget(_Model):
    tokens: Tokens = Field(description="the token budget B: generated tokens of every kind")
    eval_every: str | int = "B/16"
    train_to: Multiple = "B"
    time_hours: float | None = Field(default=None, gt=0)

    @field_validator("eval_every")
    @classmethod
    def _interval(cls, v: str | int) -> str | int:
        if isinstance(v, str) and (m := _FRACTION.match(v)):
            if not 0 < int(m.group(1)) <= INT_MAX:
                raise ValueError(f"the evaluation interval B/n needs n from 1 to 2^63-1, got {_short(v)}")
        elif isinstance(v, str):
            parse_tokens(v)
        elif isinstance(v, int) and v <= 0:
            raise ValueError("the evaluation interval must be positive")
        return v


    def eval_interval_tokens(self) -> int:
        """The evaluation interval in generated tokens (``B/16`` → B // 16)."""
        if isinstance(self.eval_every, str) and (m := _FRACTION.match(self.eval_every)):
            return max(1, self.tokens // int(m.group(1)))
        return parse_tokens(self.eval_every)


class EvalSet(_Model):
    name: Name
    source: str = ""
    n_problems: int | None = Field(default=None, gt=0)
    levels: list[int] = []
    description: str = ""


class Evaluation(_Model):
    metric: str = "accuracy"
    sets: list[EvalSet] = Field(min_length=1)
    primary_set: str | None = None
    samples: int = Field(default=8, gt=0)
    temperature: float = Field(default=1.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    verifier: Literal["default", "strict", "math_verify"] = "default"
    greedy: bool = False
    reference: str | None = None  # the primary-only reference configuration (metric relative_accuracy)

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        if not _METRIC.match(v):
            raise ValueError(f"unknown metric {v!r}: use {METRICS_HELP}")
        return v

    @property
    def primary(self) -> str:
        return self.primary_set or self.sets[0].name


class Configuration(_Model):
    description: str = ""
    overrides: dict[str, Any] = {}
    train_to: Multiple | None = None


Margin = float | list[float]


class Contrast(_Model):
    id: Name
    treatment: str
    control: str
    tier: Literal["primary", "secondary", "exploratory"]
    kind: Literal["superiority", "equivalence", "non-inferiority"] = "superiority"
    at: str = "B"
    margin: Margin | None = None
    alternative: Literal["two-sided", "greater", "less"] = "two-sided"
    prediction: Literal["gain", "deficit", "equivalent", "non-inferior", "none"] = "none"
    metric: str | None = None
    verifier: Literal["default", "strict", "math_verify"] | None = None
    eval_set: str | None = None
    description: str = ""

    @field_validator("at")
    @classmethod
    def _at(cls, v: str) -> str:
        parse_reading_point(v)
        return v

    @field_validator("margin")
    @classmethod
    def _margin(cls, v: Margin | None) -> Margin | None:
        return plan_margin(v)

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str | None) -> str | None:
        return v if v is None else Evaluation._metric(v)

    @property
    def reading_point(self) -> ReadingPoint:
        return parse_reading_point(self.at)


class Family(_Model):
    name: Name
    members: list[str]
    alpha: float = Field(default=0.05, gt=0, lt=1)
    method: Literal["holm"] = "holm"


class Statistics(_Model):
    alpha: float = Field(default=0.05, gt=0, lt=1)
    confidence: float = Field(default=0.95, gt=0, lt=1)
    margin: Margin = 0.02
    bootstrap_resamples: int = Field(default=10_000, gt=0)
    crossed_bootstrap: bool = True
    seed: int = 0

    _margin_ok = field_validator("margin")(classmethod(lambda cls, v: plan_margin(v)))


class Admission(_Model):
    require_complete: bool = True
    min_iterations: int | None = Field(default=None, gt=0)
    drift_threshold: float = Field(default=0.1, gt=0)
    drifted: Literal["flag", "exclude"] = "flag"
    allow_missing_seeds: bool = False
    rules: list[str] = Field(default=[], description="further rules in words, reported with the results")


class StageSpec(_Model):
    """One ``[[stages]]`` entry: which seeds and configurations a stage runs, and how long."""

    name: Stage
    description: str = ""
    seeds: Seeds | None = None
    configurations: list[str] | None = None
    train_to: Multiple | None = None

    _seeds_ok = field_validator("seeds")(classmethod(lambda cls, v: v if v is None else _check_seeds(v)))


class Plan(_Model):
    """A validated plan. Cross-references are checked by :func:`validate_plan`."""

    study: Study
    hypotheses: list[Hypothesis] = []
    recipe: dict[str, Any] = {}
    configurations: dict[Name, Configuration] = Field(min_length=1)  # names become run folders
    budget: Budget
    evaluation: Evaluation
    contrasts: list[Contrast] = Field(min_length=1)
    families: list[Family] = []
    statistics: Statistics = Statistics()
    admission: Admission = Admission()
    stages: list[StageSpec] = [StageSpec(name="main")]

    # ---- lookups used by run and analyze
    def contrast(self, cid: str) -> Contrast:
        for c in self.contrasts:
            if c.id == cid:
                return c
        raise KeyError(cid)

    def family_of(self, cid: str) -> Family | None:
        return next((f for f in self.families if cid in f.members), None)

    def margin_of(self, c: Contrast) -> Margin:
        return c.margin if c.margin is not None else self.statistics.margin

    def stage(self, name: str) -> StageSpec | None:
        return next((s for s in self.stages if s.name == name), None)

    def seeds_for(self, stage: str = "main") -> list[int]:
        s = self.stage(stage)
        return list(s.seeds) if s is not None and s.seeds is not None else list(self.study.seeds)

    def configurations_for(self, stage: str = "main") -> list[str]:
        s = self.stage(stage)
        return list(s.configurations) if s is not None and s.configurations else list(self.configurations)

    def train_to(self, configuration: str, stage: str = "main") -> float:
        """Run length of a configuration as a multiple of B (stage, then configuration, then budget)."""
        return self._run_length(configuration, self.stage(stage))

    def _run_length(self, configuration: str, s: StageSpec | None) -> float:
        for v in (s.train_to if s else None, self.configurations[configuration].train_to, self.budget.train_to):
            if v is not None:
                return parse_multiple(v)
        return 1.0

    def resolved_config(self, configuration: str) -> dict[str, Any]:
        """The shared recipe with the configuration's overrides applied (nested tables merged)."""
        return merge_tables(self.recipe, self.configurations[configuration].overrides)


def merge_tables(base: dict, over: dict) -> dict:
    """``over`` applied to ``base``: nested tables merge key by key, anything else is replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge_tables(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


# --------------------------------------------------------------------------- cross-checks


def cross_check(plan: Plan) -> list[tuple[tuple, str]]:
    """Rules between keys that the schema alone cannot express: (key path, message) pairs.

    Linear in the size of the plan: lookups go through dicts built once (a 1 MiB plan can hold
    thousands of contrasts).
    """
    errs: list[tuple[tuple, str]] = []
    configs = set(plan.configurations)
    have = _cut(", ".join(sorted(configs)), 200)
    contrast_ids = [c.id for c in plan.contrasts]
    by_id: dict[str, Contrast] = {}
    for c in plan.contrasts:
        by_id.setdefault(c.id, c)
    set_names = [s.name for s in plan.evaluation.sets]
    main_stage = plan.stage("main")
    lengths: dict[str, float] = {}

    def run_length(name: str) -> float:
        if name not in lengths:
            lengths[name] = plan._run_length(name, main_stage)
        return lengths[name]

    def first_seen(names: list[str]) -> dict[str, int]:
        first: dict[str, int] = {}
        for i, n in enumerate(names):
            first.setdefault(n, i)
        return first

    folded: dict[str, str] = {}
    for name in plan.configurations:
        other = folded.setdefault(name.casefold(), name)
        if other != name:
            errs.append((("configurations", name), f"configuration {name!r} differs from {other!r} only in case: "
                                                   "their run folders would be one on a case-insensitive file system"))
    if plan.study.comparator not in configs:
        errs.append((("study", "comparator"), f"unknown configuration {_short(plan.study.comparator)} (have: {have})"))
    first_set = first_seen(set_names)
    for i, name in enumerate(set_names):
        if first_set[name] != i:
            errs.append((("evaluation", "sets", i, "name"), f"duplicate evaluation set {name!r}"))
    if plan.evaluation.primary_set is not None and plan.evaluation.primary_set not in first_set:
        errs.append((("evaluation", "primary_set"), f"unknown evaluation set {_short(plan.evaluation.primary_set)}"))
    ev = plan.evaluation
    if ev.reference is not None and ev.reference not in configs:
        errs.append((("evaluation", "reference"), f"unknown configuration {_short(ev.reference)} (have: {have})"))
    if ev.metric == "relative_accuracy" and ev.reference is None:
        errs.append((("evaluation", "metric"), "metric relative_accuracy needs [evaluation] reference (the primary-only configuration)"))
    if ev.metric == "collapse" and ev.samples < COLLAPSE_K:
        errs.append((("evaluation", "metric"), f"metric collapse compares pass@{COLLAPSE_K}: it needs samples >= {COLLAPSE_K} (have {ev.samples})"))

    memberships: dict[str, list[str]] = {}
    first_family = first_seen([f.name for f in plan.families])
    for fi, fam in enumerate(plan.families):
        if first_family[fam.name] != fi:
            errs.append((("families", fi, "name"), f"duplicate family name {fam.name!r}"))
        if not fam.members:
            errs.append((("families", fi, "members"), f"family {fam.name!r} is empty"))
        for m in fam.members:
            memberships.setdefault(m, []).append(fam.name)
            if m not in by_id:
                errs.append((("families", fi, "members"), f"unknown contrast {_short(m)} in family {fam.name!r}"))
            elif by_id[m].tier != "primary":
                errs.append((("families", fi, "members"), f"contrast {m!r} is {by_id[m].tier}: only primary contrasts are Holm-adjusted"))

    first_contrast = first_seen(contrast_ids)
    for ci, c in enumerate(plan.contrasts):
        where = ("contrasts", ci)
        n_before = len(errs)
        if first_contrast[c.id] != ci:
            errs.append((where + ("id",), f"duplicate contrast id {c.id!r}"))
        for key in ("treatment", "control"):
            if getattr(c, key) not in configs:
                errs.append((where + (key,), f"unknown configuration {_short(getattr(c, key))} (have: {have})"))
        if c.treatment == c.control:
            errs.append((where + ("control",), "treatment and control are the same configuration"))
        if c.eval_set is not None and c.eval_set not in first_set:
            errs.append((where + ("eval_set",), f"unknown evaluation set {_short(c.eval_set)}"))
        if c.tier == "primary" and c.id not in memberships:
            errs.append((where + ("tier",), f"primary contrast {c.id!r} is in no Holm family (add it to [[families]])"))
        if len(memberships.get(c.id, [])) > 1:
            errs.append((where + ("id",), f"contrast {c.id!r} is in several families: {', '.join(memberships[c.id])}"))
        if c.kind != "superiority" and c.alternative != "two-sided":
            errs.append((where + ("alternative",), f"a {c.kind} contrast takes no 'alternative' (its test is fixed)"))
        rp = c.reading_point
        if c.metric is not None:
            if c.metric == "relative_accuracy" and ev.reference is None:
                errs.append((where + ("metric",), "metric relative_accuracy needs [evaluation] reference (the primary-only configuration)"))
            if c.metric == "collapse" and ev.samples < COLLAPSE_K:
                errs.append((where + ("metric",), f"metric collapse compares pass@{COLLAPSE_K}: it needs [evaluation] samples >= {COLLAPSE_K} (have {ev.samples})"))
        metric = c.metric or ev.metric
        if metric in DERIVED_METRICS and rp.kind != "tokens":
            errs.append((where + ("at",), f"metric {metric} is read at token reading points only (\"B\" or \"kB\"), not {c.at!r}"))
        if metric == "relative_accuracy" and ev.reference in configs and rp.kind == "tokens" \
                and run_length(ev.reference) < rp.multiple:
            errs.append((where + ("at",), f"read at {rp} but the reference {ev.reference!r} trains only to {run_length(ev.reference):g}B"))
        if rp.kind == "tokens" and len(errs) == n_before:  # no other problem with this contrast
            for key in ("treatment", "control"):
                if getattr(c, key) in configs and run_length(getattr(c, key)) < rp.multiple:
                    errs.append((where + ("at",), f"read at {rp} but {getattr(c, key)!r} trains only to {run_length(getattr(c, key)):g}B"))

    first_hypothesis = first_seen([h.id for h in plan.hypotheses])
    for hi, h in enumerate(plan.hypotheses):
        if first_hypothesis[h.id] != hi:
            errs.append((("hypotheses", hi, "id"), f"duplicate hypothesis id {h.id!r}"))
        for cid in h.contrasts:
            if cid not in by_id:
                errs.append((("hypotheses", hi, "contrasts"), f"unknown contrast {_short(cid)}"))

    stage_names = [s.name for s in plan.stages]
    first_stage = first_seen(stage_names)
    for si, s in enumerate(plan.stages):
        if first_stage[s.name] != si:
            errs.append((("stages", si, "name"), f"duplicate stage {s.name!r}"))
        for name in s.configurations or []:
            if name not in configs:
                errs.append((("stages", si, "configurations"), f"unknown configuration {_short(name)}"))
    if "main" not in stage_names:
        errs.append((("stages",), "the stages must include 'main'"))
    return errs


