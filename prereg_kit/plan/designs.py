"""Cross-checks of the analysis tables a plan adds beyond one paired contrast: the keys each
contrast design needs and refuses, per-contrast seed subsets, and ``[[checks]]`` (manipulation
checks). Called by :func:`prereg_kit.plan.schema.cross_check`; messages are (key path, text)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .fields import _cut, _short

if TYPE_CHECKING:
    from .schema import Contrast, Plan


_PAIR_KEYS = ("treatment", "control", "minus_treatment", "minus_control")


def design_problems(c: Contrast, where: tuple, configs: set[str], have: str) -> list[tuple[tuple, str]]:
    """The keys each design needs and refuses, and the configurations it names."""
    errs: list[tuple[tuple, str]] = []
    given = [k for k in _PAIR_KEYS if getattr(c, k)]
    need = {"paired": ("treatment", "control"), "welch": ("treatment", "control"), "pooled": (),
            "difference_of_differences": _PAIR_KEYS}[c.design]
    allowed = {"paired": need, "pooled": (), "difference_of_differences": need, "welch": _PAIR_KEYS}[c.design]
    for k in need:
        if not getattr(c, k):
            errs.append((where + (k,), f"a {c.design} contrast needs {k!r}"))
    for k in given:
        if k not in allowed:
            errs.append((where + (k,), f"a {c.design} contrast takes no {k!r}"
                         + (" (its pairs are in 'pairs')" if c.design == "pooled" else "")))
    if c.design == "welch" and bool(c.minus_treatment) != bool(c.minus_control):
        k = "minus_control" if c.minus_treatment else "minus_treatment"
        errs.append((where + (k,), "a welch contrast on two differences needs both minus_treatment and minus_control"))
    if c.design == "pooled":
        if len(c.pairs) < 2:
            errs.append((where + ("pairs",), f"a pooled contrast needs at least 2 pairs, got {len(c.pairs)}"))
        for i, p in enumerate(c.pairs):
            if len(p) != 2:
                errs.append((where + ("pairs", i), f"a pair is [treatment, control], got {len(p)} name(s)"))
        seen = [tuple(p) for p in c.pairs]
        for i, p in enumerate(seen):
            if p in seen[:i]:
                errs.append((where + ("pairs", i), f"pair {list(p)} is listed twice"))
    elif c.pairs:
        errs.append((where + ("pairs",), f"a {c.design} contrast takes no 'pairs' (use design = \"pooled\")"))
    if errs:
        return errs
    for i, (t, ctl) in enumerate(c.arm_pairs()):
        keys = (("pairs", i), ("pairs", i)) if c.design == "pooled" else \
            (("treatment",), ("control",)) if i == 0 else (("minus_treatment",), ("minus_control",))
        for name, key in ((t, keys[0]), (ctl, keys[1])):
            if name not in configs:
                errs.append((where + key, f"unknown configuration {_short(name)} (have: {have})"))
        if t == ctl:
            errs.append((where + keys[1], f"{_short(t)} is both treatment and control of a pair"))
    pairs = c.arm_pairs()
    if c.design in ("difference_of_differences", "welch") and len(pairs) == 2 and \
            (pairs[0] == pairs[1] or pairs[0] == pairs[1][::-1]):
        errs.append((where + ("minus_treatment",), "the two differences compare the same configurations"))
    return errs


def extrapolation_problems(plan: Plan, c: Contrast, where: tuple) -> list[tuple[tuple, str]]:
    """``at = "extrapolated"`` and ``efficiency`` go together; the reading is seed-paired on one
    token budget; a "TEST:configuration" efficiency names a gradient test of the plan and one of
    its configurations (checked when the plan has ``[[gradient_tests]]``)."""
    extrapolated = c.reading_point.kind == "extrapolated"
    if not extrapolated:
        return [] if c.efficiency is None else [(where + ("efficiency",), f"efficiency is the e of at = \"extrapolated\"; "
                                                                          f"this contrast is read at {c.at!r}")]
    errs: list[tuple[tuple, str]] = []
    if c.efficiency is None:
        errs.append((where + ("at",), "at = \"extrapolated\" needs efficiency = e (a number above 0, or "
                                      "\"TEST:configuration\" for a gradient test's per-token estimate)"))
    if c.design != "paired":
        errs.append((where + ("design",), f"an extrapolated contrast is paired (design = \"paired\": per seed, "
                                          f"observed − the control's curve at e·t); design {c.design!r} is not allowed"))
    if not isinstance(plan.budgets(), float):
        errs.append((where + ("at",), "an extrapolated reading needs one token budget B for every configuration "
                                      "(it reads the control's curve at e·t tokens)"))
    tests = getattr(plan, "gradient_tests", None)
    if isinstance(c.efficiency, str) and tests is not None:
        test, _, conf = c.efficiency.partition(":")
        by_id = {t.id: t for t in tests}
        if test not in by_id:
            errs.append((where + ("efficiency",), f"unknown gradient test {_short(test)} (have: "
                                                  f"{_cut(', '.join(by_id), 200) or 'no [[gradient_tests]]'})"))
        elif conf not in by_id[test].configurations:
            errs.append((where + ("efficiency",), f"gradient test {test!r} does not measure {_short(conf)} (it measures "
                                                  f"{_cut(', '.join(by_id[test].configurations), 200)})"))
    return errs


def seed_subset_problems(plan: Plan, c: Contrast, where: tuple) -> list[tuple[tuple, str]]:
    """A contrast's ``seeds`` must be run by each of its configurations (welch: by either arm)."""
    want = set(c.seeds or [])
    if any(n not in plan.configurations for n in c.configuration_names()):
        return []  # a source's seeds are known once it is opened (prereg_kit.chain.sources checks the plan again)
    runs = {n: set(plan.configuration_seeds(n)) for n in c.configuration_names()}
    if c.design == "pooled":  # each pair on its own seeds: a seed some pair runs
        if missing := sorted(want - set(plan.contrast_seeds(c.model_copy(update={"seeds": None})))):
            return [(where + ("seeds",), f"seed(s) {seed_text(missing)} are run by no pair of the pooled contrast")]
        return []
    if c.design == "welch":
        arms = [set().union(*(runs[n] for n in p)) for p in c.arm_pairs()] if c.minus_treatment else \
            [runs[c.treatment], runs[c.control]]
        if not any(want & a for a in arms[:1]) or not any(want & a for a in arms[1:]):
            return [(where + ("seeds",), f"seeds {seed_text(sorted(want))} leave an arm of the welch contrast without seeds")]
        union = set().union(*runs.values())
        if want - union:
            return [(where + ("seeds",), f"seed(s) {seed_text(sorted(want - union))} are run by no configuration of the contrast")]
        return []
    for name, have in runs.items():
        if want - have:
            return [(where + ("seeds",), f"seed(s) {seed_text(sorted(want - have))} are not run by configuration "
                                        f"{name!r} (it runs {seed_text(sorted(have))})")]
    return []


