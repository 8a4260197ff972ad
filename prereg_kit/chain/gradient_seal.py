"""Sealing gradient-test results into the plan's lock chain, and checking the seals.

A gradient test's result (``STUDY/gradient/<id>/``: ``batches.parquet`` and ``meta.json``, the
results contract of docs/gradient-tests.md) is evidence only while nobody edited it, so when
``prereg gradient-test`` has it, it is **sealed** as a completed run is (:mod:`prereg_kit.chain.seal`):
an entry of kind ``gradient`` appended to ``plan.lock`` with

- ``test`` (the test id), ``result`` (``gradient/<id>``), ``plan_hash`` (the content hash the test
  ran under, from ``meta.json``) and ``plan_entry`` (the lock entry with that content);
- ``files``: ``{name: "sha256:<hex>"}`` of every file of the folder (``batches.parquet`` and
  ``meta.json`` at least; the writer's lock files are not evidence);
- ``started_at`` / ``ended_at`` as ``meta.json`` records them, ``model_sha256``, the tool version.

:func:`check_gradient_seals` recomputes every sealed file and names the first difference of each
result (changed, removed, added), a result sealed twice, a sealed result that is gone, and a
complete result nobody sealed. ``prereg verify`` reports these as violations, so ``prereg
analyze`` refuses them too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import PreregError, ViolationError
from ..plan import resolve_plan_path
from .lock import Chain, append_entries, parse_time
from .seal import _first_difference, run_files

GRADIENT_DIR = "gradient"
BATCHES_FILE = "batches.parquet"
META_FILE = "meta.json"
REQUIRED = (BATCHES_FILE, META_FILE)


def result_folder(study_dir: str | Path, test_id: str) -> Path:
    """``STUDY/gradient/<id>``: where a gradient test's result is written."""
    return resolve_plan_path(study_dir).parent / GRADIENT_DIR / test_id


def read_result_meta(folder: Path) -> dict[str, Any]:
    """A result's ``meta.json`` as a dict; a one-line error naming the file when it is unreadable."""
    path = folder / META_FILE
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PreregError(f"{path}: missing: the gradient test wrote no result here") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise PreregError(f"{path}: unreadable: {e}") from None
    if not isinstance(meta, dict):
        raise PreregError(f"{path}: not a JSON object")
    return meta


def _seal_fields(study: Path, test_id: str, chain: Chain) -> dict[str, Any]:
    folder = study / GRADIENT_DIR / test_id
    for name in REQUIRED:
        if not (folder / name).is_file():
            raise PreregError(f"{folder / name}: missing: a gradient result is sealed with {' and '.join(REQUIRED)}")
    meta = read_result_meta(folder)
    if meta.get("status") != "complete":
        raise PreregError(f"{folder / META_FILE}: status is {meta.get('status')!r}: only a complete result is sealed")
    if meta.get("test") != test_id:
        raise PreregError(f"{folder / META_FILE}: test is {meta.get('test')!r}, not {test_id!r}")
    by_hash = {e["content_sha256"]: e["index"] for e in chain.plan_entries}
    if meta.get("plan_hash") != chain.last["content_sha256"]:
        raise ViolationError(f"{folder / META_FILE}: ran under plan {str(meta.get('plan_hash'))[:23]}…, not the plan "
                             f"locked now ({chain.last['content_sha256'][:23]}…): not sealed")
    started = meta.get("started_at")
    try:
        if started is None or parse_time(str(started)) < chain.locked_at:
            raise ViolationError(f"{folder / META_FILE}: started {started}, before the plan was locked "
                                 f"({chain.entries[0]['time']}): not sealed")
    except ValueError:
        raise PreregError(f"{folder / META_FILE}: started_at {started!r} is not an ISO time") from None
    return {"kind": "gradient", "test": test_id, "result": f"{GRADIENT_DIR}/{test_id}", "plan_hash": meta["plan_hash"],
            "plan_entry": by_hash.get(meta["plan_hash"]), "started_at": started, "ended_at": meta.get("ended_at"),
            "files": run_files(folder), "model_sha256": meta.get("model_sha256"), "tool_version": __version__}


def seal_gradient(study_dir: str | Path, test_id: str) -> dict[str, Any]:
    """Seal the complete result of gradient test ``test_id`` into the study's lock chain; return
    the entry. A result sealed before is refused (a test runs once under a locked plan)."""
    plan_path = resolve_plan_path(study_dir)
    study = plan_path.parent

    def make(chain: Chain) -> list[dict[str, Any]]:
        done = next((e for e in chain.gradient_seals if e["test"] == test_id), None)
        if done is not None:
            raise ViolationError(f"{GRADIENT_DIR}/{test_id}: sealed already (entry {done['index']}, {done['time']}): "
                                 "a gradient test's result is sealed once")
        return [_seal_fields(study, test_id, chain)]

    return append_entries(plan_path, make, what="sealing a gradient result")[0]


def sealed_tests(chain: Chain) -> dict[str, dict[str, Any]]:
    """Test id → its (first) seal entry."""
    out: dict[str, dict[str, Any]] = {}
    for e in chain.gradient_seals:
        out.setdefault(e["test"], e)
    return out


@dataclass
class GradientSealCheck:
    violations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)
    sealed: dict[str, dict[str, Any]] = field(default_factory=dict)  # test id → its seal entry


def check_gradient_seals(study_dir: str | Path, chain: Chain) -> GradientSealCheck:
    """Every sealed gradient result as it was sealed, and no complete result without a seal."""
    study = resolve_plan_path(study_dir).parent
    rep = GradientSealCheck()
    for e in chain.gradient_seals:
        prev = rep.sealed.get(e["test"])
        if prev is not None and prev["files"] != e["files"]:
            rep.violations.append(f"{e['result']}: sealed twice with different files (entries {prev['index']} and "
                                  f"{e['index']}): the result changed after it was sealed")
        rep.sealed.setdefault(e["test"], e)
    for e in rep.sealed.values():
        folder = study / e["result"]
        if not folder.is_dir():
            rep.violations.append(f"{e['result']}: sealed (entry {e['index']}, {e['time']}) but the result is gone")
            continue
        try:
            now = run_files(folder)
        except PreregError as err:
            rep.violations.append(str(err))
            continue
        diff = _first_difference(e["files"], now)
        if diff is not None:
            rep.violations.append(f"{e['result']}/{diff[0]}: {diff[1]} since the result was sealed (entry {e['index']}, {e['time']})")
    root = study / GRADIENT_DIR
    for folder in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        if folder.name in rep.sealed:
            continue
        key = f"{GRADIENT_DIR}/{folder.name}"
        try:
            status = read_result_meta(folder).get("status")
        except PreregError:
            status = None
        if status == "complete" or (folder / BATCHES_FILE).exists():
            rep.violations.append(f"{key}: a gradient result that is not sealed, so nothing shows its files are as the "
                                  "test wrote them (only `prereg gradient-test` writes and seals results)")
        else:
            rep.warnings.append(f"{key}: an incomplete gradient result (no {BATCHES_FILE}): not read")
    if rep.sealed:
        rep.info.append(f"{len(rep.sealed)} sealed gradient result(s)" + ("" if rep.violations else ": every file matches its seal"))
    return rep


__all__ = ["BATCHES_FILE", "check_gradient_seals", "GRADIENT_DIR", "GradientSealCheck", "read_result_meta",
           "result_folder", "seal_gradient", "sealed_tests"]
