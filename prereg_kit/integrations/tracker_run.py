"""Shared by the tracker readers: the file hash record, the steps frame, and the steps frame → ImportedRun (preset, --evals, source)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from .importing import ImportedRun
from .tracker_evals import load_evaluations
from .trackers import WALL, TrackerError, iterations_from_metrics, refuse_nonfinite, resolve_preset


def missing_extra(tool: str, extra: str) -> TrackerError:
    return TrackerError(f"reading {tool} files needs the {extra} package: pip install 'prereg-kit[{extra}]'")


def file_record(path: Path, root: Path) -> dict:
    """A file read, relative to what the user gave, with its sha256."""
    rel = path.relative_to(root) if path != root and root in path.parents else Path(path.name)
    return {"path": rel.as_posix(), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


def steps_frame(records: dict[str, dict[int, float]], wall: dict[int, float] | None = None) -> pd.DataFrame:
    """``step`` plus one column per key from {key: {step: value}}; ``_wall`` when given."""
    df = pd.DataFrame(records).sort_index()
    df.index = df.index.astype("int64")
    df.index.name = "step"
    if wall:
        df[WALL] = pd.Series(wall, dtype=float)
    return df.reset_index()


def utc(seconds: float | None) -> datetime | None:
    return datetime.fromtimestamp(seconds, tz=timezone.utc) if seconds is not None else None


def _strip(key: str, prefix: str) -> str:
    return key.removeprefix(prefix)


def imported(importer: str, steps: pd.DataFrame, *, preset: str | Mapping[str, str], trainer: str,
             source: dict, origin: str, evals: str | Path | None = None, completions_per_step: int | None = None,
             updates_per_step: int | None = None, wallclock: bool = False, config: dict | None = None,
             started_at: datetime | None = None, ended_at: datetime | None = None, prefix: str = "") -> ImportedRun:
    """The ImportedRun of a steps frame read from ``origin`` (the path the user gave, which a refusal
    of the run's metrics names): iteration rows through the preset, evaluations from ``evals``
    (none without it: the analysis then refuses the run by name)."""
    keymap = resolve_preset(preset)
    if started_at is None:
        raise TrackerError(f"{origin}: the run's start time is not in its files")
    if prefix:
        # transformers' tracker callbacks log TRL's metrics as "train/<key>"
        attrs = steps.attrs
        steps = steps.rename(columns={c: _strip(c, prefix) for c in steps.columns})
        steps.attrs = {**attrs, "float32_keys": [_strip(k, prefix) for k in attrs.get("float32_keys", ())],
                       "nonfinite": {_strip(k, prefix): v for k, v in attrs.get("nonfinite", {}).items()}}
        source["prefix"] = prefix
    refuse_nonfinite(steps.attrs.get("nonfinite", {}), keymap)
    try:
        its = iterations_from_metrics(steps, keymap, completions_per_step=completions_per_step,
                                      updates_per_step=updates_per_step, wallclock=wallclock)
    except TrackerError as e:
        raise TrackerError(f"{origin}: {e}") from None
    how = its.attrs.pop("source")
    if evals is not None:
        ev, entry = load_evaluations(evals, how["first_step"])
        source["files"] = [*source.get("files", []), entry]
        if len(ev) and int(ev["iteration"].max()) > len(its):
            raise TrackerError(f"{evals}: an evaluation after iteration {int(ev['iteration'].max())}, "
                               f"but the log has {len(its)} iterations")
    else:
        ev = pd.DataFrame(columns=["iteration", "eval_set", "problem_id", "samples", "correct"])
        how["evaluations"] = "none: the tracker logs only aggregates; give per-problem results with --evaluations"
    name = preset if isinstance(preset, str) else "custom"
    source.update(preset=name, key_map=keymap, derived=how)
    return ImportedRun(trainer=trainer, importer=importer, iterations=its, evaluations=ev,
                       config=config or {}, source=source, started_at=started_at, ended_at=ended_at)
