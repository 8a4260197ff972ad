"""Checkpoints: weights, optimizer state, RNG states and counters, written atomically.

A checkpoint is taken after an iteration's rows (and its evaluation's rows) are logged, so it
describes a state whose every row is on disk. Resuming loads the last checkpoint and tells the
run-log writer to drop rows logged after it (``at_iteration`` / ``at_eval``); the prompt stream
and all sampling seeds are functions of (seed, iteration/evaluation index, purpose), so the
resumed run redraws exactly what the killed run drew. On CPU, with the same thread count, the
resumed run's rows are identical to an uninterrupted run's (wall-clock seconds aside).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

from prereg_kit.errors import writing
from trainer.core.budget import Counters

CHECKPOINT = "checkpoint.pt"


def checkpoint_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoint" / CHECKPOINT


def save_checkpoint(run_dir: str | Path, model, optimizer, counters: Counters, extra: dict | None = None) -> Path:
    """Write the checkpoint to a temp file, fsync it, then rename it over the previous one.

    ``extra``: further JSON-able run state (e.g. the Lagrangian ν under ``reward_state``)."""
    path = checkpoint_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "format": "prereg-kit-checkpoint/1",
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "counters": counters.to_dict(),
        "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
    }
    if extra:
        state["extra"] = dict(extra)
    tmp = path.with_name(path.name + ".tmp")
    with writing(path, "the last checkpoint is kept"):
        try:
            with open(tmp, "wb") as fh:
                torch.save(state, fh)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    tmp.replace(path)
    return path


def remove_checkpoint(run_dir: str | Path) -> None:
    """Delete a complete run's checkpoint (it is never resumed; real models' checkpoints are large)."""
    folder = checkpoint_path(run_dir).parent
    for f in folder.glob("*"):
        f.unlink()
    if folder.is_dir():
        folder.rmdir()


def load_checkpoint(run_dir: str | Path, model, optimizer, extra: dict | None = None) -> Counters | None:
    """Restore weights, optimizer and RNG states; return the counters (None: no checkpoint).

    ``extra``: a dict updated in place with the ``extra`` state saved with the checkpoint."""
    path = checkpoint_path(run_dir)
    if not path.is_file():
        return None
    state = torch.load(path, map_location="cpu", weights_only=False)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    rng = state["rng"]
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    if rng.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    if extra is not None:
        extra.update(state.get("extra") or {})
    return Counters.from_dict(state["counters"])
