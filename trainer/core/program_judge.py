"""The program judge a code run uses, and whether its isolation is strong enough for the run's
stage (docs/multi-reward.md, "Program channels in training"). No torch here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from trainer.config import SandboxSettings
from trainer.errors import ConfigError
from trainer.rewards.sandbox import Isolation, Sandbox, SandboxLimits, SandboxUnavailableError, probe_isolation


def sandbox_limits(settings: SandboxSettings) -> SandboxLimits:
    """The recipe's ``sandbox`` table as ``SandboxLimits`` (the other limits: the sandbox's defaults)."""
    return SandboxLimits(small_timeout_s=settings.small_timeout_s, mid_timeout_s=settings.mid_timeout_s,
                         large_timeout_s=settings.large_timeout_s, max_workers=settings.max_workers,
                         memory_bytes=settings.memory_mb << 20, stop_on_failure=settings.stop_on_failure,
                         network=settings.network, cpu_basis=settings.cpu_basis)


WEAK_ISOLATION_KEY = "sandbox.allow_weak_isolation"


STRICT_STAGES = ("main", "calibration")  # stages whose rewards decide the study (calibration: the election)


def _weak_reason(iso: Isolation, shown: Sequence[str]) -> str:
    """Why ``iso`` is not an OS sandbox for this run (the probe's first note on bubblewrap)."""
    if iso.os_sandbox and shown:
        return f"{shown[0]} is inside the sandbox's view (bound read-only from {', '.join(iso.binds)})"
    for note in iso.notes:
        if note.startswith(("bubblewrap", "unavailable: bwrap", "network = 'off'", "no /bin/sh")):
            return note
    return "bubblewrap unusable here"


def task_paths(spec) -> list[str]:
    """Host paths that hold expected outputs or the run's state: the study, cache and run
    folders, ``train_file`` and file evaluation sets (relative paths: under the study folder)."""
    study = Path(spec.study_dir)
    files = [spec.config.task.train_file,
             *(s.source for s in spec.eval_sets if not (s.source or "synthetic").startswith("synthetic"))]
    return [spec.study_dir, spec.cache_dir, spec.run_dir,
            *(str(Path(f) if Path(f).is_absolute() else study / f) for f in files if f)]


def judge_meta(spec, *, where: str = "") -> dict[str, str]:
    """``{"judge_isolation": mode}`` for a code run's ``meta.json`` ({} for math runs): the
    isolation the program judge will use (``Sandbox.isolation.mode``; only ``"bwrap"`` is an OS
    sandbox). Without an OS sandbox, or when one of the run's ``task_paths`` is inside the
    sandbox's view, a main- or calibration-stage run is refused (``ConfigError``, one line)
    unless the recipe sets ``sandbox.allow_weak_isolation = true``; smoke and pilot runs go on
    with a warning on stderr (the run's ``train.log``)."""
    cfg, stage = spec.config, spec.stage
    if cfg.task.name != "code":
        return {}
    lim = sandbox_limits(cfg.rewards.sandbox)
    try:
        iso = probe_isolation(lim.python, lim.drop_uid, lim.network, lim.bwrap)
    except SandboxUnavailableError as e:  # no interpreter at all, or network = "require" unmet
        raise ConfigError(f"{where}{e}") from None
    shown = [p for p in task_paths(spec) if iso.visible(p)] if iso.os_sandbox else []
    if iso.os_sandbox and not shown:
        return {"judge_isolation": iso.mode}
    mode = "bwrap-task-visible" if iso.os_sandbox else iso.mode
    why = _weak_reason(iso, shown)
    if stage in STRICT_STAGES and not cfg.rewards.sandbox.allow_weak_isolation:
        fix = ("move those files out of the interpreter's folders" if iso.os_sandbox
               else "install bubblewrap (with user namespaces allowed)")
        raise ConfigError(f"{where}{stage}-stage code rewards need an OS sandbox for the program judge, and there is "
                          f"none: {why}; {fix}, or accept weak isolation ({mode!r}: programs can read host files) "
                          f"with {WEAK_ISOLATION_KEY} = true in the recipe")
    allowed = f"{WEAK_ISOLATION_KEY} = true" if stage in STRICT_STAGES else f"allowed for the {stage} stage"
    print(f"warning: {where}program judge with weak isolation {mode!r} ({why}): {allowed}", file=sys.stderr)
    return {"judge_isolation": mode}


def make_sandbox(cfg) -> Sandbox:
    """The run's program judge (probes the machine and calibrates T's fixed overhead once)."""
    return Sandbox(sandbox_limits(cfg.rewards.sandbox))
