"""The three-action tabular model of the multi-reward paper (§3.3 and Appendix A; sections below are
that paper's).

Model (§3.3, Appendix A.1 Step 0). Two binary channels, primary R_P and auxiliary R_A, and a
softmax policy over three actions, pi_j = exp(theta_j) / sum_k exp(theta_k). Each response has one of
four outcome types ``(R_P, R_A)``, indexed here as

    0: neither (0,0)    1: auxiliary-only (0,1)    2: primary-only (1,0)    3: joint success (1,1)

with the action laws (rows of :func:`action_laws`)

    a_0: neither w.p. 1
    a_1: joint w.p. eta, auxiliary-only w.p. 1-eta
    a_2: joint w.p. eta, primary-only w.p. (1-eta)rho, neither w.p. (1-eta)(1-rho).

Rules (``rule``), each a centered advantage of one response in a group of n:

* ``"grpo"``: the GRPO z-score with the population SD of the additive reward f = (R_P+R_A)/2
  (levels b=0, m=1/2, h=1); all advantages 0 when the group is uniform (App. A.2 "by convention").
  With the others' sum S' and sum of squares Q', d=(n-1)r-S', V=(n-1)Q'-S'^2, it equals
  phi(r) = sqrt(n-1) d / sqrt(d^2 + nV) (App. A.1 Step 1).
* ``"dr_grpo"``: A = r - rbar on the additive reward (App. A.1 "Other estimators").
* ``"mo_grpo"``: sum over the two channels of the per-channel population-SD z-scores (§3.1–3.2,
  MO-GRPO's advantage); a channel that is uniform in the group contributes 0 (the paper does not say;
  this mirrors GRPO's convention).
* ``"pg"``: the exact policy gradient, A_j = rbar_j - rbar_pi on the additive reward (App. A.3).
* ``"tag"``: GRPO's z-score on R_TAG = R_P (c + (1-c) R_A), c = 1/(1+lam) (§5.2 / A.2; the
  realized levels are 0, c, 1 for neither/auxiliary-only, primary-only, joint).

Conditional means (App. A.1 Step 0). m_j is the expectation of the advantage of a response whose action
is a_j, over its own outcome (law of a_j) and the other n-1 responses drawn i.i.d. from pi. The
others' outcome types are multinomial(n-1, q) with q = pi @ action_laws, so

    m_j = sum_t P_{a_j}(t) sum_c Mult(c; n-1, q) A(t, c),

a polynomial in q. The per-configuration advantages A(t, c) (times the multinomial coefficients) are
tabulated once per (rule, n, lam) (:func:`advantage_table`); an evaluation is then a dot product of
4 x C(n+2, 3) fixed values with the monomials q^c. Exact PG fits the same form with one "other"
response: A(t, t') = r_t - r_{t'} averages to r_t - rbar_pi.

Recursion (App. A.3): theta_{t+1,j} = theta_{t,j} + alpha pi_j m_j(pi_t), the conditional mean of one
on-policy step Delta theta_j = (alpha/n) sum_{i: a_i = j} A_i. :func:`run_recursion` and
:func:`iterations_to_reach` run it in a numba kernel (about 0.3 s per 10^6 iterations at
n = 8 on 2 slow cores; see docs/multi-reward-analyses.md). :func:`sampled_step` is the sampled tabular GRPO update
it is the expectation of.

numba is the optional extra ``analyses``: the module imports without it (the tables, conditional
means and sampled steps are numpy), and the two recursion functions then refuse in one line naming
the extra rather than run the same loops in plain Python: the same numbers (tested), but about
490 us an iteration against 0.6 us compiled at n = 8 (measured on 2 busy cores), which would turn
the figures' long runs into hours without saying so.

numba itself is imported, and the kernels compiled, on the recursion's first use (importing this
module stays cheap); the compiled code is cached on disk in :func:`numba_cache_dir`, so later
processes load it instead of compiling again (about 3.5-6 s on 2 cores).
"""

from __future__ import annotations

import math
import os
import tempfile
from functools import lru_cache
from pathlib import Path

import numpy as np

NUMBA_MISSING = "the tabular recursion needs numba: pip install 'prereg-kit[analyses]'"
CACHE_ENV = "PREREG_CACHE"


def numba_cache_dir() -> Path | None:
    """The folder the compiled kernels are cached in: ``$PREREG_CACHE`` if set, else
    ``~/.cache/prereg-kit/numba``, created; None when it cannot be created or written (the kernels
    are then compiled in every process, as without a cache)."""
    folder = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "prereg-kit" / "numba").expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError:
        return None
    return folder


