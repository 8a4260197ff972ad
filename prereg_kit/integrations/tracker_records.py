"""A tracker run's values per key per step, gathered from its files in the order they were written.

The one place where a step logged twice is told apart from a run's several records of one step.
Trackers keep one value per key per step, but their files may hold a step more than once: W&B
writes one history row per commit (a step's metrics may come in several), and a run resumed from a
checkpoint starts a new file (TensorBoard event file, W&B run file) that re-logs the steps after
the checkpoint. A value logged again unchanged is one record; a different one is refused, naming
both places, both values, the key and the step, unless a restart says which record the run kept:

- TensorBoard's restart marker, ``SessionLog.START`` at step N (torch's ``SummaryWriter(purge_step=N)``
  writes it): the records read before it at steps >= N are discarded, as TensorBoard itself does
  (tensorboard 2.21, ``event_accumulator.EventAccumulator._CheckForRestartAndMaybePurge``);
- ``resumed`` (the user says so: ``--resumed``): each later file replaces the earlier files' records
  from its own first step on.

Every discard is listed in ``purged``, which goes into the run's source.
"""

from __future__ import annotations

import math

from .tracker_presets import TrackerError


def shown(value: float) -> str:
    """A logged value as its log has it: ``300`` for an integer, else the shortest float text
    (``0.10000000149011612`` for float32's 0.1, ``nan``, ``inf``)."""
    v = float(value)
    return str(int(v)) if v.is_integer() and abs(v) < 2**63 else repr(v)


class StepRecords:
    """Values per key per step from files read in the order written (``segment`` starts each file)."""

    def __init__(self, *, resumed: bool = False) -> None:
        self.resumed = resumed
        self.values: dict[str, dict[int, float]] = {}
        self.nonfinite: dict[str, dict[int, tuple[str, str]]] = {}  # key -> step -> (value, where)
        self.purged: list[dict] = []
        self._origin: dict[str, dict[int, int]] = {}  # key -> step -> index into _labels
        self._labels: list[tuple[str, str]] = []  # (file, where in it)
        self._segments: list[tuple[str, float]] = []  # (file, when its writer started)
        self._stamps: dict[int, tuple[float, int]] = {}  # step -> (latest wall time, segment)
        self._fresh = False  # no value read yet from the current segment

    def segment(self, file: str, started: float) -> None:
        """Start reading the next file, written after those read before, whose writer started at ``started``."""
        self._segments.append((file, started))
        self._fresh = True

    def label(self, file: str, detail: str = "") -> int:
        """An index for a place in ``file`` (``detail``: e.g. its row), named by a refusal."""
        self._labels.append((file, detail))
        return len(self._labels) - 1

    def _where(self, origin: int) -> str:
        file, detail = self._labels[origin]
        return f"{file} ({detail})" if detail else file

    def add(self, key: str, step: int, value: float, origin: int, wall: float | None = None) -> None:
        """Record ``value`` of ``key`` at ``step``, read at ``origin`` (see ``label``), stamped ``wall``."""
        if self._fresh:
            self._fresh = False
            if self.resumed and len(self._segments) > 1:
                self.restart(step, self._segments[-1][0], "resumed")
        values = self.values.setdefault(key, {})
        prev = values.get(step)
        if prev is None:
            values[step] = value
            self._origin.setdefault(key, {})[step] = origin
            if not math.isfinite(value):
                self.nonfinite.setdefault(key, {})[step] = (shown(value), self._where(origin))
        elif prev != value and not (math.isnan(prev) and math.isnan(value)):
            first = self._origin[key][step]
            hint = ("a resumed run? --resumed keeps each later file's records from its first step on"
                    if self._labels[first][0] != self._labels[origin][0] else "a step is logged once, or again with the same value")
            raise TrackerError(f"{self._where(origin)}: {key} at step {step} is {shown(value)}, but {self._where(first)} "
                               f"logged {shown(prev)} for that step ({hint})")
        if wall is not None:
            seg = len(self._segments) - 1
            if step not in self._stamps or wall >= self._stamps[step][0]:
                self._stamps[step] = (wall, seg)

    def restart(self, step: int, where: str, why: str) -> None:
        """Discard the records read so far at steps >= ``step``: a restart at ``step`` written in ``where``."""
        n = 0
        for key, values in self.values.items():
            late = [s for s in values if s >= step]
            for s in late:
                del values[s]
                del self._origin[key][s]
                self.nonfinite.get(key, {}).pop(s, None)
            n += len(late)
        for s in [s for s in self._stamps if s >= step]:
            del self._stamps[s]
        if n:
            self.purged.append({"file": where, "from_step": int(step), "values_discarded": n, "why": why})

    @property
    def started(self) -> float | None:
        """When the first file's writer started (epoch seconds)."""
        return self._segments[0][1] if self._segments else None

    @property
    def ended(self) -> float | None:
        return max((t for t, _ in self._stamps.values()), default=None)

    def wall(self) -> dict[int, float]:
        """Seconds since the run started at each step, as the files stamped it. Across a restart (a
        later file whose writer started after the previous step was logged) the time between the
        files is not counted: the step after it is timed from the new writer's start."""
        out: dict[int, float] = {}
        prev_t, prev_wall, prev_seg = self.started, 0.0, 0
        for step in sorted(self._stamps):
            t, seg = self._stamps[step]
            start = self._segments[seg][1]
            if seg != prev_seg and start >= prev_t:
                prev_t = start
            prev_wall += t - prev_t
            out[step] = prev_wall
            prev_t, prev_seg = t, seg
        return out
