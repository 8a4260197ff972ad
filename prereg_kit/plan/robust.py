"""Which test a contrast may name (``test``), which robustness rows it may put beside it
(``robustness``) and for which kinds and designs: the rules ``cross_check`` applies.

Every robust test reads one vector of per-unit differences (a seed's paired difference, a
seed's difference of differences, a pooled (pair, seed) difference), so a Welch contrast, two
unpaired groups, takes none; nor does a to-target share or an extrapolated reading, which have
statistics of their own. The bootstraps give two-sided p-values and no minimal-effect test.
"""

from __future__ import annotations

from typing import get_args

from .fields import EXTRAPOLATED, TARGET_POINTS
from .schema import Contrast, TestName

TESTS: tuple[str, ...] = get_args(TestName)  # the names a plan may give, from the one Literal
BOOTSTRAPS = ("bootstrap-bca", "bootstrap-studentized")
# kind → the tests that have a reading of it
KIND_TESTS = {
    "superiority": TESTS,
    "equivalence": TESTS,
    "non-inferiority": TESTS,
    "minimal-effect": ("t", "wilcoxon", "sign-flip"),
}


def robust_problems(c: Contrast, where: tuple) -> list[tuple[tuple, str]]:
    """(key path, message) for each test or robustness row the contrast cannot have."""
    errs: list[tuple[tuple, str]] = []
    named = [("test", c.test)] + [(("robustness", i), t) for i, t in enumerate(c.robustness)]
    rp = c.reading_point
    if c.kind == "minimal-effect" and c.design == "welch":
        errs.append((where + ("kind",), f"contrast {c.id}: kind minimal-effect tests paired differences; "
                                         "a welch contrast takes superiority, equivalence or non-inferiority"))
    if c.kind == "minimal-effect" and rp.kind == EXTRAPOLATED:
        errs.append((where + ("kind",), f"contrast {c.id}: an extrapolated reading takes no kind minimal-effect"))
    seen: set[str] = set()
    for key, t in named:
        path = where + (key if isinstance(key, tuple) else (key,))
        if key == "test" and t == "t":
            continue
        field = "robustness" if isinstance(key, tuple) else "test"
        if isinstance(key, tuple):
            if t == c.test:
                errs.append((path, f"contrast {c.id}: robustness {t!r} is already the contrast's test"))
                continue
            if t in seen:
                errs.append((path, f"contrast {c.id}: robustness names {t!r} twice"))
                continue
            seen.add(t)
        if c.design == "welch":
            errs.append((path, f"contrast {c.id}: {field} {t!r}: a welch contrast (two unpaired groups) takes only "
                               "Welch's t; the robust tests read one vector of paired differences"))
        elif rp.kind in TARGET_POINTS or rp.kind == EXTRAPOLATED:
            errs.append((path, f"contrast {c.id}: {field} {t!r}: a {rp.kind} reading has statistics of its own "
                               "and takes no other test"))
        elif t not in KIND_TESTS[c.kind]:
            errs.append((path, f"contrast {c.id}: {field} {t!r} has no {c.kind} test (use "
                               f"{', '.join(KIND_TESTS[c.kind])})"))
        elif t in BOOTSTRAPS and c.alternative != "two-sided":
            errs.append((path, f"contrast {c.id}: {field} {t!r} gives a two-sided p; it takes no "
                               f"alternative {c.alternative!r}"))
    return errs