def seed_text(seeds: list[int]) -> str:
    """``0-5, 9`` for a sorted seed list (ranges of consecutive seeds)."""
    out, i = [], 0
    while i < len(seeds):
        j = i
        while j + 1 < len(seeds) and seeds[j + 1] == seeds[j] + 1:
            j += 1
        out.append(str(seeds[i]) if i == j else f"{seeds[i]}-{seeds[j]}")
        i = j + 1
    return _cut(", ".join(out), 120)


def check_problems(plan: Plan, configs: set[str], have: str, contrast_ids: dict[str, int],
                    run_length) -> list[tuple[tuple, str]]:
    """``[[checks]]``: known configurations, one reference at most, a target where it is needed,
    ids apart from the contrasts', seeds the configurations run."""
    errs: list[tuple[tuple, str]] = []
    seen: set[str] = set()
    for i, k in enumerate(plan.checks):
        where = ("checks", i)
        if k.id in seen or k.id in contrast_ids:
            errs.append((where + ("id",), f"duplicate id {k.id!r} (contrast and check ids share one name space)"))
        seen.add(k.id)
        for key in ("configuration", "control"):
            name = getattr(k, key)
            if name is not None and name not in configs:
                errs.append((where + (key,), f"unknown configuration {_short(name)} (have: {have})"))
        if k.control is not None and k.baseline is not None:
            errs.append((where + ("baseline",), "a check compares with a control configuration or a baseline column, not both"))
        if k.control == k.configuration:
            errs.append((where + ("control",), "the check's configuration and control are the same"))
        if k.baseline == k.metric:
            errs.append((where + ("baseline",), "the baseline column is the metric itself"))
        if k.expect == "closer_to_target":
            if k.target is None:
                errs.append((where + ("target",), "expect = \"closer_to_target\" needs a target"))
            if k.control is None and k.baseline is None:
                errs.append((where + ("expect",), "expect = \"closer_to_target\" needs a control or a baseline column to be closer than"))
        elif k.target is not None:
            errs.append((where + ("target",), f"a target is read only with expect = \"closer_to_target\" (have {k.expect!r})"))
        names = [n for n in (k.configuration, k.control) if n is not None and n in plan.configurations]
        for n in names:
            if run_length(n) < k.reading_point.multiple:
                errs.append((where + ("at",), f"read at {k.reading_point} but {n!r} trains only to {run_length(n):g}B"))
        if k.seeds is not None:
            for n in names:
                if missing := sorted(set(k.seeds) - set(plan.configuration_seeds(n))):
                    errs.append((where + ("seeds",), f"seed(s) {seed_text(missing)} are not run by configuration {n!r}"))
                    break
    return errs
