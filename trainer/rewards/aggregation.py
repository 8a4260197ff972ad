"""Multi-reward aggregation: from per-channel rewards of a group to GRPO advantages.

Multi-reward paper, App. C "Baseline ports": "Every baseline shapes a
scalar from the two binary channels of a group of n samples and feeds it to the standard GRPO
advantage unless stated otherwise." TAG is §5.2 and App. A.2. Pure numpy, no torch, no global
state: the Lagrangian multiplier lives in an explicit state value and Rubric Dropout draws from
a Generator the caller seeds.

Layout: ``R`` has shape (groups, n, K), channel ``anchor`` (default 0) being the primary /
anchor channel R_P and the others the auxiliary channels R_A (the paper has K = 2; every rule
here also takes K > 2, and ``docs/multi-reward.md`` says which K > 2 forms are ours).

The standard GRPO advantage of a shaped scalar r in a group (dense-rewards paper eq. (1), multi-reward paper App. A.1):
A_i = (r_i − r̄)/(σ + ε), σ the population SD, and A_i = 0 for every sample of a uniform
group ("if all rewards in the group coincide, every advantage is 0 by convention", App. A.2;
enforced exactly, not left to ε).

Rules (the table ``RULES``, name → rule), with r the shaped scalar:

* ``primary``: r = R_P (the R_P-only reference arm).
* ``additive``: r = (R_P + R_A)/2; for K channels the mean.
* ``and``: r = min_k R_k.
* ``lsc``: r = Σ_k log σ(a(R_k − c)), a = 4, c = 1/2 (LSC soft-AND). On binary channels it is
  affine in Σ_k R_k, so its advantages equal ``additive``'s sample by sample (kept as a check).
* ``lagrangian``: r = R_P + ν_t R_A; after the batch, dual ascent on E[R_A] ≥ τ:
  ν_{t+1} = max{0, ν_t + α_dual (τ − R̄_A)}, τ = 0.5, α_dual = 0.05, ν_0 = 0.5 (once per
  rollout batch: one call of ``rule_advantages`` is one batch). One ν per auxiliary channel.
* ``pg_ot``: per group, standardize each channel, take the Pareto front of the n points and
  set r_i = −min_{j ∈ front} ‖z_i − z_j‖² (front points score 0); ε → 0 limit of PG-OT.
* ``mo_grpo``: A_i = Σ_k (r_ik − r̄_k)/(s_k + ε), used directly (no second standardization).
* ``dr_grpo``: r additive, A_i = (r_i − r̄)·|o_i|/L_max (no SD division; the 1/|o_i| loss
  normalizer replaced by 1/L_max, implemented by scaling A_i).
* ``dropout`` (Rubric Dropout): per group, with probability p = 0.5 the auxiliary channel is
  dropped and the group is scored by R_P alone, otherwise by the additive rule.
* ``weighted``: r = Σ_k w_k R_k (weights not stated in the paper: required here).
* ``additive_kl``: r additive; the loss adds β·KL(π_θ ‖ π_base) with β from ``rule_kl_beta``
  (β ∈ {0.01, 1} in the paper). The KL term itself is the trainer's.
* ``tag``: r = R_anchor · (1 + Σ_k λ_k R_k)/(1 + Σ_k λ_k) over the auxiliary channels k
  (two channels: joint success 1, primary-only 1/(1+λ), auxiliary-only 0, neither 0; λ = 1 in
  the main runs). The K > 2 form is our generalization (the paper's formula is lost).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, NamedTuple, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trainer.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "RULES",
    "AggregationConfig",
    "GroupAdvantages",
    "LagrangeState",
    "Rule",
    "RuleName",
    "channel_means",
    "grpo_advantage",
    "iteration_log",
    "parse_aggregation",
    "pareto_front",
    "rule_advantages",
    "rule_kl_beta",
    "shaped_reward",
    "tag_reward",
    "zscore",
]

RuleName = Literal["primary", "additive", "and", "lsc", "lagrangian", "pg_ot", "mo_grpo", "dr_grpo",
               "dropout", "weighted", "additive_kl", "tag"]


class AggregationConfig(BaseModel):
    """One arm's aggregation rule and its constants (paper values as defaults: App. C "Baseline ports", C.2)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rule: RuleName = "additive"
    anchor: int = Field(0, ge=0)  # index of R_P / the TAG anchor among the channels
    weights: list[float] | None = None  # "weighted": one per channel (required)
    lam: float | list[float] = 1.0  # TAG λ: one value for every auxiliary channel, or one each
    beta: float = Field(0.01, ge=0)  # "additive_kl": KL coefficient (paper: 0.01 or 1)
    tau: float = 0.5  # Lagrangian constraint E[R_A] ≥ τ
    dual_step: float = Field(0.05, gt=0)  # α_dual
    nu0: float = Field(0.5, ge=0)  # ν_0
    dropout_p: float = Field(0.5, ge=0, le=1)  # Rubric Dropout: P(drop the auxiliary channel)
    lsc_a: float = Field(4.0, gt=0)
    lsc_c: float = 0.5

    @model_validator(mode="after")
    def _check(self) -> "AggregationConfig":
        if self.rule == "weighted" and not self.weights:
            raise ValueError("rule 'weighted' needs weights (one per channel)")
        if self.weights is not None and not all(math.isfinite(w) for w in self.weights):
            raise ValueError("weights must be finite")
        lam = [self.lam] if isinstance(self.lam, (int, float)) else self.lam
        if not lam or any(not math.isfinite(x) or x < 0 for x in lam):
            raise ValueError("lam: TAG weights must be finite and ≥ 0")
        if not math.isfinite(self.tau) or not math.isfinite(self.lsc_c):
            raise ValueError("tau and lsc_c must be finite")
        return self


