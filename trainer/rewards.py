"""Per-iteration rewards of the trainer: the verifier reward, or reward channels + an aggregation rule.

Issue 7 (``docs/multi-reward.md``, "Wiring in the trainer"). A recipe without ``channels`` trains
on the verifier reward exactly as before (``verify_rewards``; credit computes eq. 1). A recipe
with ``channels`` scores every completion on each channel (``trainer/channels.py``), shapes the
group's rewards with the ``aggregation`` rule (``trainer/aggregate.py``) and hands the rule's
sequence-level advantages to the credit rule (``outcome_credit(advantages=...)``).

* ``channels``: ``["correct", "negative"]`` or tables ``{name = "brief", threshold = 20}``; the
  ``correct`` channel uses the recipe's ``reward_verifier`` unless it names its own ``verifier``.
* ``aggregation``: a ``parse_aggregation`` table (``rule``, ``lam``, ``beta``, ``tau``, ...);
  ``{}`` is the rule ``additive`` (the table's default), ``primary`` trains on the anchor alone.
* ``anchor``: ``""`` keeps ``aggregation.anchor`` (an index, default 0 = the first channel); a
  channel name selects that channel; ``"elected"`` reads ``<study>/election.json`` (written by
  ``prereg elect``) when the run starts.

No torch at import (``trainer.config`` validates recipes with :func:`check_reward_config`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from trainer.aggregate import AggregationConfig, LagrangeState, group_advantages, iteration_log, parse_aggregation
from trainer.channels import Channel, Completion, get_channel, score_channels
from trainer.config import ConfigError

ELECTION_FILE = "election.json"

__all__ = ["ELECTION_FILE", "IterationRewards", "Rewarder", "check_reward_config", "eval_channel_counts",
           "make_rewarder", "read_election", "state_from_dict", "state_to_dict"]


@dataclass(frozen=True)
class IterationRewards:
    """What the credit block gets: rewards [N] (the shaped scalar, or the anchor channel when the
    rule has none), advantages [N] (None: eq. 1 on the rewards), log columns, the rule's state."""

    rewards: Any  # torch.Tensor
    advantages: Any  # torch.Tensor | None
    log: dict[str, float] = field(default_factory=dict)
    state: Any = None


def _channel_spec(item: str | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if isinstance(item, str):
        return item, {}
    d = dict(item)
    name = d.pop("name", None)
    if not isinstance(name, str):
        raise ValueError("channels: a channel table needs name = \"<channel>\"")
    return name, d


def build_channels(cfg) -> list[Channel]:
    """The recipe's channels (``correct`` gets the recipe's verifier unless it names one)."""
    out = []
    for item in cfg.channels:
        name, params = _channel_spec(item)
        if name == "correct":
            params.setdefault("verifier", cfg.reward_verifier)
        out.append(get_channel(name, **params))
    return out


def check_reward_config(cfg) -> None:
    """Validate the multi-reward block of a recipe; ValueErrors (one line) for pydantic."""
    try:
        agg = parse_aggregation(cfg.aggregation)
    except ConfigError as e:
        raise ValueError("; ".join(e.lines)) from None
    if not cfg.channels:
        if cfg.aggregation or cfg.anchor:
            raise ValueError("aggregation/anchor need channels (e.g. channels = [\"correct\", \"negative\"])")
        return
    names = []
    for item in cfg.channels:
        name, params = _channel_spec(item)
        if get_channel(name, **params).needs_program:  # unknown names / parameters: ValueError
            raise ValueError(f"channels: {name!r} needs a code task and the sandbox; the trainer's tasks are math "
                             "(program channels are scored by trainer/channels.py but not wired into training)")
        names.append(name)
    if len(set(names)) != len(names):
        raise ValueError(f"channels: a channel is listed twice ({', '.join(names)})")
    if cfg.anchor and cfg.anchor != "elected" and cfg.anchor not in names:
        raise ValueError(f"anchor: {cfg.anchor!r} is not one of the channels ({', '.join(names)}) nor 'elected'")
    if agg.anchor >= len(names):
        raise ValueError(f"aggregation: anchor {agg.anchor} out of range for {len(names)} channels")
    K = len(names)
    if agg.rule == "weighted" and len(agg.weights or ()) != K:
        raise ValueError(f"aggregation: rule 'weighted' needs {K} weights, got {len(agg.weights or ())}")
    if agg.rule == "tag" and not isinstance(agg.lam, (int, float)) and len(agg.lam) != K - 1:
        raise ValueError(f"aggregation: rule 'tag' needs one λ per auxiliary channel ({K - 1}), got {len(agg.lam)}")


def read_election(study_dir: str | Path) -> dict[str, Any]:
    """``<study>/election.json`` (``prereg elect``); a clear ConfigError when it is missing."""
    path = Path(study_dir) / ELECTION_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no anchor election; anchor = 'elected' needs it: run `prereg elect {study_dir}` first") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: unreadable election record ({e.msg})") from None
    if not isinstance(data.get("elected"), str):
        raise ConfigError(f"{path}: the election record names no elected channel")
    return data


