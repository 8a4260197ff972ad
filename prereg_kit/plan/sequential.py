"""The ``[sequential]`` table: preregistered interim looks with an α-spending function and a
non-binding futility rule (Lan & DeMets 1983; Kim & DeMets 1987; Jennison & Turnbull 2000).

``looks`` are seed counts per configuration at each look (the first ``looks[k]`` seeds of the
plan's seed list), strictly increasing, the last equal to the plan's seed count. The cross-checks
against the rest of the plan are :func:`sequential_problems`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .fields import INT_MAX, _short


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)


class Futility(BaseModel):
    """A non-binding futility rule: at an interim look a contrast stops for futility when its
    conditional power under the current trend (Lan & Wittes 1988) is below ``below``. Non-binding:
    the efficacy boundaries are computed as if it were never applied, so ignoring it keeps α."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)
    kind: Literal["conditional-power", "none"] = "conditional-power"
    below: float = Field(default=0.1, gt=0, lt=1)


class Sequential(_Model):
    looks: list[int] = Field(min_length=2, description="seeds per configuration at each look")
    spending: Literal["obrien-fleming", "pocock", "power"] = "obrien-fleming"
    rho: float | None = Field(default=None, gt=0, le=100)
    futility: Futility = Futility(kind="none")
    contrasts: list[str] | None = None  # default: every primary contrast

    @field_validator("looks")
    @classmethod
    def _looks(cls, v: list[int]) -> list[int]:
        if any(n < 2 or n > INT_MAX for n in v):
            raise ValueError(f"every look needs at least 2 seeds (a paired t needs two), got {_short(v)}")
        if any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError(f"looks must be strictly increasing seed counts, got {_short(v)}")
        return v

    @model_validator(mode="after")
    def _rho(self) -> "Sequential":
        if self.spending == "power" and self.rho is None:
            raise ValueError("spending = \"power\" needs rho (α·t^rho; rho = 3 resembles O'Brien–Fleming)")
        if self.spending != "power" and self.rho is not None:
            raise ValueError(f"rho is the exponent of spending = \"power\"; this plan spends {self.spending}")
        return self


def sequential_problems(plan) -> list[tuple[tuple, str]]:
    """The ``[sequential]`` table against the plan: the last look is the plan's seed count; the
    named contrasts exist, are primary, two-sided superiority on the study's seeds."""
    seq = plan.sequential
    if seq is None:
        return []
    errs: list[tuple[tuple, str]] = []
    n = len(plan.all_seeds("main"))
    if seq.looks[-1] != n:
        errs.append((("sequential", "looks"), f"the last look must be the plan's seed count ({n} seeds), got {seq.looks[-1]}"))
    by_id = {c.id: c for c in plan.contrasts}
    ids = seq.contrasts if seq.contrasts is not None else [c.id for c in plan.contrasts if c.tier == "primary"]
    if not ids:
        errs.append((("sequential", "contrasts"), "no contrast to look at: name them or make one primary"))
    for cid in ids:
        c = by_id.get(cid)
        if c is None:
            errs.append((("sequential", "contrasts"), f"unknown contrast {_short(cid)}"))
        elif c.tier != "primary":
            errs.append((("sequential", "contrasts"), f"contrast {cid!r} is {c.tier}: only primary contrasts are looked at"))
        elif c.kind != "superiority" or c.alternative != "two-sided":
            errs.append((("sequential", "contrasts"), f"contrast {cid!r} is {c.kind} ({c.alternative}): the boundaries "
                         "are two-sided, for two-sided superiority contrasts"))
        elif c.seeds is not None or c.design == "welch":
            errs.append((("sequential", "contrasts"), f"contrast {cid!r} reads its own seeds or unpaired groups: a look "
                         "takes the first seeds of the plan's list"))
    for name in plan.configurations:
        if len(plan.configuration_seeds(name)) != n:
            errs.append((("configurations", name, "seeds"), f"a sequential plan runs every configuration on the "
                         f"study's {n} seeds (its looks are seed counts)"))
    return errs


def sequential_ids(plan) -> list[str]:
    """The contrasts the looks decide: ``[sequential] contrasts``, else every primary one."""
    seq = plan.sequential
    if seq is None:
        return []
    return list(seq.contrasts) if seq.contrasts is not None else [c.id for c in plan.contrasts if c.tier == "primary"]
