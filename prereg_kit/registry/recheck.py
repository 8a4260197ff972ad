"""``prereg recheck``: every row the registry records from a paper, checked against the paper's
other printed numbers under the method the paper states.

A printed p-value is recomputed from its printed mean, interval and n
(:func:`prereg_kit.stats.from_summary`), or from its printed d_z and n
(:func:`prereg_kit.stats.p_from_dz`), and compared given the printed rounding; a mismatch that is a
real inconsistency of the paper carries its ``explanation`` in the record. A percentile-bootstrap
row is checked against its estimate, n and d_z, or recomputed from its per-seed values; an
endpoint is rechecked by its ``checks`` (:func:`check_endpoint`); a row without a printed test
against other printed numbers of the same runs (:mod:`prereg_kit.registry.relations`).
See ``docs/registry.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import PreregError
from ..plan import PLAN_FILE, Plan, load_plan
from ..stats import bootstrap_from_summary, bootstrap_from_values, from_summary, p_from_dz
from ..stats.summary import parse_p
from .relations import apply_relations, merge, printed_interval, printed_row, same_statistic
from .reported import DZ_TEST_KEYS, REPORTED_FILE, Endpoint, EndpointCheck, ReportedRow, load_reported
from .studies import find_study, study_dirs

STATUSES = ("consistent", "explained", "inconsistent", "no test", "not checkable")


@dataclass
class CheckedRow:
    """The recheck of one reported row."""

    study: str
    row: str
    label: str
    source: str
    n: int | None
    printed: str
    test: str
    status: str
    checks: list[str] = field(default_factory=list)  # "holm_p .016 ∈ [.0155, .0165] vs [.0071, .0143]: ok"
    tests: list[dict] = field(default_factory=list)  # per printed test: test, printed, recomputed [low, high], match
    basis: str = ""  # family size and margin used, with "inferred" where the paper does not state it
    explanation: str = ""
    mean_matches_ci: bool | None = None

    @property
    def mismatch(self) -> bool:
        return self.status in ("inconsistent", "explained")


def _fmt(x: float) -> str:
    if x == 0:
        return "0"
    if x >= 0.001:
        return f"{x:.4f}".rstrip("0").rstrip(".")
    return f"{x:.2g}"


def _family_size(row: ReportedRow, plan: Plan | None) -> tuple[int | None, str]:
    if row.family_size is not None:
        return row.family_size, "inferred" if row.family_inferred else "stated"
    if plan is not None and row.contrast:
        fam = plan.family_of(row.contrast)
        if fam is not None:
            return len(fam.members), "plan"
    return None, ""


def _margin(row: ReportedRow, plan: Plan | None) -> float | list[float]:
    if row.margin is not None:
        m: float | list[float] = row.margin
    elif plan is not None and row.contrast:
        try:
            m = plan.margin_of(plan.contrast(row.contrast))
        except KeyError:
            m = plan.statistics.margin
    elif plan is not None:
        m = plan.statistics.margin
    else:
        m = 0.02
    if row.unit == "points":
        m = [100 * x for x in m] if isinstance(m, list) else 100 * m
    return m


_KIND_KEY = {"superiority": ("p", "holm_p"), "equivalence": ("tost_p", "tost_holm_p"),
             "non-inferiority": ("noninferiority_p", "noninferiority_holm_p")}


def recheck_row(study: str, row: ReportedRow, plan: Plan | None = None,
                holm_exact: dict[str, tuple[float, float]] | None = None) -> CheckedRow:
    """Recompute the row's printed tests from its printed mean, interval and n, then its own
    re-analyses from other printed numbers: ``checks`` (:func:`check_endpoint`) and
    ``printed_elsewhere`` (:func:`prereg_kit.registry.relations.same_statistic`). Relations to
    other rows (``same_as``, ``difference_of``, ``sum_of``, ``pooled_from``) need the other rows:
    :func:`recheck_study` adds them.

    ``holm_exact`` maps a Holm key (``holm_p``, ``tost_holm_p``, ``noninferiority_holm_p``) to the
    range of the exact Holm value when every member of the row's family has a printed row
    (:func:`family_holm_ranges`); otherwise a Holm value is checked against ``[p, min(1, m·p)]``.
    """
    out = _recheck_tests(study, row, plan, holm_exact)
    for c in row.checks:
        try:
            good, (lo, hi), line = check_endpoint(c)
        except ValueError as e:
            good, (lo, hi), line = False, (float("nan"), float("nan")), f"{c.rule}: cannot recompute: {e}"
        merge(out, good, [line + (f" ({c.note})" if c.note else "")],
              [{"test": c.rule, "printed": c.printed or _SYMBOL[c.rule], "recomputed": [lo, hi], "match": bool(good)}])
    if row.printed_elsewhere:
        mine = printed_row(row.id, mean=row.mean, ci_low=row.ci_low, ci_high=row.ci_high, n=row.n, unit=row.unit,
                           ci_kind="paired-t", confidence=row.confidence)
        for other in row.printed_elsewhere:
            theirs = printed_row(other.source, mean=other.mean, ci_low=other.ci_low, ci_high=other.ci_high, n=None,
                                 unit=other.unit, ci_kind="paired-t", confidence=row.confidence)
            res = same_statistic(mine, theirs)
            merge(out, res.ok, [f"printed elsewhere ({other.source}):"] + [f"  {x}" for x in res.lines], res.tests)
    return out


def _recheck_tests(study: str, row: ReportedRow, plan: Plan | None,
                   holm_exact: dict[str, tuple[float, float]] | None) -> CheckedRow:
    """The row's printed tests (:func:`recheck_row`)."""
    out = CheckedRow(study=study, row=row.id, label=row.label, source=row.source, n=row.n,
                     printed=row.printed, test=row.test, status="not checkable", explanation=row.explanation)
    tests = row.printed_tests()
    if row.noninferior is not None:
        tests["noninferior"] = "yes" if row.noninferior else "no"
    dz_ok = _recheck_dz(out, row, plan)
    if dz_ok is False:
        return out if not row.explanation else _explained(out)
    if row.ci_kind == "bootstrap" and row.mean is not None and row.ci_low is not None:
        return _recheck_bootstrap(out, row, checked=dz_ok is True)
    if row.mean is None or row.ci_low is None or row.n is None:
        if dz_ok:
            out.status = "consistent"
        else:
            out.checks.append("no interval or n printed")
        return out
    if row.ci_kind == "none":
        out.checks.append("no interval kind: the paired-t recomputation does not apply")
        return out
    n_eff = row.df + 1 if row.df is not None else row.n
    m, m_basis = _family_size(row, plan)
    margin = _margin(row, plan)
    need_margin = any(k in tests for k in ("tost_p", "tost_holm_p", "noninferiority_p", "noninferiority_holm_p", "noninferior"))
    need_family = any(k in tests for k in ("holm_p", "tost_holm_p", "noninferiority_holm_p"))
    basis = []
    if row.df is not None:
        basis.append(f"df={row.df} ({'Welch' if row.ci_kind == 'welch' else 'stated'})")
    if need_family:
        if m is None:
            out.checks.append("a Holm p without a known family size")
            return out
        basis.append(f"m={m}" + (" (inferred)" if m_basis == "inferred" else ""))
    if need_margin:
        basis.append(f"margin ±{margin:g}" if not isinstance(margin, list) else f"margin {margin}")
    out.basis = ", ".join(basis)
    holm_exact = holm_exact or {}
    if any(k in holm_exact for k in tests):
        out.basis += ", exact Holm over the printed family"
    reported = {k: v for k, v in tests.items()
                if k in ("p", "holm_p", "tost_p", "tost_holm_p", "noninferiority_p") and k not in holm_exact}
    try:
        r = from_summary(row.mean, row.ci_low, row.ci_high, n_eff, confidence=row.confidence,
                         margin=margin if need_margin else None, family_size=m if need_family else None,
                         reported=reported)
    except ValueError as e:
        out.status = "inconsistent"
        out.checks.append(f"cannot recompute: {e}")
        return out if not row.explanation else _explained(out)
    ok = True
    out.mean_matches_ci = r.mean_matches_ci
    if not r.mean_matches_ci:
        ok = False
        out.checks.append("printed mean is not the centre of any interval that rounds to the printed one")
    for c in r.checks:
        ok &= c.consistent
        _tested(out, c.name, c.reported, c.recomputed_low, c.recomputed_high, c.consistent, f"{c.name} {c.reported}: recomputed")
    holm_ranges = dict(holm_exact)
    if "noninferiority_holm_p" in tests and "noninferiority_holm_p" not in holm_ranges:
        holm_ranges["noninferiority_holm_p"] = (r.noninferiority_p_low, min(1.0, m * r.noninferiority_p_high))
    for key, (lo, hi) in holm_ranges.items():
        if key not in tests:
            continue
        p_lo, p_hi, text = parse_p(tests[key])
        good = p_lo <= hi * (1 + 1e-9) and lo * (1 - 1e-9) <= p_hi
        ok &= good
        _tested(out, key, text, lo, hi, good, f"{key} {text}: recomputed" + (" (exact Holm)" if key in holm_exact else ""))
    if "noninferior" in tests:
        alpha = 0.05  # one-sided, the lower bound of the 90% interval above -margin (paper C.1)
        good = r.noninferiority_p_low < alpha if row.noninferior else r.noninferiority_p_high >= alpha
        ok &= good
        _tested(out, "noninferior", tests["noninferior"], r.noninferiority_p_low, r.noninferiority_p_high, good,
                f"non-inferior={tests['noninferior']}: NI p in")
    if not tests and not dz_ok:
        out.status = "no test" if ok else "inconsistent"
        if ok:
            out.checks.append(f"no printed test; paired-t p would be {_fmt(r.p)}")
    else:
        out.status = "consistent" if ok else "inconsistent"
    if out.status == "inconsistent" and row.explanation:
        return _explained(out)
    return out


