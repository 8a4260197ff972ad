"""The numerical core of the gradient tests against independent references: dense least squares
and explicit projectors for Theorem 3, numeric maximization for the efficiency's SGD reading,
scipy.stats.bootstrap and exact enumeration for the bootstrap, and a tabular policy whose ∇J is
exact for the reference gradient ĥ (paper §2.4, Appendix A, C.3.1, H.3, Theorem 3)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import linalg, optimize, stats

from analyses.gradient import (
    best_sgd_gain,
    completion_matrix,
    efficiency,
    efficiency_moments,
    perp_cosine,
    perp_inner_gram,
    project_out,
    project_out_tokens,
    segment_progress_credit,
    theorem3_coefficients,
)
from analyses.gradient_stats import (
    alignment_summary,
    continuation_fit,
    percentile_interval,
    positivity,
    reallocation_bound,
    relative_efficiency,
    resample_indices,
)

# ---------------------------------------------------------------- projection (Theorem 3)

def _q_matrices():
    rng = np.random.default_rng(11)
    a, b = rng.normal(size=8), rng.normal(size=8)
    return {
        "G<P": rng.normal(size=(3, 10)),
        "G>P": rng.normal(size=(12, 5)),
        "duplicated rows": np.stack([a, b, a, 2.0 * b, a - b]),
        "Q=0": np.zeros((4, 6)),
        "one row": rng.normal(size=(1, 7)),
    }


def _explicit_projector(Q):
    """P_V as a P × P matrix from an orthonormal basis of the row space (test-only)."""
    _, s, vt = np.linalg.svd(Q)
    rank = int((s > 1e-10 * max(s.max(initial=0.0), 1e-300)).sum())
    return vt[:rank].T @ vt[:rank]


@pytest.mark.parametrize("name", list(_q_matrices()))
def test_project_out_is_least_squares_and_the_explicit_projector(name):
    Q = _q_matrices()[name]
    rng = np.random.default_rng(3)
    P = Q.shape[1]
    for _ in range(3):
        x, h = rng.normal(size=P), rng.normal(size=P)
        perp = project_out(x, Q)
        coef = np.linalg.lstsq(Q.T, x, rcond=None)[0]
        np.testing.assert_allclose(perp, x - Q.T @ coef, atol=1e-10)
        np.testing.assert_allclose(perp, (np.eye(P) - _explicit_projector(Q)) @ x, atol=1e-10)
        # P⊥x is orthogonal to every q_g, and projecting twice changes nothing
        assert np.abs(Q @ perp).max(initial=0.0) <= 1e-10 * max(np.abs(Q).max(), 1.0) * np.linalg.norm(x)
        np.testing.assert_allclose(project_out(perp, Q), perp, atol=1e-10)
        # eq. 3: ⟨h, d − P_V d⟩ = ⟨P⊥h, P⊥d⟩, and the Gram form gives the same number
        np.testing.assert_allclose(h @ perp, project_out(h, Q) @ perp, atol=1e-10)
        np.testing.assert_allclose(perp_inner_gram(Q @ Q.T, Q @ x, Q @ h, x @ h), project_out(h, Q) @ perp, atol=1e-10)
        ph = project_out(h, Q)
        if np.linalg.norm(perp) > 1e-8 and np.linalg.norm(ph) > 1e-8:
            expected = perp @ ph / np.linalg.norm(perp) / np.linalg.norm(ph)
            assert perp_cosine(x, h, Q) == pytest.approx(expected, abs=1e-10)


def test_q_zero_leaves_x_and_a_vector_inside_v_has_no_alignment():
    rng = np.random.default_rng(5)
    x = rng.normal(size=6)
    np.testing.assert_allclose(project_out(x, np.zeros((3, 6))), x)
    Q = rng.normal(size=(3, 6))
    inside = Q.T @ rng.normal(size=3)
    assert np.abs(project_out(inside, Q)).max() < 1e-10
    assert math.isnan(perp_cosine(inside, x, Q))
    with pytest.raises(ValueError, match="columns"):
        project_out(x, np.zeros((3, 5)))


def _token_batch(rng, lengths, P, duplicate=False):
    S = rng.normal(size=(sum(lengths), P))
    if duplicate:  # completions 0 and 1 identical: B K Bᵀ is singular
        S[lengths[0]:2 * lengths[0]] = S[:lengths[0]]
    return S, completion_matrix(lengths)


@pytest.mark.parametrize("lengths,P,duplicate", [([3, 2, 4], 12, False), ([2, 2, 3, 1], 5, False),
                                                  ([3, 3, 2], 10, True), ([4, 0, 2], 9, False)])
def test_token_form_equals_the_q_form_and_its_fraction_is_the_squared_norm_share(lengths, P, duplicate):
    rng = np.random.default_rng(len(lengths) * P)
    S, B = _token_batch(rng, lengths, P, duplicate)
    for _ in range(3):
        omega = rng.normal(size=S.shape[0])
        x = S.T @ omega
        residual, fraction = project_out_tokens(S, omega, B)
        np.testing.assert_allclose(residual, project_out(x, B @ S), atol=1e-10)
        inside = x - residual
        assert fraction == pytest.approx(inside @ inside / (x @ x), abs=1e-10)
        assert fraction == pytest.approx(x @ _explicit_projector(B @ S) @ x / (x @ x), abs=1e-10)


def test_orthogonality_to_v_holds_exactly_when_bkw_is_zero():
    rng = np.random.default_rng(8)
    S, B = _token_batch(rng, [3, 2, 4], 12)
    K = S @ S.T
    null = linalg.null_space(B @ K)  # ω with B K ω = 0
    assert null.shape[1] > 0
    for omega in list(null.T) + [rng.normal(size=S.shape[0]) for _ in range(3)]:
        _, fraction = theorem3_coefficients(K, B, omega)
        residual, _ = project_out_tokens(S, omega, B)
        orthogonal = np.linalg.norm(S.T @ omega - residual) <= 1e-10 * np.linalg.norm(S.T @ omega)
        assert orthogonal == (np.linalg.norm(B @ K @ omega) <= 1e-10 * np.linalg.norm(K) * np.linalg.norm(omega))
        assert orthogonal == (fraction < 1e-12)
    # Sᵀω = 0: the fraction is undefined
    assert math.isnan(theorem3_coefficients(K, B, np.zeros(S.shape[0]))[1])


@pytest.mark.parametrize("call,match", [
    (lambda: completion_matrix([2, -1]), "non-negative"),
    (lambda: completion_matrix([2.0, 1.0]), "non-negative"),
    (lambda: completion_matrix([]), "non-empty"),
    (lambda: theorem3_coefficients(np.eye(4), np.ones((2, 3)), np.ones(4)), "same T tokens"),
    (lambda: theorem3_coefficients(np.eye(4), np.ones((2, 4)), np.ones(3)), "same T tokens"),
    (lambda: segment_progress_credit([0.2, 0.4], [1], 4, 1.0), "one success estimate per cut"),
    (lambda: segment_progress_credit([0.2, 0.4], [2, 2], 4, 1.0), "increase strictly"),
    (lambda: segment_progress_credit([0.2], [0], 4, 1.0), "increase strictly"),
    (lambda: segment_progress_credit([0.2], [4], 4, 1.0), "increase strictly"),
])
def test_projection_helpers_refuse_inconsistent_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_segment_credit_is_the_change_in_success_rate_across_each_segment():
    w = segment_progress_credit([0.3, 0.6, 0.9], [1, 3, 4], 6, 1.0)
    np.testing.assert_allclose(w, [-0.2, 0.3, 0.3, 0.3, 0.1, 0.1])
    # the credits of the segments telescope to R − prior; no cuts: outcome minus the prior
    np.testing.assert_allclose(segment_progress_credit([], [], 3, 0.0, prior=0.25), [-0.25] * 3)


# ---------------------------------------------------------------- efficiency

@pytest.mark.parametrize("L", [0.05, 1.0, 7.5, 300.0])
def test_efficiency_is_2l_times_the_best_one_step_sgd_gain(L):
    rng = np.random.default_rng(int(L * 100))
    dot, uu = rng.normal(0.4, 1.0, 50), rng.gamma(2.0, 1.5, 50)
    m, s = dot.mean(), uu.mean()
    best = optimize.minimize_scalar(lambda eta: -(eta * m - 0.5 * L * eta ** 2 * s),
                                    bounds=(-100.0 / L, 100.0 / L), method="bounded", options={"xatol": 1e-12})
    assert efficiency_moments(dot, uu) == pytest.approx(2 * L * -best.fun, rel=1e-7)
    assert best_sgd_gain(m, s, L) == pytest.approx(-best.fun, rel=1e-7)


def test_efficiency_is_the_direct_formula_and_ignores_the_scale_of_u():
    rng = np.random.default_rng(2)
    U, H = rng.normal(size=(20, 9)), rng.normal(0.2, 1.0, size=(20, 9))
    direct = (sum(U[b] @ H[b] for b in range(20)) / 20) ** 2 / (sum(U[b] @ U[b] for b in range(20)) / 20)
    assert efficiency(U, H) == pytest.approx(direct, rel=1e-12)
    for scale in (1e-4, 3.0, -2.0, 1e5):
        assert efficiency(scale * U, H) == pytest.approx(direct, rel=1e-10)
    with pytest.raises(ValueError, match="one row per batch"):
        efficiency(U, H[:, :8])
    with pytest.raises(ValueError, match="per batch"):
        efficiency_moments([1.0, 2.0], [1.0])


def test_positivity_is_the_mean_over_its_standard_error():
    rng = np.random.default_rng(4)
    d = rng.normal(0.3, 1.0, 96)
    mean, se, z = positivity(d)
    assert se == pytest.approx(stats.sem(d), rel=1e-12)
    assert z == pytest.approx(d.mean() / stats.sem(d), rel=1e-12)
    assert positivity(d - d.mean() + 0.01).z < 3 <= positivity(d - d.mean() + 0.5).z
    assert math.isnan(positivity([2.0]).se) and math.isnan(positivity([2.0]).z)
    assert positivity([1.0, 1.0]).z == math.inf
    with pytest.raises(ValueError, match="non-finite"):
        positivity([1.0, float("nan")])


# ---------------------------------------------------------------- bootstrap

def _batches(rng, n=40):
    """Batches where the configuration and its baseline move together, as on shared rollouts (an
    unpaired bootstrap would give other intervals)."""
    tokens = rng.integers(300, 700, n).astype(float)
    dot, uu = rng.normal(1.0, 1.0, n), rng.gamma(4.0, 1.0, n)
    return (dot, uu, tokens + 900, 0.7 * dot + rng.normal(0.0, 0.3, n), 0.8 * uu + rng.gamma(1.0, 0.5, n), tokens)


def _scipy_ci(statistic, data, n_resamples, confidence, seed):
    res = stats.bootstrap(data, statistic, paired=True, vectorized=True, method="percentile",
                          n_resamples=n_resamples, confidence_level=confidence, random_state=seed)
    return res.confidence_interval.low, res.confidence_interval.high


def _eff(dot, uu, axis=-1):
    return np.mean(dot, axis=axis) ** 2 / np.mean(uu, axis=axis)


def _close_intervals(ours, theirs, tolerance=0.05):
    width = theirs[1] - theirs[0]
    assert abs(ours[0] - theirs[0]) <= tolerance * width and abs(ours[1] - theirs[1]) <= tolerance * width, (ours, theirs)


def test_efficiency_intervals_agree_with_scipy_paired_percentile_bootstrap():
    data = _batches(np.random.default_rng(6))
    result = relative_efficiency(*data, n_resamples=20000, seed=1)
    d, u, t, bd, bu, bt = data

    def per_update(d, u, bd, bu, axis=-1):
        return _eff(d, u, axis) / _eff(bd, bu, axis)

    def per_token(d, u, t, bd, bu, bt, axis=-1):
        return (_eff(d, u, axis) / np.mean(t, axis=axis)) / (_eff(bd, bu, axis) / np.mean(bt, axis=axis))

    assert result.per_update == pytest.approx(per_update(d, u, bd, bu), rel=1e-12)
    assert result.per_token == pytest.approx(per_token(*data), rel=1e-12)
    assert result.tokens_per_update == pytest.approx(t.mean()) and result.dropped == 0
    _close_intervals(result.per_update_ci, _scipy_ci(per_update, (d, u, bd, bu), 20000, 0.95, 2))
    _close_intervals(result.per_token_ci, _scipy_ci(per_token, data, 20000, 0.95, 3))
    assert result.positivity == positivity(d)
    assert relative_efficiency(*data, n_resamples=500, seed=9) == relative_efficiency(*data, n_resamples=500, seed=9)
    assert relative_efficiency(*data, n_resamples=500, seed=9) != relative_efficiency(*data, n_resamples=500, seed=10)


def test_with_three_batches_the_interval_is_the_exact_bootstrap_distributions_quantile():
    d, u, bd, bu = [1.0, 2.5, -0.5], [1.0, 3.0, 2.0], [0.5, 1.0, 0.8], [1.0, 2.0, 1.5]
    tokens = [1.0, 1.0, 1.0]
    values, weights = [], []
    for multiset in itertools.combinations_with_replacement(range(3), 3):
        counts = np.bincount(multiset, minlength=3)
        weights.append(math.factorial(3) / np.prod([math.factorial(c) for c in counts]) / 27)
        ix = list(multiset)
        values.append(_eff(np.take(d, ix), np.take(u, ix)) / _eff(np.take(bd, ix), np.take(bu, ix)))
    order = np.argsort(values)
    values, cdf = np.asarray(values)[order], np.cumsum(np.asarray(weights)[order])
    assert cdf[-1] == pytest.approx(1.0)
    confidence = 0.6
    exact = [values[np.searchsorted(cdf, q)] for q in (0.2, 0.8)]
    assert min(abs(cdf - 0.2).min(), abs(cdf - 0.8).min()) > 0.02  # no quantile on a jump of the CDF
    result = relative_efficiency(d, u, tokens, bd, bu, tokens, n_resamples=40000, seed=4, confidence=confidence)
    assert result.per_update_ci == pytest.approx(tuple(exact), rel=1e-12)
    # the resampled multisets occur with their multinomial probabilities
    ix = np.sort(resample_indices(3, 40000, 4), axis=1)
    freq = {m: 0 for m in itertools.combinations_with_replacement(range(3), 3)}
    for row in map(tuple, ix):
        freq[row] += 1
    expected = np.asarray(weights) * 40000
    chi2 = ((np.asarray(list(freq.values())) - expected) ** 2 / expected).sum()
    assert stats.chi2.sf(chi2, df=len(freq) - 1) > 1e-4


def test_resamples_with_a_zero_denominator_are_dropped_and_counted():
    d, u, t = [1.0, 2.0, 1.5, 0.5], [1.0, 2.0, 2.0, 1.0], [10.0, 10.0, 10.0, 10.0]
    bd, bu = [1.0, -1.0, 0.0, 2.0], [1.0, 1.0, 1.0, 1.0]
    result = relative_efficiency(d, u, t, bd, bu, t, n_resamples=3000, seed=5)
    ix = resample_indices(4, 3000, 5)
    zero = (np.asarray(bd)[ix].mean(1) == 0).sum()
    assert zero > 0 and result.dropped == zero
    assert all(np.isfinite(result.per_update_ci))
    flat = relative_efficiency(d, u, t, [1.0, -1.0, 0.0, 0.0], bu, t, n_resamples=100, seed=5)
    assert math.isnan(flat.per_update) and math.isnan(flat.per_token)
    (lo, hi), dropped = percentile_interval([np.nan, np.inf], 0.95)
    assert math.isnan(lo) and math.isnan(hi) and dropped == 2


@pytest.mark.parametrize("kwargs,match", [
    ({"n_resamples": 0}, "positive integer"), ({"n_resamples": True}, "positive integer"),
    ({"n_resamples": 10.0}, "positive integer"), ({"confidence": 1.0}, "strictly between"),
    ({"confidence": 0.0}, "strictly between"), ({"uu": [1.0, -1.0, 2.0]}, "uu is negative at batch 1"),
    ({"base_tokens": [1.0, 2.0]}, "base_tokens has 2 batches, expected 3"),
    ({"dot_uh": [1.0, np.nan, 2.0]}, "non-finite value at batch 1"),
    ({"dot_uh": [[1.0, 2.0, 3.0]]}, "one number per batch"),
])
def test_relative_efficiency_refuses_bad_inputs(kwargs, match):
    args = {"dot_uh": [1.0, 2.0, 3.0], "uu": [1.0, 2.0, 3.0], "tokens": [5.0, 5.0, 5.0], "base_dot_uh": [1.0, 1.0, 2.0],
            "base_uu": [1.0, 1.0, 1.0], "base_tokens": [2.0, 2.0, 2.0], "n_resamples": 10, "seed": 0}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        relative_efficiency(**args)


def test_alignment_summary_against_scipy_and_its_undefined_batches():
    rng = np.random.default_rng(12)
    n = 48
    dd, hh = rng.gamma(3.0, 1.0, n), rng.gamma(3.0, 1.0, n)
    dh = rng.uniform(-0.2, 0.8, n) * np.sqrt(dd * hh)
    result = alignment_summary(dh, dd, hh, n_resamples=20000, seed=7)
    cos = dh / np.sqrt(dd * hh)
    assert result.mean == pytest.approx(cos.mean(), rel=1e-12)
    assert result.pooled == pytest.approx(dh.sum() / np.sqrt(dd.sum() * hh.sum()), rel=1e-12)
    _close_intervals(result.ci, _scipy_ci(lambda c, axis=-1: c.mean(axis=axis), (cos,), 20000, 0.95, 8))
    pooled = _scipy_ci(lambda a, b, c, axis=-1: a.sum(axis) / np.sqrt(b.sum(axis) * c.sum(axis)), (dh, dd, hh), 20000, 0.95, 9)
    _close_intervals(result.pooled_ci, pooled)
    # batches with no component outside V are left out; an outcome-only update has no alignment
    mask = np.zeros(n, bool)
    mask[:5] = True
    part = alignment_summary(np.where(mask, 0.0, dh), np.where(mask, 0.0, dd), hh, n_resamples=100, seed=7)
    assert part.batches == n - 5 and part.undefined == 5 and part.mean == pytest.approx(cos[5:].mean())
    masked = alignment_summary(dh, dd, hh, n_resamples=100, seed=7, undefined=mask)
    assert masked.mean == part.mean and masked.ci == part.ci
    outcome = alignment_summary(np.full(n, 1e-15), np.full(n, 1e-28), hh, n_resamples=100, seed=7, undefined=np.ones(n, bool))
    assert math.isnan(outcome.mean) and math.isnan(outcome.pooled) and outcome.batches == 0
    with pytest.raises(ValueError, match="one boolean per batch"):
        alignment_summary(dh, dd, hh, n_resamples=10, seed=0, undefined=np.zeros(n))
    with pytest.raises(ValueError, match="perp_hh has 3 batches"):
        alignment_summary(dh, dd, hh[:3], n_resamples=10, seed=0)


# ---------------------------------------------------------------- the a + b/k fit

def test_continuation_fit_recovers_a_and_b_and_the_papers_arithmetic():
    rng = np.random.default_rng(13)
    ks = np.array([1, 2, 4, 8, 16])
    share = 0.038
    a_b, b_b = rng.gamma(5.0, 1.0, 64), rng.gamma(5.0, 1.0, 64)
    b_b *= 4 * share / (1 - share) * a_b.mean() / b_b.mean()  # (b/4)/(a + b/4) = 3.8% on average
    uu = a_b[:, None] + b_b[:, None] / ks[None, :]
    fit = continuation_fit(ks, uu, n_resamples=4000, seed=1)
    assert fit.a == pytest.approx(a_b.mean(), rel=1e-10) and fit.b == pytest.approx(b_b.mean(), rel=1e-10)
    assert fit.share == pytest.approx(share, rel=1e-10)
    assert round(fit.bound, 2) == 1.04 and fit.share_ci[0] < share < fit.share_ci[1]
    # paper C.3.1: 3.8% [3.4, 4.2] of the second moment at k = 4 → no reallocation gains more than 1.04×
    assert round(reallocation_bound(0.038), 2) == 1.04
    assert reallocation_bound(np.array([0.034, 0.042])).round(3).tolist() == [1.035, 1.044]
    assert math.isnan(reallocation_bound(1.0))
    # its interval is scipy's percentile bootstrap of the same statistic
    noisy = uu * rng.gamma(20.0, 1 / 20.0, uu.shape)

    def stat(*cols, axis=-1):
        means = np.stack([c.mean(axis=axis) for c in cols], axis=-1)
        coef = np.linalg.lstsq(np.column_stack([np.ones(5), 1.0 / ks]), means.reshape(-1, 5).T, rcond=None)[0]
        out = (coef[1] / 4) / (coef[0] + coef[1] / 4)
        return out.reshape(means.shape[:-1])

    _close_intervals(continuation_fit(ks, noisy, n_resamples=20000, seed=2).share_ci,
                     _scipy_ci(stat, tuple(noisy.T), 20000, 0.95, 3))


@pytest.mark.parametrize("ks,uu,kwargs,match", [
    ([4, 4], np.ones((3, 2)), {}, "two different k"),
    ([1, 2], np.ones((3, 3)), {}, r"batches × 2 configurations"),
    ([0, 2], np.ones((3, 2)), {}, "positive continuation counts"),
    ([1, 2], -np.ones((3, 2)), {}, "≥ 0"),
    ([1, 2], np.ones((3, 2)), {"at_k": 0}, "at_k must be positive"),
])
def test_continuation_fit_refuses_what_it_cannot_fit(ks, uu, kwargs, match):
    with pytest.raises(ValueError, match=match):
        continuation_fit(ks, uu, n_resamples=10, seed=0, **kwargs)


# ---------------------------------------------------------------- exact gradient of a tabular policy

class Tabular:
    """An autoregressive policy over ``vocab`` tokens and a fixed ``horizon`` with one logit row
    θ[prefix] for every prefix, so ∇ log π(a | prefix) = e_a − π(· | prefix) on that prefix's row;
    R = 1 on a fixed random set of full sequences. J and ∇J are exact sums over all sequences."""

    def __init__(self, vocab=3, horizon=5, seed=7):
        self.V, self.H = vocab, horizon
        self.offsets = np.cumsum([0] + [vocab ** t for t in range(horizon)])
        rng = np.random.default_rng(seed)
        self.theta = rng.normal(0.0, 1.0, (self.offsets[-1], vocab))
        self.winning = rng.random(vocab ** horizon) < 0.4
        self.seqs = np.array(list(itertools.product(range(vocab), repeat=horizon)))

    @property
    def P(self):
        return self.theta.size

    def probs(self, theta=None):
        t = self.theta if theta is None else theta
        e = np.exp(t - t.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    def prefix_ids(self, s):
        ids, code = np.zeros(s.shape, dtype=int), np.zeros(s.shape[:-1], dtype=int)
        for t in range(self.H):
            ids[..., t] = self.offsets[t] + code
            code = code * self.V + s[..., t]
        return ids

    def reward(self, s):
        return self.winning[s @ self.V ** np.arange(self.H - 1, -1, -1)].astype(float)

    def J(self, theta=None):
        p = self.probs(theta)
        return float((np.prod(p[self.prefix_ids(self.seqs), self.seqs], axis=1) * self.reward(self.seqs)).sum())

    def exact_gradient(self):
        p = self.probs()
        pi = np.prod(p[self.prefix_ids(self.seqs), self.seqs], axis=1)
        return self.score_sums(self.seqs, np.ones(self.seqs.shape), pi * self.reward(self.seqs))

    def score_sums(self, s, w, weights=None, rows=None, n_rows=1):
        """Σ_n weights_n Σ_t w_{n,t} ∇log π(a_{n,t}), into row ``rows[n]`` of an n_rows × P array."""
        p, ids = self.probs(), self.prefix_ids(s)
        weights = np.ones(len(s)) if weights is None else weights
        rows = np.zeros(len(s), dtype=int) if rows is None else rows
        out = np.zeros((n_rows, self.theta.shape[0], self.V))
        coef = weights[:, None] * w
        for t in range(self.H):
            score = np.eye(self.V)[s[:, t]] - p[ids[:, t]]
            np.add.at(out, (rows, ids[:, t]), coef[:, t:t + 1] * score)
        out = out.reshape(n_rows, -1)
        return out[0] if n_rows == 1 else out

    def sample(self, rng, n, prefix=None, start=0):
        s = np.zeros((n, self.H), dtype=int) if prefix is None else prefix.copy()
        p, code = self.probs(), np.zeros(n, dtype=int)
        for t in range(start):
            code = code * self.V + s[:, t]
        for t in range(start, self.H):
            a = np.minimum((rng.random(n)[:, None] > np.cumsum(p[self.offsets[t] + code], 1)).sum(1), self.V - 1)
            s[:, t], code = a, code * self.V + a
        return s


CUTS = np.array([1, 3, 4])  # three interior cuts and the endpoint; one two-token segment


def reference_gradients(tab, rng, batches, per_batch=8, k=4, wrong_credit=False):
    """ĥ_b (batches × P): sampled completions, p̂ at each cut from k sampled continuations, the
    segment progress credit (prior 0.5, value R at the end), ĥ_b = (1/N) Σ_n Σ_t w ∇log π."""
    n = batches * per_batch
    s = tab.sample(rng, n)
    values = np.zeros((n, CUTS.size))
    for j, cut in enumerate(CUTS):
        continued = tab.sample(rng, n * k, np.repeat(s, k, axis=0), cut)
        values[:, j] = tab.reward(continued).reshape(n, k).mean(1)
    R = tab.reward(s)
    w = np.stack([segment_progress_credit(values[i], CUTS, tab.H, R[i]) for i in range(n)])
    if wrong_credit:  # the same credits on the wrong tokens of the completion
        w = rng.permuted(w, axis=1)
    return tab.score_sums(s, w, np.full(n, 1.0 / per_batch), np.repeat(np.arange(batches), per_batch), batches), s


@pytest.fixture(scope="module")
def tabular():
    tab = Tabular()
    return tab, tab.exact_gradient()


def _relative_error(h, g):
    return float(np.linalg.norm(h - g) / np.linalg.norm(g))


def test_the_exact_gradient_is_the_derivative_of_j(tabular):
    tab, grad = tabular
    eps, rng = 1e-6, np.random.default_rng(0)
    for flat in rng.choice(tab.P, 12, replace=False):
        bump = np.zeros(tab.P)
        bump[flat] = eps
        numeric = (tab.J(tab.theta + bump.reshape(tab.theta.shape)) - tab.J(tab.theta - bump.reshape(tab.theta.shape))) / (2 * eps)
        assert grad[flat] == pytest.approx(numeric, abs=1e-8)
    assert 0.1 < tab.J() < 0.9 and np.linalg.norm(grad) > 0.05


def test_the_reference_gradient_converges_to_the_exact_gradient(tabular):
    tab, grad = tabular
    rng = np.random.default_rng(21)
    few, _ = reference_gradients(tab, rng, 250)
    many, completions = reference_gradients(tab, rng, 4000)
    e_few, e_many = _relative_error(few.mean(0), grad), _relative_error(many.mean(0), grad)
    assert e_many <= 0.05 and e_many < e_few / 2, (e_few, e_many)  # about 1/√16 = 1/4
    # alignment outside a V of four sampled completions tends to 1; ∇J with itself is 1 exactly
    Q = tab.score_sums(completions[:4], np.ones((4, tab.H)), np.ones(4), np.arange(4), 4)
    assert np.linalg.matrix_rank(Q) == 4
    c_few, c_many = perp_cosine(grad, few.mean(0), Q), perp_cosine(grad, many.mean(0), Q)
    assert c_many > 0.99 and 1 - c_many < 1 - c_few, (c_few, c_many)
    assert perp_cosine(grad, grad, Q) == pytest.approx(1.0, abs=1e-12)
    # efficiency of u = ∇J against ĥ_b: (E⟨∇J, ĥ⟩)² / ‖∇J‖² → ‖∇J‖²; ⟨∇J, ĥ_b⟩ is clearly positive
    U = np.tile(grad, (len(many), 1))
    assert efficiency(U, many) == pytest.approx(grad @ grad, rel=0.05)
    assert positivity(many @ grad).z >= 3


def test_a_credit_on_the_wrong_tokens_does_not_converge(tabular):
    tab, grad = tabular
    wrong, _ = reference_gradients(tab, np.random.default_rng(22), 2000, wrong_credit=True)
    assert _relative_error(wrong.mean(0), grad) > 0.3


def test_an_outcome_only_update_lies_in_v_of_its_own_completions(tabular):
    tab, _ = tabular
    s = tab.sample(np.random.default_rng(23), 6)
    R = tab.reward(s)
    ones = np.ones((6, tab.H))
    Q = tab.score_sums(s, ones, np.ones(6), np.arange(6), 6)
    u = tab.score_sums(s, ones * (R - R.mean())[:, None], np.full(6, 1 / 6))
    assert np.linalg.norm(project_out(u, Q)) <= 1e-10 * max(np.linalg.norm(u), 1.0)
    assert math.isnan(perp_cosine(u, np.random.default_rng(0).normal(size=tab.P), Q))


def test_the_per_update_interval_covers_the_true_ratio_about_95_percent_of_the_time():
    rng = np.random.default_rng(31)
    mu, mu_base, m, m_base = 1.0, 0.6, 4.0, 3.0 + 0.5  # E⟨u,ĥ⟩ and E‖u‖² of both
    truth = (mu ** 2 / m) / (mu_base ** 2 / m_base)
    covered, reps = 0, 300
    for rep in range(reps):
        dot, uu = rng.normal(mu, 1.0, 32), rng.gamma(4.0, 1.0, 32)
        base_dot = 0.6 * dot + rng.normal(0.0, 0.5, 32)
        base_uu = 0.75 * uu + rng.gamma(1.0, 0.5, 32)
        lo, hi = relative_efficiency(dot, uu, np.ones(32), base_dot, base_uu, np.ones(32),
                                     n_resamples=500, seed=rep).per_update_ci
        covered += lo <= truth <= hi
    assert 0.88 <= covered / reps <= 0.99, covered / reps
