"""``prereg analyze``: a locked plan and a folder of run logs → every contrast, read as planned.

Dense-rewards paper §2.3, §C.1 (budget, evaluation, verifiers, statistics), App. D, App. F. Steps:

1. verify the lock chain, the plan, the seals of the runs and the run-timing audit
   (``prereg_kit.study.verify``); refuse on violations unless ``exploratory`` (then every result is
   labelled exploratory);
2. load the run logs (main stage) and enforce the plan's design (``prereg_kit.study.design``): a run log
   that cannot be read, a planned run that is missing (unless the plan allows missing seeds) or an
   evaluation on other problems than the plan's is a violation, named run by run, before any
   reading is made; then apply the plan's admission rules (completed runs, minimum iteration,
   drifted evaluations), every run or evaluation left out listed with its reason; when
   ``exploratory``, the runs that exist are read: a paired contrast leaves out (and names) each
   seed one side has no reading for, and a contrast that can no longer be read is a ``not read``
   row with its reason;
3. per contrast: per-unit differences (see below) at its reading point (tokens k·B, time T*, the
   control's time, updates, the mean over a span of evaluations; a to-target reading is instead
   one share of B with a paired seed bootstrap, Table 11), paired-t mean/CI/p, TOST at the margin, non-inferiority, the seed
   bootstrap, the crossed seed-by-problem bootstrap for primary contrasts;
4. Holm within each family on the p that the contrast's kind tests (paired-t for superiority,
   TOST for equivalence, the one-sided NI test for non-inferiority), then the verdict;
5. each hypothesis read as its plan said; per-configuration compute at B; the manipulation
   checks (``prereg_kit.analysis.checks``), each a pass or a fail.

A contrast's unit follows its ``design``: a seed's paired difference, a seed's difference of two
differences, a (pair, seed) difference pooled over pairs, or two unpaired groups (Welch;
``prereg_kit.readings.designs``, ``prereg_kit.analysis.designs``); ``seeds`` restricts it to a subset.

Multi-reward metrics (multi-reward paper §6.1, App. C.1): ``relative_accuracy`` (accuracy over the ``[evaluation]
reference`` configuration's, same seed, at the same k·B) and ``collapse`` (pass@4 below the run's
own evaluation 0) are read per seed like accuracy at token reading points; they have no
per-problem values, so their contrasts take no crossed bootstrap. The configuration table adds
``relative_accuracy_at_B`` (with a reference) and ``collapse_rate`` (share of seeds collapsed at B).
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from .. import readings as rd
from ..callables import callable_module
from ..errors import PreregError
from ..margin import margin_bounds
from ..plan import COLLAPSE_K, DERIVED_METRICS, Contrast, Plan
from ..progress import progress as _progress
from ..readings.designs import design_readings
from ..study.audit import DeviceSummary, device_summary, run_devices
from .checks import CHECK_COLUMNS, CHECK_SEED_COLUMNS, read_checks
from .designs import comparison_label, welch_statistics
from .designs import seed_list as _seed_list
from .extrapolated import extrapolation_contrast
from .gradient import GradientResults, gradient_results
from .looks import SequentialLook, read_look
from .notebook import Shown
from .robustness import robust_columns
from .runs import StudyCurves, admitted_curves, study_curves, verified_runs  # noqa: F401 - study_curves: public here too
from .verdicts import NOT_READ, PREDICTION_READING, adjust_and_read, contrast_statistics, read_hypotheses  # noqa: F401

UNSPLIT = "unavailable (time not split by stage)"  # never invented from an unsplit step time


@dataclass(repr=False)  # the notebook's short repr (Shown), not every DataFrame
class Analysis(Shown):
    """Everything a report needs; the DataFrames are the tidy results (see docs/analysis.md)."""

    plan: Plan
    plan_path: Path
    plan_hash: str
    exploratory: bool
    lock_lines: list[str]
    lock_summary: dict
    contrasts: pd.DataFrame
    per_seed: pd.DataFrame
    hypotheses: pd.DataFrame
    configurations: pd.DataFrame
    exclusions: pd.DataFrame
    curves: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    checks: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=CHECK_COLUMNS))
    check_seeds: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=CHECK_SEED_COLUMNS))
    dynamics: pd.DataFrame = field(default_factory=pd.DataFrame)  # training dynamics to B per configuration
    extrapolations: dict = field(default_factory=dict)  # contrast id → its extrapolated reading (figures)
    gradient: GradientResults | None = None  # the plan's gradient tests, from their sealed results
    devices: DeviceSummary = field(default_factory=DeviceSummary)  # main runs per device type; notes on time contrasts
    synthetic: bool = False  # runs simulated by `prereg dry-run`: every title, table and figure says SYNTHETIC
    sequential: SequentialLook | None = None  # the look read, for a plan with [sequential]
    missing_runs: list[tuple[str, int]] = field(default_factory=list)  # planned main runs without a run log
    sources: list[dict] = field(default_factory=list)  # the studies whose configurations it read, as pinned (analysis.sources)


# ---------------------------------------------------------------------------------------- study


def _crossed_key(plan: Plan, c: Contrast) -> tuple[str, str, str, tuple[int, ...]] | None:
    """The per-problem reading (set, verifier, metric, levels) that the crossed seed-by-problem
    bootstrap of ``c`` takes, if it takes one (a primary paired contrast of a per-problem metric)."""
    try:
        metric, verifier = _metric_verifier(plan, c)
    except PreregError:
        return None
    if c.tier != "primary" or not plan.statistics.crossed_bootstrap or c.design != "paired" or metric in DERIVED_METRICS:
        return None
    return (c.eval_set or plan.evaluation.primary, verifier, "accuracy" if metric == "greedy_accuracy" else metric, tuple(c.levels))


def _metric_verifier(plan: Plan, c: Contrast) -> tuple[str, str]:
    """The contrast's metric and the verifier its value is read under: ``accuracy`` and
    ``pass@K`` (K ≤ the plan's samples) under the default or strict verifier, ``greedy_accuracy``,
    ``<channel>_rate`` (the eval rows' ``ch_<channel>`` counts; verifier ``default``),
    ``relative_accuracy`` and ``collapse`` (pass@4) under the default or strict verifier."""
    metric = c.metric or plan.evaluation.metric
    if metric in ("accuracy", "relative_accuracy", "collapse") or metric.startswith("pass@"):
        verifier = c.verifier or plan.evaluation.verifier
        if verifier == "math_verify":
            raise PreregError(f"contrast {c.id}: math_verify correctness is not logged in run logs yet; use default or strict")
        k = int(metric[5:]) if metric.startswith("pass@") else COLLAPSE_K if metric == "collapse" else 1
        if k > plan.evaluation.samples:
            raise PreregError(f"contrast {c.id}: metric {metric} needs at least {k} samples per problem; the plan evaluates {plan.evaluation.samples}")
        return metric, verifier
    if metric == "greedy_accuracy":
        return metric, "greedy"
    if metric.endswith("_rate") or metric == "log_length":
        return metric, "default"
    raise PreregError(f"contrast {c.id}: metric {metric!r} is not supported by `prereg analyze` (accuracy, greedy_accuracy, pass@K, <channel>_rate, relative_accuracy, collapse, log_length)")


def analyze_study(study_dir: str | Path, *, exploratory: bool = False, n_resamples: int | None = None,
                  progress: bool | None = None, tsa_ca: str | Path | None = None, not_read: bool = False,
                  look: int | None = None) -> Analysis:
    """Analyze ``study_dir`` (its ``plan.toml``, ``plan.lock`` and ``runs/``) as its plan says.
    ``tsa_ca``: the TSA root to check the study's timestamp receipts against (``prereg verify``).
    ``not_read``: a contrast the runs cannot give (a reading point never reached, a metric or
    verifier not logged) becomes a row with status ``"not read"`` and the reason, and the others
    are read (``prereg dry-run``); otherwise its error stops the analysis. ``look``: the look of a
    sequential plan to read (default the last the runs complete; ``prereg_kit.analysis.looks``)."""
    v = verified_runs(study_dir, exploratory=exploratory, progress=progress, tsa_ca=tsa_ca, look=look)
    plan_path, pf, st, notes, design_ex = v.plan_path, v.plan_file, v.runs, v.notes, v.design_exclusions
    lock_lines, lock_summary = v.lock_lines, v.lock_summary
    study_dir = plan_path.parent
    plan = pf.plan
    B = plan.budgets()  # one token count, or per configuration its own B (tokens or iterations)
    nres = n_resamples or plan.statistics.bootstrap_resamples
    adm = plan.admission

    cache: dict[tuple[str, str, str, tuple[int, ...]], tuple[pd.DataFrame, pd.DataFrame]] = {}  # admitted curves, drift flags
    per_problem: dict[tuple[str, str, str, tuple[int, ...]], pd.DataFrame] = {}
    pending = Counter(k for c in plan.contrasts if (k := _crossed_key(plan, c)))  # crossed readings still to take
    exclusions = [design_ex]

    def curves_for(eval_set: str, verifier: str, metric: str = "accuracy", levels: tuple[int, ...] = ()):
        if metric == "greedy_accuracy":
            metric = "accuracy"  # the greedy verifier already reads greedy correctness
        if (eval_set, verifier, metric, levels) not in cache:
            a, flags = admitted_curves(v, eval_set, verifier, metric, levels)
            n_drift = int(flags["drifted"].sum())
            if metric == "accuracy" and not levels and (lack := rd.runs_without(v.sets(eval_set), "correct_strict", eval_sets=[eval_set])):
                notes.append(f"{eval_set}: drift (default − strict) not checked for {len(lack)} run(s) that do not log "
                             f"correct_strict ({', '.join(f'{c}/seed-{s}' for c, s in lack[:3])}{' …' if len(lack) > 3 else ''})")
            if n_drift and metric == "accuracy" and not levels:
                notes.append(f"{eval_set}: {n_drift} evaluation(s) drifted (default − strict > {adm.drift_threshold:g}); "
                             + ("excluded" if adm.drifted == "exclude" else "flagged, kept"))
            ex = a.exclusions.assign(eval_set=eval_set, verifier=verifier)
            exclusions.append(ex)
            cache[(eval_set, verifier, metric, levels)] = (a.kept, flags)
        return cache[(eval_set, verifier, metric, levels)]

    def problem_acc_for(eval_set: str, verifier: str, metric: str, levels: tuple[int, ...]) -> pd.DataFrame:
        # per-problem accuracies (every evaluation's rows): read only for a crossed bootstrap, and
        # let go after the last contrast that takes them (a set's rows again, at hundreds of runs)
        key = (eval_set, verifier, "accuracy" if metric == "greedy_accuracy" else metric, levels)
        if key not in per_problem:
            try:
                per_problem[key] = rd.problem_accuracy(rd.select_levels(v.sets(eval_set), eval_set, levels),
                                                       eval_set=eval_set, verifier=verifier, metric=key[2])
            except rd.ReadingError as e:
                raise PreregError(f"{study_dir}: {e}") from None
        pending[key] -= 1
        return per_problem[key] if pending[key] > 0 else per_problem.pop(key)

    rows, per_seed, extrapolations = [], [], {}
    reference = plan.evaluation.reference
    # exploratory: a seed one side lacks is left out (and said), a contrast that cannot be read is a row saying why
    unpaired = adm.allow_missing_seeds or exploratory
    for c in _progress(plan.contrasts, progress, "contrasts"):
        with _unread_as_row(c, plan, rows, enabled=not_read or exploratory):
            metric, verifier = _metric_verifier(plan, c)
            eval_set = c.eval_set or plan.evaluation.primary
            sets = [eval_set] + [c.minus_eval_set] * bool(c.minus_eval_set)
            if rd.needed_columns(metric, verifier):  # by name, never a stand-in
                rd.refuse_unlogged(v.rows_of(sets), st.meta, contrast=c.id, metric=metric, verifier=verifier,
                                   eval_sets=sets, configurations=c.configuration_names())
            read_as = (eval_set, verifier, "accuracy" if metric == "relative_accuracy" else metric, tuple(c.levels))
            curves = curves_for(*read_as)[0]
            rp = c.reading_point
            # a span or a share of B needs one B: the contrast's arms' own, where they share one
            point = rp.at_budget(rd.shared_budget(B, c.configuration_names()) if rp.kind in rd.ONE_B_KINDS else B)
            if c.minus_eval_set:  # the second difference on its own test set (S21's Welch form, §C.5.2)
                second = curves_for(c.minus_eval_set, verifier, metric, tuple(c.levels))[0]
                curves = pd.concat([curves[curves["configuration"].isin([c.treatment, c.control])],
                                    second[second["configuration"].isin([c.minus_treatment, c.minus_control])]],
                                   ignore_index=True)
                eval_set = f"{eval_set} / {c.minus_eval_set}"
            seeds = plan.contrast_seeds(c)  # the contrast's seed subset among those all its arms run
            curves = curves[curves["seed"].isin(seeds)]
            label = comparison_label(c)
            arms = c.arm_pairs()
            row = {"contrast": c.id, "tier": c.tier, "kind": c.kind, "design": c.design, "comparison": label,
                   "family": (f.name if (f := plan.family_of(c.id)) else ""),
                   "treatment": " + ".join(t for t, _ in arms), "control": " + ".join(k for _, k in arms),
                   "at": str(rp), "metric": metric, "verifier": verifier,
                   "eval_set": eval_set, "reference": reference if metric == "relative_accuracy" else "",
                   "alternative": c.alternative, "prediction": c.prediction,
                   "levels": ",".join(map(str, c.levels))}
            if rp.kind in rd.TARGET_KINDS:  # Table 11: a share of the budget with a paired seed bootstrap
                try:
                    trow, ps = rd.target_statistics(curves, arms, point, n_resamples=nres,
                                                    confidence=plan.statistics.confidence, seed=plan.statistics.seed)
                except rd.ReadingError as e:
                    raise PreregError(f"contrast {c.id} ({label}): {e}") from None
                rows.append({**row, "seeds": _seed_list(seeds), **trow})
                per_seed.append(ps.assign(contrast=c.id)[["contrast"] + list(ps.columns)])
                continue
            if rp.kind == "extrapolated":  # observed − the control's curve read at e·t (dense-rewards paper §3.3)
                xrow, ps, extrapolations[c.id] = extrapolation_contrast(study_dir, plan, c, curves, n_resamples=nres, notes=notes,
                                                                             chain=v.chain)
                rows.append({**row, **xrow})
                per_seed.append(ps)
                continue
            if metric == "relative_accuracy":  # ÷ the reference's accuracy at the same k·B, same seed
                try:
                    rel = rd.relative_accuracy_curves(curves, reference, point.scaled, allow_missing=unpaired)
                except rd.ReadingError as e:
                    raise PreregError(f"contrast {c.id} ({label}): {e}") from None
                curves = rel.kept
                exclusions.append(rel.exclusions.assign(eval_set=eval_set, verifier=verifier))
            wanted = c.tier == "primary" and plan.statistics.crossed_bootstrap
            crossed = _crossed_key(plan, c) is not None
            if wanted and metric in DERIVED_METRICS:
                notes.append(f"contrast {c.id}: no crossed seed-by-problem bootstrap for metric {metric} "
                             "(a per-seed ratio or flag has no per-problem values)")
            elif wanted and not crossed:
                notes.append(f"contrast {c.id}: no crossed seed-by-problem bootstrap for a {c.design} contrast "
                             "(it resamples the seeds and problems of one seed-paired pair)")
            try:
                dr = design_readings(curves, c.design, arms, point, problem_acc=problem_acc_for(*read_as) if crossed else None,
                                     allow_unpaired=unpaired,
                                     common_random_numbers=plan.evaluation.common_random_numbers)
            except rd.ReadingError as e:
                raise PreregError(f"contrast {c.id} ({label}): {e}") from None
            if len(dr.exclusions):
                exclusions.append(dr.exclusions.assign(eval_set=eval_set, verifier=verifier))
                notes.append(f"contrast {c.id} ({label}): left out of its reading: {_left_out(dr.exclusions)}")
                row["seeds_left_out"] = _seed_list(sorted(set(dr.exclusions["seed"].astype(int))))
            if min(len(v) for v in dr.values) < 2:
                what = "per group" if c.design == "welch" else "unit(s)"
                left = f" ({_left_out(dr.exclusions)})" if len(dr.exclusions) else ""
                raise PreregError(f"contrast {c.id} ({label}): {min(len(v) for v in dr.values)} {what} "
                                  f"on seeds {_seed_list(seeds)}{left}; at least 2 are needed")
            pr = dr.paired
            mats = (pr.treatment_matrix, pr.control_matrix) if crossed and pr and pr.treatment_matrix is not None else None
            row["seeds"] = _seed_list(sorted(set(dr.units["seed"])))
            if c.design == "welch":
                row.update(welch_statistics(*dr.values, c, plan))
            else:
                row.update(contrast_statistics(dr.values[0], c, plan, matrices=mats, n_resamples=nres, notes=notes))
                row.update(robust_columns(dr.values[0], c, plan, n_resamples=nres))  # its named test, robustness rows, d_z
            rows.append(row)
            ps = dr.units.drop(columns="group")[["seed", "treatment_value", "control_value", "difference", "read_at", "unit"]]
            ps.insert(0, "contrast", c.id)
            per_seed.append(ps)

    if not per_seed:  # no contrast was read
        per_seed = [pd.DataFrame(columns=["contrast", "seed", "treatment_value", "control_value", "difference", "read_at"])]
    seq = None
    if v.look:  # Holm on the look's repeated p-values, then stop or continue
        contrasts, seq = read_look(pd.DataFrame(rows), plan, v.look, plan_path, exploratory=exploratory, chain=v.chain)
        notes.extend(seq.notes)
    else:
        contrasts = adjust_and_read(pd.DataFrame(rows), plan, exploratory=exploratory)
    v0 = plan.evaluation.verifier if plan.evaluation.verifier != "math_verify" else "default"
    curves = curves_for(plan.evaluation.primary, v0)[0]
    extra = {}
    if reference is not None:
        try:
            extra["relative_accuracy"] = rd.relative_accuracy_curves(curves, reference, B, allow_missing=True).kept
        except rd.ReadingError as e:
            notes.append(f"configuration table: no relative accuracy ({e})")
    if plan.evaluation.samples >= COLLAPSE_K:
        try:
            extra["collapse"] = curves_for(plan.evaluation.primary, v0, "collapse")[0]
        except PreregError as e:
            notes.append(f"configuration table: no collapse rate ({e})")
    ex = pd.concat(exclusions, ignore_index=True) if exclusions else pd.DataFrame()
    ex = _tidy_exclusions(ex)
    main_runs = st.meta.loc[st.meta["stage"] == "main", ["configuration", "seed"]]
    checks, check_seeds = read_checks(plan, st.iterations.merge(main_runs, on=["configuration", "seed"]))
    return Analysis(
        plan=plan, plan_path=plan_path, plan_hash=pf.content_sha256, exploratory=exploratory,
        lock_lines=lock_lines, lock_summary=lock_summary, contrasts=contrasts,
        per_seed=pd.concat(per_seed, ignore_index=True), hypotheses=read_hypotheses(plan, contrasts),
        configurations=configuration_summary(curves, st.iterations, B, **extra), exclusions=ex, curves=curves, notes=notes,
        checks=checks, check_seeds=check_seeds, extrapolations=extrapolations, sequential=seq, devices=device_summary(plan, run_devices(st.meta)),
        sources=v.sources,
        missing_runs=[(str(r.configuration), int(r.seed)) for r in design_ex[design_ex["rule"] == "missing"].itertuples()],
        gradient=gradient_results(study_dir, plan, n_resamples=nres, exploratory=exploratory, chain=v.chain) if plan.gradient_tests else None,
        dynamics=rd.training_dynamics(st.iterations, (r := rd.read_at_tokens(curves, B))[r["reached"]]))


@contextmanager
def _unread_as_row(c: Contrast, plan: Plan, rows: list[dict], *, enabled: bool) -> Iterator[None]:
    """Around the reading of one contrast: when ``enabled``, its error becomes a ``not read`` row."""
    try:
        yield
    except PreregError as e:
        if not enabled:
            raise
        lo, hi = margin_bounds(plan.margin_of(c))
        arms = c.arm_pairs()
        rows.append({"contrast": c.id, "tier": c.tier, "kind": c.kind, "design": c.design, "comparison": comparison_label(c),
                     "family": (f.name if (f := plan.family_of(c.id)) else ""),
                     "treatment": " + ".join(t for t, _ in arms), "control": " + ".join(k for _, k in arms),
                     "at": c.at, "metric": c.metric or "", "verifier": c.verifier or "", "eval_set": c.eval_set or "",
                     "alternative": c.alternative, "prediction": c.prediction, "n": 0, "n_lower": 0, "n_higher": 0,
                     "tested_p": np.nan, "margin_low": lo, "margin_high": hi,
                     "status": NOT_READ, "reason": " ".join(" ".join(e.lines).split())})


def _left_out(ex: pd.DataFrame) -> str:
    """The seeds a contrast's reading left out and why, grouped by cause: ``seeds 0-2, 5:
    configuration 'ctl' has evaluations, 'big' has none (…)``."""
    why: dict[str, list[int]] = {}
    for r in ex.drop_duplicates("seed").sort_values("seed").itertuples():
        s = int(r.seed)
        why.setdefault(str(r.reason).removeprefix(f"seed {s}: "), []).append(s)
    return "; ".join(f"seed{'s' * (len(s) > 1)} {_seed_list(s)}: {reason}" for reason, s in why.items())


def _tidy_exclusions(ex: pd.DataFrame) -> pd.DataFrame:
    cols = ["configuration", "seed", "what", "reason"]
    if not len(ex):
        return pd.DataFrame(columns=cols)
    what = ex["rule"].astype(str) + np.where(ex["eval_index"].isna(), "", " (evaluation " + ex["eval_index"].astype(str) + ")")
    out = pd.DataFrame({"configuration": ex["configuration"], "seed": ex["seed"], "what": what, "reason": ex["reason"]})
    return out.drop_duplicates().reset_index(drop=True)


def configuration_summary(curves: pd.DataFrame, iterations: pd.DataFrame, budget: "rd.Budgets", *,
                          relative_accuracy: pd.DataFrame | None = None,
                          collapse: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per configuration at B: seeds, accuracy, tokens, updates, training hours, continuation
    share of generated tokens, and the share of training time per stage (up to the reading;
    ``unavailable`` when a run logs only an unsplit ``seconds_step``).

    ``relative_accuracy`` (curves from :func:`readings.relative_accuracy_curves`) adds
    ``relative_accuracy_at_B``, the mean over seeds of the per-seed ratio to the reference;
    ``collapse`` (curves with ``metric="collapse"``) adds ``n_collapsed`` and ``collapse_rate``,
    the share of seeds whose pass@4 at B is below their evaluation 0 (multi-reward paper §6.1, App. C.4)."""
    at_b = rd.read_at_tokens(curves, budget)
    at_b = at_b[at_b["reached"]]
    derived = {}
    for key, cv in (("relative_accuracy", relative_accuracy), ("collapse", collapse)):
        if cv is not None:
            r = rd.read_at_tokens(cv, budget)
            derived[key] = r[r["reached"]].groupby("configuration")["accuracy"]
    stages = ["selection", "generation", "credit", "update", "weight_sync"]
    # the iteration rows up to each run's reading, as numpy slices of one stable sort by run
    # (original order kept within a run, so every sum adds the same numbers in the same order)
    it = iterations.sort_values(rd.RUN, kind="stable", ignore_index=True)
    cfg, sd = it["configuration"].to_numpy(dtype=object), it["seed"].to_numpy()
    st = np.flatnonzero(np.r_[True, (cfg[1:] != cfg[:-1]) | (sd[1:] != sd[:-1]), True]) if len(it) else np.array([0])
    where = {(cfg[a], int(sd[a])): (a, b) for a, b in zip(st[:-1], st[1:])}
    cum, tot_col, cont = (it[c].to_numpy(dtype="float64") for c in ("cum_tokens", "tokens_total", "tokens_continuation"))
    secs_all = [it[f"seconds_{s}"].to_numpy(dtype="float64") for s in stages]
    rows = []
    for name, g in at_b.groupby("configuration", sort=True):
        share_tok, shares, unsplit = [], [], False
        for seed, tok in zip(g["seed"].to_numpy(), g["tokens"].to_numpy(dtype="float64")):
            a, b = where.get((name, int(seed)), (0, 0))
            m = cum[a:b] <= tok + 1e-9
            tot = np.nansum(tot_col[a:b][m])
            share_tok.append(np.nansum(cont[a:b][m]) / tot if tot else np.nan)
            run = [x[a:b][m] for x in secs_all]
            unsplit |= any(bool(np.isnan(x).any()) for x in run)  # seconds_step only
            secs = np.array([np.nansum(x) for x in run])
            shares.append(secs / secs.sum() if secs.sum() else np.full(len(stages), np.nan))
        sh = np.full(len(stages), np.nan) if unsplit else np.nanmean(np.array(shares), axis=0)
        rows.append({"configuration": name, "n_seeds": len(g), "accuracy_at_B": g["accuracy"].mean(),
                     "tokens_at_B": g["tokens"].mean(), "updates_at_B": g["updates"].mean(),
                     "hours_at_B": g["train_seconds"].mean() / 3600, "continuation_share": float(np.nanmean(share_tok)),
                     "stage_shares": UNSPLIT if unsplit else " / ".join(f"{x:.0%}" for x in sh),
                     **{f"share_{s}": float(x) for s, x in zip(stages, sh)}})
        if "relative_accuracy" in derived:
            g_rel = derived["relative_accuracy"]
            rows[-1]["relative_accuracy_at_B"] = float(g_rel.mean().get(name, np.nan))
        if "collapse" in derived:
            g_col = derived["collapse"]
            rows[-1]["n_collapsed"] = int(g_col.sum().get(name, 0))
            rows[-1]["collapse_rate"] = float(g_col.mean().get(name, np.nan))
    return pd.DataFrame(rows)


callable_module(__name__, analyze_study)  # pk.analyze(study): the module is callable (prereg_kit.callables)
