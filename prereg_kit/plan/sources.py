"""The ``[[sources]]`` table: configurations a plan takes from other locked studies.

A plan may read, beside its own configurations, configurations that another study ran, e.g. to
pool one pair of configurations over the seeds of several studies (the dense-rewards paper pools
"seeds pooled over several studies of the same configurations" in Tables 4, 8, 10 and 11)::

    [[sources]]
    study = "../S34"                       # the source study's folder, relative to this plan's
    configurations = ["filter", "outcome"]  # which of its configurations this plan reads
    # name = "S34"                         # default: the folder's name

Its configurations are then named ``<name>/<configuration>`` (``"S34/filter"``) and used in
contrasts, checks and the comparator like the plan's own. This module holds the table's model
and the rules a plan file alone can check (:func:`source_problems`): a relative path that stays
beside this study, names once each, no ``[sequential]`` looks. What needs the source study
itself (its lock, its configurations, seeds and budgets) is checked where the plan is locked,
verified and analyzed (``prereg_kit.chain.sources``); docs/plan-format.md, "Sources".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .fields import Name, _cut, _short, check_name

if TYPE_CHECKING:
    from .schema import Plan

SOURCE_SEP = "/"  # "<source name>/<configuration>"
MAX_SOURCE_PATH = 1000  # characters of a source's folder path


def check_source_path(v: str) -> str:
    """A source's folder as the plan writes it: a relative POSIX path (``../S34``,
    ``../pooled/S34``); ``..`` only as leading parts, no empty or ``.`` parts, no ``\\`` or drive.
    Where it leads on disk (inside the folder that holds this study) is checked when it is opened."""
    why = None
    parts = v.split("/")
    if not v:
        why = "is empty"
    elif len(v) > MAX_SOURCE_PATH:
        why = f"is {len(v)} characters long"
    elif v.startswith("/") or "\\" in v or ":" in v:
        why = "is not a relative path with / between its parts"
    elif any(p in ("", ".") for p in parts):
        why = "has an empty or '.' part"
    elif all(p == ".." for p in parts):
        why = "names no study folder"
    elif ".." in parts[next(i for i, p in enumerate(parts) if p != ".."):]:
        why = "has '..' after a folder name"
    if why:
        raise ValueError(f"study {_short(v)} {why} (a source is a study folder beside this one, e.g. \"../S34\")")
    return v


class Source(BaseModel):
    """One ``[[sources]]`` entry: another study's folder and the configurations read from it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)
    study: str = Field(description="the source study's folder, relative to this plan's folder")
    configurations: list[Name] = Field(min_length=1, description="its configurations this plan reads")
    name: Name | None = None  # the prefix of its configurations here; default the folder's name
    description: str = ""

    _path_ok = field_validator("study")(classmethod(lambda cls, v: check_source_path(v)))

    @property
    def prefix(self) -> str:
        """The name its configurations carry in this plan (``<prefix>/<configuration>``)."""
        return self.name or self.study.rstrip("/").rsplit("/", 1)[-1]

    def qualified(self) -> list[str]:
        """Its configurations as this plan names them: ``["S34/filter", "S34/outcome"]``."""
        return [f"{self.prefix}{SOURCE_SEP}{c}" for c in self.configurations]


def split_source_name(name: str) -> tuple[str, str] | None:
    """``"S34/filter"`` → ``("S34", "filter")``; a name of the plan's own → None."""
    prefix, sep, conf = name.partition(SOURCE_SEP)
    return (prefix, conf) if sep else None


def source_problems(plan: Plan) -> list[tuple[tuple, str]]:
    """What a plan's ``[[sources]]`` must hold before any source is opened: a prefix that is a safe
    name (the folder's, when ``name`` is not given), each prefix and each folder once, each
    configuration once per source; no ``[sequential]`` looks (they add seeds over time; a source's
    runs are already there) and no ``[[stages]]`` that name a source's configuration."""
    errs: list[tuple[tuple, str]] = []
    prefixes: dict[str, int] = {}
    folders: dict[str, int] = {}
    for i, s in enumerate(plan.sources):
        where = ("sources", i)
        try:
            check_name(s.prefix)
        except ValueError as e:
            errs.append((where + ("study",), f"its folder's name cannot name its configurations here: {e}; give name = \"...\""))
        if s.prefix in prefixes:
            errs.append((where + ("name",), f"source name {s.prefix!r} is used by sources[{prefixes[s.prefix]}] too "
                                            "(give each a name of its own)"))
        prefixes.setdefault(s.prefix, i)
        key = s.study.rstrip("/")
        if key in folders:
            errs.append((where + ("study",), f"study {s.study!r} is read by sources[{folders[key]}] already: "
                                             "list all its configurations there"))
        folders.setdefault(key, i)
        seen = [c for j, c in enumerate(s.configurations) if c in s.configurations[:j]]
        if seen:
            errs.append((where + ("configurations",), f"configuration {seen[0]!r} is listed twice"))
    if plan.sources and plan.sequential is not None:
        errs.append((("sequential",), "a plan with [[sources]] takes no [sequential] looks: its sources' runs are not "
                                      "added look by look"))
    if not plan.configurations and not plan.sources:
        errs.append((("configurations",), "a plan needs configurations: its own [configurations] or [[sources]]"))
    return errs


def sourced_names(plan: Plan) -> list[str]:
    """Every configuration the plan takes from its sources, as it names them."""
    return [n for s in plan.sources for n in s.qualified()]


def have_text(names: list[str]) -> str:
    """``have: a, b, S34/filter`` for a message, cut to a readable length."""
    return _cut(", ".join(sorted(names)), 200)


__all__ = ["SOURCE_SEP", "Source", "check_source_path", "have_text", "source_problems", "sourced_names",
           "split_source_name"]