def _recheck_dz(out: CheckedRow, row: ReportedRow, plan: Plan | None) -> bool | None:
    """The row's printed paired-t p-values recomputed from its d_z and n (:func:`p_from_dz`); a TOST
    p at the row's margin. None when the row prints none; False (status set) on a mismatch."""
    tests = row.dz_tests()
    if not tests:
        return None
    ok = True
    for key, printed in tests.items():
        kind = DZ_TEST_KEYS[key]
        margin = _margin(row, plan) if kind == "tost" else None
        if isinstance(margin, list):
            out.status = "inconsistent"
            out.checks.append(f"{key}: a TOST p from d_z needs a symmetric margin, got {margin}")
            return False
        try:
            r = p_from_dz(row.d_z, row.n, printed, test=kind, mean=row.mean, margin=margin)
        except ValueError as e:
            out.status = "inconsistent"
            out.checks.append(f"{key}: cannot recompute: {e}")
            return False
        ok &= r.consistent
        how = f"TOST ±{margin:g}" if kind == "tost" else kind
        _tested(out, key, r.reported, r.p_low, r.p_high, r.consistent,
                f"{key} {r.reported}: paired t from d_z={row.d_z}, n={row.n} ({how}), recomputed")
    if not ok:
        out.status = "inconsistent"
        return False
    return True


