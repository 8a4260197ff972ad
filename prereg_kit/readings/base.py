"""What the readings share: run keys, verifiers, errors, exclusion rows and the admission result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import pandas as pd

RUN = ["configuration", "seed"]
VERIFIERS = ("default", "strict", "greedy")
DRIFT_THRESHOLD = 0.1
EXCLUSION_COLUMNS = ["configuration", "seed", "eval_index", "rule", "reason"]


class ReadingError(ValueError):
    """Readings that cannot be taken (missing set, unlogged verifier, non-monotone axis)."""


class PairingError(ReadingError):
    """Runs that cannot be compared: a seed, problem set or evaluation seed differs, or a run
    never reached its reading point."""


def exclusions_table(rows: Iterable[tuple]) -> pd.DataFrame:
    """Exclusion rows ``(configuration, seed, eval_index or NA, rule, reason)`` as one tidy table."""
    df = pd.DataFrame(list(rows), columns=EXCLUSION_COLUMNS)
    df["seed"] = df["seed"].astype("int64")
    df["eval_index"] = df["eval_index"].astype("Int64")
    return df


@dataclass
class AdmissionResult:
    """Curves kept by the admission rules and every exclusion with its rule and reason."""

    kept: pd.DataFrame
    exclusions: pd.DataFrame