def _cached_jit(fn, folder: Path | None):
    """``numba.njit(fn)`` whose compiled code is kept in ``folder`` (not numba's global
    NUMBA_CACHE_DIR, which would redirect every other package's cache too); uncached when None.

    numba has no per-function cache folder, so this gives the dispatcher a cache whose one locator
    is ``folder`` (what ``njit(cache=True)`` does with its default locators)."""
    from numba import njit
    from numba.core.caching import CompileResultCacheImpl, FunctionCache, UserProvidedCacheLocator

    disp = njit(cache=False)(fn)
    if folder is None:
        return disp

    class Locator(UserProvidedCacheLocator):
        def __init__(self, py_func, py_file):
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = os.path.join(str(folder), self.get_suitable_cache_subpath(py_file))

        @classmethod
        def from_function(cls, py_func, py_file):
            return super(UserProvidedCacheLocator, cls).from_function(py_func, py_file)  # not gated on CACHE_DIR

    class Impl(CompileResultCacheImpl):
        _locator_classes = [Locator]

    class Cache(FunctionCache):
        _impl_class = Impl

    try:
        disp._cache = Cache(fn)
    except (OSError, RuntimeError):  # no usable folder after all: compile without a cache
        pass
    return disp


@lru_cache(maxsize=1)
def _kernel():
    """The compiled recursion (numba imported and the kernels compiled here, on first use, with
    their compiled code cached in :func:`numba_cache_dir`); a one-line ImportError naming the extra
    when numba is not installed."""
    try:
        import numba  # noqa: F401
    except ImportError:
        raise ImportError(NUMBA_MISSING) from None
    folder = numba_cache_dir()
    # callees first: a kernel calls the others through this module's globals, which must hold
    # the compiled versions when it is typed
    for name in ("_softmax_into", "_step", "_recurse"):
        globals()[name] = _cached_jit(_PLAIN[name], folder)
    return globals()["_recurse"]


RULES = ("grpo", "dr_grpo", "mo_grpo", "pg", "tag")
GROUP_RULES = ("grpo", "dr_grpo", "mo_grpo", "tag")

# Channel values of the four outcome types, in type order (neither, aux-only, primary-only, joint).
TYPE_RP = np.array([0.0, 0.0, 1.0, 1.0])
TYPE_RA = np.array([0.0, 1.0, 0.0, 1.0])


def _check_rule(rule: str) -> None:
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")


def action_laws(eta: float, rho: float) -> np.ndarray:
    """P_{a_j}(t): the (3, 4) matrix of outcome-type probabilities per action (§3.3, A.1 Step 0)."""
    if not (0.0 <= eta <= 1.0 and 0.0 <= rho <= 1.0):
        raise ValueError("eta and rho must lie in [0, 1]")
    return np.array(
        [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0 - eta, 0.0, eta],
            [(1.0 - eta) * (1.0 - rho), 0.0, (1.0 - eta) * rho, eta],
        ]
    )


def scalar_reward(rule: str, r_p, r_a, lam: float = 1.0):
    """The scalar reward a rule standardizes: additive (R_P+R_A)/2, or R_TAG = R_P (c + (1-c) R_A).

    R_TAG with c = 1/(1+lam) is the paper's TAG reward with the primary channel as anchor (§5.2,
    reconstructed from A.2: realized levels 0, c, 1). MO-GRPO has no scalar reward (it raises).
    """
    _check_rule(rule)
    r_p = np.asarray(r_p, dtype=float)
    r_a = np.asarray(r_a, dtype=float)
    if rule == "tag":
        if lam < 0:
            raise ValueError("lam must be >= 0")
        c = 1.0 / (1.0 + lam)
        return r_p * (c + (1.0 - c) * r_a)
    if rule == "mo_grpo":
        raise ValueError("MO-GRPO standardizes each channel; it has no scalar reward")
    return 0.5 * (r_p + r_a)


def _zscore(r: np.ndarray) -> np.ndarray:
    """Population-SD z-score along the last axis; 0 for a uniform group (exact test, no epsilon)."""
    mean = r.mean(axis=-1, keepdims=True)
    sd = r.std(axis=-1, keepdims=True)
    uniform = r.max(axis=-1, keepdims=True) == r.min(axis=-1, keepdims=True)
    # A uniform group can have sd ~ 1e-17 from rounding; the exact max == min test avoids 0/0 noise.
    return np.where(uniform, 0.0, (r - mean) / np.where(uniform, 1.0, sd))


