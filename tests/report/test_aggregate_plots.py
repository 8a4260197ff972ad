"""The performance-profile figure draws each configuration's profile and band, and refuses
profiles it cannot put on one axis."""

import numpy as np
import pytest

from prereg_kit.report.aggregate_plots import (
    draw_performance_profile,
    performance_profile_figure,
)
from prereg_kit.stats import performance_profile


def test_profile_lines_are_the_computed_fractions(tmp_path):
    rng = np.random.default_rng(0)
    taus = np.linspace(0, 1, 21)
    profiles = {name: performance_profile(rng.normal(mu, 0.15, (6, 3)), taus, n_resamples=200, seed=1)
                for name, mu in (("dense", 0.6), ("outcome", 0.5))}
    _, ax = draw_performance_profile(profiles, title="CPU study")
    lines = ax.get_lines()
    assert [ln.get_label() for ln in lines] == ["dense", "outcome"]
    for ln, prof in zip(lines, profiles.values()):
        assert np.allclose(ln.get_ydata(), prof.fraction) and np.allclose(ln.get_xdata(), taus)
    assert len(ax.collections) == 2  # one band each
    out = performance_profile_figure(profiles, tmp_path / "fig" / "profile.png", title="CPU study")
    assert out.exists() and out.stat().st_size > 1000


def test_refusals():
    with pytest.raises(ValueError, match="no profiles"):
        draw_performance_profile({}, title="t")
    s = np.ones((3, 2))
    a, b = performance_profile(s, [0.5], n_resamples=10), performance_profile(s, [0.5, 1.5], n_resamples=10)
    with pytest.raises(ValueError, match="share their thresholds"):
        draw_performance_profile({"a": a, "b": b}, title="t")
