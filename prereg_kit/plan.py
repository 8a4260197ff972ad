"""Plan files: the TOML schema of a preregistration, parsing and validation.

A plan fixes what the dense-rewards paper's preregistrations fix (paper 1, §2.3 and C.1
"Preregistration"; extract §3.18): hypotheses with predictions and the reading of each possible
outcome, a shared recipe with named configurations as overrides, the comparator, seeds, budgets
(token budget B, evaluation interval such as ``B/16``, optional time budget, run lengths such as
``2B``), metric, evaluation sets and verifier, contrasts with their reading point, tier and kind,
Holm families, admission rules and stages. See ``docs/plan-format.md``.

Every problem is reported as one line ``FILE:LINE: key.path: message`` (exit code 2). Input is
bounded before it is trusted: file size, nesting depth, finite numbers, 64-bit integers, the
number of seeds, and names that become folder names (``runs/<configuration>/seed-<n>``).
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from .canonical import content_hash, sha256_hex
from .errors import PlanError
from .margin import plan_margin
from .stages import Stage
from .tomlpos import key_lines, line_of

PLAN_FILE = "plan.toml"

# Bounds on what a plan may hold (docs/plan-format.md, "Limits"). They keep a hostile or broken
# file from exhausting memory, the stack or the clock before it is reported as an error.
MAX_PLAN_BYTES = 1 << 20  # 1 MiB; the largest plan in the registry is a few KiB
MAX_DEPTH = 32  # tables and arrays inside one another; plans use about 5
MAX_SEEDS = 10_000  # seeds per study or stage
MAX_NAME = 80  # characters in a configuration name, id or set name
INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # TOML integers are 64-bit
MAX_MULTIPLE = 1e6  # a run length or reading point k·B; far beyond any study
PointKind = Literal["tokens", "time", "control_time", "updates"]

# --------------------------------------------------------------------------- quantities

_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}
_TOKENS = re.compile(r"^\s*([0-9][0-9_]*(?:\.[0-9]+)?)\s*([KkMmGg]?)\s*$")
_MULTIPLE = re.compile(r"^\s*([0-9]*\.?[0-9]*)\s*[*·]?\s*B\s*$")
_FRACTION = re.compile(r"^\s*B\s*/\s*([0-9]{1,19})\s*$")
_METRIC = re.compile(r"^(accuracy|greedy_accuracy|pass@[1-9][0-9]*|[a-z][a-z0-9_]*_rate|relative_accuracy|collapse)$")
METRICS_HELP = "accuracy, greedy_accuracy, pass@K, <channel>_rate, relative_accuracy or collapse"
# Metrics derived from a run's accuracy curve and read only at token reading points (B, k·B):
# relative_accuracy (÷ the [evaluation] reference's accuracy, same seed) and collapse (pass@4
# below the run's own evaluation 0). Multi-reward paper §4.7 (P2:L101-103, L113).
DERIVED_METRICS = ("relative_accuracy", "collapse")
COLLAPSE_K = 4  # the collapse flag compares pass@4 (multi-reward paper P2:L113)


def parse_tokens(value: Any) -> int:
    """A token count: an integer or a string such as ``"12.25M"``, ``"500K"``, ``"1_000"``."""
    if isinstance(value, bool):
        raise ValueError("expected a token count such as 12250000 or \"12.25M\"")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and (m := _TOKENS.match(value)):
        x = float(m.group(1).replace("_", "")) * _SUFFIX[m.group(2).upper()]
        n = round(x) if math.isfinite(x) and x <= INT_MAX else INT_MAX + 1
    else:
        raise ValueError(f"expected a token count such as 12250000 or \"12.25M\", got {_short(value)}")
    if n <= 0:
        raise ValueError(f"a token count must be positive, got {_short(value)}")
    if n > INT_MAX:
        raise ValueError(f"a token count must be below 2^63, got {_short(value)}")
    return n


def parse_multiple(value: Any) -> float:
    """A multiple of the budget B: ``"B"`` → 1, ``"2B"`` → 2, ``"1.25B"`` → 1.25."""
    if isinstance(value, str) and (m := _MULTIPLE.match(value)):
        k = float(m.group(1)) if m.group(1) not in ("", ".") else 1.0
        if 0 < k <= MAX_MULTIPLE:
            return k
    raise ValueError(f"expected a multiple of the budget such as \"B\", \"2B\" or \"1.25B\" "
                     f"(above 0, at most {MAX_MULTIPLE:g}B), got {_short(value)}")


def _short(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters so that a huge value still gives a short line."""
    return _cut(repr(value), limit)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _seeds(value: Any) -> Any:
    """Seeds as a list, a range string ``"5-16"`` (inclusive) or a table ``{first, last}``.

    A range is sized before it is expanded: more than ``MAX_SEEDS`` seeds is refused without
    building the list.
    """
    if isinstance(value, str):
        m = re.match(r"^\s*(\d{1,19})\s*(?:-|\.\.)\s*(\d{1,19})\s*$", value)
        if not m:
            raise ValueError(f"expected a list of seeds or a range such as \"5-16\", got {_short(value)}")
        value = {"first": int(m.group(1)), "last": int(m.group(2))}
    if isinstance(value, dict):
        if set(value) != {"first", "last"} or not all(type(v) is int for v in value.values()):
            raise ValueError("a seed range is a table with integer keys 'first' and 'last'")
        first, last = value["first"], value["last"]
        if last < first:
            raise ValueError("a seed range needs last >= first")
        if first < 0 or last > INT_MAX:
            raise ValueError(f"seeds are integers from 0 to 2^63-1, got the range {first}-{last}")
        if last - first + 1 > MAX_SEEDS:
            raise ValueError(f"the range {first}-{last} holds {last - first + 1} seeds; a study or stage "
                             f"may have at most {MAX_SEEDS}")
        return list(range(first, last + 1))
    return value


