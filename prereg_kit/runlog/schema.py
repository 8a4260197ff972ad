"""The run-log contract: file names, column schemas, metadata and the problems a reader reports.

Everything the writer and the reader of a run folder agree on (see ``docs/run-log.md``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..stages import Stage

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd
    import pyarrow as pa

FORMAT = "prereg-runlog/1"
META_FILE = "meta.json"
ITERATIONS = "iterations"
EVALS = "evals"
KINDS = (ITERATIONS, EVALS)
STATUSES = ("running", "complete", "failed", "stopped")
Status = Literal["running", "complete", "failed", "stopped"]
_PARQUET_KEY = b"prereg_runlog"
ELECTION_FILE = "election.json"  # the anchor election `prereg elect` writes in the study folder


def uses_elected_anchor(settings: object) -> bool:
    """Whether trainer settings (a run's recorded ``config``, or a plan configuration's recipe)
    take the anchor from the election: ``rewards.anchor = "elected"``, or ``anchor = "elected"``
    in the older flat form (runs of both kinds are in the registry)."""
    if not isinstance(settings, dict):
        return False
    rewards = settings.get("rewards")
    return (rewards.get("anchor") if isinstance(rewards, dict) else settings.get("anchor")) == "elected"
WRITER_LOCK = ".writer.lock"
WRITER_NOTE = ".writer.json"
# the live trackers' run ids (`prereg run --tracker`), so a resumed run continues its tracker runs:
# a working file of the trainer, never evidence (not sealed)
TRACKER_RECORD = "tracker.json"
# Names that become folders: no separators, no leading dot, so a run folder stays inside its study.
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,79}$")


class RunLogError(ValueError):
    """A run log that cannot be used: missing, malformed or torn files."""


class RunLogWarning(UserWarning):
    """A run-log problem that was reported and worked around (e.g. a torn last line dropped)."""


class RunBusyError(RunLogError):
    """Another writer holds the run folder."""


class RunMeta(BaseModel):
    """Metadata of one run (``meta.json``)."""

    model_config = ConfigDict(extra="allow")

    format: str = FORMAT
    study: str
    configuration: str
    seed: int
    stage: Stage = "main"
    plan_hash: str = Field(description="canonical content hash of the plan the run was launched under")
    config: dict[str, Any] = Field(default_factory=dict)
    started_at: datetime
    ended_at: datetime | None = None
    device: str = "cpu"
    status: Status = "running"
    tool_version: str = ""
    election_sha256: str = Field("", description="sha256 of <study>/election.json as the run read it "
                                 "(anchor = 'elected' runs; '' otherwise); the audit compares it with the file")
    # what trained the run; a study mixing trainers is refused unless its plan says so
    trainer: str = Field("builtin", min_length=1, max_length=100,
                         description="what trained the run: 'builtin', 'trl', 'verl', 'openrlhf' or a user-given name")
    source: dict[str, Any] = Field(default_factory=dict,
                                   description="for an imported run: the importer, the files read with their sha256, "
                                   "tool versions, the key mapping used")

    @field_validator("started_at", "ended_at")
    @classmethod
    def _utc(cls, v: datetime | None) -> datetime | None:
        if v is not None and v.tzinfo is None:
            raise ValueError("times must carry a UTC offset (e.g. 2026-01-31T12:00:00Z)")
        return v.astimezone(timezone.utc) if v is not None else None


def election_sha256(study_dir: str | Path) -> str:
    """``sha256:<hex>`` of the bytes of ``<study_dir>/election.json``, or ``""`` when there is none.

    A run with ``anchor = "elected"`` records it in :attr:`RunMeta.election_sha256` when it starts
    (multi-reward paper §5.1: the anchor is fixed before joint training); ``prereg verify`` flags a
    main run whose recorded hash differs from the file's (``prereg_kit.study.audit``).
    """
    import hashlib

    try:
        data = (Path(study_dir) / ELECTION_FILE).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return ""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def utc_now() -> datetime:
    """The current time in UTC (what ``started_at`` / ``ended_at`` hold)."""
    return datetime.now(timezone.utc)


# --------------------------------------------------------------------------------------------
# Column schemas
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One column of a run-log table: its JSON type, whether it is required, and its range.

    ``max_col`` names another column this one may not exceed (e.g. ``correct <= samples``).
    Optional columns may be absent or null; the reader fills them with null.
    """

    name: str
    kind: Literal["int", "float", "str", "bool"]
    doc: str
    required: bool = True
    min: float | None = None
    max: float | None = None
    max_col: str | None = None

    def describe(self) -> str:
        parts = {"int": "an integer", "float": "a finite number", "str": "a string", "bool": "true/false"}
        d = parts[self.kind]
        if self.min is not None:
            d += f" >= {self.min:g}"
        if self.max is not None:
            d += f" <= {self.max:g}"
        if self.max_col is not None:
            d += f" <= {self.max_col}"
        return d


