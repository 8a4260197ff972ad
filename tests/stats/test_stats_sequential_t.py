"""sequential_t_boundaries: group-sequential boundaries exact for the paired t at each look's degrees
of freedom. Look 1 against the t quantile; the sufficient-statistics sampler against paired t
statistics computed from the data; the family-wise error of the looks under H0 on null studies
drawn directly (benchmarks/sequential_t_error.py), beside the z rule's excess, which the same
studies must show; the repeated p-values against the thresholds."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
from paths import ROOT

from prereg_kit.stats import sequential_t_boundaries, t_crossing_probabilities
from prereg_kit.stats.group_sequential import look_threshold, repeated_p, sequential_holm
from prereg_kit.stats.sequential_t import N_PATHS, SEED, t_look_sample, t_repeated_alpha
from prereg_kit.stats.tdist import t_isf

ALPHA = 0.05


@pytest.fixture(scope="module")
def design():
    """Looks at 2 and 4 seeds (registry/cpu-grpo-sequential's): its sample is drawn once for the
    module's tests (a module fixture keeps them in one worker)."""
    units = (2, 4)
    t_look_sample(units)
    return units


def _bench():
    spec = importlib.util.spec_from_file_location("sequential_t_error", ROOT / "benchmarks" / "sequential_t_error.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_one_look_is_the_fixed_sample_t_and_look_one_is_exact(design):
    assert sequential_t_boundaries((5,)).t == pytest.approx((t_isf(0.025, 4),), rel=1e-12)
    b = sequential_t_boundaries((2, 4), spending="pocock")
    assert b.t[0] == pytest.approx(t_isf(b.alpha_spent[0] / 2, 1), rel=1e-12)
    assert b.nominal_p[0] == pytest.approx(b.cumulative_alpha[0], rel=1e-9)  # look 1 spends its α exactly
    assert b.df == (1, 3) and sum(b.alpha_spent) == pytest.approx(ALPHA, rel=1e-12)
    assert b.mc_se == pytest.approx(math.sqrt((ALPHA - b.alpha_spent[0]) * 0.95 / N_PATHS))


def test_the_boundaries_are_a_fixed_function_of_the_design(design):
    """The default sample's boundaries, stored: a change means numpy's stream or the sampler
    changed (the new boundaries would be as good, within their Monte-Carlo error, but an analysis
    would no longer reproduce a recorded look's)."""
    assert sequential_t_boundaries(design).t == pytest.approx((208.68203014288673, 3.2518677711486816), rel=1e-6)


def test_later_looks_spend_exactly_their_share_of_the_sample(design):
    """On the sample the boundaries come from, each look after the first is crossed first by
    exactly round(spent·N) paths; look 1 (exact) within its binomial error."""
    b = sequential_t_boundaries(design, spending="obrien-fleming")
    first = t_crossing_probabilities(b.t, b.units, n_paths=N_PATHS, seed=SEED)
    assert first[1:] == pytest.approx(b.alpha_spent[1:], abs=1.0 / N_PATHS)
    assert abs(first[0] - b.alpha_spent[0]) < 4 * math.sqrt(b.alpha_spent[0] / N_PATHS)


def test_the_sampler_draws_the_joint_law_of_paired_t_statistics():
    """Block sums and χ² within-block sums of squares (a block of one unit included) against the t
    statistics of the data themselves: each look's marginal is t(n − 1), and the chance of crossing
    two looks together matches, within 4 binomial SE on 200,000 paths each."""
    units, n = (2, 3, 6), 200_000
    a = t_look_sample(units, n, seed=11)
    direct = np.abs(_bench().null_t(units, n, seed=12))
    se = math.sqrt(0.25 / n)
    for k, u in enumerate(units):
        c = t_isf(0.05, u - 1)  # two-sided 10% point
        assert abs((a[:, k] >= c).mean() - 0.1) < 4 * math.sqrt(0.09 / n)
    for j, k in ((0, 1), (1, 2), (0, 2)):
        cj, ck = np.median(direct[:, j]), np.median(direct[:, k])
        assert abs(((a[:, j] >= cj) & (a[:, k] >= ck)).mean() - ((direct[:, j] >= cj) & (direct[:, k] >= ck)).mean()) < 4 * se * math.sqrt(2)


def _check_rows(rows):
    for r in rows:
        bound = ALPHA + 3 * math.hypot(r["se_t_boundaries"], r["boundary_mc_se"])
        assert r["fwer_t_boundaries"] <= bound, r


def test_family_wise_error_at_two_and_four_seeds_quick(design):
    """100,000 null studies at looks of 2 and 4 seeds (registry/cpu-grpo-sequential's design), every
    spending function a plan may name, with and without futility: the t boundaries keep α within
    3 SE; the z rule's excess with Pocock spending (0.0045 at 400,000 studies) shows here too."""
    bench = _bench()
    rows = bench.rows_for(design, 100_000, seed=2026)
    _check_rows(rows)
    pocock = next(r for r in rows if r["spending"] == "pocock" and not r["futility"])
    assert pocock["fwer_z_rule"] > ALPHA + 3 * pocock["se_z_rule"], pocock


@pytest.mark.slow
def test_family_wise_error_at_full_size():
    """The benchmark at its full size (400,000 null studies per design; docs/statistics.md): looks at
    2, 3 and 4 seeds per look, two and three looks, every spending function, with and without
    futility: the t boundaries within 3 SE of α (both Monte-Carlo errors), and the z rule's excess
    visible (beyond 3 SE) for Pocock and power ρ = 1 spending at every size."""
    bench = _bench()
    for i, units in enumerate(bench.DESIGNS):
        rows = bench.rows_for(units, 400_000, seed=2026 + i)
        _check_rows(rows)
        for r in rows:
            if r["spending"] in ("pocock", "power rho=1") and not r["futility"]:
                assert r["fwer_z_rule"] > ALPHA + 3 * r["se_z_rule"], r


def test_repeated_p_on_the_t_scale_is_the_threshold_it_reaches(design):
    """The repeated p of a paired-t p is the smallest α whose look threshold the p meets (on the
    t boundaries), and Holm at α on the repeated p-values is sequential_holm's step-down."""
    units = design
    for look, p in ((1, 0.001), (2, 0.0012), (2, 0.3)):
        rp = repeated_p(p, units, look, units=units)
        assert look_threshold(rp, units, look, units=units) >= p
        assert look_threshold(rp * (1 - 1e-6), units, look, units=units) < p
    assert repeated_p(0.9, units, 2, units=units) == 1.0
    assert t_repeated_alpha(math.nan, units, 2) != t_repeated_alpha(math.nan, units, 2)  # NaN in, NaN out
    p = np.array([0.004, 0.03, 0.02])
    for look in (2,):
        rej = sequential_holm(p, ALPHA, units, look, units=[units] * 3)
        rp = np.sort([repeated_p(x, units, look, units=units) for x in p])
        steps = np.cumprod(rp <= ALPHA / np.arange(3, 0, -1)).astype(bool)
        assert rej.sum() == steps.sum(), (look, rej, rp)


def test_the_t_boundaries_are_stricter_than_the_z_rule_at_few_seeds():
    """The z rule's nominal p at look 2 of (2, 4) is above the t boundary's (why it spends too
    much); at 200 seeds per look the two nearly agree."""
    z_rule = look_threshold(ALPHA, (2, 4), 2, "pocock")
    t_rule = look_threshold(ALPHA, (2, 4), 2, "pocock", units=(2, 4))
    assert t_rule < z_rule - 0.003
    big = (200, 400)
    assert look_threshold(ALPHA, big, 2, "pocock", units=big) == pytest.approx(look_threshold(ALPHA, big, 2, "pocock"), abs=1e-3)


def test_refusals():
    with pytest.raises(ValueError, match="strictly increasing"):
        sequential_t_boundaries((4, 4))
    with pytest.raises(ValueError, match="at least 2"):
        sequential_t_boundaries((1, 4))
    with pytest.raises(ValueError, match="spending must be one of"):
        sequential_t_boundaries((2, 4), spending="haybittle")
    with pytest.raises(ValueError, match="rho"):
        sequential_t_boundaries((2, 4), spending="power", rho=-1.0)
    with pytest.raises(ValueError, match="2 boundaries for 3 looks"):
        t_crossing_probabilities([3.0, 2.0], (2, 4, 6), n_paths=1000)