def tabular_advantages(rule: str, r_p, r_a, lam: float = 1.0) -> np.ndarray:
    """Advantages of every response of a group (last axis) under a group rule (§3.1-3.2, A.1-A.2),
    in the tabular model's form: exact, without the trainer's ε, ``dr_grpo`` without lengths (the
    trainer's rules on sampled rewards are ``trainer.rewards.aggregation.rule_advantages``).

    ``grpo``/``tag``: population-SD z-score of the scalar reward; ``dr_grpo``: r - rbar;
    ``mo_grpo``: sum of the per-channel z-scores (a uniform channel contributes 0).
    """
    if rule not in GROUP_RULES:
        raise ValueError(f"group rules are {GROUP_RULES}, got {rule!r}")
    r_p = np.asarray(r_p, dtype=float)
    r_a = np.asarray(r_a, dtype=float)
    if rule == "mo_grpo":
        return _zscore(r_p) + _zscore(r_a)
    r = scalar_reward(rule, r_p, r_a, lam)
    if rule == "dr_grpo":
        return r - r.mean(axis=-1, keepdims=True)
    return _zscore(r)


def _compositions(total: int, parts: int) -> np.ndarray:
    """All vectors of ``parts`` nonnegative ints summing to ``total`` (lexicographic)."""
    if parts == 1:
        return np.array([[total]], dtype=np.int64)
    rows = []
    for first in range(total, -1, -1):
        for rest in _compositions(total - first, parts - 1):
            rows.append([first, *rest])
    return np.array(rows, dtype=np.int64)


