"""One ``at = "extrapolated"`` contrast of ``prereg analyze``: e resolved, each seed's mean of
observed − extrapolated accuracy over the usable evaluations (:mod:`prereg_kit.readings.extrapolation`,
dense-rewards paper §3.3), and the statistics every paired contrast gets
(:func:`prereg_kit.analysis.verdicts.contrast_statistics`), with the heuristic's own columns: ``efficiency``,
``efficiency_source``, ``usable_evaluations``, ``last_usable``, ``predicted_lead``, ``observed_lead``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..chain.lock import Chain
from ..errors import PreregError
from ..plan import Contrast, Plan
from ..readings import ReadingError
from ..readings.extrapolation import Extrapolation, contrast_efficiency, evaluation_label, read_extrapolated
from .designs import seed_list
from .verdicts import contrast_statistics


def extrapolation_contrast(study_dir: str | Path, plan: Plan, c: Contrast, curves: pd.DataFrame, *, n_resamples: int,
                           notes: list[str], chain: Chain | None = None) -> tuple[dict, pd.DataFrame, Extrapolation]:
    """The row statistics, the per-seed frame (``contrast`` first) and the reading of contrast
    ``c`` on ``curves`` (its metric on its set, its seeds). Raises :class:`PreregError` naming the
    contrast when the reading cannot be made (no usable evaluation, a run that stops short, fewer
    than two seeds, no gradient test results for a "TEST:configuration" efficiency). ``chain``: the
    study's lock chain when the caller has read it (read here otherwise)."""
    B = plan.budgets()
    if not isinstance(B, float):
        raise PreregError(f"contrast {c.id}: an extrapolated reading needs one token budget B for every configuration")
    try:
        e, source = contrast_efficiency(study_dir, plan, c.efficiency, chain=chain)
    except PreregError as err:
        raise PreregError(f"contrast {c.id}: " + " ".join(err.lines)) from None
    interval = float(plan.budget.eval_interval_tokens())
    try:
        x = read_extrapolated(curves, c.treatment, c.control, e, B, interval,
                              allow_unpaired=plan.admission.allow_missing_seeds)
    except ReadingError as err:
        raise PreregError(f"contrast {c.id} ({c.treatment} − {c.control}, extrapolated at e = {e:g}): {err}") from None
    ps = x.per_seed
    if len(ps) < 2:
        raise PreregError(f"contrast {c.id}: {len(ps)} seed(s) with every usable evaluation; at least 2 are needed")
    if c.tier == "primary" and plan.statistics.crossed_bootstrap:
        notes.append(f"contrast {c.id}: no crossed seed-by-problem bootstrap for an extrapolated reading "
                     "(the control's curve is interpolated in mean accuracy)")
    row = contrast_statistics(ps["difference"].to_numpy(dtype="float64"), c, plan, n_resamples=n_resamples, notes=notes)
    last = evaluation_label(x.last_usable, plan.budget.eval_every, B, interval)
    pred, obs = float(ps["predicted_lead"].mean()), float(ps["observed_lead"].mean())
    row.update(seeds=seed_list(ps["seed"].tolist()), efficiency=e, efficiency_source=source,
               usable_evaluations=x.n_usable, last_usable=last, predicted_lead=pred, observed_lead=obs,
               extrapolation=f"observed − extrapolated, e = {e:.3g}{'' if source == 'plan' else f' ({source})'}, "
                             f"{x.n_usable} evaluations to {last}; predicted lead {pred:+.3f}, observed lead {obs:+.3f}")
    return row, ps.assign(contrast=c.id)[["contrast"] + list(ps.columns)], x
