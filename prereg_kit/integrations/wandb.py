"""Weights & Biases run history → a steps frame and an ImportedRun.

Read the run's full history as Parquet: the ``wandb-history`` artifact (``run-<id>-history``,
one or more ``*.parquet`` files), or ``pd.DataFrame(run.scan_history()).to_parquet(...)``; columns
``_step``, ``_runtime``, ``_timestamp`` and one per logged key ('/' kept). The CSV the web UI
exports is refused: it holds the chart's sampled points with rounded values, so steps are missing
and token counts are not exact. ``run.history()`` also samples (500 rows by default): a sampled
history is refused as missing steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from .tracker_run import file_record, imported, utc
from .importing import ImportedRun
from .trackers import WALL, TrackerError

_META = ("_step", "_runtime", "_timestamp")


def _parquet_files(path: Path) -> list[Path]:
    if path.suffix.lower() in (".csv", ".tsv"):
        raise TrackerError(f"{path}: the W&B web UI's CSV export holds the chart's sampled points with rounded values "
                           "(steps missing, token counts inexact); export the full history as Parquet "
                           "(the run's wandb-history artifact, or run.scan_history())")
    files = [path] if path.is_file() else sorted(path.rglob("*.parquet"))
    if not files:
        raise TrackerError(f"{path}: no Parquet history files (*.parquet)")
    return files


def read_wandb(path: str | Path, *, step_key: str = "_step"):
    """The steps frame of one W&B run's Parquet history (a file or a folder of them);
    ``step_key`` is the step axis (``_step``, or e.g. ``train/global_step`` for transformers' logs)."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - pyarrow is a core dependency (the run log's Parquet)

    path = Path(path)
    if not path.exists():
        raise TrackerError(f"{path}: no such file or folder")
    files = _parquet_files(path)
    tables = []
    float32: set[str] = set()
    for f in files:
        try:
            t = pq.read_table(f)
        except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds for a non-Parquet file
            raise TrackerError(f"{f}: not a Parquet file ({type(e).__name__})") from None
        float32 |= {fld.name for fld in t.schema if str(fld.type) in ("float", "halffloat")}
        tables.append(t.to_pandas())
    df = pd.concat(tables, ignore_index=True)
    if step_key not in df.columns:
        raise TrackerError(f"{path}: no step column {step_key!r} (columns: {', '.join(map(str, df.columns[:8]))}, ...)")
    df = df[df[step_key].notna()]
    if step_key != "_step" and "_step" in df.columns:
        df = df.drop(columns="_step")
    df = df.rename(columns={step_key: "step"})
    df["step"] = df["step"].astype("int64")
    # W&B writes one row per commit; a trainer's step axis may span several: merge them per step.
    df = df.groupby("step", sort=True).last().reset_index()
    start = float(df["_timestamp"].min() - df["_runtime"].min()) if {"_timestamp", "_runtime"} <= set(df.columns) else None
    if "_runtime" in df.columns:
        df[WALL] = df["_runtime"].astype(float)
    end = float(df["_timestamp"].max()) if "_timestamp" in df.columns else None
    df = df.drop(columns=[c for c in _META if c in df.columns])
    root = path if path.is_dir() else path.parent
    df.attrs.update(files=[file_record(f, root) for f in files], float32_keys=sorted(float32), started=start, ended=end)
    return df


def import_wandb(path: str | Path, *, preset: str | Mapping[str, str], trainer: str, step_key: str = "_step",
                 prefix: str = "", evals: str | Path | None = None, completions_per_step: int | None = None,
                 updates_per_step: int | None = None, wallclock: bool = False) -> ImportedRun:
    """A run from a W&B Parquet history, through ``preset``."""
    steps = read_wandb(path, step_key=step_key)
    a = steps.attrs
    source = {"files": a["files"], "tool_versions": {}, "step_key": step_key}
    return imported("wandb", steps, preset=preset, trainer=trainer, source=source, evals=evals, prefix=prefix,
                    completions_per_step=completions_per_step, updates_per_step=updates_per_step,
                    wallclock=wallclock, started_at=utc(a["started"]), ended_at=utc(a["ended"]))
