"""The rules between a plan's keys that the schema alone cannot express (``cross_check``): names
that must exist, tiers and families, reading points against run lengths, metrics against sets."""

from __future__ import annotations

from .designs import check_problems as _check_problems
from .designs import design_problems as _design_problems
from .designs import extrapolation_problems as _extrapolation_problems
from .designs import seed_subset_problems as _seed_subset_problems
from .fields import COLLAPSE_K, DERIVED_METRICS, EXTRAPOLATED, SPAN_POINTS, TARGET_POINTS, ReadingPoint, _cut, _short
from .gradient import gradient_problems
from .robust import robust_problems
from .schema import Contrast, EvalSet, Plan
from .sequential import sequential_problems
from .sources import source_problems, sourced_names


def cross_check(plan: Plan) -> list[tuple[tuple, str]]:
    """Rules between keys that the schema alone cannot express: (key path, message) pairs.

    Linear in the size of the plan: lookups go through dicts built once (a 1 MiB plan can hold
    thousands of contrasts).
    """
    errs: list[tuple[tuple, str]] = []
    own = plan.configurations  # run lengths and seeds are known here for these; a source's are checked once it is opened
    configs = set(own) | set(sourced_names(plan))
    have = _cut(", ".join(sorted(configs)), 200)
    contrast_ids = [c.id for c in plan.contrasts]
    by_id: dict[str, Contrast] = {}
    for c in plan.contrasts:
        by_id.setdefault(c.id, c)
    set_names = [s.name for s in plan.evaluation.sets]
    sets_by_name = {s.name: s for s in reversed(plan.evaluation.sets)}
    main_stage = plan.stage("main")
    lengths: dict[str, float] = {}

    def run_length(name: str) -> float:
        if name not in lengths:
            lengths[name] = plan._run_length(name, main_stage)
        return lengths[name]

    def first_seen(names: list[str]) -> dict[str, int]:
        first: dict[str, int] = {}
        for i, n in enumerate(names):
            first.setdefault(n, i)
        return first

    folded: dict[str, str] = {}
    for name in plan.configurations:
        other = folded.setdefault(name.casefold(), name)
        if other != name:
            errs.append((("configurations", name), f"configuration {name!r} differs from {other!r} only in case: "
                                                   "their run folders would be one on a case-insensitive file system"))
    if plan.study.comparator not in configs:
        errs.append((("study", "comparator"), f"unknown configuration {_short(plan.study.comparator)} (have: {have})"))
    first_set = first_seen(set_names)
    for i, name in enumerate(set_names):
        if first_set[name] != i:
            errs.append((("evaluation", "sets", i, "name"), f"duplicate evaluation set {name!r}"))
    if plan.evaluation.primary_set is not None and plan.evaluation.primary_set not in first_set:
        errs.append((("evaluation", "primary_set"), f"unknown evaluation set {_short(plan.evaluation.primary_set)}"))
    ev = plan.evaluation
    if ev.reference is not None and ev.reference not in configs:
        errs.append((("evaluation", "reference"), f"unknown configuration {_short(ev.reference)} (have: {have})"))
    if ev.metric == "relative_accuracy" and ev.reference is None:
        errs.append((("evaluation", "metric"), "metric relative_accuracy needs [evaluation] reference (the primary-only configuration)"))
    if ev.metric == "collapse" and ev.samples < COLLAPSE_K:
        errs.append((("evaluation", "metric"), f"metric collapse compares pass@{COLLAPSE_K}: it needs samples >= {COLLAPSE_K} (have {ev.samples})"))
    if ev.primary in sets_by_name and not sets_by_name[ev.primary].every_evaluation:
        i = set_names.index(ev.primary)
        errs.append((("evaluation", "sets", i, "at"), f"set {ev.primary!r} is the primary set: it is scored at every "
                     "evaluation (curves, spans and time readings need them); drop 'at' or name another primary_set"))

    memberships: dict[str, list[str]] = {}
    first_family = first_seen([f.name for f in plan.families])
    for fi, fam in enumerate(plan.families):
        if first_family[fam.name] != fi:
            errs.append((("families", fi, "name"), f"duplicate family name {fam.name!r}"))
        if not fam.members:
            errs.append((("families", fi, "members"), f"family {fam.name!r} is empty"))
        for m in fam.members:
            memberships.setdefault(m, []).append(fam.name)
            if m not in by_id:
                errs.append((("families", fi, "members"), f"unknown contrast {_short(m)} in family {fam.name!r}"))
            elif by_id[m].tier != "primary":
                errs.append((("families", fi, "members"), f"contrast {m!r} is {by_id[m].tier}: only primary contrasts are Holm-adjusted"))

    first_contrast = first_seen(contrast_ids)
    for ci, c in enumerate(plan.contrasts):
        where = ("contrasts", ci)
        n_before = len(errs)
        if first_contrast[c.id] != ci:
            errs.append((where + ("id",), f"duplicate contrast id {c.id!r}"))
        errs += _design_problems(c, where, configs, have)
        errs += _extrapolation_problems(plan, c, where)
        errs += robust_problems(c, where)
        if c.seeds is not None and len(errs) == n_before:
            errs += _seed_subset_problems(plan, c, where)
        if c.eval_set is not None and c.eval_set not in first_set:
            errs.append((where + ("eval_set",), f"unknown evaluation set {_short(c.eval_set)}"))
        if c.minus_eval_set is not None:
            if c.minus_eval_set not in first_set:
                errs.append((where + ("minus_eval_set",), f"unknown evaluation set {_short(c.minus_eval_set)}"))
            elif c.design != "welch" or not c.minus_treatment:
                errs.append((where + ("minus_eval_set",), "only a welch contrast of two differences reads its second "
                                                           "difference on another set"))
            elif {c.treatment, c.control} & {c.minus_treatment, c.minus_control}:
                errs.append((where + ("minus_eval_set",), "a configuration read on two sets in one contrast: the two "
                                                           "differences on different sets need four different configurations"))
        if c.tier == "primary" and c.id not in memberships:
            errs.append((where + ("tier",), f"primary contrast {c.id!r} is in no Holm family (add it to [[families]])"))
        if len(memberships.get(c.id, [])) > 1:
            errs.append((where + ("id",), f"contrast {c.id!r} is in several families: {', '.join(memberships[c.id])}"))
        if c.kind != "superiority" and c.alternative != "two-sided":
            errs.append((where + ("alternative",), f"a {c.kind} contrast takes no 'alternative' (its test is fixed)"))
        rp = c.reading_point
        if c.metric is not None:
            if c.metric == "relative_accuracy" and ev.reference is None:
                errs.append((where + ("metric",), "metric relative_accuracy needs [evaluation] reference (the primary-only configuration)"))
            if c.metric == "collapse" and ev.samples < COLLAPSE_K:
                errs.append((where + ("metric",), f"metric collapse compares pass@{COLLAPSE_K}: it needs [evaluation] samples >= {COLLAPSE_K} (have {ev.samples})"))
        metric = c.metric or ev.metric
        errs += _reading_checks(c, where, rp, metric, sets_by_name.get(c.eval_set or ev.primary))
        if metric in DERIVED_METRICS and rp.kind != "tokens":
            errs.append((where + ("at",), f"metric {metric} is read at token reading points only (\"B\" or \"kB\"), not {c.at!r}"))
        if metric == "relative_accuracy" and ev.reference in own and rp.kind == "tokens" \
                and run_length(ev.reference) < rp.multiple:
            errs.append((where + ("at",), f"read at {rp} but the reference {ev.reference!r} trains only to {run_length(ev.reference):g}B"))
        if c.design == "welch" and not c.minus_treatment and rp.kind != "tokens":
            errs.append((where + ("at",), f"a welch contrast of two configurations is read at a token reading point "
                                          f"(\"B\" or \"kB\"), not {c.at!r}: {rp.kind} readings pair runs by seed"))
        if rp.kind in ("tokens", EXTRAPOLATED) + SPAN_POINTS + TARGET_POINTS and len(errs) == n_before:  # no other problem here
            for name in c.configuration_names():
                if name in own and run_length(name) < rp.multiple:
                    errs.append((where + ("at",), f"read at {rp} but {name!r} trains only to {run_length(name):g}B"))

    errs += _check_problems(plan, configs, have, first_contrast, run_length)
    errs += source_problems(plan)

    first_hypothesis = first_seen([h.id for h in plan.hypotheses])
    for hi, h in enumerate(plan.hypotheses):
        if first_hypothesis[h.id] != hi:
            errs.append((("hypotheses", hi, "id"), f"duplicate hypothesis id {h.id!r}"))
        for cid in h.contrasts:
            if cid not in by_id:
                errs.append((("hypotheses", hi, "contrasts"), f"unknown contrast {_short(cid)}"))

    stage_names = [s.name for s in plan.stages]
    first_stage = first_seen(stage_names)
    for si, s in enumerate(plan.stages):
        if first_stage[s.name] != si:
            errs.append((("stages", si, "name"), f"duplicate stage {s.name!r}"))
        for name in s.configurations or []:
            if name not in own:
                errs.append((("stages", si, "configurations"), f"unknown configuration {_short(name)}"
                             + (" (a source's configuration runs in its own study)" if name in configs else "")))
    if "main" not in stage_names:
        errs.append((("stages",), "the stages must include 'main'"))
    errs += gradient_problems(plan)
    errs += sequential_problems(plan)
    return errs




