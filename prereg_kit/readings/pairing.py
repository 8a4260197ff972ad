"""Pairing two configurations' runs by seed and reading both at one point (§C.1 "Statistics", App. D).

A seed's treatment and control runs are compared only when they saw the same problems (the
problem-set hash of every evaluation) and, under common random numbers, the same sampling seeds;
:func:`paired_readings` reads both at the contrast's reading point and, for the crossed
seed-by-problem bootstrap, the seeds × problems matrices of per-problem accuracies there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..plan import ReadingPoint
from .base import RUN, PairingError, ReadingError, exclusions_table
from .points import read_point

# --------------------------------------------------------------------------------------------
# Pairing
# --------------------------------------------------------------------------------------------


_NO_CRN = ("a study whose evaluations do not share sampling seeds preregisters "
           "`[evaluation] common_random_numbers = false`")


def _modal(s: pd.Series):
    return s.value_counts().index[0]


def _per_seed(seed: np.ndarray, code: np.ndarray, no_seed: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per distinct seed (ascending): how many problem sets its rows score, the set of its first
    row, and whether any row lacks its sampling seed: one stable sort, then per-seed slices."""
    order = np.argsort(seed, kind="stable")
    s, c, n = seed[order], code[order], no_seed[order]
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    by = np.lexsort((c, s))  # within a seed, equal sets together
    cs, ss = c[by], s[by]
    new = np.r_[True, (cs[1:] != cs[:-1]) | (ss[1:] != ss[:-1])]
    n_sets = np.add.reduceat(new.astype(np.int64), starts) if len(s) else np.zeros(0, np.int64)
    no = np.maximum.reduceat(n, starts) if len(s) else np.zeros(0, bool)
    return s[starts], n_sets, c[starts], no


def _suspect_seeds(t: pd.DataFrame, c: pd.DataFrame, both: set[int], common_random_numbers: bool) -> list[int]:
    """The seeds of ``both`` on which :func:`_seed_issues` can find anything, found with array
    operations over all seeds at once: a run scoring more than one problem set, the two runs'
    sets differing, an unknown sampling seed, or sampling seeds differing at an evaluation.
    (Curves are small — a row per evaluation — so pandas' per-call costs, not the rows, would
    dominate a group-by here.)"""
    if not both:
        return []
    keep = [x[x["seed"].isin(list(both))] for x in (t, c)]
    codes = pd.factorize(pd.concat([k["problem_set"] for k in keep], ignore_index=True))[0]  # shared codes: sets comparable
    split = len(keep[0])
    sides = []
    for k, code in zip(keep, (codes[:split], codes[split:])):
        sides.append(_per_seed(k["seed"].to_numpy(dtype="int64"), code, k["eval_seed"].isna().to_numpy()))
    (st, nt, ft, ot), (sc, nc, fc, oc) = sides
    seeds, it, ic = np.intersect1d(st, sc, assume_unique=True, return_indices=True)
    bad = (nt[it] > 1) | (nc[ic] > 1) | (ft[it] != fc[ic])
    if common_random_numbers:
        bad |= ot[it] | oc[ic]
        cols = ["seed", "eval_index", "eval_seed"]
        e = keep[0][cols].merge(keep[1][cols], on=["seed", "eval_index"], suffixes=("_t", "_c"))
        differ = (e["eval_seed_t"] != e["eval_seed_c"]).fillna(True).to_numpy(dtype=bool)  # a missing seed differs
        bad |= np.isin(seeds, e.loc[differ, "seed"].to_numpy(dtype="int64"))
    return sorted(int(x) for x in seeds[bad])


def _seed_issues(s: int, treatment: str, control: str, rt: pd.DataFrame, rc: pd.DataFrame,
                 common_random_numbers: bool) -> list[tuple]:
    """The pairing issues of seed ``s`` (runs ``rt``, ``rc`` sorted by evaluation), in order."""
    issues: list[tuple] = []
    sets = {}
    for name, run in ((treatment, rt), (control, rc)):
        sets[name] = _modal(run["problem_set"])
        odd = run[run["problem_set"] != sets[name]]
        if len(odd):
            e = odd.iloc[0]
            n0 = int(run.loc[run["problem_set"] == sets[name], "n_problems"].iloc[0])
            issues.append((s, name, f"configuration {name!r} seed {s}: evaluation {int(e['eval_index'])} scored "
                           f"{int(e['n_problems'])} problems, a different set from its other evaluations ({n0})"))
    if sets[treatment] != sets[control]:
        nt, nc = int(rt["n_problems"].iloc[0]), int(rc["n_problems"].iloc[0])
        issues.append((s, "both", f"seed {s}: evaluation problems differ between {treatment!r} ({nt} problems) "
                       f"and {control!r} ({nc} problems)"))
    if not common_random_numbers:
        return issues
    unknown = [(name, run) for name, run in ((treatment, rt), (control, rc)) if run["eval_seed"].isna().any()]
    for name, run in unknown:
        e = run[run["eval_seed"].isna()].iloc[0]
        issues.append((s, name, f"configuration {name!r} seed {s}: evaluation {int(e['eval_index'])} does not log its "
                       f"sampling seed (eval_seed null), so common random numbers cannot be checked; {_NO_CRN}"))
    if unknown:
        return issues
    m = rt[["eval_index", "eval_seed"]].merge(rc[["eval_index", "eval_seed"]], on="eval_index", suffixes=("_t", "_c"))
    m = m[m["eval_seed_t"] != m["eval_seed_c"]]
    if len(m):
        e = m.iloc[0]
        issues.append((s, "both", f"seed {s}: evaluation {int(e['eval_index'])} used sampling seed {int(e['eval_seed_t'])} "
                       f"in {treatment!r} but {int(e['eval_seed_c'])} in {control!r} (common random numbers broken); {_NO_CRN}"))
    return issues


