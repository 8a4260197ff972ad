"""Synthetic run logs: realistic studies with known effects, written through the real writer.

Model of accuracy (all on the logit scale, per configuration ``c``, seed ``s``, problem ``j``, at
token fraction ``f = tokens / B``)::

    logit p[c,s,j](f) = a_c(f) + d_j + u_s + v_cs

- ``d_j ~ N(0, problem_sd)``: problem difficulty, shared by every configuration and seed;
- ``u_s ~ N(0, seed_sd)``: seed effect, shared by the configurations of a seed (pairing removes it);
- ``v_cs ~ N(0, run_sd)``: what is left to one run (the noise paired differences keep);
- ``a_c(f)`` is calibrated so that the mean over the primary set's problems of
  ``expit(a_c(f) + d_j)`` equals ``base_accuracy + (gain + effect_c) * shape(f)``, with
  ``shape(f) = (1 - exp(-rate f)) / (1 - exp(-rate))`` (``shape(1) = 1``). So each configuration's
  ``effect`` (a fraction) is the difference in expected accuracy at B, and it grows over training.

Evaluation draws use common random numbers within a seed (dense-rewards paper §C.1, "Pools and evaluation"): sample ``k`` of
problem ``j`` at evaluation ``e`` is correct when ``U[s,e,j,k] < p``, with the same uniforms for
every configuration of seed ``s``; the evaluation sampling seed logged is the same too. An answer
is boxed when ``V[s,e,j,k] < boxed rate``; strict-correct = correct and boxed, so strict <= default.
Drift lowers a configuration's boxed rate linearly in ``f`` by ``drift[c]`` at B (§C.1 "Verifiers").

Iterations: tokens per iteration ``1 / updates_per_token`` (one update per iteration) with
lognormal jitter, split into rollout/continuation/discarded shares; seconds = tokens x
``time_per_token`` x jitter, split over the five stages. Evaluation ``e`` happens after the first
iteration whose cumulative tokens reach ``e * eval_every``, so eval rows' cumulative tokens,
seconds and updates are exactly those of the iteration rows.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterable, Literal, Mapping, Sequence, TypeVar

import numpy as np
import pandas as pd
from scipy.special import expit, logit

from .. import __version__
from ..runlog import RunLogWriter, RunMeta, run_dir
from ..study.audit import split_device

T = TypeVar("T")

# Share of training time by stage (selection, generation, credit, update, weight sync).
_STAGE_SHARES = np.array([0.03, 0.55, 0.20, 0.18, 0.04])
_STAGES = ("seconds_selection", "seconds_generation", "seconds_credit", "seconds_update", "seconds_weight_sync")


@dataclass
class SynthStudy:
    """What :func:`generate_study` wrote: the study folder, run folders, and the truth.

    ``truth``: one row per (configuration, seed, eval_index, eval_set) with ``tokens``,
    ``train_seconds``, ``updates`` and ``expected_accuracy`` (mean over problems of the true p).
    ``effects``: the configured effect at B per configuration (fractions).
    """

    path: Path
    runs: list[Path]
    truth: pd.DataFrame
    effects: dict[str, float]


def _per_config(value: T | Mapping[str, T], name: str, configs: Iterable[str]) -> dict[str, T]:
    if isinstance(value, Mapping):
        missing = [c for c in configs if c not in value]
        if missing:
            raise ValueError(f"{name}: no value for configuration {missing[0]!r}")
        return {c: value[c] for c in configs}
    return {c: value for c in configs}


def _run_devices(devices: str | Mapping[str, str | Mapping[int, str]], configs: list[str],
                 seeds: list[int]) -> dict[tuple[str, int], dict[str, str]]:
    """(configuration, seed) → the RunMeta fields of its device (``device``, and ``cpu`` for ``"cpu (<model>)"``)."""
    out = {}
    for c, d in _per_config(devices, "devices", configs).items():
        for s in seeds:
            if isinstance(d, Mapping) and s not in d:
                raise ValueError(f"devices: configuration {c!r} names no device for seed {s}")
            dev, cpu = split_device(d[s] if isinstance(d, Mapping) else d)
            out[(c, s)] = {"device": dev, **({"cpu": cpu} if cpu else {})}
    return out


def _shape(f: np.ndarray, rate: float) -> np.ndarray:
    if abs(rate) < 1e-9:
        return f
    return (1 - np.exp(-rate * f)) / (1 - np.exp(-rate))


def _calibrate(targets: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Logit shifts ``a`` with ``mean_j expit(a + d_j) = target`` (vectorized).

    ``mean_j expit(a + d_j)`` lies between ``expit(a + min d)`` and ``expit(a + max d)``, so the root
    is in ``[logit t - max d, logit t - min d]``; 18 halvings narrow that bracket to about 1e-5 of
    its width, and three Newton steps (quadratic from there) reach the root to within 1e-12.
    """
    t = np.clip(targets, 1e-4, 1 - 1e-4)
    lo = logit(t) - d.max()
    hi = logit(t) - d.min()
    for _ in range(18):
        mid = (lo + hi) / 2
        up = expit(mid[:, None] + d[None, :]).mean(axis=1) < t
        lo = np.where(up, mid, lo)
        hi = np.where(up, hi, mid)
    a = (lo + hi) / 2
    for _ in range(3):
        p = expit(a[:, None] + d[None, :])
        a = a - (p.mean(axis=1) - t) / (p * (1 - p)).mean(axis=1)
    return a


