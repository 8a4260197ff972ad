"""Readings at matched compute: accuracy curves, reading points, pairing, drift and admission.

Pure functions on the tidy frames of :func:`prereg_kit.runlog.load_study`. Section numbers refer to
the dense-rewards paper (docs/papers.md).

- *At tokens* (§2.3 "Metric", §C.1 "Pools and evaluation"): accuracy at the **first evaluation at or
  after** the budget B (or k·B), without selecting checkpoints.
- *At time* (Appendix D): per seed, T* is the shorter of the two runs' training
  times up to their evaluation at B; each run's accuracy is interpolated linearly in training time
  at T*, so the faster run is read at B and the slower between two of its evaluations.
- *At the control's time* (Appendix F, S35): T_c is the control's training time to B; the
  treatment is interpolated linearly in training time at T_c from a run extended past B.
- *At updates* (§2.3, Figure 2a): the treatment is read at B; the control is interpolated
  linearly in its update count at the treatment's update count.

- *Spans* (§C.4.3 S14, §C.5.4 S27; :mod:`.spans`): a run's mean accuracy over the evaluations of the
  first half (B/16 … B/2), the second half (9B/16 … B) or all evaluations after the start to B.
- *To target* (§C.6.8, Table 11): the treatment's mean curve's first crossing of the control's mean
  accuracy at B, as a share of B (or of the control's training time), with a paired seed bootstrap.
- *Log length* (S5's primary): the mean over completions of ln(completion tokens), from the eval
  rows' ``log_length``; *per-level accuracy*: accuracy on the problems of some MATH levels.

Multi-reward metrics (multi-reward paper §6.1, App. C.1 and C.4), read at token reading points only:

- *Collapse* (App. C.4, "pass@4 below the base model"): per run and evaluation, 1 when the run's
  pass@4 is strictly below its own pass@4 at evaluation 0 (before any update), else 0
  (``accuracy_curve(..., metric="collapse")``); a contrast's mean difference is the difference
  of collapse rates, paired by seed.
- *Relative accuracy* (App. C.1, "0.91×"): a run's accuracy over the primary-only reference
  configuration's accuracy at k·B on the same seed (:func:`relative_accuracy_curves`).

A reading is a *bracket*: two evaluations ``eval_lo <= eval_hi`` of one run and a weight ``w``
(``0`` when read exactly at an evaluation); the value is ``(1 - w)·acc[lo] + w·acc[hi]``. The
same bracket applied to per-problem accuracies gives the seeds × problems matrices that the
crossed bootstrap resamples.

Modules: :mod:`.curves` (accuracy curves and metrics), :mod:`.points` (reading points and
pairing), :mod:`.admission` (drift, admission and exclusion rules), :mod:`.base` (shared keys and errors).
"""

from __future__ import annotations

from ..plan import COLLAPSE_K, ReadingPoint
from .admission import (
    admit_min_iteration,
    admit_status,
    apply_admission,
    drift_flags,
    drifted_at,
    exclude_drifted_evaluations,
    exclude_drifted_runs,
)
from .base import (
    DRIFT_THRESHOLD,
    EXCLUSION_COLUMNS,
    RUN,
    VERIFIERS,
    AdmissionResult,
    PairingError,
    ReadingError,
    exclusions_table,
)
from .curves import SetRows, accuracy_curve, problem_accuracy, relative_accuracy_curves, select_levels
from .dynamics import DYNAMICS, training_dynamics
from .logged import needed_columns, refuse_unlogged, runs_without
from .pairing import PairedReadings, check_pairing, paired_readings
from .points import (
    READ_COLUMNS,
    SPAN_KINDS,
    Budgets,
    budget_target,
    read_at_control_time,
    read_at_time,
    read_at_tokens,
    read_at_updates,
    read_point,
    read_span,
    shared_budget,
    span_positions,
)
from .spans import TARGET_KINDS, first_crossing, share_to_target, target_curves, target_statistics, to_target

ONE_B_KINDS = SPAN_KINDS + TARGET_KINDS  # readings that need one token budget B for both arms

__all__ = [
    "accuracy_curve", "AdmissionResult", "budget_target", "Budgets", "admit_min_iteration", "admit_status", "apply_admission",
    "check_pairing", "COLLAPSE_K", "drift_flags", "DRIFT_THRESHOLD", "drifted_at",
    "exclude_drifted_evaluations", "exclude_drifted_runs", "EXCLUSION_COLUMNS", "exclusions_table",
    "paired_readings", "PairedReadings", "PairingError", "problem_accuracy", "read_at_control_time",
    "read_at_time", "read_at_tokens", "read_at_updates", "READ_COLUMNS", "read_point", "ReadingError",
    "ReadingPoint", "relative_accuracy_curves", "RUN", "VERIFIERS", "select_levels", "SetRows", "first_crossing", "read_span",
    "share_to_target", "span_positions", "SPAN_KINDS", "target_curves", "TARGET_KINDS", "target_statistics", "to_target", "DYNAMICS", "training_dynamics",
    "needed_columns", "refuse_unlogged", "runs_without", "shared_budget", "ONE_B_KINDS",
]
