"""verdict: the readings of superiority, equivalence and non-inferiority contrasts."""

import math

import pytest

from prereg_kit.stats import holm, paired_t, tost_paired, verdict


def test_superiority_readings():
    assert verdict("superiority", p=0.016, estimate=0.007).reading == "gain"
    assert verdict("superiority", p=0.001, ci_low=-0.02, ci_high=-0.01).reading == "deficit"
    assert verdict("superiority", p=0.3, estimate=0.004).reading == "inconclusive"
    assert verdict("superiority", p=0.01, ci_low=0.002, ci_high=math.inf).reading == "gain"
    v = verdict("superiority", p=0.049, estimate=-0.01, alpha=0.05)
    assert v.shown and v.reading == "deficit" and "0.049" in v.reason


def test_equivalence_readings():
    assert verdict("equivalence", p=0.004, ci_low=-0.01, ci_high=0.012, margin=0.02).reading == "equivalent"
    assert verdict("equivalence", p=0.07).reading == "not shown equivalent"
    v = verdict("equivalence", p=0.01, ci_low=-0.01, ci_high=0.025, margin=0.02)
    assert v.reading == "not shown equivalent" and "not inside" in v.reason


def test_noninferiority_readings():
    assert verdict("non-inferiority", p=0.003, ci_low=-0.012, margin=0.02).reading == "non-inferior"
    assert verdict("noninferiority", p=0.2).reading == "not shown non-inferior"
    assert verdict("NI", p=0.01, ci_low=-0.03, margin=0.02).reading == "not shown non-inferior"


def test_holm_adjusted_pipeline():
    # Two primary contrasts in one family: the verdict reads the adjusted p.
    a = paired_t([0.01, 0.012, 0.008, 0.011, 0.009, 0.013])
    b = paired_t([0.004, -0.006, 0.01, -0.002, 0.003, 0.0])
    adj = holm([a.p, b.p])
    assert verdict("superiority", p=adj[0], estimate=a.mean).reading == "gain"
    assert verdict("superiority", p=adj[1], estimate=b.mean).reading == "inconclusive"
    t = tost_paired([0.004, -0.006, 0.01, -0.002, 0.003, 0.0], margin=0.02)
    assert verdict("equivalence", p=t.p, ci_low=t.ci_low, ci_high=t.ci_high, margin=0.02).shown


def test_errors():
    with pytest.raises(ValueError, match="kind"):
        verdict("bigger", p=0.1)
    with pytest.raises(ValueError, match="direction"):
        verdict("superiority", p=0.01)
    with pytest.raises(ValueError, match="p must"):
        verdict("equivalence", p=float("nan"))
    with pytest.raises(ValueError, match="margin"):
        verdict("non-inferiority", p=0.01, ci_low=-0.01)
