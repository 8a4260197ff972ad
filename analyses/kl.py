"""Reverse versus forward KL on Gaussian mixtures: the multi-reward paper's Appendix B illustration.

The paper (Appendix B, "Gaussian illustration"; Figure 8) compares, for a base policy pi_0 and a probe
pi_T, the forward divergence KL_fwd = D_KL(pi_0 || pi_T), evaluated under the base policy, with the
reverse divergence KL_rev = D_KL(pi_T || pi_0), evaluated under the probe (the anchor-election
statistic of §5.1 up to the per-token normalization).

Three cases:

* invented mode: pi_0 = N(0,1), pi_T = (1-eps) N(delta,1) + eps N(Delta,1) with delta = 0 and a far
  mode (eps small, Delta large). Well separated, KL_fwd ~ eps + delta^2/2 and KL_rev ~ eps (l - 1),
  l = log eps + Delta^2/2 (the invented mode's per-sample log-ratio);
* benign drift: delta != 0 with eps = 0, where KL_fwd = KL_rev = delta^2/2 exactly;
* mode dropping: a bimodal base (1-w) N(0,1) + w N(Delta,1) and a probe that keeps only the mode at
  Delta, pi_T = N(Delta,1) (:func:`mode_dropping_kl`; the paper gives only the values 8.31 / 0.689,
  which this construction with w = 1/2, Delta = 6 reproduces).

Every divergence is available exactly (``method="exact"``: adaptive quadrature of the log-density
ratio with log-sum-exp mixture densities, breakpoints at the components' means) or by Monte-Carlo
(``method="mc"``: the mean log-ratio over ``n`` samples, forward from pi_0, reverse from pi_T, drawn
with ``np.random.default_rng(seed)``; the paper uses N = 2048). All components have unit variance.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import integrate
from scipy.special import logsumexp

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _mixture(weights, means) -> tuple[np.ndarray, np.ndarray]:
    w = np.asarray(weights, dtype=float)
    mu = np.asarray(means, dtype=float)
    keep = w > 0  # a zero-weight component has no density and no samples
    w, mu = w[keep], mu[keep]
    if w.size == 0 or np.any(w < 0) or abs(w.sum() - 1.0) > 1e-12:
        raise ValueError("mixture weights must be nonnegative and sum to 1")
    return w, mu


def mixture_logpdf(x, weights, means) -> np.ndarray:
    """log sum_k w_k N(x; mu_k, 1), stable by log-sum-exp (far tails of far modes stay finite)."""
    w, mu = _mixture(weights, means)
    x = np.asarray(x, dtype=float)[..., None]
    return logsumexp(np.log(w) - 0.5 * (x - mu) ** 2, axis=-1) - _HALF_LOG_2PI


def _scalar_logpdf(weights, means):
    """:func:`mixture_logpdf` at one point, the same log-sum-exp in plain floats: quadrature calls
    it thousands of times per divergence, where numpy's per-call overhead is most of the cost."""
    w, mu = _mixture(weights, means)
    terms = list(zip(np.log(w).tolist(), mu.tolist()))

    def logpdf(x: float) -> float:
        e = [lw - 0.5 * (x - m) ** 2 for lw, m in terms]
        top = max(e)
        return top + math.log(math.fsum(math.exp(v - top) for v in e)) - _HALF_LOG_2PI

    return logpdf


def mixture_sample(weights, means, n: int, rng: np.random.Generator) -> np.ndarray:
    """n samples of the unit-variance mixture sum_k w_k N(mu_k, 1)."""
    w, mu = _mixture(weights, means)
    comp = rng.choice(w.size, size=n, p=w)
    return mu[comp] + rng.standard_normal(n)


