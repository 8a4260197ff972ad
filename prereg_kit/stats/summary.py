"""Recompute tests from a printed row (mean, paired-t CI, n) and check reported p-values.

This is how a reader checks a paper's tables (paper Table 3: n, mean, 95% CI, Holm p, TOST p),
in the manner of statcheck: recompute the test from the printed numbers, let every printed number
vary over its rounding interval, and call a reported p consistent when its own rounding interval
meets the recomputed range.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Mapping

import numpy as np

from ._checks import Result, check_confidence, equivalence_bounds, positive_int
from .tdist import t_cdf_array, t_ppf, t_sf_array

REPORTED_KEYS = ("p", "holm_p", "tost_p", "tost_holm_p", "noninferiority_p")


@dataclass(slots=True, frozen=True)
class ReportedCheck(Result):
    """One reported p-value against the range recomputed over the rounding of the printed row."""

    name: str
    reported: str
    reported_low: float
    reported_high: float
    recomputed_low: float
    recomputed_high: float
    consistent: bool


@dataclass(slots=True, frozen=True)
class SummaryCheck(Result):
    """Result of :func:`from_summary`.

    Point values use the printed numbers as exact; each ``*_low``/``*_high`` pair is the range
    over all true values that round to the printed ones (with the true mean at the centre of the
    true interval, as a paired-t interval is symmetric). ``holm_p`` is ``min(1, m·p)``, the Holm
    value when this contrast has the smallest p of its family of m; without the other p-values of
    the family the Holm value can lie anywhere in ``[p, min(1, m·p)]``, which is the checked range.
    ``mean_matches_ci`` is False when no true interval rounding to the printed one is centred on
    a value rounding to the printed mean (a transcription or rounding slip).
    """

    n: int
    df: int
    confidence: float
    mean: float
    ci_low: float
    ci_high: float
    se: float
    sd: float
    dz: float
    t: float
    p: float
    t_low: float
    t_high: float
    p_low: float
    p_high: float
    mean_matches_ci: bool
    family_size: int | None
    holm_p: float | None
    holm_p_low: float | None
    holm_p_high: float | None
    low: float | None
    high: float | None
    tost_p: float | None
    tost_p_low: float | None
    tost_p_high: float | None
    tost_holm_p_low: float | None
    tost_holm_p_high: float | None
    noninferiority_p: float | None
    noninferiority_p_low: float | None
    noninferiority_p_high: float | None
    checks: tuple[ReportedCheck, ...]
    consistent: bool | None


# --------------------------------------------------------------------------- parsing printed numbers

_MINUS = str.maketrans({"\u2212": "-", "\u2013": "-", "\u00d7": "x", "\u22c5": "x", "\u00b7": "x"})


def _clean(text: str) -> str:
    return text.translate(_MINUS).replace(" ", "").replace("*", "x").lstrip("+")


def _decimals_of(text: str) -> int:
    t = _clean(text).lower()
    if "e" in t:
        mant, exp = t.split("e")
        return _decimals_of(mant) - int(exp)
    return len(t.split(".")[1]) if "." in t else 0


def parse_number(value: Any, decimals: int | None = None) -> tuple[float, float]:
    """A printed number as ``(value, half_unit)``: ``"+0.007"`` → ``(0.007, 0.0005)``.

    Strings keep trailing zeros (``"0.010"`` has three decimals); floats are read from their
    shortest repr, which drops them (0.010 → two decimals, a wider, more lenient interval).
    """
    if isinstance(value, str):
        text = _clean(value)
    else:
        v = float(value)
        if not math.isfinite(v):
            raise ValueError(f"printed numbers must be finite, got {value!r}")
        text = repr(v)
    try:
        x = float(text)
    except ValueError:
        raise ValueError(f"cannot read a number from {value!r}") from None
    d = _decimals_of(text) if decimals is None else int(decimals)
    return x, 0.5 * 10.0 ** (-d)


_P_SCI = re.compile(r"^(?P<m>\d*\.?\d*)?x?10\^\{?(?P<e>-?\d+)\}?$")


def parse_p(value: Any) -> tuple[float, float, str]:
    """A printed p-value as the interval of true values it stands for, and its text.

    ``.016`` → [0.0155, 0.0165]; ``5×10^-5`` or ``5e-5`` → [4.5e-5, 5.5e-5]; ``<10^-8`` →
    [0, 1e-8]; ``>.99`` → [0.99, 1]; ``1.00`` → [0.995, 1]. A leading ``p=`` is ignored.
    """
    raw = value if isinstance(value, str) else repr(float(value))
    t = _clean(raw).lower()
    t = re.sub(r"^p", "", t).lstrip("=")
    rel = ""
    for op in ("<=", ">=", "≤", "≥", "<", ">"):
        if t.startswith(op):
            rel, t = op, t[len(op):]
            break
    m = _P_SCI.match(t)
    if m:  # mantissa × 10^exponent
        mant_text = m.group("m") or "1"
        exp = int(m.group("e"))
        mant = float(mant_text)
        x = mant * 10.0**exp
        half = 0.5 * 10.0 ** (exp - _decimals_of(mant_text))
    else:
        try:
            x = float(t)
        except ValueError:
            raise ValueError(f"cannot read a p-value from {value!r}") from None
        half = 0.5 * 10.0 ** (-_decimals_of(t))
    if not 0 <= x <= 1:
        raise ValueError(f"a p-value must lie in [0, 1], got {value!r}")
    if rel in ("<", "<=", "≤"):
        return 0.0, x, raw
    if rel in (">", ">=", "≥"):
        return x, 1.0, raw
    return max(0.0, x - half), min(1.0, x + half), raw


# --------------------------------------------------------------------------- recomputation


def _candidates(lo: float, h_lo: float, hi: float, h_hi: float, c: float, h_c: float,
                grid: int = 121) -> tuple[np.ndarray, np.ndarray, bool]:
    """True (ci_low, ci_high) pairs consistent with the printed values: polygon vertices + grid."""
    lo_edges = (lo - h_lo, lo + h_lo)
    hi_edges = (hi - h_hi, hi + h_hi)
    sums = (2 * (c - h_c), 2 * (c + h_c))
    pts = [(a, b) for a in lo_edges for b in hi_edges]
    for s in sums:  # where the lines lo + hi = 2c meet the box edges
        pts += [(a, s - a) for a in lo_edges] + [(s - b, b) for b in hi_edges]
    g_lo, g_hi = np.meshgrid(np.linspace(*lo_edges, grid), np.linspace(*hi_edges, grid))
    a = np.concatenate([np.array([p[0] for p in pts]), g_lo.ravel()])
    b = np.concatenate([np.array([p[1] for p in pts]), g_hi.ravel()])
    tol = 1e-12 * max(1.0, abs(lo), abs(hi))
    in_box = (a >= lo_edges[0] - tol) & (a <= lo_edges[1] + tol) & (b >= hi_edges[0] - tol) & (b <= hi_edges[1] + tol)
    in_slab = ((a + b) >= sums[0] - tol) & ((a + b) <= sums[1] + tol)
    ok = in_box & in_slab & (b > a)
    if ok.any():
        return a[ok], b[ok], True
    ok = in_box & (b > a)  # printed mean off the interval's centre: drop that constraint
    return a[ok], b[ok], False


def _holm_range(p_low: float, p_high: float, m: int) -> tuple[float, float]:
    return p_low, min(1.0, m * p_high)


def from_summary(
    mean: Any,
    ci_low: Any,
    ci_high: Any,
    n: int,
    *,
    confidence: float = 0.95,
    margin: Any = None,
    family_size: int | None = None,
    reported: Mapping[str, Any] | None = None,
    decimals: int | None = None,
) -> SummaryCheck:
    """Recompute paired-t, Holm, TOST and non-inferiority p from a printed mean, CI and n.

    The paper prints each contrast as mean [95% paired-t CI] over n seeds (§2.3). The interval
    gives ``se = (ci_high − ci_low) / (2·t_{(1+confidence)/2, n−1})`` and ``sd = se·√n``; then
    ``t = mean/se`` (two-sided p on n−1 df), the TOST p within ``margin`` (±m or ``(low, high)``)
    and the non-inferiority p at ``−m`` (or at ``low`` for a pair with ``low < 0``), as in
    :func:`tost_paired` and :func:`noninferiority`. With ``family_size`` m, the Holm value.

    ``reported`` maps any of ``p``, ``holm_p``, ``tost_p``, ``tost_holm_p``, ``noninferiority_p``
    to the printed value (``".016"``, ``"<10^-8"``, ``"5×10^-5"``, or a float); each is checked
    against the range recomputed over the rounding of the printed mean and bounds (pass strings to
    keep trailing zeros, or ``decimals`` for all three numbers).
    """
    confidence = check_confidence(confidence)
    n = positive_int(n, "n", 2)
    m_val, h_m = parse_number(mean, decimals)
    lo_val, h_lo = parse_number(ci_low, decimals)
    hi_val, h_hi = parse_number(ci_high, decimals)
    if not lo_val < hi_val:
        raise ValueError(f"ci_low must be below ci_high, got [{lo_val}, {hi_val}]")
    if family_size is not None:
        family_size = positive_int(family_size, "family_size")
    bounds = equivalence_bounds(margin) if margin is not None else None
    reported = dict(reported or {})
    unknown = set(reported) - set(REPORTED_KEYS)
    if unknown:
        raise ValueError(f"unknown reported key(s) {sorted(unknown)}; use {', '.join(REPORTED_KEYS)}")
    if any(k in reported for k in ("tost_p", "tost_holm_p")) and bounds is None:
        raise ValueError("a reported TOST p needs margin")
    if any(k in reported for k in ("holm_p", "tost_holm_p")) and family_size is None:
        raise ValueError("a reported Holm p needs family_size")

    df = n - 1
    crit = t_ppf(0.5 + confidence / 2, df)
    root_n = math.sqrt(n)

    def statistics_at(center: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> dict[str, np.ndarray]:
        se = (hi - lo) / (2 * crit)
        t = center / se
        out = {"t": t, "p": np.minimum(1.0, 2 * t_sf_array(np.abs(t), df))}
        if bounds is not None:
            low, high = bounds
            out["tost_p"] = np.maximum(t_sf_array((center - low) / se, df), t_cdf_array((center - high) / se, df))
            if low < 0:
                out["noninferiority_p"] = t_sf_array((center - low) / se, df)
        return out

    point = {k: float(v[0]) for k, v in
             statistics_at(np.array([m_val]), np.array([lo_val]), np.array([hi_val])).items()}
    a, b, matches = _candidates(lo_val, h_lo, hi_val, h_hi, m_val, h_m)
    # Each true interval is centred on the true mean; without a match fall back on the printed mean.
    centers = (a + b) / 2 if matches else np.clip((a + b) / 2, m_val - h_m, m_val + h_m)
    grid = statistics_at(centers, a, b)
    rng_of = {k: (float(np.min(v)), float(np.max(v))) for k, v in grid.items()}

    se = (hi_val - lo_val) / (2 * crit)
    holm_p = holm_lo = holm_hi = tost_h_lo = tost_h_hi = None
    if family_size is not None:
        holm_p = min(1.0, family_size * point["p"])
        holm_lo, holm_hi = _holm_range(*rng_of["p"], family_size)
        if bounds is not None:
            tost_h_lo, tost_h_hi = _holm_range(*rng_of["tost_p"], family_size)

    ranges = dict(rng_of)
    if holm_lo is not None:
        ranges["holm_p"] = (holm_lo, holm_hi)
    if tost_h_lo is not None:
        ranges["tost_holm_p"] = (tost_h_lo, tost_h_hi)
    checks = []
    for key in REPORTED_KEYS:
        if key not in reported:
            continue
        if key not in ranges:
            raise ValueError(f"cannot check {key}: a non-inferiority p needs a margin with a negative lower bound")
        r_lo, r_hi, text = parse_p(reported[key])
        c_lo, c_hi = ranges[key]
        slack = 1e-9 * max(c_hi, 1e-300)
        ok = r_lo <= c_hi + slack and c_lo - slack <= r_hi
        checks.append(ReportedCheck(name=key, reported=text, reported_low=r_lo, reported_high=r_hi,
                                    recomputed_low=c_lo, recomputed_high=c_hi, consistent=bool(ok)))

    def get(key: str, i: int | None = None) -> float | None:
        if i is None:
            return point.get(key)
        return rng_of[key][i] if key in rng_of else None

    return SummaryCheck(
        n=n, df=df, confidence=confidence, mean=m_val, ci_low=lo_val, ci_high=hi_val, se=se,
        sd=se * root_n, dz=m_val / (se * root_n), t=point["t"], p=point["p"],
        t_low=rng_of["t"][0], t_high=rng_of["t"][1], p_low=rng_of["p"][0], p_high=rng_of["p"][1],
        mean_matches_ci=matches, family_size=family_size, holm_p=holm_p, holm_p_low=holm_lo,
        holm_p_high=holm_hi, low=bounds[0] if bounds else None, high=bounds[1] if bounds else None,
        tost_p=get("tost_p"), tost_p_low=get("tost_p", 0), tost_p_high=get("tost_p", 1),
        tost_holm_p_low=tost_h_lo, tost_holm_p_high=tost_h_hi,
        noninferiority_p=get("noninferiority_p"), noninferiority_p_low=get("noninferiority_p", 0),
        noninferiority_p_high=get("noninferiority_p", 1),
        checks=tuple(checks), consistent=all(c.consistent for c in checks) if checks else None,
    )


# --------------------------------------------------------------------------- percentile-bootstrap rows

# Width of a 95% percentile seed-bootstrap interval of a mean over the normal plug-in width
# 2·z·s·√((n−1)/n)/√n (s: the SD with the n−1 denominator). Over 400 samples each of normal,
# exponential, t(3) and lognormal(σ = 0.75) data at n = 4, 5, 6, 8, 10, 14, 32, with 4,000
# resamples, 99% of the ratios lay in [0.87, 1.07]; the band leaves a margin on both sides.
BOOTSTRAP_WIDTH_RATIO = (0.85, 1.10)


@dataclass(slots=True, frozen=True)
class BootstrapSummaryCheck(Result):
    """Result of :func:`bootstrap_from_summary`: the checks a printed percentile-bootstrap row allows.

    ``contains_mean``: the interval holds the printed estimate (within rounding).
    ``sd_low, sd_high``: the SD of the differences over the rounding of the printed mean and d_z
    (``s = |Δ| / |d_z|``; None without a d_z). ``width_low, width_high``: the printed interval's
    width over its rounding; ``expected_low, expected_high``: the widths a percentile bootstrap of n
    values with that SD can have (``BOOTSTRAP_WIDTH_RATIO`` × the normal plug-in width; at n = 3 the
    exact range of three values with SD s, √3·s to 2·s). ``width_consistent`` is None when not checked.
    """

    n: int | None
    contains_mean: bool
    sd_low: float | None
    sd_high: float | None
    width_low: float
    width_high: float
    expected_low: float | None
    expected_high: float | None
    width_consistent: bool | None

    @property
    def consistent(self) -> bool:
        return self.contains_mean and self.width_consistent is not False


def bootstrap_from_summary(mean: Any, ci_low: Any, ci_high: Any, n: int | None = None, d_z: Any = None,
                           confidence: float = 0.95) -> BootstrapSummaryCheck:
    """Check a printed percentile-bootstrap row (estimate, interval, n, d_z) against itself.

    A 95% percentile seed-bootstrap interval of a mean (dense-rewards paper §H.2: 10⁴ resamples of
    the per-seed differences; d_z = Δ/s_Δ with the n−1 SD) is the 2.5% and 97.5% quantiles of the
    resampled means. Their spread is that of the plug-in standard error s·√((n−1)/n)/√n, so with
    the SD recovered from the printed d_z the interval's width must be about 2·z·s·√((n−1)/n)/√n:
    within ``BOOTSTRAP_WIDTH_RATIO`` of it (calibrated by simulation over normal, skewed and
    heavy-tailed data, n = 4 to 32). At n = 3 the interval is the observed minimum and maximum
    (§H.2), whose width for three values with SD s lies between √3·s and 2·s. For every n the
    width cannot exceed the largest range of n values with SD s, s·√(2(n−1)). Every printed
    number varies over its rounding. Without n or d_z only the containment of the estimate is checked.
    """
    check_confidence(confidence)
    m, hm = parse_number(mean)
    lo, hlo = parse_number(ci_low)
    hi, hhi = parse_number(ci_high)
    contains = lo - hlo <= m + hm and m - hm <= hi + hhi
    w_lo, w_hi = max(0.0, hi - lo - hlo - hhi), hi - lo + hlo + hhi
    sd_lo = sd_hi = e_lo = e_hi = None
    consistent = None
    if d_z is not None and n is not None:
        n = positive_int(n, "n")
        if n < 3:
            raise ValueError(f"a seed-bootstrap row needs n >= 3, got {n}")
        d, hd = parse_number(d_z)
        if abs(d) <= hd:
            raise ValueError(f"d_z {d_z!r} rounds to 0: the SD cannot be recovered from it")
        sd_lo = max(0.0, abs(m) - hm) / (abs(d) + hd)
        sd_hi = (abs(m) + hm) / (abs(d) - hd)
        if n == 3 and confidence >= 1 - 2 / 27:  # each all-one-seed resample has probability 1/27
            e_lo, e_hi = math.sqrt(3) * sd_lo, 2 * sd_hi
        else:
            z = NormalDist().inv_cdf(0.5 + confidence / 2)
            unit = 2 * z * math.sqrt((n - 1) / n) / math.sqrt(n)
            e_lo = BOOTSTRAP_WIDTH_RATIO[0] * unit * sd_lo
            e_hi = min(BOOTSTRAP_WIDTH_RATIO[1] * unit * sd_hi, math.sqrt(2 * (n - 1)) * sd_hi)
        consistent = w_hi >= e_lo * (1 - 1e-9) and w_lo <= e_hi * (1 + 1e-9)
    return BootstrapSummaryCheck(n=n, contains_mean=contains, sd_low=sd_lo, sd_high=sd_hi, width_low=w_lo,
                                 width_high=w_hi, expected_low=e_lo, expected_high=e_hi, width_consistent=consistent)



@dataclass(slots=True, frozen=True)
class BootstrapRecompute(Result):
    """Result of :func:`bootstrap_from_values`: the printed percentile interval against the one the
    printed per-seed values give. ``low_range`` and ``high_range`` are the ranges each bound of a
    ``resamples``-resample percentile interval takes (within 3 Monte-Carlo SEs of its quantile, and
    the values' rounding); ``consistent`` when the printed mean and both printed bounds fall in them."""

    n: int
    mean_range: tuple[float, float]
    low_range: tuple[float, float]
    high_range: tuple[float, float]
    exhaustive: bool
    mean_ok: bool
    low_ok: bool
    high_ok: bool

    @property
    def consistent(self) -> bool:
        return self.mean_ok and self.low_ok and self.high_ok


def bootstrap_from_values(values: list[Any], mean: Any, ci_low: Any, ci_high: Any, confidence: float = 0.95,
                          resamples: int = 10_000, seed: int = 0) -> BootstrapRecompute:
    """Recompute a percentile seed-bootstrap interval from the printed per-seed differences.

    The bootstrap distribution of the mean is enumerated exactly when nⁿ ≤ 46,656 (n ≤ 6), else
    approximated by 200,000 resamples drawn with ``seed``. The paper's interval came from
    ``resamples`` resamples (§H.2: 10⁴), so each printed bound is an empirical quantile at α/2 or
    1 − α/2 whose level varies by about √(q(1−q)/R): a bound is consistent when it lies between
    the exact quantiles at q ± 3 such SEs, widened by the values' rounding (a mean moves by at most
    the largest half-unit of the values).
    """
    check_confidence(confidence)
    parsed = [parse_number(v) for v in values]
    x = np.array([v for v, _ in parsed])
    h = max(u for _, u in parsed)
    n = len(x)
    if n < 2:
        raise ValueError("per-seed values: need at least 2")
    if n ** n <= 46_656:
        idx = np.stack(np.meshgrid(*[np.arange(n)] * n, indexing="ij"), -1).reshape(-1, n)
        exhaustive = True
    else:
        idx = np.random.default_rng(seed).integers(0, n, (200_000, n))
        exhaustive = False
    means = np.sort(x[idx].mean(axis=1))
    a = (1 - confidence) / 2
    mc = 3 * math.sqrt(a * (1 - a) / resamples)

    def q(level: float, method: str) -> float:
        return float(np.quantile(means, min(1.0, max(0.0, level)), method=method))

    low = (q(a - mc, "lower") - h, q(a + mc, "higher") + h)
    high = (q(1 - a - mc, "lower") - h, q(1 - a + mc, "higher") + h)
    mean_range = (float(x.mean()) - h, float(x.mean()) + h)
    m, hm = parse_number(mean)
    lo, hlo = parse_number(ci_low)
    hi, hhi = parse_number(ci_high)

    def meets(v: float, hv: float, r: tuple[float, float]) -> bool:
        return v - hv <= r[1] + 1e-12 and r[0] - 1e-12 <= v + hv

    return BootstrapRecompute(n=n, mean_range=mean_range, low_range=low, high_range=high, exhaustive=exhaustive,
                              mean_ok=meets(m, hm, mean_range), low_ok=meets(lo, hlo, low), high_ok=meets(hi, hhi, high))
