"""The three-action tabular model (multi-reward paper §3.3, Appendix A): exact conditional means and recursion."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyses.tabular import (
    RULES,
    action_laws,
    conditional_mean_advantages,
    expected_logodds_drift,
    iterations_to_reach,
    kappa_n,
    run_recursion,
    sampled_step,
    scalar_reward,
    tabular_advantages,
    type_probabilities,
)

PAPER_INIT = (0.8, 0.01, 0.19)


def _brute_force_m(pi, rule, eta, rho, n, lam=1.0):
    """m_j by enumerating the others' actions and outcomes response by response (no multinomial)."""
    laws = action_laws(eta, rho)
    q = np.asarray(pi) @ laws
    import itertools

    rp, ra = np.array([0, 0, 1, 1.0]), np.array([0, 1, 0, 1.0])
    own = np.zeros(4)
    for others in itertools.product(range(4), repeat=n - 1):
        w = np.prod(q[list(others)])
        if w == 0:
            continue
        for t in range(4):
            types = np.array([t, *others])
            own[t] += w * tabular_advantages(rule, rp[types], ra[types], lam)[0]
    return laws @ own


@pytest.mark.parametrize("rule", ["grpo", "dr_grpo", "mo_grpo", "tag"])
def test_multinomial_enumeration_matches_brute_force(rule):
    pi, eta, rho, n = (0.2, 0.3, 0.5), 0.3, 0.6, 5
    got = conditional_mean_advantages(pi, rule=rule, eta=eta, rho=rho, n=n, lam=0.5)
    assert np.allclose(got, _brute_force_m(pi, rule, eta, rho, n, 0.5), atol=1e-12)


def test_zscore_matches_phi_formula_and_uniform_groups_are_zero():
    # phi(r) = sqrt(n-1) d / sqrt(d^2 + nV) for the own (first) response (multi-reward paper App. A.1, Step 1).
    rng = np.random.default_rng(1)
    for _ in range(50):
        rp, ra = rng.integers(0, 2, size=(2, 8)).astype(float)
        r = scalar_reward("grpo", rp, ra)
        if r.max() == r.min():
            continue
        n, s, qq = 8, r[1:].sum(), (r[1:] ** 2).sum()
        d, v = (n - 1) * r[0] - s, (n - 1) * qq - s**2
        assert math.isclose(tabular_advantages("grpo", rp, ra)[0], math.sqrt(n - 1) * d / math.sqrt(d * d + n * v),
                            abs_tol=1e-12)
    assert np.all(tabular_advantages("tag", np.ones(8), np.ones(8), 0.5) == 0.0)
    assert np.all(tabular_advantages("mo_grpo", np.ones(8), np.r_[np.ones(7), 0.0]).round(12)[:7] > 0)


simplex = st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0), st.floats(0.0, 1.0)).filter(
    lambda x: sum(x) > 1e-3).map(lambda x: tuple(np.asarray(x) / sum(x)))


@settings(max_examples=60, deadline=None)
@given(pi=simplex, eta=st.floats(0, 1), rho=st.floats(0, 1), n=st.sampled_from([2, 4, 8]),
       lam=st.sampled_from([0.0, 0.5, 1.0, 4.0]))
def test_centering_bounds_and_dominance(pi, eta, rho, n, lam):
    p = np.asarray(pi)
    tol = 1e-10
    for rule in RULES:
        m = np.array(conditional_mean_advantages(pi, rule=rule, eta=eta, rho=rho, n=n, lam=lam))
        assert abs(p @ m) < tol  # Eq. (8)
        bound = {"grpo": math.sqrt(n - 1), "tag": math.sqrt(n - 1), "mo_grpo": 2 * math.sqrt(n - 1),
                 "dr_grpo": (n - 1) / n, "pg": 1.0}[rule]
        assert np.all(np.abs(m) <= bound + tol)
        if rule == "tag":
            assert m[2] >= m[1] - tol and m[1] >= m[0] - tol  # App. A.2 coupling
        elif rule != "mo_grpo":
            assert m[1] >= m[2] - tol and m[2] >= m[0] - tol  # App. A.1 Step 2


def test_dr_grpo_is_n_minus_1_over_n_times_exact_pg():
    for pi in [(0.5, 0.3, 0.2), PAPER_INIT, (0.0, 0.0, 1.0)]:
        for n in (2, 3, 8):
            dr = np.array(conditional_mean_advantages(pi, rule="dr_grpo", eta=0.3, rho=0.4, n=n))
            pg = np.array(conditional_mean_advantages(pi, rule="pg", eta=0.3, rho=0.4, n=n))
            assert np.allclose(dr, (n - 1) / n * pg, atol=1e-14)