def mixture_kl(p, q, *, method: str = "exact", n: int = 2048, seed: int = 0) -> float:
    """D_KL(p || q) = E_p[log p - log q] for unit-variance mixtures p, q given as (weights, means).

    ``exact``: quadrature over [min mean - 40, max mean + 40] (the integrand is negligible beyond; it
    has Gaussian tails) split at every component mean; ``mc``: mean log-ratio over n samples of p.
    """
    if method == "mc":
        x = mixture_sample(*p, n, np.random.default_rng(seed))
        return float(np.mean(mixture_logpdf(x, *p) - mixture_logpdf(x, *q)))
    if method != "exact":
        raise ValueError("method must be 'exact' or 'mc'")
    means = np.concatenate([_mixture(*p)[1], _mixture(*q)[1]])
    lo, hi = means.min() - 40.0, means.max() + 40.0
    cuts = np.unique(np.concatenate([[lo, hi], means]))
    log_p, log_q = _scalar_logpdf(*p), _scalar_logpdf(*q)

    def f(x: float) -> float:
        lp = log_p(x)
        return math.exp(lp) * (lp - log_q(x))

    total = 0.0
    for a, b in zip(cuts[:-1], cuts[1:]):
        total += integrate.quad(f, a, b, limit=200, epsabs=1e-13, epsrel=1e-10)[0]
    return total


def gaussian_mode_kl(eps: float, separation: float, drift: float = 0.0, *, method: str = "exact",
                     n: int = 2048, seed: int = 0) -> tuple[float, float]:
    """(KL_fwd, KL_rev) for base N(0,1) and probe (1-eps) N(drift,1) + eps N(separation,1) (App. B).

    KL_fwd = D_KL(pi_0 || pi_T) (forgetting monitor; Lemma B.1(i): <= -log(1-eps) when drift = 0),
    KL_rev = D_KL(pi_T || pi_0) (invention monitor, ~ eps (log eps + separation^2/2 - 1) when well
    separated). ``method="mc"`` uses n samples (forward from pi_0 with ``seed``, reverse from pi_T
    with ``seed + 1``); ``"exact"`` integrates numerically.
    """
    if not 0.0 <= eps <= 1.0:
        raise ValueError("eps must lie in [0, 1]")
    base = ([1.0], [0.0])
    probe = ([1.0 - eps, eps], [drift, separation])
    fwd = mixture_kl(base, probe, method=method, n=n, seed=seed)
    rev = mixture_kl(probe, base, method=method, n=n, seed=seed + 1)
    return fwd, rev


def mode_dropping_kl(separation: float = 6.0, weight: float = 0.5, *, method: str = "exact",
                     n: int = 2048, seed: int = 0) -> tuple[float, float]:
    """(KL_fwd, KL_rev) when the probe drops a base mode (App. B "mode dropping"; construction ours).

    Base pi_0 = (1-weight) N(0,1) + weight N(separation,1); probe pi_T = N(separation,1) keeps one mode.
    KL_rev ~ -log(weight) (small); KL_fwd ~ (1-weight) separation^2/2 + ... (large): the ratio reverses.
    """
    base = ([1.0 - weight, weight], [0.0, separation])
    probe = ([1.0], [separation])
    fwd = mixture_kl(base, probe, method=method, n=n, seed=seed)
    rev = mixture_kl(probe, base, method=method, n=n, seed=seed + 1)
    return fwd, rev


def approx_kl(eps: float, separation: float, drift: float = 0.0) -> tuple[float, float]:
    """The paper's well-separated approximations (App. B): KL_fwd ~ eps + drift^2/2, KL_rev ~ eps (l - 1)
    with l = log eps + separation^2/2 (at drift = 0; the paper adds drift^2/2 under drift)."""
    ell = math.log(eps) + 0.5 * separation**2
    return eps + 0.5 * drift**2, eps * (ell - 1.0) + 0.5 * drift**2


def logratio_moments(p, q, *, points: int = 2**12 + 1) -> tuple[float, float]:
    """Mean and variance of the per-sample log-ratio log p(x) − log q(x) under x ~ p.

    The mean is D_KL(p || q); the variance sets the Monte-Carlo standard error sqrt(var / N) of an
    N-sample estimate of it (the paper's N = 2048 estimates, App. B). Simpson's rule on ``points``
    equally spaced points over [min mean − 12, max mean + 12] (unit-variance components: the mass
    beyond is below 1e−32), vectorized, so a grid of cells costs milliseconds each.
    """
    from scipy.integrate import simpson

    means = np.concatenate([_mixture(*p)[1], _mixture(*q)[1]])
    x = np.linspace(means.min() - 12.0, means.max() + 12.0, points)
    lp = mixture_logpdf(x, *p)
    dens, r = np.exp(lp), lp - mixture_logpdf(x, *q)
    mean = float(simpson(dens * r, x=x))
    var = float(simpson(dens * (r - mean) ** 2, x=x))
    return mean, max(var, 0.0)