def check_pairing(curves: pd.DataFrame, treatment: str, control: str, *,
                  common_random_numbers: bool = True) -> pd.DataFrame:
    """Everything that keeps the two configurations from being paired by seed.

    Checks (dense-rewards paper §C.1): both configurations have the seed; every evaluation of a run
    scored the same problems; both runs scored the same problems; at every evaluation index both
    used the same, known evaluation sampling seed (common random numbers). With
    ``common_random_numbers=False`` (a plan that preregistered that its trainer's evaluator does
    not share sampling seeds) the last check is skipped. Returns one row per issue:
    seed, configuration, reason (empty when all pairs are clean). Raises :class:`PairingError` if
    a configuration has no runs at all.
    """
    for name in (treatment, control):
        if not (curves["configuration"] == name).any():
            have = ", ".join(sorted(map(str, curves["configuration"].unique()))) or "none"
            raise PairingError(f"configuration {name!r} has no runs (configurations: {have})")
    t = curves[curves["configuration"] == treatment]
    c = curves[curves["configuration"] == control]
    st, sc = set(t["seed"].astype(int)), set(c["seed"].astype(int))
    issues = []
    for s in sorted(st ^ sc):
        has, lacks = (treatment, control) if s in st else (control, treatment)
        issues.append((s, lacks, f"seed {s}: configuration {has!r} has evaluations, {lacks!r} has none (no run, or a run that logged no evaluations)"))
    for s in _suspect_seeds(t, c, st & sc, common_random_numbers):
        rt = t[t["seed"] == s].sort_values("eval_index", ignore_index=True)
        rc = c[c["seed"] == s].sort_values("eval_index", ignore_index=True)
        issues += _seed_issues(s, treatment, control, rt, rc, common_random_numbers)
    return pd.DataFrame(issues, columns=["seed", "configuration", "reason"])


@dataclass
class PairedReadings:
    """Per-seed paired readings of ``treatment`` - ``control`` at ``point``.

    ``table``: one row per paired seed: seed, treatment, control, difference, at, then for each
    arm ``<arm>_eval_lo``, ``<arm>_eval_hi``, ``<arm>_weight``, ``<arm>_tokens``,
    ``<arm>_train_seconds``, ``<arm>_updates`` (arm = treatment | control). ``exclusions``:
    configuration, seed, eval_index, rule, reason for every seed left out. ``treatment_matrix`` /
    ``control_matrix``: seeds × problems accuracies at the reading (rows in ``table`` order,
    columns ``problems``), when per-problem accuracies were given; each row's mean is the reading.
    """

    treatment: str
    control: str
    point: ReadingPoint
    table: pd.DataFrame
    exclusions: pd.DataFrame
    problems: list[str] | None = None
    treatment_matrix: np.ndarray | None = None
    control_matrix: np.ndarray | None = None


def _evaluations_read(table: pd.DataFrame) -> np.ndarray:
    """The evaluation indices :func:`_matrix` reads for either arm: each row's two neighbours
    of its reading, or every evaluation of its span."""
    out = set()
    for arm in ("treatment", "control"):
        lo, hi = table[f"{arm}_eval_lo"].to_numpy(dtype="int64"), table[f"{arm}_eval_hi"].to_numpy(dtype="int64")
        span = np.isnan(table[f"{arm}_weight"].to_numpy(dtype="float64"))
        out.update(lo[~span].tolist())
        out.update(hi[~span].tolist())
        for a, b in zip(lo[span].tolist(), hi[span].tolist()):
            out.update(range(a, b + 1))
    return np.array(sorted(out), dtype="int64")


