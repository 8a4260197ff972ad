"""Prompt selection: which prompts an iteration trains on.

Dense-rewards paper §2.2 "Prompt selection" and §C.1 "Prompt filters". Each filter iteration
draws ``candidates`` (24) prompts from the seed's stream, ``prompt_stream_batch(pool, seed,
iteration, 24)``: stream positions 24·i … 24·i+23, so a filter passes through the stream three
times as fast as outcome-only GRPO (whose iteration i takes positions 8·i … 8·i+7). A predictor
gives each candidate a predicted success p̂:

* ``critic``: ridge regression on the policy's hidden state at the last prompt token (one no-grad
  prefill of the candidates, charged to the selection stage), refit every iteration on the
  (feature, group mean reward) pairs of the prompts trained in the previous ``prompt_critic_window``
  iterations;
* ``history``: the prompt's group mean reward from the last iteration it was trained in, else the
  mean group reward of the last ``recent_window`` iterations;
* ``level``: the mean group reward of the prompt's level over the last ``recent_window``
  iterations (else of all levels).

The rule keeps the ``keep_nearest`` (6) candidates with p̂ nearest ``target`` plus ``keep_random``
(2) drawn uniformly from the others; until ``warmup_prompts`` (32) prompts have been trained it
takes the first ``prompts_per_iteration`` candidates. ``random_choice`` (the control) scores the
same candidates with the critic (prefill, fit and log) but trains on ``prompts_per_iteration`` of
them drawn uniformly. ``dynamic`` (DAPO-style dynamic sampling) consumes the plain stream in order,
``prompts_per_iteration`` groups per generation call, and keeps mixed-outcome groups until it has
``prompts_per_iteration``; every other generated group is charged to B as ``discarded``.

Every random draw comes from ``derive_seed(seed, iteration, purpose)``; the selection state (fit
data, reward history, dynamic sampling's stream cursor) is saved in checkpoints, so a resumed run
selects exactly what an uninterrupted run selects. See docs/interventions.md, "Prompt selection".
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Sequence

import numpy as np
import torch

from trainer.config import TrainerConfig, derive_seed
from trainer.core.engines import concat_rollouts
from trainer.core.policy import hidden_states
from trainer.data.problems import Problem, prompt_stream_batch, prompt_stream_positions
from trainer.interventions.ridge import Ridge


# --------------------------------------------------------------------------------------------
# Pure rules (tested on given predictions)
# --------------------------------------------------------------------------------------------
def nearest_target(pred: Sequence[float], target: float, keep_nearest: int, keep_random: int,
                   rng: np.random.Generator) -> list[int]:
    """Candidate indices kept: the ``keep_nearest`` with prediction nearest ``target`` (ties: the
    earlier candidate), then ``keep_random`` drawn uniformly without replacement from the rest.
    Returned in candidate (stream) order."""
    pred = np.asarray(pred, dtype=np.float64)
    order = np.argsort(np.abs(pred - target), kind="stable")
    near = order[:keep_nearest]
    rest = np.sort(order[keep_nearest:])
    k = min(keep_random, len(rest))
    extra = rng.choice(rest, size=k, replace=False) if k else np.empty(0, dtype=np.int64)
    return sorted(int(i) for i in np.concatenate([near, extra]))


def uniform_choice(n_candidates: int, k: int, rng: np.random.Generator) -> list[int]:
    """``k`` of ``n_candidates`` drawn uniformly without replacement, in candidate order."""
    return sorted(int(i) for i in rng.choice(n_candidates, size=k, replace=False))


def ids_hash(ids: Sequence[str]) -> str:
    """A short hash of an ordered list of prompt ids (logged: equal hashes = equal candidates)."""
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:12]


def candidate_positions(cfg: TrainerConfig, pool_size: int, seed: int, iteration: int) -> np.ndarray:
    """The candidates' pool indices: a function of (seed, iteration) only, the same for every
    candidate rule (so a filter and its random-choice control score the same candidates)."""
    return prompt_stream_batch(pool_size, seed, iteration, cfg.selection.candidates)


def prompt_features(policy, prompts: Sequence[str], layer: int = -1) -> torch.Tensor:
    """The policy's hidden state at the last prompt token (``hidden_states[layer]``; −1: the last
    layer, after the final norm), for each rendered prompt: [n, d] float32 on the CPU. One
    left-padded prefill under no_grad."""
    enc = policy.tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
    return hidden_states(policy, enc["input_ids"].to(policy.device), enc["attention_mask"].to(policy.device), -1,
                         layer)


# --------------------------------------------------------------------------------------------
# State and the selector
# --------------------------------------------------------------------------------------------
@dataclass
class SelectionState:
    """What selection remembers across iterations (saved in checkpoints)."""

    trained_prompts: int = 0  # prompts trained so far (the warm-up counts them)
    cursor: int = 0  # dynamic sampling: the next stream position
    critic_x: list[torch.Tensor] = field(default_factory=list)  # per iteration: features of trained prompts
    critic_y: list[torch.Tensor] = field(default_factory=list)  # per iteration: their group mean rewards
    recent: list[tuple[list[float], list[int]]] = field(default_factory=list)  # per iteration: (group means, levels)
    last_reward: dict[str, float] = field(default_factory=dict)  # prompt id -> last group mean reward

    def to_dict(self) -> dict:
        return {"trained_prompts": self.trained_prompts, "cursor": self.cursor, "critic_x": list(self.critic_x),
                "critic_y": list(self.critic_y), "recent": [(list(a), list(b)) for a, b in self.recent],
                "last_reward": dict(self.last_reward)}

    @classmethod
    def from_dict(cls, d: dict) -> "SelectionState":
        return cls(int(d["trained_prompts"]), int(d["cursor"]), list(d["critic_x"]), list(d["critic_y"]),
                   [(list(a), list(b)) for a, b in d["recent"]], dict(d["last_reward"]))


NO_LEVEL = -1


def _level(p: Problem) -> int:
    return NO_LEVEL if p.level is None else int(p.level)


class Selector:
    """Prompt selection for one run: ``choose`` (selection stage), ``complete`` (generation stage;
    dynamic sampling), ``record`` (after the rewards; returns the iteration row's ``sel_*``
    columns). ``selection = "none"`` is the plain stream and logs nothing."""

    def __init__(self, cfg: TrainerConfig, seed: int, pool, policy=None, engine=None,
                 render: Callable[[Problem], str] | None = None, reward: Callable[[str, str], bool] | None = None):
        self.cfg, self.seed, self.pool = cfg, seed, pool
        self.policy, self.engine, self.render, self.reward = policy, engine, render, reward
        self.rule = SELECTION_RULES[cfg.selection.rule]
        self.state = SelectionState()
        self.discarded_tokens = 0  # of the current iteration
        self._info: dict = {}
        self._features: torch.Tensor | None = None  # trained prompts' features (critic-scored rules)

    # --- selection stage
    def choose(self, it: int) -> list[Problem]:
        self.discarded_tokens, self._features, self._info = 0, None, {}
        return self.rule.choose(self, it)

    def predict(self, cand: Sequence[Problem], feats: torch.Tensor | None) -> np.ndarray | None:
        """Predicted success of each candidate (None: the predictor has no data yet)."""
        return self.rule.predict(self, cand, feats)

    # --- generation stage (dynamic sampling)
    def complete(self, it: int, problems: list[Problem], roll):
        """Dynamic sampling: check the groups generated so far, generate further batches of the
        stream until ``prompts_per_iteration`` mixed groups are kept or ``dynamic_max_groups``
        groups are generated; returns the trained (problems, rollouts). Other rules: unchanged."""
        cfg = self.cfg
        if not self.rule.dynamic:
            return problems, roll
        n, G = cfg.rollout.prompts_per_iteration, cfg.rollout.group_size
        batches = [(problems, roll)]
        groups: list[tuple[int, int, bool]] = []  # (batch, group in batch, mixed)
        seen: dict[tuple[str, str], float] = {}

        def scan(b: int) -> None:
            probs, r = batches[b]
            for g, p in enumerate(probs):
                rs = []
                for t in r.texts[g * G:(g + 1) * G]:
                    if (t, p.answer) not in seen:
                        seen[(t, p.answer)] = float(self.reward(t, p.answer))
                    rs.append(seen[(t, p.answer)])
                groups.append((b, g, 0.0 < sum(rs) < len(rs)))

        scan(0)
        made = n
        while sum(m for *_, m in groups) < n and made < cfg.selection.dynamic_max_groups:
            k = min(n, cfg.selection.dynamic_max_groups - made)
            pos = prompt_stream_positions(len(self.pool), self.seed, self.state.cursor + made, self.state.cursor + made + k)
            probs = [self.pool[int(i)] for i in pos]
            r = self.engine.generate([self.render(p) for p in probs for _ in range(G)],
                                     noise_seed=derive_seed(self.seed, it, "rollout"), keys=range(made * G, (made + k) * G),
                                     limit=cfg.rollout.completion_limit, temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)
            batches.append((probs, r))
            scan(len(batches) - 1)
            made += k
        mixed = [i for i, (*_, m) in enumerate(groups) if m]
        keep = mixed[:n]
        if len(keep) < n:  # the cap was hit: fill with the earliest uniform groups
            keep = sorted(keep + [i for i, (*_, m) in enumerate(groups) if not m][:n - len(keep)])
        kept = set(keep)
        self.state.cursor += made
        self.discarded_tokens = sum(int(batches[b][1].lengths[g * G:(g + 1) * G].sum())
                                    for i, (b, g, _) in enumerate(groups) if i not in kept)
        self._info = {"sel_groups_generated": made, "sel_groups_discarded": made - len(keep),
                      "sel_mixed_generated": len(mixed) / made}
        if keep == list(range(n)):  # the first batch, all mixed: nothing to re-lay out
            return problems, roll
        parts = []
        for b, (_, r) in enumerate(batches):
            gs = [g for i, (bb, g, _) in enumerate(groups) if bb == b and i in kept]
            parts.append((r, [g * G + j for g in gs for j in range(G)]))
        out_problems = [batches[groups[i][0]][0][groups[i][1]] for i in keep]
        return out_problems, concat_rollouts(parts, self.policy.tokenizer.pad_token_id)

    # --- after the rewards
    def record(self, problems: Sequence[Problem], rewards: torch.Tensor) -> dict:
        """Remember the trained prompts' group mean rewards (and features); the row's columns."""
        cfg, st = self.cfg, self.state
        if not self.rule.remembers:
            return {}
        means = rewards.float().view(len(problems), -1).mean(1)
        st.trained_prompts += len(problems)
        for p, m in zip(problems, means.tolist()):
            st.last_reward[p.id] = m
        st.recent = (st.recent + [(means.tolist(), [_level(p) for p in problems])])[-cfg.selection.recent_window:]
        if self._features is not None:
            st.critic_x = (st.critic_x + [self._features])[-cfg.selection.prompt_critic_window:]
            st.critic_y = (st.critic_y + [means.clone()])[-cfg.selection.prompt_critic_window:]
        return {**self._info, "sel_realized_trained": float(means.mean()), "sel_distinct_prompts": len(st.last_reward)}

    def state_dict(self) -> dict:
        return self.state.to_dict() if self.rule.remembers else {}

    def load_state_dict(self, d: dict | None) -> None:
        if d:
            self.state = SelectionState.from_dict(d)


# --------------------------------------------------------------------------------------------
# The rules: which prompts an iteration trains on
# --------------------------------------------------------------------------------------------
def _plain_stream(sel: Selector, it: int) -> list[Problem]:
    """Outcome-only GRPO's prompts: stream positions n·i … n·i + n − 1."""
    n = sel.cfg.rollout.prompts_per_iteration
    return [sel.pool[int(i)] for i in prompt_stream_batch(len(sel.pool), sel.seed, it, n)]