def _logratios(p, q, n: int, rng: np.random.Generator) -> tuple[float, float]:
    x = mixture_sample(*p, n, rng)
    r = mixture_logpdf(x, *p) - mixture_logpdf(x, *q)
    return float(r.mean()), float(r.var(ddof=1))


def detection_z(eps: float, drift: float, separation: float = 6.0, *, n: int = 2048, method: str = "exact",
                seed: int = 0) -> tuple[float, float]:
    """(z_fwd, z_rev): how far the invented mode moves each KL estimate beyond benign drift alone
    (multi-reward paper App. B, "Detection under benign drift", Table B.2).

    The probe with the mode on is (1−eps) N(drift,1) + eps N(separation,1), with it off N(drift,1),
    the base N(0,1). Each KL is estimated from its own n samples (forward under the base, reverse
    under the probe), and z = (KL_on − KL_off) / sqrt(SE_on² + SE_off²) with SE = sd(log-ratio)/√n:
    the mode-on excess ("eps on top of drift²/2" forward, "eps(l−1) on top of drift²/2" reverse) in
    units of the two estimates' sampling error. ``method="exact"``: the expected z from the
    means and variances of the log-ratios by numerical integration (:func:`logratio_moments`); ``"mc"``: one draw of the four
    n-sample estimates with ``np.random.default_rng(seed)``. A zero standard error with a positive
    excess is z = +inf (nothing to swamp it). The z definition and the alarm level are our reading:
    the paper's table is not in the text we have.
    """
    if not 0.0 < eps < 1.0:
        raise ValueError("eps must lie in (0, 1)")
    if n < 2:
        raise ValueError("n must be at least 2")
    base = ([1.0], [0.0])
    on = ([1.0 - eps, eps], [drift, separation])
    off = ([1.0], [drift])
    pairs = {"fwd": ((base, on), (base, off)), "rev": ((on, base), (off, base))}
    rng = np.random.default_rng(seed) if method == "mc" else None
    if method not in ("exact", "mc"):
        raise ValueError("method must be 'exact' or 'mc'")
    out = []
    for key in ("fwd", "rev"):
        (p1, q1), (p0, q0) = pairs[key]
        if method == "exact":
            (m1, v1), (m0, v0) = logratio_moments(p1, q1), logratio_moments(p0, q0)
        else:
            (m1, v1), (m0, v0) = _logratios(p1, q1, n, rng), _logratios(p0, q0, n, rng)
        se = math.sqrt((v1 + v0) / n)
        diff = m1 - m0
        out.append(diff / se if se > 0 else (math.inf if diff > 0 else 0.0))
    return out[0], out[1]


def detection_grid(drifts, epsilons, separation: float = 6.0, *, n: int = 2048, z_alarm: float = 5.0,
                   method: str = "exact", seed: int = 0) -> dict:
    """The z ≥ ``z_alarm`` alarm shares of KL_fwd and KL_rev over a (drift δ, eps ε) grid (App. B,
    Table B.2: "over a (δ, ε) grid the z ≥ 5 alarm region covers 22% of the grid for KL_fwd and 63%
    for KL_rev"; the grid itself is not printed in the text).

    Returns ``z_fwd`` and ``z_rev`` (arrays, rows = drifts, columns = epsilons, from
    :func:`detection_z`), ``alarm_fwd`` / ``alarm_rev`` (z ≥ z_alarm) and ``share_fwd`` /
    ``share_rev`` (the alarmed fraction of the cells). ``method="mc"`` draws cell (i, j) with seed
    ``seed + i·len(epsilons) + j``.
    """
    drifts, epsilons = list(drifts), list(epsilons)
    if not drifts or not epsilons:
        raise ValueError("the grid needs at least one drift and one eps")
    zf = np.empty((len(drifts), len(epsilons)))
    zr = np.empty_like(zf)
    for i, d in enumerate(drifts):
        for j, e in enumerate(epsilons):
            zf[i, j], zr[i, j] = detection_z(e, d, separation, n=n, method=method, seed=seed + i * len(epsilons) + j)
    af, ar = zf >= z_alarm, zr >= z_alarm
    return {"z_fwd": zf, "z_rev": zr, "alarm_fwd": af, "alarm_rev": ar,
            "share_fwd": float(af.mean()), "share_rev": float(ar.mean())}