def _matrix(pa_wide: pd.DataFrame, config: str, rows: pd.DataFrame, arm: str) -> np.ndarray:
    """Each row's per-problem accuracies at its reading: ``(1 - w)·lo + w·hi`` of its two
    evaluations, or for a span the mean of its run's evaluations from lo to hi. ``pa_wide``'s
    rows (configuration, seed, eval_index; sorted) are found through one position table instead
    of a pandas lookup per row; a reading whose evaluation is not there raises ``KeyError``."""
    values = pa_wide.to_numpy(dtype="float64")
    pos = {(str(c), int(s), int(e)): i for i, (c, s, e) in enumerate(pa_wide.index)}
    runs = {k[:2] for k in pos}
    out = np.empty((len(rows), values.shape[1]))
    seeds = rows["seed"].to_numpy(dtype="int64").tolist()
    los = rows[f"{arm}_eval_lo"].to_numpy(dtype="int64").tolist()
    his = rows[f"{arm}_eval_hi"].to_numpy(dtype="int64").tolist()
    weights = rows[f"{arm}_weight"].to_numpy(dtype="float64").tolist()
    for k, (seed, e_lo, e_hi, w) in enumerate(zip(seeds, los, his, weights)):
        if np.isnan(w):  # a span: the mean of every evaluation from lo to hi (in eval_index order)
            if (config, seed) not in runs:
                raise KeyError((config, seed))
            out[k] = values[[pos[(config, seed, e)] for e in range(e_lo, e_hi + 1) if (config, seed, e) in pos]].mean(axis=0)
            continue
        out[k] = (1 - w) * values[pos[(config, seed, e_lo)]] + w * values[pos[(config, seed, e_hi)]]
    return out


def paired_readings(
    curves: pd.DataFrame,
    treatment: str,
    control: str,
    point: ReadingPoint,
    *,
    problem_acc: pd.DataFrame | None = None,
    allow_unpaired: bool = False,
    common_random_numbers: bool = True,
) -> PairedReadings:
    """Pair ``treatment`` and ``control`` by seed and read both at ``point``.

    Unpaired seeds (see :func:`check_pairing`) and runs that never reached their reading point
    raise :class:`PairingError` naming configuration, seed and what differs — or, with
    ``allow_unpaired=True``, are left out and listed in ``exclusions`` (rules ``unpaired`` and
    ``not_reached``). ``problem_acc`` (from :func:`problem_accuracy`, same set and verifier as the
    curves) adds the seeds × problems matrices for the crossed bootstrap (§C.1 "Statistics").
    ``common_random_numbers``: whether pairing checks the sampling seeds (:func:`check_pairing`).
    """
    issues = check_pairing(curves, treatment, control, common_random_numbers=common_random_numbers)
    excl = []
    if len(issues):
        if not allow_unpaired:
            more = f" (and {len(issues) - 1} more)" if len(issues) > 1 else ""
            raise PairingError(issues["reason"].iloc[0] + more)
        for s, g in issues.groupby("seed"):
            for name in (treatment, control):
                excl.append((name, int(s), pd.NA, "unpaired", "; ".join(g["reason"])))
        bad = set(issues["seed"].astype(int))
        curves = curves[~curves["seed"].isin(bad)]
    reads = read_point(curves, treatment, control, point)
    missing = reads[~reads["reached"]]
    if len(missing):
        if not allow_unpaired:
            r = missing.iloc[0]
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise PairingError(f"configuration {r['configuration']!r} seed {r['seed']} never reached its reading point "
                               f"({point.describe()}): {r['note']}{more}")
        for s, g in missing.groupby("seed"):
            why = "; ".join(f"configuration {r['configuration']!r}: {r['note']}" for _, r in g.iterrows())
            for name in (treatment, control):
                excl.append((name, int(s), pd.NA, "not_reached", f"seed {s} did not reach {point.describe()}: {why}"))
        reads = reads[~reads["seed"].isin(missing["seed"])]
    cols = ["eval_lo", "eval_hi", "weight", "tokens", "train_seconds", "updates"]
    sides = {}
    for arm, name in (("treatment", treatment), ("control", control)):
        r = reads[reads["configuration"] == name].set_index("seed").sort_index()
        sides[arm] = r
    t, c = sides["treatment"], sides["control"]
    table = pd.DataFrame({"seed": t.index.astype("int64"), "treatment": t["accuracy"].to_numpy(),
                          "control": c["accuracy"].to_numpy()})
    table["difference"] = table["treatment"] - table["control"]
    table["at"] = t["at"].to_numpy()  # T*, T_c, the treatment's update count, or k·B tokens
    for arm, r in sides.items():
        for col in cols:
            table[f"{arm}_{col}"] = r[col].to_numpy()
    res = PairedReadings(treatment, control, point, table, exclusions_table(excl))
    if problem_acc is not None and len(table):
        for col, want in (("eval_set", curves["eval_set"].iloc[0]), ("verifier", curves["verifier"].iloc[0])):
            got = set(problem_acc[col].unique())
            if got != {want}:
                raise ReadingError(f"per-problem accuracies are for {col} {sorted(got)}, the curves for {want!r}")
        keep = problem_acc["configuration"].isin([treatment, control]) & problem_acc["seed"].isin(table["seed"])
        keep &= problem_acc["eval_index"].isin(_evaluations_read(table))  # the pivot holds only what _matrix reads
        wide = problem_acc[keep].pivot(index=RUN + ["eval_index"], columns="problem_id", values="accuracy").sort_index()
        tm, cm = _matrix(wide, treatment, table, "treatment"), _matrix(wide, control, table, "control")
        if np.isnan(tm).any() or np.isnan(cm).any():
            raise PairingError(f"per-problem accuracies are missing for some problems at the reading of {treatment!r} vs {control!r}")
        res.problems = [str(p) for p in wide.columns]
        res.treatment_matrix, res.control_matrix = tm, cm
    return res


