"""The t and normal functions of the hot paths (``prereg_kit.stats.tdist``) equal ``scipy.stats``'
frozen distributions to 1e-12, and paired t / TOST / Welch built on them still match scipy and
statsmodels."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from prereg_kit.stats import paired_t, tost_paired
from prereg_kit.stats.tdist import norm_cdf, norm_ppf, t_cdf, t_ppf, t_sf

DFS = [0.5, 1, 1.5, 2, 2.7, 3, 5, 7.25, 11, 23, 23.5, 100, 1e4, 1e8, math.inf]
XS = [-1e6, -300, -40, -8.5, -3, -1.96, -0.5, -1e-9, 0.0, 1e-9, 0.25, 1, 2.0639, 6, 37.5, 1e3, 1e8,
      math.inf, -math.inf]
QS = [0.0, 1e-300, 1e-100, 1e-12, 1e-6, 0.001, 0.025, 0.05, 0.1, 0.5, 0.8, 0.9, 0.95, 0.975, 0.999,
      1 - 1e-9, 1 - 1e-15, 1.0]


def _same(ours: float, ref: float) -> None:
    if math.isnan(ref):
        assert math.isnan(ours)
    elif math.isinf(ref):
        assert ours == ref
    else:
        assert ours == pytest.approx(ref, rel=1e-12, abs=1e-300)


@pytest.mark.parametrize("df", DFS)
def test_t_cdf_sf_equal_scipy_stats_on_a_grid_with_extreme_tails(df):
    for x in XS:
        _same(t_cdf(x, df), float(sps.t.cdf(x, df)))
        _same(t_sf(x, df), float(sps.t.sf(x, df)))


@pytest.mark.parametrize("df", DFS)
def test_t_ppf_equals_scipy_stats_including_both_ends(df):
    for q in QS:
        _same(t_ppf(q, df), float(sps.t.ppf(q, df)))
    for q in (-0.1, 1.1, math.nan):
        assert math.isnan(t_ppf(q, df)) and math.isnan(float(sps.t.ppf(q, df)))


def test_the_comparison_can_fail():
    """A quantile off by one part in 1e10 (or a normal quantile for a t one) is caught."""
    with pytest.raises(AssertionError):
        _same(t_ppf(0.975, 23) * (1 + 1e-10), float(sps.t.ppf(0.975, 23)))
    with pytest.raises(AssertionError):
        _same(norm_ppf(0.975), float(sps.t.ppf(0.975, 23)))
    with pytest.raises(AssertionError):
        _same(t_ppf(0.0, 5), float(sps.t.ppf(1.0, 5)))


def test_normal_functions_equal_scipy_stats():
    for x in XS:
        _same(norm_cdf(x), float(sps.norm.cdf(x)))
    for q in QS:
        _same(norm_ppf(q), float(sps.norm.ppf(q)))


def _samples(seed: int, n: int = 24):
    rng = np.random.default_rng(seed)
    a = rng.normal(0.55, 0.04, n)
    return a, a - rng.normal(0.01 * (seed % 3), 0.03, n)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_paired_t_matches_scipy_ttest_rel(seed, alternative):
    a, b = _samples(seed)
    ours = paired_t(a, b, alternative=alternative)
    ref = sps.ttest_rel(a, b, alternative=alternative)
    ci = ref.confidence_interval(0.95)
    assert ours.t == pytest.approx(float(ref.statistic), rel=1e-12)
    assert ours.p == pytest.approx(float(ref.pvalue), rel=1e-12)
    assert ours.ci_low == pytest.approx(float(ci.low), rel=1e-12)
    assert ours.ci_high == pytest.approx(float(ci.high), rel=1e-12)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("margin", [0.005, 0.02])
def test_tost_paired_matches_statsmodels_ttost_paired(seed, margin):
    from statsmodels.stats.weightstats import ttost_paired

    a, b = _samples(seed)
    ours = tost_paired(a, b, margin=margin)
    p, lower, upper = ttost_paired(a, b, -margin, margin)
    assert ours.p == pytest.approx(float(p), rel=1e-12)
    assert ours.p_lower == pytest.approx(float(lower[1]), rel=1e-12)
    assert ours.p_upper == pytest.approx(float(upper[1]), rel=1e-12)
    # the 1−2α interval, as scipy's frozen t computes it
    d = a - b
    se = d.std(ddof=1) / math.sqrt(d.size)
    half = float(sps.t.ppf(0.95, d.size - 1)) * se
    assert ours.ci_low == pytest.approx(d.mean() - half, rel=1e-12)
    assert ours.ci_high == pytest.approx(d.mean() + half, rel=1e-12)


def test_zero_spread_limits_are_kept():
    """All-equal differences: t = ±inf, and the p-values take their limits as before."""
    a = np.full(5, 0.6)
    r = paired_t(a, a - 0.01)
    assert r.zero_sd and r.t == math.inf and r.p == 0.0 and r.ci_low == r.ci_high == pytest.approx(0.01)
    assert paired_t(a, a - 0.01, alternative="less").p == 1.0