@dataclass
class Rewarder:
    """The per-iteration reward of one run (see the module docstring)."""

    channels: list[Channel]
    names: list[str]
    agg: AggregationConfig | None
    anchor_name: str = ""

    @property
    def multi(self) -> bool:
        return self.agg is not None

    @property
    def kl_beta(self) -> float:
        from trainer.aggregate import rule_kl_beta  # noqa: PLC0415

        return rule_kl_beta(self.agg) if self.agg is not None else 0.0

    def __call__(self, verifier, texts: Sequence[str], lengths: Sequence[int], problems: Sequence[Any],
                 group_size: int, *, state: Any = None, rng: np.random.Generator | None = None,
                 l_max: int | None = None, eps: float = 1e-6) -> IterationRewards:
        import torch  # noqa: PLC0415

        if self.agg is None:
            from trainer.loop import verify_rewards  # noqa: PLC0415

            return IterationRewards(verify_rewards(verifier, list(texts), [p.answer for p in problems]), None, {}, state)
        comps = [Completion(t, int(n)) for t, n in zip(texts, lengths)]
        S = _score_memo(self.channels, comps, problems)
        G = len(texts) // group_size
        R = S.reshape(G, group_size, len(self.channels))
        L = np.asarray(lengths, dtype=np.float64).reshape(G, group_size)
        res = group_advantages(R, rule=self.agg, lengths=L, l_max=l_max, rng=rng, state=state, eps=eps)
        log = iteration_log(R, self.names, res, self.agg)
        shaped = res.rewards if res.rewards is not None else R[:, :, self.agg.anchor]
        adv = np.asarray(res.advantages, dtype=np.float64)
        # groups whose advantages carry a signal (the verifier path's "mixed" groups)
        log["mixed_share"] = float((np.abs(adv).max(axis=1) > 0).mean())
        return IterationRewards(torch.tensor(shaped.reshape(-1), dtype=torch.float32),
                                torch.tensor(adv.reshape(-1), dtype=torch.float32), log, res.state)


def _score_memo(channels: Sequence[Channel], comps: Sequence[Completion], problems: Sequence[Any]) -> np.ndarray:
    """score_channels with identical (text, length, answer) triples scored once."""
    keys = [(c.text, int(c.tokens), getattr(p, "answer", None)) for c, p in zip(comps, problems)]
    first: dict[tuple, int] = {}
    idx = [first.setdefault(k, len(first)) for k in keys]
    uniq_c, uniq_p = [None] * len(first), [None] * len(first)
    for i, j in enumerate(idx):
        if uniq_c[j] is None:
            uniq_c[j], uniq_p[j] = comps[i], problems[i]
    S = score_channels(channels, uniq_c, uniq_p)
    return S[np.asarray(idx, dtype=int)] if len(idx) else np.zeros((0, len(channels)))


def make_rewarder(cfg, study_dir: str | Path | None = None) -> Rewarder:
    """The run's rewarder; ``anchor = "elected"`` reads the election record now (run start)."""
    if not cfg.channels:
        return Rewarder([], [], None)
    channels = build_channels(cfg)
    names = [c.name for c in channels]
    agg = parse_aggregation(cfg.aggregation)
    anchor = cfg.anchor
    if anchor == "elected":
        if study_dir is None:
            raise ConfigError("anchor = 'elected' needs the study folder (its election.json)")
        anchor = read_election(study_dir)["elected"]
        if anchor not in names:
            raise ConfigError(f"{Path(study_dir) / ELECTION_FILE}: the elected channel {anchor!r} is not one of "
                              f"this configuration's channels ({', '.join(names)})")
    if anchor:
        agg = agg.model_copy(update={"anchor": names.index(anchor)})
    return Rewarder(channels, names, agg, names[agg.anchor])


def state_to_dict(state: Any) -> dict[str, Any] | None:
    """The aggregation state for a checkpoint (the Lagrangian ν; None for stateless rules)."""
    if isinstance(state, LagrangeState):
        return {"kind": "lagrange", "nu": list(state.nu), "steps": state.steps}
    return None


def state_from_dict(data: dict[str, Any] | None) -> Any:
    if data and data.get("kind") == "lagrange":
        return LagrangeState(nu=tuple(float(x) for x in data["nu"]), steps=int(data.get("steps", 0)))
    return None


# ---------------------------------------------------------------------------------------------
# Evaluation counts
# ---------------------------------------------------------------------------------------------
def eval_channels(cfg) -> list[Channel]:
    """The auxiliary channels counted at evaluation: the recipe's non-correct math channels, and
    ``negative`` always (cheap; threshold-free). ``brief`` only when the recipe sets one (its
    threshold is the recipe's)."""
    out: dict[str, Channel] = {}
    for ch in (build_channels(cfg) if cfg.channels else []):
        if ch.name != "correct" and not ch.needs_program:
            out[ch.name] = ch
    out.setdefault("negative", get_channel("negative"))
    return list(out.values())


def eval_channel_counts(channels: Sequence[Channel], texts: Sequence[str], lengths: Sequence[int], problem: Any,
                        correct: Sequence[bool]) -> dict[str, int]:
    """Per-problem eval-row columns: ``ch_<name>`` = samples with channel = 1 and
    ``ch_correct_<name>`` = samples correct (default verifier) with channel = 1."""
    row: dict[str, int] = {}
    if not channels:
        return row
    S = score_channels(channels, [Completion(t, int(n)) for t, n in zip(texts, lengths)], [problem] * len(texts))
    ok = np.asarray(correct, dtype=bool)
    for k, ch in enumerate(channels):
        hit = S[:, k] > 0
        row[f"ch_{ch.name}"] = int(hit.sum())
        row[f"ch_correct_{ch.name}"] = int((hit & ok).sum())
    return row
