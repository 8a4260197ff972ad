"""holm against statsmodels and pingouin; NaN rule; family-wise error under the global null."""

import numpy as np
import pingouin as pg
import pytest
from statsmodels.stats.multitest import multipletests

from prereg_kit.stats import holm


def _matches_statsmodels_and_pingouin_random(statsmodels_draws):
    rng = np.random.default_rng(0)
    for m in (1, 2, 3, 7, 20):
        for draw in range(20):
            p = rng.uniform(0, 1, m) ** 3
            ours = holm(p)
            if draw < statsmodels_draws:  # multipletests takes ~0.2 s a call here; pingouin checks every draw
                ref = multipletests(p, method="holm")[1]
                np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=0)
            np.testing.assert_allclose(ours, pg.multicomp(p, method="holm")[1], rtol=1e-12)


def test_matches_statsmodels_and_pingouin_random_quick():
    # every draw against pingouin, the first draw of each family size against statsmodels too;
    # statsmodels on the first four draws runs in the slow step
    _matches_statsmodels_and_pingouin_random(statsmodels_draws=1)


@pytest.mark.slow
def test_matches_statsmodels_and_pingouin_random():
    _matches_statsmodels_and_pingouin_random(statsmodels_draws=4)


def test_ties_and_cap():
    np.testing.assert_allclose(holm([0.01, 0.01, 0.5]), multipletests([0.01, 0.01, 0.5], method="holm")[1])
    assert holm([0.6, 0.9]).max() == 1.0


def test_nan_left_out_of_family():
    p = np.array([0.01, np.nan, 0.04, 0.03])
    out = holm(p)
    assert np.isnan(out[1])
    np.testing.assert_allclose(out[[0, 2, 3]], multipletests([0.01, 0.04, 0.03], method="holm")[1])
    ref = pg.multicomp(p, method="holm")[1]
    np.testing.assert_allclose(out[[0, 2, 3]], ref[[0, 2, 3]])


def test_monotone_in_sorted_order_and_input_order_kept():
    p = np.array([0.04, 0.001, 0.03, 0.2, 0.01])
    out = holm(p)
    order = np.argsort(p)
    assert np.all(np.diff(out[order]) >= 0)
    assert np.all(out >= p)
    assert out[1] == pytest.approx(0.005)  # the smallest p times m


def test_edges_and_errors():
    assert holm([]).size == 0
    assert np.isnan(holm([np.nan, np.nan])).all()
    assert holm(0.02)[0] == 0.02
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm([0.1, 1.2])


def test_familywise_error_under_global_null():
    # 4,000 families of 5 null contrasts, independent and equicorrelated (rho = .5) test statistics.
    rng = np.random.default_rng(11)
    from scipy import stats as sps
    for rho in (0.0, 0.5):
        z = np.sqrt(1 - rho) * rng.standard_normal((4000, 5)) + np.sqrt(rho) * rng.standard_normal((4000, 1))
        p = 2 * sps.norm.sf(np.abs(z))
        fwer = np.mean([(holm(row) < 0.05).any() for row in p])
        assert fwer <= 0.05 + 2.5 * np.sqrt(0.05 * 0.95 / 4000)