ITERATION_COLUMNS: tuple[Column, ...] = (
    Column("iteration", "int", "0-based iteration index, strictly increasing", min=0),
    Column("tokens_rollout", "int", "tokens generated in rollouts this iteration (kept groups)", min=0),
    Column("tokens_continuation", "int", "tokens generated in continuations (e.g. Monte-Carlo credit) this iteration", min=0),
    Column("tokens_discarded", "int", "tokens generated in groups discarded this iteration (e.g. dynamic sampling)", min=0),
    Column("seconds_selection", "float", "seconds of prompt selection, incl. the prompt critic's prefill", required=False, min=0),
    Column("seconds_generation", "float", "seconds of rollout generation", required=False, min=0),
    Column("seconds_credit", "float", "seconds of credit assignment, incl. continuations and critic features/fits", required=False, min=0),
    Column("seconds_update", "float", "seconds of the optimizer update(s)", required=False, min=0),
    Column("seconds_weight_sync", "float", "seconds copying updated weights into the generation engine", required=False, min=0),
    Column("seconds_step", "float", "unsplit training seconds of the iteration, for a trainer that does not split "
           "its stages (then the five stage columns are null)", required=False, min=0),
    Column("updates", "int", "cumulative optimizer updates after this iteration", min=0),
    Column("reward_mean", "float", "mean training reward of the kept rollouts", required=False),
    Column("mixed_share", "float", "share of groups with both correct and incorrect completions", required=False, min=0, max=1),
    Column("all_wrong_share", "float", "share of groups whose completions are all incorrect (reward 0)", required=False, min=0, max=1),
    Column("all_correct_share", "float", "share of groups whose completions are all correct (reward 1)", required=False, min=0, max=1),
    Column("length_mean", "float", "mean completion length in tokens", required=False, min=0),
    Column("truncation_rate", "float", "share of completions cut at the generation limit", required=False, min=0, max=1),
)

EVAL_COLUMNS: tuple[Column, ...] = (
    Column("eval_index", "int", "0-based evaluation index (0 = before training); non-decreasing in the file", min=0),
    Column("iteration", "int", "iterations completed before this evaluation (0 for the initial one)", min=0),
    Column("eval_set", "str", "evaluation set name, e.g. 'math200'"),
    Column("problem_id", "str", "problem identifier, stable across runs"),
    Column("eval_seed", "int", "sampling seed of this evaluation (common random numbers: same across configurations of a seed); null: not known", required=False),
    Column("tokens", "int", "cumulative generated tokens (all kinds) at this evaluation", min=0),
    Column("train_seconds", "float", "cumulative training seconds (sum of the five stages, or of seconds_step) at this evaluation", min=0),
    Column("updates", "int", "cumulative optimizer updates at this evaluation", min=0),
    Column("samples", "int", "completions sampled for this problem", min=1),
    Column("correct", "int", "completions correct under the default verifier", min=0, max_col="samples"),
    Column("correct_strict", "int", "completions correct under the strict (boxed-only) verifier; null: not logged", required=False, min=0, max_col="samples"),
    Column("boxed", "int", "completions with a boxed answer; null: not logged", required=False, min=0, max_col="samples"),
    Column("greedy_correct", "bool", "greedy completion correct under the default verifier (null if not logged)", required=False),
    Column("level", "int", "the problem's MATH level (null when the set has none)", required=False, min=1),
    Column("log_length", "float", "mean over the samples of ln(completion tokens), a completion of 0 tokens counted as 1", required=False, min=0),
)

