"""MLflow runs → a steps frame and an ImportedRun, read from what MLflow writes on disk.

Two stores, both read with the standard library (no mlflow needed to read):

- the file store (``mlruns/<experiment_id>/<run_id>/``: ``metrics/<key>`` with lines
  ``timestamp value step``, ``params/<key>``, ``tags/<key>``, ``meta.yaml``). MLflow 3.x keeps it
  in maintenance mode: writing it needs ``MLFLOW_ALLOW_FILE_STORE=true``; MLflow 2.x wrote it by default;
- the SQLite backend (``mlflow.db``, MLflow 3.x's default): tables ``runs``, ``metrics``
  (``key, value, timestamp, run_uuid, step, is_nan``), ``params``, ``tags``.

MLflow stores float64, so token counters are exact. It refuses ``@`` in metric names, so loggers
(verl's among them) write ``_at_``: names are mapped back (``mean_at_4`` → ``mean@4``).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Mapping
from pathlib import Path

from .importing import ImportedRun
from .tracker_records import shown
from .tracker_run import file_record, imported, steps_frame, utc
from .trackers import TrackerError, from_mlflow_key


def _text(path: Path) -> str:
    """A file of the store as text; bytes that are not UTF-8 (a damaged or foreign file) refused by name."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise TrackerError(f"{path}: not UTF-8 text (byte {e.start}): not a file MLflow wrote, or a damaged one") from None


def _meta(run: Path) -> dict[str, str]:
    meta = {}
    for line in _text(run / "meta.yaml").splitlines():
        k, sep, v = line.partition(":")
        if sep and not line.startswith(" "):
            meta[k.strip()] = v.strip().strip("'\"")
    return meta


def _find_run(root: Path, run_id: str | None) -> Path:
    if (root / "meta.yaml").is_file() and (root / "metrics").is_dir():
        return root
    runs = sorted(p.parent for p in root.glob("*/*/meta.yaml") if (p.parent / "metrics").is_dir())
    runs += sorted(p.parent for p in root.glob("*/meta.yaml") if (p.parent / "metrics").is_dir())
    if run_id is not None:
        runs = [r for r in runs if r.name == run_id]
    if len(runs) != 1:
        names = ", ".join(r.name for r in runs[:5])
        raise TrackerError(f"{root}: " + (f"{len(runs)} runs ({names}): give the run id (--run-id)" if runs
                                          else f"no MLflow run{' ' + run_id if run_id else ''} (a run folder holds meta.yaml and metrics/)"))
    return runs[0]


def _add(records: dict, nonfinite: dict, key: str, step: int, value: float, where: str) -> None:
    prev = records.setdefault(key, {}).get(step)
    if prev is not None and prev != value and not (math.isnan(prev) and math.isnan(value)):
        raise TrackerError(f"{where}: {key} at step {step} is {shown(value)}, but it was logged as {shown(prev)} "
                           "before (a resumed run?): keep one record per step")
    records[key][step] = value
    if not math.isfinite(value):
        nonfinite.setdefault(key, {})[step] = (shown(value), where)


def _read_files(run: Path, root: Path) -> tuple[dict, dict, dict, list, dict, dict]:
    records: dict[str, dict[int, float]] = {}
    nonfinite: dict = {}
    wall: dict[int, float] = {}
    files = [file_record(run / "meta.yaml", root)]
    for f in sorted(p for p in (run / "metrics").rglob("*") if p.is_file()):
        key = from_mlflow_key(f.relative_to(run / "metrics").as_posix())
        files.append(file_record(f, root))
        for n, line in enumerate(_text(f).splitlines(), 1):
            parts = line.split()
            if len(parts) != 3:
                raise TrackerError(f"{f}:{n}: expected 'timestamp value step', got {line!r}")
            try:
                ts, value, step = int(parts[0]), float(parts[1]), int(parts[2])
            except ValueError:
                raise TrackerError(f"{f}:{n}: expected 'timestamp value step' (integer, number, integer), got {line!r}") from None
            _add(records, nonfinite, key, step, value, f"{f}:{n}")
            wall[step] = max(wall.get(step, 0.0), ts / 1000)
    params = {p.relative_to(run / "params").as_posix(): _text(p) for p in sorted((run / "params").rglob("*")) if p.is_file()} \
        if (run / "params").is_dir() else {}
    tags = {p.relative_to(run / "tags").as_posix(): _text(p) for p in sorted((run / "tags").rglob("*")) if p.is_file()} \
        if (run / "tags").is_dir() else {}
    return records, nonfinite, wall, files, params, tags


