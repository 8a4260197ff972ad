"""Readings at matched compute: accuracy curves, reading points, pairing, drift and admission.

Pure functions on the tidy frames of :func:`prereg_kit.runlog.load_study`. Section numbers refer to
the dense-rewards paper (``seeds/000_…txt``) and its extraction (``seeds/extract.md``).

- *At tokens* (§2.3 "Metric", §C.1; extract §3.4): accuracy at the **first evaluation at or
  after** the budget B (or k·B), without selecting checkpoints.
- *At time* (Appendix D; extract §3.5): per seed, T* is the shorter of the two runs' training
  times up to their evaluation at B; each run's accuracy is interpolated linearly in training time
  at T*, so the faster run is read at B and the slower between two of its evaluations.
- *At the control's time* (Appendix F, S35): T_c is the control's training time to B; the
  treatment is interpolated linearly in training time at T_c from a run extended past B.
- *At updates* (§2.3, Figure 2a): the treatment is read at B; the control is interpolated
  linearly in its update count at the treatment's update count.

Multi-reward metrics (paper 2 §4.7, extract §4.7), read at token reading points only:

- *Collapse* (P2:L113, "pass@4 below the base model"): per run and evaluation, 1 when the run's
  pass@4 is strictly below its own pass@4 at evaluation 0 (before any update), else 0
  (``accuracy_curve(..., metric="collapse")``); a contrast's mean difference is the difference
  of collapse rates, paired by seed.
- *Relative accuracy* (P2:L101-103, "0.91×"): a run's accuracy over the primary-only reference
  configuration's accuracy at k·B on the same seed (:func:`relative_accuracy_curves`).

A reading is a *bracket*: two evaluations ``eval_lo <= eval_hi`` of one run and a weight ``w``
(``0`` when read exactly at an evaluation); the value is ``(1 - w)·acc[lo] + w·acc[hi]``. The
same bracket applied to per-problem accuracies gives the seeds × problems matrices that the
crossed bootstrap resamples.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import pandas as pd

# The plan names reading points and the collapse metric; the readings take them from it.
from .plan import COLLAPSE_K, ReadingPoint

RUN = ["configuration", "seed"]
VERIFIERS = ("default", "strict", "greedy")
DRIFT_THRESHOLD = 0.1
EXCLUSION_COLUMNS = ["configuration", "seed", "eval_index", "rule", "reason"]


class ReadingError(ValueError):
    """Readings that cannot be taken (missing set, unlogged verifier, non-monotone axis)."""


class PairingError(ReadingError):
    """Runs that cannot be compared: a seed, problem set or evaluation seed differs, or a run
    never reached its reading point."""


# --------------------------------------------------------------------------------------------
# Accuracy
# --------------------------------------------------------------------------------------------


_PASS_AT = "pass@"
_RATE = "_rate"


def _metric_value(ev: pd.DataFrame, eval_set: str, verifier: str, metric: str) -> np.ndarray:
    """Per-row value of ``metric``: accuracy (correct/samples), ``pass@K`` (the unbiased
    estimator from samples and correct) or ``<channel>_rate`` (ch_<channel>/samples)."""
    samples = ev["samples"].to_numpy(dtype="float64")
    if metric == "accuracy":
        num = ev["correct"] if verifier == "default" else ev["correct_strict"]
        return num.to_numpy(dtype="float64") / samples
    if metric.startswith(_PASS_AT):
        try:
            k = int(metric[len(_PASS_AT):])
        except ValueError:
            raise ReadingError(f"metric {metric!r}: pass@K needs an integer K") from None
        if k < 1:
            raise ReadingError(f"metric {metric!r}: K must be at least 1")
        if len(samples) and samples.min() < k:
            raise ReadingError(f"metric {metric}: set {eval_set!r} has evaluations with {int(samples.min())} samples per problem (< {k})")
        from prereg_kit.stats import pass_at_k  # noqa: PLC0415

        num = ev["correct"] if verifier == "default" else ev["correct_strict"]
        return np.asarray(pass_at_k(samples.astype(int), num.to_numpy(dtype="int64"), k), dtype="float64")
    if metric.endswith(_RATE) and len(metric) > len(_RATE):
        channel = metric[: -len(_RATE)]
        col = f"ch_{channel}"
        if col not in ev.columns and channel == "correct":
            col = "correct"  # the primary channel is the default verifier's count
        if col not in ev.columns or ev[col].isna().any():
            raise ReadingError(f"metric {metric}: column {col!r} not logged for set {eval_set!r} (a run without channel {channel!r} counts)")
        return ev[col].to_numpy(dtype="float64") / samples
    if metric in _DERIVED:
        raise ReadingError(_DERIVED[metric])
    raise ReadingError(f"unknown metric {metric!r} (accuracy, greedy_accuracy, pass@K, <channel>_rate, relative_accuracy, collapse)")


_DERIVED = {
    "relative_accuracy": "metric relative_accuracy is a ratio of two runs' accuracies, not a per-problem value: "
                         "take accuracy curves and divide with relative_accuracy_curves(curves, reference, budget)",
    "collapse": "metric collapse is a per-run flag, not a per-problem value: use accuracy_curve(..., metric='collapse')",
}


def _select(evals: pd.DataFrame, eval_set: str, verifier: str, metric: str = "accuracy") -> pd.DataFrame:
    if verifier not in VERIFIERS:
        raise ReadingError(f"unknown verifier {verifier!r} (one of {', '.join(VERIFIERS)})")
    ev = evals[evals["eval_set"] == eval_set]
    if not len(ev):
        sets = ", ".join(sorted(map(str, evals["eval_set"].unique()))) or "none"
        raise ReadingError(f"no evaluation rows for set {eval_set!r} (sets logged: {sets})")
    if metric == "greedy_accuracy":
        verifier = "greedy"
    if verifier == "greedy":
        if metric not in ("accuracy", "greedy_accuracy"):
            raise ReadingError(f"metric {metric!r} is not defined for greedy decoding")
        g = ev["greedy_correct"] if "greedy_correct" in ev else pd.Series(pd.NA, index=ev.index)
        ev = ev[g.notna()]
        if not len(ev):
            raise ReadingError(f"greedy correctness not logged for set {eval_set!r}")
        acc = ev["greedy_correct"].astype("float64")
    else:
        acc = _metric_value(ev, eval_set, verifier, metric)
    out = ev.assign(accuracy=np.asarray(acc, dtype="float64"))
    return out


def problem_accuracy(evals: pd.DataFrame, *, eval_set: str, verifier: str = "default",
                     metric: str = "accuracy") -> pd.DataFrame:
    """Per-problem accuracy: correct / samples under ``verifier`` (greedy: 0 or 1, where logged).

    ``metric``: ``accuracy`` (default), ``pass@K`` (unbiased pass@k from samples and correct) or
    ``<channel>_rate`` (ch_<channel>/samples); the value is in the ``accuracy`` column. The
    derived metrics ``relative_accuracy`` and ``collapse`` have no per-problem value (an error).
    Columns: configuration, seed, eval_index, eval_set, verifier, problem_id, accuracy.
    """
    ev = _select(evals, eval_set, verifier, metric)
    out = ev[RUN + ["eval_index", "problem_id", "accuracy"]].copy()
    out.insert(3, "eval_set", eval_set)
    out.insert(4, "verifier", verifier)
    return out.sort_values(RUN + ["eval_index", "problem_id"], ignore_index=True)


def _set_hash(ids: pd.Series) -> str:
    return hashlib.sha1("\n".join(sorted(map(str, ids))).encode()).hexdigest()[:12]


def accuracy_curve(evals: pd.DataFrame, *, eval_set: str, verifier: str = "default",
                   metric: str = "accuracy") -> pd.DataFrame:
    """Accuracy per evaluation: the mean over problems of correct/samples (pass@1; §3.4).

    One row per (configuration, seed, eval_index) with: iteration, tokens, train_seconds,
    updates (cumulative at the evaluation), eval_seed, n_problems, problem_set (a hash of the
    problem ids, for pairing), eval_set, verifier, accuracy. ``verifier``: ``default``,
    ``strict`` (boxed only) or ``greedy`` (evaluations where greedy correctness was logged).
    Raises :class:`ReadingError` if one evaluation carries two sampling seeds. ``metric``:
    ``pass@K`` or ``<channel>_rate`` put that metric's per-problem mean in ``accuracy``
    (see :func:`problem_accuracy`). ``collapse`` (multi-reward paper §4.7, P2:L113: "pass@4 below
    the base model") puts the run's collapse flag there: 1.0 at an evaluation whose pass@4 (the
    unbiased estimator from the logged samples, under ``verifier``) is strictly below the same
    run's pass@4 at evaluation 0 (the base model, before any update; same problems and, by
    common random numbers, the same sampling seed for every configuration of a seed), else 0.0.
    ``relative_accuracy`` needs the reference: see :func:`relative_accuracy_curves`.
    """
    collapse = metric == "collapse"
    ev = _select(evals, eval_set, verifier, f"pass@{COLLAPSE_K}" if collapse else metric)
    keys = RUN + ["eval_index"]
    g = ev.groupby(keys, sort=True)
    out = g.agg(
        iteration=("iteration", "first"),
        tokens=("tokens", "first"),
        train_seconds=("train_seconds", "first"),
        updates=("updates", "first"),
        eval_seed=("eval_seed", "first"),
        n_seeds=("eval_seed", "nunique"),
        n_problems=("problem_id", "size"),
        accuracy=("accuracy", "mean"),
    ).reset_index()
    bad = out[out["n_seeds"] > 1]
    if len(bad):
        r = bad.iloc[0]
        raise ReadingError(f"configuration {r['configuration']!r} seed {r['seed']}: evaluation {r['eval_index']} on set {eval_set!r} logs {r['n_seeds']} sampling seeds")
    out["problem_set"] = g["problem_id"].agg(_set_hash).to_numpy()
    out["eval_set"] = eval_set
    out["verifier"] = verifier
    if collapse:
        out["accuracy"] = _collapse_flags(out, eval_set)
    cols = keys + ["iteration", "tokens", "train_seconds", "updates", "eval_seed", "n_problems", "problem_set", "eval_set", "verifier", "accuracy"]
    return out[cols]


def _collapse_flags(curve: pd.DataFrame, eval_set: str) -> np.ndarray:
    """Per evaluation: 1.0 when the run's pass@4 is strictly below its pass@4 at evaluation 0."""
    flags = np.zeros(len(curve))
    for key, g in curve.groupby(RUN, sort=False):
        base = g[g["eval_index"] == 0]
        if not len(base):
            raise ReadingError(f"metric collapse: configuration {key[0]!r} seed {key[1]} has no evaluation 0 on set "
                               f"{eval_set!r} (the base model's pass@{COLLAPSE_K} is read at the start of the run)")
        if float(base["updates"].iloc[0]) != 0:
            raise ReadingError(f"metric collapse: configuration {key[0]!r} seed {key[1]}: evaluation 0 on set {eval_set!r} "
                               f"was taken after {float(base['updates'].iloc[0]):g} updates, not before any update")
        b = float(base["accuracy"].iloc[0])
        flags[curve.index.get_indexer(g.index)] = (g["accuracy"].to_numpy(dtype="float64") < b).astype("float64")
    return flags


