"""Which runs log the optional evaluation columns that a verifier or metric reads.

A run trained elsewhere may lack the strict verifier's count (``correct_strict``) or the count of
boxed answers (``boxed``) when its outputs were not kept to re-score them (docs/run-log.md: both
columns may be null). A reading that needs such a column is refused, naming the contrast, the
column and the run, and is never read from a stand-in: the strict verifier is its own reading
(dense-rewards paper §C.1 "Verifiers"), and drift between the default and strict verifiers cannot be
judged without it.
"""

from __future__ import annotations

from typing import Iterable

import pandas as pd

from ..errors import PreregError

STRICT_COLUMN = "correct_strict"
BOXED_COLUMN = "boxed"


def needed_columns(metric: str, verifier: str) -> tuple[str, ...]:
    """The optional eval columns a reading of ``metric`` under ``verifier`` needs."""
    need = []
    if verifier == "strict" and metric not in ("greedy_accuracy", "log_length") and not metric.endswith("_rate"):
        need.append(STRICT_COLUMN)
    if metric == "boxed_rate":
        need.append(BOXED_COLUMN)
    return tuple(need)


def runs_without(evals: pd.DataFrame, column: str, *, eval_sets: Iterable[str] | None = None,
                 configurations: Iterable[str] | None = None) -> list[tuple[str, int]]:
    """``(configuration, seed)`` of every run with a null ``column`` in any eval row of
    ``eval_sets`` (all sets when ``None``), among ``configurations`` (all when ``None``)."""
    ev = evals
    if configurations is not None:
        ev = ev[ev["configuration"].isin(list(configurations))]
    if eval_sets is not None:
        ev = ev[ev["eval_set"].isin(list(eval_sets))]
    null = ev[column].isna() if column in ev.columns else pd.Series(True, index=ev.index)
    return sorted({(str(c), int(s)) for c, s in zip(ev.loc[null, "configuration"], ev.loc[null, "seed"])})


def refuse_unlogged(evals: pd.DataFrame, meta: pd.DataFrame, *, contrast: str, metric: str, verifier: str,
                    eval_sets: Iterable[str], configurations: Iterable[str]) -> None:
    """Raise :class:`PreregError` when a run the contrast reads does not log a column it needs:
    ``contrast C2: verifier 'strict' needs column correct_strict, which runs/a/seed-0 does not log
    (trained by 'verl')``. ``meta``: the study's run table (``load_study``), for the trainer."""
    sets, confs = list(eval_sets), list(configurations)
    for column in needed_columns(metric, verifier):
        runs = runs_without(evals, column, eval_sets=sets, configurations=confs)
        if not runs:
            continue
        c, s = runs[0]
        who = meta[(meta["configuration"] == c) & (meta["seed"] == s)]
        trainer = str(who["trainer"].iloc[0]) if len(who) and "trainer" in who else "unknown"
        what = "verifier 'strict'" if column == STRICT_COLUMN else f"metric {metric}"
        more = f"; and {len(runs) - 1} more run(s)" if len(runs) > 1 else ""
        raise PreregError(f"contrast {contrast}: {what} needs column {column}, which runs/{c}/seed-{s} does not log "
                          f"(trained by {trainer!r}; re-score its outputs to add it){more}")