SCHEMAS: dict[str, tuple[Column, ...]] = {ITERATIONS: ITERATION_COLUMNS, EVALS: EVAL_COLUMNS}
STAGE_SECONDS = ("seconds_selection", "seconds_generation", "seconds_credit", "seconds_update", "seconds_weight_sync")
STEP_SECONDS = "seconds_step"  # the unsplit alternative to the five stages
TOKEN_KINDS = ("tokens_rollout", "tokens_continuation", "tokens_discarded")
# The iteration columns a blind stage shows while it trains (`prereg status`, live trackers): where a
# run stands and what it spent, nothing of how well it learns (no reward, no pass rate, no length).
PROGRESS_COLUMNS = ("iteration",) + TOKEN_KINDS + STAGE_SECONDS + (STEP_SECONDS, "updates")


def _arrow_schema(columns: Sequence[Column]) -> pa.Schema:
    import pyarrow as pa  # only when a table is read or written: lock and verify start fast

    types = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_()}
    return pa.schema([(c.name, types[c.kind]) for c in columns])


def _show(v: Any) -> str:
    """A value as the JSON file would show it (numpy scalars unwrapped)."""
    import numpy as np  # lock and verify start without numpy
    if isinstance(v, np.generic):
        v = v.item()
    return repr(v)


def _first_bad(mask: np.ndarray) -> int | None:
    import numpy as np  # lock and verify start without numpy
    idx = np.flatnonzero(mask)
    return int(idx[0]) if idx.size else None


def validate_frame(df: pd.DataFrame, columns: Sequence[Column], *, where: str, first_line: int = 1) -> pd.DataFrame:
    """Check and coerce ``df`` to a column spec; return a new frame (spec columns first, extras after).

    Raises :class:`RunLogError` with one line naming ``where`` (the file), the line of the first
    offending row (row ``i`` is line ``first_line + i``), the field and what was expected.
    Extra columns are kept as they are.
    """
    import numpy as np  # lock and verify start without numpy
    import pandas as pd  # only when a table is read: lock and verify start fast

    out: dict[str, Any] = {}
    errors: list[tuple[int, str]] = []
    n = len(df)
    for col in columns:
        if col.name not in df.columns:
            if col.required and n:
                errors.append((0, f"field '{col.name}': missing (expected {col.describe()})"))
                continue
            out[col.name] = _null_column(col.kind, n, df.index)
            continue
        s = df[col.name]
        conv, bad, null = _check_plain(col, s) or _check_any(col, s)
        i = _first_bad(bad)
        if i is not None:
            what = "missing or null" if (col.required and null[i]) else f"got {_show(s.iloc[i])}"
            errors.append((i, f"field '{col.name}': expected {col.describe()}, {what}"))
        out[col.name] = conv
    # Cross-column bounds, once each column has its type.
    for col in columns:
        if col.max_col and col.name in out and col.max_col in out and not errors:
            a, b = _floats(out[col.name]), _floats(out[col.max_col])
            i = _first_bad(a > b)
            if i is not None:
                errors.append((i, f"field '{col.name}': {int(a[i])} exceeds {col.max_col}={int(b[i])}"))
    if not errors and any(c.name == STEP_SECONDS for c in columns):
        errors += _stage_seconds_rule(out, n)
    if errors:
        i, msg = min(errors, key=lambda e: e[0])
        raise RunLogError(f"{where}: line {first_line + i}: {msg}")
    names = {c.name for c in columns}
    for extra in df.columns:
        if extra not in names:
            out[extra] = df[extra]
            if pd.api.types.is_float_dtype(out[extra].dtype):
                i = _first_bad(np.isinf(out[extra].to_numpy(dtype="float64", na_value=np.nan)))
                if i is not None:
                    raise RunLogError(f"{where}: line {first_line + i}: field '{extra}': expected a finite number, got {_show(df[extra].iloc[i])}")
    # copy=False: the checked columns are the input's own where no coercion was needed (pandas
    # copies on write); a copy here would double a study's rows while both are alive.
    res = pd.DataFrame(out, index=df.index, copy=False)
    idx = df.index
    if isinstance(idx, pd.RangeIndex) and idx.start == 0 and idx.step == 1:
        return res  # already numbered 0..n-1
    return res.reset_index(drop=True)


def _isnull(s: pd.Series) -> np.ndarray:
    """Which rows of a checked column are null."""
    import numpy as np  # lock and verify start without numpy
    import pandas as pd

    if isinstance(s.dtype, np.dtype) and s.dtype == np.float64:
        return np.isnan(s.to_numpy())
    return pd.isna(s).to_numpy()


