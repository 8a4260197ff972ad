"""Weights & Biases run → a steps frame and an ImportedRun, from either form of a run's full history:

- **the run's own file**, ``run-<id>.wandb``: what ``wandb.init`` writes locally, online or
  offline (``wandb/offline-run-<time>-<id>/``, ``wandb/run-<time>-<id>/``), and what
  ``wandb sync`` uploads. Every history row as logged, the run's start time and config
  (wandb_log.py reads the file). Given as the file, its folder, or the ``wandb/`` folder (or the
  folder holding it) when that holds one run; several folders of one run id are the segments of a
  resumed run, read in the order they started;
- **Parquet**: the ``wandb-history`` artifact (``run-<id>-history``, one or more ``*.parquet``
  files), or ``pd.DataFrame(run.scan_history()).to_parquet(...)``; columns ``_step``,
  ``_runtime``, ``_timestamp`` and one per logged key ('/' kept). The CSV the web UI exports is
  refused: it holds the chart's sampled points with rounded values, so steps are missing and token
  counts are not exact. ``run.history()`` also samples (500 rows by default): a sampled history is
  refused as missing steps.

W&B writes one history row per commit; a step axis of the trainer's (``--step-key``, e.g.
transformers' ``train/global_step``) may span several rows: they are merged per step, and a key
logged in two rows of one step with different values is refused (tracker_records.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from .importing import ImportedRun
from .tracker_records import StepRecords, shown
from .tracker_run import file_record, imported, steps_frame, utc
from .trackers import TrackerError
from .wandb_log import records

_META = ("_step", "_runtime", "_timestamp")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _step_of(value, step_key: str, where: str) -> int:
    if not _number(value) or not math.isfinite(value) or value != int(value):
        text = shown(value) if _number(value) else json.dumps(value)[:40]
        raise TrackerError(f"{where}: the step key {step_key} is {text}: not a step number")
    return int(value)


# ---------------------------------------------------------------------------------------------
# the run file


def _run_files(path: Path) -> list[Path]:
    """The ``.wandb`` files of the run at ``path`` (none when it holds no run file)."""
    if path.is_file():
        return [path] if path.suffix == ".wandb" else []
    here = sorted(path.glob("run-*.wandb"))
    if here:
        return here
    below = sorted(p for pattern in ("*/run-*.wandb", "wandb/*/run-*.wandb") for p in path.glob(pattern)
                   if not p.parent.is_symlink())  # wandb/latest-run links one of them
    ids = sorted({p.stem.removeprefix("run-") for p in below})
    if len(ids) > 1:
        raise TrackerError(f"{path}: holds {len(ids)} W&B runs ({', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''}): "
                           "give one run's folder")
    return below


def _item(item, file: Path):
    """A history item's key and value (a number, or None for other data: media, tables, text)."""
    key = item.key or ".".join(item.nested_key)
    kind = item.WhichOneof("value")
    if kind == "integer":
        return key, item.integer
    if kind == "number":
        return key, item.number
    if kind not in (None, "json"):
        return key, None
    try:
        value = json.loads(item.json if kind == "json" else item.value_json)
    except ValueError:
        raise TrackerError(f"{file}: the history value of {key} is not JSON: {item.value_json[:40]!r}") from None
    return key, value if _number(value) else None


def _read_run_file(file: Path) -> dict:
    run, rows, producer = None, [], ""
    for rec in records(file):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            rows.append(rec.history)
        elif kind == "run" and run is None:
            run = rec.run
        elif kind == "header":
            producer = rec.header.version_info.producer
    if run is None:
        raise TrackerError(f"{file}: no run record (the run's start is not in the file)")
    config = {}
    for c in run.config.update:
        if (name := c.key or ".".join(c.nested_key)) != "_wandb":
            try:
                config[name] = json.loads(c.value_json)
            except ValueError:
                config[name] = c.value_json
    return {"file": file, "rows": rows, "started": run.start_time.seconds + run.start_time.nanos / 1e9,
            "run_id": run.run_id, "config": config, "producer": producer}


def _from_run_files(files: list[Path], step_key: str, resumed: bool) -> tuple[StepRecords, list[dict]]:
    runs = sorted((_read_run_file(f) for f in files), key=lambda r: r["started"])
    rec = StepRecords(resumed=resumed)
    for run in runs:
        file = run["file"]
        rec.segment(str(file), run["started"])
        for h in run["rows"]:
            row = dict(_item(i, file) for i in h.item)
            row.setdefault("_step", h.step.num)
            where = f"{file} (_step {row['_step']})"
            if row.get(step_key) is None:
                continue  # a row off the step axis (e.g. one holding only a table)
            step = _step_of(row[step_key], step_key, where)
            origin = rec.label(str(file), f"_step {row['_step']}")
            wall = row.get("_timestamp")
            for key, value in row.items():
                if value is not None and key not in _META and key != step_key:
                    rec.add(key, step, float(value), origin, wall=wall)
    return rec, runs


# ---------------------------------------------------------------------------------------------
# Parquet


def _parquet_files(path: Path) -> list[Path]:
    if path.suffix.lower() in (".csv", ".tsv"):
        raise TrackerError(f"{path}: the W&B web UI's CSV export holds the chart's sampled points with rounded values "
                           "(steps missing, token counts inexact); give the run's file (wandb/offline-run-*/run-<id>.wandb) "
                           "or its full history as Parquet (the run's wandb-history artifact, or run.scan_history())")
    return [path] if path.is_file() else sorted(path.rglob("*.parquet"))


