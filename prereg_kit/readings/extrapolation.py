"""The extrapolation heuristic as a contrast reading (dense-rewards paper §3.3 and
§C.3.2 "A heuristic extrapolation"): a reward with per-token efficiency e "should reach, after t tokens, the accuracy
outcome-only GRPO reaches after e·t tokens", read off the control's curve on the same seed. The
paper calls it "a heuristic, not a derived prediction".

Per seed, at each evaluation i ≥ 1 of the treatment at nominal tokens t_i = i·interval (B/16 →
i·B/16; the run's accuracy at its first evaluation at or after t_i, the rule of §C.1):

- extrapolated_i = the control's curve (its evaluations, tokens → accuracy, evaluation 0 included)
  read at e·t_i by linear interpolation (:func:`analyses.extrapolation.extrapolated_accuracy`);
- evaluation i is *usable* when e·t_i ≤ B: the paper's e·i/16 ≤ 1, i.e. up to 11B/16 at e = 1.36
  and 13B/16 at e = 1.15; the control is not read past B;
- the seed's value is the mean over usable evaluations of observed_i − extrapolated_i (negative:
  the shortfall); also the predicted lead, mean extrapolated_i − control_i, and the observed lead,
  mean observed_i − control_i, with control_i the control's accuracy at its evaluation i.

The per-seed values are the contrast's paired differences (tests, intervals, Holm, verdict as for
any contrast). ``efficiency`` is a preregistered number or ``"TEST:configuration"``, the per-token
estimate of that gradient test (:func:`contrast_efficiency`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analyses.extrapolation import extrapolated_accuracy

from ..analysis.gradient import efficiency_value
from ..errors import PreregError
from .base import PairingError, ReadingError
from .points import _first_at_or_after, _runs

USABLE_RTOL = 1e-9  # e·t_i ≤ B up to float error: e = 16/11 at 11B/16 is B, not a hair past it
HEURISTIC = "The extrapolation is a heuristic, not a derived prediction (dense-rewards paper §3.3)"
PER_SEED_COLUMNS = ["seed", "treatment_value", "control_value", "difference", "read_at", "unit",
                    "predicted_lead", "observed_lead", "usable_evaluations"]
POINT_COLUMNS = ["seed", "eval_index", "tokens", "observed", "extrapolated", "control", "usable"]


def contrast_efficiency(study_dir: str | Path, plan, efficiency: float | str, *, chain=None) -> tuple[float, str]:
    """e for a contrast and where it came from: a preregistered number as it stands (``"plan"``),
    or ``"TEST:configuration"`` resolved to that gradient test's per-token estimate from the sealed
    results under ``study_dir/gradient/TEST/`` (``chain``: the study's lock chain, when already read)."""
    if not isinstance(efficiency, str):
        return float(efficiency), "plan"
    try:
        e = float(efficiency_value(study_dir, plan, efficiency, chain=chain))
    except PreregError:
        raise
    except (OSError, KeyError, ValueError) as err:
        raise PreregError(f"efficiency {efficiency!r}: {err}") from None
    if not 0 < e < float("inf"):
        raise PreregError(f"efficiency {efficiency!r}: the gradient test gives e = {e!r}; the heuristic needs e above 0")
    return e, efficiency


def nominal_tokens(budget: float, interval: float) -> np.ndarray:
    """t_i = i·interval for the evaluations i = 1 … the first at or after B."""
    n = int(np.ceil(budget / interval - USABLE_RTOL))
    return interval * np.arange(1, n + 1, dtype=np.float64)


def usable(t: np.ndarray, e: float, budget: float) -> np.ndarray:
    """Which t_i may be extrapolated: e·t_i ≤ B (the paper's e·i/16 ≤ 1)."""
    return e * np.asarray(t, dtype=np.float64) <= budget * (1 + USABLE_RTOL)


@dataclass
class Extrapolation:
    """One extrapolated reading: ``per_seed`` (:data:`PER_SEED_COLUMNS`; ``treatment_value`` the
    mean observed, ``control_value`` the mean extrapolated accuracy over the usable evaluations),
    ``points`` (:data:`POINT_COLUMNS`, every evaluation i ≥ 1 of every seed, for the figure and the
    control's curve at evaluation 0), e, the usable count and the last usable evaluation index."""

    e: float
    per_seed: pd.DataFrame
    points: pd.DataFrame
    n_usable: int
    last_usable: int
    last_tokens: float


def _at(run: pd.DataFrame, t: np.ndarray) -> np.ndarray:
    """The run's accuracy at its first evaluation at or after each t (NaN where none)."""
    out = np.full(len(t), np.nan)
    for k, x in enumerate(t):
        pos = _first_at_or_after(run, float(x))
        if pos is not None:
            out[k] = float(run["accuracy"].iloc[pos])
    return out


def read_extrapolated(curves: pd.DataFrame, treatment: str, control: str, e: float, budget: float,
                      interval: float, *, allow_unpaired: bool = False) -> Extrapolation:
    """The extrapolated reading of ``treatment`` against ``control`` (module docstring) on the
    seeds both have; ``budget`` = B and ``interval`` the evaluation interval, in tokens. Raises
    :class:`ReadingError` when no evaluation is usable, and :class:`PairingError` for a seed one
    configuration lacks or a run without the evaluations it needs (unless ``allow_unpaired``)."""
    t = nominal_tokens(budget, interval)
    ok = usable(t, e, budget)
    if not ok.any():
        raise ReadingError(f"no usable evaluation: e·t ≤ B fails already at the first evaluation "
                           f"(e = {e:g}, first at {t[0]:,.0f} tokens of B = {budget:,.0f})")
    runs_t, runs_c = _runs(curves, treatment), _runs(curves, control)
    st, sc = {s for _, s in runs_t}, {s for _, s in runs_c}
    if (st ^ sc) and not allow_unpaired:
        s = min(st ^ sc)
        has, lacks = (treatment, control) if s in st else (control, treatment)
        raise PairingError(f"seed {s}: configuration {has!r} has evaluations, {lacks!r} has none (no run, or a run that logged no evaluations)")
    rows, points = [], []
    tu = t[ok]
    for s in sorted(st & sc):
        rt, rc = runs_t[(treatment, s)], runs_c[(control, s)]
        obs, ctl = _at(rt, t), _at(rc, t)
        try:
            ext = extrapolated_accuracy(rc["tokens"].to_numpy(dtype="float64"), rc["accuracy"].to_numpy(dtype="float64"), e, t)
        except ValueError as err:
            raise ReadingError(f"configuration {control!r} seed {s}: {err}") from None
        bad = [(name, need) for name, v, need in ((treatment, obs, tu[-1]), (control, ctl, tu[-1]), (control, ext, e * tu[-1]))
               if np.isnan(v[ok]).any()]
        if bad:
            if allow_unpaired:
                continue
            raise PairingError(f"configuration {bad[0][0]!r} seed {s}: no evaluation at or after {bad[0][1]:,.0f} tokens "
                               "(the extrapolated reading needs it)")
        o, x, c = obs[ok], ext[ok], ctl[ok]
        rows.append({"seed": s, "treatment_value": o.mean(), "control_value": x.mean(), "difference": float((o - x).mean()),
                     "read_at": float(tu[-1]), "unit": "", "predicted_lead": float((x - c).mean()),
                     "observed_lead": float((o - c).mean()), "usable_evaluations": int(ok.sum())})
        points.append(pd.DataFrame({"seed": s, "eval_index": np.arange(len(t) + 1),
                                    "tokens": np.concatenate([[0.0], t]),
                                    "observed": np.concatenate([[float(rt["accuracy"].iloc[0])], obs]),
                                    "extrapolated": np.concatenate([[float(rc["accuracy"].iloc[0])], ext]),
                                    "control": np.concatenate([[float(rc["accuracy"].iloc[0])], ctl]),
                                    "usable": np.concatenate([[False], ok])}))
    per_seed = pd.DataFrame(rows, columns=PER_SEED_COLUMNS)
    pts = pd.concat(points, ignore_index=True) if points else pd.DataFrame(columns=POINT_COLUMNS)
    last = int(np.flatnonzero(ok)[-1]) + 1
    return Extrapolation(float(e), per_seed, pts, int(ok.sum()), last, float(t[last - 1]))


def evaluation_label(i: int, eval_every: str | int, budget: float, interval: float) -> str:
    """Evaluation i as the paper writes it: ``11B/16`` under ``eval_every = "B/16"`` (``B`` at
    16), else its nominal tokens."""
    if isinstance(eval_every, str) and eval_every.replace(" ", "").startswith("B/"):
        n = int(eval_every.replace(" ", "")[2:])
        return "B" if i == n else f"{i}B/{n}"
    return f"{i * interval:,.0f} tokens"
