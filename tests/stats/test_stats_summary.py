"""from_summary: exact recomputation, rounding ranges, and the paper's Table 3 rows."""

import numpy as np
import pytest

from prereg_kit.stats import from_summary, noninferiority_paired, paired_t, tost_paired
from prereg_kit.stats.summary import parse_number, parse_p


def test_exact_inputs_reproduce_the_tests():
    rng = np.random.default_rng(0)
    for n in (5, 12, 24):
        d = rng.normal(0.006, 0.012, n)
        pt = paired_t(d)
        r = from_summary(pt.mean, pt.ci_low, pt.ci_high, n, margin=0.02, family_size=3, decimals=15)
        assert r.t == pytest.approx(pt.t, rel=1e-9)
        assert r.p == pytest.approx(pt.p, rel=1e-8)
        assert r.sd == pytest.approx(pt.sd, rel=1e-9)
        assert r.tost_p == pytest.approx(tost_paired(d, margin=0.02).p, rel=1e-8)
        assert r.noninferiority_p == pytest.approx(noninferiority_paired(d, margin=0.02).p, rel=1e-8)
        assert r.holm_p == pytest.approx(min(1.0, 3 * pt.p), rel=1e-8)
        assert r.p_low <= r.p <= r.p_high


def test_parse_printed_numbers_and_p_values():
    assert parse_number("+0.007") == (0.007, pytest.approx(0.0005))
    assert parse_number("\u22120.0003")[0] == -0.0003
    assert parse_number("0.010")[1] == pytest.approx(0.0005)
    assert parse_number(0.010)[1] == pytest.approx(0.005)  # floats lose trailing zeros
    assert parse_p(".016")[:2] == pytest.approx((0.0155, 0.0165))
    assert parse_p("5\u00d710^\u22125")[:2] == pytest.approx((4.5e-5, 5.5e-5))
    assert parse_p("<10^-8")[:2] == (0.0, pytest.approx(1e-8))
    assert parse_p("p<.001")[:2] == (0.0, 0.001)
    assert parse_p("1.00")[:2] == pytest.approx((0.995, 1.0))
    assert parse_p(7.9e-6)[:2] == pytest.approx((7.85e-6, 7.95e-6))
    for bad in ("abc", "1.5"):
        with pytest.raises(ValueError):
            parse_p(bad)


# Table 3 of the dense-rewards paper, printed rows: (label, n, mean, CI, kwargs, reported).
TABLE3 = [
    # S1, Monte-Carlo k=4: Holm p = 5×10^-5; its family is not listed, and the value fits a family of 3.
    ("MC k=4", 5, "-0.143", "-0.160", "-0.127", dict(family_size=3), {"holm_p": "5x10^-5"}),
    ("MC k=1", 12, "-0.068", "-0.076", "-0.060", dict(family_size=2), {"holm_p": "<10^-8"}),
    ("k=1 minus k=4", 12, "+0.081", "+0.071", "+0.090", dict(family_size=2), {"holm_p": "<10^-8"}),
    ("critic TD, S26", 24, "-0.004", "-0.012", "+0.003", dict(margin=0.02, family_size=2), {"tost_holm_p": "<10^-4"}),
    ("critic TD, S4", 5, "-0.008", "-0.028", "+0.012", dict(margin=0.02), {"tost_p": ".083"}),
    ("critic baseline, S26", 24, "+0.007", "+0.002", "+0.012", dict(margin=0.02, family_size=2),
     {"holm_p": ".016", "tost_holm_p": "<10^-5"}),
    ("critic baseline, S4", 5, "+0.006", "-0.014", "+0.026", dict(margin=0.02), {"tost_p": ".062"}),
    ("critic TD, Qwen3", 9, "-0.0003", "-0.016", "+0.016", dict(margin=0.02), {"tost_p": ".011"}),
    ("critic baseline, Qwen3", 9, "+0.010", "-0.004", "+0.023", dict(margin=0.02), {"p": ".15"}),
]


