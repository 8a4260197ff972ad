"""The registry's record of what a paper printed for a study: ``reported.toml`` read and validated.

Per contrast the record holds the number of seeds, the mean, the 95% interval and the printed
tests, each with its source (the paper's table, figure or section); endpoints printed without an
interval (the multi-reward paper's single runs) carry the ``checks`` that recompute them from
other printed numbers; a row may name its relations to other rows (``same_as``,
``difference_of``, ``sum_of``, ``pooled_from``). The schema: ``docs/registry.md``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import PreregError
from .relations import RELATION_KEYS, printed_interval

REPORTED_FILE = "reported.toml"
TEST_KEYS = ("p", "holm_p", "tost_p", "tost_holm_p", "noninferiority_p", "noninferiority_holm_p")
# printed paired-t p-values recomputed from the printed d_z and n (p_from_dz), by the test each names
DZ_TEST_KEYS = {"dz_p": "two-sided", "dz_p_greater": "greater", "dz_p_less": "less", "dz_tost_p": "tost"}
STATUSES = ("consistent", "explained", "inconsistent", "no test", "not checkable")


# --------------------------------------------------------------------------- the record's schema

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Amendment(_Strict):
    """A dated amendment the paper mentions (the date is kept as printed, or ``not stated``)."""

    date: str = "not stated"
    description: str
    changes: list[str] = []
    source: str = ""


class EndpointCheck(_Strict):
    """One re-analysis of a printed endpoint from other printed numbers of the paper.

    ``rule`` names the relation: ``ratio`` (``of[0] / of[1]`` is the
    ``printed`` multiple, "0.82×"), ``difference`` (``scale · (of[0] − of[1])`` is ``printed``,
    e.g. points with ``scale = 100``), ``rounds_to`` (``of[0]`` printed elsewhere with fewer
    decimals as ``printed``), ``within`` (``of[0]`` lies in the ``printed`` range), ``less`` / ``greater`` (``of[0]`` below / above ``of[1]``, an
    ordering the text states). Operands and results are printed strings: a number carries its
    rounding interval, a range ``"0.254-0.282"`` spans from its low end's to its high end's.
    """

    rule: Literal["ratio", "difference", "rounds_to", "within", "less", "greater"]
    of: list[str] = Field(min_length=1, max_length=2)
    printed: str = ""
    scale: float = Field(default=1.0, gt=0)
    note: str = ""

    @model_validator(mode="after")
    def _arity(self) -> "EndpointCheck":
        need = 1 if self.rule in ("rounds_to", "within") else 2
        if len(self.of) != need:
            raise ValueError(f"rule {self.rule} takes {need} printed operand(s) in `of`, got {len(self.of)}")
        if self.rule in ("less", "greater") and self.printed:
            raise ValueError(f"rule {self.rule} states an ordering: it takes no `printed` result")
        if self.rule not in ("less", "greater") and not self.printed:
            raise ValueError(f"rule {self.rule} needs the `printed` result it is checked against")
        for text in [*self.of, *([self.printed] if self.printed else [])]:
            printed_interval(text)  # a number the recheck cannot read is an error in the record
        return self


class Endpoint(_Strict):
    """A reported endpoint without an interval (single runs, e.g. the multi-reward grids), with the
    re-analyses (``checks``) that recompute it from the paper's other printed numbers."""

    id: str
    label: str
    model: str = ""
    configuration: str | None = None
    metric: str
    value: str
    reference: str = ""
    source: str
    note: str = ""
    checks: list[EndpointCheck] = []
    explanation: str = ""


class Printing(_Strict):
    """The row's statistic printed a second time elsewhere in the paper (the text, another table),
    perhaps in other units or with other rounding: ``same_statistic`` compares the two."""

    mean: str
    ci_low: str | None = None
    ci_high: str | None = None
    unit: Literal["fraction", "points", "ratio"]
    source: str
    note: str = ""

    @model_validator(mode="after")
    def _readable(self) -> "Printing":
        if (self.ci_low is None) != (self.ci_high is None):
            raise ValueError("a second printing's interval needs ci_low and ci_high")
        for text in (self.mean, self.ci_low, self.ci_high):
            if text is not None:
                printed_interval(text)
        return self


