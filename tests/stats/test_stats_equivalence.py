"""tost_paired and noninferiority_paired against statsmodels, pingouin, R's equivalence and TOSTER."""

import math

import numpy as np
import pingouin as pg
import pytest
from scipy import stats as sps
from statsmodels.stats.tests.test_tost import clinic, tost_clinic_1_paired, tost_clinic_paired, tost_clinic_paired_1
from statsmodels.stats.weightstats import ttost_paired

from prereg_kit.stats import noninferiority_paired, tost_paired
from prereg_kit.stats.equivalence import tost_from_stats


def test_matches_statsmodels_ttost_paired_random():
    rng = np.random.default_rng(5)
    for n in (3, 9, 24):
        for _ in range(10):
            x = rng.normal(0.5, 0.05, n)
            y = x - rng.normal(rng.uniform(-0.02, 0.02), 0.015, n)
            low, high = -0.02, rng.uniform(0.005, 0.03)
            r = tost_paired(x, y, margin=(low, high))
            p, lower, upper = ttost_paired(x, y, low, high)
            assert r.p == pytest.approx(p, rel=1e-9)
            assert r.t_lower == pytest.approx(lower[0], rel=1e-9)
            assert r.p_lower == pytest.approx(lower[1], rel=1e-9)
            assert r.t_upper == pytest.approx(upper[0], rel=1e-9)
            assert r.p_upper == pytest.approx(upper[1], rel=1e-9)


def test_matches_pingouin_tost():
    rng = np.random.default_rng(8)
    for _ in range(10):
        x, y = rng.normal(0, 1, 15), rng.normal(0.1, 1, 15)
        ref = pg.tost(x, y, bound=0.5, paired=True)
        assert tost_paired(x, y, margin=0.5).p == pytest.approx(ref["pval"].iloc[0], rel=1e-9)


@pytest.mark.parametrize("ref, col, eps, log", [
    (tost_clinic_paired, 3, 0.6, False),    # R equivalence::tost(-var2[16:30] + var2[1:15], eps=0.6)
    (tost_clinic_paired_1, 2, 0.6, False),  # ... var1
    (tost_clinic_1_paired, 2, math.log(1.25), True),
])
def test_r_equivalence_package_reference(ref, col, eps, log):
    # Reference outputs of R's equivalence::tost as stored in statsmodels' test suite.
    x, y = clinic[:15, col], clinic[15:, col]
    if log:
        x, y = np.log(x), np.log(y)
    r = tost_paired(x, y, margin=eps)
    assert r.mean == pytest.approx(ref.mean_diff, rel=1e-10)
    assert r.se == pytest.approx(ref.se_diff, rel=1e-10)
    assert r.df == ref.df
    assert (r.ci_low, r.ci_high) == pytest.approx(ref.ci_diff, rel=1e-10)
    assert r.p == pytest.approx(ref.p_value, rel=1e-10)
    assert r.equivalent == (ref.result == "rejected")


def test_toster_tostpaired_raw_known_result():
    # TOSTER TOSTpaired.raw(n=65, m1=5.83, m2=5.75, sd1=1.17, sd2=1.30, r12=0.745, ±0.34) (test-known_results.R).
    sd = math.sqrt(1.17**2 + 1.30**2 - 2 * 0.745 * 1.17 * 1.30)
    r = tost_from_stats(65, 5.83 - 5.75, sd, margin=0.34)
    assert r.t_lower == pytest.approx(3.803437, rel=1e-5)
    assert r.p_lower == pytest.approx(0.0001606103, rel=1e-4)
    assert r.t_upper == pytest.approx(-2.354508, rel=1e-5)
    assert r.p_upper == pytest.approx(0.01081349, rel=1e-4)
    assert (r.ci_low, r.ci_high) == pytest.approx((-0.1043032, 0.2643032), rel=1e-5)


def test_interval_and_decision_agree():
    rng = np.random.default_rng(1)
    for _ in range(200):
        d = rng.normal(rng.uniform(-0.03, 0.03), 0.02, 10)
        r = tost_paired(d, margin=0.02)
        assert r.equivalent == (r.ci_low > -0.02 and r.ci_high < 0.02)
        ci = sps.ttest_1samp(d, 0).confidence_interval(0.90)
        assert (r.ci_low, r.ci_high) == pytest.approx((ci.low, ci.high), rel=1e-10)


def test_asymmetric_bounds_and_margin_errors():
    d = [0.001, 0.004, -0.002, 0.003, 0.0]
    r = tost_paired(d, margin=(-0.01, 0.02))
    assert (r.low, r.high) == (-0.01, 0.02)
    for bad in (0, -0.02, (0.02, -0.02), (0.01, 0.01), "x", (1, 2, 3)):
        with pytest.raises(ValueError):
            tost_paired(d, margin=bad)
    with pytest.raises(ValueError, match="alpha"):
        tost_paired(d, margin=0.02, alpha=0.5)


def test_zero_sd_defined():
    r = tost_paired([0.01] * 5, [0.0] * 5, margin=0.02)
    assert r.zero_sd and r.p == 0.0 and r.equivalent and r.ci_low == r.ci_high
    r = tost_paired([0.03] * 5, margin=0.02)
    assert r.p == 1.0 and not r.equivalent


def test_tost_size_at_the_margin():
    # True difference exactly at the margin: rejection rate ≤ 5% (+ Monte-Carlo error), 4,000 studies.
    rng = np.random.default_rng(99)
    for n, true in ((6, 0.02), (24, -0.02)):
        data = rng.normal(true, 0.015, size=(4000, n))
        rate = np.mean([tost_paired(row, margin=0.02).equivalent for row in data])
        assert rate <= 0.05 + 2.5 * math.sqrt(0.05 * 0.95 / 4000)


def test_noninferiority_matches_shifted_one_sided_ttest():
    rng = np.random.default_rng(4)
    for _ in range(20):
        x = rng.normal(0.5, 0.05, 12)
        y = x - rng.normal(-0.01, 0.02, 12)
        r = noninferiority_paired(x, y, margin=0.02)
        ref = sps.ttest_rel(x + 0.02, y, alternative="greater")
        assert r.p == pytest.approx(ref.pvalue, rel=1e-9)
        assert r.holds == (r.lower > -0.02) == (r.p < 0.05)
        ci = sps.ttest_rel(x, y).confidence_interval(0.90)
        assert r.lower == pytest.approx(ci.low, rel=1e-10)


def test_noninferiority_statsmodels_one_sided():
    from statsmodels.stats.weightstats import DescrStatsW
    d = np.array([0.012, -0.004, 0.020, 0.003, -0.010, 0.008, 0.001])
    r = noninferiority_paired(d, margin=0.02)
    t, p, _ = DescrStatsW(d).ttest_mean(-0.02, alternative="larger")
    assert r.t == pytest.approx(t) and r.p == pytest.approx(p)


def test_noninferiority_errors_and_zero_sd():
    with pytest.raises(ValueError, match="positive"):
        noninferiority_paired([0.1, 0.2], margin=(-0.02, 0.02))
    with pytest.raises(ValueError, match="positive"):
        noninferiority_paired([0.1, 0.2], margin=0)
    r = noninferiority_paired([-0.01] * 3, margin=0.02)
    assert r.zero_sd and r.holds and r.p == 0.0