def parse_aggregation(data: Mapping[str, Any], *, where: str = "aggregation") -> AggregationConfig:
    """Validate an aggregation table; every problem becomes one line of a ``ConfigError``."""
    try:
        return AggregationConfig.model_validate(dict(data))
    except ValidationError as e:
        lines = []
        for err in e.errors():
            key = ".".join(str(x) for x in err["loc"]) or "(table)"
            msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
            lines.append(f"{where}: {key}: {msg}")
        raise ConfigError(*lines) from None


def rule_kl_beta(config: AggregationConfig) -> float:
    """The KL-to-base coefficient the loss must use: β for ``additive_kl``, else 0 (App. C "Baseline ports")."""
    return float(config.beta) if config.rule == "additive_kl" else 0.0


@dataclass(frozen=True)
class LagrangeState:
    """The Lagrangian arm's multipliers, one per auxiliary channel (channel order, anchor skipped).

    ``nu`` is ν_{t+1}, for the next batch; ``nu_used`` the ν_t this batch was shaped with;
    ``aux_rate`` this batch's R̄_A; ``steps`` the number of batches seen.
    """

    nu: tuple[float, ...]
    nu_used: tuple[float, ...] = ()
    aux_rate: tuple[float, ...] = ()
    steps: int = 0


class GroupAdvantages(NamedTuple):
    advantages: np.ndarray  # (groups, n)
    rewards: np.ndarray | None  # the shaped scalar (groups, n); None for mo_grpo
    state: Any  # LagrangeState for "lagrangian", else the state passed in


# ---------------------------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------------------------
def _uniform(x: np.ndarray, axis: int) -> np.ndarray:
    import numpy as np  # lock and verify start without numpy
    return np.max(x, axis=axis, keepdims=True) == np.min(x, axis=axis, keepdims=True)


def zscore(x: np.ndarray, *, eps: float = 1e-6, axis: int = 1) -> np.ndarray:
    """(x − mean)/(population SD + ε) along ``axis``, exactly 0 where all values coincide."""
    import numpy as np  # lock and verify start without numpy
    x = np.asarray(x, dtype=np.float64)
    d = x - x.mean(axis=axis, keepdims=True)
    z = d / (x.std(axis=axis, keepdims=True) + eps)
    return np.where(_uniform(x, axis), 0.0, z)


def grpo_advantage(r: np.ndarray, *, eps: float = 1e-6) -> np.ndarray:
    """The standard GRPO advantage of shaped rewards ``r`` (groups, n): per-group z-score."""
    import numpy as np  # lock and verify start without numpy
    return zscore(np.asarray(r, dtype=np.float64), eps=eps, axis=1)


def _split(R: np.ndarray, anchor: int) -> tuple[np.ndarray, np.ndarray]:
    """(R_anchor (G, n), auxiliary channels (G, n, K−1) in channel order)."""
    import numpy as np  # lock and verify start without numpy
    aux = np.delete(R, anchor, axis=2)
    return R[:, :, anchor], aux