def _floats(s: pd.Series) -> np.ndarray:
    """A checked numeric column as float64, null as NaN."""
    import numpy as np  # lock and verify start without numpy
    import pandas as pd

    if isinstance(s.dtype, np.dtype) and s.dtype in (np.int64, np.float64):
        return s.to_numpy().astype(np.float64, copy=False)
    return pd.to_numeric(s).to_numpy(dtype="float64", na_value=np.nan)


def _null_column(kind: str, n: int, index: pd.Index) -> pd.Series:
    """An absent optional column: all null, of the type the column's values would have."""
    import numpy as np  # lock and verify start without numpy
    import pandas as pd

    if kind == "float":
        return pd.Series(np.full(n, np.nan), index=index)
    if kind == "bool":
        return pd.Series(pd.arrays.BooleanArray(np.zeros(n, bool), np.ones(n, bool)), index=index)
    if kind == "int" and n:
        return pd.Series(pd.arrays.IntegerArray(np.zeros(n, np.int64), np.ones(n, bool)), index=index)
    return pd.Series(pd.array([None] * n, dtype="int64" if kind == "int" else "str"), index=index)


def _check_plain(col: Column, s: pd.Series) -> tuple[pd.Series, np.ndarray, np.ndarray] | None:
    """``(checked column, bad rows, null rows)`` of a column held in its usual type (int64 or
    float64 numbers, ``str`` or categorical text, bool, or Python bools and None), from its numpy
    array; ``None`` for any other type, which :func:`_check_any` checks value by value."""
    import numpy as np  # lock and verify start without numpy
    import pandas as pd

    dt = s.dtype
    if col.kind in ("int", "float"):
        if not (isinstance(dt, np.dtype) and dt in (np.int64, np.float64)):
            return None
        v = s.to_numpy()
        if dt == np.int64:
            null = np.zeros(len(v), bool)
            if col.kind == "int":
                return s, _out_of_range(v, col), null
            v = v.astype(np.float64)  # a float column given as integers: checked and kept as floats
            return pd.Series(v, index=s.index), _out_of_range(v, col), null
        null = np.isnan(v)
        bad = (null | np.isinf(v)) if col.required else np.isinf(v)
        if col.kind == "int":
            bad |= ~null & (np.mod(np.nan_to_num(v), 1) != 0)
        with np.errstate(invalid="ignore"):
            bad |= _out_of_range(v, col)
        if col.kind == "int" and not bad.any():
            return s.astype("Int64" if null.any() else "int64"), bad, null
        return s, bad, null
    if col.kind == "str":
        if isinstance(dt, pd.CategoricalDtype) and dt.categories.dtype == "str":
            null = s.array.codes < 0  # text held as categories (runlog.text): each row is one of its strings
        elif dt == _str_dtype():
            null = np.asarray(s.array.isna(), dtype=bool)
        else:
            return None
        conv = s
    elif isinstance(dt, np.dtype) and dt == np.bool_:
        null = np.zeros(len(s), bool)
        conv = s.astype("boolean")
    elif isinstance(dt, pd.BooleanDtype):
        null = np.asarray(s.array.isna(), dtype=bool)
        conv = s
    elif isinstance(dt, np.dtype) and dt.kind == "O" and col.kind == "bool":  # how Arrow hands over a bool column with nulls
        v = s.to_numpy()
        if not set(map(type, v)) <= {bool, type(None)}:
            return None
        null = pd.isna(v)
        conv = pd.Series(pd.arrays.BooleanArray(np.where(null, False, v).astype(bool), null), index=s.index)
    else:
        return None
    return conv, (null.copy() if col.required else np.zeros(len(s), bool)), null


def _out_of_range(v: np.ndarray, col: Column) -> np.ndarray:
    import numpy as np  # lock and verify start without numpy

    bad = np.zeros(len(v), bool)
    if col.min is not None:
        bad |= v < col.min
    if col.max is not None:
        bad |= v > col.max
    return bad


def _str_dtype() -> Any:
    import pandas as pd

    return pd.api.types.pandas_dtype("str")


