"""solve_power_paired against statsmodels' TTestPower and pingouin's power_ttest; tost_summary
against TOSTER's tsum_TOST known result and the data-level functions."""

import math

import numpy as np
import pingouin as pg
import pytest
from statsmodels.stats.power import TTestPower

from prereg_kit.stats import (
    effect_size_paired,
    paired_t,
    seeds_needed,
    solve_power_paired,
    tost_paired,
    tost_summary,
)

SM_ALT = {"two-sided": "two-sided", "greater": "larger", "less": "smaller"}


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_each_unknown_matches_statsmodels(alternative):
    sm, alt = TTestPower(), SM_ALT[alternative]
    sign = -1 if alternative == "less" else 1
    for es, n in ((0.3, 12), (0.8, 6), (1.5, 24)):
        es = sign * es
        p = solve_power_paired(n=n, effect=es * 0.012, sd=0.012, alternative=alternative, power=None)
        assert p.power == pytest.approx(sm.power(effect_size=es, nobs=n, alpha=0.05, alternative=alt), rel=1e-9)
        r = solve_power_paired(effect=es * 0.012, sd=0.012, power=0.8, alternative=alternative)
        ref = sm.solve_power(effect_size=es, alpha=0.05, power=0.8, alternative=alt)
        assert r.n_continuous == pytest.approx(ref, rel=1e-6) and r.n == math.ceil(ref)
        e = solve_power_paired(n=n, sd=1.0, power=0.8, effect=None, alternative=alternative)
        # statsmodels' own root-finder stops at about 1e-6 relative
        assert e.effect == pytest.approx(sm.solve_power(nobs=n, alpha=0.05, power=0.8, alternative=alt), rel=1e-5)


def test_detectable_effect_and_alpha_match_pingouin():
    for n in (6, 20):
        e = solve_power_paired(n=n, sd=1.0, power=0.8, effect=None)
        assert e.effect == pytest.approx(pg.power_ttest(n=n, power=0.8, contrast="paired"), rel=1e-6)
        a = solve_power_paired(n=n, effect=0.9, alpha=None, power=0.8)
        assert a.alpha == pytest.approx(pg.power_ttest(d=0.9, n=n, power=0.8, alpha=None, contrast="paired"), rel=1e-5)


def test_rounded_n_is_the_planners_seed_count():
    # the paper's S27 pilot: SD 0.012 per pair, a gain of +0.008
    r = solve_power_paired(effect=0.008, sd=0.012, power=0.8)
    s = seeds_needed(0.008, 0.012, power=0.8)
    assert r.n == s.n and r.power == pytest.approx(s.power, rel=1e-12)
    assert r.n - 1 < r.n_continuous <= r.n


def test_power_refusals():
    with pytest.raises(ValueError, match="exactly one"):
        solve_power_paired(n=10, effect=0.5, power=0.8)
    with pytest.raises(ValueError, match="exactly one"):
        solve_power_paired(n=None, effect=None, power=0.8)
    with pytest.raises(ValueError, match="sd"):
        solve_power_paired(n=10, effect=0.5, sd=0, power=None)
    with pytest.raises(ValueError, match="no n solves"):
        solve_power_paired(effect=0.5, power=0.01)  # below α: already exceeded by two seeds


def test_tost_summary_toster_known_result():
    # TOSTER tsum_TOST(m1=5.83, m2=5.75, sd1=1.17, sd2=1.30, n1=65, n2=65, r12=0.745, paired=TRUE,
    # eqb=0.34) — the TOSTpaired.raw known result of TOSTER's test-known_results.R
    sd = math.sqrt(1.17**2 + 1.30**2 - 2 * 0.745 * 1.17 * 1.30)
    r = tost_summary(65, 5.83 - 5.75, sd, margin=0.34)
    assert r.t_lower == pytest.approx(3.803437, rel=1e-5) and r.p_lower == pytest.approx(0.0001606103, rel=1e-4)
    assert r.t_upper == pytest.approx(-2.354508, rel=1e-5) and r.p_upper == pytest.approx(0.01081349, rel=1e-4)
    assert (r.ci_low, r.ci_high) == pytest.approx((-0.1043032, 0.2643032), rel=1e-5)
    assert r.decision == "equivalent and not different from 0"


def test_tost_summary_equals_the_data_level_functions():
    d = np.array([0.031, 0.022, 0.018, 0.027, 0.012, 0.025, 0.034, 0.016, 0.029, 0.021])
    r = tost_summary(10, d.mean(), d.std(ddof=1), margin=0.02)
    t, tost, es = paired_t(d), tost_paired(d, margin=0.02), effect_size_paired(d, confidence=0.90)
    assert (r.t, r.p) == pytest.approx((t.t, t.p), rel=1e-12)
    assert (r.p_tost, r.ci_low, r.ci_high) == pytest.approx((tost.p, tost.ci_low, tost.ci_high), rel=1e-12)
    assert r.g_z_ci == pytest.approx(es.g_z_ci, rel=1e-10)
    assert r.significant and not r.equivalent and r.decision == "different from 0 and not equivalent"
    with pytest.raises(ValueError, match="margin"):
        tost_summary(10, 0.01, 0.01, margin=-0.02)
