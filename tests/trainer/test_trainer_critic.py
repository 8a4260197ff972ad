"""The learned critic (dense-rewards paper §C.1 "Learned critic"; trainer/interventions/critic.py): the ridge fit, the TD and baseline
credit against hand computations, and that no iteration is scored by a critic fit on it."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch

from trainer.config import TrainerConfig
from trainer.core.credit import (
    CreditContext,
    group_advantages,
)
from trainer.interventions import critic as cr
from trainer.interventions.credit_rules import compute_credit
from trainer.interventions.state import DenseState


def test_ridge_matches_the_closed_form():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 3, generator=g, dtype=torch.float64)
    y = (x @ torch.tensor([0.1, -0.2, 0.05], dtype=torch.float64) + 0.5).clamp(0, 1)
    m = cr.Ridge.fit(x, y, 2.0, standardize=True)
    z = (x - x.mean(0)) / x.std(0, correction=0)
    w = torch.linalg.solve(z.T @ z + 2.0 * torch.eye(3, dtype=z.dtype), z.T @ (y - y.mean()))
    assert torch.allclose(m.weight, w) and m.bias == pytest.approx(float(y.mean()))
    assert torch.allclose(m.predict(x), (z @ w + y.mean()).clamp(0, 1))


def test_buffer_fits_on_earlier_iterations_only_and_keeps_a_window():
    b = cr.CriticBuffer(window=2)
    for it, target in [(0, 0.0), (1, 1.0), (2, 0.5)]:
        b.add(it, torch.randn(4, 3), torch.full((4,), target))
    assert b.iterations() == [1, 2]  # window of 2
    assert b.fit(1, 1.0) is None  # nothing before iteration 1 is left
    assert b.fit(2, 1.0).bias == pytest.approx(1.0)  # iteration 1 only: never iteration 2 itself
    assert b.fit(3, 1.0).bias == pytest.approx(0.75)
    again = cr.CriticBuffer.from_state_dict(b.state_dict())
    assert again.iterations() == [1, 2] and again.fit(3, 1.0).bias == pytest.approx(0.75)


class FixedCritic:
    def __init__(self, values):
        self.values = values

    def predict(self, x):
        return self.values.reshape(-1)


def _setup():
    from test_trainer_credit import _rollouts, _tiny_policy

    # completions of 4, 2, 1, 3 tokens; cuts at 1 and 2 (limit 4)
    return _tiny_policy(), _rollouts(), TrainerConfig(completion_limit=4, mc_cuts=[1, 2], critic_start_iteration=1)


@pytest.mark.parametrize("form", ["td", "baseline"])
def test_critic_credit_by_hand(monkeypatch, form):
    pol, roll, cfg = _setup()
    # V̂ at (prompt, cut 1, cut 2) per completion
    v = torch.tensor([[0.5, 0.6, 0.8], [0.4, 0.2, 0.9], [0.3, 0.1, 0.1], [0.5, 0.5, 0.7]], dtype=torch.float64)
    monkeypatch.setattr(cr.CriticBuffer, "fit", lambda self, it, ridge: FixedCritic(v))
    rewards = torch.tensor([1.0, 0, 0, 1])
    mask = roll.completion_mask
    out = compute_credit(f"critic_{form}", CreditContext.of(rewards, mask, group_size=4, eps=1e-6, cfg=cfg, policy=pol,
                         rollouts=roll, iteration=1, state=DenseState()))
    # segments [0,1), [1,2), [2,∞); lengths 4, 2, 1, 3 → a cut at or past the end takes V = R
    if form == "td":  # V̂(b_s) − V̂(b_{s−1}), V(end) = R
        w = torch.tensor([[0.1, 0.2, 0.2, 0.2], [-0.2, -0.2, 0, 0], [-0.3, 0, 0, 0], [0.0, 0.2, 0.3, 0]])
    else:  # R − V̂(b_{s−1})
        w = torch.tensor([[0.5, 0.4, 0.2, 0.2], [-0.4, -0.2, 0, 0], [-0.3, 0, 0, 0], [0.5, 0.5, 0.3, 0]])
    want = group_advantages(rewards, 4, 1e-6)[:, None] * mask + w * mask
    assert torch.allclose(out.tokens, want, atol=1e-6)


def test_critic_is_outcome_only_before_its_start_and_never_fits_on_the_iteration_it_scores(monkeypatch):
    pol, roll, _ = _setup()
    cfg = TrainerConfig(completion_limit=4, mc_cuts=[1, 2], critic_start_iteration=2)
    fitted: list[torch.Tensor] = []
    real_fit = cr.Ridge.fit.__func__

    def spy(cls, x, y, ridge, **kw):
        fitted.append(x.clone())
        return real_fit(cls, x, y, ridge, **kw)

    monkeypatch.setattr(cr.Ridge, "fit", classmethod(spy))
    state, mask = DenseState(), roll.completion_mask
    rewards = torch.tensor([1.0, 0, 0, 1])
    g = torch.Generator().manual_seed(0)
    for it in range(4):
        seqs = roll.sequences.clone()  # fresh completion tokens each iteration
        seqs[:, 3:] = torch.randint(1, 11, seqs[:, 3:].shape, generator=g) * roll.attention_mask[:, 3:]
        seqs[:, 3] = it + 1  # every prefix of this iteration differs from every earlier one
        r = type(roll)(seqs, roll.attention_mask, roll.prompt_len, mask, roll.lengths, roll.truncated, roll.texts)
        out = compute_credit("critic_td", CreditContext.of(rewards, mask, group_size=4, eps=1e-6, cfg=cfg, policy=pol, rollouts=r,
                             iteration=it, state=state))
        adv = group_advantages(rewards, 4, 1e-6)[:, None] * mask
        if it < 2:
            assert torch.equal(out.tokens, adv) and not fitted
            continue
        feats, ok = cr.prefix_features(pol, r, [1, 2]), cr.valid_prefixes([1, 2], r.lengths)
        x = fitted[-1].double()
        assert x.shape[0] == it * int(ok.sum())  # every earlier iteration, …
        own = feats[:, 1:][ok[:, 1:]].double()  # this iteration's completion prefixes (prompts recur)
        assert not any(torch.allclose(row, o, atol=1e-6) for row in x for o in own)  # … never this one
        assert not torch.equal(out.tokens, adv)
    assert state.critic.iterations() == [0, 1, 2, 3]
