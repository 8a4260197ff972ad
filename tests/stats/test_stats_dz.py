"""p_from_dz: a printed paired-t p recomputed from the printed d_z and n (t = d_z·√n on n − 1 df),
against scipy.stats.t, over the rounding of every printed number."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from prereg_kit.stats import p_from_dz


@pytest.mark.parametrize("test,sf", [("two-sided", lambda t, df: 2 * sps.t.sf(abs(t), df)),
                                     ("greater", lambda t, df: sps.t.sf(t, df)),
                                     ("less", lambda t, df: sps.t.cdf(t, df))])
@pytest.mark.parametrize("d_z,n", [("0.23", 32), ("-1.83", 6), ("1.00", 5), ("-0.77", 10), ("-0.15", 8)])
def test_superiority_p_is_the_t_distribution_at_d_z_root_n(test, sf, d_z, n):
    """The range is scipy's p at the two ends of d_z's rounding interval."""
    d, h = float(d_z), 0.005
    ends = sorted(sf(x * math.sqrt(n), n - 1) for x in (d - h, d + h))
    r = p_from_dz(d_z, n, ".5", test=test)
    assert r.df == n - 1
    assert r.p_low == pytest.approx(ends[0], rel=1e-12) and r.p_high == pytest.approx(ends[1], rel=1e-12)


def test_tost_p_is_the_larger_one_sided_p_over_the_rounding_box():
    """TOST at ±m with s = |Δ|/|d_z|: max(P(T ≥ (Δ+m)/se), P(T ≤ (Δ−m)/se)), se = s/√n, scanned by scipy."""
    n, m = 14, 0.03
    ps = []
    for delta in np.linspace(-0.0055, -0.0045, 11):
        for dz in np.linspace(0.115, 0.125, 11):
            se = abs(delta) / dz / math.sqrt(n)
            ps.append(max(sps.t.sf((delta + m) / se, n - 1), sps.t.cdf((delta - m) / se, n - 1)))
    r = p_from_dz("-0.12", n, "0.025", test="tost", mean="-0.005", margin=m)
    assert r.p_low == pytest.approx(min(ps), rel=1e-9) and r.p_high == pytest.approx(max(ps), rel=1e-9)
    assert r.consistent


def test_printed_values_of_the_paper_are_consistent_and_near_misses_are_not():
    # §H.4: one-sided paired-t 0.0033 (α = 4: d_z −1.83, n = 6) and 0.00025 (α = 5: d_z −2.15, n = 8)
    assert p_from_dz("-1.83", 6, "0.0033", test="less").consistent
    assert p_from_dz("-2.15", 8, "0.00025", test="less").consistent
    # attacks: the other direction, a two-sided reading, a neighbouring printed value, the wrong n
    assert not p_from_dz("-1.83", 6, "0.0033", test="greater").consistent
    assert not p_from_dz("-1.83", 6, "0.0033", test="two-sided").consistent
    assert not p_from_dz("-1.83", 6, "0.0036", test="less").consistent
    assert not p_from_dz("-1.83", 7, "0.0033", test="less").consistent
    # §G.2: the sign-opposition gate, one-sided t31 = 1.31, p = 0.100; two-sided it would be 0.20
    assert p_from_dz("0.23", 32, "0.100", test="greater").consistent
    assert not p_from_dz("0.23", 32, "0.100", test="two-sided").consistent


def test_unusable_input_is_a_clear_error():
    with pytest.raises(ValueError, match="test must be one of"):
        p_from_dz("0.5", 8, ".1", test="one-sided")
    with pytest.raises(ValueError, match="n >= 2"):
        p_from_dz("0.5", 1, ".1")
    with pytest.raises(ValueError, match="needs the printed mean"):
        p_from_dz("0.5", 8, ".1", test="tost", margin=0.03)
    with pytest.raises(ValueError, match="rounds to 0"):
        p_from_dz("0.5", 8, ".1", test="tost", mean="0.000", margin=0.03)
