"""TensorBoard event files → a steps frame and an ImportedRun.

Every record of every event file in a run folder is read with tensorboard's own record reader
and event protos (tensorboard 2.21: ``compat.tensorflow_stub.pywrap_tensorflow.PyRecordReader_New``,
``compat.proto.event_pb2``), the files in the order their writers started (each file's first event).
Not through its EventAccumulator, which stops silently at a damaged record and keeps the last of
two values logged at one step: here a damaged or foreign file is refused by name, and a step
logged twice with different values is refused unless a restart says which one counts
(tracker_records.py: TensorBoard's own restart marker, or ``resumed``).

Scalars are ``simple_value`` (float32) or size-1 numeric tensors (the ``scalars`` plugin's
tensor form); text, histograms, images and other plugins' data are skipped. The keys stored as
float32 are passed on as ``float32_keys`` so that a cumulative token counter is refused (trackers.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from .importing import ImportedRun
from .tracker_records import StepRecords
from .tracker_run import file_record, imported, missing_extra, steps_frame, utc
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


def _records(file: Path) -> Iterator[bytes]:
    """The records of one event file; a damaged or truncated one is refused (TensorBoard's loader stops there silently)."""
    from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow

    reader = pywrap_tensorflow.PyRecordReader_New(str(file), 0, None, None)
    n = 0
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return
        except errors.DataLossError as e:
            what = f"ends inside record {n + 1} (the writer was stopped mid-write?)" if "truncated" in str(e) else \
                f"record {n + 1} fails its checksum (damaged, or not an event file)"
            raise TrackerError(f"{file}: {what}") from None
        n += 1
        yield reader.record()


def _scalar(value, tensor_util) -> tuple[float, bool] | None:
    """(value, stored as float32) of a summary value that is a scalar; None for other data."""
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value), True
    plugin = value.metadata.plugin_data.plugin_name
    if kind != "tensor" or plugin not in ("", "scalars"):
        return None
    try:
        arr = tensor_util.make_ndarray(value.tensor)
    except Exception:  # noqa: BLE001 - a tensor of a dtype numpy cannot hold (strings, resources) is not a scalar
        return None
    if arr.size != 1 or arr.dtype.kind not in "fiu":
        return None
    return float(arr.reshape(())), arr.dtype.itemsize <= 4


def read_tensorboard(path: str | Path, *, resumed: bool = False):
    """The steps frame of one TensorBoard run (a run folder or one event file). ``resumed``: a
    later event file replaces the earlier files' records from its first step on."""
    try:
        from tensorboard.compat.proto import event_pb2
        from tensorboard.util import tensor_util
    except ImportError:
        raise missing_extra("TensorBoard", "tensorboard") from None
    from google.protobuf.message import DecodeError  # protobuf comes with tensorboard

    path = Path(path)
    if not path.exists():
        raise TrackerError(f"{path}: no such file or folder")
    files = _event_files(path)
    read = []
    for f in files:
        events = []
        for n, raw in enumerate(_records(f), 1):
            try:
                events.append(event_pb2.Event.FromString(raw))
            except DecodeError:
                raise TrackerError(f"{f}: record {n} is not a TensorBoard event") from None
        if events:
            read.append((events[0].wall_time, str(f), events))  # the first event is stamped when its writer starts
    rec = StepRecords(resumed=resumed)
    float32: set[str] = set()
    for started, f, events in sorted(read, key=lambda x: x[:2]):
        where = rec.label(f)
        rec.segment(f, started)
        for event in events:
            if event.HasField("session_log") and event.session_log.status == event_pb2.SessionLog.START:
                rec.restart(event.step, f, f"TensorBoard restart marker (SessionLog START at step {event.step})")
            if not event.HasField("summary"):
                continue
            for v in event.summary.value:
                got = _scalar(v, tensor_util)
                if got is None:
                    continue
                if got[1]:
                    float32.add(v.tag)
                rec.add(v.tag, int(event.step), got[0], where, wall=event.wall_time)
    if not rec.values or not any(rec.values.values()):
        raise TrackerError(f"{path}: holds no scalars ({len(files)} event file{'s' * (len(files) > 1)} read)")
    df = steps_frame(rec.values, rec.wall())
    root = path if path.is_dir() else path.parent
    df.attrs.update(float32_keys=sorted(float32), started=rec.started, ended=rec.ended, nonfinite=rec.nonfinite,
                    purged=rec.purged, files=[file_record(f, root) for f in files])
    return df


def import_tensorboard(path: str | Path, *, preset: str | Mapping[str, str], trainer: str, prefix: str = "",
                       evals: str | Path | None = None, completions_per_step: int | None = None,
                       updates_per_step: int | None = None, wallclock: bool = False, resumed: bool = False) -> ImportedRun:
    """A run from TensorBoard event files, through ``preset`` (trackers.PRESETS or a mapping)."""
    steps = read_tensorboard(path, resumed=resumed)
    import tensorboard  # present: read_tensorboard imported it

    a = steps.attrs
    source = {"files": a["files"], "tool_versions": {"tensorboard": tensorboard.__version__},
              "float32_keys": a["float32_keys"]}
    if a["purged"]:
        source["restarts"] = a["purged"]
    return imported("tensorboard", steps, origin=str(path), prefix=prefix, preset=preset, trainer=trainer, source=source,
                    evals=evals, completions_per_step=completions_per_step, updates_per_step=updates_per_step,
                    wallclock=wallclock, started_at=utc(a["started"]), ended_at=utc(a["ended"]))