def _stream(entropy: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=tuple(key)))


def _cfg_key(name: str) -> int:
    return zlib.crc32(name.encode())


def _simulate_iterations(rng, target_tokens, tokens_per_it, sec_per_token, cont_share, disc_share, acc0, acc1,
                         fixed_tokens: bool = False):
    """Iteration rows until cumulative tokens reach ``target_tokens`` (vectorized, in chunks);
    ``fixed_tokens``: every iteration generates exactly ``tokens_per_it`` (an iteration budget's
    evaluations then fall on exact iteration counts)."""
    chunks = []
    total = 0
    while total < target_tokens:
        n = int(np.ceil((target_tokens - total) / tokens_per_it * 1.2)) + 4
        tok = np.maximum(1, np.round(tokens_per_it * rng.lognormal(-0.02, 0.2, n))).astype(np.int64)
        if fixed_tokens:  # drawn all the same, so the later draws of the stream do not move
            tok = np.full(n, max(1, int(round(tokens_per_it))), dtype=np.int64)
        chunks.append(tok)
        total += int(tok.sum())
    tok = np.concatenate(chunks)
    cum = np.cumsum(tok)
    n_it = int(np.searchsorted(cum, target_tokens, side="left")) + 1
    tok, cum = tok[:n_it], cum[:n_it]
    cont = np.round(tok * cont_share).astype(np.int64)
    disc = np.round(tok * disc_share).astype(np.int64)
    roll = tok - cont - disc
    secs = tok * sec_per_token * rng.lognormal(0, 0.05, n_it)
    stage = secs[:, None] * _STAGE_SHARES[None, :]
    frac = np.linspace(0, 1, n_it)
    reward = np.clip(acc0 + (acc1 - acc0) * frac + rng.normal(0, 0.05, n_it), 0, 1)
    df = pd.DataFrame({
        "iteration": np.arange(n_it, dtype=np.int64),
        "tokens_rollout": roll,
        "tokens_continuation": cont,
        "tokens_discarded": disc,
        **{name: stage[:, i] for i, name in enumerate(_STAGES)},
        "updates": np.arange(1, n_it + 1, dtype=np.int64),
        "reward_mean": reward,
        "mixed_share": np.clip(1 - reward**8 - (1 - reward) ** 8 + rng.normal(0, 0.05, n_it), 0, 1),
        "length_mean": np.clip(rng.normal(300, 20, n_it), 1, None),
        "truncation_rate": np.clip(rng.normal(0.1, 0.02, n_it), 0, 1),
    })
    # the groups without signal split the rest in the ratio of all-wrong (1-r)^8 to all-correct r^8
    # (no further draws, so the other columns stay what they were for the same rng)
    wrong, right = (1 - reward) ** 8, reward**8
    rest = (1 - df["mixed_share"].to_numpy()) / np.maximum(wrong + right, 1e-300)
    df["all_wrong_share"], df["all_correct_share"] = np.clip(rest * wrong, 0, 1), np.clip(rest * right, 0, 1)
    return df, cum, np.cumsum(secs)


