"""wilcoxon_paired and wilcoxon_tost against scipy.stats.wilcoxon, R's wilcox.test (outputs stored in
tests/data/wilcoxon_r.json with the R call that produced each, by tests/data/wilcoxon_r.R), brute-force
enumeration of the signed-rank distribution, and the Walsh-average selection against the sorted
averages."""

import itertools
import json
import math
import time
import tracemalloc

import numpy as np
import pytest
from paths import DATA
from scipy import stats as sps
from scipy.signal import fftconvolve

from prereg_kit.stats import walsh as walsh_mod
from prereg_kit.stats import wilcoxon_paired, wilcoxon_tost
from prereg_kit.stats.walsh import walsh_averages, walsh_median, walsh_order_statistic
from prereg_kit.stats.wilcoxon import TOL_ROOT, _shifted_statistic, _walsh_rank, signed_rank_counts

R_CASES = json.loads((DATA / "wilcoxon_r.json").read_text())["cases"]


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_exact_p_matches_scipy(alternative):
    rng = np.random.default_rng(2)
    for n in (3, 6, 12, 25, 49):  # R's exact rule: fewer than 50 non-zero differences
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
        r = wilcoxon_tost(d, margin=(-0.02, 0.015))
        p_lower = sps.wilcoxon(d + 0.02, alternative="greater", method="exact").pvalue
        p_upper = sps.wilcoxon(d - 0.015, alternative="less", method="exact").pvalue
        assert (r.p_lower, r.p_upper) == pytest.approx((p_lower, p_upper), rel=1e-10)
        assert r.p == max(r.p_lower, r.p_upper) and r.equivalent == (r.p < 0.05)
    assert wilcoxon_tost(d, margin=0.02).low == -0.02
    assert not wilcoxon_tost([0.01, 0.03, 0.02, 0.04], margin=0.02).equivalent  # 4 seeds cannot reach p < .05
    with pytest.raises(ValueError, match="low < high"):
        wilcoxon_tost(d, margin=(0.02, -0.02))
    with pytest.raises(ValueError, match="positive"):
        wilcoxon_tost(d, margin=-0.02)


def test_all_zero_and_refusals():
    r = wilcoxon_paired([0.0, 0.0, 0.0])
    assert r.p == 1.0 and r.n_zero == 3 and r.hl == 0.0
    with pytest.raises(ValueError, match="at least 2 complete pairs"):
        wilcoxon_paired([0.1])
    with pytest.raises(ValueError, match="alternative"):
        wilcoxon_paired([0.1, 0.2], alternative="bigger")


# --------------------------------------------------------------------------- R's wilcox.test, stored


def _r_runs(kinds=None):
    for case in R_CASES:
        if kinds is None or case["kind"] in kinds:
            for run in case["runs"]:
                yield pytest.param(case, run, id=f"{case['kind']}-n{len(case['d'])}-{run['alternative']}-{run['conf_level']}")


def _same(a, b, tol):
    """Equal within tol, NaN matching NaN (R's missing interval) and ±inf matching themselves."""
    b = math.nan if b is None else b
    if math.isnan(a) or math.isnan(b) or math.isinf(a) or math.isinf(b):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return abs(a - b) <= tol


@pytest.mark.parametrize(("case", "run"), list(_r_runs()))
def test_matches_r_wilcox_test(case, run):
    # Every stored run: ties, zeros, both, n = 3…50, three alternatives, four levels. The kit runs
    # R's algorithm (its uniroot step for step) on the same floating values, so the estimate and
    # interval agree far inside R's root-finding tolerance (1e-4); measured worst 4e-16.
    alt = {"two.sided": "two-sided"}.get(run["alternative"], run["alternative"])
    d = np.array(case["d"])
    r = wilcoxon_paired(d, run["conf_level"], alternative=alt)
    assert r.statistic == run["statistic"]
    assert r.p == pytest.approx(run["p"], rel=1e-12, abs=1e-15)
    nz = d[d != 0]
    walsh = nz.size == d.size and np.unique(np.abs(nz)).size == nz.size
    assert r.ci_method == ("exact" if walsh else "inversion")
    if walsh and nz.size >= 50:
        # R inverts the normal approximation from n = 50 even without ties; the kit keeps the
        # exact Hodges–Lehmann estimate and Walsh interval (docs/statistics.md): within about
        # one tol.root of R's numbers.
        assert not r.exact
        assert abs(r.hl - run["estimate"]) <= TOL_ROOT
        assert all(_same(a, b, 2 * TOL_ROOT) for a, b in zip(r.ci, run["ci"]))
        return
    tol = 1e-12
    assert _same(r.hl, run["estimate"], tol) or (nz.size == 0 and r.hl == 0)
    assert _same(r.ci[0], run["ci"][0], tol) and _same(r.ci[1], run["ci"][1], tol)
    if not walsh:  # R reports its level for the normal inversion; the exact level is the kit's
        assert r.ci_level == pytest.approx(run["ci_level"], abs=1e-12)
    else:  # R prints the requested level unless it is far off; the kit the level attained
        assert r.ci_level == pytest.approx(run["attained_level"], abs=1e-12)