@lru_cache(maxsize=64)
def advantage_table(rule: str, n: int, lam: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Tabulate m_t(q) = sum_c Mult(c; k, q) A(t, c) as ``(configs, table)``.

    ``configs`` (K, 4) holds the others' outcome-type counts c (k = n-1 others; k = 1 for exact PG);
    ``table[t, c]`` = multinomial coefficient of c times the advantage of an own response of type t
    in the group made of it and c. Then the own-type conditional mean is
    ``table @ prod_t q_t**configs[:, t]``. Cached per (rule, n, lam); arrays are read-only.
    """
    _check_rule(rule)
    if rule != "pg" and n < 2:
        raise ValueError("a group needs n >= 2")
    k = 1 if rule == "pg" else n - 1
    configs = _compositions(k, 4)
    coef = np.array([math.factorial(k) / np.prod([math.factorial(int(x)) for x in c]) for c in configs])
    others = [np.repeat(np.arange(4), c) for c in configs]  # outcome types of the k others
    table = np.empty((4, len(configs)))
    for t in range(4):
        types = np.array([[t, *o] for o in others])  # (K, k+1): own response first
        if rule == "pg":
            r = scalar_reward("grpo", TYPE_RP[types], TYPE_RA[types])
            adv = r[:, 0] - r[:, 1]  # E over the other's type = r_t - rbar_pi
        else:
            adv = tabular_advantages(rule, TYPE_RP[types], TYPE_RA[types], lam)[:, 0]
        table[t] = coef * adv
    configs.setflags(write=False)
    table.setflags(write=False)
    return configs, table


def _as_pi(pi) -> np.ndarray:
    p = np.asarray(pi, dtype=float)
    if p.shape != (3,) or np.any(p < 0) or abs(p.sum() - 1.0) > 1e-9:
        raise ValueError("pi must be a probability vector of length 3")
    return p


def type_probabilities(pi, eta: float, rho: float) -> np.ndarray:
    """q_t: the law of one response's outcome type under pi (the others' multinomial cell probabilities).

    q = (pi_0 + (1-eta)(1-rho) pi_2, (1-eta) pi_1, (1-eta) rho pi_2, eta (pi_1 + pi_2)); merging the
    equal-level cells gives the level probabilities P(b), P(m), P(h) of the others' rewards (App. A.3).
    """
    return _as_pi(pi) @ action_laws(eta, rho)


def conditional_mean_advantages(pi, *, rule: str, eta: float, rho: float, n: int, lam: float = 1.0):
    """(m_0, m_1, m_2): the conditional mean advantage of a response with action a_j (App. A.1 Step 0).

    m_j = E[A | a = a_j], over the response's own outcome (law of a_j) and the other n-1 responses
    drawn i.i.d. from pi, computed by exact enumeration of the others' outcome-type counts. Then
    E[Delta theta_j | theta_t] = alpha pi_j m_j; sum_j pi_j m_j = 0 (Eq. 8); |m_j| <= sqrt(n-1) for
    GRPO/TAG. For ``rule="pg"``, m_j = rbar_j - rbar_pi (A.3) and n is ignored; ``lam`` only
    matters for TAG.
    """
    p = _as_pi(pi)
    laws = action_laws(eta, rho)
    configs, table = advantage_table(rule, int(n), float(lam))
    q = p @ laws
    mono = np.prod(q[None, :] ** configs, axis=1)
    m = laws @ (table @ mono)
    return float(m[0]), float(m[1]), float(m[2])


def expected_logodds_drift(pi, i: int, j: int, *, rule: str, eta: float, rho: float, n: int,
                           alpha: float, lam: float = 1.0) -> float:
    """E[Delta log(pi_i/pi_j) | theta_t] = alpha (pi_i m_i - pi_j m_j) (App. A.1 Step 3; log-odds are
    logit differences)."""
    m = conditional_mean_advantages(pi, rule=rule, eta=eta, rho=rho, n=n, lam=lam)
    p = _as_pi(pi)
    return alpha * (p[i] * m[i] - p[j] * m[j])


def kappa_n(s: float, n: int) -> float:
    """kappa_n(s) of the two-level identity (11) (App. A.1-A.2; our reconstruction from the drift it
    gives in App. A.2, checked numerically).

    For two-level groups with success probability mu_j per action and s = sum_j pi_j mu_j,
    m_j = kappa_n(s) (mu_j - s), kappa_n(s) = E[sqrt((n-1-K)/(1+K))] + E[sqrt(K/(n-K))],
    K ~ Bin(n-1, s).
    """
    from scipy.stats import binom

    k = np.arange(n)
    w = binom.pmf(k, n - 1, s)
    return float(np.sum(w * (np.sqrt((n - 1 - k) / (1 + k)) + np.sqrt(k / (n - k)))))


# ----------------------------------------------------------------------------- numba kernels


def _softmax_into(theta, pi):
    """pi ← softmax(theta) over the three actions (max-shifted for stability)."""
    mx = max(theta[0], max(theta[1], theta[2]))
    z = 0.0
    for j in range(3):
        pi[j] = math.exp(theta[j] - mx)
        z += pi[j]
    for j in range(3):
        pi[j] /= z


def _step(theta, pi, laws, configs, table, alpha, pw, mt):
    """One exact recursion step in place; pi must hold softmax(theta) on entry and on exit."""
    k = configs.shape[0]
    deg = pw.shape[1]
    for t in range(4):
        q = 0.0
        for j in range(3):
            q += pi[j] * laws[j, t]
        pw[t, 0] = 1.0
        for e in range(1, deg):
            pw[t, e] = pw[t, e - 1] * q
        mt[t] = 0.0
    for c in range(k):
        w = pw[0, configs[c, 0]] * pw[1, configs[c, 1]] * pw[2, configs[c, 2]] * pw[3, configs[c, 3]]
        for t in range(4):
            mt[t] += table[t, c] * w
    for j in range(3):
        mj = laws[j, 0] * mt[0] + laws[j, 1] * mt[1] + laws[j, 2] * mt[2] + laws[j, 3] * mt[3]
        theta[j] += alpha * pi[j] * mj
    _softmax_into(theta, pi)


def _recurse(theta, laws, configs, table, alpha, max_iter, action, threshold, record_at, traj):
    """Run the recursion from theta (modified in place) for up to max_iter steps.

    Stops at the first t with pi_t[action] >= threshold when action >= 0 (returns t), else returns
    max_iter; writes pi_t into traj[r] for each t == record_at[r] (sorted) that is reached.
    """
    pi = np.empty(3)
    _softmax_into(theta, pi)
    pw = np.empty((4, configs.max() + 1))
    mt = np.empty(4)
    r = 0
    nrec = record_at.shape[0]
    t = 0
    while True:
        while r < nrec and record_at[r] == t:
            traj[r, :] = pi
            r += 1
        if action >= 0 and pi[action] >= threshold:
            return t
        if t >= max_iter:
            return -1 if action >= 0 else t
        _step(theta, pi, laws, configs, table, alpha, pw, mt)
        t += 1


# The kernels as plain Python (numba missing: run as they are, e.g. to test them; numba present:
# compiled by _kernel).
_PLAIN = {"_softmax_into": _softmax_into, "_step": _step, "_recurse": _recurse}


def _prepare(pi0, rule, eta, rho, n, lam):
    p = _as_pi(pi0)
    if np.any(p <= 0):
        raise ValueError("the recursion needs a finite initialization (all pi0 > 0)")
    configs, table = advantage_table(rule, int(n), float(lam))
    return np.log(p), action_laws(eta, rho), np.ascontiguousarray(configs), np.ascontiguousarray(table)


def iterations_to_reach(pi0, *, rule: str, eta: float, rho: float, n: int, alpha: float,
                        action: int, threshold: float, lam: float = 1.0, max_iter: int = 10**8):
    """The first iteration t of the exact recursion with pi_t(action) >= threshold (App. A.1, A.2, A.3).

    Recursion theta_{t+1,j} = theta_{t,j} + alpha pi_j m_j(pi_t) from theta_0 = log pi0; t = 0 if pi0
    already qualifies. Returns None if not reached within ``max_iter`` iterations.
    """
    if action not in (0, 1, 2):
        raise ValueError("action must be 0, 1 or 2")
    recurse = _kernel()
    theta, laws, configs, table = _prepare(pi0, rule, eta, rho, n, lam)
    t = recurse(theta, laws, configs, table, float(alpha), int(max_iter), int(action), float(threshold),
                 np.empty(0, dtype=np.int64), np.empty((0, 3)))
    return None if t < 0 else int(t)


def run_recursion(pi0, *, rule: str, eta: float, rho: float, n: int, alpha: float, steps: int,
                  lam: float = 1.0, record_at=None):
    """Trajectory of the exact recursion: (record_at, pi) with pi[r] = pi_t at t = record_at[r].

    ``record_at`` defaults to every iteration 0..steps; pass e.g. a log-spaced integer grid for long
    runs. The recursion is App. A.3's theta_{t+1,j} = theta_{t,j} + alpha pi_j m_j(pi_t).
    """
    ts = np.arange(steps + 1, dtype=np.int64) if record_at is None else np.unique(np.asarray(record_at, dtype=np.int64))
    if ts.size and (ts[0] < 0 or ts[-1] > steps):
        raise ValueError("record_at must lie in [0, steps]")
    recurse = _kernel()
    theta, laws, configs, table = _prepare(pi0, rule, eta, rho, n, lam)
    traj = np.empty((ts.size, 3))
    recurse(theta, laws, configs, table, float(alpha), int(steps), -1, 2.0, ts, traj)
    return ts, traj


# ----------------------------------------------------------------------------- sampled GRPO


def sampled_step(pi, *, rule: str, eta: float, rho: float, n: int, alpha: float, rng: np.random.Generator,
                 lam: float = 1.0, groups: int = 1) -> np.ndarray:
    """Delta theta of ``groups`` independent sampled on-policy steps from the same pi, shape (groups, 3).

    Each group: n actions i.i.d. from pi, outcome types from the action laws, advantages by the
    group rule, Delta theta_j = (alpha/n) sum_{i: a_i = j} A_i (App. A.1 Step 0). Its expectation is
    alpha pi_j m_j, the recursion's step. Exact PG is not a sampled estimator (raises).
    """
    if rule not in GROUP_RULES:
        raise ValueError(f"sampled steps need a group rule {GROUP_RULES}, got {rule!r}")
    p = _as_pi(pi)
    laws = action_laws(eta, rho)
    actions = rng.choice(3, size=(groups, n), p=p)
    cum = np.cumsum(laws, axis=1)[actions]  # (groups, n, 4) inverse-CDF per response
    u = rng.random((groups, n, 1))
    types = np.minimum((u >= cum).sum(axis=-1), 3)
    adv = tabular_advantages(rule, TYPE_RP[types], TYPE_RA[types], lam)
    onehot = actions[..., None] == np.arange(3)
    return (alpha / n) * np.einsum("gi,gij->gj", adv, onehot)


def sampled_trajectory(pi0, *, rule: str, eta: float, rho: float, n: int, alpha: float, steps: int,
                       seed: int, lam: float = 1.0, batch: int = 1) -> np.ndarray:
    """pi_t, t = 0..steps, of sampled tabular GRPO (one update per step, ``batch`` groups averaged).

    theta_{t+1} = theta_t + mean over the batch's groups of the sampled Delta theta (:func:`sampled_step`),
    seeded by ``np.random.default_rng(seed)``.
    """
    rng = np.random.default_rng(seed)
    theta = np.log(_as_pi(pi0))
    out = np.empty((steps + 1, 3))
    for t in range(steps + 1):
        e = np.exp(theta - theta.max())
        p = e / e.sum()
        out[t] = p
        if t < steps:
            theta = theta + sampled_step(p, rule=rule, eta=eta, rho=rho, n=n, alpha=alpha, rng=rng,
                                         lam=lam, groups=batch).mean(axis=0)
    return out
