"""iqm, probability_of_improvement and performance_profile against rliable's published metric
definitions (scipy's trim_mean, Mann–Whitney U/(nm), the share of scores above τ) and a plain-loop
stratified bootstrap written as rliable's StratifiedBootstrap describes it."""

import numpy as np
import pytest
from scipy import stats as sps

from prereg_kit.stats import iqm, performance_profile, probability_of_improvement


def _loop_bootstrap(metric, arrays, n_resamples, seed):
    """Plain loop: each array's runs resampled with replacement within every task, independently."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_resamples):
        res = [a[rng.integers(0, a.shape[0], a.shape), np.arange(a.shape[1])] for a in arrays]
        out.append(metric(*res))
    return np.quantile(np.array(out), [0.025, 0.975], axis=0, method="inverted_cdf")


def test_iqm_is_scipy_trim_mean_of_all_scores():
    rng = np.random.default_rng(0)
    for shape in [(3, 1), (5, 3), (7, 6), (10, 5), (13, 2)]:
        s = rng.lognormal(0, 1, shape)
        assert iqm(s, n_resamples=10).value == pytest.approx(sps.trim_mean(s, 0.25, axis=None), rel=1e-12)
    assert iqm(np.arange(10.0), n_resamples=10).n_tasks == 1  # a vector is one task


def test_iqm_interval_matches_a_plain_stratified_bootstrap():
    s = np.random.default_rng(1).normal(0.5, 0.1, (8, 4))
    r = iqm(s, n_resamples=4000, seed=2)
    ref = _loop_bootstrap(lambda a: np.sort(a.ravel())[8:24].mean(), [s], 4000, 3)  # 32 scores, 8 cut each end
    width = ref[1] - ref[0]
    assert (r.ci_low, r.ci_high) == pytest.approx(tuple(ref), abs=0.06 * width)
    assert r.ci_low < r.value < r.ci_high
    const = np.tile(np.arange(4.0), (5, 1))  # every run of a task the same: nothing to resample
    c = iqm(const, n_resamples=200)
    assert c.ci_low == c.ci_high == c.value


def test_probability_of_improvement_is_mann_whitney_u_over_nm():
    rng = np.random.default_rng(4)
    x = rng.integers(0, 6, (9, 4)).astype(float)  # ties
    y = rng.integers(0, 5, (7, 4)).astype(float)
    ref = np.mean([sps.mannwhitneyu(x[:, j], y[:, j], alternative="greater").statistic / (9 * 7) for j in range(4)])
    assert probability_of_improvement(x, y, n_resamples=10).value == pytest.approx(ref, rel=1e-12)
    same = probability_of_improvement(x, x, n_resamples=10)
    assert same.value == pytest.approx(0.5, rel=1e-12)  # rliable's identical-scores case


def test_probability_of_improvement_interval_matches_a_plain_loop():
    rng = np.random.default_rng(5)
    x, y = rng.normal(0.55, 0.1, (6, 3)), rng.normal(0.5, 0.1, (5, 3))

    def poi(a, b):
        return np.mean([np.mean((a[:, j, None] > b[None, :, j]) + 0.5 * (a[:, j, None] == b[None, :, j]))
                        for j in range(a.shape[1])])

    r = probability_of_improvement(x, y, n_resamples=4000, seed=6)
    ref = _loop_bootstrap(poi, [x, y], 4000, 7)
    width = ref[1] - ref[0]
    assert (r.ci_low, r.ci_high) == pytest.approx(tuple(ref), abs=0.06 * width)
    assert r.n_runs == 6 and r.n_runs_y == 5


def test_performance_profile_is_the_share_above_each_threshold():
    s = np.random.default_rng(8).normal(0.5, 0.2, (10, 4))
    taus = np.linspace(0, 1, 11)
    prof = performance_profile(s, taus, n_resamples=2000, seed=1)
    assert prof.fraction == pytest.approx([(s > t).mean() for t in taus], rel=1e-12)
    assert all(lo <= f <= hi for lo, f, hi in zip(prof.ci_low, prof.fraction, prof.ci_high))
    ref = _loop_bootstrap(lambda a: (a.ravel()[:, None] > taus).mean(axis=0), [s], 2000, 2)
    assert np.abs(np.array(prof.ci_low) - ref[0]).max() <= 0.051  # within two scores of 40
    assert np.abs(np.array(prof.ci_high) - ref[1]).max() <= 0.051


def test_refusals():
    s = np.ones((4, 3))
    with pytest.raises(ValueError, match="same tasks"):
        probability_of_improvement(s, np.ones((4, 2)))
    s[1, 2] = np.nan
    with pytest.raises(ValueError, match="1 NaN/infinite"):
        iqm(s)
    with pytest.raises(ValueError, match="at least 2 runs"):
        iqm(np.ones((1, 3)))
    with pytest.raises(ValueError, match="seed"):
        iqm(np.ones((3, 3)), seed=None)
    with pytest.raises(ValueError, match="taus"):
        performance_profile(np.ones((3, 3)), [])
