"""effect_size_paired, effect_size_paired_arms and describe against pingouin, the gamma-function
definition of Hedges' J, the noncentral-t definition of the interval and a coverage simulation."""

import math

import numpy as np
import pingouin as pg
import pytest
from scipy import special
from scipy import stats as sps

from prereg_kit.stats import (
    describe,
    effect_size_paired,
    effect_size_paired_arms,
    minimal_effect_paired,
    noninferiority_paired,
    paired_t,
    sign_flip_test,
    tost_paired,
    wilcoxon_paired,
    wilcoxon_tost,
)
from prereg_kit.stats.effect_size import hedges_correction


def test_d_z_matches_pingouin_cohen_dz_and_hedges_approximation():
    rng = np.random.default_rng(3)
    for n in (5, 8, 24):
        x, y = rng.normal(0.5, 0.05, n), rng.normal(0.49, 0.05, n)
        r = effect_size_paired(x - y)
        assert r.d_z == pytest.approx(pg.compute_effsize(x, y, paired=True, eftype="cohen_dz"), rel=1e-12)
        # pingouin's one-sample hedges uses the approximation J ≈ 1 − 3/(4(n−1) − 1); ours is exact
        approx = pg.compute_effsize(x - y, np.array([0.0]), eftype="hedges")
        assert r.g_z == pytest.approx(approx, rel=5e-3)
        assert r.g_z != approx


def test_hedges_correction_is_the_gamma_ratio():
    for df in (2, 3, 7, 23, 60):
        ref = special.gamma(df / 2) / (math.sqrt(df / 2) * special.gamma((df - 1) / 2))
        assert hedges_correction(df) == pytest.approx(ref, rel=1e-12)
    assert hedges_correction(10_000) == pytest.approx(1 - 3 / (4 * 10_000 - 1), rel=1e-9)
    assert math.isnan(hedges_correction(1))


def test_interval_solves_the_noncentral_t_equations():
    d = np.array([0.03, -0.01, 0.02, 0.05, 0.01, 0.04, 0.0, 0.02])
    r = effect_size_paired(d, confidence=0.90)
    t, df, rn = paired_t(d).t, d.size - 1, math.sqrt(d.size)
    assert sps.nct.cdf(t, df, r.d_z_ci[0] * rn) == pytest.approx(0.95, abs=1e-9)
    assert sps.nct.cdf(t, df, r.d_z_ci[1] * rn) == pytest.approx(0.05, abs=1e-9)
    assert r.g_z_ci == pytest.approx((r.d_z_ci[0] * r.correction, r.d_z_ci[1] * r.correction), rel=1e-12)
    assert r.d_z_ci[0] < r.d_z < r.d_z_ci[1]


def test_interval_covers_the_true_effect_at_its_level():
    # 400 seeded 8-seed studies at δ = 0.8: coverage 95% ± 3.3% (three Monte-Carlo SEs).
    rng = np.random.default_rng(11)
    hits = sum(lo <= 0.8 <= hi for lo, hi in (effect_size_paired(rng.normal(0.8, 1.0, 8)).d_z_ci for _ in range(400)))
    assert abs(hits / 400 - 0.95) < 0.033


def test_zero_spread_and_refusals():
    r = effect_size_paired([0.01, 0.01, 0.01])
    assert r.zero_sd and r.d_z == math.inf and r.d_z_ci == (math.inf, math.inf)
    # all differences zero: d_z = 0 and both intervals collapse to it (they read ±0.80 at n = 8 before)
    z = effect_size_paired(np.zeros(8))
    assert z.zero_sd and z.d_z == z.g_z == 0 and z.d_z_ci == (0.0, 0.0) and z.g_z_ci == (0.0, 0.0)
    assert effect_size_paired([-0.02, -0.02, -0.02]).d_z_ci == (-math.inf, -math.inf)
    with pytest.raises(ValueError, match="at least 3 complete pairs"):
        effect_size_paired([0.1, float("nan"), 0.2])
    with pytest.raises(ValueError, match="confidence"):
        effect_size_paired([0.1, 0.2, 0.3], confidence=95)


def test_arms_match_pingouin_d_av_and_lakens_d_rm():
    rng = np.random.default_rng(4)
    for _ in range(5):
        c = rng.normal(0.5, 0.05, 10)
        t = 0.6 * c + rng.normal(0.21, 0.03, 10)
        r = effect_size_paired_arms(t, c)
        assert r.d_av == pytest.approx(pg.compute_effsize(t, c, paired=True, eftype="cohen"), rel=1e-12)
        # Lakens (2013) eq. 9 written through d_z: d_rm = d_z·√(2(1−r))
        assert r.d_rm == pytest.approx(r.d_z * math.sqrt(2 * (1 - r.r)), rel=1e-10)
        assert r.r == pytest.approx(sps.pearsonr(t, c)[0], rel=1e-12)
    with pytest.raises(ValueError, match="different lengths"):
        effect_size_paired_arms([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="zero spread"):
        effect_size_paired_arms([1, 2, 3], [1, 1, 1])


def test_describe_states_the_decision():
    d = [0.01, 0.004, 0.012, -0.002, 0.008]
    s = describe(paired_t(d))
    assert s.startswith("Mean difference +0.0064, 95% CI [-0.0005, +0.0133], t(4) = 2.58") and "not shown different" in s
    assert "different from 0" in describe(paired_t([0.01, 0.012, 0.011, 0.013]))
    assert "not shown" not in describe(paired_t([0.01, 0.012, 0.011, 0.013]))
    assert "equivalent within the bounds" in describe(tost_paired(d, margin=0.02))
    assert "not shown equivalent" in describe(tost_paired(d, margin=0.005))
    assert "non-inferior at" in describe(noninferiority_paired(d, margin=0.02))
    d8 = [0.01, 0.004, 0.012, 0.002, 0.008, 0.015, 0.011, 0.006]
    assert "minimal-effect test" in describe(minimal_effect_paired(d8, margin=0.001))
    w = describe(wilcoxon_paired(d8))
    assert w.startswith("Hodges–Lehmann estimate +0.0085") and "(exact), p = 0.00781" in w and "not shown" not in w
    assert "signed-rank TOST" in describe(wilcoxon_tost(d8, margin=0.02))
    assert "exact over 256 sign patterns" in describe(sign_flip_test(d8))
    with pytest.raises(ValueError, match="got dict"):
        describe({})
