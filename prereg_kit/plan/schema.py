"""The plan's tables as models (pydantic; unknown keys are errors); the rules across tables are in
``crosscheck``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from ..margin import plan_margin
from ..stages import Stage
from .fields import (
    _FRACTION,
    _METRIC,
    INT_MAX,
    METRICS_HELP,
    Multiple,
    Name,
    ReadingPoint,
    Seeds,
    Tokens,
    _check_seeds,
    _short,
    parse_multiple,
    parse_reading_point,
    parse_tokens,
)
from .gradient import GradientTest
from .integrity import Integrity
from .sequential import Sequential
from .sources import Source

# --------------------------------------------------------------------------- schema


class _Model(BaseModel):
    # defer_build: the validator is made on first use, once for the outer model (a plan, a recipe),
    # not once per class as each is defined: lock and verify start faster
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


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
    # a study whose runs came from more than one trainer (meta.trainer) is refused unless preregistered
    mixed_trainers: bool = False
    # time-matched contrasts (time, control-time, time_to_target) whose main runs ran on more than
    # one device type (prereg_kit.study.audit.device_type) are refused unless preregistered
    mixed_devices: bool = False

    _seeds_ok = field_validator("seeds")(_check_seeds)


class Hypothesis(_Model):
    id: Name
    statement: str = Field(min_length=1)
    prediction: str = Field(min_length=1)
    contrasts: list[str] = []
    readings: dict[str, str] = Field(min_length=1, description="possible outcome → how it will be read")


class Budget(_Model):
    """The run length B: generated tokens (dense-rewards paper §2.3, matched compute) or, for studies that fix
    the number of iterations (multi-reward paper App. C.1 "500 steps"; the equal-iteration study),
    iterations. Exactly one of ``tokens`` and ``iterations``."""

    tokens: Tokens | None = Field(default=None, description="the token budget B: generated tokens of every kind")
    iterations: int | None = Field(default=None, gt=0, le=INT_MAX, description="B as a number of iterations")
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

    @model_validator(mode="after")
    def _one_length(self) -> "Budget":
        if (self.tokens is None) == (self.iterations is None):
            raise ValueError("give exactly one of tokens (B in generated tokens) and iterations (B in iterations)")
        if self.iterations is not None and isinstance(self.eval_every, str) and not _FRACTION.match(self.eval_every):
            raise ValueError(f"eval_every: with an iteration budget, an integer number of iterations or \"B/n\", "
                             f"got {_short(self.eval_every)}")
        return self

    def eval_interval_tokens(self) -> int:
        """The evaluation interval in generated tokens (``B/16`` → B // 16); token budgets only."""
        if self.tokens is None:
            raise ValueError("an iteration budget has no token interval (eval_interval_iterations)")
        if isinstance(self.eval_every, str) and (m := _FRACTION.match(self.eval_every)):
            return max(1, self.tokens // int(m.group(1)))
        return parse_tokens(self.eval_every)

    def eval_interval_iterations(self) -> int:
        """The evaluation interval in iterations (``B/16`` → N // 16, at least 1); iteration budgets only."""
        if self.iterations is None:
            raise ValueError("a token budget has no iteration interval (eval_interval_tokens)")
        if isinstance(self.eval_every, str) and (m := _FRACTION.match(self.eval_every)):
            return max(1, self.iterations // int(m.group(1)))
        return int(self.eval_every)

    @property
    def axis(self) -> Literal["tokens", "iteration"]:
        """The run-log column B is counted in: cumulative tokens or completed iterations."""
        return "tokens" if self.tokens is not None else "iteration"

    @property
    def value(self) -> int:
        """B on its axis (tokens or iterations)."""
        return self.tokens if self.tokens is not None else self.iterations  # type: ignore[return-value]

    def describe(self) -> str:
        return f"{self.tokens:,} tokens" if self.tokens is not None else f"{self.iterations:,} iterations"


def _configuration_budget(v: Any) -> Any:
    """A configuration's B: a token count (``"17.25M"``) or a table (``{ iterations = 300 }``,
    ``{ tokens = "17.25M", eval_every = "B/16" }``)."""
    if isinstance(v, (str, int)) and not isinstance(v, bool):
        return {"tokens": v}
    return v


class EvalSet(_Model):
    name: Name
    source: str = ""
    n_problems: int | None = Field(default=None, gt=0)
    levels: list[int] = []
    description: str = ""
    # A further test set scored only at the start and at B (dense-rewards paper §C.5, S33/S34's
    # MATH-500 and GSM8K): the trainer skips it at the evaluations in between.
    at: list[Literal["start", "B"]] | None = None

    @field_validator("at")
    @classmethod
    def _at(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or len(set(v)) != len(v)):
            raise ValueError('list the evaluations that score this set once each: ["start", "B"], ["B"] or ["start"]')
        return v

    @property
    def every_evaluation(self) -> bool:
        return self.at is None


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
    # false: the runs' evaluations did not share sampling seeds (another trainer's evaluator);
    # pairing then checks seeds and problems only, and the report says so
    common_random_numbers: bool = True

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
    """One arm of the study. ``budget`` and ``seeds`` replace the study's for this arm (dense-rewards
    paper §C.1: each model has its own B; Table 6: S1 runs three seeds per Qwen3 size). ``runnable = false`` marks
    an arm the trainer cannot run, with the reason in ``not_runnable`` (reported, never checked)."""

    description: str = ""
    overrides: dict[str, Any] = {}
    train_to: Multiple | None = None
    budget: Annotated[Budget, BeforeValidator(_configuration_budget)] | None = None
    seeds: Seeds | None = None
    runnable: bool = True
    not_runnable: str = ""

    _seeds_ok = field_validator("seeds")(classmethod(lambda cls, v: v if v is None else _check_seeds(v)))

    @model_validator(mode="after")
    def _reason(self) -> "Configuration":
        if not self.runnable and not self.not_runnable.strip():
            raise ValueError("runnable = false needs not_runnable = \"<reason>\" (why the trainer cannot run it)")
        if self.runnable and self.not_runnable:
            raise ValueError("not_runnable is the reason of runnable = false; this configuration is runnable")
        return self


Margin = float | list[float]


Design = Literal["paired", "difference_of_differences", "pooled", "welch"]

# a contrast's own test and its robustness rows (plan/robust.py says which combinations hold)
TestName = Literal["t", "wilcoxon", "sign-flip", "bootstrap-bca", "bootstrap-studentized"]


class Contrast(_Model):
    """One ``[[contrasts]]`` entry. ``design`` says what the unit of analysis is (docs/statistics.md):

    - ``paired`` (default): per seed, treatment − control (dense-rewards paper §C.1 "Statistics");
    - ``difference_of_differences``: per seed, (treatment − control) − (minus_treatment −
      minus_control), e.g. S3's interaction and S17's lead difference;
    - ``pooled``: the (pair, seed) differences of every pair in ``pairs``, pooled into one paired t
      ("(model size, seed) pairs pooled", §C.1 "Statistics");
    - ``welch``: treatment's values against control's, unpaired (Welch's t); with ``minus_*`` the
      two unpaired groups are the per-seed differences treatment − control and minus_treatment −
      minus_control (S21's primary, §C.5.2), the second read on ``minus_eval_set`` when the
      two sides use different test sets ("different runs, pools, and test sets").

    ``seeds``: the contrast reads only these seeds (S11's n = 6 primary, §C.4.1).
    """

    id: Name
    treatment: str = ""
    control: str = ""
    tier: Literal["primary", "secondary", "exploratory"]
    design: Design = "paired"
    minus_treatment: str = ""
    minus_control: str = ""
    minus_eval_set: str | None = None
    pairs: list[list[str]] = []
    seeds: Seeds | None = None
    kind: Literal["superiority", "equivalence", "non-inferiority", "minimal-effect"] = "superiority"
    test: TestName = "t"
    robustness: list[TestName] = []
    at: str = "B"
    margin: Margin | None = None
    alternative: Literal["two-sided", "greater", "less"] = "two-sided"
    prediction: Literal["gain", "deficit", "equivalent", "non-inferior", "none"] = "none"
    metric: str | None = None
    verifier: Literal["default", "strict", "math_verify"] | None = None
    eval_set: str | None = None
    # Accuracy on the problems of these MATH levels only (the eval rows' ``level``); [] = all.
    levels: list[Annotated[int, Field(ge=1, le=INT_MAX)]] = []
    # e of at = "extrapolated" (dense-rewards paper §3.3): a preregistered number, or "TEST:configuration", that
    # gradient test's per-token estimate (prereg_kit.readings.extrapolation)
    efficiency: float | str | None = None
    description: str = ""

    @field_validator("efficiency")
    @classmethod
    def _efficiency(cls, v: float | str | None) -> float | str | None:
        if isinstance(v, str):
            test, sep, conf = v.partition(":")
            if not sep or not test or not conf or ":" in conf:
                raise ValueError(f"efficiency is a number above 0 or \"TEST:configuration\" (a [[gradient_tests]] id and "
                                 f"one of its configurations), got {_short(v)}")
        elif v is not None and not 0 < v < float("inf"):
            raise ValueError(f"efficiency is a per-token efficiency e, a finite number above 0, got {v!r}")
        return v

    @field_validator("levels")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"duplicate levels in {v}")
        return v

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

    _seeds_ok = field_validator("seeds")(classmethod(lambda cls, v: v if v is None else _check_seeds(v)))

    @property
    def reading_point(self) -> ReadingPoint:
        return parse_reading_point(self.at)

    def arm_pairs(self) -> list[tuple[str, str]]:
        """The (treatment, control) pairs the contrast reads: one, two (difference of
        differences, or Welch on two differences) or every pooled pair."""
        if self.design == "pooled":
            return [(p[0], p[1]) for p in self.pairs if len(p) == 2]
        out = [(self.treatment, self.control)]
        if self.minus_treatment or self.minus_control:
            out.append((self.minus_treatment, self.minus_control))
        return out

    def configuration_names(self) -> list[str]:
        """Every configuration the contrast names, in order, once each."""
        return list(dict.fromkeys(n for pair in self.arm_pairs() for n in pair))


class Check(_Model):
    """A manipulation check (``[[checks]]``): did the intervention do what it was meant to do?

    Per seed, ``value`` is the mean of the per-iteration run-log column ``metric`` over the
    iterations up to ``at`` (generated tokens) of ``configuration``; ``reference`` is the same
    mean of ``control`` (same seed) or of the column ``baseline`` of the same run. The per-seed
    quantity ``d`` is ``value − reference`` (``value`` alone without a reference) for ``greater`` /
    ``less`` and ``|reference − target| − |value − target|`` for ``closer_to_target``; the check
    passes when a one-sided t over seeds shows ``mean(d) > threshold`` (``greater``,
    ``closer_to_target``) or ``mean(d) < threshold`` (``less``) at the plan's α (dense-rewards
    paper: the filter moved its prompts' predicted success toward its target).
    """

    id: Name
    configuration: str
    metric: Name
    expect: Literal["greater", "less", "closer_to_target"]
    control: str | None = None
    baseline: Name | None = None
    target: float | None = None
    threshold: float = 0.0
    at: str = "B"
    seeds: Seeds | None = None
    description: str = ""

    _seeds_ok = field_validator("seeds")(classmethod(lambda cls, v: v if v is None else _check_seeds(v)))

    @field_validator("at")
    @classmethod
    def _at(cls, v: str) -> str:
        if parse_reading_point(v).kind != "tokens":
            raise ValueError(f"a check averages iterations up to a token reading point (\"B\" or \"kB\"), not {v!r}")
        return v

    @property
    def reading_point(self) -> ReadingPoint:
        return parse_reading_point(self.at)


class Family(_Model):
    name: Name
    members: list[str]
    alpha: float = Field(default=0.05, gt=0, lt=1)
    # Holm (the papers' default) or a relative (prereg_kit.stats.adjust)
    method: Literal["holm", "hochberg", "hommel", "bh", "bonferroni"] = "holm"


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
    configurations: dict[Name, Configuration] = {}  # names become run folders; none when [[sources]] give them all
    budget: Budget
    evaluation: Evaluation
    contrasts: list[Contrast] = Field(min_length=1)
    checks: list[Check] = []
    families: list[Family] = []
    statistics: Statistics = Statistics()
    admission: Admission = Admission()
    stages: list[StageSpec] = [StageSpec(name="main")]
    gradient_tests: list[GradientTest] = []  # plan/gradient.py, docs/gradient-tests.md
    sequential: Sequential | None = None  # interim looks (plan/sequential.py, docs/plan-format.md)
    integrity: Integrity = Integrity()  # the chain's outside anchors (plan/integrity.py, docs/locking.md)
    sources: list[Source] = []  # configurations of other locked studies (plan/sources.py, docs/plan-format.md)

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

    def seeds_for(self, stage: str = "main", configuration: str | None = None) -> list[int]:
        """The seeds of a stage; in the main stage a configuration's own seeds replace them."""
        if stage == "main" and configuration is not None and (cs := self.configurations[configuration].seeds) is not None:
            return list(cs)
        s = self.stage(stage)
        return list(s.seeds) if s is not None and s.seeds is not None else list(self.study.seeds)

    def all_seeds(self, stage: str = "main") -> list[int]:
        """Every seed some configuration of the stage runs, in order of first appearance."""
        seen: dict[int, None] = {}
        for c in self.configurations_for(stage):
            seen.update(dict.fromkeys(self.seeds_for(stage, c)))
        return list(seen)

    def budget_of(self, configuration: str) -> Budget:
        """A configuration's B (its own ``budget``, else the study's)."""
        return self.configurations[configuration].budget or self.budget

    def budgets(self) -> float | dict[str, tuple[str, float]]:
        """B for the readings: one token count when every configuration shares the study's token
        budget, else per configuration (run-log column, B on it)."""
        if self.budget.tokens is not None and all(c.budget is None for c in self.configurations.values()):
            return float(self.budget.tokens)
        return {n: (self.budget_of(n).axis, float(self.budget_of(n).value)) for n in self.configurations}

    def configuration_seeds(self, configuration: str) -> list[int]:
        """The main-stage seeds a configuration runs: its own ``seeds`` where the configuration
        table has them, else the study's (or the main stage's)."""
        return self.seeds_for("main", configuration)

    def contrast_seeds(self, c: Contrast) -> list[int]:
        """The seeds a contrast reads: its ``seeds`` (else every seed) among the seeds that all
        its configurations run; for ``welch`` the seeds either arm runs; for ``pooled`` the seeds
        both configurations of some pair run (pairs from several studies run different seeds)."""
        def runs(n: str) -> set[int]:
            return set(self.configuration_seeds(n)) if n in self.configurations else set()
        if c.design == "pooled":
            common = set().union(*(runs(t) & runs(k) for t, k in c.arm_pairs()))
            return sorted(common if c.seeds is None else common & set(c.seeds))
        sets = [runs(n) for n in c.configuration_names() if n in self.configurations]
        common = (set().union(*sets) if c.design == "welch" else set.intersection(*sets)) if sets else set()
        return sorted(common if c.seeds is None else common & set(c.seeds))

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

    def with_configurations(self, extra: dict[str, dict[str, Any]]) -> "Plan":
        """A copy with more configurations (``{name: {"overrides": ...}}``), for resolving the
        recipes of a gradient test's variants; the copy is not re-validated as a plan."""
        more = {n: Configuration(**c) for n, c in extra.items()}
        return self.model_copy(update={"configurations": {**self.configurations, **more}})

    def resolved_config(self, configuration: str) -> dict[str, Any]:
        """The shared recipe with the configuration's overrides applied (nested tables merged)."""
        return merge_tables(self.recipe, self.configurations[configuration].overrides)


def merge_tables(base: dict, over: dict) -> dict:
    """``over`` applied to ``base``: nested tables merge key by key, anything else is replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge_tables(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
