"""A run worker: ``python -m trainer.run_worker`` trains the runs ``prereg run`` hands it, one after
another, in one process, so that torch and transformers are imported once per worker rather than
once per run (on 2 CPU cores a fresh run process spends about 16 s starting, against about 0.2 s
per iteration of the tiny model).

Protocol, one JSON object a line: the launcher writes ``{"spec": …, "log": …, "env": {…}}`` on the
worker's stdin; the worker trains that run through the entry point of ``python -m trainer``
(:func:`trainer.__main__.main`), writing the run's progress lines on stdout as a run process does,
then ``{"worker_done": rc, "retiring": …}`` with the exit code a run process would have had and
whether the worker ends now (below). The end of stdin ends the worker.

Each run stays its own, as in a process of its own:

* its stderr (file descriptor 2: Python's, torch's and C libraries' output) goes to its own
  ``train.log``, appended to as the launcher's run process appends;
* ``PREREG_EXECUTOR`` and ``PREREG_JOB_ID`` are its own;
* before it starts, the process state a run reads is put back as a fresh interpreter has it
  (:class:`FreshState`): torch's default seed (CPU and CUDA generators), the torch thread count,
  the deterministic-algorithm and cuDNN flags, the warning filters and the record of warnings
  already shown; numpy's and Python's global generators are reseeded from the OS, as at start;
* an exception in the run is that run's failure (its traceback in its log, exit 1) and the worker
  takes the next run. A run stopped by SIGTERM (exit 130) ends the worker, as does a failed run
  after CUDA was used (a CUDA error can leave the context unusable): the launcher starts a fresh
  worker for the next run.
"""

from __future__ import annotations

import gc
import json
import os
import random
import sys
import traceback
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

import trainer.loop  # noqa: F401  (torch, transformers and the trainer: imported once for every run)
from trainer.__main__ import main as run_main

STOPPED = 130  # the exit code of a run stopped by SIGTERM or Ctrl-C (trainer.__main__)


@dataclass(frozen=True)
class FreshState:
    """What a run can read of the process and changes as it runs, as the worker found it at start."""

    seed: int
    threads: int
    deterministic: bool
    warn_only: bool
    cudnn_benchmark: bool
    filters: tuple

    @classmethod
    def now(cls) -> FreshState:
        return cls(torch.initial_seed(), torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(),
                   torch.is_deterministic_algorithms_warn_only_enabled(), torch.backends.cudnn.benchmark,
                   tuple(warnings.filters))

    def restore(self) -> None:
        """Put the state back before a run (set_determinism and the plan's threads change it)."""
        torch.manual_seed(self.seed)  # the default generators of the CPU and every CUDA device
        torch.set_num_threads(self.threads)
        torch.use_deterministic_algorithms(self.deterministic, warn_only=self.warn_only)
        torch.backends.cudnn.benchmark = self.cudnn_benchmark
        np.random.seed()  # unseeded, as in a fresh interpreter: no run may depend on these
        random.seed()
        warnings.resetwarnings()  # also forgets which warnings were shown: a run's log gets its own
        warnings.filters[:] = list(self.filters)
        warnings.onceregistry.clear()


def train_one(request: dict, fresh: FreshState, entry: Callable[[list[str]], int] = run_main) -> int:
    """Train the run of ``request`` here, its stderr into its log; the exit code a run process would have."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved_err = os.dup(2)
    os.dup2(log, 2)
    os.close(log)
    env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}
    saved_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        fresh.restore()
        return entry([request["spec"]])
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    except Exception:  # noqa: BLE001  (the run's failure, as an uncaught exception ends a run process)
        traceback.print_exc()
        return 1
    finally:
        sys.stderr.flush()
        os.dup2(saved_err, 2)
        os.close(saved_err)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        gc.collect()  # the run's model and optimizer go before the next run loads its own
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def retire_after(rc: int) -> bool:
    """Whether the worker ends after a run with exit code ``rc`` (see the module docstring)."""
    return rc == STOPPED or (rc not in (0, 2, 3) and torch.cuda.is_initialized())


def main() -> int:
    fresh = FreshState.now()
    out = sys.stdout
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            rc = train_one(json.loads(line), fresh)
            retire = retire_after(rc)  # said with the result, so the launcher never hands this worker another run
            out.write("\n" + json.dumps({"worker_done": rc, "retiring": retire}) + "\n")  # a line of its own
            out.flush()
            if retire:
                return 0
    except KeyboardInterrupt:  # SIGTERM (trainer.__main__'s handler) or Ctrl-C between runs
        return STOPPED
    return 0


if __name__ == "__main__":
    sys.exit(main())