def test_issue_example_is_rs_estimate_and_interval():
    # wilcox.test(c(0.02, 0.01, 0, 0.03, 0.01, -0.01, 0.02, 0, 0.04, 0.01), conf.int = TRUE, correct = TRUE):
    # estimate 0.01508188, 95% CI [1.717e-07, 0.02997535] (tests/data/wilcoxon_r.json).
    r = wilcoxon_paired([0.02, 0.01, 0, 0.03, 0.01, -0.01, 0.02, 0, 0.04, 0.01])
    assert r.ci_method == "inversion" and r.n_zero == 2 and r.ci_level == 0.95
    assert r.hl == pytest.approx(0.015081881940518842, abs=1e-15)
    assert r.ci == pytest.approx((1.717067562351422e-07, 0.02997534756118974), abs=1e-15)


def _w_reference(x, mu, correction):
    """R's W(d) written as R writes it: rank |x − d| without the zeros, table the ties."""
    xd = x - mu
    xd = xd[xd != 0]
    nx = xd.size
    dr = sps.rankdata(np.abs(xd))
    zd = dr[xd > 0].sum() - nx * (nx + 1) / 4
    _, t = np.unique(dr, return_counts=True)
    sigma = math.sqrt(nx * (nx + 1) * (2 * nx + 1) / 24 - (t**3 - t).sum() / 48)
    c = {None: 0.0, "greater": 0.5, "less": -0.5}.get(correction, 0.5 * np.sign(zd))
    return (zd - c) / sigma


def test_shifted_statistic_is_rs_w_at_every_kind_of_shift():
    rng = np.random.default_rng(11)
    for trial in range(24):
        n = int(rng.integers(2, 30))
        x = np.sort(rng.integers(-6, 9, n) / 64 if trial % 2 else rng.normal(0.01, 0.02, n))
        x = x[x != 0]
        if x.size < 2:
            continue
        walsh = walsh_averages(x)
        shifts = np.r_[x[::2], walsh[rng.integers(0, walsh.size, 6)], rng.uniform(x[0], x[-1], 4)]
        for correction in (None, "two-sided", "greater", "less"):
            w = _shifted_statistic(x, correction)
            for mu in shifts:
                ref = _w_reference(x, mu, correction)
                got = w(mu)
                assert (math.isnan(ref) and math.isnan(got)) or got == pytest.approx(ref, rel=1e-13, abs=1e-13)


def test_one_sided_and_degenerate_intervals():
    d = np.array([0.01, 0.03, -0.004, 0.02, 0.05, 0.012, 0.027])
    two, up = wilcoxon_paired(d), wilcoxon_paired(d, alternative="greater")
    assert up.ci[1] == math.inf and up.ci[0] >= two.ci[0] and up.hl == two.hl
    down = wilcoxon_paired(d, alternative="less")
    assert down.ci[0] == -math.inf and down.ci[1] <= two.ci[1]
    # all non-zero differences equal: R gives no interval (level 0) and their value as estimate
    r = wilcoxon_paired([0.02, 0.02, 0.02, 0.0])
    assert r.hl == 0.02 and all(math.isnan(v) for v in r.ci) and r.ci_level == 0
    assert wilcoxon_paired([0.02, 0.02, 0.02], alternative="greater").ci[1] == math.inf


# --------------------------------------------------------------------------- Walsh-average selection