def problem_levels(difficulty: np.ndarray, levels: Sequence[int] = (1, 2, 3, 4, 5)) -> np.ndarray:
    """A level per problem: the easiest share 1/len(levels) of the set gets the first level, and
    so on (harder problems, higher MATH levels)."""
    rank = np.argsort(np.argsort(difficulty, kind="stable"), kind="stable")
    return np.asarray(levels, dtype=np.int64)[(rank * len(levels)) // max(1, len(difficulty))]


def generate_study(
    study_dir: str | Path,
    *,
    study: str = "synthetic",
    plan_hash: str = "0" * 64,
    configurations: Mapping[str, float] = {"control": 0.0, "treatment": 0.02},
    seeds: Iterable[int] = range(8),
    budget_tokens: int = 1_000_000,
    eval_every: int | None = None,
    eval_sets: Mapping[str, int] = {"math200": 200},
    budget_sets: Mapping[str, int] | None = None,
    set_levels: Mapping[str, Sequence[int]] | None = None,
    length_effects: Mapping[str, float] | None = None,
    samples: int = 8,
    stage: str = "main",
    time_per_token: float | Mapping[str, float] = 1e-4,
    updates_per_token: float | Mapping[str, float] | None = None,
    continuation_share: float | Mapping[str, float] = 0.0,
    discard_share: float | Mapping[str, float] = 0.0,
    base_accuracy: float = 0.30,
    gain: float = 0.15,
    curve_rate: float = 2.0,
    problem_sd: float = 1.5,
    seed_sd: float = 0.2,
    run_sd: float = 0.05,
    boxed_rate: float = 0.98,
    drift: Mapping[str, float] | None = None,
    drift_seeds: Iterable[int] | None = None,
    extend_to: float | Mapping[str, float] = 1.0,
    greedy: bool = True,
    rng: int | np.random.Generator = 0,
    fsync: bool = False,
    keep_jsonl: bool = False,
    started_at: datetime | None = None,
    spacing: timedelta = timedelta(minutes=1),
    iteration_columns: Mapping[str, Mapping[str, float]] | None = None,
    fixed_iteration_tokens: bool = False,
    trainer: str | Mapping[str, str] = "builtin",
    unsplit_time: bool = False,
    strict_columns: bool = True,
    eval_seeds: Literal["common", "differ", "unknown"] = "common",
    devices: str | Mapping[str, str | Mapping[int, str]] = "synthetic",
) -> SynthStudy:
    """Write a synthetic study to ``<study_dir>/runs/<configuration>/seed-<n>/`` and return the truth.

    ``configurations``: name -> effect at B (fraction added to expected accuracy, growing over
    training). ``eval_sets`` are scored at every evaluation (every ``eval_every`` tokens, default
    B/16, so 17 evaluations to B); ``budget_sets`` only at the initial evaluation and the first
    at or after B, like the further test sets of S33/S34 (§C.1). ``time_per_token``,
    ``updates_per_token`` (default 64/B: 64 iterations of one update to B), ``continuation_share``,
    ``discard_share`` and ``extend_to`` (multiple of B each run trains to) may be given per
    configuration. ``drift``: configuration -> drop of the boxed rate reached at B (for
    ``drift_seeds``, default all). All randomness comes from ``rng``; the same ``rng`` gives
    the same logs. Runs are written through :class:`~prereg_kit.runlog.RunLogWriter`, buffered,
    straight to Parquet (through JSON lines, kept, when ``keep_jsonl``).
    Eval rows carry each problem's ``level`` (:func:`problem_levels`, from ``set_levels`` or 1-5)
    and ``log_length``: ln 300 + a problem offset N(0, 0.3) + ``length_effects[c]`` (log scale,
    reached at B like the accuracy effect) + run noise N(0, 0.05) + evaluation noise N(0, 0.02),
    drawn from streams of their own (the other columns do not change with them). ``started_at``: the first run's start time (runs start ``spacing`` apart, a minute by default).
    ``iteration_columns``: column -> {configuration: mean}: further per-iteration columns (such as
    a filter's predicted success, read by manipulation checks), mean ± 0.05 noise clipped to [0, 1],
    0.5 for configurations not named; drawn from a stream of their own, so the other logs stay the same.
    ``fixed_iteration_tokens``: every iteration generates exactly 1/``updates_per_token`` tokens, so
    evaluations every k iterations' worth of tokens fall on exact iteration counts (iteration budgets).

    What runs of another trainer look like (docs/run-log.md, "Runs of other trainers"), none of
    which changes a draw: ``trainer`` (per configuration or one name) is written as
    ``meta.trainer``; ``unsplit_time`` logs one ``seconds_step`` per iteration instead of the five
    stages; ``strict_columns=False`` leaves out ``correct_strict`` and ``boxed``; ``eval_seeds``
    ``"differ"`` logs a different sampling seed per configuration (the outcomes still use common
    random numbers) and ``"unknown"`` logs none. ``devices``: ``meta.device`` of every run, per
    configuration, or per configuration a ``{seed: device}`` naming each of its seeds;
    ``"cpu (<model>)"`` is written as device ``cpu`` with ``meta.cpu`` (``prereg_kit.study.audit.device_type``).
    """
    configs = list(configurations)
    seeds = [int(s) for s in seeds]
    B = int(budget_tokens)
    every = int(eval_every) if eval_every else int(np.ceil(B / 16))
    upt = _per_config(updates_per_token if updates_per_token is not None else 64 / B, "updates_per_token", configs)
    tpt = _per_config(time_per_token, "time_per_token", configs)
    cshare = _per_config(continuation_share, "continuation_share", configs)
    dshare = _per_config(discard_share, "discard_share", configs)
    ext = _per_config(extend_to, "extend_to", configs)
    trainers = _per_config(trainer, "trainer", configs)
    run_device = _run_devices(devices, configs, seeds)
    if eval_seeds not in ("common", "differ", "unknown"):
        raise ValueError(f"eval_seeds must be 'common', 'differ' or 'unknown', not {eval_seeds!r}")
    drift = dict(drift or {})
    drift_seeds_set = set(seeds if drift_seeds is None else (int(s) for s in drift_seeds))
    budget_sets = dict(budget_sets or {})
    entropy = int(rng.integers(2**63)) if isinstance(rng, np.random.Generator) else int(rng)

    # Evaluation indices: e * every tokens; the reading at B is evaluation e_B.
    e_B = int(np.ceil(B / every - 1e-12))
    n_evals = {c: int(np.ceil(ext[c] * B / every - 1e-12)) + 1 for c in configs}
    e_max = max(n_evals.values())

    # Problem difficulties (shared), and the calibrated curves a_c(f) on a grid of f.
    all_sets = list(eval_sets.items()) + [(k, v) for k, v in budget_sets.items() if k not in eval_sets]
    prng = _stream(entropy, 0)
    diffs = {name: prng.normal(0, problem_sd, n) for name, n in all_sets}
    levels = {name: problem_levels(diffs[name], (set_levels or {}).get(name) or (1, 2, 3, 4, 5)) for name, _ in all_sets}
    lrng = _stream(entropy, 4)
    len_offset = {name: lrng.normal(0, 0.3, n) for name, n in all_sets}
    problem_ids = {name: np.char.add(f"{name}-", np.char.zfill(np.arange(n).astype(str), 4)) for name, n in all_sets}
    primary = next(iter(eval_sets))
    f_grid = np.linspace(0, max(ext.values()) * 1.1 + 0.1, 801)
    # configurations with the same effect have the same curve: calibrated once per effect
    curve = _shape(f_grid, curve_rate)
    by_effect = {e: _calibrate(base_accuracy + (gain + e) * curve, diffs[primary])
                 for e in {float(v) for v in configurations.values()}}
    shifts = {c: by_effect[float(configurations[c])] for c in configs}

    started = started_at or datetime(2026, 1, 1, tzinfo=timezone.utc)  # fixed default: same inputs, same logs
    runs, truth = [], []
    for s in seeds:
        srng = _stream(entropy, 1, s)
        u_s = srng.normal(0, seed_sd)
        # Common random numbers: one set of uniforms per seed, shared by its configurations.
        crn = {}
        for name, n in all_sets:
            idx = np.arange(e_max) if name in eval_sets else np.array([0, e_B])
            crn[name] = (idx, srng.random((idx.size, n, samples)), srng.random((idx.size, n, samples)), srng.random((idx.size, n)))
        seed_of = {
            (name, e): int(np.random.SeedSequence(entropy, spawn_key=(2, s, k, int(e))).generate_state(1)[0])
            for k, (name, _) in enumerate(all_sets) for e in crn[name][0]
        }
        for c in configs:
            crng = _stream(entropy, 3, s, _cfg_key(c))
            v_cs = crng.normal(0, run_sd)
            lr = _stream(entropy, 5, s, _cfg_key(c))
            len_run = lr.normal(0, 0.05)
            ne = n_evals[c]
            last_target = (ne - 1) * every
            acc1 = base_accuracy + gain + configurations[c]
            iters, cum_tok, cum_sec = _simulate_iterations(
                crng, last_target, 1.0 / upt[c], tpt[c], cshare[c], dshare[c], base_accuracy, acc1,
                fixed_tokens=fixed_iteration_tokens)
            if iteration_columns:
                xrng = _stream(entropy, 7, s, _cfg_key(c))
                for col, means in iteration_columns.items():
                    iters[col] = np.clip(means.get(c, 0.5) + xrng.normal(0, 0.05, len(iters)), 0, 1)
            # Evaluation e follows the first iteration whose cumulative tokens reach e * every.
            pos = np.searchsorted(cum_tok, np.arange(1, ne) * every, side="left")
            ev_iter = np.concatenate([[0], pos + 1]).astype(np.int64)
            ev_tok = np.concatenate([[0], cum_tok[pos]]).astype(np.int64)
            ev_sec = np.concatenate([[0.0], cum_sec[pos]])
            ev_upd = np.concatenate([[0], iters["updates"].to_numpy()[pos]]).astype(np.int64)
            f = ev_tok / B
            a = np.interp(f, f_grid, shifts[c])
            dr = drift.get(c, 0.0) if s in drift_seeds_set else 0.0
            q = np.clip(boxed_rate - dr * f, 0, 1)
            frames, set_order = [], []
            for k, (name, _) in enumerate(all_sets):
                idx, U, V, G = crn[name]
                keep = idx < ne
                idx, U, V, G = idx[keep], U[keep], V[keep], G[keep]
                p = expit(a[idx, None] + diffs[name][None, :] + u_s + v_cs)
                hit = U < p[:, :, None]
                box = V < q[idx, None, None]
                n_e, n_p = p.shape
                frames.append(pd.DataFrame({
                    "eval_index": np.repeat(idx, n_p).astype(np.int64),
                    "iteration": np.repeat(ev_iter[idx], n_p),
                    "eval_set": name,
                    "problem_id": np.tile(problem_ids[name], n_e),
                    "eval_seed": np.repeat([(seed_of[(name, e)] + (_cfg_key(c) if eval_seeds == "differ" else 0)) % 2**62
                                            for e in idx], n_p).astype(np.int64),
                    "tokens": np.repeat(ev_tok[idx], n_p),
                    "train_seconds": np.repeat(ev_sec[idx], n_p),
                    "updates": np.repeat(ev_upd[idx], n_p),
                    "samples": samples,
                    "correct": hit.sum(axis=2).ravel(),
                    "correct_strict": (hit & box).sum(axis=2).ravel(),
                    "boxed": box.sum(axis=2).ravel(),
                    **({"greedy_correct": (G < p).ravel()} if greedy else {}),
                    "level": np.tile(levels[name], n_e),
                    "log_length": (np.log(300.0) + len_offset[name][None, :] + len_run
                                   + (length_effects or {}).get(c, 0.0) * _shape(f[idx], curve_rate)[:, None]
                                   + lr.normal(0, 0.02, (n_e, n_p))).ravel().clip(0),
                }))
                set_order.append(np.full(n_e * n_p, k))
                truth.append(pd.DataFrame({
                    "configuration": c, "seed": s, "eval_index": idx, "eval_set": name,
                    "tokens": ev_tok[idx], "train_seconds": ev_sec[idx], "updates": ev_upd[idx],
                    "expected_accuracy": p.mean(axis=1),
                }))
            evals = pd.concat(frames, ignore_index=True)
            dropped = (["eval_seed"] if eval_seeds == "unknown" else []) + ([] if strict_columns else ["correct_strict", "boxed"])
            if dropped:
                evals = evals.drop(columns=dropped)
            if unsplit_time:  # a trainer that times whole steps only
                iters = iters.assign(seconds_step=iters[list(_STAGES)].sum(axis=1)).drop(columns=list(_STAGES))
            evals = evals.iloc[np.lexsort((np.concatenate(set_order), evals["eval_index"].to_numpy()))]  # by index, then set
            folder = run_dir(study_dir, c, s, stage)
            meta = RunMeta(
                study=study, configuration=c, seed=s, stage=stage, plan_hash=plan_hash,
                config={"synthetic": True, "effect": configurations[c], "budget_tokens": B, "extend_to": ext[c]},
                started_at=started + spacing * len(runs), tool_version=__version__,
                trainer=trainers[c], **run_device[(c, s)],
            )
            w = RunLogWriter(folder, meta, fsync=fsync, buffered=not keep_jsonl)
            w.log_iterations(iters)
            w.log_eval_rows(evals)
            w.finish("complete", keep_jsonl=keep_jsonl)
            runs.append(folder)
    truth_df = pd.concat(truth, ignore_index=True).sort_values(
        ["configuration", "seed", "eval_set", "eval_index"], ignore_index=True)
    return SynthStudy(Path(study_dir), runs, truth_df, {c: float(configurations[c]) for c in configs})