def _check_seeds(value: list[int]) -> list[int]:
    """At least one seed, at most ``MAX_SEEDS``, none negative, no duplicates (linear time)."""
    if not value:
        raise ValueError("at least one seed is needed")
    if len(value) > MAX_SEEDS:
        raise ValueError(f"{len(value)} seeds; a study or stage may have at most {MAX_SEEDS}")
    dup = sorted(s for s, n in Counter(value).items() if n > 1)
    if dup:
        shown = ", ".join(map(str, dup[:10])) + (f" (and {len(dup) - 10} more)" if len(dup) > 10 else "")
        raise ValueError(f"duplicate seeds: {shown}")
    if min(value) < 0:
        raise ValueError("seeds must be non-negative")
    return value


_NAME_CHARS = re.compile(r"[A-Za-z0-9_.+-]*")
NAME_RULE = (f"1 to {MAX_NAME} characters from A-Z a-z 0-9 _ . + -, starting with a letter or digit, "
             "without '..'")


def check_name(value: str) -> str:
    """A name that becomes a folder name or an id (configurations, study, contrast and set ids).

    Configuration names build run folders (``runs/<configuration>/seed-<n>``), so a name may not
    leave its folder: no ``/`` or ``\\``, no leading dot, no ``..``, bounded length.
    """
    why = None
    if not value:
        why = "is empty"
    elif len(value) > MAX_NAME:
        why = f"is {len(value)} characters long"
    elif bad := next((ch for ch in value if not _NAME_CHARS.fullmatch(ch)), None):
        why = f"contains {bad!r}"
    elif not value[0].isalnum():
        why = f"starts with {value[0]!r}"
    elif ".." in value:
        why = "contains '..'"
    if why:
        raise ValueError(f"{_short(value)} is not a safe name: it {why} (a name is {NAME_RULE})")
    return value


def _check_multiple(v: str) -> str:
    parse_multiple(v)
    return v


Seeds = Annotated[list[int], BeforeValidator(_seeds)]
Multiple = Annotated[str, AfterValidator(_check_multiple)]
Tokens = Annotated[int, BeforeValidator(parse_tokens)]
Name = Annotated[str, AfterValidator(check_name)]


