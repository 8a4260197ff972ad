"""Sealing completed runs into the plan's lock chain, and checking the seals.

The dense-rewards paper's preregistration audit (§2.3, §C.1 "Preregistration") asks that a
study's results come from the runs it locked in advance. A run log on disk is only evidence while
nobody edited it, so when a main-stage run completes, its files are **sealed**: an entry of kind
``seal`` is appended to ``plan.lock`` (under the chain's OS lock, :func:`prereg_kit.chain.lock.append_entries`;
the run is read and its files hashed before the lock is taken, so that the lock is held only to
append) with

- ``run``: the run folder relative to the study (``runs/<configuration>/seed-<n>``),
  ``configuration``, ``seed``, ``stage``, ``status``, ``plan_hash`` and ``plan_entry`` (the lock
  entry whose content the run was launched under), ``started_at`` / ``ended_at``;
- ``files``: ``{name: "sha256:<hex>"}`` for every file of the folder (sub-folders included) except
  the working files in :data:`UNSEALED` (the launcher's log, the writer's lock, checkpoints);
- ``code_sha256`` and ``model_sha256`` as the run recorded them in ``meta.json`` (the trainer's
  source and the starting weights), and the sealing tool's version;
- like every entry, the time from the clock, ``prev`` and ``hash``.

:func:`check_seals` recomputes every sealed file and names the first difference of each run:
a changed file, a missing one, a file added after the seal, a run sealed twice with different
files, a sealed run that is gone, a complete main run that was never sealed. ``prereg verify`` and
``prereg analyze`` report these as violations. :func:`sealed_not_complete` names the runs a
launcher must not train again: sealed, but gone or incomplete on disk. Hashing is sha256 from :mod:`hashlib`; nothing here
needs more than the standard library.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .. import __version__
from ..errors import PreregError
from ..plan import resolve_plan_path
from ..runlog import JOB_RECORD, META_FILE, RunLogError, find_runs, read_meta
from ..runlog.schema import TRACKER_RECORD
from .lock import Chain, append_entries, format_time, parse_time

# Working files of a run folder that are not evidence: the launcher's stderr log, the one-writer
# lock and its holder note, the executor's job record (written again after the run ends), the live
# trackers' run ids, checkpoints (removed when a run completes, unless kept).
UNSEALED = frozenset({"train.log", ".writer.lock", ".writer.json", JOB_RECORD, TRACKER_RECORD})
UNSEALED_DIRS = frozenset({"checkpoint"})
_CHUNK = 1 << 20


def _note_in_flight(name: str) -> bool:
    # the holder note's lease renewal or the job record's update, between write and rename
    return name.startswith((".writer.json.", JOB_RECORD + ".")) and name.endswith(".tmp")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def run_files(folder: str | Path) -> dict[str, str]:
    """``{relative name: sha256}`` of the files a seal covers (sorted by name).

    A symbolic link anywhere in the folder is an error: it could point at a file that changes
    while the folder itself does not.
    """
    folder = Path(folder)
    out: dict[str, str] = {}
    for root, dirs, files in os.walk(folder):
        rel_root = Path(root).relative_to(folder)
        dirs[:] = sorted(d for d in dirs if not (rel_root == Path(".") and d in UNSEALED_DIRS))
        # a symlinked folder is listed (never walked into) so that it is refused like a symlinked file
        for name in sorted(files + [d for d in dirs if (Path(root) / d).is_symlink()]):
            p = Path(root) / name
            rel = (rel_root / name).as_posix()
            if p.is_symlink():
                raise PreregError(f"{p}: a symbolic link in a run folder cannot be sealed")
            if rel_root == Path(".") and (name in UNSEALED or _note_in_flight(name)):
                continue
            out[rel] = file_sha256(p)
    return dict(sorted(out.items()))


def _unreadable(folders: list[Path]) -> dict[int, str]:
    if not folders:
        return {}
    from ..runlog import unreadable  # pyarrow only when there are runs to check

    return unreadable(folders)


def run_key(study_dir: Path, folder: Path) -> str:
    return Path(os.path.relpath(folder, study_dir)).as_posix()


def _seal_fields(study_dir: Path, folder: Path, problem: str | None) -> dict[str, Any]:
    """A seal entry's fields for a complete run, all but ``plan_entry`` (which reads the chain):
    every file hashed, before the chain is locked. ``problem``: what the analysis's reader finds
    wrong with the run (:func:`prereg_kit.runlog.unreadable`), if anything."""
    meta = read_meta(folder)
    if meta.status != "complete":
        raise PreregError(f"{folder}: run status is '{meta.status}': only a complete run is sealed")
    if problem is not None:  # never seal what the analysis cannot read
        raise PreregError(f"{folder}: not sealed: {problem}")
    extra = meta.model_extra or {}
    return {
        "kind": "seal", "run": run_key(study_dir, folder), "configuration": meta.configuration, "seed": meta.seed,
        "stage": meta.stage, "status": meta.status, "plan_hash": meta.plan_hash,
        "started_at": format_time(meta.started_at),
        "ended_at": format_time(meta.ended_at) if meta.ended_at else None,
        "files": run_files(folder),
        "code_sha256": extra.get("code_sha256"), "model_sha256": extra.get("model_sha256"),
        "tool_version": __version__,
    }


@dataclass
class SealResult:
    sealed: list[str] = field(default_factory=list)  # run keys sealed now
    already: list[str] = field(default_factory=list)  # sealed before, files unchanged
    refused: list[str] = field(default_factory=list)  # one line each: why not sealed
    entries: list[dict[str, Any]] = field(default_factory=list)


def seal_runs(study_dir: str | Path, folders: Iterable[str | Path] | None = None) -> SealResult:
    """Seal complete main-stage runs of a locked study into its lock chain (one append for all).

    ``folders``: the runs to seal (default: every main run under ``runs/``). A run sealed before
    with the same files is left as it is; one whose files changed since its seal, or that is not
    complete, is refused (listed in ``refused``), never re-sealed.
    """
    plan_path = resolve_plan_path(study_dir)
    study = plan_path.parent
    targets = [Path(f) for f in folders] if folders is not None else find_runs(study)
    result = SealResult()

    # the slow part (reading each run, hashing its files) before the chain is locked, so that
    # runs finishing at once on a loaded machine hold the lock only to append
    ready: list[tuple[str, dict[str, Any]]] = []
    problems = _unreadable(targets)
    for i, folder in enumerate(targets):
        key = run_key(study, folder)
        try:
            fields = _seal_fields(study, folder, problems.get(i))
        except (PreregError, RunLogError) as e:
            result.refused.append(str(e))
            continue
        if fields["stage"] != "main" or not key.startswith("runs/"):
            result.refused.append(f"{folder}: a {fields['stage']}-stage run is not sealed (only main runs under runs/ are)")
            continue
        ready.append((key, fields))

    def make(chain: Chain) -> list[dict[str, Any]]:
        last = {s["run"]: s for s in chain.seals}
        by_hash = {e["content_sha256"]: e["index"] for e in chain.plan_entries}
        out = []
        for key, fields in ready:
            if key in last:
                diff = _first_difference(last[key]["files"], fields["files"])
                if diff is None:
                    result.already.append(key)
                else:
                    result.refused.append(f"{key}/{diff[0]}: {diff[1]} since the run was sealed "
                                          f"(entry {last[key]['index']}, {last[key]['time']}): not re-sealed")
                continue
            result.sealed.append(key)
            out.append({**fields, "plan_entry": by_hash.get(fields["plan_hash"])})
        return out

    result.entries = append_entries(plan_path, make, what="sealing")
    return result


def sealed_not_complete(study_dir: str | Path, folders: Iterable[str | Path], chain: Chain) -> list[str]:
    """One line for each of ``folders`` that ``chain`` seals but whose run is not complete on disk
    (gone, unreadable or incomplete): such a run is never trained again, since no new run's files
    could match its seal. The line names the run, the seal's entry and what to do."""
    study = resolve_plan_path(study_dir).parent
    sealed = {s["run"]: s for s in chain.seals}
    lines = []
    for f in folders:
        folder = Path(f)
        s = sealed.get(run_key(study, folder))
        if s is None:
            continue
        if not (folder / META_FILE).is_file():
            what = "its folder is gone" if not folder.exists() else f"its {META_FILE} is gone"
        else:
            try:
                status = read_meta(folder).status
            except RunLogError as e:
                status, what = None, f"its {META_FILE} is unreadable ({str(e)[:120]})"
            if status == "complete":
                continue
            if status is not None:
                what = f"its log now says '{status}'"
        lines.append(f"{folder}: sealed in {chain.path.name} (entry {s['index']}, {s['time']}) but {what}: a sealed run "
                     "is never trained again (no new run could match its seal); restore its sealed files from a copy "
                     f"(`prereg verify {study}` names any that differ); --configs/--seeds train the other runs meanwhile")
    return lines


