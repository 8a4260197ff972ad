"""Reading points at matched compute (tokens, time T*, the control's time, updates, spans of evaluations) and the
pairing of treatment and control by seed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..plan import ReadingPoint

from .base import exclusions_table, PairingError, ReadingError, RUN

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
    iterations for an iteration budget) >= ``value`` (§3.4), or None."""
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


def read_at_updates(curves: pd.DataFrame, treatment: str, control: str, budget: Budgets) -> pd.DataFrame:
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


# Spans of evaluations (L3356 "mean lead over the first half of the budget", L4034-4036 "Averaged
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


# --------------------------------------------------------------------------------------------
# Pairing
# --------------------------------------------------------------------------------------------


_NO_CRN = ("a study whose evaluations do not share sampling seeds preregisters "
           "`[evaluation] common_random_numbers = false`")


def _modal(s: pd.Series):
    return s.value_counts().index[0]


def _suspect_seeds(t: pd.DataFrame, c: pd.DataFrame, both: set[int], common_random_numbers: bool) -> list[int]:
    """The seeds of ``both`` on which :func:`_seed_issues` can find anything, found with group
    operations over all seeds at once: a run scoring more than one problem set, the two runs'
    sets differing, an unknown sampling seed, or sampling seeds differing at an evaluation."""
    if not both:
        return []
    def per_run(x: pd.DataFrame) -> pd.DataFrame:
        x = x[x["seed"].isin(list(both))].assign(_no_seed=lambda d: d["eval_seed"].isna().to_numpy())
        return x.groupby("seed").agg(n_sets=("problem_set", "nunique"), first_set=("problem_set", "first"),
                                     no_seed=("_no_seed", "max"))
    pt, pc = per_run(t), per_run(c)
    m = pt.merge(pc, left_index=True, right_index=True, suffixes=("_t", "_c"))
    bad = (m["n_sets_t"] > 1) | (m["n_sets_c"] > 1) | (m["first_set_t"] != m["first_set_c"])
    if common_random_numbers:
        bad |= m["no_seed_t"] | m["no_seed_c"]
        e = t[["seed", "eval_index", "eval_seed"]].merge(c[["seed", "eval_index", "eval_seed"]], on=["seed", "eval_index"],
                                                         suffixes=("_t", "_c"))
        differ = (e["eval_seed_t"] != e["eval_seed_c"]).fillna(True).to_numpy(dtype=bool)
        bad |= m.index.isin(e.loc[differ, "seed"].unique())
    return sorted(int(x) for x in m.index[bad.to_numpy(dtype=bool)])


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

    Checks (extract §1.0, §3.4): both configurations have the seed; every evaluation of a run
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


def _matrix(pa_wide: pd.DataFrame, config: str, rows: pd.DataFrame, arm: str) -> np.ndarray:
    out = []
    for _, r in rows.iterrows():
        seed, e_lo, e_hi, w = int(r["seed"]), int(r[f"{arm}_eval_lo"]), int(r[f"{arm}_eval_hi"]), float(r[f"{arm}_weight"])
        if np.isnan(w):  # a span: the mean of every evaluation from lo to hi
            run = pa_wide.loc[(config, seed)]
            out.append(run.loc[(run.index >= e_lo) & (run.index <= e_hi)].to_numpy(dtype="float64").mean(axis=0))
            continue
        lo = pa_wide.loc[(config, seed, e_lo)].to_numpy(dtype="float64")
        hi = pa_wide.loc[(config, seed, e_hi)].to_numpy(dtype="float64")
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
    common_random_numbers: bool = True,
) -> PairedReadings:
    """Pair ``treatment`` and ``control`` by seed and read both at ``point``.

    Unpaired seeds (see :func:`check_pairing`) and runs that never reached their reading point
    raise :class:`PairingError` naming configuration, seed and what differs — or, with
    ``allow_unpaired=True``, are left out and listed in ``exclusions`` (rules ``unpaired`` and
    ``not_reached``). ``problem_acc`` (from :func:`problem_accuracy`, same set and verifier as the
    curves) adds the seeds × problems matrices for the crossed bootstrap (§3.17).
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
        wide = problem_acc[keep].pivot(index=RUN + ["eval_index"], columns="problem_id", values="accuracy").sort_index()
        tm, cm = _matrix(wide, treatment, table, "treatment"), _matrix(wide, control, table, "control")
        if np.isnan(tm).any() or np.isnan(cm).any():
            raise PairingError(f"per-problem accuracies are missing for some problems at the reading of {treatment!r} vs {control!r}")
        res.problems = [str(p) for p in wide.columns]
        res.treatment_matrix, res.control_matrix = tm, cm
    return res