def test_reward_identities_eq4_and_tag():
    for eta, rho, lam in [(0.1, 0.9, 1.0), (0.5, 0.3, 0.5), (0.0, 0.0, 4.0)]:
        laws = action_laws(eta, rho)
        rp, ra = np.array([0, 0, 1, 1.0]), np.array([0, 1, 0, 1.0])
        add = laws @ scalar_reward("grpo", rp, ra)
        tag = laws @ scalar_reward("tag", rp, ra, lam)
        assert math.isclose(add[1] - add[2], (1 - eta) * (1 - rho) * 0.5, abs_tol=1e-14)  # Eq. (4), m-b=1/2
        assert math.isclose(tag[2] - tag[1], (1 - eta) * rho / (1 + lam), abs_tol=1e-14)  # A.2
    q = type_probabilities(PAPER_INIT, 0.1, 0.9)  # P(h), P(m), P(b) of the others' levels (App. A.3)
    assert math.isclose(q[3], 0.1 * 0.2) and math.isclose(q[1] + q[2], 0.9 * 0.01 + 0.9 * 0.9 * 0.19)


def test_vertex_values():
    eta, rho, n = 0.3, 0.4, 8
    pg = conditional_mean_advantages((0, 0, 1), rule="pg", eta=eta, rho=rho, n=n)
    assert math.isclose(pg[1], (1 - eta) * (1 - rho) * 0.5) and abs(pg[2]) < 1e-15  # A.1 other estimators
    g = conditional_mean_advantages((0, 0, 1), rule="grpo", eta=eta, rho=rho, n=n)
    assert g[1] > 0 and abs(g[2]) < 1e-14  # A.1 Step 4
    t = conditional_mean_advantages((0, 1, 0), rule="tag", eta=eta, rho=rho, n=n)
    assert t[2] > 0 and abs(t[1]) < 1e-14  # A.2 (ii)


@pytest.mark.parametrize("n", [2, 5, 8])
def test_two_level_identity_kappa_at_eta_zero(n):
    # At eta = 0 both GRPO/additive and TAG are two-level: m_j = kappa_n(s)(mu_j - s) (identity (11)).
    pi, rho, alpha = (0.3, 0.25, 0.45), 0.6, 0.1
    g = conditional_mean_advantages(pi, rule="grpo", eta=0.0, rho=rho, n=n)
    mu, s = np.array([0, 1, rho]), pi[1] + rho * pi[2]
    assert np.allclose(g, kappa_n(s, n) * (mu - s), atol=1e-13)
    for lam in (0.0, 1.0, 3.0):  # TAG drift at eta = 0, independent of lambda (App. A.2)
        s = rho * pi[2]
        for j in (0, 1):
            d = expected_logodds_drift(pi, 2, j, rule="tag", eta=0.0, rho=rho, n=n, alpha=alpha, lam=lam)
            assert math.isclose(d, alpha * kappa_n(s, n) * rho * pi[2] * (1 - pi[2] + pi[j]), rel_tol=1e-11)


def test_paper_log_odds_example_minus_0_27_alpha():
    # Multi-reward paper App. A.1 Step 3: E[Delta log(pi1/pi2)] = -0.27 alpha at (0.8, 0.01, 0.19), rho=0.9, eta=0.1, n=8.
    d = expected_logodds_drift(PAPER_INIT, 1, 2, rule="grpo", eta=0.1, rho=0.9, n=8, alpha=1.0)
    assert round(d, 2) == -0.27
    m = conditional_mean_advantages(PAPER_INIT, rule="grpo", eta=0.1, rho=0.9, n=8)
    assert math.isclose(d, 2 * PAPER_INIT[1] * m[1] + PAPER_INIT[0] * m[0], abs_tol=1e-12)  # "by centering"


def test_recursion_kernel_matches_numpy_step():
    kw = dict(rule="mo_grpo", eta=0.4, rho=0.3, n=6, alpha=0.5)
    _, traj = run_recursion(PAPER_INIT, steps=3, **kw)
    theta = np.log(PAPER_INIT)
    for t in range(3):
        p = np.exp(theta) / np.exp(theta).sum()
        assert np.allclose(traj[t], p, atol=1e-14)
        theta = theta + 0.5 * p * np.array(conditional_mean_advantages(p, rule="mo_grpo", eta=0.4, rho=0.3, n=6))
    assert iterations_to_reach(PAPER_INIT, action=0, threshold=0.5, **kw) == 0


def test_slow_takeover_grpo_1_0e6_iterations():
    # App. A.1 boundary cases: "needs 1.0x10^6 iterations to reach pi(a1) >= 0.99".
    # Its speed is measured by benchmarks/bench_guards.py, not asserted here.
    kw = dict(rule="grpo", eta=0.8, rho=0.5, n=8, alpha=0.1, action=1, threshold=0.99)
    t = iterations_to_reach(PAPER_INIT, **kw)
    assert abs(t - 1.0e6) <= 0.05e6, t  # ours: 1,006,994