def relative_accuracy_curves(curves: pd.DataFrame, reference: str, budget: float, *,
                             allow_missing: bool = False) -> "AdmissionResult":
    """Accuracy relative to the primary-only reference (multi-reward paper §4.7; P2:L101-103).

    The paper reports held-out R_P "as a multiple of the R_P-only reference" (0.91×). Here, per
    seed (common random numbers: the same evaluation problems and sampling seeds), every
    evaluation's accuracy in ``curves`` is divided by the ``reference`` configuration's accuracy
    at its first evaluation at or after ``budget`` tokens (B or k·B, :func:`read_at_tokens`), so
    a configuration read at k·B gets acc(c, s)/acc(reference, s), both at k·B; the reference reads
    1 exactly. ``curves`` are accuracy curves (:func:`accuracy_curve`, after admission).

    A reference accuracy of 0 makes the ratio undefined: :class:`ReadingError` naming the seed
    (never NaN, never silently dropped). A seed without a reference reading at ``budget`` raises
    :class:`PairingError`, or with ``allow_missing`` is left out and listed (rule ``no_reference``).
    Returns :class:`AdmissionResult`: the divided curves and the exclusions.
    """
    if not (curves["configuration"] == reference).any():
        have = ", ".join(sorted(map(str, curves["configuration"].unique()))) or "none"
        raise PairingError(f"relative_accuracy: the reference configuration {reference!r} has no runs (configurations: {have})")
    ref = read_at_tokens(curves[curves["configuration"] == reference], budget).set_index("seed")
    rows = []
    for s in sorted(set(curves["seed"].astype(int))):
        if s not in ref.index or not bool(ref.loc[s, "reached"]):
            why = ref.loc[s, "note"] if s in ref.index else "no run"
            rows.append((s, f"seed {s}: the reference {reference!r} has no reading at {budget:,.0f} tokens ({why})"))
            continue
        if float(ref.loc[s, "accuracy"]) == 0:
            raise ReadingError(f"relative_accuracy: the reference {reference!r} seed {s} has accuracy 0 at "
                               f"{budget:,.0f} tokens (evaluation {int(ref.loc[s, 'eval_lo'])}): the ratio is undefined")
    if rows and not allow_missing:
        more = f" (and {len(rows) - 1} more)" if len(rows) > 1 else ""
        raise PairingError("relative_accuracy: " + rows[0][1] + more)
    bad = {s for s, _ in rows}
    ex = exclusions_table([(str(c), int(s), pd.NA, "no_reference", why)
                      for s, why in rows for c in sorted(curves.loc[curves["seed"] == s, "configuration"].unique())])
    out = curves[~curves["seed"].isin(bad)].copy()
    denom = out["seed"].map(ref["accuracy"]).to_numpy(dtype="float64")
    out["accuracy"] = out["accuracy"].to_numpy(dtype="float64") / denom
    return AdmissionResult(out.reset_index(drop=True), ex)


