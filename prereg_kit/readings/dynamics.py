"""Training dynamics per configuration up to B, from the run logs' iteration rows.

Dense-rewards paper §C.5.4 (S27): "The filter raised mixed groups by 8.8 points …, mainly by
removing all-wrong groups (28% → 18%; all-correct 10% → 11%)". Per run, the mean over its
iterations up to its evaluation at B of each logged share (mixed, all-wrong, all-correct groups),
the mean training reward, completion length and truncation rate; per configuration the mean over
its runs. Columns a run log lacks (older logs have no all-wrong / all-correct shares) read NaN.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

DYNAMICS = ("reward_mean", "mixed_share", "all_wrong_share", "all_correct_share", "length_mean", "truncation_rate")


def training_dynamics(iterations: pd.DataFrame, reads: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: ``n_seeds`` and the mean over runs of each :data:`DYNAMICS`
    column's per-run mean over the iterations whose cumulative tokens do not pass the run's
    reading at B (``reads``: :func:`~prereg_kit.readings.read_at_tokens` rows that reached B)."""
    cols = list(DYNAMICS)
    if not len(reads):
        return pd.DataFrame(columns=["configuration", "n_seeds"] + cols)
    its = iterations.copy()
    for c in cols:
        its[c] = pd.to_numeric(its[c], errors="coerce") if c in its.columns else np.nan
    limit = reads[["configuration", "seed", "tokens"]].rename(columns={"tokens": "_at_B"})
    its = its.merge(limit, on=["configuration", "seed"])
    its = its[its["cum_tokens"] <= its["_at_B"] + 1e-9]
    per_run = its.groupby(["configuration", "seed"], sort=True)[cols].mean()
    out = per_run.groupby(level="configuration").mean()
    out.insert(0, "n_seeds", per_run.groupby(level="configuration").size())
    return out.reset_index()
