"""Where a run lives (``runs/<configuration>/seed-<n>/``) and its metadata file, written atomically."""

from __future__ import annotations

import json
import numbers
import os
from pathlib import Path
from typing import Callable

from ..errors import writing
from ..stages import STAGES
from .schema import META_FILE, SAFE_NAME, RunLogError, RunMeta


def run_dir(study_dir: str | Path, configuration: str, seed: int, stage: str = "main") -> Path:
    """The folder of one run.

    Main-stage runs: ``<study_dir>/runs/<configuration>/seed-<seed>``, the runs the analysis
    reads. Calibration, pilot and smoke runs: ``<study_dir>/stages/<stage>/<configuration>/seed-<seed>``,
    so that a smoke run never collides with, or is mistaken for, the main run of the same seed.
    """
    if stage not in STAGES:
        raise RunLogError(f"unknown stage {stage!r} (one of {', '.join(STAGES)})")
    if not isinstance(configuration, str) or not SAFE_NAME.match(configuration) or ".." in configuration:
        raise RunLogError(f"configuration name {configuration!r} cannot name a run folder "
                          "(letters, digits and _ . + - only, starting with a letter or digit, no '..', at most 80)")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise RunLogError(f"seed {seed!r} cannot name a run folder (a non-negative integer)")
    base = Path(study_dir) / "runs" if stage == "main" else Path(study_dir) / "stages" / stage
    return base / configuration / f"seed-{seed}"


def check_inside(study_dir: str | Path, folder: str | Path) -> None:
    """Refuse a run folder that a writer would not write inside the study: a symbolic link (or a
    file) on the way from the study folder to it (``runs/``, ``stages/<stage>/``, the
    configuration's folder, the run's own) would put the run's files, and the seal that covers
    them, somewhere else."""
    study, target = Path(study_dir), Path(folder)
    cur = study
    for part in target.relative_to(study).parts:
        cur = cur / part
        if cur.is_symlink():
            raise RunLogError(f"{cur}: a symbolic link (to {os.readlink(cur)}): a run is written only inside its "
                              "study, so replace the link by a folder")
        if cur.exists() and not cur.is_dir():
            raise RunLogError(f"{cur}: a file where a run folder belongs")


def _fsync_dir(folder: Path) -> None:
    # Make a rename or a file creation durable; not every platform can open a directory.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write(target: Path, write: Callable[[Path], None], *, fsync: bool = True, kept: str = "") -> None:
    """``write`` the file to a temp name beside ``target``, fsync it, rename it over ``target``: a
    reader sees the old file or the new one, never part of one (a full disk names ``target``)."""
    tmp = target.with_name(target.name + ".tmp")
    with writing(target, kept or f"{target.name} is as it was"):
        try:
            write(tmp)
            if fsync:
                with open(tmp, "rb+") as fh:
                    os.fsync(fh.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    tmp.replace(target)
    if fsync:
        _fsync_dir(target.parent)


def _atomic_write_bytes(target: Path, data: bytes, fsync: bool = True) -> None:
    _atomic_write(target, lambda tmp: tmp.write_bytes(data), fsync=fsync)


def write_meta(path: str | Path, meta: RunMeta, *, fsync: bool = True) -> Path:
    """Write ``meta.json`` atomically (temp file + fsync + rename) into run folder ``path``."""
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / META_FILE
    text = json.dumps(meta.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"
    _atomic_write_bytes(target, text.encode(), fsync)
    return target


def read_meta(path: str | Path) -> RunMeta:
    """Read and validate ``meta.json`` of run folder ``path``."""
    f = Path(path) / META_FILE
    try:
        raw = json.loads(f.read_text())
    except FileNotFoundError:
        raise RunLogError(f"{f}: no run metadata") from None
    except json.JSONDecodeError as e:
        raise RunLogError(f"{f}: line {e.lineno}: not valid JSON ({e.msg})") from None
    try:
        return RunMeta.model_validate(raw)
    except Exception as e:  # noqa: BLE001 - pydantic.ValidationError, imported only to validate: keep one line
        first = str(e).splitlines()
        raise RunLogError(f"{f}: invalid run metadata: {' '.join(first[1:3]).strip()}") from None


def find_runs(study_dir: str | Path, *, all_stages: bool = False) -> list[Path]:
    """Every run folder (one holding ``meta.json``) under ``<study_dir>/runs``, sorted.

    ``all_stages``: also the calibration, pilot and smoke runs under ``<study_dir>/stages/``.
    """
    study = Path(study_dir)
    found = list((study / "runs").glob(f"*/seed-*/{META_FILE}"))
    if all_stages:
        found += list((study / "stages").glob(f"*/*/seed-*/{META_FILE}"))
    return sorted(p.parent for p in found)