# --------------------------------------------------------------------------------------------
# Reading points
# --------------------------------------------------------------------------------------------


READ_COLUMNS = RUN + ["reached", "at", "eval_lo", "eval_hi", "weight", "tokens", "train_seconds", "updates", "accuracy", "note"]


def _runs(curves: pd.DataFrame, configuration: str | None = None) -> dict[tuple[str, int], pd.DataFrame]:
    c = curves if configuration is None else curves[curves["configuration"] == configuration]
    return {(str(k[0]), int(k[1])): g.sort_values("eval_index", ignore_index=True)
            for k, g in c.groupby(RUN, sort=True)}


def _axis(run: pd.DataFrame, col: str, key: tuple[str, int]) -> np.ndarray:
    a = run[col].to_numpy(dtype="float64")
    if np.any(np.diff(a) < 0):
        raise ReadingError(f"configuration {key[0]!r} seed {key[1]}: {col} decreases between evaluations")
    return a


def _first_at_or_after(run: pd.DataFrame, tokens: float) -> int | None:
    """Position of the first evaluation with cumulative tokens >= ``tokens`` (§3.4), or None."""
    pos = int(np.searchsorted(run["tokens"].to_numpy(dtype="float64"), tokens, side="left"))
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
    a, b = run.iloc[lo], run.iloc[hi]
    lin = lambda c: (1 - w) * float(a[c]) + w * float(b[c])  # noqa: E731
    return dict(configuration=key[0], seed=key[1], reached=True, at=at, eval_lo=int(a["eval_index"]),
                eval_hi=int(b["eval_index"]), weight=w, tokens=lin("tokens"), train_seconds=lin("train_seconds"),
                updates=lin("updates"), accuracy=lin("accuracy"), note=note)