def _stream_at_cursor(sel: Selector, it: int) -> list[Problem]:
    """Dynamic sampling's first batch: the next n stream positions (the cursor is checkpointed)."""
    n, cur = sel.cfg.rollout.prompts_per_iteration, sel.state.cursor
    return [sel.pool[int(i)] for i in prompt_stream_positions(len(sel.pool), sel.seed, cur, cur + n)]


def _from_candidates(sel: Selector, it: int, keep_rule: Callable[..., list[int]]) -> list[Problem]:
    """Draw ``candidates`` from the stream, predict their success, keep ``prompts_per_iteration``
    of them by ``keep_rule`` (the first ones during the warm-up) and log the prediction."""
    cfg, st = sel.cfg, sel.state
    n = cfg.rollout.prompts_per_iteration
    cand = [sel.pool[int(i)] for i in candidate_positions(cfg, len(sel.pool), sel.seed, it)]
    feats = None
    if sel.rule.scored:
        feats = prompt_features(sel.policy, [sel.render(p) for p in cand], cfg.selection.prompt_critic_layer)
    pred = sel.predict(cand, feats)
    warmup = st.trained_prompts < cfg.selection.warmup_prompts or pred is None
    keep = list(range(n)) if warmup else keep_rule(sel, it, pred, len(cand))
    if feats is not None:
        sel._features = feats[keep]
    sel._info = {"sel_warmup": warmup, "sel_candidates": ids_hash([p.id for p in cand]),
                 "sel_pred_candidates": None if pred is None else float(np.mean(pred)),
                 "sel_pred_trained": None if pred is None else float(np.mean(np.asarray(pred)[keep]))}
    return [cand[i] for i in keep]


