"""Per-iteration rewards of the trainer: the verifier reward, or reward channels + an aggregation rule.

Issue 7 (``docs/multi-reward.md``, "Wiring in the trainer"). A recipe without ``channels`` trains
on the verifier reward exactly as before (``verify_rewards``; credit computes eq. 1). A recipe
with ``channels`` scores every completion on each channel (``trainer/channels.py``), shapes the
group's rewards with the ``aggregation`` rule (``trainer/aggregate.py``) and hands the rule's
sequence-level advantages to the credit rule (``outcome_credit(advantages=...)``).

* ``channels``: ``["correct", "negative"]`` or tables ``{name = "brief", threshold = 20}``; the
  ``correct`` channel uses the recipe's ``reward_verifier`` unless it names its own ``verifier``.
* ``aggregation``: a ``parse_aggregation`` table (``rule``, ``lam``, ``beta``, ``tau``, ...);
  ``{}`` is the rule ``additive`` (the table's default), ``primary`` trains on the anchor alone.
* ``anchor``: ``""`` keeps ``aggregation.anchor`` (an index, default 0 = the first channel); a
  channel name selects that channel; ``"elected"`` reads ``<study>/election.json`` (written by
  ``prereg elect``) when the run starts.

Code tasks (``task = "code"``; docs/multi-reward.md, "Program channels in training"): the
channels ``program_correct`` and ``program_fast`` read one sandbox result per completion,
judged once per iteration (``channels.judge_programs``: distinct (program, tests) pairs, at most
``sandbox.max_workers`` at a time) and shared by both; the rewarder owns the run's ``Sandbox``.
A code task without ``channels`` trains on ``program_correct`` alone (rule ``primary``: eq. 1 on
R_P); the verifier reward reads a math answer and is never used for programs. The math channels
``correct`` and ``negative`` are refused on code tasks, program channels on math tasks.

No torch at import (``trainer.config`` validates recipes with :func:`check_reward_config`).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from trainer.aggregate import AggregationConfig, LagrangeState, group_advantages, iteration_log, parse_aggregation
from trainer.channels import Channel, Completion, get_channel, judge_programs, score_channels
from trainer.config import ConfigError, SandboxSettings
from trainer.sandbox import (Isolation, ProgramResult, Sandbox, SandboxLimits, SandboxUnavailableError,
                             probe_isolation)

ELECTION_FILE = "election.json"

__all__ = ["CODE_DEFAULT_CHANNEL", "ELECTION_FILE", "IterationRewards", "Rewarder", "check_reward_config",
           "eval_channel_counts", "judge_meta", "make_rewarder", "make_sandbox", "read_election", "sandbox_limits",
           "state_from_dict", "state_to_dict"]

CODE_DEFAULT_CHANNEL = "program_correct"  # a code task's reward when the recipe lists no channels
MATH_ONLY = ("correct", "negative")  # channels that read a final answer with the math verifier
CODE_CREDIT = ("outcome",)  # dense rules score continuations with the math verifier


@dataclass(frozen=True)
class IterationRewards:
    """What the credit block gets: rewards [N] (the shaped scalar, or the anchor channel when the
    rule has none), advantages [N] (None: eq. 1 on the rewards), log columns, the rule's state."""

    rewards: Any  # torch.Tensor
    advantages: Any  # torch.Tensor | None
    log: dict[str, float] = field(default_factory=dict)
    state: Any = None