def _frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=READ_COLUMNS)
    df["eval_lo"] = df["eval_lo"].astype("Int64")
    df["eval_hi"] = df["eval_hi"].astype("Int64")
    df["reached"] = df["reached"].astype(bool)
    return df


def _at_budget(key, run, budget) -> tuple[dict, int | None]:
    pos = _first_at_or_after(run, budget)
    if pos is None:
        last = float(run["tokens"].iloc[-1]) if len(run) else 0.0
        return _row(key, run, None, budget, f"no evaluation at or after {budget:,.0f} tokens (last at {last:,.0f})"), None
    return _row(key, run, (pos, pos, 0.0), budget), pos


def read_at_tokens(curves: pd.DataFrame, budget: float) -> pd.DataFrame:
    """Each run's accuracy at its first evaluation at or after ``budget`` tokens (B or k·B).

    Rule (§2.3 "Metric", §C.1): "We take it from the first evaluation at or after the budget B,
    without selecting checkpoints." One row per run (columns :data:`READ_COLUMNS`);
    ``reached`` is False, with a ``note``, for a run without such an evaluation.
    """
    return _frame([_at_budget(k, r, budget)[0] for k, r in _runs(curves).items()])


def _pairs(curves, treatment, control):
    t, c = _runs(curves, treatment), _runs(curves, control)
    seeds = sorted({k[1] for k in t} & {k[1] for k in c})
    return [((treatment, s), t[(treatment, s)], (control, s), c[(control, s)]) for s in seeds]