def test_slow_selection_tag_1_2e6_iterations():
    # App. A.2 boundary cases: "needs 1.2x10^6 iterations to reach pi(a2) >= 0.99".
    t = iterations_to_reach((0.3, 0.5, 0.2), rule="tag", eta=0.95, rho=0.1, n=8, alpha=0.1, lam=0.5,
                            action=2, threshold=0.99)
    assert abs(t - 1.2e6) <= 0.05e6, t  # ours: 1,222,749


@pytest.mark.parametrize("rule", ["grpo", "dr_grpo", "pg"])
def test_theorem1_takeover_by_auxiliary_action(rule):
    # Symmetric aggregation, eta, rho < 1: a1 takes over even from a primary-leading start.
    kw = dict(rule=rule, eta=0.3, rho=0.5, n=8, alpha=0.5)
    t = iterations_to_reach(PAPER_INIT, action=1, threshold=0.99, max_iter=10**6, **kw)
    assert t is not None
    _, traj = run_recursion(PAPER_INIT, steps=t, record_at=[0, t], **kw)
    assert traj[0, 2] > traj[0, 1] and traj[-1, 1] >= 0.99


@pytest.mark.parametrize("init", [PAPER_INIT, (0.05, 0.9, 0.05), (0.3, 0.5, 0.2)])
def test_theorem2_tag_selects_primary_action(init):
    kw = dict(rule="tag", eta=0.3, rho=0.5, n=8, alpha=0.5, lam=1.0)
    assert iterations_to_reach(init, action=2, threshold=0.99, max_iter=10**6, **kw) is not None
    _, traj = run_recursion(init, steps=2 * 10**5, record_at=[2 * 10**5], **kw)
    assert traj[-1, 2] > 0.999


def test_tag_time_to_selection_increases_with_lambda():
    times = [iterations_to_reach((0.3, 0.5, 0.2), rule="tag", eta=0.5, rho=0.3, n=8, alpha=0.1, lam=lam,
                                 action=2, threshold=0.99) for lam in (0.25, 0.5, 1.0, 2.0, 4.0)]
    assert times == sorted(times) and len(set(times)) == 5


def test_mo_grpo_selects_a1_at_low_eta_and_is_bistable_at_high_eta():
    low = dict(rule="mo_grpo", eta=0.1, rho=0.5, n=8, alpha=0.5)
    for init in [(0.05, 0.05, 0.9), PAPER_INIT]:
        assert iterations_to_reach(init, action=1, threshold=0.99, max_iter=10**5, **low) is not None
    high = dict(rule="mo_grpo", eta=0.5, rho=0.9, n=8, alpha=0.5)
    _, a = run_recursion((0.05, 0.05, 0.9), steps=10**5, record_at=[10**5], **high)
    _, b = run_recursion((0.05, 0.9, 0.05), steps=10**5, record_at=[10**5], **high)
    assert a[-1, 2] > 0.99 and b[-1, 1] > 0.99


@pytest.mark.parametrize("rule", ["grpo", "mo_grpo", "tag", "dr_grpo"])
def test_sampled_grpo_agrees_with_recursion_in_expectation(rule):
    pi, eta, rho, n, alpha = (0.3, 0.3, 0.4), 0.3, 0.5, 8, 0.1
    steps = sampled_step(pi, rule=rule, eta=eta, rho=rho, n=n, alpha=alpha,
                         rng=np.random.default_rng(7), groups=100_000, lam=0.5)
    want = alpha * np.asarray(pi) * np.array(conditional_mean_advantages(pi, rule=rule, eta=eta, rho=rho, n=n, lam=0.5))
    se = steps.std(axis=0) / math.sqrt(len(steps))
    assert np.all(np.abs(steps.mean(axis=0) - want) < 4.5 * se + 1e-12), (steps.mean(axis=0), want, se)


def test_sampled_step_is_seeded():
    kw = dict(rule="grpo", eta=0.3, rho=0.5, n=8, alpha=0.1, groups=5)
    a = sampled_step(PAPER_INIT, rng=np.random.default_rng(3), **kw)
    b = sampled_step(PAPER_INIT, rng=np.random.default_rng(3), **kw)
    assert np.array_equal(a, b)


def test_bad_arguments():
    with pytest.raises(ValueError):
        conditional_mean_advantages(PAPER_INIT, rule="ppo", eta=0.1, rho=0.1, n=8)
    with pytest.raises(ValueError):
        iterations_to_reach((1.0, 0.0, 0.0), rule="grpo", eta=0.1, rho=0.1, n=8, alpha=0.1, action=1, threshold=0.9)
    with pytest.raises(ValueError):
        sampled_step(PAPER_INIT, rule="pg", eta=0.1, rho=0.1, n=8, alpha=0.1, rng=np.random.default_rng(0))


