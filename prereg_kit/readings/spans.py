"""The tokens or training time a configuration needs to reach a target accuracy (dense-rewards
paper, Table 11), and the rule of the span readings (first half, second half, all evaluations;
``span_positions`` and ``read_span`` live in :mod:`.points`, beside the other reading points).

Evaluations run every B/16 (dense-rewards paper §C.1); evaluation 0 is the model before any update.

- *Spans* (§C.4.3 "mean lead over the first half of the budget", §C.5.4 "Averaged over the
  second half of the budget … and over all sixteen evaluations"): per run, the mean of its
  accuracy over the evaluations of the span. "All sixteen evaluations" at B/16 spacing are the
  evaluations after the start up to B, so evaluation 0 does not count (by common random numbers
  it is the same for both arms, and would only dilute the difference). The evaluation that closes
  a span is the first at or after its end (the rule of §C.1 for B): ``first_half`` = evaluations
  1 … the first at or after B/2 (B/16 … 8B/16); ``second_half`` = the ones after it … the first
  at or after B (9B/16 … B); ``all_evals`` = 1 … the first at or after B.
- *To target* (§C.6.8, Table 11): "we take outcome-only GRPO's mean accuracy over seeds at B
  as the target and interpolate the filter's mean curve over the same seeds … to its first
  crossing of the target. Table 11 gives that crossing as a fraction of the budget, with 95%
  intervals from 10,000 resamples of seeds that keep each seed's two configurations together. A
  resample whose curve never reaches the target counts as not reached." The mean curve is the
  mean over seeds at each evaluation index, placed at the mean over seeds of the cumulative
  tokens (``to_target``) or training seconds (``time_to_target``, §C.6.8: "the same crossing
  on the training-time axis"; the share is of the control's mean training time at B). Linear
  interpolation between the two evaluations around the first crossing; a curve that starts at or
  above the target crosses at its first evaluation. Not reached = ``inf`` ("n.r." in reports).
  A *pooled* contrast reads the same over (pair, seed) units instead of seeds: the mean curves
  are over every unit of every pair (Table 11's rows of 54 and 60 seeds pool one pair over the
  seeds of several studies), and a resample draws units, each with its two configurations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..plan import ReadingPoint
from .base import ReadingError
from .points import _first_at_or_after, _runs, one_token_budget

TARGET_KINDS = ("to_target", "time_to_target")


# --------------------------------------------------------------------------------------------
# Tokens / time to a target accuracy
# --------------------------------------------------------------------------------------------


def first_crossing(x: np.ndarray, y: np.ndarray, target: float) -> float:
    """Where the curve ``y(x)`` (x non-decreasing) first reaches ``target``, by linear
    interpolation between the two evaluations around the first crossing; ``inf`` if never."""
    x, y = np.asarray(x, dtype="float64"), np.asarray(y, dtype="float64")
    hit = np.flatnonzero(y >= target)
    if not hit.size:
        return float("inf")
    i = int(hit[0])
    if i == 0 or y[i] == target:
        return float(x[i])
    w = (target - y[i - 1]) / (y[i] - y[i - 1])
    return float(x[i - 1] + w * (x[i] - x[i - 1]))


@dataclass(frozen=True)
class TargetCurves:
    """Per seed, the arrays a to-target reading needs (seeds in the same order everywhere).

    ``acc``/``axis``: treatment accuracy and axis (tokens or seconds) per seed × evaluation
    index (the indices every seed has); ``target_acc``: the control's accuracy at its first
    evaluation at or after ``multiple``·B; ``target_axis``: the control's axis value there.
    """

    seeds: np.ndarray
    acc: np.ndarray
    axis: np.ndarray
    target_acc: np.ndarray
    target_axis: np.ndarray
    units: np.ndarray | None = None  # a pooled reading: each row's pair ("treatment − control")


def target_curves(curves: pd.DataFrame, treatment: str, control: str, point: ReadingPoint, *,
                  pairs: list[tuple[str, str]] | None = None) -> TargetCurves:
    """Collect :class:`TargetCurves` for seeds present in both configurations (``pairs``: one row
    per (pair, seed) of every pair, a pooled reading); a control run without an evaluation at
    ``point.tokens`` raises :class:`ReadingError` naming it. Every row is cut to the evaluations
    every row has."""
    col = "train_seconds" if point.kind == "time_to_target" else "tokens"
    one_token_budget(point)  # both arms on one token budget B
    rows = []
    for tr, ct in pairs or [(treatment, control)]:
        t, c = _runs(curves, tr), _runs(curves, ct)
        seeds = sorted({k[1] for k in t} & {k[1] for k in c})
        if not seeds:
            raise ReadingError(f"{tr!r} and {ct!r} share no seed")
        for s in seeds:
            rc = c[(ct, s)]
            pos = _first_at_or_after(rc, point.tokens)
            if pos is None:
                raise ReadingError(f"configuration {ct!r} seed {s}: no evaluation at or after {point.tokens:,.0f} tokens "
                                   "(the target is its accuracy there)")
            rows.append((f"{tr} − {ct}", s, t[(tr, s)], float(rc["accuracy"].iloc[pos]), float(rc[col].iloc[pos])))
    n = min(len(r[2]) for r in rows)
    acc = np.vstack([r[2]["accuracy"].to_numpy(dtype="float64")[:n] for r in rows])
    axis = np.vstack([r[2][col].to_numpy(dtype="float64")[:n] for r in rows])
    return TargetCurves(np.array([r[1] for r in rows]), acc, axis, np.array([r[3] for r in rows]),
                        np.array([r[4] for r in rows]), np.array([r[0] for r in rows]) if pairs else None)


def share_to_target(tc: TargetCurves, point: ReadingPoint, idx: np.ndarray | None = None) -> tuple[float, float]:
    """(share, target) for the seeds ``idx`` (all when None): the treatment's mean curve's first
    crossing of the control's mean accuracy at ``multiple``·B, over ``multiple``·B tokens
    (``to_target``) or over the control's mean training seconds there (``time_to_target``)."""
    i = np.arange(len(tc.seeds)) if idx is None else idx
    target = float(tc.target_acc[i].mean())
    x = first_crossing(tc.axis[i].mean(axis=0), tc.acc[i].mean(axis=0), target)
    denom = point.tokens if point.kind == "to_target" else float(tc.target_axis[i].mean())
    return x / denom, target


