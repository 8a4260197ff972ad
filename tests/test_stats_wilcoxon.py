"""wilcoxon_paired and wilcoxon_tost against scipy.stats.wilcoxon, R's wilcox.test and brute-force
enumeration of the signed-rank distribution."""

import itertools

import numpy as np
import pytest
from scipy import stats as sps

from prereg_kit.stats import wilcoxon_paired, wilcoxon_tost
from prereg_kit.stats.wilcoxon import signed_rank_counts


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_exact_p_matches_scipy(alternative):
    rng = np.random.default_rng(2)
    for n in (3, 6, 12, 25, 50):
        for _ in range(3):
            d = rng.normal(0.3, 1.0, n)
            r = wilcoxon_paired(d, alternative=alternative)
            ref = sps.wilcoxon(d, alternative=alternative, method="exact")
            assert r.exact and r.p == pytest.approx(ref.pvalue, rel=1e-10)


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_normal_approximation_with_ties_zeros_or_large_n_matches_scipy(alternative):
    # R's default (continuity correction on); scipy's is off, so it is switched on for the reference.
    rng = np.random.default_rng(3)
    for n in (8, 25, 60):
        for _ in range(3):
            d = np.round(rng.normal(0.3, 1.0, n) * 2) / 2  # ties and zeros
            d[0] = d[1] = 0.5
            r = wilcoxon_paired(d, alternative=alternative)
            ref = sps.wilcoxon(d, alternative=alternative, method="asymptotic", correction=True)
            assert not r.exact and r.p == pytest.approx(ref.pvalue, rel=1e-10)
            assert r.n_zero == int((d == 0).sum())
    d = rng.normal(0.2, 1.0, 60)  # no ties but n > 50
    ref = sps.wilcoxon(d, method="asymptotic", correction=True)
    assert wilcoxon_paired(d).p == pytest.approx(ref.pvalue, rel=1e-10)


def test_r_wilcox_test_conf_int_published_output():
    # R: wilcox.test(x, y, paired=TRUE, conf.int=TRUE) as wrapped by statease::wilcoxon_interpret(x, y)
    # (https://devwebwacky.github.io/statease/reference/wilcoxon_interpret.html):
    # V statistic 24.000, p-value 0.1094, 95% CI [-2.500, 15.000].
    x = np.array([23, 45, 12, 67, 34, 89, 56.0])
    y = np.array([19, 38, 22, 51, 29, 74, 44.0])
    r = wilcoxon_paired(x - y)
    assert r.statistic == 24 and r.p == pytest.approx(0.1094, abs=5e-5)
    assert r.ci == (-2.5, 15.0)


def test_counts_are_the_brute_force_signed_rank_distribution():
    for n in (1, 4, 9):
        brute = np.bincount([sum(s) for s in itertools.product(*[(0, k) for k in range(1, n + 1)])])
        assert signed_rank_counts(n).tolist() == brute.tolist()


def _exact_two_sided_p(x):
    """Brute force: all 2^n sign patterns of the ranks of |x| (no ties, no zeros)."""
    ranks = sps.rankdata(np.abs(x))
    t = ranks[x > 0].sum()
    sums = np.array([np.dot(s, ranks) for s in itertools.product((0, 1), repeat=x.size)])
    return min(1.0, 2 * min((sums <= t).mean(), (sums >= t).mean()))


def test_hodges_lehmann_and_interval_by_test_inversion():
    rng = np.random.default_rng(7)
    for n in (5, 8, 10):
        d = rng.standard_t(3, n) * 0.02 + 0.01
        r = wilcoxon_paired(d, confidence=0.90)
        walsh = [(d[i] + d[j]) / 2 for i in range(n) for j in range(i, n)]
        assert r.hl == pytest.approx(np.median(walsh), rel=1e-12)
        assert r.ci_level >= 0.90
        # μ lies strictly inside the interval exactly when the exact test of d − μ does not reject
        # at 1 − ci_level (the level the Walsh order statistics attain).
        grid = np.linspace(min(walsh) - 0.01, max(walsh) + 0.01, 61)
        for mu in grid[~np.isin(grid, walsh)]:
            inside = r.ci[0] < mu < r.ci[1]
            assert inside == (_exact_two_sided_p(d - mu) > 1 - r.ci_level + 1e-12)


def test_tost_is_two_one_sided_scipy_tests():
    rng = np.random.default_rng(9)
    for _ in range(5):
        d = rng.normal(0.002, 0.01, 12)
        r = wilcoxon_tost(d, -0.02, 0.015)
        p_lower = sps.wilcoxon(d + 0.02, alternative="greater", method="exact").pvalue
        p_upper = sps.wilcoxon(d - 0.015, alternative="less", method="exact").pvalue
        assert (r.p_lower, r.p_upper) == pytest.approx((p_lower, p_upper), rel=1e-10)
        assert r.p == max(r.p_lower, r.p_upper) and r.equivalent == (r.p < 0.05)
    assert wilcoxon_tost(d, 0.02).low == -0.02
    assert not wilcoxon_tost([0.01, 0.03, 0.02, 0.04], 0.02).equivalent  # 4 seeds cannot reach p < .05
    with pytest.raises(ValueError, match="low < high"):
        wilcoxon_tost(d, 0.02, -0.02)
    with pytest.raises(ValueError, match="positive"):
        wilcoxon_tost(d, -0.02)


def test_all_zero_and_refusals():
    r = wilcoxon_paired([0.0, 0.0, 0.0])
    assert r.p == 1.0 and r.n_zero == 3 and r.hl == 0.0
    with pytest.raises(ValueError, match="at least 2 complete pairs"):
        wilcoxon_paired([0.1])
    with pytest.raises(ValueError, match="alternative"):
        wilcoxon_paired([0.1, 0.2], alternative="bigger")
