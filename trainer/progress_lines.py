"""Plain progress lines for ``prereg run`` when its output is not a terminal (a pipe, a log file,
CI): one line per run as it starts, evaluates and ends, and for every running run a status line at
least every ``every`` seconds, so that a reader of the log sees the study move.

A terminal gets rich progress bars instead (``trainer.launch``); a bar drawn to a file would show
only at the end. In the main stage the lines are blind as the bars are: iteration, tokens and
evaluations, never an accuracy, until the study is analyzed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

EVERY_S = 5.0  # a status line per running run at least this often (the demo promises one per 10 s)


def _tokens(n: float) -> str:
    """Tokens at a readable scale: 950, 7.5K, 1.2M."""
    if n >= 1e6:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1e3:.1f}K" if n >= 1e3 else f"{n:.0f}"


class RunLines:
    """Writes the progress of a stage's jobs (``trainer.launch.Job``) as plain lines.

    ``update`` and ``done`` are the launcher's callbacks; ``tick`` writes the status lines that are
    due (a thread calls it every second between ``start`` and ``stop``). ``clock`` and ``write``
    are parameters so that a test can drive it with a fake clock."""

    def __init__(self, jobs: Sequence, write: Callable[[str], None], *, blind: bool, every: float = EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.jobs = list(jobs)
        self.write = write
        self.blind = blind
        self.every = every
        self.clock = clock
        self._lock = threading.Lock()
        self._last: dict[int, float] = {}  # id(job) → when its last line was written
        self._began: dict[int, float] = {}  # id(job) → when it was first seen running
        self._evals: dict[int, int] = {}  # id(job) → evaluations already written
        self._ended: set[int] = set()  # id(job) of the runs that ended: no more status lines
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _name(self, j) -> str:
        return f"{j.configuration} seed {j.seed}"

    def _where(self, j) -> str:
        """Iteration and tokens (or iterations) toward the run's stop."""
        p = j.progress
        stop = j.spec.stop_tokens
        if stop is not None:
            return f"iteration {p.get('iteration', 0)}, {_tokens(p.get('tokens', 0))} / {_tokens(stop)} tokens"
        return f"iteration {p.get('iteration', 0)} / {j.spec.iteration_stop or 1}"

    def _accuracy(self, j) -> str:
        p = j.progress
        return f", acc {p['accuracy']:.3f}" if "accuracy" in p and not self.blind else ""

    def _emit(self, j, text: str, now: float) -> None:
        self._last[id(j)] = now
        self.write(f"{self._name(j)}: {text}")

    def _seen(self, j, now: float) -> None:
        if id(j) not in self._began:
            self._began[id(j)] = now
            self._emit(j, "started", now)

    def update(self, j) -> None:
        """A progress record of a run: an evaluation is written at once, an iteration when due."""
        with self._lock:
            if id(j) in self._ended:
                return
            now = self.clock()
            self._seen(j, now)
            n = j.progress.get("eval_index")
            if n is not None and self._evals.get(id(j), -1) < n:
                self._evals[id(j)] = n
                self._emit(j, f"evaluation {n} at {self._where(j)}{self._accuracy(j)}", now)
            elif now - self._last[id(j)] >= self.every:
                self._emit(j, f"{self._where(j)}{self._accuracy(j)}", now)

    def done(self, j) -> None:
        with self._lock:
            now = self.clock()
            self._seen(j, now)
            took = now - self._began[id(j)]
            self._emit(j, f"{j.result} at {self._where(j)}{self._accuracy(j)} ({took:.0f} s)", now)
            self._ended.add(id(j))

    def tick(self) -> None:
        """A status line for each running run whose last line is ``every`` seconds old or more."""
        with self._lock:
            now = self.clock()
            for j in self.jobs:
                began = self._began.get(id(j))
                if began is None:
                    if getattr(j, "process", None) is None or j.result:
                        continue  # not started yet
                    self._seen(j, now)
                    continue
                if id(j) in self._ended or now - self._last[id(j)] < self.every:
                    continue
                what = self._where(j) if j.progress else "starting (imports, model, evaluation sets)"
                self._emit(j, f"{what} ({now - began:.0f} s)", now)

    def start(self) -> RunLines:
        def loop() -> None:
            while not self._stop.wait(1.0):
                self.tick()

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
