"""sequential_boundaries and classical_boundaries against published group-sequential boundaries,
scipy's multivariate normal (an independent integration) and seeded simulations of the looks."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from prereg_kit.stats import (
    classical_boundaries,
    crossing_probabilities,
    sequential_boundaries,
)


@pytest.mark.parametrize("k, published", [
    # gsDesign::gsDesign(k=K, test.type=2, alpha=0.025, sfu=sfLDOF)$upper$bound (symmetric, α/2 a side)
    (2, (2.9626, 1.9686)),
    (3, (3.7103, 2.5114, 1.9930)),
    (4, (4.3326, 2.9631, 2.3590, 2.0141)),
    (5, (4.8769, 3.3570, 2.6803, 2.2898, 2.0310)),
])
def test_lan_demets_obrien_fleming_type(k, published):
    r = sequential_boundaries(k)
    assert r.z == pytest.approx(published, abs=2e-4)
    assert r.cumulative_alpha[-1] == 0.05 and sum(r.alpha_spent) == pytest.approx(0.05, rel=1e-12)


@pytest.mark.parametrize("k, published", [
    # Lan–DeMets Pocock-type spending α·ln(1 + (e−1)t), two-sided α = .05, equally spaced
    (2, (2.157, 2.201)),
    (5, (2.438, 2.427, 2.410, 2.397, 2.386)),
])
def test_lan_demets_pocock_type(k, published):
    assert sequential_boundaries(k, spending="pocock").z == pytest.approx(published, abs=6e-4)


@pytest.mark.parametrize("k, c_pocock, c_obf", [
    # Jennison & Turnbull (2000) Table 2.1 C_P(K, .05) and Table 2.3 C_B(K, .05)
    (1, 1.960, 1.960), (2, 2.178, 1.977), (3, 2.289, 2.004), (4, 2.361, 2.024), (5, 2.413, 2.040),
])
def test_classical_pocock_and_obrien_fleming_constants(k, c_pocock, c_obf):
    assert classical_boundaries(k, shape="pocock").z == pytest.approx([c_pocock] * k, abs=6e-4)
    obf = classical_boundaries(k).z
    assert obf[-1] == pytest.approx(c_obf, abs=6e-4)
    assert obf == pytest.approx([obf[-1] * math.sqrt(k / j) for j in range(1, k + 1)], rel=1e-9)


def test_crossing_probabilities_match_scipy_multivariate_normal():
    # an independent integration (Genz) of P(|Z_j| < z_j for all j) with corr(Z_i, Z_j) = √(t_i/t_j)
    for info in [(6, 12, 24), (1, 3, 4), (10, 20)]:
        r = sequential_boundaries(len(info), spending="pocock", information=info)
        t = np.array(r.information)
        cov = np.sqrt(np.minimum.outer(t, t) / np.maximum.outer(t, t))
        z = np.array(r.z)
        inside = sps.multivariate_normal(mean=np.zeros(t.size), cov=cov).cdf(z, lower_limit=-z, rng=1)
        assert 1 - inside == pytest.approx(0.05, abs=2e-4)
        assert crossing_probabilities(r.z, info).sum() == pytest.approx(0.05, abs=1e-7)


def test_family_wise_error_under_the_null_by_simulation():
    # 200,000 seeded Brownian paths observed at 6, 12 and 24 seeds' information
    r = sequential_boundaries(3, information=(6, 12, 24))
    rng = np.random.default_rng(2026)
    inc = rng.normal(size=(200_000, 3)) * np.sqrt(np.diff([0.0, *r.information]))
    z = np.cumsum(inc, axis=1) / np.sqrt(r.information)
    crossed = np.abs(z) >= np.array(r.z)
    first = crossed & (np.cumsum(crossed, axis=1) == 1)
    se = math.sqrt(0.05 * 0.95 / 200_000)
    assert abs(crossed.any(axis=1).mean() - 0.05) < 3 * se
    assert first.mean(axis=0) == pytest.approx(r.alpha_spent, abs=4 * se)
    # without the correction, three looks at 1.96 would spend far more than α
    assert (np.abs(z) >= 1.96).any(axis=1).mean() > 0.09


def test_paired_t_looks_on_seeds_keep_the_error_near_alpha():
    # 20,000 seeded studies of 24 null seeds, looks at 6, 12, 24 seeds, each look's paired-t p
    # against the nominal p of the t boundary at its df (sequential_t_boundaries). The z boundary's
    # nominal p spends a little too much here (0.0508 over 400,000 studies, docs/statistics.md),
    # an excess 20,000 studies cannot resolve: this checks the t boundaries' level, not that excess.
    from prereg_kit.stats import sequential_t_boundaries

    r = sequential_t_boundaries((6, 12, 24))
    d = np.random.default_rng(7).normal(size=(20_000, 24))
    stop = np.zeros(20_000, dtype=bool)
    for n, nominal in zip((6, 12, 24), r.nominal_p):
        x = d[:, :n]
        t = x.mean(axis=1) / (x.std(axis=1, ddof=1) / math.sqrt(n))
        stop |= 2 * sps.t.sf(np.abs(t), n - 1) <= nominal
    assert abs(stop.mean() - 0.05) < 3 * math.sqrt(0.05 * 0.95 / 20_000)


def test_power_family_drift_and_refusals():
    lin = sequential_boundaries(4, spending="power", rho=1.0)
    assert lin.cumulative_alpha == pytest.approx([0.0125, 0.025, 0.0375, 0.05], rel=1e-12)
    power = crossing_probabilities(lin.z, lin.information, drift=2.8).sum()
    t = np.array(lin.information)
    inc = np.random.default_rng(3).normal(size=(100_000, 4)) * np.sqrt(np.diff([0.0, *t])) + 2.8 * np.diff([0.0, *t])
    simulated = (np.abs(np.cumsum(inc, axis=1) / np.sqrt(t)) >= np.array(lin.z)).any(axis=1).mean()
    assert power == pytest.approx(simulated, abs=3 * math.sqrt(0.25 / 100_000))
    assert power < sps.norm.sf(1.96 - 2.8) + sps.norm.cdf(-1.96 - 2.8)  # the looks cost power
    assert sequential_boundaries(1).z == pytest.approx((sps.norm.isf(0.025),), rel=1e-9)
    assert math.isinf(sequential_boundaries(2, information=(1e-6, 1)).z[0])  # nothing spent so early
    with pytest.raises(ValueError, match="spending must be one of"):
        sequential_boundaries(2, spending="haybittle")
    with pytest.raises(ValueError, match="strictly increasing"):
        sequential_boundaries(3, information=(6, 6, 24))
    with pytest.raises(ValueError, match="3 entries for 2 looks"):
        sequential_boundaries(2, information=(6, 12, 24))
    with pytest.raises(ValueError, match="rho"):
        sequential_boundaries(2, spending="power", rho=0)
    with pytest.raises(ValueError, match="n_looks"):
        sequential_boundaries(0)