def _recheck_bootstrap(out: CheckedRow, row: ReportedRow, checked: bool = False) -> CheckedRow:
    """A percentile-bootstrap row (:func:`prereg_kit.stats.bootstrap_from_summary`): the estimate
    inside its interval, and with n and a printed d_z the interval's width against the SD they fix.
    ``consistent`` when the width was checked (or ``checked``: its paired-t p-values were
    recomputed from d_z), ``no test`` when only the containment could be."""
    try:
        b = bootstrap_from_summary(row.mean, row.ci_low, row.ci_high, row.n, row.d_z, row.confidence)
    except ValueError as e:
        out.status = "inconsistent"
        out.checks.append(f"cannot recompute: {e}")
        return out if not row.explanation else _explained(out)
    out.basis = "percentile bootstrap" + (f", n={row.n}, d_z={row.d_z}" if b.width_consistent is not None else "")
    out.mean_matches_ci = b.contains_mean
    out.checks.append("estimate inside its interval" if b.contains_mean else "printed estimate outside its interval MISMATCH")
    if b.width_consistent is not None:
        _tested(out, "bootstrap_width", f"{row.ci_low}, {row.ci_high}", b.expected_low, b.expected_high, b.width_consistent,
                f"width {_fmt(b.width_low)}–{_fmt(b.width_high)} vs a bootstrap of n={row.n} with SD "
                f"{_fmt(b.sd_low)}–{_fmt(b.sd_high)} (from d_z):")
    else:
        out.checks.append("no n or d_z printed: the width is not checked")
    ok, checked = b.consistent, checked or b.width_consistent is not None
    if row.per_seed:
        try:
            r = bootstrap_from_values(row.per_seed, row.mean, row.ci_low, row.ci_high, row.confidence)
        except ValueError as e:
            out.status = "inconsistent"
            out.checks.append(f"cannot recompute: {e}")
            return out if not row.explanation else _explained(out)
        ok &= r.consistent and (row.n is None or row.n == r.n)
        checked = True
        how = "all resamples" if r.exhaustive else "200,000 resamples"
        if not r.mean_ok:
            out.checks.append(f"mean {row.mean} is not the mean of the per-seed values MISMATCH")
        _tested(out, "bootstrap_low", row.ci_low, *r.low_range, r.low_ok,
                f"interval recomputed from the {r.n} per-seed values ({how}): low {row.ci_low} in")
        _tested(out, "bootstrap_high", row.ci_high, *r.high_range, r.high_ok, f"high {row.ci_high} in")
        if row.n is not None and row.n != r.n:
            out.checks.append(f"n = {row.n} but {r.n} per-seed values MISMATCH")
    if not ok:
        out.status = "inconsistent"
        return out if not row.explanation else _explained(out)
    out.status = "consistent" if checked else "no test"
    return out


