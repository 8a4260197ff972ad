"""Tracker exports (TensorBoard, MLflow, W&B) → the run log's iteration rows, through a key preset.

A tracker holds one value per logged key per step. What the compute axis needs from it is the
tokens each iteration generated (dense-rewards paper §2.3 "Two budgets", §C.1 "Implementation": the budget B
counts every generated token, rollouts, continuations and discarded groups, never the prompt) and the training seconds
(§2.3, App. D: the five stages; evaluation, logging and checkpointing excluded). A preset names, for
one trainer, which logged key gives which of our columns; ``iterations_from_metrics`` turns the steps frame into iteration rows and refuses
what a tracker cannot tell honestly:

- a cumulative token counter read from a float32 store (TensorBoard keeps float32: integers above
  2**24 are not exact there), and any per-step counter above 2**24 read from one;
- ``timing_s/step`` (verl: it includes validation and checkpointing), so it is in no preset;
- steps missing from the log (a logging interval that drops generation steps);
- dynamic sampling (verl's ``batch/num_gen_batches``): the kept tokens are not all tokens.

A preset maps our column → the tool's key. Stage seconds that are the sum of several timers are
written ``<stage>+<part>``; ``updates`` may name ``"step"``, the step index itself.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

import numpy as np
import pandas as pd

from .tracker_presets import PRESETS, TrackerError
from .tracker_records import shown

FLOAT32_EXACT = 2**24  # the largest integer range float32 holds exactly

STAGES = ("seconds_selection", "seconds_generation", "seconds_credit", "seconds_update", "seconds_weight_sync")
OURS = {"length_mean", "prompt_length_mean", "total_length_mean", "tokens_rollout", "tokens_rollout_cumulative",
        "tokens_total", "tokens_total_cumulative", "reward_mean", "mixed_share", "zero_std_share",
        "truncation_rate", "updates", "seconds_step", "generation_batches"}
WALL = "_wall"  # seconds since the run started at each step, as the tracker stamped it (readers add it)
_AT = re.compile(r"_at_(\d+)")
_VERL_BAD, _SLASHES, _HF_BAD = re.compile(r"[^/\w.\- :]"), re.compile(r"/+"), re.compile(r"[^0-9A-Za-z_\-\.\ :/]")
FLOAT64_EXACT = 2**53  # the largest integer range float64 (every tracker's JSON or store) holds exactly


def mlflow_key(key: str) -> str:
    """The name MLflow stores for a logged key: MLflow refuses ``@``, so loggers write ``_at_``
    (``val-core/x/reward/mean@4`` → ``val-core/x/reward/mean_at_4``)."""
    return key.replace("@", "_at_")


def logged_spellings(key: str) -> tuple[str, ...]:
    """The names a key may be stored under: as logged; MLflow's ``_at_``; verl's MLflow logger's
    (verl 0.9.1, verl/utils/tracking.py, ``_MlflowLoggingAdapter._sanitize_key``: ``@`` → ``_at_``,
    repeated ``/`` → one, any other character MLflow refuses → ``_``); transformers'
    ``MLflowCallback.on_log`` (5.24: every character but ``[0-9A-Za-z_-. :/]`` → ``_``, ``@`` too)."""
    verl = _VERL_BAD.sub("_", _SLASHES.sub("/", mlflow_key(key)))
    hf = _HF_BAD.sub("_", key)
    return tuple(dict.fromkeys((key, mlflow_key(key), verl, from_mlflow_key(verl), hf)))  # the MLflow reader maps _at_<n> back


def from_mlflow_key(name: str) -> str:
    """The logged key back from MLflow's name: ``_at_<digits>`` → ``@<digits>`` only (so a name
    that merely contains ``_at_``, e.g. ``data_at_rest``, is kept)."""
    return _AT.sub(r"@\1", name)


def resolve_preset(preset: str | Mapping[str, str]) -> dict[str, str]:
    """A preset by name, or a user mapping checked against our column names."""
    if isinstance(preset, str):
        if preset not in PRESETS:
            raise TrackerError(f"preset {preset!r}: unknown; known: {', '.join(PRESETS)} (or give a mapping)")
        return dict(PRESETS[preset])
    out = dict(preset)
    for ours, theirs in out.items():
        base = ours.split("+", 1)[0]
        if base not in OURS and base not in STAGES:
            raise TrackerError(f"preset: {ours!r} is not a column the importer knows "
                               f"({', '.join(sorted(OURS | set(STAGES)))})")
        if theirs == "timing_s/step":
            raise TrackerError("preset: timing_s/step includes validation and checkpointing; "
                               "map the stage timers (timing_s/gen, ...) instead")
    return out


def _column(steps: pd.DataFrame, key: str) -> pd.Series | None:
    """The tracker column for a tool key, in the tool's spelling or a logger's MLflow spelling."""
    for name in logged_spellings(key):
        if name in steps.columns:
            return pd.to_numeric(steps[name], errors="coerce")
    return None


def refuse_nonfinite(nonfinite: Mapping[str, Mapping[int, tuple[str, str]]], preset: Mapping[str, str]) -> None:
    """Refuse a NaN or infinite value logged for a key the preset maps (``nonfinite``: key -> step
    -> (value, where), as the readers record it): a count, a time or a rate cannot be read there."""
    for theirs in preset.values():
        for name in logged_spellings(theirs):
            if nonfinite.get(name):
                step = min(nonfinite[name])
                value, where = nonfinite[name][step]
                raise TrackerError(f"{where}: {name} is {value} at step {step}: a key the preset maps needs a finite "
                                   "value at every step it is logged")


def _step_at(i: int, steps: pd.Series | None) -> str:
    return f"step {int(steps.iloc[i])}" if steps is not None else f"row {i}"


def _exact_ints(values: pd.Series, key: str, float32: bool, *, cumulative: bool, steps: pd.Series | None = None) -> np.ndarray:
    if values.isna().any():
        i = int(np.flatnonzero(values.isna())[0])
        raise TrackerError(f"{key}: no value at {_step_at(i, steps)}: tokens cannot be counted there")
    big = np.flatnonzero(~np.isfinite(values.to_numpy(dtype=float)) | (values.abs() > FLOAT64_EXACT).to_numpy())
    if big.size:
        i = int(big[0])
        raise TrackerError(f"{key}: {shown(values.iloc[i])} at {_step_at(i, steps)} is not a token count "
                           f"(above 2**53, the integers a float64 holds exactly)")
    if float32 and (cumulative or (values.abs() > FLOAT32_EXACT).any()):
        what = "cumulative token counter" if cumulative else "token counter above 2**24"
        raise TrackerError(f"{key}: a {what} read from a float32 store (TensorBoard) is not exact: "
                           f"float32 holds integers only up to 2**24 = {FLOAT32_EXACT}; use the per-step "
                           "lengths (length_mean with completions_per_step) or another store (MLflow, W&B, the tool's own log)")
    return np.rint(values.to_numpy(dtype=float)).astype(np.int64)


def _training_rows(steps: pd.DataFrame, preset: dict[str, str]) -> pd.DataFrame:
    """The rows with training metrics, checked for duplicates and gaps (one iteration per step)."""
    if "step" not in steps.columns:
        raise TrackerError("the metrics have no 'step' column")
    anchor = next((k for k in ("length_mean", "tokens_rollout", "tokens_total", "tokens_rollout_cumulative")
                   if k in preset and _column(steps, preset[k]) is not None), None)
    if anchor is None:
        keys = [preset[k] for k in ("length_mean", "tokens_rollout", "tokens_total") if k in preset]
        logged = [str(c) for c in steps.columns if c not in ("step", WALL)]
        seen = f"; it logs {', '.join(logged[:6])}{', ...' if len(logged) > 6 else ''}" if logged else "; it logs no key"
        raise TrackerError(f"none of the preset's token keys ({', '.join(keys) or 'none mapped'}) is in the log{seen}")
    rows = steps[_column(steps, preset[anchor]).notna()].sort_values("step", kind="stable")
    s = rows["step"].to_numpy(dtype=np.int64)
    if len(s) == 0:
        raise TrackerError(f"{preset[anchor]}: no step has a value")
    dup = s[1:][np.diff(s) == 0]
    if dup.size:
        raise TrackerError(f"step {int(dup[0])} is logged twice (a resumed run?): keep one record per step")
    if s[0] > 1:
        raise TrackerError(f"{preset[anchor]}: the log starts at step {int(s[0])}: steps before it are missing")
    gap = np.flatnonzero(np.diff(s) != 1)
    if gap.size:
        a, b = int(s[gap[0]]), int(s[gap[0] + 1])
        raise TrackerError(f"{preset[anchor]}: steps {a + 1}..{b - 1} are missing (a logging interval that drops "
                           "generation steps); log every step (TRL logging_steps=1, verl logs each step)")
    return rows.reset_index(drop=True)


def _tokens(rows: pd.DataFrame, p: dict[str, str], f32: Collection[str], n: int | None) -> tuple[np.ndarray, str]:
    def col(k: str) -> pd.Series | None:
        return _column(rows, p[k]) if k in p else None

    def is32(k: str) -> bool:
        return any(name in f32 for name in logged_spellings(p[k]))

    def ints(k: str, *, cumulative: bool = False) -> np.ndarray:
        return _exact_ints(col(k), p[k], is32(k), cumulative=cumulative, steps=rows["step"])

    def present(k: str, why: str) -> np.ndarray:
        v = col(k)
        if v.isna().any():
            raise TrackerError(f"{p[k]}: no value at step {int(rows['step'][v.isna()].iloc[0])}: {why}")
        return v.to_numpy(dtype=float)

    length, prompt, total = col("length_mean"), col("prompt_length_mean"), col("tokens_total")
    if col("tokens_rollout") is not None:
        return ints("tokens_rollout"), "tokens_rollout"
    if col("tokens_rollout_cumulative") is not None:
        return np.diff(ints("tokens_rollout_cumulative", cumulative=True), prepend=0), "tokens_rollout_cumulative"
    if total is not None and prompt is not None and length is not None:
        # verl: total = N (prompt mean + response mean) over the same N sequences, so the response
        # share of it is exact without knowing N.
        tot = ints("tokens_total")
        unknown = f"the completion share of {p['tokens_total']} is unknown there"
        lengths, prompts = present("length_mean", unknown), present("prompt_length_mean", unknown)
        return np.rint(tot * (lengths / (prompts + lengths))).astype(np.int64), \
            "tokens_total x length_mean/(prompt_length_mean+length_mean)"
    if length is not None and n is not None:
        lengths = present("length_mean", "tokens cannot be counted there")
        return np.rint(lengths * n).astype(np.int64), f"length_mean x completions_per_step ({n})"
    if length is None:
        have = ", ".join(p[k] for k in ("tokens_total", "prompt_length_mean") if k in p and col(k) is not None)
        raise TrackerError(f"{p.get('length_mean', 'length_mean')} is not in the log: the completion tokens per step cannot be "
                           f"counted{' from ' + have + ' alone' if have else ''}")
    raise TrackerError(f"{p['length_mean']}: the completion tokens per step need the number "
                       "of completions per step (prompts x generations): give completions_per_step (--completions-per-step)")


def _seconds(rows: pd.DataFrame, p: dict[str, str], wallclock: bool) -> tuple[dict[str, np.ndarray], str]:
    parts: dict[str, list[np.ndarray]] = {}
    for ours, theirs in p.items():
        stage = ours.split("+", 1)[0]
        if stage in STAGES and (c := _column(rows, theirs)) is not None:
            parts.setdefault(stage, []).append(c.to_numpy(dtype=float))
    if "seconds_generation" in parts:
        gen = parts["seconds_generation"][0]
        if np.isnan(gen).any():
            i = int(np.flatnonzero(np.isnan(gen))[0])
            raise TrackerError(f"{p['seconds_generation']}: no value at step {int(rows['step'].iloc[i])}")
        # A timer a run never logs (no critic, no reference model) took no time in that run.
        return {s: np.nansum(parts[s], axis=0) if s in parts else np.zeros(len(rows)) for s in STAGES}, "stage timers"
    if "seconds_step" in p and (c := _column(rows, p["seconds_step"])) is not None:
        if c.isna().any():
            raise TrackerError(f"{p['seconds_step']}: no value at step {int(rows['step'][c.isna()].iloc[0])}")
        return {"seconds_step": c.to_numpy(dtype=float)}, f"seconds_step from {p['seconds_step']}"
    if wallclock and WALL in rows.columns:
        wall = rows[WALL].to_numpy(dtype=float)
        # Unlike the paper's training time (App. D) this includes evaluation, checkpointing and
        # logging; it is used only when asked for, and the run's source says so.
        return {"seconds_step": np.diff(wall, prepend=0.0)}, ("seconds_step from the tracker's wall clock between "
                                                            "consecutive steps (includes evaluation, checkpointing and logging)")
    why = " (timing_s/step is never used: it includes validation and checkpointing)" if _column(rows, "timing_s/step") is not None else ""
    raise TrackerError(f"no training time in the log: the preset maps no stage timer or seconds_step that was logged{why}; "
                       "map the stage timers, or pass wallclock (--wallclock) to time steps by the tracker's clock")


def iterations_from_metrics(steps: pd.DataFrame, preset: str | Mapping[str, str], *,
                            completions_per_step: int | None = None, updates_per_step: int | None = None,
                            wallclock: bool = False, float32_keys: Collection[str] | None = None) -> pd.DataFrame:
    """The run-log iteration frame of a steps frame (``step`` plus one column per logged key).

    One iteration per training step, 0-based; tokens are generated completion tokens (never prompt
    tokens); seconds are the five stages when the tool times them, else ``seconds_step``.
    ``float32_keys`` (default ``steps.attrs["float32_keys"]``, set by the TensorBoard reader) are
    the keys the store kept as float32. ``df.attrs["source"]`` tells how each column was derived.
    """
    p = resolve_preset(preset)
    f32 = set(float32_keys if float32_keys is not None else steps.attrs.get("float32_keys", ()))
    rows = _training_rows(steps, p)
    if "generation_batches" in p and (g := _column(steps, p["generation_batches"])) is not None and g.notna().any():
        raise TrackerError(f"{p['generation_batches']}: the run used dynamic sampling (filter_groups), whose logs count only "
                           "kept tokens; import it with `prereg import verl` and its rollout dumps")
    tokens, how_tokens = _tokens(rows, p, f32, completions_per_step)
    out = pd.DataFrame({"iteration": np.arange(len(rows), dtype=np.int64), "tokens_rollout": tokens,
                        "tokens_continuation": 0, "tokens_discarded": 0})
    seconds, how_seconds = _seconds(rows, p, wallclock)
    for s in STAGES:
        out[s] = seconds.get(s, np.full(len(rows), np.nan))
    if "seconds_step" in seconds:
        out["seconds_step"] = seconds["seconds_step"]
    step = rows["step"].to_numpy(dtype=np.int64)
    if p.get("updates") == "step":
        out["updates"] = step - step[0] + 1
    elif "updates" in p and (u := _column(rows, p["updates"])) is not None:
        out["updates"] = np.rint(u.to_numpy(dtype=float)).astype(np.int64)
    elif updates_per_step is not None:
        out["updates"] = (np.arange(len(rows)) + 1) * int(updates_per_step)
    else:
        raise TrackerError("the log does not count optimizer updates: give updates_per_step (--updates-per-step; "
                           "verl: ppo_epochs x train_batch_size / ppo_mini_batch_size)")
    for ours in ("reward_mean", "mixed_share", "length_mean", "truncation_rate"):
        if ours in p and (c := _column(rows, p[ours])) is not None:
            out[ours] = c.to_numpy(dtype=float)
    if "mixed_share" not in out and "zero_std_share" in p and (z := _column(rows, p["zero_std_share"])) is not None:
        # With the 0/1 verifier reward a group has zero spread exactly when it is all right or all wrong.
        out["mixed_share"] = 1.0 - z.to_numpy(dtype=float)
    notes = {"tokens_rollout": how_tokens, "seconds": how_seconds, "first_step": int(step[0])}
    if "tokens_total_cumulative" in p and (c := _column(rows, p["tokens_total_cumulative"])) is not None:
        key = p["tokens_total_cumulative"]
        if key in f32 and (c.abs() > FLOAT32_EXACT).any():
            notes["cross_check"] = f"{key} not checked: float32 store above 2**24"
        else:
            seen = np.diff(np.rint(c.to_numpy(dtype=float)).astype(np.int64), prepend=0)
            bad = np.flatnonzero(seen < tokens)
            if bad.size:
                i = int(bad[0])
                raise TrackerError(f"{key}: step {int(step[i])} counts {int(seen[i])} tokens with prompts but the completions "
                                   f"alone come to {int(tokens[i])}: completions_per_step is too large")
            notes["cross_check"] = f"{key}: per-step growth >= completion tokens at every step"
    out.attrs["source"] = notes
    return out


def evaluation_iteration(step: pd.Series, first_step: int) -> pd.Series:
    """Iterations done before an evaluation logged at tool step ``step``: trackers stamp an
    evaluation with the steps completed, so with steps counted from ``first_step`` it is
    ``step - first_step + 1`` (the initial evaluation sits at ``first_step - 1``)."""
    it = step.astype("int64") - first_step + 1
    if (it < 0).any():
        raise TrackerError(f"evaluation at step {int(step[it < 0].iloc[0])}: before the initial evaluation "
                           f"(step {first_step - 1})")
    return it