class ReportedRow(_Strict):
    """One printed contrast: n, mean and 95% interval as printed, the printed test(s), the source."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
    contrast: str | None = None
    label: str
    model: str = ""
    at: str = "B"
    n: int | None = Field(default=None, ge=2)
    mean: str | None = None
    ci_low: str | None = None
    ci_high: str | None = None
    values: str = ""  # several printed means without an interval, e.g. "+0.014 / +0.018 / +0.010"
    unit: Literal["fraction", "points", "ratio"] = "fraction"
    confidence: float = Field(default=0.95, gt=0, lt=1)
    ci_kind: Literal["paired-t", "welch", "bootstrap", "none"] = "paired-t"
    df: int | None = Field(default=None, ge=1)
    per_seed: list[str] = []  # printed per-seed differences: a bootstrap interval is recomputed from them
    d_z: str | None = None  # printed paired effect size Δ/s_Δ: with n, it fixes the SD a bootstrap interval's width is checked against
    tier: Literal["primary", "secondary", "exploratory", "estimate", "descriptive"] | None = None
    test: str = ""
    p: str | None = None
    holm_p: str | None = None
    tost_p: str | None = None
    tost_holm_p: str | None = None
    noninferiority_p: str | None = None
    noninferiority_holm_p: str | None = None
    noninferior: bool | None = None
    dz_p: str | None = None  # the DZ_TEST_KEYS: paired-t p-values printed beside d_z (t = d_z·√n)
    dz_p_greater: str | None = None
    dz_p_less: str | None = None
    dz_tost_p: str | None = None
    margin: float | None = Field(default=None, gt=0)
    family_size: int | None = Field(default=None, ge=1)
    family_inferred: bool = False
    source: str
    line: int | None = None
    figure: int | None = None
    table: str | None = None
    block: str = ""
    rebuilt: bool = False
    explanation: str = ""
    note: str = ""
    # cross-row checks (relations.py, docs/registry.md): other printed numbers of the same runs
    checks: list[EndpointCheck] = []  # re-analyses from other printed numbers, as an endpoint's
    printed_elsewhere: list[Printing] = []  # the same statistic printed again (text, points)
    same_as: str = ""  # "ROW" or "STUDY:ROW": the same contrast on the same seeds, printed as another row
    difference_of: list[str] = []  # [A, B]: this row is A − B seed by seed on the same seeds
    sum_of: list[str] = []  # [A, B]: this row is A + B seed by seed on the same seeds
    pooled_from: list[str] = []  # rows over disjoint seed sets whose union is this row's seeds

    @model_validator(mode="after")
    def _check(self) -> "ReportedRow":
        for key in ("difference_of", "sum_of"):
            if getattr(self, key) and len(getattr(self, key)) != 2:
                raise ValueError(f"{key} names two rows, got {len(getattr(self, key))}")
        if self.pooled_from and len(self.pooled_from) < 2:
            raise ValueError("pooled_from names at least two rows")
        if (self.printed_elsewhere or any(getattr(self, k) for k in RELATION_KEYS)) and (
                self.mean is None or self.ci_low is None):
            raise ValueError("a relation to other printed numbers needs the row's mean and interval")
        own = {self.mean, self.ci_low, self.ci_high, *(v.strip() for v in self.values.split("/") if v.strip())} - {None}
        for c in self.checks:
            if not own & {*c.of, c.printed}:
                raise ValueError(f"a row check ({c.rule} of {c.of}) must name one of the row's own printed numbers "
                                 f"({', '.join(sorted(own)) or 'none'})")
        have = [x is not None for x in (self.mean, self.ci_low, self.ci_high)]
        if any(have[1:]) and not all(have):
            raise ValueError("an interval needs mean, ci_low and ci_high")
        if self.printed_tests() and (not all(have) or self.n is None):
            raise ValueError("a printed test needs n, mean, ci_low and ci_high to be rechecked")
        dz = self.dz_tests()
        if dz and (self.n is None or self.d_z is None):
            raise ValueError(f"{', '.join(dz)}: a p recomputed from d_z needs n and d_z")
        if "dz_tost_p" in dz and self.mean is None:
            raise ValueError("dz_tost_p: a TOST p recomputed from d_z needs the mean")
        return self

    def dz_tests(self) -> dict[str, str]:
        """The printed paired-t p-values that are recomputed from d_z and n, by key."""
        return {k: getattr(self, k) for k in DZ_TEST_KEYS if getattr(self, k) is not None}

    def printed_tests(self) -> dict[str, str]:
        """The printed p-values of the row, by from_summary's names."""
        return {k: getattr(self, k) for k in TEST_KEYS if getattr(self, k) is not None}

    @property
    def printed(self) -> str:
        if self.mean is None:
            return ""
        ci = f" [{self.ci_low}, {self.ci_high}]" if self.ci_low is not None else ""
        return f"{self.mean}{ci}"


class Reported(_Strict):
    """``reported.toml``: what the paper printed for one study."""

    study: str
    paper: Literal["dense-rewards", "multi-reward", "prereg-kit"]  # prereg-kit: a study run and analyzed here
    source: str = ""
    notes: list[str] = []
    amendments: list[Amendment] = []
    rows: list[ReportedRow] = []
    endpoints: list[Endpoint] = []

    @model_validator(mode="after")
    def _unique(self) -> "Reported":
        ids = [r.id for r in self.rows] + [e.id for e in self.endpoints]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"duplicate row ids: {', '.join(dup)}")
        return self


def load_record_file(path: Path, model: type[BaseModel]) -> BaseModel:
    """A registry TOML file (a ``reported.toml``, a coverage file) read and validated against
    ``model``: each error one line naming the file and the key."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PreregError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as e:
        raise PreregError(f"{path}: TOML syntax error: {e}") from None
    try:
        return model.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"])
            msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
            lines.append(f"{path}: {loc}: {msg}")
        raise PreregError(*lines) from None


def load_reported(path: str | Path) -> Reported:
    """Read and validate a ``reported.toml`` (a path to the file or its study folder)."""
    p = Path(path)
    if p.is_dir():
        p = p / REPORTED_FILE
    return load_record_file(p, Reported)