def _tested(out: CheckedRow, name: str, printed: str, lo: float, hi: float, good: bool, label: str) -> None:
    """One printed test rechecked: its line (``label [lo, hi]``) and its record for ``recheck --json``."""
    out.checks.append(f"{label} [{_fmt(lo)}, {_fmt(hi)}]" + ("" if good else " MISMATCH"))
    out.tests.append({"test": name, "printed": printed, "recomputed": [lo, hi], "match": bool(good)})


def _explained(out: CheckedRow) -> CheckedRow:
    out.status = "explained"
    return out


def _ratio(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    if a[0] < 0 or b[0] <= 0:
        raise ValueError("a ratio of printed values needs a non-negative numerator and a positive denominator")
    return a[0] / b[1], a[1] / b[0]


def _difference(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    return a[0] - b[1], a[1] - b[0]


# the value each rule recomputes from its operands' rounding intervals (interval arithmetic)
_RECOMPUTE = {"ratio": _ratio, "difference": _difference, "rounds_to": lambda a: a, "within": lambda a: a}
_SYMBOL = {"ratio": "/", "difference": "−", "less": "<", "greater": ">"}


def check_endpoint(check: EndpointCheck) -> tuple[bool, tuple[float, float], str]:
    """One re-analysis of a printed endpoint: (consistent, recomputed interval, line).

    Every printed number stands for the interval of values that round to it
    (:func:`printed_interval`), so a check is consistent when some values inside those intervals
    satisfy it: the recomputed interval (``of[0] / of[1]``, ``scale · (of[0] − of[1])`` or ``of[0]``)
    meets the ``printed`` result's interval, or the stated ordering ``of[0] < of[1]`` (``less``) /
    ``of[0] > of[1]`` (``greater``) holds for some such values.
    """
    ops = [printed_interval(x) for x in check.of]
    shown = f" {_SYMBOL.get(check.rule, '')} ".join(check.of) if len(check.of) == 2 else check.of[0]
    scale = f"{check.scale:g}·" if check.scale != 1 else ""
    if scale or len(check.of) == 2:
        shown = f"({shown})"
    if check.rule in ("less", "greater"):
        (a_lo, a_hi), (b_lo, b_hi) = ops
        good = a_lo < b_hi if check.rule == "less" else a_hi > b_lo
        rng = (a_lo - b_hi, a_hi - b_lo)
        return good, rng, f"{check.rule}: {shown}" + ("" if good else " MISMATCH")
    lo, hi = _RECOMPUTE[check.rule](*ops)
    lo, hi = lo * check.scale, hi * check.scale
    p_lo, p_hi = printed_interval(check.printed)
    good = lo <= p_hi * (1 + 1e-12) and p_lo * (1 - 1e-12) <= hi
    line = (f"{check.rule}: {scale}{shown} in [{_fmt_signed(lo)}, {_fmt_signed(hi)}] vs printed {check.printed} "
            f"[{_fmt_signed(p_lo)}, {_fmt_signed(p_hi)}]" + ("" if good else " MISMATCH"))
    return good, (lo, hi), line


def _fmt_signed(x: float) -> str:
    return ("-" + _fmt(-x)) if x < 0 else _fmt(x)


def recheck_endpoint(study: str, ep: Endpoint) -> CheckedRow:
    """Recheck one printed endpoint (no interval, no test) by its ``checks``: consistent when every
    check holds within the printed rounding; ``not checkable`` when the paper prints nothing that
    recomputes it (a qualitative statement, a range no other number bounds)."""
    out = CheckedRow(study=study, row=ep.id, label=ep.label, source=ep.source, n=None, printed=ep.value,
                     test="endpoint: " + ", ".join(dict.fromkeys(c.rule for c in ep.checks)) if ep.checks else "endpoint",
                     status="not checkable", explanation=ep.explanation)
    if not ep.checks:
        out.checks.append("no other printed number recomputes this endpoint")
        return out
    ok = True
    for c in ep.checks:
        try:
            good, (lo, hi), line = check_endpoint(c)
        except ValueError as e:
            good, (lo, hi), line = False, (float("nan"), float("nan")), f"{c.rule}: cannot recompute: {e}"
        ok &= good
        out.checks.append(line + (f" ({c.note})" if c.note else ""))
        out.tests.append({"test": c.rule, "printed": c.printed or _SYMBOL[c.rule], "recomputed": [lo, hi], "match": bool(good)})
    out.status = "consistent" if ok else ("explained" if ep.explanation else "inconsistent")
    return out


@dataclass
class RecheckResult:
    rows: list[CheckedRow]
    skipped: list[str]  # study folders without a reported record

    def counts(self) -> dict[str, int]:
        return {s: sum(r.status == s for r in self.rows) for s in STATUSES}

    @property
    def unexplained(self) -> list[CheckedRow]:
        return [r for r in self.rows if r.status == "inconsistent"]

    @property
    def exit_code(self) -> int:
        return 1 if self.unexplained else 0


def _raw_range(row: ReportedRow, kind: str, plan: Plan) -> tuple[float, float] | None:
    """The range of a row's raw p for its contrast's kind (p, TOST p or non-inferiority p)."""
    from ..stats import from_summary

    if row.mean is None or row.ci_low is None or row.n is None or row.ci_kind != "paired-t" or row.unit != "fraction":
        return None
    n_eff = row.df + 1 if row.df is not None else row.n
    try:
        r = from_summary(row.mean, row.ci_low, row.ci_high, n_eff, confidence=row.confidence,
                         margin=_margin(row, plan) if kind != "superiority" else None)
    except ValueError:
        return None
    if kind == "superiority":
        return r.p_low, r.p_high
    if kind == "equivalence":
        return r.tost_p_low, r.tost_p_high
    return r.noninferiority_p_low, r.noninferiority_p_high


def family_holm_ranges(rows: list[ReportedRow], plan: Plan) -> dict[str, tuple[float, float]]:
    """Exact Holm ranges per contrast, for families whose every member has a printed interval.

    Holm-adjusted values are non-decreasing in each raw p, so over the box of raw p ranges the
    adjusted value of each member runs from Holm(lower ends) to Holm(upper ends). Each member's
    raw p range comes from its narrowest printed row at the plan's margin (text rows usually have
    more decimals than figure rows).
    """
    from ..stats import holm

    out: dict[str, tuple[float, float]] = {}
    for fam in plan.families:
        ranges = []
        for cid in fam.members:
            kind = plan.contrast(cid).kind
            cands = [_raw_range(r, kind, plan) for r in rows if r.contrast == cid and r.margin is None]
            cands = [c for c in cands if c is not None]
            if not cands:
                break
            ranges.append(min(cands, key=lambda c: (c[1] - c[0]) / max(c[1], 1e-300)))
        else:
            if len(fam.members) < 2:
                continue
            lows = holm([a for a, _ in ranges])
            highs = holm([b for _, b in ranges])
            for cid, lo, hi in zip(fam.members, lows, highs):
                out[cid] = (float(lo), float(hi))
    return out


def recheck_study(d: Path) -> list[CheckedRow]:
    """Recheck every row of one study folder's ``reported.toml`` against its plan, then its endpoints."""
    rep = load_reported(d)
    # a study without a plan is rechecked from its rows alone; a plan that does not load is an
    # error, never a silent fallback to default margins
    plan = load_plan(d / PLAN_FILE).plan if (d / PLAN_FILE).exists() else None
    if plan is not None:
        ids = {c.id for c in plan.contrasts}
        bad = [r.id for r in rep.rows if r.contrast and r.contrast not in ids]
        if bad:
            raise PreregError(f"{d / REPORTED_FILE}: rows name contrasts that the plan lacks: {', '.join(bad)}")
    exact = family_holm_ranges(rep.rows, plan) if plan is not None else {}
    out = []
    for row in rep.rows:
        he = {}
        if plan is not None and row.contrast in exact and row.family_size is None:
            key = _KIND_KEY[plan.contrast(row.contrast).kind][1]
            he = {key: exact[row.contrast]}
        out.append(recheck_row(rep.study, row, plan, he))
    out.extend(recheck_endpoint(rep.study, ep) for ep in rep.endpoints)
    apply_relations(d, out, load_reported, REPORTED_FILE)
    return out


def recheck(root: str | Path, studies: list[str] | None = None) -> RecheckResult:
    """Recheck the named studies (folder names or plan ids), or every study with a record."""
    dirs = [find_study(root, s) for s in studies] if studies else study_dirs(root)
    rows: list[CheckedRow] = []
    skipped = []
    for d in dirs:
        if not (d / REPORTED_FILE).exists():
            if studies:
                raise PreregError(f"{d}: no {REPORTED_FILE} (nothing reported to recheck)")
            skipped.append(d.name)
            continue
        rows.extend(recheck_study(d))
    return RecheckResult(rows, skipped)
