"""sign_flip_test and sign_flip_ci against scipy.stats.permutation_test, test inversion and a
null-size simulation."""

import numpy as np
import pytest
from scipy import stats as sps

from prereg_kit.stats import sign_flip_ci, sign_flip_test


def _scipy(d, alternative, n_resamples=np.inf, rng=None):
    return sps.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=n_resamples,
                                alternative=alternative, rng=rng).pvalue


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_exact_p_matches_scipy_permutation_test(alternative):
    rng = np.random.default_rng(1)
    for n in (2, 3, 5, 9, 14):
        d = rng.normal(0.3, 1.0, n)
        r = sign_flip_test(d, alternative=alternative)
        assert r.exact and r.n_resamples == 2**n
        assert r.p == pytest.approx(_scipy(d, alternative), rel=1e-12)
    d = rng.integers(-3, 5, 12).astype(float)  # ties among the flipped sums
    assert sign_flip_test(d, alternative=alternative).p == pytest.approx(_scipy(d, alternative), rel=1e-12)
    shifted = sign_flip_test(d + 0.5, null=0.5, alternative=alternative).p
    assert shifted == pytest.approx(_scipy(d, alternative), rel=1e-12)


def test_monte_carlo_above_twenty_agrees_with_scipy_within_error():
    d = np.random.default_rng(2).normal(0.25, 1.0, 30)
    r = sign_flip_test(d, n_resamples=20_000, seed=5)
    ref = _scipy(d, "two-sided", n_resamples=20_000, rng=np.random.default_rng(6))
    assert not r.exact and r.n_resamples == 20_000
    assert abs(r.p - ref) < 4 * np.sqrt(2 * ref * (1 - ref) / 20_000)  # two independent estimates
    assert sign_flip_test(d, n_resamples=20_000, seed=5).p == r.p  # seeded: reproducible
    with pytest.raises(ValueError, match="seed"):
        sign_flip_test(d, seed=None)


def test_size_under_the_null_is_at_most_alpha():
    # 2,000 seeded 8-seed studies of symmetric heavy-tailed noise: rejections at .05 within
    # three Monte-Carlo SEs of ≤ 5% (the exact test is conservative: 256 patterns).
    rng = np.random.default_rng(3)
    rejections = sum(sign_flip_test(rng.standard_t(3, 8)).p <= 0.05 for _ in range(2000))
    assert rejections / 2000 <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 2000)
    assert rejections / 2000 > 0.02  # and not absurdly conservative


def test_interval_is_the_set_of_shifts_not_rejected():
    rng = np.random.default_rng(4)
    for n, conf in ((6, 0.90), (10, 0.95), (13, 0.80)):
        d = rng.normal(0.01, 0.02, n)
        ci = sign_flip_ci(d, conf)
        assert ci.ci_low < d.mean() < ci.ci_high
        for mu in np.linspace(ci.ci_low - 0.02, ci.ci_high + 0.02, 41):
            kept = sign_flip_test(d, null=mu).p > 1 - conf
            assert kept == (ci.ci_low <= mu <= ci.ci_high)
        # just outside each end the test rejects, at the end it does not
        assert sign_flip_test(d, null=ci.ci_low).p > 1 - conf
        assert sign_flip_test(d, null=ci.ci_low - 1e-6).p <= 1 - conf
        assert sign_flip_test(d, null=ci.ci_high + 1e-6).p <= 1 - conf


def test_too_few_seeds_give_an_infinite_interval_and_refusals():
    # n ≤ 5: the smallest two-sided p is 2/2^n (0.0625 at n = 5), so no shift is rejected at 0.05
    # and the 95% interval is infinite; from n = 6 (2/64 = 0.031) it is finite
    for n in range(2, 8):
        d = 0.01 * np.arange(1, n + 1)
        ci = sign_flip_ci(d)
        assert np.isfinite(ci.ci_low) == np.isfinite(ci.ci_high) == (n >= 6) == (sign_flip_test(d).p < 0.05)
    # a lower level is reached with fewer seeds: at 90% five seeds (2/32 = 0.0625 < 0.10) suffice
    assert np.isfinite(sign_flip_ci(0.01 * np.arange(1, 6), 0.90).ci_low)
    with pytest.raises(ValueError, match="alternative"):
        sign_flip_test([0.1, 0.2], alternative="up")
    with pytest.raises(ValueError, match="n_resamples"):
        sign_flip_test(np.ones(25), n_resamples=0)