def _read_sqlite(db: Path, run_id: str | None) -> tuple[dict, dict, dict, list, dict, dict, dict]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        runs = con.execute("SELECT run_uuid, start_time, end_time FROM runs"
                           + (" WHERE run_uuid = ?" if run_id else ""), (run_id,) if run_id else ()).fetchall()
        if len(runs) != 1:
            ids = ", ".join(r[0] for r in runs[:5])
            raise TrackerError(f"{db}: " + (f"{len(runs)} runs ({ids}): give the run id (--run-id)" if runs else f"no run {run_id}"))
        rid, start, end = runs[0]
        records: dict[str, dict[int, float]] = {}
        nonfinite: dict = {}
        wall: dict[int, float] = {}
        q = "SELECT key, value, timestamp, step, is_nan FROM metrics WHERE run_uuid = ? ORDER BY key, step, timestamp"
        for key, value, ts, step, is_nan in con.execute(q, (rid,)):
            _add(records, nonfinite, from_mlflow_key(key), int(step), float("nan") if is_nan else float(value), f"{db} (metric {key})")
            wall[int(step)] = max(wall.get(int(step), 0.0), ts / 1000)
        params = dict(con.execute("SELECT key, value FROM params WHERE run_uuid = ?", (rid,)).fetchall())
        tags = dict(con.execute("SELECT key, value FROM tags WHERE run_uuid = ?", (rid,)).fetchall())
    except sqlite3.DatabaseError as e:
        raise TrackerError(f"{db}: not an MLflow SQLite store ({e})") from None
    finally:
        con.close()
    meta = {"run_id": rid, "start_time": start, "end_time": end}
    return records, nonfinite, wall, [file_record(db, db.parent)], params, tags, meta


def read_mlflow(path: str | Path, run_id: str | None = None):
    """The steps frame of one MLflow run: a run folder, a file store (``mlruns``) or an
    experiment folder holding one run (else ``run_id``), or a SQLite store (``*.db``)."""
    path = Path(path)
    if not path.exists():
        raise TrackerError(f"{path}: no such file or folder")
    if path.is_file():
        records, nonfinite, wall, files, params, tags, meta = _read_sqlite(path, run_id)
        store = "sqlite"
    else:
        run = _find_run(path, run_id)
        records, nonfinite, wall, files, params, tags = _read_files(run, path)
        meta, store = _meta(run), "file"
    if not records:
        raise TrackerError(f"{path}: the run logged no metrics")
    start = int(meta["start_time"]) / 1000 if meta.get("start_time") not in (None, "", "null") else min(wall.values())
    end = int(meta["end_time"]) / 1000 if meta.get("end_time") not in (None, "", "null") else None
    df = steps_frame(records, {s: w - start for s, w in wall.items()})
    df.attrs.update(files=files, params=params, tags=tags, run_id=meta.get("run_id", ""), store=store,
                    started=start, ended=end, renamed=sorted(k for k in records if "@" in k), nonfinite=nonfinite)
    return df


def import_mlflow(path: str | Path, *, preset: str | Mapping[str, str], trainer: str, run_id: str | None = None,
                  prefix: str = "", evals: str | Path | None = None, completions_per_step: int | None = None,
                  updates_per_step: int | None = None, wallclock: bool = False) -> ImportedRun:
    """A run from an MLflow store, through ``preset``; the run's params become its config."""
    steps = read_mlflow(path, run_id)
    try:
        import mlflow  # only to record the version installed here, if any

        version = mlflow.__version__
    except ImportError:
        version = "not installed (read from the files)"
    a = steps.attrs
    source = {"files": a["files"], "tool_versions": {"mlflow (installed here)": version}, "mlflow_run_id": a["run_id"],
              "store": a["store"], "tags": a["tags"], "renamed_from_at": a["renamed"]}
    return imported("mlflow", steps, origin=str(path), prefix=prefix, preset=preset, trainer=trainer, source=source, evals=evals, config=dict(a["params"]),
                    completions_per_step=completions_per_step, updates_per_step=updates_per_step,
                    wallclock=wallclock, started_at=utc(a["started"]), ended_at=utc(a["ended"]))