def read_at_time(curves: pd.DataFrame, treatment: str, control: str, budget: float) -> pd.DataFrame:
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


def read_at_control_time(curves: pd.DataFrame, treatment: str, control: str, budget: float) -> pd.DataFrame:
    """Both runs read at T_c, the control's training time to ``budget`` (S35, Appendix F).

    Rule (L5153-5156): T_c is the training time the control needs to reach B on the same seed;
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


def read_at_updates(curves: pd.DataFrame, treatment: str, control: str, budget: float) -> pd.DataFrame:
    """Treatment read at ``budget``; control interpolated to the treatment's update count.

    Rule (§2.3, Figure 2a, L389-390): "outcome-only GRPO is interpolated to each reward's update
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


def read_point(curves: pd.DataFrame, treatment: str, control: str, point: ReadingPoint) -> pd.DataFrame:
    """Readings of both configurations at ``point`` (dispatch on ``point.kind``)."""
    if point.kind == "tokens":
        return read_at_tokens(curves[curves["configuration"].isin([treatment, control])], point.tokens)
    fn = {"time": read_at_time, "control_time": read_at_control_time, "updates": read_at_updates}.get(point.kind)
    if fn is None:
        raise ReadingError(f"unknown reading point kind {point.kind!r}")
    return fn(curves, treatment, control, point.tokens)


# --------------------------------------------------------------------------------------------
# Pairing
# --------------------------------------------------------------------------------------------


def _modal(s: pd.Series):
    return s.value_counts().index[0]