def _reading_checks(c: Contrast, where: tuple, rp: ReadingPoint, metric: str, es: EvalSet | None) -> list[tuple[tuple, str]]:
    """What a contrast's reading point, levels and set allow together (spans, to-target, sets
    scored only at the start and at B, per-level accuracy)."""
    errs: list[tuple[tuple, str]] = []
    if rp.kind in TARGET_POINTS:
        # Table 11 is exploratory: a share with a bootstrap interval, no test p to Holm-adjust
        if c.tier == "primary":
            errs.append((where + ("tier",), f"a {rp.kind} reading has a bootstrap interval but no test p: it cannot be primary"))
        if c.design not in ("paired", "pooled"):
            errs.append((where + ("design",), f"a {rp.kind} reading is paired by seed, or pooled over (pair, seed) units; "
                                              f"not design {c.design!r}"))
        if c.kind != "superiority":
            errs.append((where + ("kind",), f"a {rp.kind} reading is a share of the budget read against 1 (no saving); "
                         f"it takes no kind {c.kind!r}"))
        if metric not in ("accuracy", "greedy_accuracy") and not metric.startswith("pass@"):
            errs.append((where + ("metric",), f"a {rp.kind} reading crosses an accuracy target, not metric {metric}"))
    if es is not None and not es.every_evaluation:
        if rp.kind != "tokens" or rp.multiple != 1 or "B" not in (es.at or []):
            errs.append((where + ("at",), f"set {es.name!r} is scored only at {' and '.join(es.at or [])}: "
                         f"read it at \"B\", not {c.at!r}"))
        elif metric == "collapse" and "start" not in (es.at or []):
            errs.append((where + ("metric",), f"metric collapse compares with the start; set {es.name!r} is not scored there"))
    if c.levels and es is not None and es.levels and not set(c.levels) <= set(es.levels):
        errs.append((where + ("levels",), f"levels {sorted(set(c.levels) - set(es.levels))} are not in set "
                     f"{es.name!r} (levels {es.levels})"))
    if c.levels and metric in DERIVED_METRICS + ("log_length",):
        errs.append((where + ("levels",), f"levels select the problems of an accuracy reading; metric {metric} takes none"))
    return errs
