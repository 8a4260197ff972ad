"""Reading points at matched compute (tokens, time T*, the control's time, updates, spans of evaluations) and the
pairing of treatment and control by seed."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..plan import ReadingPoint
from .base import RUN, ReadingError

# --------------------------------------------------------------------------------------------
# Reading points
# --------------------------------------------------------------------------------------------


READ_COLUMNS = RUN + ["reached", "at", "eval_lo", "eval_hi", "weight", "tokens", "train_seconds", "updates", "accuracy", "note"]


def _runs(curves: pd.DataFrame, configuration: str | None = None) -> dict[tuple[str, int], pd.DataFrame]:
    """Each run's rows by (configuration, seed), in key order, sorted by evaluation: one sort of
    all rows, then a slice per run (a group-by and a sort per run cost more than the reading)."""
    c = curves if configuration is None else curves[curves["configuration"] == configuration]
    c = c.sort_values(RUN + ["eval_index"], kind="stable", ignore_index=True)
    if not len(c):
        return {}
    cfg, seed = c["configuration"].to_numpy(dtype=object), c["seed"].to_numpy()
    starts = np.flatnonzero(np.r_[True, (cfg[1:] != cfg[:-1]) | (seed[1:] != seed[:-1]), True])
    return {(str(cfg[a]), int(seed[a])): c.iloc[a:b].reset_index(drop=True) for a, b in zip(starts[:-1], starts[1:])}


def _axis(run: pd.DataFrame, col: str, key: tuple[str, int]) -> np.ndarray:
    a = run[col].to_numpy(dtype="float64")
    if np.any(np.diff(a) < 0):
        raise ReadingError(f"configuration {key[0]!r} seed {key[1]}: {col} decreases between evaluations")
    return a


# B for a reading: one token count for every run, or per configuration the run-log column B is
# counted in ("tokens" or "iteration") and B on it (configurations with their own budgets).
Budgets = float | Mapping[str, tuple[str, float]]


def budget_target(budget: Budgets, configuration: str) -> tuple[str, float]:
    """The (column, value) a run of ``configuration`` is read at: its own B when ``budget`` is per
    configuration, else ``budget`` generated tokens."""
    if isinstance(budget, Mapping):
        if configuration not in budget:
            raise ReadingError(f"configuration {configuration!r}: no budget B to read it at")
        col, value = budget[configuration]
        return col, float(value)
    return "tokens", float(budget)


def shared_budget(budget: Budgets, names: list[str]) -> Budgets:
    """B as one token count when the configurations ``names`` all have the same token budget, though
    others of the plan have budgets of their own (a plan pooling several models, each pair on its
    model's B); else ``budget`` as it is. A reading that needs one B for both arms (a span, a share
    of B to a target) can then read those configurations."""
    if not isinstance(budget, Mapping) or any(n not in budget for n in names):
        return budget
    values = {budget[n] for n in names}
    return float(next(iter(values))[1]) if len(values) == 1 and next(iter(values))[0] == "tokens" else budget


def one_token_budget(point: ReadingPoint) -> float:
    """k·B in tokens for a reading that needs one budget for both arms (a span of evaluations, a
    share of B to a target); configurations with budgets of their own cannot be read so."""
    if isinstance(point.budget, Mapping):
        raise ReadingError(f"a {point.kind.replace('_', ' ')} reading needs one token budget B for every configuration; "
                           "this plan gives configurations budgets of their own")
    return point.tokens


def describe_target(budget: Budgets, configuration: str) -> str:
    col, value = budget_target(budget, configuration)
    return f"{value:,.0f} tokens" if col == "tokens" else f"iteration {value:,.0f}"


def _first_at_or_after(run: pd.DataFrame, value: float, column: str = "tokens") -> int | None:
    """Position of the first evaluation with ``column`` (cumulative tokens, or completed
    iterations for an iteration budget) >= ``value`` (§2.3 "Metric"), or None."""
    pos = int(np.searchsorted(run[column].to_numpy(dtype="float64"), value, side="left"))
    return pos if pos < len(run) else None


def _bracket(axis: np.ndarray, value: float) -> tuple[int, int, float] | None:
    """Two neighbouring evaluations around ``value`` on a non-decreasing axis, and the weight."""
    if not len(axis) or value < axis[0] or value > axis[-1]:
        return None
    hi = int(np.searchsorted(axis, value, side="left"))
    if axis[hi] == value or hi == 0:
        return hi, hi, 0.0
    lo = hi - 1
    return lo, hi, float((value - axis[lo]) / (axis[hi] - axis[lo]))


def _row(key, run, br, at, note="") -> dict:
    if br is None:
        return dict(configuration=key[0], seed=key[1], reached=False, at=at, eval_lo=pd.NA, eval_hi=pd.NA,
                    weight=np.nan, tokens=np.nan, train_seconds=np.nan, updates=np.nan, accuracy=np.nan, note=note)
    lo, hi, w = br
    # The two rows' values column by column: a row of mixed columns would be a slow Series.
    v = {c: run[c].to_numpy()[[lo, hi]].tolist() for c in ("eval_index", "tokens", "train_seconds", "updates", "accuracy")}
    lin = lambda c: (1 - w) * float(v[c][0]) + w * float(v[c][1])  # noqa: E731
    return dict(configuration=key[0], seed=key[1], reached=True, at=at, eval_lo=int(v["eval_index"][0]),
                eval_hi=int(v["eval_index"][1]), weight=w, tokens=lin("tokens"), train_seconds=lin("train_seconds"),
                updates=lin("updates"), accuracy=lin("accuracy"), note=note)


def _frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=READ_COLUMNS)
    df["eval_lo"] = df["eval_lo"].astype("Int64")
    df["eval_hi"] = df["eval_hi"].astype("Int64")
    df["reached"] = df["reached"].astype(bool)
    return df


def _at_budget(key, run, budget: Budgets) -> tuple[dict, int | None]:
    col, value = budget_target(budget, key[0])
    pos = _first_at_or_after(run, value, col)
    if pos is None:
        last = float(run[col].iloc[-1]) if len(run) else 0.0
        what = "tokens" if col == "tokens" else "iterations"
        return _row(key, run, None, value, f"no evaluation at or after {value:,.0f} {what} (last at {last:,.0f})"), None
    return _row(key, run, (pos, pos, 0.0), value), pos


def read_at_tokens(curves: pd.DataFrame, budget: Budgets) -> pd.DataFrame:
    """Each run's accuracy at its first evaluation at or after ``budget`` tokens (B or k·B).

    Rule (§2.3 "Metric", §C.1): "We take it from the first evaluation at or after the budget B,
    without selecting checkpoints." ``budget``: B in tokens, or per configuration (its own B,
    in tokens or iterations; an iteration budget is read at the first evaluation at or after
    iteration N). One row per run (columns :data:`READ_COLUMNS`);
    ``reached`` is False, with a ``note``, for a run without such an evaluation.
    """
    c = curves.sort_values(RUN + ["eval_index"], kind="stable", ignore_index=True)
    if not len(c):
        return _frame([])
    cfg, seed = c["configuration"].to_numpy(dtype=object), c["seed"].to_numpy()
    starts = np.flatnonzero(np.r_[True, (cfg[1:] != cfg[:-1]) | (seed[1:] != seed[:-1]), True])
    lo, hi = starts[:-1], starts[1:]
    names = cfg[lo]
    # per run as columns: one searchsorted per run on numpy slices (the rule of _at_budget)
    targets = {}
    for name in dict.fromkeys(names):
        targets[name] = budget_target(budget, str(name))
    cols = {col: c[col].to_numpy(dtype="float64") for col in {t[0] for t in targets.values()}}
    n = len(lo)
    at = np.empty(n)
    pos = np.full(n, -1, dtype=np.int64)
    notes = np.full(n, "", dtype=object)
    for i in range(n):
        col, value = targets[names[i]]
        a, b = lo[i], hi[i]
        axis = cols[col][a:b]
        at[i] = value
        p = int(np.searchsorted(axis, value, side="left"))
        if p < b - a:
            pos[i] = a + p
        else:
            last = float(axis[-1]) if b > a else 0.0
            what = "tokens" if col == "tokens" else "iterations"
            notes[i] = f"no evaluation at or after {value:,.0f} {what} (last at {last:,.0f})"
    reached = pos >= 0
    take = np.where(reached, pos, 0)

    def value(col: str) -> np.ndarray:
        x = c[col].to_numpy(dtype="float64")[take]
        return np.where(reached, (1 - 0.0) * x + 0.0 * x, np.nan)

    ei = c["eval_index"].to_numpy()[take]
    eval_at = pd.array([int(x) if r else pd.NA for x, r in zip(ei, reached)], dtype="Int64")
    df = pd.DataFrame({"configuration": [str(x) for x in names], "seed": seed[lo].astype("int64"),
                       "reached": reached, "at": at, "eval_lo": eval_at, "eval_hi": eval_at.copy(),
                       "weight": np.where(reached, 0.0, np.nan), "tokens": value("tokens"),
                       "train_seconds": value("train_seconds"), "updates": value("updates"),
                       "accuracy": value("accuracy"), "note": notes})
    return df[READ_COLUMNS]


def _pairs(curves, treatment, control):
    t, c = _runs(curves, treatment), _runs(curves, control)
    seeds = sorted({k[1] for k in t} & {k[1] for k in c})
    return [((treatment, s), t[(treatment, s)], (control, s), c[(control, s)]) for s in seeds]


def read_at_time(curves: pd.DataFrame, treatment: str, control: str, budget: Budgets) -> pd.DataFrame:
    """Both runs of each seed read at T*, the shorter of their training times to ``budget``.

    Rule (Appendix D): "For each seed, T* is the shorter of the two runs' training times up to
    their evaluation at B. Each run's accuracy is interpolated linearly in training time at T*,
    so the configuration that reaches B first is read at B, and the other is read between two of
    its evaluations." Two rows per seed present in both configurations; ``at`` is T* in seconds.
    """
    rows = []
    for kt, rt, kc, rc in _pairs(curves, treatment, control):
        (row_t, pt), (row_c, pc) = _at_budget(kt, rt, budget), _at_budget(kc, rc, budget)
        if pt is None or pc is None:
            note = "T* undefined: " + (row_t["note"] or row_c["note"])
            rows += [_row(kt, rt, None, np.nan, row_t["note"] or note), _row(kc, rc, None, np.nan, row_c["note"] or note)]
            continue
        tt, tc = float(rt["train_seconds"].iloc[pt]), float(rc["train_seconds"].iloc[pc])
        t_star = min(tt, tc)
        for key, run, pos, own in ((kt, rt, pt, tt), (kc, rc, pc, tc)):
            # The faster run is read exactly at its evaluation at B.
            br = (pos, pos, 0.0) if own == t_star else _bracket(_axis(run, "train_seconds", key), t_star)
            rows.append(_row(key, run, br, t_star))
    return _frame(rows)


def read_at_control_time(curves: pd.DataFrame, treatment: str, control: str, budget: Budgets) -> pd.DataFrame:
    """Both runs read at T_c, the control's training time to ``budget`` (S35, Appendix F).

    Rule (dense-rewards paper App. F, S35): T_c is the training time the control needs to reach B on the same seed;
    the control is read at B, the treatment's accuracy is interpolated linearly in training time
    at T_c from a run extended past B. A treatment run that stops before T_c did not reach it.
    """
    rows = []
    for kt, rt, kc, rc in _pairs(curves, treatment, control):
        row_c, pc = _at_budget(kc, rc, budget)
        if pc is None:
            rows += [_row(kt, rt, None, np.nan, "T_c undefined: control " + row_c["note"]), row_c]
            continue
        t_c = float(rc["train_seconds"].iloc[pc])
        row_c["at"] = t_c
        ax = _axis(rt, "train_seconds", kt)
        br = _bracket(ax, t_c)
        note = "" if br else f"trained {ax[-1]:,.1f} s, less than T_c = {t_c:,.1f} s (extend the run past B)"
        rows += [_row(kt, rt, br, t_c, note), row_c]
    return _frame(rows)


def read_at_updates(curves: pd.DataFrame, treatment: str, control: str, budget: Budgets) -> pd.DataFrame:
    """Treatment read at ``budget``; control interpolated to the treatment's update count.

    Rule (§2.3 "Two budgets", Figure 2a): "outcome-only GRPO is interpolated to each reward's update
    count" — linearly in the control's cumulative updates between its evaluations. ``at`` is the
    treatment's update count at its evaluation at B.
    """
    rows = []
    for kt, rt, kc, rc in _pairs(curves, treatment, control):
        row_t, pt = _at_budget(kt, rt, budget)
        if pt is None:
            rows += [row_t, _row(kc, rc, None, np.nan, "update count undefined: treatment " + row_t["note"])]
            continue
        u = float(rt["updates"].iloc[pt])
        row_t["at"] = u
        ax = _axis(rc, "updates", kc)
        br = _bracket(ax, u)
        note = "" if br else f"made {ax[-1]:,.0f} updates, fewer than the treatment's {u:,.0f}"
        rows += [row_t, _row(kc, rc, br, u, note)]
    return _frame(rows)


# Spans of evaluations (§C.4.3 "mean lead over the first half of the budget", §C.5.4 "Averaged
# over the second half of the budget … and over all sixteen evaluations"); see .spans for the rule.
SPAN_KINDS = ("first_half", "second_half", "all_evals")


def span_positions(tokens: np.ndarray, kind: str, budget: float) -> tuple[int, int] | None:
    """First and last position (inclusive) of the span ``kind`` on a run's evaluation tokens
    (sorted, position 0 = the start), or None when the run has no evaluation closing the span."""
    run = pd.DataFrame({"tokens": tokens})
    half, end = _first_at_or_after(run, budget / 2), _first_at_or_after(run, budget)
    if kind == "first_half":
        return None if half is None or half < 1 else (1, half)
    if kind == "second_half":
        return None if end is None or half is None or end <= half else (half + 1, end)
    if kind == "all_evals":
        return None if end is None or end < 1 else (1, end)
    raise ReadingError(f"unknown span {kind!r} (one of {', '.join(SPAN_KINDS)})")


def read_span(curves: pd.DataFrame, kind: str, budget: float) -> pd.DataFrame:
    """Each run's mean accuracy over the evaluations of span ``kind`` up to ``budget`` tokens.

    One row per run (:data:`~prereg_kit.readings.READ_COLUMNS`): ``eval_lo``/``eval_hi`` are the
    span's first and last evaluation indices, ``weight`` is NaN (a mean over every evaluation
    from lo to hi, not a two-point bracket), ``tokens``/``train_seconds``/``updates`` those of the
    last evaluation; ``reached`` is False, with a note, when the run has no evaluation closing
    the span or the span holds none.
    """
    rows = []
    for key, run in _runs(curves).items():
        tok = run["tokens"].to_numpy(dtype="float64")
        pos = span_positions(tok, kind, budget)
        if pos is None:
            last = float(tok[-1]) if len(tok) else 0.0
            rows.append(dict(configuration=key[0], seed=key[1], reached=False, at=budget, eval_lo=pd.NA, eval_hi=pd.NA,
                             weight=np.nan, tokens=np.nan, train_seconds=np.nan, updates=np.nan, accuracy=np.nan,
                             note=f"no evaluation in the {kind.replace('_', ' ')} of {budget:,.0f} tokens "
                                  f"(last evaluation at {last:,.0f}, {len(tok)} evaluations)"))
            continue
        lo, hi = pos
        span, b = run.iloc[lo:hi + 1], run.iloc[hi]
        rows.append(dict(configuration=key[0], seed=key[1], reached=True, at=budget, eval_lo=int(run["eval_index"].iloc[lo]),
                         eval_hi=int(b["eval_index"]), weight=np.nan, tokens=float(b["tokens"]),
                         train_seconds=float(b["train_seconds"]), updates=float(b["updates"]),
                         accuracy=float(span["accuracy"].mean()), note=""))
    return _frame(rows)


def read_point(curves: pd.DataFrame, treatment: str, control: str, point: ReadingPoint) -> pd.DataFrame:
    """Readings of both configurations at ``point`` (dispatch on ``point.kind``)."""
    if point.kind == "tokens":
        return read_at_tokens(curves[curves["configuration"].isin([treatment, control])], point.scaled)
    if point.kind in SPAN_KINDS:
        return read_span(curves[curves["configuration"].isin([treatment, control])], point.kind, one_token_budget(point))
    fn = {"time": read_at_time, "control_time": read_at_control_time, "updates": read_at_updates}.get(point.kind)
    if fn is None:
        raise ReadingError(f"unknown reading point kind {point.kind!r}")
    return fn(curves, treatment, control, point.scaled)