def tag_reward(R: np.ndarray, anchor: int = 0, lam: float | Sequence[float] = 1.0) -> np.ndarray:
    """TAG: R_anchor · (1 + Σ_k λ_k R_k)/(1 + Σ_k λ_k) over the auxiliary channels (§5.2; our K-channel form).

    Two binary channels: joint success 1, primary-only 1/(1+λ), auxiliary-only 0, neither 0
    (App. A.2); λ = 0 is training on the anchor alone (App. A.2). Works on (..., K) arrays.
    """
    import numpy as np  # lock and verify start without numpy
    R = np.asarray(R, dtype=np.float64)
    K = R.shape[-1]
    if not 0 <= anchor < K:
        raise ValueError(f"anchor {anchor} out of range for {K} channels")
    lam_v = np.broadcast_to(np.asarray(lam, dtype=np.float64), (K - 1,))
    if (lam_v < 0).any():
        raise ValueError("TAG λ must be ≥ 0")
    aux = np.delete(R, anchor, axis=-1)
    return R[..., anchor] * (1.0 + aux @ lam_v) / (1.0 + lam_v.sum())


def pareto_front(points: np.ndarray) -> np.ndarray:
    """Mask of the non-dominated rows of ``points`` (n, K), every coordinate maximized.

    Row j dominates row i when it is ≥ in every coordinate and > in at least one; duplicates of
    a front point are all on the front.
    """
    import numpy as np  # lock and verify start without numpy
    p = np.asarray(points, dtype=np.float64)
    ge = (p[None, :, :] >= p[:, None, :]).all(axis=2)  # ge[i, j]: j ≥ i everywhere
    gt = (p[None, :, :] > p[:, None, :]).any(axis=2)
    return ~(ge & gt).any(axis=1)


def _pg_ot(R: np.ndarray, eps: float) -> np.ndarray:
    """PG-OT reward-level port (ε→0): −(squared distance to the nearest Pareto-front point)
    in per-group standardized channel space. A zero-SD channel standardizes to 0 (not stated)."""
    import numpy as np  # lock and verify start without numpy
    Z = zscore(R, eps=eps, axis=1)  # (G, n, K), per channel
    out = np.empty(R.shape[:2])
    for g in range(R.shape[0]):
        z = Z[g]
        front = z[pareto_front(z)]
        d2 = ((z[:, None, :] - front[None, :, :]) ** 2).sum(axis=2)
        out[g] = -d2.min(axis=1)
    return out


def _log_sigmoid(x: np.ndarray) -> np.ndarray:
    import numpy as np  # lock and verify start without numpy
    return -np.logaddexp(0.0, -x)


# ---------------------------------------------------------------------------------------------
# Shaping and advantages
# ---------------------------------------------------------------------------------------------
def _as_config(rule: str | AggregationConfig, params: Mapping[str, Any] | None) -> AggregationConfig:
    if isinstance(rule, AggregationConfig):
        if params:
            raise ValueError("pass either an AggregationConfig or a rule name with params, not both")
        return rule
    return parse_aggregation({"rule": rule, **dict(params or {})})


def _check_R(R: Any, cfg: AggregationConfig) -> np.ndarray:
    import numpy as np  # lock and verify start without numpy
    R = np.asarray(R, dtype=np.float64)
    if R.ndim != 3 or R.shape[1] < 1 or R.shape[2] < 1:
        raise ValueError(f"rewards must have shape (groups, n, channels), got {R.shape}")
    if not np.isfinite(R).all():
        raise ValueError("rewards must be finite")
    K = R.shape[2]
    if cfg.anchor >= K:
        raise ValueError(f"anchor {cfg.anchor} out of range for {K} channels")
    if cfg.rule == "weighted" and len(cfg.weights or ()) != K:
        raise ValueError(f"rule 'weighted' needs {K} weights, got {len(cfg.weights or ())}")
    if cfg.rule == "tag" and not isinstance(cfg.lam, (int, float)) and len(cfg.lam) != K - 1:
        raise ValueError(f"rule 'tag' needs one λ per auxiliary channel ({K - 1}), got {len(cfg.lam)}")
    return R


# Each rule: its shaped scalar r (None: the rule has none) and its advantages. ``nu`` and ``keep``
# reach the shaping of ``lagrangian`` and ``dropout``; ``inputs`` carries what some rules need.
class RuleInputs(NamedTuple):
    lengths: Any = None  # (groups, n) completion lengths |o_i| (dr_grpo)
    l_max: float | None = None  # the completion cap L_max (dr_grpo)
    rng: np.random.Generator | None = None  # seeded; Rubric Dropout's draws
    state: Any = None  # the Lagrangian ν carried between batches
    eps: float = 1e-6


