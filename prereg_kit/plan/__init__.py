"""Plan files: the TOML schema of a preregistration, parsing and validation.

A plan fixes what the dense-rewards paper's preregistrations fix (§2.3 and §C.1
"Preregistration"): hypotheses with predictions and the reading of each possible
outcome, a shared recipe with named configurations as overrides, the comparator, seeds, budgets
(token budget B, evaluation interval such as ``B/16``, optional time budget, run lengths such as
``2B``), metric, evaluation sets and verifier, contrasts with their reading point, tier and kind,
Holm families, admission rules and stages. See ``docs/plan-format.md``.

Every problem is reported as one line ``FILE:LINE: key.path: message`` (exit code 2). Input is
bounded before it is trusted: file size, nesting depth, finite numbers, 64-bit integers, the
number of seeds, and names that become folder names (``runs/<configuration>/seed-<n>``).

Modules: :mod:`.fields` (values: tokens, multiples of B, seeds, names, reading points, limits),
:mod:`.schema` (the tables as models, cross-checks), :mod:`.integrity` (the ``[integrity]`` table: the lock
chain's outside anchors), :mod:`.sources` (the ``[[sources]]`` table: configurations of other studies),
:mod:`.load` (reading and validating a file).
"""

from __future__ import annotations

from .crosscheck import cross_check
from .fields import (
    COLLAPSE_K,
    DERIVED_METRICS,
    INT_MAX,
    INT_MIN,
    MAX_DEPTH,
    MAX_MULTIPLE,
    MAX_NAME,
    MAX_PLAN_BYTES,
    MAX_SEEDS,
    METRICS_HELP,
    NAME_RULE,
    PLAN_FILE,
    SPAN_POINTS,
    TARGET_POINTS,
    Multiple,
    Name,
    PointKind,
    ReadingPoint,
    Seeds,
    Tokens,
    check_name,
    format_tokens,
    parse_multiple,
    parse_reading_point,
    parse_tokens,
)
from .gradient import Condition, GradientTest, Reference
from .integrity import ANCHORS, Integrity, declared_integrity
from .load import (
    MAX_MESSAGE,
    PlanFile,
    document_problems,
    load_plan,
    parse_toml,
    read_toml,
    resolve_plan_path,
    validate_plan,
)
from .schema import (
    Admission,
    Budget,
    Check,
    Configuration,
    Contrast,
    EvalSet,
    Evaluation,
    Family,
    Hypothesis,
    Margin,
    Plan,
    StageSpec,
    Statistics,
    Study,
    merge_tables,
)
from .sources import SOURCE_SEP, Source, source_problems, sourced_names, split_source_name

__all__ = [
    "ANCHORS", "declared_integrity", "Integrity", "Admission", "Budget", "Condition", "GradientTest", "Reference", "Check", "check_name", "COLLAPSE_K", "Configuration", "Contrast", "cross_check",
    "DERIVED_METRICS", "document_problems", "format_tokens", "EvalSet", "Evaluation", "Family", "Hypothesis", "INT_MAX",
    "INT_MIN", "load_plan", "Margin", "MAX_DEPTH", "MAX_MESSAGE", "MAX_MULTIPLE", "MAX_NAME",
    "MAX_PLAN_BYTES", "MAX_SEEDS", "merge_tables", "METRICS_HELP", "Multiple", "Name", "NAME_RULE", "parse_multiple",
    "parse_reading_point", "parse_tokens", "parse_toml", "Plan", "PLAN_FILE", "PlanFile", "PointKind",
    "read_toml", "ReadingPoint", "resolve_plan_path", "Seeds", "SPAN_POINTS", "StageSpec", "Statistics", "Study",
    "TARGET_POINTS", "Tokens", "validate_plan", "SOURCE_SEP", "Source", "source_problems", "sourced_names",
    "split_source_name",
]
