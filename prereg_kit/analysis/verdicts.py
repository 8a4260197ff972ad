"""One contrast's statistics from its per-unit differences, Holm within each family, the verdict
each contrast earns and the reading of each hypothesis (dense-rewards paper §2.3 "Preregistration and
statistics", §C.1 "Statistics": paired t, TOST at the margin, non-inferiority, seed and crossed bootstraps, Holm
within each preregistered family)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import stats
from ..margin import margin_bounds, noninferiority_margin
from ..plan import Contrast, Plan
from .robustness import flag_changes, own_reading

NOT_READ = "not read"  # status and verdict of a contrast the runs cannot give (analyze_study(not_read=True))

PREDICTION_READING = {"gain": "gain", "deficit": "deficit", "equivalent": "equivalent", "non-inferior": "non-inferior"}


def contrast_statistics(d: np.ndarray, c: Contrast, plan: Plan, *, matrices=None, n_resamples: int,
                        notes: list[str] | None = None) -> dict:
    """Every statistic of one contrast from its per-seed differences ``d`` (fractions).

    ``matrices``: (treatment, control) seeds × problems accuracies for the crossed bootstrap.
    ``notes``, when given, receives what a bootstrap p of 0 means (``stats.zero_p_note``).
    """
    st = plan.statistics
    margin = plan.margin_of(c)
    lo, hi = margin_bounds(margin)
    pt = stats.paired_t(d, confidence=st.confidence, alternative=c.alternative)
    tost = stats.tost_paired(d, margin=(lo, hi), alpha=st.alpha)
    ni = stats.noninferiority_paired(d, margin=noninferiority_margin(margin), alpha=st.alpha)
    boot = stats.seed_bootstrap(d, n_resamples=n_resamples, confidence=st.confidence, seed=st.seed, margin=(lo, hi))
    if boot.note and notes is not None:
        notes.append(f"contrast {c.id}: {boot.note}")
    row = {
        "n": pt.n, "mean": pt.mean, "sd": pt.sd, "se": pt.se, "dz": pt.dz, "ci_low": pt.ci_low, "ci_high": pt.ci_high,
        "t": pt.t, "df": pt.df, "p": pt.p, "zero_sd": pt.zero_sd,
        "margin_low": lo, "margin_high": hi,
        "tost_p": tost.p, "tost_ci_low": tost.ci_low, "tost_ci_high": tost.ci_high,
        "ni_p": ni.p, "ni_lower": ni.lower,
        "boot_ci_low": boot.ci_low, "boot_ci_high": boot.ci_high, "boot_p": boot.p, "boot_exhaustive": boot.exhaustive,
        "n_lower": int((d < 0).sum()), "n_higher": int((d > 0).sum()),
        "crossed_mean": np.nan, "crossed_ci_low": np.nan, "crossed_ci_high": np.nan, "crossed_p": np.nan,
    }
    if matrices is not None:
        cb = stats.crossed_bootstrap(matrices[0], matrices[1], n_resamples=n_resamples, confidence=st.confidence,
                                     seed=st.seed)
        row.update(crossed_mean=cb.mean, crossed_ci_low=cb.ci_low, crossed_ci_high=cb.ci_high, crossed_p=cb.p)
    # minimal-effect (and a test other than the t) get theirs from robustness.robust_columns
    row["tested_p"] = {"superiority": pt.p, "equivalence": tost.p, "non-inferiority": ni.p}.get(c.kind, np.nan)
    return row


# every statistic a read contrast has (``contrast_statistics``): a table of rows none of which
# could be read still has these columns, empty
STAT_COLUMNS = ("n", "mean", "sd", "se", "dz", "ci_low", "ci_high", "t", "df", "p", "zero_sd", "margin_low",
                "margin_high", "tost_p", "tost_ci_low", "tost_ci_high", "ni_p", "ni_lower", "boot_ci_low",
                "boot_ci_high", "boot_p", "boot_exhaustive", "n_lower", "n_higher", "crossed_mean",
                "crossed_ci_low", "crossed_ci_high", "crossed_p", "tested_p")


def adjust_and_read(df: pd.DataFrame, plan: Plan, *, exploratory: bool) -> pd.DataFrame:
    """Holm (or the family's ``method``) within each family on ``tested_p``, then the verdict, the
    robustness rows and their flag (``prereg_kit.analysis.robustness``) and the claim label."""
    df = df.copy()
    for col in STAT_COLUMNS:
        if col not in df:
            df[col] = np.nan
    df["p_adjusted"] = np.nan  # the family's adjusted p, its method (Holm by default) in ``adjustment``
    df["adjustment"] = ""
    for fam in plan.families:
        rows = df["contrast"].isin(fam.members)
        df.loc[rows, "p_adjusted"] = stats.adjust(df.loc[rows, "tested_p"].to_numpy(), fam.method)
        df.loc[rows, "adjustment"] = fam.method
    verdicts, reasons = [], []
    df["status"] = df["status"].fillna("read") if "status" in df else "read"
    for _, r in df.iterrows():
        if r["status"] == NOT_READ:  # no p, no verdict: the reason is the row's reading
            verdicts.append(NOT_READ)
            reasons.append(r["reason"])
            continue
        if isinstance(r.get("target_verdict"), str):  # a to-target share is read against 1 (no saving)
            verdicts.append(r["target_verdict"])
            reasons.append(r["target_reason"])
            continue
        fam = plan.family_of(r["contrast"])
        alpha = fam.alpha if fam is not None else plan.statistics.alpha
        p = r["p_adjusted"] if r["tier"] == "primary" and not np.isnan(r["p_adjusted"]) else r["tested_p"]
        margin = [r["margin_low"], r["margin_high"]]
        if (own := own_reading(r, p, alpha)) is not None:  # a test other than the t, or a minimal-effect row
            verdicts.append(own[0])
            reasons.append(own[1])
        elif r["kind"] == "superiority":
            v = stats.verdict("superiority", p=p, estimate=r["mean"], alpha=alpha)
        elif r["kind"] == "equivalence":
            v = stats.verdict("equivalence", p=p, ci_low=r["tost_ci_low"], ci_high=r["tost_ci_high"], margin=margin, alpha=alpha)
        else:
            v = stats.verdict("non-inferiority", p=p, ci_low=r["ni_lower"], margin=-r["margin_low"], alpha=alpha)
        if own is None:
            verdicts.append(v.reading)
            reasons.append(v.reason)
    df["verdict"] = verdicts
    df["verdict_reason"] = reasons
    df = flag_changes(df.drop(columns="reason", errors="ignore"), plan)
    df["claim"] = "exploratory" if exploratory else df["tier"]
    want = df["prediction"].map(PREDICTION_READING)
    df["prediction_met"] = [None if pd.isna(w) else bool(w == v) for w, v in zip(want, df["verdict"])]
    return df


def read_hypotheses(plan: Plan, contrasts: pd.DataFrame) -> pd.DataFrame:
    """Each hypothesis's outcome from the verdicts of its contrasts, and the plan's reading of it.

    One contrast: its verdict is the outcome. Several: their common verdict, else ``mixed``.
    The reading is the plan's text for that outcome, or a note that the plan gave none.
    """
    out = []
    by_id = contrasts.set_index("contrast")
    for h in plan.hypotheses:
        ids = [cid for cid in h.contrasts if cid in by_id.index]
        verdicts = [by_id.loc[cid, "verdict"] for cid in ids]
        outcome = verdicts[0] if verdicts and len(set(verdicts)) == 1 else ("mixed" if verdicts else "no contrast")
        reading = h.readings.get(outcome) or h.readings.get(outcome.replace(" ", "-")) or h.readings.get(
            outcome.replace(" ", "_"))
        evidence = "; ".join(f"{cid}: {by_id.loc[cid, 'verdict']}" for cid in ids) or "no contrast named"
        if not reading and str(outcome).startswith("continue"):  # an interim look of a sequential plan
            reading = "(an interim look: the hypothesis is read when the study stops or reaches its final look)"
        if not reading and NOT_READ in verdicts:  # its runs cannot give a contrast: no reading of the plan applies
            reading = "(not read: a contrast it names could not be read from the runs; its reason is in the contrast table)"
        out.append({"id": h.id, "statement": h.statement, "prediction": h.prediction, "outcome": outcome,
                    "evidence": evidence,
                    "reading": reading if reading else f"(the plan gave no reading for outcome '{outcome}')"})
    return pd.DataFrame(out, columns=["id", "statement", "prediction", "outcome", "evidence", "reading"])
