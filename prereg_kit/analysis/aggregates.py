"""rliable's aggregate metrics over runs × tasks, read from a study's run logs.

A *task* is one of the plan's evaluation sets (``[[evaluation.sets]]``: the held-out set, a
further test set, a MATH level's set, …). Each run's score on a task is its accuracy at B, read
as every contrast reads it (the first evaluation at or after B, dense-rewards paper §2.3,
"Metric"; :func:`prereg_kit.readings.read_at_tokens`) from the curves the analysis admits
(:func:`prereg_kit.analysis.analyze.study_curves`: the same lock, seal, design and admission checks).
A set that is scored only at the start and at B is read at B like the others.

:func:`task_scores` gives the tidy table (configuration, seed, task, score);
:func:`score_matrix` the runs × tasks array of one configuration (runs are seeds; a seed missing
a task is left out, so every row is complete); :func:`study_aggregates` the interquartile mean
of each configuration, the probability that one configuration improves on another, and the
performance profiles, with their stratified-bootstrap intervals
(:func:`prereg_kit.stats.iqm`, :func:`~prereg_kit.stats.probability_of_improvement`,
:func:`~prereg_kit.stats.performance_profile`; Agarwal et al. 2021).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .. import readings as rd
from .. import stats
from ..errors import PreregError
from ..plan import load_plan
from .analyze import study_curves

SCORE_COLUMNS = ["configuration", "seed", "task", "score"]


def task_scores(study_dir: str | Path, *, tasks: list[str] | None = None, verifier: str | None = None) -> pd.DataFrame:
    """Each admitted main run's accuracy at B on each task (evaluation set), tidy: one row per
    (configuration, seed, task). ``tasks``: the evaluation sets to read (default all the plan's);
    ``verifier``: default the plan's (``math_verify`` reads as ``default``, as in analyze).
    A run that never reached B on a set has no row for it."""
    plan = load_plan(study_dir).plan
    names = [s.name for s in plan.evaluation.sets]
    for t in tasks or []:
        if t not in names:
            raise PreregError(f"{study_dir}: {t!r} is not an evaluation set of the plan (have: {', '.join(names)})")
    frames = []
    for name in tasks or names:
        sc = study_curves(study_dir, eval_set=name, verifier=verifier)
        read = rd.read_at_tokens(sc.curves, sc.plan.budgets())
        read = read[read["reached"].astype(bool)]
        frames.append(pd.DataFrame({"configuration": read["configuration"].to_numpy(), "seed": read["seed"].astype(int).to_numpy(),
                                    "task": name, "score": read["accuracy"].astype(float).to_numpy()}))
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=SCORE_COLUMNS)
    return out.sort_values(["configuration", "seed", "task"], kind="stable").reset_index(drop=True)


def score_matrix(scores: pd.DataFrame, configuration: str, tasks: list[str] | None = None) -> np.ndarray:
    """The runs × tasks array of ``configuration`` (rows: its seeds in order; columns: ``tasks``,
    default every task in ``scores``); seeds without a score on every task are left out."""
    mine = scores[scores["configuration"] == configuration]
    if mine.empty:
        have = ", ".join(sorted(scores["configuration"].unique()))
        raise PreregError(f"no scores for configuration {configuration!r} (have: {have})")
    cols = tasks or sorted(scores["task"].unique())
    wide = mine.pivot(index="seed", columns="task", values="score").reindex(columns=cols)
    return wide.dropna().sort_index().to_numpy(dtype=float)


@dataclass
class StudyAggregates:
    """The aggregates of a study: ``iqm`` (one row per configuration), ``improvement`` (one row
    per ordered pair asked for), ``profiles`` (configuration → :class:`stats.PerformanceProfile`)
    and the ``scores`` they came from."""

    scores: pd.DataFrame
    iqm: pd.DataFrame
    improvement: pd.DataFrame
    profiles: dict = field(default_factory=dict)


def study_aggregates(study_dir: str | Path, *, pairs: list[tuple[str, str]] | None = None,
                     tasks: list[str] | None = None, taus: np.ndarray | None = None, confidence: float = 0.95,
                     n_resamples: int = 2_000, seed: int = 0) -> StudyAggregates:
    """IQM with its interval per configuration, P(X > Y) per pair (default: each contrast's
    treatment over its control, as the plan pairs them) and performance profiles on ``taus``
    (default 21 thresholds over [0, 1]), all over the runs × tasks scores of :func:`task_scores`."""
    plan = load_plan(study_dir).plan
    scores = task_scores(study_dir, tasks=tasks)
    cols = tasks or sorted(scores["task"].unique())
    configs = list(dict.fromkeys(scores["configuration"]))
    mats = {c: score_matrix(scores, c, cols) for c in configs}
    iqm_rows = [stats.iqm(m, confidence=confidence, n_resamples=n_resamples, seed=seed).to_frame().assign(configuration=c)
                for c, m in mats.items()]
    if pairs is None:
        pairs = list(dict.fromkeys((c.treatment, c.control) for c in plan.contrasts
                                   if c.treatment in mats and c.control in mats))
    imp_rows = [stats.probability_of_improvement(mats[x], mats[y], confidence=confidence, n_resamples=n_resamples,
                                                 seed=seed).to_frame().assign(x=x, y=y) for x, y in pairs]
    taus = np.linspace(0.0, 1.0, 21) if taus is None else np.asarray(taus, dtype=float)
    profiles = {c: stats.performance_profile(m, taus, confidence=confidence, n_resamples=n_resamples, seed=seed)
                for c, m in mats.items()}
    first = lambda df, keys: df[keys + [k for k in df.columns if k not in keys]]  # noqa: E731
    iqm_df = first(pd.concat(iqm_rows, ignore_index=True), ["configuration"]) if iqm_rows else pd.DataFrame()
    imp_df = first(pd.concat(imp_rows, ignore_index=True), ["x", "y"]) if imp_rows else pd.DataFrame()
    return StudyAggregates(scores, iqm_df, imp_df, profiles)


__all__ = ["SCORE_COLUMNS", "StudyAggregates", "score_matrix", "study_aggregates", "task_scores"]