def _keep_nearest(sel: Selector, it: int, pred: np.ndarray, n_cand: int) -> list[int]:
    cfg = sel.cfg
    return nearest_target(pred, cfg.selection.target, cfg.selection.keep_nearest, cfg.selection.keep_random,
                          np.random.default_rng(derive_seed(sel.seed, it, "select:others")))


def _keep_uniform(sel: Selector, it: int, pred: np.ndarray, n_cand: int) -> list[int]:
    return uniform_choice(n_cand, sel.cfg.rollout.prompts_per_iteration,
                          np.random.default_rng(derive_seed(sel.seed, it, "select:random_choice")))


def _filter(sel: Selector, it: int) -> list[Problem]:
    """A filter: the candidates whose predicted success is nearest the target, plus random others."""
    return _from_candidates(sel, it, _keep_nearest)


def _random_choice(sel: Selector, it: int) -> list[Problem]:
    """The control: the critic's candidates, scored and logged, but kept uniformly at random."""
    return _from_candidates(sel, it, _keep_uniform)


def _critic_prediction(sel: Selector, cand: Sequence[Problem], feats: torch.Tensor | None) -> np.ndarray | None:
    """The prompt critic: ridge on raw features with a free intercept, fit on earlier iterations."""
    st = sel.state
    if not st.critic_x:
        return None
    fit = Ridge.fit(torch.cat(st.critic_x), torch.cat(st.critic_y), sel.cfg.selection.prompt_critic_ridge, standardize=False)
    return fit.predict(feats).numpy()


