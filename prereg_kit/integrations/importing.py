"""Placeholder of the import core's run record (the lead keeps I1's module at merge)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import pandas as pd


@dataclass
class ImportedRun:
    trainer: str
    importer: str
    iterations: pd.DataFrame
    evaluations: pd.DataFrame
    config: dict = field(default_factory=dict)
    source: dict = field(default_factory=dict)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    device: str = "unknown"