def _channel_spec(item: str | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if isinstance(item, str):
        return item, {}
    d = dict(item)
    name = d.pop("name", None)
    if not isinstance(name, str):
        raise ValueError("channels: a channel table needs name = \"<channel>\"")
    return name, d


def build_channels(cfg) -> list[Channel]:
    """The recipe's channels (``correct`` gets the recipe's verifier unless it names one); a code
    task without channels: ``program_correct``."""
    out = []
    for item in cfg.rewards.channels or ([CODE_DEFAULT_CHANNEL] if cfg.task.name == "code" else []):
        name, params = _channel_spec(item)
        if name == "correct":
            params.setdefault("verifier", cfg.rewards.verifier)
        out.append(get_channel(name, **params))
    return out


def check_reward_config(cfg) -> None:
    """Validate the multi-reward block of a recipe; ValueErrors (one line) for pydantic."""
    try:
        agg = parse_aggregation(cfg.rewards.aggregation)
    except ConfigError as e:
        raise ValueError("; ".join(e.lines)) from None
    code = cfg.task.name == "code"
    if code and cfg.credit.rule not in CODE_CREDIT:
        raise ValueError(f"task = 'code': credit {cfg.credit.rule!r} scores continuations with the math verifier; "
                         "use credit = 'outcome'")
    if code and cfg.selection.rule == "dynamic":
        raise ValueError("task = 'code': selection 'dynamic' checks groups with the math verifier; "
                         "use another selection rule")
    if not cfg.rewards.channels:
        if cfg.rewards.aggregation or cfg.rewards.anchor:
            raise ValueError("aggregation/anchor need channels (e.g. channels = [\"correct\", \"negative\"])")
        return
    names = []
    for item in cfg.rewards.channels:
        name, params = _channel_spec(item)
        if get_channel(name, **params).needs_program and not code:  # unknown names / parameters: ValueError
            raise ValueError(f"channels: {name!r} judges programs: it needs task = 'code' (problems with tests, "
                             "the sandbox)")
        if code and name in MATH_ONLY:
            raise ValueError(f"channels: {name!r} reads a final answer with the math verifier; task = 'code' "
                             f"judges programs (use {CODE_DEFAULT_CHANNEL!r})")
        names.append(name)
    if len(set(names)) != len(names):
        raise ValueError(f"channels: a channel is listed twice ({', '.join(names)})")
    if cfg.rewards.anchor and cfg.rewards.anchor != "elected" and cfg.rewards.anchor not in names:
        raise ValueError(f"anchor: {cfg.rewards.anchor!r} is not one of the channels ({', '.join(names)}) nor 'elected'")
    if agg.anchor >= len(names):
        raise ValueError(f"aggregation: anchor {agg.anchor} out of range for {len(names)} channels")
    K = len(names)
    if agg.rule == "weighted" and len(agg.weights or ()) != K:
        raise ValueError(f"aggregation: rule 'weighted' needs {K} weights, got {len(agg.weights or ())}")
    if agg.rule == "tag" and not isinstance(agg.lam, (int, float)) and len(agg.lam) != K - 1:
        raise ValueError(f"aggregation: rule 'tag' needs one λ per auxiliary channel ({K - 1}), got {len(agg.lam)}")


def read_election(study_dir: str | Path) -> dict[str, Any]:
    """``<study>/election.json`` (``prereg elect``); a clear ConfigError when it is missing."""
    path = Path(study_dir) / ELECTION_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no anchor election; anchor = 'elected' needs it: run `prereg elect {study_dir}` first") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: unreadable election record ({e.msg})") from None
    if not isinstance(data.get("elected"), str):
        raise ConfigError(f"{path}: the election record names no elected channel")
    return data


@dataclass
class Rewarder:
    """The per-iteration reward of one run (see the module docstring)."""

    channels: list[Channel]
    names: list[str]
    agg: AggregationConfig | None
    anchor_name: str = ""
    sandbox: Sandbox | None = None  # task = "code": the program judge (made once, at run start)

    @property
    def multi(self) -> bool:
        return self.agg is not None

    @property
    def kl_beta(self) -> float:
        from trainer.aggregate import rule_kl_beta  # noqa: PLC0415

        return rule_kl_beta(self.agg) if self.agg is not None else 0.0

    def __call__(self, verifier, texts: Sequence[str], lengths: Sequence[int], problems: Sequence[Any],
                 group_size: int, *, state: Any = None, rng: np.random.Generator | None = None,
                 l_max: int | None = None, eps: float = 1e-6) -> IterationRewards:
        import torch  # noqa: PLC0415

        if self.agg is None:
            from trainer.loop import verify_rewards  # noqa: PLC0415

            return IterationRewards(verify_rewards(verifier, list(texts), [p.answer for p in problems]), None, {}, state)
        comps = [Completion(t, int(n)) for t, n in zip(texts, lengths)]
        S, program_log = _score_memo(self.channels, comps, problems, self.sandbox)
        G = len(texts) // group_size
        R = S.reshape(G, group_size, len(self.channels))
        L = np.asarray(lengths, dtype=np.float64).reshape(G, group_size)
        res = group_advantages(R, rule=self.agg, lengths=L, l_max=l_max, rng=rng, state=state, eps=eps)
        log = iteration_log(R, self.names, res, self.agg)
        shaped = res.rewards if res.rewards is not None else R[:, :, self.agg.anchor]
        adv = np.asarray(res.advantages, dtype=np.float64)
        # groups whose advantages carry a signal (the verifier path's "mixed" groups)
        log["mixed_share"] = float((np.abs(adv).max(axis=1) > 0).mean())
        log.update(program_log)
        return IterationRewards(torch.tensor(shaped.reshape(-1), dtype=torch.float32),
                                torch.tensor(adv.reshape(-1), dtype=torch.float32), log, res.state)


def _score_memo(channels: Sequence[Channel], comps: Sequence[Completion], problems: Sequence[Any],
                sandbox: Sandbox | None = None) -> tuple[np.ndarray, dict[str, float]]:
    """score_channels with identical (text, length, answer, tests) quadruples scored once, and,
    when a channel judges programs, the judge's log columns (``program/*``)."""
    keys = [(c.text, int(c.tokens), getattr(p, "answer", None), tuple(getattr(p, "tests", ()) or ()))
            for c, p in zip(comps, problems)]
    first: dict[tuple, int] = {}
    idx = [first.setdefault(k, len(first)) for k in keys]
    uniq_c, uniq_p = [None] * len(first), [None] * len(first)
    for i, j in enumerate(idx):
        if uniq_c[j] is None:
            uniq_c[j], uniq_p[j] = comps[i], problems[i]
    programs, log = None, {}
    if any(ch.needs_program for ch in channels):
        if sandbox is None:
            raise ValueError("program channels need the run's sandbox (task = 'code')")
        programs, log = _judge(sandbox, uniq_c, uniq_p, idx)
    S = score_channels(channels, uniq_c, uniq_p, programs=programs)
    return (S[np.asarray(idx, dtype=int)] if len(idx) else np.zeros((0, len(channels)))), log