def _check_any(col: Column, s: pd.Series) -> tuple[pd.Series, np.ndarray, np.ndarray]:
    """``(checked column, bad rows, null rows)`` of a column of any type (object, mixed, nullable
    or narrower numbers, other text types), value by value."""
    import numpy as np  # lock and verify start without numpy
    import pandas as pd

    n = len(s)
    null = s.isna().to_numpy()
    bad = null.copy() if col.required else np.zeros(n, dtype=bool)
    if col.kind in ("int", "float"):
        if s.dtype == object or pd.api.types.is_bool_dtype(s.dtype) or pd.api.types.is_string_dtype(s.dtype):
            # Mixed or textual values: anything that is not a real number is an error.
            is_num = s.map(lambda v: isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))).to_numpy(dtype=bool)
            bad |= ~is_num & ~null
            v = pd.to_numeric(s.where(is_num), errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
        else:
            v = s.to_numpy(dtype="float64", na_value=np.nan)
        bad |= np.isinf(v)  # a non-finite number is never a reading
        if col.kind == "int":
            bad |= ~null & ~np.isnan(v) & (np.mod(np.nan_to_num(v), 1) != 0)
        with np.errstate(invalid="ignore"):
            bad |= _out_of_range(v, col)
        conv = s if s.dtype == np.float64 else pd.Series(v, index=s.index)
        if col.kind == "int" and not bad.any():
            conv = conv.astype("Int64" if np.isnan(v).any() else "int64")
    elif col.kind == "str":
        if pd.api.types.is_string_dtype(s.dtype) and s.dtype != object:
            conv = s.astype("str")
        else:
            ok = s.map(lambda v: isinstance(v, (str, int, np.integer)) and not isinstance(v, (bool, np.bool_))).to_numpy(dtype=bool)
            bad |= ~ok & ~null
            conv = s.map(lambda v: v if isinstance(v, str) or v is None or (isinstance(v, float) and np.isnan(v)) else str(v)).astype("str")
    else:  # bool
        if pd.api.types.is_bool_dtype(s.dtype):
            conv = s.astype("boolean")
        else:
            ok = s.map(lambda v: v is None or isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, float, np.integer, np.floating)) and (v in (0, 1) or np.isnan(v)))).to_numpy(dtype=bool)
            bad |= ~ok & ~null
            conv = s
            if not bad.any():
                conv = pd.Series([None if v is None or (isinstance(v, float) and np.isnan(v)) else bool(v) for v in s],
                                 index=s.index, dtype="boolean")
    return conv, bad, null


def _stage_seconds_rule(out: dict[str, Any], n: int) -> list[tuple[int, str]]:
    """Training time comes either split into the five stages or as one unsplit ``seconds_step``
    (a trainer that does not time its stages; Appendix D's stage shares are then unavailable).
    Never neither, never some stages only; a step time beside all five stages is informative only."""
    import numpy as np  # lock and verify start without numpy

    null = np.column_stack([_isnull(out[c]) if c in out else np.ones(n, bool) for c in STAGE_SECONDS]) \
        if n else np.zeros((0, len(STAGE_SECONDS)), bool)
    step_null = _isnull(out[STEP_SECONDS]) if STEP_SECONDS in out else np.ones(n, bool)
    split = ~null.any(axis=1)
    unsplit = null.all(axis=1) & ~step_null
    i = _first_bad(~(split | unsplit))
    if i is None:
        return []
    given = [c for c, miss in zip(STAGE_SECONDS, null[i]) if not miss]
    rule = "stage seconds: give the five seconds_* columns or seconds_step, not neither/a mix"
    if not given:
        return [(i, f"{rule} (got none)")]
    if step_null[i]:  # most likely a stage left out: name it
        first = next(c for c, miss in zip(STAGE_SECONDS, null[i]) if miss)
        return [(i, f"field '{first}': missing or null ({rule})")]
    return [(i, f"{rule} (got {len(given)} of the five ({', '.join(given)}) and seconds_step)")]


# --------------------------------------------------------------------------------------------
# Problems and raw reading of one table
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogProblem:
    """Something wrong with a run log that was reported rather than silently used.

    ``kind``: ``torn`` (torn tail, rows dropped), ``missing`` (file absent), ``corrupt`` (run
    unusable), ``stale`` (Parquet older than its JSON lines, ignored), ``status`` (run not
    complete), ``inconsistent`` (eval rows disagree with iteration rows).
    """

    path: str
    line: int | None
    kind: str
    message: str

    def __str__(self) -> str:
        loc = f"{self.path}: line {self.line}" if self.line is not None else self.path
        return f"{loc}: {self.message}"

