"""The old names of the statistics, kept for one release: each still answers as before and warns
(DeprecationWarning) that it goes; the new names warn nothing."""

from __future__ import annotations

import warnings

import pytest

from prereg_kit import stats
from prereg_kit.stats import equivalence, minimal_effect, welch

D = [0.011, 0.004, 0.019, 0.008, 0.013, 0.002]
ARM = [0.61, 0.63, 0.60, 0.62]
OTHER = [0.60, 0.61, 0.59, 0.615]


@pytest.mark.parametrize("module, old", [(stats, "Tost"), (stats, "MinimalEffect"), (stats, "WelchTost"),
                                         (equivalence, "Tost"), (minimal_effect, "MinimalEffect"),
                                         (welch, "WelchTost")])
def test_an_old_result_type_is_the_one_two_one_sided_type_and_warns(module, old):
    with pytest.warns(DeprecationWarning, match=f"{old} is deprecated, use TwoOneSided"):
        cls = getattr(module, old)
    assert cls is stats.TwoOneSided
    with pytest.warns(DeprecationWarning):
        assert isinstance(stats.tost_paired(D, margin=0.02), getattr(module, old))


def test_an_unknown_name_is_still_an_attribute_error():
    with pytest.raises(AttributeError, match="Tosst"):
        stats.Tosst  # noqa: B018
    with pytest.raises(AttributeError):
        equivalence.MinimalEffect  # noqa: B018 - each module keeps only its own old name


@pytest.mark.parametrize("old, call, new", [
    ("noninferiority", lambda: stats.noninferiority(D, margin=0.01),
     lambda: stats.noninferiority_paired(D, margin=0.01)),
    ("minimal_effect_test", lambda: stats.minimal_effect_test(D, 0.002),
     lambda: stats.minimal_effect_paired(D, margin=0.002)),
    ("minimal_effect_test", lambda: stats.minimal_effect_test(D, -0.001, 0.003),
     lambda: stats.minimal_effect_paired(D, margin=(-0.001, 0.003))),
    ("power_noninferiority", lambda: stats.power_noninferiority(12, 0.0, 0.02, margin=0.01),
     lambda: stats.power_noninferiority_paired(12, 0.0, 0.02, margin=0.01)),
    ("wilcoxon_tost", lambda: stats.wilcoxon_tost(D, -0.02, 0.03),
     lambda: stats.wilcoxon_tost(D, margin=(-0.02, 0.03))),
    ("wilcoxon_tost", lambda: stats.wilcoxon_tost(D, 0.02), lambda: stats.wilcoxon_tost(D, margin=0.02)),
])
def test_an_old_function_answers_as_the_new_one_and_warns(old, call, new):
    with pytest.warns(DeprecationWarning, match=f"{old}.* is deprecated"):
        got = call()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new name warns nothing
        want = new()
    assert got == want


def test_the_bounds_go_one_way_not_both():
    """An old positional bound beside margin=, or three bounds, is refused rather than guessed."""
    with pytest.raises(TypeError, match="margin=m or margin=\\(low, high\\)"):
        stats.wilcoxon_tost(D, 0.02, margin=0.02)
    with pytest.raises(TypeError):
        stats.wilcoxon_tost(D, -0.02, 0.0, 0.03)
    with pytest.raises(ValueError, match="margin is required"):
        stats.wilcoxon_tost(D)
    with pytest.raises(TypeError):
        stats.minimal_effect_paired(D, 0.002)  # the margin is a keyword


def test_one_result_type_for_the_three_two_one_sided_tests():
    paired = stats.tost_paired(D, margin=0.02)
    met = stats.minimal_effect_paired(D, margin=0.002)
    unpaired = stats.tost_welch(ARM, OTHER, margin=0.02)
    assert {type(paired), type(met), type(unpaired)} == {stats.TwoOneSided}
    assert (paired.kind, met.kind, unpaired.kind) == ("equivalence", "minimal-effect", "equivalence")
    assert paired.equivalent == paired.holds and not paired.shown
    assert met.shown == met.holds and not met.equivalent
    assert unpaired.n == len(ARM) + len(OTHER) and unpaired.sd is None and unpaired.df != int(unpaired.df)
    assert unpaired.n_dropped == 0 and stats.tost_welch([*ARM, float("nan")], OTHER, margin=0.02).n_dropped == 1
    assert "t(" in stats.describe(unpaired) and "equivalent" in stats.describe(unpaired)