def check_pairing(curves: pd.DataFrame, treatment: str, control: str) -> pd.DataFrame:
    """Everything that keeps the two configurations from being paired by seed.

    Checks (extract §1.0, §3.4): both configurations have the seed; every evaluation of a run
    scored the same problems; both runs scored the same problems; at every evaluation index both
    used the same evaluation sampling seed (common random numbers). Returns one row per issue:
    seed, configuration, reason (empty when all pairs are clean). Raises :class:`PairingError` if
    a configuration has no runs at all.
    """
    issues = []
    for name in (treatment, control):
        if not (curves["configuration"] == name).any():
            have = ", ".join(sorted(map(str, curves["configuration"].unique()))) or "none"
            raise PairingError(f"configuration {name!r} has no runs (configurations: {have})")
    t, c = _runs(curves, treatment), _runs(curves, control)
    st, sc = {k[1] for k in t}, {k[1] for k in c}
    for s in sorted(st ^ sc):
        has, lacks = (treatment, control) if s in st else (control, treatment)
        issues.append((s, lacks, f"seed {s}: configuration {has!r} has a run, {lacks!r} has none"))
    for s in sorted(st & sc):
        rt, rc = t[(treatment, s)], c[(control, s)]
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
        m = rt[["eval_index", "eval_seed"]].merge(rc[["eval_index", "eval_seed"]], on="eval_index", suffixes=("_t", "_c"))
        m = m[m["eval_seed_t"] != m["eval_seed_c"]]
        if len(m):
            e = m.iloc[0]
            issues.append((s, "both", f"seed {s}: evaluation {int(e['eval_index'])} used sampling seed {int(e['eval_seed_t'])} "
                           f"in {treatment!r} but {int(e['eval_seed_c'])} in {control!r} (common random numbers broken)"))
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


def exclusions_table(rows: Iterable[tuple]) -> pd.DataFrame:
    """Exclusion rows ``(configuration, seed, eval_index or NA, rule, reason)`` as one tidy table."""
    df = pd.DataFrame(list(rows), columns=EXCLUSION_COLUMNS)
    df["seed"] = df["seed"].astype("int64")
    df["eval_index"] = df["eval_index"].astype("Int64")
    return df


def _matrix(pa_wide: pd.DataFrame, config: str, rows: pd.DataFrame, arm: str) -> np.ndarray:
    out = []
    for _, r in rows.iterrows():
        lo = pa_wide.loc[(config, int(r["seed"]), int(r[f"{arm}_eval_lo"]))].to_numpy(dtype="float64")
        hi = pa_wide.loc[(config, int(r["seed"]), int(r[f"{arm}_eval_hi"]))].to_numpy(dtype="float64")
        w = float(r[f"{arm}_weight"])
        out.append((1 - w) * lo + w * hi)
    return np.vstack(out) if out else np.empty((0, pa_wide.shape[1]))


def paired_readings(
    curves: pd.DataFrame,
    treatment: str,
    control: str,
    point: ReadingPoint,
    *,
    problem_acc: pd.DataFrame | None = None,
    allow_unpaired: bool = False,
) -> PairedReadings:
    """Pair ``treatment`` and ``control`` by seed and read both at ``point``.

    Unpaired seeds (see :func:`check_pairing`) and runs that never reached their reading point
    raise :class:`PairingError` naming configuration, seed and what differs — or, with
    ``allow_unpaired=True``, are left out and listed in ``exclusions`` (rules ``unpaired`` and
    ``not_reached``). ``problem_acc`` (from :func:`problem_accuracy`, same set and verifier as the
    curves) adds the seeds × problems matrices for the crossed bootstrap (§3.17).
    """
    issues = check_pairing(curves, treatment, control)
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
        wide = problem_acc[keep].pivot(index=RUN + ["eval_index"], columns="problem_id", values="accuracy").sort_index()
        tm, cm = _matrix(wide, treatment, table, "treatment"), _matrix(wide, control, table, "control")
        if np.isnan(tm).any() or np.isnan(cm).any():
            raise PairingError(f"per-problem accuracies are missing for some problems at the reading of {treatment!r} vs {control!r}")
        res.problems = [str(p) for p in wide.columns]
        res.treatment_matrix, res.control_matrix = tm, cm
    return res


