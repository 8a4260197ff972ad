"""The plan's values: token counts, multiples of B, seeds, names that become folders, reading
points, and the bounds on what a plan may hold (``docs/plan-format.md``, "Limits")."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator

PLAN_FILE = "plan.toml"

# Bounds on what a plan may hold (docs/plan-format.md, "Limits"). They keep a hostile or broken
# file from exhausting memory, the stack or the clock before it is reported as an error.
MAX_PLAN_BYTES = 1 << 20  # 1 MiB; the largest plan in the registry is a few KiB
MAX_DEPTH = 32  # tables and arrays inside one another; plans use about 5
MAX_SEEDS = 10_000  # seeds per study or stage
MAX_NAME = 80  # characters in a configuration name, id or set name
INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # TOML integers are 64-bit
MAX_MULTIPLE = 1e6  # a run length or reading point k·B; far beyond any study
PointKind = Literal["tokens", "time", "control_time", "updates", "first_half", "second_half", "all_evals",
                    "to_target", "time_to_target", "extrapolated"]
# Reading points over a span of evaluations, and the tokens/time to reach the control's accuracy
# (dense-rewards paper §C.4.3 S14, §C.5.4 S27, §C.6.8 Table 11; prereg_kit.readings.spans).
SPAN_POINTS = ("first_half", "second_half", "all_evals")
TARGET_POINTS = ("to_target", "time_to_target")
# The extrapolation heuristic (dense-rewards paper §3.3): observed − outcome's curve read at e·t, to B; the
# contrast's ``efficiency`` is e (prereg_kit.readings.extrapolation).
EXTRAPOLATED = "extrapolated"

# --------------------------------------------------------------------------- quantities

_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}
_TOKENS = re.compile(r"^\s*([0-9][0-9_]*(?:\.[0-9]+)?)\s*([KkMmGg]?)\s*$")
_MULTIPLE = re.compile(r"^\s*([0-9]*\.?[0-9]*)\s*[*·]?\s*B\s*$")
_FRACTION = re.compile(r"^\s*B\s*/\s*([0-9]{1,19})\s*$")
_METRIC = re.compile(r"^(accuracy|greedy_accuracy|pass@[1-9][0-9]*|[a-z][a-z0-9_]*_rate|relative_accuracy|collapse|log_length)$")
METRICS_HELP = "accuracy, greedy_accuracy, pass@K, <channel>_rate, relative_accuracy, collapse or log_length"
# Metrics derived from a run's accuracy curve and read only at token reading points (B, k·B):
# relative_accuracy (÷ the [evaluation] reference's accuracy, same seed) and collapse (pass@4
# below the run's own evaluation 0). Multi-reward paper App. C.1 (Table 7), §6.1 and App. C.4.
DERIVED_METRICS = ("relative_accuracy", "collapse")
COLLAPSE_K = 4  # the collapse flag compares pass@4 (multi-reward paper §6.1, App. C.4)


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


def format_tokens(n: float) -> str:
    """A token count as a plan writes it (what :func:`parse_tokens` reads), to 4 significant
    digits: ``512``, ``30K``, ``30.31K``, ``1.2M``, ``12.25M``."""
    if n is None or math.isnan(n):
        return "n/a"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= div:
            return f"{n / div:.4g}{suffix}"
    return f"{n:.0f}"


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
    """Where a contrast is read (dense-rewards paper §2.3, App. D, App. F): ``kind`` at ``multiple`` × B tokens.

    ``tokens``: at the first evaluation at or after ``multiple``·B; ``time``: per seed at T*, the
    shorter of the two runs' training times to B; ``control_time``: both at the control's
    training time to B (S35); ``updates``: the control interpolated to the treatment's updates.
    The plan names the point without its budget; the analysis reads it with ``budget`` = B
    (:meth:`at_budget`).
    """

    kind: PointKind
    multiple: float = 1.0
    budget: Any = None  # B in tokens, or per configuration (run-log column, B): Plan.budgets()

    def __str__(self) -> str:
        if self.kind == "tokens":
            return "B" if self.multiple == 1 else f"{self.multiple:g}B"
        if self.kind in SPAN_POINTS + TARGET_POINTS:
            return self.kind if self.multiple == 1 else f"{self.kind}:{self.multiple:g}B"
        return self.kind if self.kind == EXTRAPOLATED else self.kind.replace("_", "-")

    def at_budget(self, budget: float) -> "ReadingPoint":
        """The same point with the study's token budget B attached."""
        return ReadingPoint(self.kind, self.multiple, budget)

    @property
    def scaled(self) -> Any:
        """The point's B times ``multiple``: a token count, or per configuration (column, k·B)."""
        if self.budget is None:
            raise ValueError(f"reading point {self}: no budget attached (ReadingPoint.at_budget)")
        if isinstance(self.budget, dict):
            return {c: (col, v * self.multiple) for c, (col, v) in self.budget.items()}
        return self.budget * self.multiple

    @property
    def tokens(self) -> float:
        """The tokens of the point, ``multiple`` × B."""
        if self.budget is None:
            raise ValueError(f"reading point {self}: no token budget attached (ReadingPoint.at_budget)")
        return self.budget * self.multiple

    def describe(self) -> str:
        b = "B" if self.multiple == 1 else f"{self.multiple:g}B"
        return {"tokens": f"tokens at {b}", "time": f"time T* at {b}", "control_time": f"control's time to {b}",
                "updates": f"updates at {b}", "first_half": f"mean over the first half of {b}",
                "second_half": f"mean over the second half of {b}", "all_evals": f"mean over every evaluation to {b}",
                "to_target": f"tokens to the control's accuracy at {b}",
                "time_to_target": f"training time to the control's accuracy at {b}",
                "extrapolated": f"observed − extrapolated, evaluations to {b}"}[self.kind]


def parse_reading_point(value: str) -> ReadingPoint:
    v = value.strip()
    if v in ("tokens", "B"):
        return ReadingPoint("tokens")
    if v in ("time", "updates"):
        return ReadingPoint(v)  # type: ignore[arg-type]
    if v in ("control-time", "control_time"):
        return ReadingPoint("control_time")
    if v == EXTRAPOLATED:
        return ReadingPoint(EXTRAPOLATED)
    kind, sep, mult = v.partition(":")
    try:
        if kind in SPAN_POINTS + TARGET_POINTS:  # "first_half", "to_target:2B"
            return ReadingPoint(kind, parse_multiple(mult) if sep else 1.0)  # type: ignore[arg-type]
        return ReadingPoint("tokens", parse_multiple(v))
    except ValueError:
        raise ValueError(
            f"expected a reading point: \"B\", \"2B\" (k·B), \"time\", \"control-time\", \"updates\", "
            f"\"first_half\", \"second_half\", \"all_evals\", \"to_target\", \"time_to_target\" "
            f"(these five optionally \":kB\") or \"extrapolated\"; got {_short(value)}"
        ) from None


