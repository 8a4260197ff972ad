"""Accuracy curves from evaluation rows: accuracy, pass@K, channel rates, collapse and relative
accuracy, per run and evaluation (and per problem, for the crossed bootstrap)."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from prereg_kit.stats import pass_at_k

from ..plan import COLLAPSE_K
from ..runlog.groups import group_numbers, rows_by_group
from ..runlog.text import text_codes
from .base import RUN, VERIFIERS, AdmissionResult, PairingError, ReadingError, exclusions_table
from .points import Budgets, describe_target, read_at_tokens  # Budgets: annotations

# --------------------------------------------------------------------------------------------
# Accuracy
# --------------------------------------------------------------------------------------------


_PASS_AT = "pass@"
_RATE = "_rate"


def _metric_value(ev: pd.DataFrame, eval_set: str, verifier: str, metric: str) -> np.ndarray:
    """Per-row value of ``metric``: accuracy (correct/samples), ``pass@K`` (the unbiased
    estimator from samples and correct) or ``<channel>_rate`` (ch_<channel>/samples)."""
    samples = ev["samples"].to_numpy(dtype="float64")
    if verifier == "strict" and (metric == "accuracy" or metric.startswith(_PASS_AT)) and ev["correct_strict"].isna().any():
        r = ev[ev["correct_strict"].isna()].iloc[0]
        raise ReadingError(f"verifier 'strict' needs column correct_strict, which runs/{r['configuration']}/seed-{r['seed']} "
                           f"does not log (set {eval_set!r})")
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

        num = ev["correct"] if verifier == "default" else ev["correct_strict"]
        return np.asarray(pass_at_k(samples.astype(int), num.to_numpy(dtype="int64"), k), dtype="float64")
    if metric.endswith(_RATE) and len(metric) > len(_RATE):
        channel = metric[: -len(_RATE)]
        col = f"ch_{channel}"
        if col not in ev.columns and channel in ("correct", "boxed"):
            col = channel  # the default verifier's count, the count of boxed answers
        if col not in ev.columns or ev[col].isna().any():
            raise ReadingError(f"metric {metric}: column {col!r} not logged for set {eval_set!r} (a run without channel {channel!r} counts)")
        return ev[col].to_numpy(dtype="float64") / samples
    if metric == "log_length":
        # the mean over the problem's samples of ln(completion tokens): its mean over problems is
        # the mean log completion length of the evaluation (S5's primary, dense-rewards paper Table 6)
        col = ev["log_length"] if "log_length" in ev.columns else pd.Series(np.nan, index=ev.index)
        if col.isna().any():
            raise ReadingError(f"metric log_length: column 'log_length' not logged for set {eval_set!r} "
                               "(a run log without per-problem completion lengths)")
        return col.to_numpy(dtype="float64")
    if metric in _DERIVED:
        raise ReadingError(_DERIVED[metric])
    raise ReadingError(f"unknown metric {metric!r} (accuracy, greedy_accuracy, pass@K, <channel>_rate, relative_accuracy, collapse, log_length)")


def select_levels(evals: pd.DataFrame, eval_set: str, levels: list[int] | tuple[int, ...]) -> pd.DataFrame:
    """The eval rows of ``eval_set`` whose problem is of one of ``levels`` (the MATH level the
    trainer logs in ``level``), other sets' rows unchanged; ``levels`` empty: all rows.
    Per-level accuracy on one test set (dense-rewards paper, S14's level-5 test problems)."""
    if not levels:
        return evals
    mine = evals["eval_set"] == eval_set
    lv = evals["level"] if "level" in evals.columns else pd.Series(pd.NA, index=evals.index)
    if lv[mine].isna().any():
        raise ReadingError(f"levels {list(levels)}: the run logs carry no problem level for set {eval_set!r} "
                           "(eval rows without 'level')")
    keep = mine & lv.isin(list(levels))
    if not keep.any():
        have = sorted(int(x) for x in lv[mine].dropna().unique())
        raise ReadingError(f"levels {list(levels)}: set {eval_set!r} has no problem of these levels (levels logged: {have})")
    return evals[~mine | keep]


_DERIVED = {
    "relative_accuracy": "metric relative_accuracy is a ratio of two runs' accuracies, not a per-problem value: "
                         "take accuracy curves and divide with relative_accuracy_curves(curves, reference, budget)",
    "collapse": "metric collapse is a per-run flag, not a per-problem value: use accuracy_curve(..., metric='collapse')",
}


class SetRows:
    """Each evaluation set's rows of ``evals`` (in their order, with their index), from one
    grouping of the set column: every reading of a set takes its rows from here instead of
    comparing every row's set name again. A set without rows gets all of ``evals`` (its absence
    is named from them).

    ``consume=True``: ``evals`` is split into its sets now, column by column, and its columns are
    taken out of it as they are split (it is left without columns), so that the rows are held
    once — in their sets — rather than twice: for a caller that reads only by set afterwards.
    Each set's rows are then numbered from 0 (the labels of ``evals`` are not kept)."""

    def __init__(self, evals: pd.DataFrame, *, consume: bool = False):
        self.evals: pd.DataFrame | None = evals
        self._index: dict | None = None
        self._rows: dict[str, pd.DataFrame] = {}
        if consume and len(evals):
            self._split(evals)

    def _indices(self) -> dict:
        if self._index is None:
            self._index = self.evals.groupby("eval_set", sort=False, observed=True).indices
        return self._index

    def _split(self, evals: pd.DataFrame) -> None:
        index = self._indices()
        names = list(index)
        columns: dict[str, dict[str, object]] = {n: {} for n in names}
        for col in list(evals.columns):
            values = evals.pop(col)  # the whole column is freed once each set has its share
            for n in names:
                columns[n][col] = values.array.take(index[n])
            del values
        # Each set's rows numbered from 0 (no label array per row), without a consolidating copy.
        self._rows = {n: pd.DataFrame(columns[n], copy=False) for n in names}
        self._index = dict.fromkeys(names)  # the sets' names; their row positions are no longer needed
        self.evals = None

    def __call__(self, eval_set: str) -> pd.DataFrame:
        if eval_set not in self._indices():
            return self.all()
        if eval_set not in self._rows:
            self._rows[eval_set] = self.evals.take(self._index[eval_set])
        return self._rows[eval_set]

    def all(self) -> pd.DataFrame:
        """Every row (after ``consume``: the sets' rows one after another, a new frame)."""
        if self.evals is not None:
            return self.evals
        frames = list(self._rows.values())
        return pd.concat(frames) if len(frames) > 1 else frames[0]


def _select(evals: pd.DataFrame, eval_set: str, verifier: str, metric: str = "accuracy") -> pd.DataFrame:
    if verifier not in VERIFIERS:
        raise ReadingError(f"unknown verifier {verifier!r} (one of {', '.join(VERIFIERS)})")
    mine = evals["eval_set"] == eval_set
    ev = evals if len(evals) and mine.all() else evals[mine]  # one set's rows (SetRows): no copy
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
    keep = [c for c in _READ if c in ev.columns]  # the columns the curves read: one narrow copy
    return ev[keep].assign(accuracy=np.asarray(acc, dtype="float64"))


_READ = RUN + ["eval_index", "iteration", "tokens", "train_seconds", "updates", "eval_seed", "problem_id"]


def problem_accuracy(evals: pd.DataFrame, *, eval_set: str, verifier: str = "default",
                     metric: str = "accuracy") -> pd.DataFrame:
    """Per-problem accuracy: correct / samples under ``verifier`` (greedy: 0 or 1, where logged).

    ``metric``: ``accuracy`` (default), ``pass@K`` (unbiased pass@k from samples and correct) or
    ``<channel>_rate`` (ch_<channel>/samples); the value is in the ``accuracy`` column. The
    derived metrics ``relative_accuracy`` and ``collapse`` have no per-problem value (an error).
    Columns: configuration, seed, eval_index, eval_set, verifier, problem_id, accuracy; the text
    columns are categoricals (``runlog.text``): one row per problem and evaluation, millions of rows.
    """
    ev = _select(evals, eval_set, verifier, metric)
    out = ev[RUN + ["eval_index", "problem_id", "accuracy"]].copy()
    for at, col, value in ((3, "eval_set", eval_set), (4, "verifier", verifier)):  # one name: a category, not a string per row
        out.insert(at, col, pd.Categorical.from_codes(np.zeros(len(out), dtype=np.int8), categories=pd.Index([value], dtype="str")))
    # sort_values(RUN + ["eval_index", "problem_id"]) from the blocks of each evaluation's rows
    order = rows_by_group(group_numbers(out, RUN + ["eval_index"]), text_codes(out["problem_id"])[0])
    return out.take(order).reset_index(drop=True)


def _set_hash(ids: pd.Series) -> str:
    """The problem-set hash of one evaluation: sha1 of its sorted problem ids joined by newlines
    (first 12 hex digits); recorded in curves and compared when pairing."""
    return hashlib.sha1("\n".join(sorted(map(str, ids))).encode()).hexdigest()[:12]


def _set_hashes(ev: pd.DataFrame, keys: list[str], gid: np.ndarray | None = None) -> np.ndarray:
    """:func:`_set_hash` of every group of ``ev.groupby(keys, sort=True)``, in group order.

    Vectorized: problem ids become codes in sorted order once, each group's sorted codes are one
    slice, and a set is joined and hashed once however many evaluations scored it (the hash
    values are those of :func:`_set_hash`)."""
    gid = group_numbers(ev, keys) if gid is None else gid  # the caller's grouping
    codes, names = text_codes(ev["problem_id"])
    order = rows_by_group(gid, codes)
    gs, cs = gid[order], codes[order].astype(np.int64)
    n = int(gid.max()) + 1 if len(gid) else 0
    bounds = np.searchsorted(gs, np.arange(n + 1))
    seen: dict[bytes, str] = {}
    out = np.empty(n, dtype=object)
    for g in range(n):
        sl = cs[bounds[g]:bounds[g + 1]]
        key = sl.tobytes()
        h = seen.get(key)
        if h is None:
            h = seen[key] = hashlib.sha1("\n".join(names[sl]).encode()).hexdigest()[:12]
        out[g] = h
    return out


def accuracy_curve(evals: pd.DataFrame, *, eval_set: str, verifier: str = "default",
                   metric: str = "accuracy") -> pd.DataFrame:
    """Accuracy per evaluation: the mean over problems of correct/samples (pass@1; §2.3 "Metric").

    One row per (configuration, seed, eval_index) with: iteration, tokens, train_seconds,
    updates (cumulative at the evaluation), eval_seed, n_problems, problem_set (a hash of the
    problem ids, for pairing), eval_set, verifier, accuracy. ``verifier``: ``default``,
    ``strict`` (boxed only) or ``greedy`` (evaluations where greedy correctness was logged).
    Raises :class:`ReadingError` if one evaluation carries two sampling seeds. ``metric``:
    ``pass@K`` or ``<channel>_rate`` put that metric's per-problem mean in ``accuracy``
    (see :func:`problem_accuracy`). ``collapse`` (multi-reward paper §6.1, App. C.4: "pass@4 below
    the base model") puts the run's collapse flag there: 1.0 at an evaluation whose pass@4 (the
    unbiased estimator from the logged samples, under ``verifier``) is strictly below the same
    run's pass@4 at evaluation 0 (the base model, before any update; same problems and, by
    common random numbers, the same sampling seed for every configuration of a seed), else 0.0.
    ``relative_accuracy`` needs the reference: see :func:`relative_accuracy_curves`.
    """
    collapse = metric == "collapse"
    ev = _select(evals, eval_set, verifier, f"pass@{COLLAPSE_K}" if collapse else metric)
    keys = RUN + ["eval_index"]
    gid = group_numbers(ev, keys)  # one number per evaluation: grouping by it hashes one column, not three
    out = ev.groupby(gid, sort=True).agg(
        configuration=("configuration", "first"),
        seed=("seed", "first"),
        eval_index=("eval_index", "first"),
        iteration=("iteration", "first"),
        tokens=("tokens", "first"),
        train_seconds=("train_seconds", "first"),
        updates=("updates", "first"),
        eval_seed=("eval_seed", "first"),
        n_seeds=("eval_seed", "nunique"),
        n_problems=("problem_id", "size"),
        accuracy=("accuracy", "mean"),
    ).reset_index(drop=True)
    bad = out[out["n_seeds"] > 1]
    if len(bad):
        r = bad.iloc[0]
        raise ReadingError(f"configuration {r['configuration']!r} seed {r['seed']}: evaluation {r['eval_index']} on set {eval_set!r} logs {r['n_seeds']} sampling seeds")
    out["problem_set"] = _set_hashes(ev, keys, gid)
    if isinstance(out["configuration"].dtype, pd.CategoricalDtype):  # a curve per evaluation: names as text again
        out["configuration"] = out["configuration"].astype("str")
    out["eval_set"] = eval_set
    out["verifier"] = verifier
    if collapse:
        out["accuracy"] = _collapse_flags(out, eval_set)
    cols = keys + ["iteration", "tokens", "train_seconds", "updates", "eval_seed", "n_problems", "problem_set", "eval_set", "verifier", "accuracy"]
    return out[cols]


def _collapse_flags(curve: pd.DataFrame, eval_set: str) -> np.ndarray:
    """Per evaluation: 1.0 when the run's pass@4 is strictly below its pass@4 at evaluation 0.
    Runs are checked in the order they first appear; each run's base is its first evaluation 0."""
    if not len(curve):
        return np.zeros(0)
    run = curve.groupby(RUN, sort=False).ngroup().to_numpy()  # numbered in order of appearance
    n = int(run.max()) + 1
    at0 = np.flatnonzero(curve["eval_index"].to_numpy() == 0)
    _, first = np.unique(run[at0], return_index=True)
    base = np.full(n, -1)
    base[run[at0[first]]] = at0[first]
    updates = curve["updates"].to_numpy(dtype="float64")
    bad = (base < 0) | (updates[np.maximum(base, 0)] != 0)
    if bad.any():
        g = int(np.flatnonzero(bad)[0])
        r = int(np.flatnonzero(run == g)[0])
        key = (curve["configuration"].iloc[r], curve["seed"].iloc[r])
        if base[g] < 0:
            raise ReadingError(f"metric collapse: configuration {key[0]!r} seed {key[1]} has no evaluation 0 on set "
                               f"{eval_set!r} (the base model's pass@{COLLAPSE_K} is read at the start of the run)")
        raise ReadingError(f"metric collapse: configuration {key[0]!r} seed {key[1]}: evaluation 0 on set {eval_set!r} "
                           f"was taken after {float(updates[base[g]]):g} updates, not before any update")
    acc = curve["accuracy"].to_numpy(dtype="float64")
    return (acc < acc[base[run]]).astype("float64")


def relative_accuracy_curves(curves: pd.DataFrame, reference: str, budget: "Budgets", *,
                             allow_missing: bool = False) -> "AdmissionResult":
    """Accuracy relative to the primary-only reference (multi-reward paper App. C.1, Table 7).

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
            rows.append((s, f"seed {s}: the reference {reference!r} has no reading at {describe_target(budget, reference)} ({why})"))
            continue
        if float(ref.loc[s, "accuracy"]) == 0:
            raise ReadingError(f"relative_accuracy: the reference {reference!r} seed {s} has accuracy 0 at "
                               f"{describe_target(budget, reference)} (evaluation {int(ref.loc[s, 'eval_lo'])}): the ratio is undefined")
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