def _from_parquet(files: list[Path], step_key: str) -> tuple[StepRecords, dict[int, float], set[str], tuple[float, float]]:
    import pandas as pd  # a core dependency
    import pyarrow.parquet as pq  # a core dependency (the run log's Parquet)

    rec = StepRecords()
    runtime: dict[int, float] = {}
    float32: set[str] = set()
    starts, ends = [], []
    for f in files:
        try:
            t = pq.read_table(f)
        except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds for a non-Parquet file
            raise TrackerError(f"{f}: not a Parquet file ({type(e).__name__})") from None
        float32 |= {fld.name for fld in t.schema if str(fld.type) in ("float", "halffloat")}
        df = t.to_pandas()
        if step_key not in df.columns:
            cols = ", ".join(map(str, df.columns[:8]))
            raise TrackerError(f"{f}: no step column {step_key!r} (columns: {cols}{', ...' if len(df.columns) > 8 else ''})")
        if not {"_timestamp", "_runtime"} <= set(df.columns):
            raise TrackerError(f"{f}: no _timestamp and _runtime columns: the run's start time is not in the history "
                               "(run.scan_history() keeps them)")
        df = df[df[step_key].notna()].reset_index(drop=True)
        names = df["_step"].tolist() if "_step" in df.columns else range(len(df))
        what = "_step" if "_step" in df.columns else "row"
        steps = [_step_of(v, step_key, f"{f} ({what} {n})") for v, n in zip(df[step_key].tolist(), names)]
        origins = [rec.label(str(f), f"{what} {n}") for n in names]
        t0 = pd.to_numeric(df["_timestamp"], errors="coerce") - pd.to_numeric(df["_runtime"], errors="coerce")
        starts.append(float(t0.min()))
        ends.append(float(pd.to_numeric(df["_timestamp"], errors="coerce").max()))
        for s, r in zip(steps, pd.to_numeric(df["_runtime"], errors="coerce").tolist()):
            if not math.isnan(r):
                runtime[s] = max(runtime.get(s, r), r)
        for c in df.columns:
            if c in _META or c == step_key:
                continue
            col = pd.to_numeric(df[c], errors="coerce") if df[c].dtype != bool else None
            if col is None or col.isna().all():
                continue  # not numbers: media, tables, text
            for i in col.index[col.notna()]:
                rec.add(str(c), steps[i], float(col[i]), origins[i])
    return rec, runtime, float32, (min(starts), max(ends))


# ---------------------------------------------------------------------------------------------


def read_wandb(path: str | Path, *, step_key: str = "_step", resumed: bool = False):
    """The steps frame of one W&B run: its run file(s) or its Parquet history (a file or a folder).
    ``step_key`` is the step axis (``_step``, or e.g. ``train/global_step`` for transformers' logs);
    ``resumed``: a later segment of the run replaces the earlier ones' records from its first step on."""
    path = Path(path)
    if not path.exists():
        raise TrackerError(f"{path}: no such file or folder")
    run_files = _run_files(path)
    parquet = [] if run_files or path.suffix == ".wandb" else _parquet_files(path)
    if run_files and path.is_dir() and any(path.rglob("*.parquet")):
        raise TrackerError(f"{path}: holds both a W&B run file and Parquet files: give one of them")
    root = path if path.is_dir() else path.parent
    if run_files:
        rec, runs = _from_run_files(run_files, step_key, resumed)
        wall, float32, (started, ended) = rec.wall(), set(), (runs[0]["started"], rec.ended)
        extra = {"form": "run file", "run_id": runs[0]["run_id"], "config": runs[0]["config"],
                 "written_by": sorted({r["producer"] for r in runs if r["producer"]})}
        files = [r["file"] for r in runs]
    elif parquet:
        rec, wall, float32, (started, ended) = _from_parquet(parquet, step_key)
        extra, files = {"form": "parquet", "config": {}}, parquet
    else:
        raise TrackerError(f"{path}: no W&B run here: no run file (run-<id>.wandb) and no Parquet history (*.parquet)")
    if not any(rec.values.values()):
        raise TrackerError(f"{path}: the run's history holds no numbers on the step axis {step_key}")
    df = steps_frame(rec.values, wall)
    df.attrs.update(files=[file_record(f, root) for f in files], float32_keys=sorted(float32), started=started,
                    ended=ended, nonfinite=rec.nonfinite, purged=rec.purged, **extra)
    return df


def import_wandb(path: str | Path, *, preset: str | Mapping[str, str], trainer: str, step_key: str = "_step",
                 prefix: str = "", evals: str | Path | None = None, completions_per_step: int | None = None,
                 updates_per_step: int | None = None, wallclock: bool = False, resumed: bool = False) -> ImportedRun:
    """A run from a W&B run file or Parquet history, through ``preset``; a run file's config becomes the run's config."""
    steps = read_wandb(path, step_key=step_key, resumed=resumed)
    a = steps.attrs
    source = {"files": a["files"], "form": a["form"], "tool_versions": {}, "step_key": step_key}
    if a["form"] == "run file":
        import wandb  # present: its protobufs read the file

        source.update(tool_versions={"wandb (wrote the file)": ", ".join(a["written_by"]) or "unknown",
                                     "wandb (read it)": wandb.__version__}, wandb_run_id=a["run_id"])
    if a["purged"]:
        source["restarts"] = a["purged"]
    return imported("wandb", steps, origin=str(path), preset=preset, trainer=trainer, source=source, evals=evals,
                    prefix=prefix, config=a["config"], completions_per_step=completions_per_step,
                    updates_per_step=updates_per_step, wallclock=wallclock, started_at=utc(a["started"]),
                    ended_at=utc(a["ended"]))