def _first_difference(sealed: dict[str, str], now: dict[str, str]) -> tuple[str, str] | None:
    """``(file, what happened to it)`` for the first file that differs from its seal, else None."""
    for name, h in sealed.items():
        if name not in now:
            return name, "removed"
        if now[name] != h:
            return name, f"changed (sealed {h[:19]}…, now {now[name][:19]}…)"
    added = sorted(set(now) - set(sealed))
    if added:
        return added[0], "added"
    return None


@dataclass
class SealCheck:
    violations: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)
    sealed: dict[str, dict[str, Any]] = field(default_factory=dict)  # run key → its seal entry


def check_seals(study_dir: str | Path, chain: Chain) -> SealCheck:
    """Recompute the files of every sealed run and find complete main runs without a seal."""
    study = resolve_plan_path(study_dir).parent
    rep = SealCheck()
    for s in chain.seals:
        key = s["run"]
        prev = rep.sealed.get(key)
        if prev is not None and prev["files"] != s["files"]:
            rep.violations.append(f"{key}: sealed twice with different files (entries {prev['index']} and {s['index']}): "
                                  "the run changed after it was sealed")
        rep.sealed.setdefault(key, s)
    for key, s in rep.sealed.items():
        folder = study / key
        if not (folder / META_FILE).is_file():
            rep.violations.append(f"{key}: sealed (entry {s['index']}, {s['time']}) but the run is gone")
            continue
        try:
            now = run_files(folder)
        except PreregError as e:
            rep.violations.append(str(e))
            continue
        diff = _first_difference(s["files"], now)
        if diff is not None:
            rep.violations.append(f"{key}/{diff[0]}: {diff[1]} since the run was sealed (entry {s['index']}, {s['time']})")
            continue
        ended = s.get("ended_at")
        if ended and parse_time(s["time"]) < parse_time(ended):
            rep.violations.append(f"{key}: sealed at {s['time']}, before the run ended ({ended})")
    complete = []
    for folder in find_runs(study):
        if run_key(study, folder) in rep.sealed:
            continue
        try:
            if read_meta(folder).status == "complete":
                complete.append(folder)
        except RunLogError:
            continue  # reported by the audit as unreadable metadata
    # an unsealed run is read, so that a log that cannot be sealed names its real cause
    problems = _unreadable(complete)
    unsealed = []
    for i, folder in enumerate(complete):
        key = run_key(study, folder)
        if i in problems:
            rep.violations.append(f"{key}: unreadable run log, so it cannot be sealed: {problems[i]}")
        else:
            unsealed.append(key)
    if unsealed:
        names = ", ".join(unsealed[:8]) + (f" and {len(unsealed) - 8} more" if len(unsealed) > 8 else "")
        rep.violations.append(f"{names}: complete but not sealed, so nothing shows the files are as the run wrote them "
                              f"(`prereg seal {study}` seals runs written by another trainer)")
    if rep.sealed:
        rep.info.append(f"{len(rep.sealed)} sealed run(s): every file matches its seal" if not rep.violations
                        else f"{len(rep.sealed)} sealed run(s) checked")
    return rep


def code_sha256(roots: Iterable[str | Path]) -> str:
    """``sha256:<hex>`` of a source tree: every ``*.py`` file under ``roots``, in sorted order of
    (root name, relative path), hashed as path + NUL + bytes. Runs record it as the code version."""
    h = hashlib.sha256()
    for root in sorted((Path(r) for r in roots), key=lambda p: p.name):
        for p in sorted(root.rglob("*.py")):
            if "__pycache__" in p.parts:
                continue
            h.update(f"{root.name}/{p.relative_to(root).as_posix()}".encode() + b"\0")
            h.update(p.read_bytes())
    return "sha256:" + h.hexdigest()


__all__ = ["seal_runs", "check_seals", "sealed_not_complete", "run_files", "code_sha256", "SealResult", "SealCheck", "UNSEALED"]
