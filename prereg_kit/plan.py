"""Plan files: the TOML schema of a preregistration, parsing and validation.

A plan fixes what the dense-rewards paper's preregistrations fix (paper 1, §2.3 and C.1
"Preregistration"; extract §3.18): hypotheses with predictions and the reading of each possible
outcome, a shared recipe with named configurations as overrides, the comparator, seeds, budgets
(token budget B, evaluation interval such as ``B/16``, optional time budget, run lengths such as
``2B``), metric, evaluation sets and verifier, contrasts with their reading point, tier and kind,
Holm families, admission rules and stages. See ``docs/plan-format.md``.

Every problem is reported as one line ``FILE:LINE: key.path: message`` (exit code 2).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from .canonical import content_hash, sha256_hex
from .errors import PlanError
from .tomlpos import format_path, key_lines, line_of

PLAN_FILE = "plan.toml"
STAGE_NAMES = ("calibration", "pilot", "smoke", "main")

# --------------------------------------------------------------------------- quantities

_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}
_TOKENS = re.compile(r"^\s*([0-9][0-9_]*(?:\.[0-9]+)?)\s*([KkMmGg]?)\s*$")
_MULTIPLE = re.compile(r"^\s*([0-9]*\.?[0-9]*)\s*[*·]?\s*B\s*$")
_FRACTION = re.compile(r"^\s*B\s*/\s*([0-9]+)\s*$")
_METRIC = re.compile(r"^(accuracy|greedy_accuracy|pass@[1-9][0-9]*|[a-z][a-z0-9_]*_rate|relative_accuracy|collapse)$")
METRICS_HELP = "accuracy, greedy_accuracy, pass@K, <channel>_rate, relative_accuracy or collapse"
# Metrics derived from a run's accuracy curve and read only at token reading points (B, k·B):
# relative_accuracy (÷ the [evaluation] reference's accuracy, same seed) and collapse (pass@4
# below the run's own evaluation 0). Multi-reward paper §4.7 (P2:L101-103, L113).
DERIVED_METRICS = ("relative_accuracy", "collapse")
COLLAPSE_K = 4  # as readings.COLLAPSE_K (pass@4, P2:L113)


def parse_tokens(value: Any) -> int:
    """A token count: an integer or a string such as ``"12.25M"``, ``"500K"``, ``"1_000"``."""
    if isinstance(value, bool):
        raise ValueError("expected a token count such as 12250000 or \"12.25M\"")
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and (m := _TOKENS.match(value)):
        n = round(float(m.group(1).replace("_", "")) * _SUFFIX[m.group(2).upper()])
    else:
        raise ValueError(f"expected a token count such as 12250000 or \"12.25M\", got {value!r}")
    if n <= 0:
        raise ValueError(f"a token count must be positive, got {value!r}")
    return n


def parse_multiple(value: Any) -> float:
    """A multiple of the budget B: ``"B"`` → 1, ``"2B"`` → 2, ``"1.25B"`` → 1.25."""
    if isinstance(value, str) and (m := _MULTIPLE.match(value)):
        k = float(m.group(1)) if m.group(1) not in ("", ".") else 1.0
        if k > 0:
            return k
    raise ValueError(f"expected a multiple of the budget such as \"B\", \"2B\" or \"1.25B\", got {value!r}")


def _seeds(value: Any) -> Any:
    """Seeds as a list, a range string ``"5-16"`` (inclusive) or a table ``{first, last}``."""
    if isinstance(value, str):
        m = re.match(r"^\s*(\d+)\s*(?:-|\.\.)\s*(\d+)\s*$", value)
        if not m:
            raise ValueError(f"expected a list of seeds or a range such as \"5-16\", got {value!r}")
        value = {"first": int(m.group(1)), "last": int(m.group(2))}
    if isinstance(value, dict):
        if set(value) != {"first", "last"} or not all(type(v) is int for v in value.values()):
            raise ValueError("a seed range is a table with integer keys 'first' and 'last'")
        if value["last"] < value["first"]:
            raise ValueError("a seed range needs last >= first")
        return list(range(value["first"], value["last"] + 1))
    return value


def _check_seeds(value: list[int]) -> list[int]:
    if not value:
        raise ValueError("at least one seed is needed")
    dup = sorted({s for s in value if value.count(s) > 1})
    if dup:
        raise ValueError(f"duplicate seeds: {', '.join(map(str, dup))}")
    if min(value) < 0:
        raise ValueError("seeds must be non-negative")
    return value


def _check_multiple(v: str) -> str:
    parse_multiple(v)
    return v


Seeds = Annotated[list[int], BeforeValidator(_seeds)]
Multiple = Annotated[str, AfterValidator(_check_multiple)]
Tokens = Annotated[int, BeforeValidator(parse_tokens)]
Name = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$", max_length=80)]


@dataclass(frozen=True, slots=True)
class ReadingPoint:
    """Where a contrast is read (paper 1 §2.3, D, F).

    ``tokens``: at the first evaluation at or after ``multiple``·B; ``time``: per seed at T*, the
    shorter of the two runs' training times to B; ``control_time``: both at the control's
    training time to B (S35); ``updates``: the control interpolated to the treatment's updates.
    """

    kind: Literal["tokens", "time", "control_time", "updates"]
    multiple: float = 1.0

    def __str__(self) -> str:
        if self.kind == "tokens":
            return "B" if self.multiple == 1 else f"{self.multiple:g}B"
        return self.kind.replace("_", "-")


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
            f"expected a reading point: \"B\", \"2B\" (k·B), \"time\", \"control-time\" or \"updates\"; got {value!r}"
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
        if isinstance(v, str) and not _FRACTION.match(v):
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
        return _check_margin(v)

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str | None) -> str | None:
        return v if v is None else Evaluation._metric(v)

    @property
    def reading_point(self) -> ReadingPoint:
        return parse_reading_point(self.at)


def _check_margin(v: Margin | None) -> Margin | None:
    if v is None:
        return v
    if isinstance(v, list):
        if len(v) != 2 or not (v[0] < 0 < v[1]):
            raise ValueError("an asymmetric margin is [low, high] with low < 0 < high")
    elif v <= 0:
        raise ValueError(f"a margin must be > 0 (it is read as ±margin), got {v}")
    return v


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

    _margin_ok = field_validator("margin")(classmethod(lambda cls, v: _check_margin(v)))


class Admission(_Model):
    require_complete: bool = True
    min_iterations: int | None = Field(default=None, gt=0)
    drift_threshold: float = Field(default=0.1, gt=0)
    drifted: Literal["flag", "exclude"] = "flag"
    allow_missing_seeds: bool = False
    rules: list[str] = Field(default=[], description="further rules in words, reported with the results")


class Stage(_Model):
    name: Literal["calibration", "pilot", "smoke", "main"]
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
    configurations: dict[str, Configuration] = Field(min_length=1)
    budget: Budget
    evaluation: Evaluation
    contrasts: list[Contrast] = Field(min_length=1)
    families: list[Family] = []
    statistics: Statistics = Statistics()
    admission: Admission = Admission()
    stages: list[Stage] = [Stage(name="main")]

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

    def stage(self, name: str) -> Stage | None:
        return next((s for s in self.stages if s.name == name), None)

    def seeds_for(self, stage: str = "main") -> list[int]:
        s = self.stage(stage)
        return list(s.seeds) if s is not None and s.seeds is not None else list(self.study.seeds)

    def configurations_for(self, stage: str = "main") -> list[str]:
        s = self.stage(stage)
        return list(s.configurations) if s is not None and s.configurations else list(self.configurations)

    def train_to(self, configuration: str, stage: str = "main") -> float:
        """Run length of a configuration as a multiple of B (stage, then configuration, then budget)."""
        s = self.stage(stage)
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
    """Rules between keys that the schema alone cannot express: (key path, message) pairs."""
    errs: list[tuple[tuple, str]] = []
    configs = set(plan.configurations)
    contrast_ids = [c.id for c in plan.contrasts]
    set_names = [s.name for s in plan.evaluation.sets]

    if plan.study.comparator not in configs:
        errs.append((("study", "comparator"), f"unknown configuration {plan.study.comparator!r} (have: {', '.join(sorted(configs))})"))
    for i, name in enumerate(set_names):
        if set_names.index(name) != i:
            errs.append((("evaluation", "sets", i, "name"), f"duplicate evaluation set {name!r}"))
    if plan.evaluation.primary_set is not None and plan.evaluation.primary_set not in set_names:
        errs.append((("evaluation", "primary_set"), f"unknown evaluation set {plan.evaluation.primary_set!r}"))
    ev = plan.evaluation
    if ev.reference is not None and ev.reference not in configs:
        errs.append((("evaluation", "reference"), f"unknown configuration {ev.reference!r} (have: {', '.join(sorted(configs))})"))
    if ev.metric == "relative_accuracy" and ev.reference is None:
        errs.append((("evaluation", "metric"), "metric relative_accuracy needs [evaluation] reference (the primary-only configuration)"))
    if ev.metric == "collapse" and ev.samples < COLLAPSE_K:
        errs.append((("evaluation", "metric"), f"metric collapse compares pass@{COLLAPSE_K}: it needs samples >= {COLLAPSE_K} (have {ev.samples})"))

    memberships: dict[str, list[str]] = {}
    for fi, fam in enumerate(plan.families):
        if [f.name for f in plan.families].index(fam.name) != fi:
            errs.append((("families", fi, "name"), f"duplicate family name {fam.name!r}"))
        if not fam.members:
            errs.append((("families", fi, "members"), f"family {fam.name!r} is empty"))
        for m in fam.members:
            memberships.setdefault(m, []).append(fam.name)
            if m not in contrast_ids:
                errs.append((("families", fi, "members"), f"unknown contrast {m!r} in family {fam.name!r}"))
            elif plan.contrast(m).tier != "primary":
                errs.append((("families", fi, "members"), f"contrast {m!r} is {plan.contrast(m).tier}: only primary contrasts are Holm-adjusted"))

    for ci, c in enumerate(plan.contrasts):
        where = ("contrasts", ci)
        if contrast_ids.index(c.id) != ci:
            errs.append((where + ("id",), f"duplicate contrast id {c.id!r}"))
        for key in ("treatment", "control"):
            if getattr(c, key) not in configs:
                errs.append((where + (key,), f"unknown configuration {getattr(c, key)!r} (have: {', '.join(sorted(configs))})"))
        if c.treatment == c.control:
            errs.append((where + ("control",), "treatment and control are the same configuration"))
        if c.eval_set is not None and c.eval_set not in set_names:
            errs.append((where + ("eval_set",), f"unknown evaluation set {c.eval_set!r}"))
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
                and plan.train_to(ev.reference) < rp.multiple:
            errs.append((where + ("at",), f"read at {rp} but the reference {ev.reference!r} trains only to {plan.train_to(ev.reference):g}B"))
        if rp.kind == "tokens" and not any(e[0][:2] == where for e in errs):
            for key in ("treatment", "control"):
                if getattr(c, key) in configs and plan.train_to(getattr(c, key)) < rp.multiple:
                    errs.append((where + ("at",), f"read at {rp} but {getattr(c, key)!r} trains only to {plan.train_to(getattr(c, key)):g}B"))

    for hi, h in enumerate(plan.hypotheses):
        if [x.id for x in plan.hypotheses].index(h.id) != hi:
            errs.append((("hypotheses", hi, "id"), f"duplicate hypothesis id {h.id!r}"))
        for cid in h.contrasts:
            if cid not in contrast_ids:
                errs.append((("hypotheses", hi, "contrasts"), f"unknown contrast {cid!r}"))

    stage_names = [s.name for s in plan.stages]
    for si, s in enumerate(plan.stages):
        if stage_names.index(s.name) != si:
            errs.append((("stages", si, "name"), f"duplicate stage {s.name!r}"))
        for name in s.configurations or []:
            if name not in configs:
                errs.append((("stages", si, "configurations"), f"unknown configuration {name!r}"))
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
    """Raw bytes and parsed TOML of a file; syntax errors become one-line :class:`PlanError`."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise PlanError(f"{p}: no such plan file") from None
    except IsADirectoryError:
        raise PlanError(f"{p}: is a folder, not a plan file") from None
    try:
        return raw, tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise PlanError(f"{p}: not UTF-8 text (byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        msg = str(e)
        m = re.search(r"\(at line (\d+), column (\d+)\)", msg)
        if m:
            msg = msg[: m.start()].strip()
            raise PlanError(f"{p}:{m.group(1)}: TOML syntax error: {msg} (column {m.group(2)})") from None
        raise PlanError(f"{p}: TOML syntax error: {msg}") from None


def validate_plan(data: dict[str, Any], *, source: str = "plan", text: str = "") -> Plan:
    """Validate parsed TOML ``data``; raise :class:`PlanError` with one line per problem."""
    lines = key_lines(text) if text else {}

    def fmt(path: tuple, msg: str) -> str:
        line = line_of(lines, path)
        return f"{source}:{line}: {format_path(path)}: {msg}" if line else f"{source}: {format_path(path)}: {msg}"

    try:
        plan = Plan.model_validate(data)
    except ValidationError as e:
        seen: dict[tuple, str] = {}
        for err in e.errors():
            path, msg = _explain(err)
            seen.setdefault(path, msg)  # one line per key: a union reports each member
        raise PlanError(*[fmt(p, m) for p, m in seen.items()]) from None
    problems = cross_check(plan)
    if problems:
        raise PlanError(*[fmt(p, m) for p, m in problems])
    return plan


_TYPE_TAGS = {"float", "int", "str", "bool", "dict", "list", "none"}


def _explain(err: dict) -> tuple[tuple, str]:
    """A pydantic error as (TOML key path, message in the plan's terms)."""
    # drop pydantic's union-member and validator tags from the location: keep TOML keys only
    loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and (
        "[" in x or x.startswith("function-") or x in _TYPE_TAGS)))
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        return loc, "unknown key"
    if kind == "missing":
        return loc, "required key is missing"
    if kind == "value_error":
        return loc, msg.removeprefix("Value error, ")
    got = err.get("input")
    shown = repr(got) if not isinstance(got, (dict, list)) or len(repr(got)) < 60 else type(got).__name__
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