# --------------------------------------------------------------------------------------------
# Drift
# --------------------------------------------------------------------------------------------


def drift_flags(evals: pd.DataFrame, *, eval_set: str, threshold: float = DRIFT_THRESHOLD) -> pd.DataFrame:
    """Flag drifted evaluations: default-verifier accuracy exceeds strict by more than ``threshold``.

    Rule (§3.12; L2458-2495): an evaluation "counts as drifted when default verifier accuracy
    exceeds strict-verifier accuracy by more than 0.1". One row per (configuration, seed,
    eval_index): tokens, accuracy_default, accuracy_strict, gap, drifted.
    """
    d = accuracy_curve(evals, eval_set=eval_set, verifier="default")
    s = accuracy_curve(evals, eval_set=eval_set, verifier="strict")
    out = d[RUN + ["eval_index", "tokens"]].copy()
    out["accuracy_default"] = d["accuracy"].to_numpy()
    out["accuracy_strict"] = s["accuracy"].to_numpy()
    out["gap"] = out["accuracy_default"] - out["accuracy_strict"]
    out["drifted"] = out["gap"] > threshold
    return out


def drifted_at(flags: pd.DataFrame, budget: float) -> pd.DataFrame:
    """Per run, whether its evaluation at ``budget`` (first at or after) is drifted (§3.12).

    "A run is drifted at B when its evaluation at B is drifted" (Table 12). Columns:
    configuration, seed, eval_index (NA if the run never reached B), gap, drifted.
    """
    rows = []
    for key, run in _runs(flags).items():
        pos = _first_at_or_after(run, budget)
        if pos is None:
            rows.append((key[0], key[1], pd.NA, np.nan, False))
        else:
            r = run.iloc[pos]
            rows.append((key[0], key[1], int(r["eval_index"]), float(r["gap"]), bool(r["drifted"])))
    df = pd.DataFrame(rows, columns=RUN + ["eval_index", "gap", "drifted"])
    df["eval_index"] = df["eval_index"].astype("Int64")
    return df


# --------------------------------------------------------------------------------------------
# AdmissionResult and exclusion rules: each returns (kept curves, exclusions); never silent
# --------------------------------------------------------------------------------------------


@dataclass
class AdmissionResult:
    """Curves kept by the admission rules and every exclusion with its rule and reason."""

    kept: pd.DataFrame
    exclusions: pd.DataFrame


