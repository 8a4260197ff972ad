"""adjust() against statsmodels' multipletests for every method, and minimal_effect_paired against
scipy's one-sided paired t-tests and TOSTER's definition of the minimal-effect test."""

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from prereg_kit.stats import adjust, holm, minimal_effect_paired, tost_paired

# Holm is checked against statsmodels in test_stats_multiplicity.py (its holm path runs gc.collect()
# on every call, too slow to repeat here); adjust(method="holm") is holm() itself.
STATSMODELS = {"hochberg": "simes-hochberg", "hommel": "hommel", "bh": "fdr_bh",
               "bonferroni": "bonferroni"}


@pytest.mark.parametrize("method", list(STATSMODELS))
def test_adjust_matches_statsmodels(method):
    rng = np.random.default_rng(12)
    for m in (1, 2, 3, 5, 8, 20):
        for _ in range(15):
            p = rng.uniform(0, 1, m) ** rng.uniform(1, 4)
            if m > 3:
                p[1] = p[2]  # ties
            ref = multipletests(p, method=STATSMODELS[method])[1]
            assert adjust(p, method) == pytest.approx(ref, rel=1e-12, abs=1e-15)


def test_holm_stays_the_default_and_nans_stay_out_of_the_family():
    p = np.array([0.01, np.nan, 0.04, 0.03, 0.2])
    assert np.array_equal(adjust(p), holm(p), equal_nan=True)
    for method in ("hochberg", "hommel", "bh"):
        out = adjust(p, method)
        assert np.isnan(out[1])
        ref = multipletests(p[~np.isnan(p)], method=STATSMODELS[method])[1]
        assert out[~np.isnan(p)] == pytest.approx(ref, rel=1e-12)
    # the step-up relatives never reject less than Holm
    rng = np.random.default_rng(1)
    for _ in range(50):
        q = rng.uniform(0, 0.1, 6)
        assert (adjust(q, "hochberg") <= holm(q) + 1e-15).all()
        assert (adjust(q, "hommel") <= adjust(q, "hochberg") + 1e-15).all()


def test_adjust_refusals():
    with pytest.raises(ValueError, match="method must be one of"):
        adjust([0.01, 0.02], "sidak")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        adjust([0.01, 1.2], "bh")
    with pytest.raises(ValueError, match="one-dimensional"):
        adjust(np.ones((2, 2)) / 2, "hommel")


def test_minimal_effect_is_two_one_sided_scipy_tests():
    rng = np.random.default_rng(5)
    for n in (4, 10, 30):
        for _ in range(5):
            d = rng.normal(rng.uniform(-0.05, 0.05), 0.02, n)
            r = minimal_effect_paired(d, margin=(-0.01, 0.02))
            p_lower = sps.ttest_1samp(d, -0.01, alternative="less").pvalue
            p_upper = sps.ttest_1samp(d, 0.02, alternative="greater").pvalue
            assert (r.p_lower, r.p_upper) == pytest.approx((p_lower, p_upper), rel=1e-10)
            assert r.p == pytest.approx(min(p_lower, p_upper), rel=1e-10)
            # TOSTER's MET: significant exactly when the 1−2α interval lies wholly outside the bounds
            outside = r.ci_high < -0.01 or r.ci_low > 0.02
            assert r.shown == outside == (r.p < 0.05)
            # the mirror image of TOST: each one-sided p is the complement of TOST's
            t = tost_paired(d, margin=(-0.01, 0.02))
            assert (r.p_lower, r.p_upper) == pytest.approx((1 - t.p_lower, 1 - t.p_upper), abs=1e-12)


def test_minimal_effect_decisions_and_refusals():
    big = minimal_effect_paired([0.05, 0.06, 0.055, 0.07, 0.065], margin=0.02)
    assert big.shown and big.low == -0.02 and big.p == big.p_upper
    small = minimal_effect_paired([0.01, 0.0, 0.015, -0.005, 0.02], margin=0.02)
    assert not small.shown
    with pytest.raises(ValueError, match="low < high"):
        minimal_effect_paired([0.1, 0.2], margin=(0.02, 0.01))
    with pytest.raises(ValueError, match="alpha"):
        minimal_effect_paired([0.1, 0.2], margin=0.02, alpha=0.5)