def test_figure_builder_interface():
    import figures.build_tabular_trajectories as b

    assert b.OUTPUT.endswith(".png") and b.DESCRIPTION and isinstance(b.INPUTS, str) and callable(b.build)
    assert callable(b.draw) and (b.STEPS, b.SAMPLED_STEPS, b.SLOW_STEPS) == (10**5, 40_000, 1_400_000)


def test_figure_plots_the_exact_recursion_per_rule_and_the_slow_cases():
    """Figure 3 of the multi-reward paper on short horizons: six panels, their axes, their series, and the plotted
    probabilities equal to the recursion (and sampled GRPO) computed here at a few iterations."""
    from analyses.tabular import sampled_trajectory
    from figures.build_tabular_trajectories import PANELS, SETTING, SLOW_CASES, draw

    steps, sampled_steps, slow_steps = 3000, 300, 30_000
    fig, data = draw(steps=steps, sampled_steps=sampled_steps, slow_steps=slow_steps)
    axes = fig.axes
    assert len(axes) == 6
    assert [ax.get_xlabel() for ax in axes] == ["iteration t (updates, log scale)"] * 5 + [
        "iteration t (millions of updates, linear scale)"]
    assert [ax.get_ylabel() for ax in axes] == ["policy probability π_t(a_j | x)", "", "",
                                                "policy probability π_t(a_j | x)", "", ""]
    assert [ax.get_title() for ax in axes[:5]] == [title for _, title in PANELS]
    # three actions per rule; GRPO adds three sampled seeds x three actions; TAG reaches 0.99 within
    # the horizon (one marker); the slow panel: two cases and the 0.99 line
    assert [len(ax.lines) for ax in axes] == [12, 3, 3, 3, 4, 3]
    assert data.attrs["t99"] == {"grpo": None, "dr_grpo": None, "mo_grpo": None, "pg": None, "slow:grpo": None,
                                 "slow:tag": None, "tag": 622}
    for ax, (rule, _) in zip(axes, PANELS):
        x = ax.lines[0].get_xdata()  # a log-spaced grid of iterations from 1 to the horizon
        assert x[0] == 1 and x[-1] == steps and len(x) > 200 and np.all(np.diff(x) > 0)
        at = x[::60]
        _, want = run_recursion(PAPER_INIT, rule=rule, steps=steps, record_at=at, lam=1.0, **SETTING)
        for j, line in enumerate(ax.lines[:3]):
            assert line.get_label().startswith(("a₀", "a₁", "a₂")[j]) and line.get_linestyle() == "-"
            assert np.array_equal(line.get_xdata(), x) and np.allclose(line.get_ydata()[::60], want[:, j])
        exact = data[(data["panel"] == rule) & (data["kind"] == "exact")].set_index("t")
        assert np.allclose(exact.loc[at, ["pi_0", "pi_1", "pi_2"]], want)
    # GRPO: dashed sampled trajectories, seed by seed
    for k, seed in enumerate((0, 1, 2)):
        want = sampled_trajectory(PAPER_INIT, rule="grpo", steps=sampled_steps, seed=seed, **SETTING)
        for j in range(3):
            line = axes[0].lines[3 + 3 * k + j]
            assert line.get_linestyle() == "--" and line.get_xdata()[-1] <= sampled_steps
            assert np.allclose(line.get_ydata(), want[line.get_xdata(), j])
    # TAG: the primary-favoring a₂ crosses 0.99 at the marked iteration
    tag = axes[4]
    assert tag.lines[3].get_xdata()[0] == 622 == iterations_to_reach(
        PAPER_INIT, rule="tag", action=2, threshold=0.99, lam=1.0, **SETTING)
    assert tag.texts[0].get_text() == "π(a2) ≥ 0.99\nat t = 622"
    # the slow cases: the winner's probability against t in millions, linear grid
    slow = axes[5]
    for line, (rule, kw, init, action, label) in zip(slow.lines[:2], SLOW_CASES):
        assert line.get_label() == f"{label}; ours not within 30,000"
        ts, want = run_recursion(init, rule=rule, n=8, alpha=0.1, steps=slow_steps, record_at=[0, 14_994, 29_988], **kw)
        x = np.round(line.get_xdata() * 1e6).astype(int)
        assert x[-1] == 29_988 and np.allclose(line.get_ydata()[np.searchsorted(x, ts)], want[:, action])
    assert np.allclose(slow.lines[2].get_ydata(), 0.99)