@dataclass(frozen=True, slots=True)
class ReadingPoint:
    """Where a contrast is read (paper 1 §2.3, D, F): ``kind`` at ``multiple`` × B tokens.

    ``tokens``: at the first evaluation at or after ``multiple``·B; ``time``: per seed at T*, the
    shorter of the two runs' training times to B; ``control_time``: both at the control's
    training time to B (S35); ``updates``: the control interpolated to the treatment's updates.
    The plan names the point without its budget; the analysis reads it with ``budget`` = B
    (:meth:`at_budget`).
    """

    kind: PointKind
    multiple: float = 1.0
    budget: float | None = None

    def __str__(self) -> str:
        if self.kind == "tokens":
            return "B" if self.multiple == 1 else f"{self.multiple:g}B"
        return self.kind.replace("_", "-")

    def at_budget(self, budget: float) -> "ReadingPoint":
        """The same point with the study's token budget B attached."""
        return ReadingPoint(self.kind, self.multiple, budget)

    @property
    def tokens(self) -> float:
        """The tokens of the point, ``multiple`` × B."""
        if self.budget is None:
            raise ValueError(f"reading point {self}: no token budget attached (ReadingPoint.at_budget)")
        return self.budget * self.multiple

    def describe(self) -> str:
        b = "B" if self.multiple == 1 else f"{self.multiple:g}B"
        return {"tokens": f"tokens at {b}", "time": f"time T* at {b}", "control_time": f"control's time to {b}",
                "updates": f"updates at {b}"}[self.kind]


def parse_reading_point(value: str) -> ReadingPoint:
    v = value.strip()
    if v in ("tokens", "B"):
        return ReadingPoint("tokens")
    if v in ("time", "updates"):
        return ReadingPoint(v)  # type: ignore[arg-type]
    if v in ("control-time", "control_time"):
        return ReadingPoint("control_time")
    try:
        return ReadingPoint("tokens", parse_multiple(v))
    except ValueError:
        raise ValueError(
            f"expected a reading point: \"B\", \"2B\" (k·B), \"time\", \"control-time\" or \"updates\"; got {_short(value)}"
        ) from None


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
        return _merge(self.recipe, self.configurations[configuration].overrides)


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
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


# --------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class PlanFile:
    """A plan as read from disk: raw bytes, parsed TOML, the validated plan and its hashes."""

    path: Path
    raw: bytes
    data: dict[str, Any]
    plan: Plan

    @property
    def raw_sha256(self) -> str:
        return sha256_hex(self.raw)

    @property
    def content_sha256(self) -> str:
        return content_hash(self.data)


def read_toml(path: str | Path) -> tuple[bytes, dict[str, Any]]:
    """Raw bytes and parsed TOML of a plan file, within the plan limits (:func:`parse_toml`).

    At most ``MAX_PLAN_BYTES`` + 1 bytes are read, so a huge file (or ``/dev/zero``) is refused
    without reading it all.
    """
    p = Path(path)
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_PLAN_BYTES + 1)
    except FileNotFoundError:
        raise PlanError(f"{p}: no such plan file") from None
    except IsADirectoryError:
        raise PlanError(f"{p}: is a folder, not a plan file") from None
    except OSError as e:
        raise PlanError(f"{p}: cannot read the plan file: {e.strerror or e}") from None
    return raw, parse_toml(raw, source=str(p))