@pytest.fixture
def pivot_passes(monkeypatch):
    """Make the selection run its pivot passes at small n (they start above a few MB otherwise)."""
    monkeypatch.setattr(walsh_mod, "SMALL", 0)
    monkeypatch.setattr(walsh_mod, "MATERIALIZE", 1)


def test_walsh_selection_equals_the_sorted_averages(pivot_passes):
    rng = np.random.default_rng(5)
    for trial in range(80):
        n = int(rng.integers(1, 200))
        x = [rng.normal(size=n), rng.integers(-5, 6, n) / 64, np.full(n, 0.25), rng.choice([0.1, 0.2], n),
             np.round(rng.standard_t(2, n), 2) * 1e-3 + 1e-17 * rng.integers(0, 3, n)][trial % 5]  # ties, ulps apart
        xs = np.sort(x)
        ref = walsh_averages(xs)
        for k in {1, ref.size, (ref.size + 1) // 2, *rng.integers(1, ref.size + 1, 4).tolist()}:
            assert walsh_order_statistic(xs, k) == ref[k - 1]
        assert walsh_median(xs) == np.median(ref)


def _histogram_order_statistics(ints, ks):
    """The k-th smallest Walsh sums x_i + x_j (i ≤ j) of integers from their value counts: the
    self-convolution counts ordered pairs, the diagonal added and halved gives pairs i ≤ j."""
    lo = int(ints.min())
    counts = np.bincount(ints - lo).astype(float)
    pairs = np.rint(fftconvolve(counts, counts)).astype(np.int64)
    pairs[::2] += counts.astype(np.int64)
    cum = np.cumsum(pairs // 2)
    return [int(np.searchsorted(cum, k)) + 2 * lo for k in ks]


def _reference_wilcoxon(ints, scale, confidence):
    """HL and two-sided interval of distinct-|x| integers × scale, from the Walsh-sum histogram."""
    n = ints.size
    m = n * (n + 1) // 2
    k, _ = _walsh_rank(n, (1 - confidence) / 2)
    mid = [m // 2, m // 2 + 1] if m % 2 == 0 else [(m + 1) // 2]
    sums = _histogram_order_statistics(ints, [k, m - k + 1, *mid])
    return np.mean(np.array(sums[2:]) * scale / 2), (sums[0] * scale / 2, sums[1] * scale / 2)


def _distinct_abs_integers(rng, n):
    mags = rng.choice(np.arange(1, 4 * n), size=n, replace=False)
    return np.where(rng.random(n) < 0.35, -mags, mags)


def test_wilcoxon_paired_at_n_20000_matches_the_walsh_histogram():
    rng = np.random.default_rng(20_000)
    ints = _distinct_abs_integers(rng, 20_000)
    scale = 2.0**-16  # exact in floating point: every sum and average exact
    r = wilcoxon_paired(ints * scale)
    hl, ci = _reference_wilcoxon(ints, scale, 0.95)
    assert r.ci_method == "normal" and r.hl == hl and r.ci == ci
    # ties too (values k/64): the selection against the histogram for many ranks
    tied = rng.integers(-40, 60, 20_000)
    xs = np.sort(tied / 64)
    m = xs.size * (xs.size + 1) // 2
    ks = rng.integers(1, m + 1, 6).tolist() + [1, m]
    assert [walsh_order_statistic(xs, k) for k in ks] == [s / 128 for s in _histogram_order_statistics(tied, ks)]


@pytest.mark.slow
def test_wilcoxon_paired_at_n_100000_within_a_second_and_100_mb():
    rng = np.random.default_rng(100_000)
    ints = _distinct_abs_integers(rng, 100_000)
    scale = 2.0**-18
    wilcoxon_paired(ints[:100] * scale)  # imports outside the measurement
    for d in (ints * scale, np.round(rng.normal(0.01, 0.05, 100_000) * 200) / 200):  # no ties; ties and zeros
        tracemalloc.start()
        t0 = time.process_time()
        r = wilcoxon_paired(d)
        cpu = time.process_time() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert cpu < 1.0 and peak < 100 * 2**20, (r.ci_method, cpu, peak)
    hl, ci = _reference_wilcoxon(ints, scale, 0.95)
    r = wilcoxon_paired(ints * scale)
    assert r.hl == hl and r.ci == ci
