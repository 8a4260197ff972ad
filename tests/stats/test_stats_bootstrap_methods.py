"""seed_bootstrap(method="bca"|"studentized") against scipy.stats.bootstrap and brute-force
enumeration of all n**n resamples; the percentile default unchanged."""

import dataclasses
import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from prereg_kit.stats import seed_bootstrap


def test_percentile_default_is_unchanged():
    d = np.array([-0.035, 0.050, 0.070, 0.080, 0.115])  # the dense-rewards paper's n = 5 row (§G.5)
    r = seed_bootstrap(d)
    assert r.method == "percentile" and (r.ci_low, r.ci_high) == pytest.approx((0.007, 0.094), abs=1e-12)
    x = np.random.default_rng(1).normal(0.01, 0.02, 12)
    a, b = seed_bootstrap(x, margin=0.02), seed_bootstrap(x, margin=0.02, method="percentile")
    assert dataclasses.astuple(a) == dataclasses.astuple(b)


def test_bca_matches_scipy_within_monte_carlo_error():
    rng = np.random.default_rng(3)
    for _ in range(3):
        x = rng.gamma(0.7, 0.01, 15)  # skewed: BCa moves away from the percentile interval
        r = seed_bootstrap(x, method="bca", n_resamples=20_000, seed=4)
        ref = sps.bootstrap((x,), np.mean, method="BCa", n_resamples=20_000, rng=5).confidence_interval
        width = ref.high - ref.low
        assert abs(r.ci_low - ref.low) < 0.05 * width and abs(r.ci_high - ref.high) < 0.05 * width
        pct = sps.bootstrap((x,), np.mean, method="percentile", n_resamples=20_000, rng=5).confidence_interval
        assert abs(r.ci_high - pct.high) > 0.02 * width  # a real correction, not the percentile one


def _brute(x, confidence):
    """All n**n ordered resamples, by the textbook formulas (Efron & Tibshirani 14.3, 12.5)."""
    n = x.size
    boot = np.array([x[list(i)] for i in itertools.product(range(n), repeat=n)])
    m = boot.mean(axis=1)

    def q(v, p):
        return np.quantile(v, p, method="inverted_cdf")

    half = (1 - confidence) / 2
    theta = x.mean()
    tol = 1e-12 * np.abs(x).max()  # permutations of the seeds tie with θ̂ up to float residue
    z0 = sps.norm.ppf(((m < theta - tol).mean() + (m <= theta + tol).mean()) / 2)
    jack = np.array([np.delete(x, i).mean() for i in range(n)])
    u = jack.mean() - jack
    a = (u**3).sum() / (6 * (u**2).sum() ** 1.5)
    lev = [sps.norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z))) for z in sps.norm.ppf([half, 1 - half])]
    bca = (q(m, lev[0]), q(m, lev[1]))
    s = boot.std(axis=1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(s > 1e-12, (m - theta) / (s / math.sqrt(n)), np.sign(m - theta) * np.inf)
    se = x.std(ddof=1) / math.sqrt(n)
    stud = (theta - q(t, 1 - half) * se, theta - q(t, half) * se)
    return bca, stud


@pytest.mark.parametrize("n", [4, 5, 6])
def test_exhaustive_path_equals_brute_force(n):
    x = np.random.default_rng(n).lognormal(0, 0.7, n) / 50
    bca, stud = _brute(x, 0.90)
    rb = seed_bootstrap(x, method="bca", confidence=0.90)
    rs = seed_bootstrap(x, method="studentized", confidence=0.90)
    assert rb.exhaustive and rs.exhaustive
    assert (rb.ci_low, rb.ci_high) == pytest.approx(bca, rel=1e-9)
    assert (rs.ci_low, rs.ci_high) == pytest.approx(stud, rel=1e-9)


@pytest.mark.parametrize("method", ["bca", "studentized"])
def test_bootstrap_tost_agrees_with_the_interval(method):
    rng = np.random.default_rng(8)
    seen = set()
    for _ in range(40):
        x = rng.normal(rng.uniform(-0.02, 0.02), 0.01, 6)
        r = seed_bootstrap(x, method=method, margin=0.02)
        ci = seed_bootstrap(x, method=method, confidence=0.90)
        inside = -0.02 < ci.ci_low and ci.ci_high < 0.02
        assert (r.p_tost < 0.05) == inside
        assert r.p_tost == max(r.p_tost_lower, r.p_tost_upper)
        seen.add(inside)
    assert seen == {True, False}  # both decisions were exercised


def test_method_refusal_and_small_n_limits():
    with pytest.raises(ValueError, match="method must be one of"):
        seed_bootstrap([0.1, 0.2, 0.3], method="basic")
    # three seeds: a third of the n**n mass is one-seed resamples with s* = 0, so the bootstrap-t
    # quantiles are infinite and the interval honestly unbounded
    r = seed_bootstrap([0.01, 0.02, 0.04], method="studentized")
    assert r.ci_low == -math.inf and r.ci_high == math.inf