def parse_toml(raw: bytes, *, source: str = "plan") -> dict[str, Any]:
    """Parse a plan's bytes; every problem is a one-line :class:`PlanError` naming ``source``.

    Checked in this order, each in linear time: size (``MAX_PLAN_BYTES``), UTF-8, nesting of
    brackets and dotted keys (``MAX_DEPTH``, before tomllib: see :func:`_too_nested`), TOML syntax,
    then :func:`document_problems` on the parsed tables (depth, finite numbers, 64-bit integers).
    """
    if len(raw) > MAX_PLAN_BYTES:
        raise PlanError(f"{source}: larger than {MAX_PLAN_BYTES} bytes, the most a plan file may hold")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PlanError(f"{source}: not UTF-8 text (byte {e.start})") from None
    deep = _too_nested(text, MAX_DEPTH)
    if deep is not None:
        raise PlanError(f"{source}:{deep[0]}: {deep[1]}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg = str(e)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        if m:
            msg = msg[: m.start()].strip()
            raise PlanError(f"{source}:{m.group(1)}: TOML syntax error: {msg} (column {m.group(2)})") from None
        raise PlanError(f"{source}: TOML syntax error: {msg}") from None
    except RecursionError:  # not reached after _too_deep; kept so that no input gives a traceback
        raise PlanError(f"{source}: arrays or inline tables nested too deep to parse") from None
    problems = document_problems(data)
    if problems:
        raise PlanError(*_lines(problems, source, text))
    return data


# What changes the scanner's state outside strings; inside basic strings, escapes and the end.
_SCAN = re.compile(r"""["'#\[\]{}.=,\n]""")
_SCAN_BASIC = re.compile(r'\\.|["\n]', re.S)
_SCAN_ML_BASIC = re.compile(r'\\.|"""', re.S)
_SCAN_LITERAL = re.compile(r"['\n]")


def _too_nested(text: str, limit: int) -> tuple[int, str] | None:
    """(line, what) where the text first nests deeper than ``limit``, before any parsing; else None.

    A linear scan that follows TOML's four string forms and comments. It counts ``[`` / ``{``
    (tomllib recurses once per level) and the dots of one dotted key (tomllib's dotted keys take
    time quadratic in their length): outside strings, a float or time has one dot, so more than
    ``limit`` dots between two of ``= , [ ] { }`` or a line end can only be a key that nests
    deeper than ``limit``. Bracket depth never drops below 0, so it never under-counts what
    tomllib would see; table headers count like arrays.
    """
    depth, dots, i, n = 0, 0, 0, len(text)

    def line(at: int) -> int:
        return text.count("\n", 0, at) + 1

    while (m := _SCAN.search(text, i)) is not None:
        ch, i = m.group(), m.end()
        if ch == ".":
            dots += 1
            if dots > limit:
                return line(m.start()), f"a dotted key with more than {limit + 1} parts"
            continue
        if ch in "[{":
            depth += 1
            if depth > limit:
                return line(m.start()), f"arrays or inline tables nested more than {limit} deep"
        elif ch in "]}":
            depth = max(0, depth - 1)
        elif ch == "#":
            i = text.find("\n", i)
            if i < 0:
                return None
        elif ch in "\"'" and text.startswith(ch * 3, m.start()):  # ends at the next triple quote
            if ch == '"':
                i += 2
                while (e := _SCAN_ML_BASIC.search(text, i)) is not None and e.group() != '"""':
                    i = e.end()
                end = e.start() if e is not None else -1
            else:
                end = text.find("'''", i + 2)
            if end < 0:
                return None
            i = end + 3
            while i < n and i < end + 5 and text[i] == ch:  # up to two more quotes end the content
                i += 1
            continue  # a quoted key part keeps the dot count of its key
        elif ch == '"':
            while (e := _SCAN_BASIC.search(text, i)) is not None and e.group()[0] == "\\":
                i = e.end()
            if e is None:
                return None
            i = e.end()
            if e.group() == '"':
                continue
        elif ch == "'":  # a literal string ends at the next quote or at the end of the line
            e = _SCAN_LITERAL.search(text, i)
            if e is None:
                return None
            i = e.end()
            if e.group() == "'":
                continue
        dots = 0  # any of = , [ ] { } # or a line end ends a key
    return None


def document_problems(data: Any) -> list[tuple[tuple, str]]:
    """Problems of parsed TOML anywhere in the document, as (key path, message) pairs.

    Tables and arrays nested more than ``MAX_DEPTH`` deep (dotted keys nest without brackets),
    floats that are nan or ±inf (canonical JSON, and so the lock, cannot hold them), and integers
    outside TOML's 64-bit range. Iterative, so a deep document cannot exhaust the stack; a path is
    built only for a problem.
    """
    problems: list[tuple[tuple, str]] = []

    def path_of(link: tuple | None) -> tuple:
        parts = []
        while link is not None:
            link, key = link
            parts.append(key)
        return tuple(reversed(parts))

    # (container, its depth, link): a link is (parent link, key), None for the document
    stack: list[tuple[Any, int, tuple | None]] = [(data, 0, None)]
    while stack:
        node, depth, link = stack.pop()
        if depth > MAX_DEPTH:
            problems.append((path_of(link), f"tables or arrays nested more than {MAX_DEPTH} deep"))
            continue
        items = node.items() if isinstance(node, dict) else enumerate(node)
        later = []
        for k, v in items:
            if isinstance(v, (dict, list)):
                later.append((v, depth + 1, (link, k)))
            elif isinstance(v, float) and not math.isfinite(v):
                problems.append((path_of((link, k)), f"{v} is not a finite number: nan and inf are not allowed in a plan"))
            elif isinstance(v, int) and not isinstance(v, bool) and not INT_MIN <= v <= INT_MAX:
                problems.append((path_of((link, k)), f"{_short(v)} is outside TOML's 64-bit integers (-2^63 to 2^63-1)"))
        stack.extend(reversed(later))
    return problems


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
MAX_MESSAGE = 500  # characters of one message: a huge echoed value still gives a readable line


def _key_path(path: tuple) -> str:
    """``("contrasts", 0, "margin")`` → ``contrasts[0].margin``; odd keys quoted (and cut) as in TOML."""
    out = ""
    for k in path:
        if isinstance(k, int):
            out += f"[{k}]"
            continue
        k = str(k)
        if not _BARE_KEY.fullmatch(k):
            k = json.dumps(k if len(k) <= 40 else k[:39] + "…", ensure_ascii=False)
        out += ("." if out else "") + k
    return out or "(top level)"


def _lines(problems: list[tuple[tuple, str]], source: str, text: str) -> list[str]:
    """``FILE:LINE: key.path: message`` per problem (the key's line, or its nearest table's)."""
    lines = key_lines(text) if text else {}
    out = []
    for path, msg in problems:
        msg = " ".join(msg.split())  # one line, whatever the message echoes
        if len(msg) > MAX_MESSAGE:
            msg = msg[: MAX_MESSAGE - 1] + "…"
        line = line_of(lines, path)
        out.append(f"{source}:{line}: {_key_path(path)}: {msg}" if line else f"{source}: {_key_path(path)}: {msg}")
    return out


def validate_plan(data: dict[str, Any], *, source: str = "plan", text: str = "") -> Plan:
    """Validate parsed TOML ``data``; raise :class:`PlanError` with one line per problem."""
    problems = document_problems(data)  # again here: ``data`` need not come from parse_toml
    if problems:
        raise PlanError(*_lines(problems, source, text))
    try:
        plan = Plan.model_validate(data)
    except ValidationError as e:
        seen: dict[tuple, str] = {}
        for err in e.errors():
            path, msg = _explain(err, data)
            seen.setdefault(path, msg)  # one line per key: a union reports each member
        raise PlanError(*_lines(list(seen.items()), source, text)) from None
    problems = cross_check(plan)
    if problems:
        raise PlanError(*_lines(problems, source, text))
    return plan


def _toml_path(loc: tuple, data: Any, *, missing: bool) -> tuple:
    """The TOML key path in a pydantic error location.

    pydantic mixes union-member and validator tags into locations (``str``, ``list[float]``,
    ``function-after[...]``, ``[key]``); a part is kept when it is a key or index that the data
    has, so a configuration called ``int`` or ``list`` keeps its name.
    """
    out: list = []
    node = data
    for i, x in enumerate(loc):
        if isinstance(node, dict) and isinstance(x, str) and x in node:
            node = node[x]
        elif isinstance(node, list) and type(x) is int and 0 <= x < len(node):
            node = node[x]
        elif not (missing and i == len(loc) - 1 and isinstance(x, str)):  # keep the missing key itself
            continue
        out.append(x)
    return tuple(out)


def _explain(err: dict, data: Any) -> tuple[tuple, str]:
    """A pydantic error as (TOML key path, message in the plan's terms)."""
    kind, msg = err["type"], err["msg"]
    loc = _toml_path(err["loc"], data, missing=kind == "missing")
    if kind == "extra_forbidden":
        return loc, "unknown key"
    if kind == "missing":
        return loc, "required key is missing"
    if kind == "value_error":
        return loc, msg.removeprefix("Value error, ")
    got = err.get("input")
    shown = _short(got) if not isinstance(got, (dict, list)) else type(got).__name__
    return loc, f"{msg[0].lower() + msg[1:]} (got {shown})"


def load_plan(path: str | Path) -> PlanFile:
    """Read, parse and validate a plan file (a path to ``plan.toml`` or its study folder)."""
    p = resolve_plan_path(path)
    raw, data = read_toml(p)
    plan = validate_plan(data, source=str(p), text=raw.decode("utf-8"))
    return PlanFile(p, raw, data, plan)


def resolve_plan_path(path: str | Path) -> Path:
    """``STUDY_DIR`` → ``STUDY_DIR/plan.toml``; a file path is returned as is."""
    p = Path(path)
    return p / PLAN_FILE if p.is_dir() else p
