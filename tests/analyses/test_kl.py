"""Reverse versus forward KL on Gaussian mixtures (multi-reward paper, Appendix B; Figure 8)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from analyses.kl import (
    _scalar_logpdf,
    approx_kl,
    detection_grid,
    detection_z,
    gaussian_mode_kl,
    logratio_moments,
    mixture_kl,
    mixture_logpdf,
    mixture_sample,
    mode_dropping_kl,
)


def test_exact_matches_closed_form_for_shifted_gaussians():
    # Benign drift (eps = 0): KL between N(0,1) and N(delta,1) is delta^2/2 in both directions.
    for delta in (0.3, 1.0, 2.5):
        fwd, rev = gaussian_mode_kl(0.0, 6.0, delta)
        assert math.isclose(fwd, delta**2 / 2, rel_tol=1e-8) and math.isclose(rev, delta**2 / 2, rel_tol=1e-8)


def test_the_quadratures_scalar_density_is_the_vectorized_one():
    """The exact divergence integrates a plain-float copy of the mixture log-density; on random
    mixtures of one to three components, at points out to far tails, it agrees with
    :func:`mixture_logpdf` to rounding."""
    rng = np.random.default_rng(0)
    for _ in range(500):
        k = int(rng.integers(1, 4))
        w, mu = rng.dirichlet(np.ones(k)), rng.normal(0.0, 5.0, k)
        x = rng.normal(0.0, 30.0, 4)
        want = mixture_logpdf(x, w, mu)
        got = np.array([_scalar_logpdf(w, mu)(v) for v in x])
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14)


def test_exact_matches_fine_grid():
    x = np.linspace(-40.0, 46.0, 400_001)
    lp, lq = mixture_logpdf(x, [1.0], [0.0]), mixture_logpdf(x, [0.95, 0.05], [0.0, 6.0])
    dx = x[1] - x[0]
    fwd, rev = gaussian_mode_kl(0.05, 6.0)
    assert math.isclose(fwd, np.sum(np.exp(lp) * (lp - lq)) * dx, rel_tol=1e-7)
    assert math.isclose(rev, np.sum(np.exp(lq) * (lq - lp)) * dx, rel_tol=1e-7)


def test_paper_values_invented_mode_eps_5pct_delta_6():
    # Multi-reward paper App. B: "At eps=5%, Delta=6: KL_fwd=0.0505, KL_rev=0.704 (14x)". Exact: 0.050575, 0.70303;
    # the printed values agree to 0.15% (they look like Monte-Carlo; see docs/multi-reward-analyses.md).
    fwd, rev = gaussian_mode_kl(0.05, 6.0)
    assert abs(fwd - 0.0505) < 1e-4 and abs(rev - 0.704) < 1.5e-3
    assert round(rev / fwd) == 14


def test_paper_values_mode_dropping():
    # "for mode dropping (bimodal base, policy keeps one mode) the ratio reverses (KL_fwd=8.31, KL_rev=0.689)".
    fwd, rev = mode_dropping_kl(6.0, 0.5)
    assert round(fwd, 2) == 8.31 and round(rev, 3) == 0.689


def test_paper_drift_invariance_of_the_difference():
    # "KL_rev - KL_fwd ~ eps(l-2) is nearly drift-invariant for delta <= 1 (0.65 at delta <= 0.5, 0.63 at delta=1)".
    diffs = {d: np.subtract(*gaussian_mode_kl(0.05, 6.0, d)[::-1]) for d in (0.0, 0.25, 0.5, 1.0)}
    assert all(round(diffs[d], 2) == 0.65 for d in (0.0, 0.25, 0.5)) and round(diffs[1.0], 2) == 0.63
    ell = math.log(0.05) + 18.0
    assert math.isclose(diffs[0.0], 0.05 * (ell - 2), rel_tol=0.01)


@pytest.mark.parametrize("sep", [5.0, 6.0, 8.0, 10.0, 12.0])
def test_approximations_within_5pct_for_separation_at_least_5(sep):
    # "the approximation is within 5% for Delta >= 5 at eps = 0.05".
    fwd, rev = gaussian_mode_kl(0.05, sep)
    afwd, arev = approx_kl(0.05, sep)
    assert abs(fwd / afwd - 1) < 0.05 and abs(rev / arev - 1) < 0.05


def test_approximation_fails_when_modes_overlap():
    fwd, rev = gaussian_mode_kl(0.05, 4.0)
    assert abs(rev / approx_kl(0.05, 4.0)[1] - 1) > 0.05


@pytest.mark.parametrize("eps", [0.01, 0.05, 0.2, 0.5])
@pytest.mark.parametrize("sep", [1.0, 6.0, 20.0])
def test_lemma_b1_forward_bound(eps, sep):
    # Lemma B.1(i): KL_fwd <= -log(1-eps) <= eps/(1-eps) for pi_T = (1-eps) pi_0 + eps pi_H.
    fwd, rev = gaussian_mode_kl(eps, sep)
    assert fwd <= -math.log(1 - eps) + 1e-12 <= eps / (1 - eps) + 1e-12
    assert rev >= 0 and fwd >= 0


def test_reverse_grows_without_bound_forward_saturates():
    vals = [gaussian_mode_kl(0.05, s) for s in (6.0, 10.0, 20.0)]
    assert vals[-1][1] > 9.0 and all(f < -math.log(0.95) for f, _ in vals)
    ratios = [r / f for f, r in vals]
    assert ratios == sorted(ratios)


def test_monte_carlo_is_seeded_and_unbiased():
    a = gaussian_mode_kl(0.05, 6.0, method="mc", n=2048, seed=3)
    assert a == gaussian_mode_kl(0.05, 6.0, method="mc", n=2048, seed=3)
    assert a != gaussian_mode_kl(0.05, 6.0, method="mc", n=2048, seed=4)
    fwd, rev = gaussian_mode_kl(0.05, 6.0)
    mc = np.array([gaussian_mode_kl(0.05, 6.0, method="mc", n=2048, seed=s) for s in range(40)])
    se = mc.std(axis=0, ddof=1) / math.sqrt(len(mc))
    assert abs(mc[:, 0].mean() - fwd) < 4 * se[0] and abs(mc[:, 1].mean() - rev) < 4 * se[1]
    big = mode_dropping_kl(method="mc", n=200_000, seed=1)
    assert abs(big[0] - 8.31) < 0.1 and abs(big[1] - 0.689) < 0.01


def test_bad_arguments():
    with pytest.raises(ValueError):
        gaussian_mode_kl(0.05, 6.0, method="grid")
    with pytest.raises(ValueError):
        gaussian_mode_kl(1.5, 6.0)
    with pytest.raises(ValueError):
        mixture_kl(([0.5, 0.6], [0, 1]), ([1.0], [0.0]))


def test_figure_builder_interface():
    import figures.build_gaussian_kl as b

    assert b.OUTPUT.endswith(".png") and b.DESCRIPTION and isinstance(b.INPUTS, str) and callable(b.build)
    assert callable(b.draw)


def test_figure_shows_forward_and_reverse_kl_against_separation_drift_and_cases():
    """Figure 8 of the multi-reward paper on small grids: four panels, their axes, their series, and every plotted
    number equal to the KL computed here (exact, Monte-Carlo mean and SD over seeds, approximations)."""
    from figures.build_gaussian_kl import EPS, draw

    seps, mc_seps, seeds, drifts = np.array([1.0, 6.0]), np.array([2.0, 6.0]), range(3), np.array([0.0, 1.0])
    fig, data = draw(separations=seps, mc_separations=mc_seps, mc_seeds=seeds, drifts=drifts)
    assert len(fig.axes) == 4
    a, b, c, d = fig.axes
    assert a.get_xlabel() == b.get_xlabel() == "separation Δ of the invented mode (units of the base SD)"
    assert c.get_xlabel() == "benign location drift δ of the bulk (units of the base SD)" and d.get_xlabel() == ""
    assert a.get_ylabel() == c.get_ylabel() == d.get_ylabel() == "KL divergence (nats)"
    assert b.get_ylabel() == "ratio KL_rev / KL_fwd (dimensionless)"

    kl = functools.cache(gaussian_mode_kl)  # exact quadrature takes about 0.5 s a call
    exact = np.array([kl(EPS, s) for s in seps])
    approx = np.array([approx_kl(EPS, s) for s in seps])
    mc = np.array([[gaussian_mode_kl(EPS, s, method="mc", n=2048, seed=k) for k in seeds] for s in mc_seps])
    ratio = mc[:, :, 1] / mc[:, :, 0]

    # (a) exact KL_fwd, KL_rev, both approximations (the reverse one where positive), two Monte-Carlo
    # series with SD bars, and the Lemma B.1(i) bound
    named = [ln for ln in a.lines if not ln.get_label().startswith("_")]
    assert [ln.get_label()[:12] for ln in named] == ["KL_fwd = D(π", "KL_rev = D(π", "approx. ε (p", "approx. ε(ℓ−",
                                                     "Lemma B.1(i)"]
    for line, want in zip(named[:3], (exact[:, 0], exact[:, 1], approx[:, 0])):
        assert np.allclose(line.get_xdata(), seps) and np.allclose(line.get_ydata(), want)
    assert np.allclose(named[3].get_xdata(), seps[1:]) and np.allclose(named[3].get_ydata(), approx[1:, 1])
    assert approx[0, 1] < 0  # Δ = 1: the reverse approximation is negative and left out
    assert np.allclose(named[4].get_ydata(), -math.log(1 - EPS))
    assert len(a.containers) == 2
    for j, eb in enumerate(a.containers):
        assert np.allclose(eb[0].get_xdata(), mc_seps) and np.allclose(eb[0].get_ydata(), mc[:, :, j].mean(axis=1))
        half = [seg[1, 1] - seg[0, 1] for seg in eb[2][0].get_segments()]
        assert np.allclose(half, 2 * mc[:, :, j].std(axis=1, ddof=1))

    # (b) the exact ratio, l - 1 where l > 1, and the Monte-Carlo ratio
    named = [ln for ln in b.lines if not ln.get_label().startswith("_")]
    assert len(named) == 2 and len(b.containers) == 1
    assert np.allclose(named[0].get_ydata(), exact[:, 1] / exact[:, 0])
    assert named[0].get_ydata()[1] == pytest.approx(13.9, abs=0.05)  # paper: 0.0505 vs 0.704 (14x) at Δ = 6
    ell = math.log(EPS) + seps**2 / 2
    assert np.allclose(named[1].get_xdata(), seps[ell > 1]) and np.allclose(named[1].get_ydata(), ell[ell > 1] - 1)
    assert np.allclose(b.containers[0][0].get_ydata(), ratio.mean(axis=1))

    # (c) drift with the invented mode at Δ = 6: KL_fwd, KL_rev, δ²/2 and the reverse excess
    on = np.array([kl(EPS, 6.0, x) for x in drifts])
    assert len(c.lines) == 4
    for line, want in zip(c.lines, (on[:, 0], on[:, 1], drifts**2 / 2, on[:, 1] - on[:, 0])):
        assert np.allclose(line.get_xdata(), drifts) and np.allclose(line.get_ydata(), want)

    # (d) two bars (forward, reverse) for each of the three cases
    assert [t.get_text().split("\n")[0] for t in d.get_xticklabels()] == ["invented mode", "benign drift", "mode dropping"]
    assert [bc.get_label() for bc in d.containers] == ["KL_fwd (forgetting monitor)", "KL_rev (invention monitor)"]
    cases = np.array([kl(EPS, 6.0, 0.0), kl(0.0, 6.0, 0.5), mode_dropping_kl(6.0, 0.5)])
    for j, bc in enumerate(d.containers):
        assert np.allclose([bar.get_height() for bar in bc], cases[:, j])

    # the tidy data is what was drawn
    assert np.allclose(data["exact"][["kl_fwd", "kl_rev"]], exact)
    assert np.allclose(data["mc"]["kl_rev_mean"], mc[:, :, 1].mean(axis=1))
    assert np.allclose(data["mc"]["ratio_sd"], ratio.std(axis=1, ddof=1)) and set(data["mc"]["seeds"]) == {3}
    assert np.allclose(data["drift"]["excess"], on[:, 1] - on[:, 0])
    assert list(data["cases"]["case"]) == ["invented mode", "benign drift", "mode dropping"]
    assert np.allclose(data["cases"][["kl_fwd", "kl_rev"]], cases)


# --------------------------------------------------------------------------- detection under benign drift (Table B.2)


def _quad_moments(p, q):
    """Mean and variance of log p − log q under p by adaptive quadrature: independent of the Simpson grid."""
    from scipy import integrate

    def lr(x):
        lp = float(mixture_logpdf(x, *p))
        return math.exp(lp), lp - float(mixture_logpdf(x, *q))

    def moment(k, centre):
        def f(x):
            d, r = lr(x)
            return d * (r - centre) ** k
        cuts = [-40.0, 0.0, 0.5, 6.0, 46.0]
        return sum(integrate.quad(f, a, b, limit=200)[0] for a, b in zip(cuts, cuts[1:]))

    m = moment(1, 0.0)
    return m, moment(2, m)


def test_logratio_moments_match_quadrature_and_closed_forms():
    base, on = ([1.0], [0.0]), ([0.95, 0.05], [0.5, 6.0])
    for p, q in ((base, on), (on, base)):
        assert logratio_moments(p, q) == pytest.approx(_quad_moments(p, q), rel=1e-7)
    # the mean is the KL the figure uses; a pure shift has mean δ²/2 and variance δ² in both directions
    assert logratio_moments(base, on)[0] == pytest.approx(gaussian_mode_kl(0.05, 6.0, 0.5)[0], rel=1e-9)
    for p, q in ((base, ([1.0], [0.7])), (([1.0], [0.7]), base)):
        assert logratio_moments(p, q) == pytest.approx((0.245, 0.49), rel=1e-9)


def test_detection_z_is_the_excess_over_the_two_standard_errors():
    """Recomputed by hand from independent moments: (KL_on − KL_off) / sqrt((var_on + var_off)/n)."""
    base, on = ([1.0], [0.0]), ([0.95, 0.05], [0.5, 6.0])
    (m1, v1), (m0, v0) = _quad_moments(base, on), (0.125, 0.25)  # the benign probe N(0.5, 1): δ²/2 and δ²
    zf = (m1 - m0) / math.sqrt((v1 + v0) / 2048)
    (m1, v1), (m0, v0) = _quad_moments(on, base), (0.125, 0.25)
    zr = (m1 - m0) / math.sqrt((v1 + v0) / 2048)
    assert detection_z(0.05, 0.5) == pytest.approx((zf, zr), rel=1e-6)


def test_detection_z_standard_error_by_simulation():
    """Over 200 seeded replicate studies the simulated excess has the mean and spread the z assumes."""
    n, eps, drift = 2048, 0.05, 0.5
    base, on, off = ([1.0], [0.0]), ([1 - eps, eps], [drift, 6.0]), ([1.0], [drift])
    rng = np.random.default_rng(7)
    diffs = {"fwd": [], "rev": []}
    for _ in range(200):
        for key, (p1, q1, p0, q0) in {"fwd": (base, on, base, off), "rev": (on, base, off, base)}.items():
            x1, x0 = mixture_sample(*p1, n, rng), mixture_sample(*p0, n, rng)
            d = np.mean(mixture_logpdf(x1, *p1) - mixture_logpdf(x1, *q1)) - np.mean(mixture_logpdf(x0, *p0) - mixture_logpdf(x0, *q0))
            diffs[key].append(d)
    for key, idx in (("fwd", 0), ("rev", 1)):
        (m1, v1) = logratio_moments(*(((base, on), (on, base))[idx]))
        (m0, v0) = (drift**2 / 2, drift**2)
        se = math.sqrt((v1 + v0) / n)
        d = np.asarray(diffs[key])
        assert abs(d.mean() - (m1 - m0)) < 4 * se / math.sqrt(len(d))
        assert d.std(ddof=1) == pytest.approx(se, rel=0.15)
    # one seeded Monte-Carlo draw lands near the expected z, and repeats exactly
    z_mc = detection_z(eps, drift, method="mc", seed=3)
    assert z_mc == detection_z(eps, drift, method="mc", seed=3)
    assert np.allclose(z_mc, detection_z(eps, drift), atol=1.5)


def test_forward_excess_is_swamped_once_drift_reaches_half_reverse_is_not():
    """App. B: at Δ = 6, ε = 5% the KL_fwd excess is swamped once δ ≳ 0.5; the KL_rev excess is not."""
    z = {d: detection_z(0.05, d) for d in (0.0, 0.25, 0.5, 1.0)}
    assert z[0.0][0] >= 5 and z[0.25][0] >= 5 and z[0.5][0] < 5 and z[1.0][0] < 5
    assert all(zr >= 5 for _, zr in z.values())


def test_detection_grid_counts_alarms_at_z_at_least_the_level():
    g = detection_grid([0.0, 0.5, 1.0], [0.01, 0.05])
    assert g["z_fwd"].shape == (3, 2) and g["share_fwd"] == g["alarm_fwd"].mean()
    assert g["share_rev"] == pytest.approx(np.mean(g["z_rev"] >= 5))
    assert g["share_fwd"] < g["share_rev"]  # the reverse KL alarms over more of the grid (Table B.2)
    # a cell exactly at the level alarms (z ≥ level), one just above it does not
    level = float(g["z_rev"][1, 1])
    assert detection_grid([0.5], [0.05], z_alarm=level)["alarm_rev"][0, 0]
    assert not detection_grid([0.5], [0.05], z_alarm=level * (1 + 1e-9))["alarm_rev"][0, 0]
    # Monte-Carlo grids repeat with their seed and differ between seeds
    a, b = (detection_grid([0.5], [0.05, 0.1], method="mc", seed=s)["z_rev"] for s in (0, 0))
    assert np.array_equal(a, b) and not np.array_equal(a, detection_grid([0.5], [0.05, 0.1], method="mc", seed=1)["z_rev"])


@pytest.mark.parametrize("kwargs, msg", [
    ({"drifts": [], "epsilons": [0.05]}, "at least one"),
    ({"drifts": [0.0], "epsilons": [0.0]}, "eps must lie"),
    ({"drifts": [0.0], "epsilons": [1.0]}, "eps must lie"),
    ({"drifts": [0.0], "epsilons": [0.05], "n": 1}, "n must be"),
    ({"drifts": [0.0], "epsilons": [0.05], "method": "quad"}, "method must be"),
])
def test_detection_grid_refuses_bad_arguments(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        detection_grid(**kwargs)
