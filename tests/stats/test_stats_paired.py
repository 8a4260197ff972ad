"""paired_t against scipy and pingouin, the paper's printed example, edge cases, calibration."""

import math

import numpy as np
import pingouin as pg
import pytest
from scipy import stats as sps

from prereg_kit.stats import paired_t


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
@pytest.mark.parametrize("n", [2, 5, 24])
def test_matches_scipy_ttest_rel(n, alternative):
    rng = np.random.default_rng(n)
    for _ in range(5):
        x = rng.normal(0.4, 0.05, n)
        y = x - rng.normal(0.005, 0.012, n)
        r = paired_t(x, y, alternative=alternative)
        ref = sps.ttest_rel(x, y, alternative=alternative)
        ci = ref.confidence_interval(0.95)
        assert r.t == pytest.approx(ref.statistic, rel=1e-12)
        assert r.p == pytest.approx(ref.pvalue, rel=1e-10)
        assert r.df == n - 1
        assert r.ci_low == pytest.approx(ci.low, rel=1e-10, abs=1e-15)
        assert r.ci_high == pytest.approx(ci.high, rel=1e-10, abs=1e-15)
        d = x - y
        assert r.dz == pytest.approx(d.mean() / d.std(ddof=1), rel=1e-12)
        assert r.se == pytest.approx(sps.sem(d), rel=1e-12)


def test_matches_pingouin_ttest():
    rng = np.random.default_rng(7)
    x, y = rng.normal(0, 1, 12), rng.normal(0.3, 1, 12)
    for alt in ("two-sided", "greater", "less"):
        ref = pg.ttest(x, y, paired=True, alternative=alt)
        r = paired_t(x, y, alternative=alt)
        assert r.t == pytest.approx(ref["T"].iloc[0], rel=1e-9)
        assert r.p == pytest.approx(ref["p_val"].iloc[0], rel=1e-9)


def test_confidence_level_and_differences_only():
    rng = np.random.default_rng(3)
    d = rng.normal(0.01, 0.02, 10)
    r90 = paired_t(d, confidence=0.90)
    ci = sps.ttest_1samp(d, 0).confidence_interval(0.90)
    assert (r90.ci_low, r90.ci_high) == pytest.approx((ci.low, ci.high), rel=1e-10)
    assert paired_t(d).t == pytest.approx(paired_t(d + 1.0, np.ones(10)).t, rel=1e-9)


def test_paper_h2_printed_example():
    # Dense-rewards paper §G.5 (methods: §H.2): differences −0.035, +0.050, +0.070, +0.080, +0.115 → +0.056, d_z = 1.00, t_4 = 2.23, p = 0.089.
    r = paired_t([-0.035, 0.050, 0.070, 0.080, 0.115])
    assert round(r.mean, 3) == 0.056
    assert round(r.dz, 2) == 1.00
    assert round(r.t, 2) == 2.23 and r.df == 4
    assert round(r.p, 3) == 0.089


def test_one_sided_effect_in_other_tail():
    d = np.array([-0.02, -0.01, -0.03, -0.015, -0.025])
    r = paired_t(d, alternative="greater")
    assert r.p > 0.99  # evidence points the other way: no support for "greater"
    assert math.isinf(r.ci_high) and r.ci_low < r.mean
    r = paired_t(d, alternative="less")
    assert r.p < 0.01 and math.isinf(r.ci_low) and r.ci_high < 0


def test_nan_pairs_dropped_and_counted():
    x = np.array([0.1, 0.2, np.nan, 0.4, 0.5])
    y = np.array([0.0, 0.1, 0.2, np.nan, 0.3])
    r = paired_t(x, y)
    assert r.n == 3 and r.n_dropped == 2
    ref = sps.ttest_rel([0.1, 0.2, 0.5], [0.0, 0.1, 0.3])
    assert r.p == pytest.approx(ref.pvalue)


@pytest.mark.parametrize("args, msg", [
    (([0.1, 0.2, 0.3], [0.1, 0.2]), "different lengths"),
    (([0.1],), "at least 2"),
    (([0.1, np.nan], [0.0, 0.0]), "at least 2 complete pairs, got 1 after dropping 1"),
    (([0.1, np.inf],), "infinite"),
    (([[0.1, 0.2], [0.3, 0.4]],), "one-dimensional"),
])
def test_user_errors(args, msg):
    with pytest.raises(ValueError, match=msg):
        paired_t(*args)


def test_bad_alternative_and_confidence():
    with pytest.raises(ValueError, match="alternative"):
        paired_t([0.1, 0.2, 0.3], alternative="bigger")
    with pytest.raises(ValueError, match="confidence"):
        paired_t([0.1, 0.2, 0.3], confidence=95)


def test_zero_sd_defined_and_flagged():
    r = paired_t([0.01, 0.01, 0.01])
    assert r.zero_sd and r.sd == 0 and r.se == 0
    assert r.t == math.inf and r.p == 0.0 and r.dz == math.inf
    assert r.ci_low == r.ci_high == r.mean
    r = paired_t([0.3, 0.3, 0.3], [0.3, 0.3, 0.3])
    assert r.zero_sd and r.t == 0 and r.p == 1.0 and r.dz == 0
    assert not any(isinstance(v, float) and math.isnan(v) for v in r.to_dict().values())
    r = paired_t([-0.02] * 4, alternative="greater")
    assert r.p == 1.0 and r.t == -math.inf


def test_ci_coverage_calibration():
    # 4,000 simulated studies of 8 seeds: the 95% paired-t interval covers the truth 95 ± 1.5%.
    rng = np.random.default_rng(2024)
    true = 0.007
    data = rng.normal(true, 0.012, size=(4000, 8))
    hits = 0
    for row in data:
        r = paired_t(row)
        hits += r.ci_low <= true <= r.ci_high
    assert abs(hits / 4000 - 0.95) <= 0.015