def to_target(curves: pd.DataFrame, treatment: str, control: str, point: ReadingPoint, *,
              n_resamples: int = 10_000, confidence: float = 0.95, seed: int = 0,
              pairs: list[tuple[str, str]] | None = None) -> dict:
    """The to-target reading of ``treatment`` against ``control`` with its paired seed bootstrap
    (``pairs``: pooled over the (pair, seed) units of every pair; ``units`` names each one's pair).

    Returns ``n`` (seeds), ``target``, ``share`` (inf = not reached), ``ci_low``/``ci_high``
    (percentiles of ``n_resamples`` resamples of seeds, each seed's two configurations kept
    together; a resample that never reaches its target counts as ``inf``), ``p_no_saving`` (share
    of resamples at or above 1, i.e. without a saving, incl. not reached), ``per_seed`` (each seed's
    own crossing of the full-sample target, as a share; inf = not reached).
    """
    tc = target_curves(curves, treatment, control, point, pairs=pairs)
    share, target = share_to_target(tc, point)
    rng = np.random.default_rng(seed)
    n = len(tc.seeds)
    boots = np.array([share_to_target(tc, point, rng.integers(0, n, n))[0] for _ in range(n_resamples)])
    a = (1 - confidence) / 2
    # inverted_cdf returns a resample's own value: no interpolation into 'inf'
    lo, hi = (float(np.quantile(boots, q, method="inverted_cdf")) for q in (a, 1 - a))
    per_seed = []
    for k in range(n):
        x = first_crossing(tc.axis[k], tc.acc[k], target)
        per_seed.append(x / (point.tokens if point.kind == "to_target" else float(tc.target_axis.mean())))
    return {"n": n, "target": target, "share": share, "ci_low": lo, "ci_high": hi,
            "p_no_saving": float(np.mean(boots >= 1)), "seeds": tc.seeds.tolist(), "per_seed": per_seed,
            "control_at": tc.target_acc.tolist(), "units": [] if tc.units is None else tc.units.tolist()}


def target_statistics(curves: pd.DataFrame, pairs: list[tuple[str, str]], point: ReadingPoint, *,
                      n_resamples: int, confidence: float, seed: int) -> tuple[dict, pd.DataFrame]:
    """A contrast row for a to-target reading (the columns of ``prereg analyze``'s contrasts; the
    paired-t, TOST and non-inferiority columns are NaN: Table 11 reports a share with a bootstrap
    interval) and its per-seed rows (each seed's own crossing of the target; NaN = not reached).

    ``mean`` is the share of the budget (or of the control's training time) at the crossing, inf
    when the mean curve never reaches the target; the reading is ``gain`` (a saving) when the
    interval's upper end is below 1, else ``inconclusive``. ``pairs``: the contrast's one pair, or
    a pooled contrast's pairs (its per-seed rows then name each unit's pair).
    """
    r = to_target(curves, *pairs[0], point, n_resamples=n_resamples, confidence=confidence, seed=seed,
                  pairs=pairs if len(pairs) > 1 else None)
    nan = float("nan")
    row = {k: nan for k in ("sd", "se", "dz", "t", "df", "p", "margin_low", "margin_high", "tost_p", "tost_ci_low",
                            "tost_ci_high", "ni_p", "ni_lower", "crossed_mean", "crossed_ci_low", "crossed_ci_high",
                            "crossed_p", "tested_p")}
    shown = r["ci_high"] < 1
    def fmt(x: float) -> str:
        return "n.r." if np.isinf(x) else f"{x:.2f}"
    row.update(n=r["n"], mean=r["share"], ci_low=r["ci_low"], ci_high=r["ci_high"], zero_sd=False,
               boot_ci_low=r["ci_low"], boot_ci_high=r["ci_high"], boot_p=r["p_no_saving"], boot_exhaustive=False,
               n_lower=int(sum(x < 1 for x in r["per_seed"])), n_higher=int(sum(not x < 1 for x in r["per_seed"])),
               target=r["target"], target_verdict="gain" if shown else "inconclusive",
               target_reason=(f"share {fmt(r['share'])} [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}] of "
                              f"{'the budget' if point.kind == 'to_target' else 'the control’s training time'} to reach "
                              f"{r['target']:.3f}; " + ("upper end < 1: a saving" if shown else "the interval reaches 1 or n.r.")))
    per_seed = pd.DataFrame({"seed": r["seeds"], "treatment_value": [x if np.isfinite(x) else nan for x in r["per_seed"]],
                             "control_value": r["control_at"], "difference": nan, "read_at": r["target"],
                             "unit": r["units"] or ""})
    return row, per_seed