def _judge(sandbox: Sandbox, comps: Sequence[Completion], problems: Sequence[Any],
           idx: Sequence[int]) -> tuple[list[ProgramResult], dict[str, float]]:
    """Each distinct completion's program judged once; ``program/seconds`` (wall seconds of the
    judge: part of the credit stage), ``program/judged`` (distinct programs run),
    ``program/timeout_rate`` (over all completions) and ``program/start_errors`` (tests the
    machine could not start: EAGAIN, ENOMEM; a failure, not an exception)."""
    t0 = time.perf_counter()
    programs = judge_programs(sandbox, comps, problems)
    secs = time.perf_counter() - t0
    distinct = {id(r): r for r in programs}.values()
    log = {"program/seconds": secs, "program/judged": float(len(distinct)),
           "program/timeout_rate": float(np.mean([programs[j].timed_out for j in idx])) if len(idx) else 0.0,
           "program/start_errors": float(sum(t.detail.startswith("sandbox: could not start")
                                             for r in distinct for t in r.per_test))}
    return programs, log


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


def make_rewarder(cfg, study_dir: str | Path | None = None) -> Rewarder:
    """The run's rewarder; ``anchor = "elected"`` reads the election record now (run start). A code
    task gets the sandbox, and without channels trains on ``program_correct`` (rule ``primary``)."""
    code = cfg.task.name == "code"
    if not cfg.rewards.channels and not code:
        return Rewarder([], [], None)
    channels = build_channels(cfg)
    names = [c.name for c in channels]
    agg = parse_aggregation(cfg.rewards.aggregation if cfg.rewards.channels else {"rule": "primary"})
    anchor = cfg.rewards.anchor
    if anchor == "elected":
        if study_dir is None:
            raise ConfigError("anchor = 'elected' needs the study folder (its election.json)")
        anchor = read_election(study_dir)["elected"]
        if anchor not in names:
            raise ConfigError(f"{Path(study_dir) / ELECTION_FILE}: the elected channel {anchor!r} is not one of "
                              f"this configuration's channels ({', '.join(names)})")
    if anchor:
        agg = agg.model_copy(update={"anchor": names.index(anchor)})
    return Rewarder(channels, names, agg, names[agg.anchor], make_sandbox(cfg) if code else None)


def state_to_dict(state: Any) -> dict[str, Any] | None:
    """The aggregation state for a checkpoint (the Lagrangian ν; None for stateless rules)."""
    if isinstance(state, LagrangeState):
        return {"kind": "lagrange", "nu": list(state.nu), "steps": state.steps}
    return None


def state_from_dict(data: dict[str, Any] | None) -> Any:
    if data and data.get("kind") == "lagrange":
        return LagrangeState(nu=tuple(float(x) for x in data["nu"]), steps=int(data.get("steps", 0)))
    return None


# ---------------------------------------------------------------------------------------------
# Evaluation counts
# ---------------------------------------------------------------------------------------------
def eval_channels(cfg) -> list[Channel]:
    """The auxiliary channels counted at evaluation. Math: the recipe's non-correct channels, and
    ``negative`` always (cheap; threshold-free). Code: the recipe's channels other than
    ``program_correct`` (that is ``correct``), and ``program_fast`` always (the recipe's threshold
    if it sets one, else 60 ms). ``brief`` only when the recipe sets one (its threshold is the
    recipe's)."""
    out: dict[str, Channel] = {}
    code = cfg.task.name == "code"
    for ch in (build_channels(cfg) if cfg.rewards.channels else []):
        if ch.name not in ("correct", CODE_DEFAULT_CHANNEL) and (code or not ch.needs_program):
            out[ch.name] = ch
    if code:
        out.setdefault("program_fast", get_channel("program_fast"))
    else:
        out.setdefault("negative", get_channel("negative"))
    return list(out.values())


def eval_channel_counts(channels: Sequence[Channel], texts: Sequence[str], lengths: Sequence[int], problem: Any,
                        correct: Sequence[bool], programs: Sequence[ProgramResult] | None = None) -> dict[str, int]:
    """Per-problem eval-row columns: ``ch_<name>`` = samples with channel = 1 and
    ``ch_correct_<name>`` = samples correct (default verifier; code: every test passed) with
    channel = 1. Program channels read ``programs`` (one sandbox result per sample)."""
    row: dict[str, int] = {}
    if not channels:
        return row
    S = score_channels(channels, [Completion(t, int(n)) for t, n in zip(texts, lengths)], [problem] * len(texts),
                       programs=programs)
    ok = np.asarray(correct, dtype=bool)
    for k, ch in enumerate(channels):
        hit = S[:, k] > 0
        row[f"ch_{ch.name}"] = int(hit.sum())
        row[f"ch_correct_{ch.name}"] = int((hit & ok).sum())
    return row
