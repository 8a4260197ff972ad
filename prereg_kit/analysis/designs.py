"""What a contrast compares and its statistics when its units are not seed-paired differences.

Paired, difference-of-differences and pooled contrasts reduce to one per-unit difference and
go through :func:`prereg_kit.analysis.verdicts.contrast_statistics`; a Welch contrast (two unpaired groups,
dense-rewards paper S21's primary, §C.5.2) is read here with Welch's t, Welch TOST and the
Welch non-inferiority test (``prereg_kit.stats.welch``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import stats
from ..margin import margin_bounds, noninferiority_margin
from ..plan import Contrast, Plan
from ..plan.designs import seed_text


def welch_statistics(first: np.ndarray, second: np.ndarray, c: Contrast, plan: Plan) -> dict:
    """The statistics of an unpaired contrast: Welch's t, CI and p, Welch TOST at the margin and
    the one-sided Welch non-inferiority test (``prereg_kit.stats.welch``); the seed bootstraps,
    which resample paired units, are left empty. ``n`` counts both groups."""
    st = plan.statistics
    margin = plan.margin_of(c)
    lo, hi = margin_bounds(margin)
    w = stats.welch_t(first, second, confidence=st.confidence, alternative=c.alternative)
    tost = stats.tost_welch(first, second, margin=(lo, hi), alpha=st.alpha)
    ni = stats.noninferiority_welch(first, second, margin=noninferiority_margin(margin), alpha=st.alpha)
    nan = np.nan
    return {
        "n": w.n1 + w.n2, "n_treatment": w.n1, "n_control": w.n2, "mean": w.mean, "sd": nan, "se": w.se, "dz": nan,
        "ci_low": w.ci_low, "ci_high": w.ci_high, "t": w.t, "df": w.df, "p": w.p, "zero_sd": w.zero_sd,
        "margin_low": lo, "margin_high": hi, "tost_p": tost.p, "tost_ci_low": tost.ci_low, "tost_ci_high": tost.ci_high,
        "ni_p": ni.p, "ni_lower": ni.lower, "boot_ci_low": nan, "boot_ci_high": nan, "boot_p": nan,
        "boot_exhaustive": False, "n_lower": pd.NA, "n_higher": pd.NA, "crossed_mean": nan, "crossed_ci_low": nan,
        "crossed_ci_high": nan, "crossed_p": nan,
        "tested_p": {"superiority": w.p, "equivalence": tost.p, "non-inferiority": ni.p}[c.kind],
    }


def comparison_label(c: Contrast) -> str:
    """What a contrast compares, as the report prints it: ``T − C``, ``(T − C) − (T' − C')``,
    ``pooled: T1 − C1, T2 − C2``, ``welch: T vs C`` (or two differences)."""
    pairs = [f"{t} − {k}" for t, k in c.arm_pairs()]
    if c.design == "difference_of_differences":
        return f"({pairs[0]}) − ({pairs[1]})"
    if c.design == "pooled":
        return "pooled: " + ", ".join(pairs)
    if c.design == "welch":
        return f"welch: ({pairs[0]}) vs ({pairs[1]})" if len(pairs) == 2 else f"welch: {c.treatment} vs {c.control}"
    return pairs[0]


def seed_list(seeds: list[int]) -> str:
    return seed_text(sorted(int(s) for s in seeds))
