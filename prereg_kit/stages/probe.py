"""The learning-rate stability probe (dense-rewards paper §C.1 "Implementation",
App. A "Recipe"): "a preregistered stability probe, on a development set
disjoint from the training pools and test sets, selected 10⁻⁶; a rate of 3×10⁻⁶ failed the probe",
after the equal-iteration recipe's 10⁻⁵ "degraded or collapsed every configuration".

The paper names the probe's two failure modes but not its numbers. The criterion here
is built from the paper's own definitions:

* **collapsed** — final accuracy at least 0.15 below the run's peak: the paper's collapse event
  (§H.2 "Deficits and collapse events");
* **degraded** — final accuracy below the accuracy before training (evaluation 0).

A learning rate fails the probe when any of its runs is collapsed or degraded (every seed must be
stable), and the probe selects the largest rate that passes. :func:`unstable` and
:func:`select_rate` are the pure rules; :func:`probe_study` reads a stage's runs (by default the
pilot stage: one configuration per rate, evaluated on the plan's development set) and
``prereg probe STUDY`` prints the verdicts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import PreregError
from ..plan import load_plan
from ..runlog import read_run, run_dir

COLLAPSE_DROP = 0.15  # paper's collapse event (§H.2 "Deficits and collapse events")
_TOL = 1e-12  # accuracies are fractions of counts: a drop of exactly 0.15 counts despite float error


def unstable(accuracies: Sequence[float], *, collapse_drop: float = COLLAPSE_DROP) -> str | None:
    """Why one run fails the probe, or None: ``accuracies`` from evaluation 0 (before training) to
    the last evaluation."""
    acc = [float(a) for a in accuracies]
    if len(acc) < 2:
        raise ValueError("the probe needs the evaluation before training and at least one after it")
    if any(not 0 <= a <= 1 for a in acc):  # NaN fails too
        raise ValueError(f"accuracies are fractions in [0, 1], got {accuracies!r}")
    if not 0 < collapse_drop <= 1:
        raise ValueError(f"collapse_drop is a fraction in (0, 1], got {collapse_drop!r}")
    first, peak, final = acc[0], max(acc), acc[-1]
    if peak - final >= collapse_drop - _TOL:
        return f"collapsed: final {final:.3f} is {peak - final:.3f} below its peak {peak:.3f} (≥ {collapse_drop})"
    if final < first - _TOL:
        return f"degraded: final {final:.3f} below the start {first:.3f}"
    return None


@dataclass
class RateVerdict:
    rate: float
    runs: list[str]
    reasons: list[str]  # one per failing run ("run: why")

    @property
    def stable(self) -> bool:
        return not self.reasons


def select_rate(curves: Mapping[float, Mapping[str, Sequence[float]]], *,
                collapse_drop: float = COLLAPSE_DROP) -> tuple[float | None, list[RateVerdict]]:
    """Verdict per learning rate (``curves``: rate → run name → accuracies) and the largest stable
    rate (None when every rate fails)."""
    verdicts = []
    for rate in sorted(curves):
        if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
            raise ValueError(f"a learning rate is a positive number, got {rate!r}")
        if not curves[rate]:
            raise ValueError(f"learning rate {rate:g} has no runs")
        reasons = [f"{name}: {why}" for name, acc in curves[rate].items()
                   if (why := unstable(acc, collapse_drop=collapse_drop))]
        verdicts.append(RateVerdict(float(rate), list(curves[rate]), reasons))
    stable = [v.rate for v in verdicts if v.stable]
    return (max(stable) if stable else None), verdicts


@dataclass
class ProbeResult:
    selected: float | None  # the largest stable rate
    verdicts: list[RateVerdict]
    eval_set: str

    def lines(self) -> list[str]:
        out = []
        for v in self.verdicts:
            out.append(f"learning rate {v.rate:g}: {'stable' if v.stable else 'fails the probe'} "
                       f"({len(v.runs)} run(s) on {self.eval_set})")
            out += [f"  {r}" for r in v.reasons]
        return out + [f"selected learning rate: {self.selected:g}" if self.selected is not None
                      else "no learning rate passed the probe"]


def probe_study(study_dir: str | Path, *, stage: str = "pilot", eval_set: str | None = None,
                collapse_drop: float = COLLAPSE_DROP) -> ProbeResult:
    """The probe on a stage's complete runs, grouped by their learning rate (``update.learning_rate``
    in each run's recorded config); accuracy per evaluation = correct / samples pooled over the
    problems of ``eval_set`` (default: the plan's first evaluation set)."""
    pf = load_plan(study_dir)
    plan, study = pf.plan, pf.path.parent
    if plan.stage(stage) is None:
        raise PreregError(f"{pf.path}: the plan has no stage {stage!r} (have: {', '.join(s.name for s in plan.stages)})")
    sets = [s.name for s in plan.evaluation.sets]
    name = eval_set or sets[0]
    if name not in sets:
        raise PreregError(f"--eval-set: {name!r} is not an evaluation set of the plan (have: {', '.join(sets)})")
    curves: dict[float, dict[str, list[float]]] = {}
    for cfg in plan.configurations_for(stage):
        for seed in plan.seeds_for(stage):
            folder = run_dir(study, cfg, seed, stage=stage)
            if not (folder / "meta.json").is_file():
                raise PreregError(f"{folder}: no run; the probe reads every run of stage {stage!r} "
                                  f"(prereg run {study} --stage {stage})")
            log = read_run(folder, strict=True)  # a torn or inconsistent log is refused, never used
            if log.meta.status != "complete":
                raise PreregError(f"{folder}: the run is {log.meta.status}, not complete")
            rate = _rate_of(log.meta.config, folder)
            ev = log.evals[log.evals["eval_set"] == name]
            if ev.empty:
                raise PreregError(f"{folder}: no evaluations on {name!r}")
            by = ev.groupby("eval_index")[["correct", "samples"]].sum().sort_index()
            if len(by) < 2 or by.index[0] != 0:
                raise PreregError(f"{folder}: the probe needs evaluation 0 (before training) and one after it on "
                                  f"{name!r}; the run has evaluations {by.index.tolist()}")
            curves.setdefault(rate, {})[f"{cfg}/seed-{seed}"] = (by["correct"] / by["samples"]).tolist()
    if not curves:
        raise PreregError(f"{pf.path}: stage {stage!r} has no runs")
    return ProbeResult(*select_rate(curves, collapse_drop=collapse_drop), name)


def _rate_of(config: dict, folder: Path) -> float:
    value = (config.get("update") or {}).get("learning_rate", config.get("learning_rate"))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PreregError(f"{folder}: meta.json records no update.learning_rate")
    return float(value)
