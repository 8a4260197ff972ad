"""TensorBoard event files → a steps frame and an ImportedRun.

TensorBoard keeps scalars as float32 (``simple_value``, or float32 tensors): the keys so stored
are passed on as ``float32_keys`` so that a cumulative token counter is refused (trackers.py).
Read with tensorboard's own EventAccumulator, every event kept (no sampling).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .tracker_run import file_record, imported, missing_extra, steps_frame, utc
from .importing import ImportedRun
from .trackers import TrackerError

_EVENTS = "events.out.tfevents"


def _event_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = sorted(p for p in path.glob(f"{_EVENTS}*") if p.is_file())
    if not files:
        deeper = sorted({p.parent.relative_to(path).as_posix() for p in path.rglob(f"{_EVENTS}*")})
        hint = f"; runs below it: {', '.join(deeper[:5])} (give one)" if deeper else ""
        raise TrackerError(f"{path}: no TensorBoard event files ({_EVENTS}*){hint}")
    return files


def read_tensorboard(path: str | Path):
    """The steps frame of one TensorBoard run (a run folder or one event file)."""
    try:
        from tensorboard.backend.event_processing import event_accumulator as ea  # noqa: PLC0415
        from tensorboard.util import tensor_util  # noqa: PLC0415
    except ImportError:
        raise missing_extra("TensorBoard", "tensorboard") from None
    path = Path(path)
    if not path.exists():
        raise TrackerError(f"{path}: no such file or folder")
    files = _event_files(path)
    acc = ea.EventAccumulator(str(path), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    records: dict[str, dict[int, float]] = {}
    wall: dict[int, float] = {}
    float32: set[str] = set()
    tags = acc.Tags()
    for tag in tags.get("scalars", []):
        float32.add(tag)  # simple_value is a float32 field
        for e in acc.Scalars(tag):
            records.setdefault(tag, {})[e.step] = e.value
            wall[e.step] = max(wall.get(e.step, 0.0), e.wall_time)
    for tag in tags.get("tensors", []):
        for e in acc.Tensors(tag):
            arr = tensor_util.make_ndarray(e.tensor_proto)
            if arr.size != 1:
                break
            if arr.dtype.itemsize <= 4:
                float32.add(tag)
            records.setdefault(tag, {})[e.step] = float(arr.reshape(()))
            wall[e.step] = max(wall.get(e.step, 0.0), e.wall_time)
    if not records:
        raise TrackerError(f"{path}: the event files hold no scalars")
    try:
        start = acc.FirstEventTimestamp()
    except ValueError:
        start = min(wall.values())
    df = steps_frame(records, {s: w - start for s, w in wall.items()})
    root = path if path.is_dir() else path.parent
    df.attrs.update(float32_keys=sorted(float32), started=start, ended=max(wall.values()),
                    files=[file_record(f, root) for f in files])
    return df


def import_tensorboard(path: str | Path, *, preset: str | Mapping[str, str], trainer: str, prefix: str = "",
                       evals: str | Path | None = None, completions_per_step: int | None = None,
                       updates_per_step: int | None = None, wallclock: bool = False) -> ImportedRun:
    """A run from TensorBoard event files, through ``preset`` (trackers.PRESETS or a mapping)."""
    steps = read_tensorboard(path)
    import tensorboard  # noqa: PLC0415 - present: read_tensorboard imported it

    source = {"files": steps.attrs["files"], "tool_versions": {"tensorboard": tensorboard.__version__},
              "float32_keys": steps.attrs["float32_keys"]}
    return imported("tensorboard", steps, prefix=prefix, preset=preset, trainer=trainer, source=source, evals=evals,
                    completions_per_step=completions_per_step, updates_per_step=updates_per_step,
                    wallclock=wallclock, started_at=utc(steps.attrs["started"]), ended_at=utc(steps.attrs["ended"]))