@pytest.mark.parametrize("label, n, mean, lo, hi, kwargs, reported", TABLE3, ids=[r[0] for r in TABLE3])
def test_paper_table3_rows_consistent(label, n, mean, lo, hi, kwargs, reported):
    r = from_summary(mean, lo, hi, n, reported=reported, **kwargs)
    assert r.mean_matches_ci
    assert r.consistent, [c for c in r.checks if not c.consistent]


# Table 15 (S35, n = 8, Holm over the four primary contrasts T1–T4, TOST at ±0.02) and S8 (family
# not stated; the printed Holm p needs a family of three).
S35 = dict(margin=0.02, family_size=4)
OTHER_ROWS = [
    ("S35 T1 MC k=4", 8, "-0.033", "-0.043", "-0.024", S35, {"holm_p": "2x10^-4", "tost_p": ".99"}),
    ("S35 T2 MC k=1", 8, "-0.011", "-0.028", "+0.005", S35, {"holm_p": ".15", "tost_p": ".13"}),
    ("S35 T3 reuse", 8, "-0.052", "-0.063", "-0.041", S35, {"holm_p": "<10^-4", "tost_p": "1.00"}),
    ("S35 T4 VinePPO", 8, "-0.011", "-0.017", "-0.004", S35, {"holm_p": ".013", "tost_p": ".005"}),
    ("S8 critic filter", 12, "+0.017", "+0.006", "+0.028", dict(family_size=3), {"holm_p": ".016"}),
]


@pytest.mark.parametrize("label, n, mean, lo, hi, kwargs, reported", OTHER_ROWS, ids=[r[0] for r in OTHER_ROWS])
def test_paper_other_rows_consistent(label, n, mean, lo, hi, kwargs, reported):
    assert from_summary(mean, lo, hi, n, reported=reported, **kwargs).consistent


def test_s8_holm_value_does_not_fit_a_family_of_two():
    r = from_summary("+0.017", "+0.006", "+0.028", 12, family_size=2, reported={"holm_p": ".016"})
    assert r.consistent is False  # 2 × p ≤ .0154 < .0155: the family must be larger


def test_table3_point_values():
    # The example: baseline-form critic, n = 24, +0.007 [+0.002, +0.012], Holm p = .016 (family of 2).
    r = from_summary("+0.007", "+0.002", "+0.012", 24, margin=0.02, family_size=2)
    assert round(r.holm_p, 3) == 0.016
    assert r.tost_p < 1e-5
    assert round(from_summary("-0.008", "-0.028", "+0.012", 5, margin=0.02).tost_p, 2) == 0.09  # printed .083
    assert round(from_summary("+0.006", "-0.014", "+0.026", 5, margin=0.02).tost_p, 3) == 0.062
    assert round(from_summary("-0.0003", "-0.016", "+0.016", 9, margin=0.02).tost_p, 3) == 0.011
    # Non-inferior at -0.02 (Table 3: "p=.15, non-inferior").
    assert from_summary("+0.010", "-0.004", "+0.023", 9, margin=0.02).noninferiority_p < 0.05


def test_inconsistent_reports_are_flagged():
    r = from_summary("+0.007", "+0.002", "+0.012", 24, reported={"p": ".08"})
    assert r.consistent is False and not r.checks[0].consistent
    r = from_summary("+0.010", "+0.002", "+0.012", 24)  # mean far from the interval's centre
    assert not r.mean_matches_ci
    assert from_summary("+0.007", "+0.002", "+0.012", 24).consistent is None


def test_errors():
    with pytest.raises(ValueError, match="below"):
        from_summary(0.0, 0.01, -0.01, 10)
    with pytest.raises(ValueError, match="family_size"):
        from_summary(0.0, -0.01, 0.01, 10, reported={"holm_p": ".5"})
    with pytest.raises(ValueError, match="margin"):
        from_summary(0.0, -0.01, 0.01, 10, reported={"tost_p": ".5"})
    with pytest.raises(ValueError, match="unknown"):
        from_summary(0.0, -0.01, 0.01, 10, reported={"q": ".5"})
    with pytest.raises(ValueError):
        from_summary(0.0, -0.01, 0.01, 1)