def _recent_mean(sel: Selector) -> float | None:
    return float(np.mean([m for ms, _ in sel.state.recent for m in ms])) if sel.state.recent else None


def _history_prediction(sel: Selector, cand: Sequence[Problem], feats: torch.Tensor | None) -> np.ndarray | None:
    """The prompt's last group mean reward, else the recent mean group reward."""
    overall = _recent_mean(sel)
    if overall is None:
        return None
    return np.array([sel.state.last_reward.get(p.id, overall) for p in cand])


def _level_prediction(sel: Selector, cand: Sequence[Problem], feats: torch.Tensor | None) -> np.ndarray | None:
    """The recent mean group reward of the prompt's level, else of all levels."""
    overall = _recent_mean(sel)
    if overall is None:
        return None
    by_level: dict[int, list[float]] = {}
    for ms, lv in sel.state.recent:
        for m, level in zip(ms, lv):
            if level != NO_LEVEL:
                by_level.setdefault(level, []).append(m)
    level_mean = {level: float(np.mean(ms)) for level, ms in by_level.items()}
    return np.array([level_mean.get(_level(p), overall) for p in cand])


def _no_prediction(sel: Selector, cand: Sequence[Problem], feats: torch.Tensor | None) -> None:
    return None


class SelectionRule(NamedTuple):
    """A prompt-selection rule: how it chooses, what it predicts, and what the selector does around it."""

    choose: Callable[[Selector, int], list[Problem]]
    predict: Callable[[Selector, Sequence[Problem], torch.Tensor | None], np.ndarray | None] = _no_prediction
    scored: bool = False  # candidates prefilled and scored by the prompt critic every iteration
    dynamic: bool = False  # generation goes on until enough mixed groups (``Selector.complete``)
    remembers: bool = True  # keeps (and checkpoints) selection history and logs sel_* columns


# ``selection`` → the rule (see the module docstring); keys = the names ``TrainerConfig.selection.rule`` allows.
SELECTION_RULES: dict[str, SelectionRule] = {
    "none": SelectionRule(_plain_stream, remembers=False),
    "critic": SelectionRule(_filter, _critic_prediction, scored=True),
    "history": SelectionRule(_filter, _history_prediction),
    "level": SelectionRule(_filter, _level_prediction),
    "random_choice": SelectionRule(_random_choice, _critic_prediction, scored=True),
    "dynamic": SelectionRule(_stream_at_cursor, dynamic=True),
}