def _drop_runs(curves: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    if not len(runs):
        return curves
    idx = pd.MultiIndex.from_frame(curves[RUN])
    drop = pd.MultiIndex.from_frame(runs[RUN].astype({"seed": "int64"}))
    return curves[~idx.isin(drop)]


def admit_min_iteration(curves: pd.DataFrame, iterations: pd.DataFrame, min_iteration: int) -> AdmissionResult:
    """Admit only runs that reached iteration ``min_iteration`` (last logged index >= it).

    Example rule (equal-iteration study, L6147-6148): a run stopping at iteration 20 "is excluded
    under the stated iteration-28 admission rule".
    """
    last = iterations.groupby(RUN)["iteration"].max()
    rows = []
    for key in curves[RUN].drop_duplicates().itertuples(index=False):
        k = (key[0], key[1])
        reached = int(last.get(k, -1))
        if reached < min_iteration:
            rows.append((k[0], int(k[1]), pd.NA, "min_iteration",
                         f"reached iteration {reached}, the admission rule requires {min_iteration}"))
    ex = exclusions_table(rows)
    return AdmissionResult(_drop_runs(curves, ex), ex)


def admit_status(curves: pd.DataFrame, meta: pd.DataFrame, statuses: Sequence[str] = ("complete",)) -> AdmissionResult:
    """Admit only runs whose metadata status is one of ``statuses`` (e.g. not failed)."""
    st = meta.set_index(RUN)["status"]
    rows = []
    for key in curves[RUN].drop_duplicates().itertuples(index=False):
        s = st.get((key[0], key[1]), "unknown")
        if s not in statuses:
            rows.append((key[0], int(key[1]), pd.NA, "status", f"run status is '{s}', admitted: {', '.join(statuses)}"))
    ex = exclusions_table(rows)
    return AdmissionResult(_drop_runs(curves, ex), ex)


def exclude_drifted_evaluations(curves: pd.DataFrame, flags: pd.DataFrame) -> AdmissionResult:
    """Drop every drifted evaluation (§3.12) from the curves; readings then use the others."""
    m = curves.merge(flags[RUN + ["eval_index", "gap", "drifted"]], on=RUN + ["eval_index"], how="left")
    hit = m["drifted"].fillna(False).astype(bool).to_numpy()
    rows = [(r.configuration, int(r.seed), int(r.eval_index), "drifted_evaluation",
             f"default accuracy exceeds strict by {r.gap:.3f} > {DRIFT_THRESHOLD}")
            for r in m[hit].itertuples(index=False)]
    return AdmissionResult(curves[~hit], exclusions_table(rows))


def exclude_drifted_runs(curves: pd.DataFrame, flags: pd.DataFrame, budget: float) -> AdmissionResult:
    """Drop whole runs whose evaluation at ``budget`` is drifted (§3.12, Table 12)."""
    d = drifted_at(flags, budget)
    d = d[d["drifted"]]
    rows = [(r.configuration, int(r.seed), int(r.eval_index), "drifted_at_budget",
             f"evaluation at {budget:,.0f} tokens drifted (gap {r.gap:.3f} > {DRIFT_THRESHOLD})")
            for r in d.itertuples(index=False)]
    ex = exclusions_table(rows)
    return AdmissionResult(_drop_runs(curves, ex), ex)


def apply_admission(
    curves: pd.DataFrame,
    *,
    iterations: pd.DataFrame | None = None,
    min_iteration: int | None = None,
    meta: pd.DataFrame | None = None,
    statuses: Sequence[str] | None = None,
    flags: pd.DataFrame | None = None,
    drop_drifted_evaluations: bool = False,
    drop_runs_drifted_at: float | None = None,
) -> AdmissionResult:
    """Apply the preregistered admission and exclusion rules in order; report every exclusion.

    ``min_iteration`` (needs ``iterations``): runs must reach that iteration. ``statuses`` (needs
    ``meta``): admitted run statuses. ``drop_drifted_evaluations`` / ``drop_runs_drifted_at``
    (token budget; need ``flags`` from :func:`drift_flags`): drift exclusions. Returns the kept
    curves and one exclusions table (configuration, seed, eval_index, rule, reason).
    """
    steps = []
    if min_iteration is not None:
        if iterations is None:
            raise ReadingError("the min_iteration rule needs the iteration rows")
        steps.append(lambda c: admit_min_iteration(c, iterations, min_iteration))
    if statuses is not None:
        if meta is None:
            raise ReadingError("the status rule needs the run metadata")
        steps.append(lambda c: admit_status(c, meta, statuses))
    if drop_runs_drifted_at is not None or drop_drifted_evaluations:
        if flags is None:
            raise ReadingError("drift rules need drift flags (drift_flags)")
    if drop_runs_drifted_at is not None:
        steps.append(lambda c: exclude_drifted_runs(c, flags, drop_runs_drifted_at))
    if drop_drifted_evaluations:
        steps.append(lambda c: exclude_drifted_evaluations(c, flags))
    kept, parts = curves, []
    for step in steps:
        a = step(kept)
        kept = a.kept
        parts.append(a.exclusions)
    ex = pd.concat(parts, ignore_index=True) if parts else exclusions_table([])
    if not len(ex):
        ex = exclusions_table([])
    return AdmissionResult(kept.reset_index(drop=True), ex)