def _anchor(R, cfg, **_):
    return _split(R, cfg.anchor)[0].copy()


def _mean(R, cfg, **_):
    return R.mean(axis=2)


def _min(R, cfg, **_):
    return R.min(axis=2)


def _lsc(R, cfg, **_):
    return _log_sigmoid(cfg.lsc_a * (R - cfg.lsc_c)).sum(axis=2)


def _weighted(R, cfg, **_):
    import numpy as np  # lock and verify start without numpy
    return R @ np.asarray(cfg.weights, dtype=np.float64)


def _tag(R, cfg, **_):
    return tag_reward(R, cfg.anchor, cfg.lam)


def _lagrangian(R, cfg, *, nu=None, **_):
    import numpy as np  # lock and verify start without numpy
    P, A = _split(R, cfg.anchor)
    nu_v = np.full(A.shape[2], cfg.nu0) if nu is None else np.asarray(nu, dtype=np.float64)
    return P + A @ nu_v


def _dropout(R, cfg, *, keep=None, **_):
    import numpy as np  # lock and verify start without numpy
    P, A = _split(R, cfg.anchor)
    kept = np.ones(A.shape[::2], dtype=bool) if keep is None else np.asarray(keep, dtype=bool)
    # mean of the anchor and the kept auxiliary channels: R_P alone when all are dropped
    return (P + (A * kept[:, None, :]).sum(axis=2)) / (1.0 + kept.sum(axis=1))[:, None]


def _pg_ot_reward(R, cfg, **_):
    return _pg_ot(R, eps=1e-12)


def _no_scalar(R, cfg, **_):
    return None


def _standard(R, cfg, inputs: RuleInputs) -> "GroupAdvantages":
    """GRPO's advantage of the rule's shaped scalar (dense-rewards paper eq. (1) per group)."""
    r = RULES[cfg.rule].shape(R, cfg)
    return GroupAdvantages(grpo_advantage(r, eps=inputs.eps), r, inputs.state)


def _mo_grpo_advantages(R, cfg, inputs: RuleInputs) -> "GroupAdvantages":
    # Σ_k per-channel group z-scores, used directly (multi-reward paper §3.1–3.2, App. C "Baseline ports")
    return GroupAdvantages(zscore(R, eps=inputs.eps, axis=1).sum(axis=2), None, inputs.state)


def _dr_grpo_advantages(R, cfg, inputs: RuleInputs) -> "GroupAdvantages":
    import numpy as np  # lock and verify start without numpy
    if inputs.lengths is None or inputs.l_max is None:
        raise ValueError("rule 'dr_grpo' needs lengths (groups, n) and l_max")
    L = np.asarray(inputs.lengths, dtype=np.float64)
    if L.shape != R.shape[:2] or not inputs.l_max > 0:
        raise ValueError(f"dr_grpo: lengths must have shape {R.shape[:2]} and l_max must be > 0")
    r = R.mean(axis=2)
    d = np.where(_uniform(r, 1), 0.0, r - r.mean(axis=1, keepdims=True))
    return GroupAdvantages(d * (L / float(inputs.l_max)), r, inputs.state)


def _lagrangian_advantages(R, cfg, inputs: RuleInputs) -> "GroupAdvantages":
    import numpy as np  # lock and verify start without numpy
    A = _split(R, cfg.anchor)[1]
    state = inputs.state
    st = state if isinstance(state, LagrangeState) else LagrangeState(nu=(cfg.nu0,) * A.shape[2])
    if len(st.nu) != A.shape[2]:
        raise ValueError(f"lagrangian state has {len(st.nu)} multipliers for {A.shape[2]} auxiliary channels")
    nu_t = np.asarray(st.nu, dtype=np.float64)
    r = _lagrangian(R, cfg, nu=nu_t)
    rate = A.mean(axis=(0, 1))  # R̄_A over the whole rollout batch
    nu_next = np.maximum(0.0, nu_t + cfg.dual_step * (cfg.tau - rate))
    new = LagrangeState(tuple(map(float, nu_next)), tuple(map(float, nu_t)), tuple(map(float, rate)), st.steps + 1)
    return GroupAdvantages(grpo_advantage(r, eps=inputs.eps), r, new)


def _dropout_advantages(R, cfg, inputs: RuleInputs) -> "GroupAdvantages":
    if inputs.rng is None:
        raise ValueError("rule 'dropout' needs rng (a seeded numpy Generator)")
    A = _split(R, cfg.anchor)[1]
    keep = inputs.rng.random((R.shape[0], A.shape[2])) >= cfg.dropout_p  # one draw per group and channel
    r = _dropout(R, cfg, keep=keep)
    return GroupAdvantages(grpo_advantage(r, eps=inputs.eps), r, inputs.state)


class Rule(NamedTuple):
    """An aggregation rule: the scalar it shapes, and how advantages follow from it."""

    shape: Callable[..., np.ndarray | None]
    advantages: Callable[[np.ndarray, AggregationConfig, RuleInputs], "GroupAdvantages"] = _standard


# ``aggregation.rule`` → the rule (see the module docstring); keys = the names ``RuleName`` allows.
RULES: dict[str, Rule] = {
    "primary": Rule(_anchor),
    "additive": Rule(_mean),
    "and": Rule(_min),
    "lsc": Rule(_lsc),
    "lagrangian": Rule(_lagrangian, _lagrangian_advantages),
    "pg_ot": Rule(_pg_ot_reward),
    "mo_grpo": Rule(_no_scalar, _mo_grpo_advantages),
    "dr_grpo": Rule(_mean, _dr_grpo_advantages),
    "dropout": Rule(_dropout, _dropout_advantages),
    "weighted": Rule(_weighted),
    "additive_kl": Rule(_mean),
    "tag": Rule(_tag),
}


def shaped_reward(R: np.ndarray, config: AggregationConfig, *, nu: Sequence[float] | None = None,
                  keep: np.ndarray | None = None) -> np.ndarray | None:
    """The scalar r (groups, n) a rule feeds to the advantage; None for ``mo_grpo``.

    ``nu``: the Lagrangian multipliers to use (default ν_0); ``keep``: for ``dropout``, a
    (groups, K−1) mask of the auxiliary channels kept in each group (default: all kept).
    """
    R = _check_R(R, config)
    return RULES[config.rule].shape(R, config, nu=nu, keep=keep)


def rule_advantages(
    R: Any,
    *,
    rule: str | AggregationConfig,
    params: Mapping[str, Any] | None = None,
    lengths: Any = None,
    l_max: float | None = None,
    rng: np.random.Generator | None = None,
    state: Any = None,
    eps: float = 1e-6,
) -> GroupAdvantages:
    """Advantages (groups, n) of one rollout batch under an aggregation ``rule`` (module docstring).

    ``lengths`` (groups, n) and ``l_max`` (completion lengths |o_i| and the cap L_max) are
    needed by ``dr_grpo``; ``rng`` (a seeded Generator) by ``dropout``; ``state`` carries the
    Lagrangian ν between batches (None: start at ν_0). Returns (advantages, shaped rewards or
    None, new state).
    """
    cfg = _as_config(rule, params)
    R = _check_R(R, cfg)
    return RULES[cfg.rule].advantages(R, cfg, RuleInputs(lengths, l_max, rng, state, eps))


# ---------------------------------------------------------------------------------------------
# Logging
# ---------------------------------------------------------------------------------------------
def channel_means(R: Any, names: Sequence[str]) -> dict[str, float]:
    """Mean of every channel over a batch or an evaluation set: ``R`` (..., K)."""
    import numpy as np  # lock and verify start without numpy
    R = np.asarray(R, dtype=np.float64)
    if R.shape[-1] != len(names):
        raise ValueError(f"{len(names)} channel names for {R.shape[-1]} channels")
    flat = R.reshape(-1, R.shape[-1])
    return {f"channel/{n}": float(flat[:, k].mean()) if flat.size else float("nan") for k, n in enumerate(names)}


def iteration_log(R: Any, names: Sequence[str], result: GroupAdvantages | None = None,
                  config: AggregationConfig | None = None) -> dict[str, float]:
    """What one iteration logs: every channel's mean, the shaped reward's mean, and the
    Lagrangian ν (used and next) or the KL β when the rule has them."""
    import numpy as np  # lock and verify start without numpy
    out = channel_means(R, names)
    if result is not None and result.rewards is not None:
        out["shaped_reward"] = float(np.mean(result.rewards))
    if result is not None and isinstance(result.state, LagrangeState):
        aux = [n for k, n in enumerate(names) if k != (config.anchor if config else 0)]
        for n, used, nxt in zip(aux, result.state.nu_used, result.state.nu):
            out[f"lagrange/nu/{n}"] = used
            out[f"lagrange/nu_next/{n}"] = nxt
    if config is not None and config.rule == "additive_kl":
        out["kl_beta"] = rule_kl_beta(config)
    return out
