"""Advantages, credit and the loss against hand computations (dense-rewards paper eq. (1)-(2), §C.1 "Implementation")."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch

from trainer.config import TrainerConfig
from trainer.core.credit import (
    CreditContext,
    group_advantages,
    token_credit,
)
from trainer.core.engines import Rollouts
from trainer.core.policy import Policy, token_logprobs
from trainer.core.update import (
    policy_loss,
    update_step,
)
from trainer.interventions.credit_rules import compute_credit


def test_group_advantage_population_sd_by_hand():
    # group 1: one of four correct: mean 0.25, population SD sqrt(0.25*0.75) = 0.4330
    # group 2: two of four: mean 0.5, SD 0.5; group 3: uniform → zero advantage
    r = torch.tensor([1.0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1])
    a = group_advantages(r, 4, eps=1e-6)
    sd = math.sqrt(0.25 * 0.75)
    want = [0.75 / (sd + 1e-6)] + [-0.25 / (sd + 1e-6)] * 3 + [0.5 / (0.5 + 1e-6)] * 2 + [-0.5 / (0.5 + 1e-6)] * 2 + [0.0] * 4
    assert a.tolist() == pytest.approx(want, rel=1e-6)
    assert a[8:].abs().max().item() == 0.0  # exactly zero, whatever ε
    assert group_advantages(torch.zeros(8), 8, eps=1e-6).abs().max().item() == 0.0


def test_token_credit_and_loss_by_hand():
    adv = torch.tensor([2.0, -1.0])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    c = token_credit(adv, mask)
    assert c.tolist() == [[2.0, 2.0, 0.0], [-1.0, 0.0, 0.0]]
    dense = torch.tensor([[0.5, -0.5, 9.0], [0.25, 9.0, 9.0]])
    assert token_credit(adv, mask, dense).tolist() == [[2.5, 1.5, 0.0], [-0.75, 0.0, 0.0]]
    logp = torch.tensor([[-0.1, -0.2, -5.0], [-0.3, -7.0, -7.0]])
    # −Σ c·logp / N (N = 2 completions; no length normalization)
    want = -(2 * -0.1 + 2 * -0.2 + -1 * -0.3) / 2
    assert policy_loss(logp, c, mask, n_completions=2).item() == pytest.approx(want)
    out = compute_credit("outcome", CreditContext.of(torch.tensor([1.0, 0.0]), mask, group_size=2, eps=1e-6))
    assert out.tokens[0, 0].item() == pytest.approx(0.5 / (0.5 + 1e-6)) and out.continuation_tokens == 0
    with pytest.raises(ValueError):
        compute_credit("nope", CreditContext.of(torch.ones(2), mask, group_size=2, eps=1e-6))


def _tiny_policy(micro: int = 0) -> Policy:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    conf = Qwen2Config(vocab_size=11, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=2, intermediate_size=32, max_position_embeddings=32)
    model = Qwen2ForCausalLM(conf)
    cfg = TrainerConfig(learning_rate=1e-2, micro_batch_size=micro)
    return Policy(model, None, torch.device("cpu"), None, cfg)


def _rollouts() -> Rollouts:
    # 4 completions, prompt of 3 columns (the first row left-padded by one), completions of 1-4 tokens
    seqs = torch.tensor([[0, 5, 6, 1, 2, 3, 4], [7, 5, 6, 3, 3, 0, 0], [7, 8, 6, 9, 0, 0, 0], [7, 8, 6, 2, 4, 6, 0]])
    cmask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]], dtype=torch.float)
    pmask = torch.tensor([[0, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 1]])
    return Rollouts(seqs, torch.cat([pmask, cmask.long()], 1), 3, cmask, cmask.sum(1).long(),
                    torch.zeros(4, dtype=torch.bool), [""] * 4)


def test_loss_gradient_is_credit_weighted_sum_of_token_score_functions():
    pol = _tiny_policy()
    roll = _rollouts()
    credit = token_credit(torch.tensor([1.5, -0.5, 0.0, 2.0]), roll.completion_mask) + 0.1 * roll.completion_mask
    params = [p for p in pol.model.parameters()]
    logp = token_logprobs(pol, roll.sequences, roll.attention_mask, roll.prompt_len)
    loss = policy_loss(logp, credit, roll.completion_mask, n_completions=roll.n)
    g_loss = torch.autograd.grad(loss, params, retain_graph=True)
    # −(1/N) Σ_g Σ_h c_{g,h} ∇ log π(a_{g,h}), one autograd call per token
    want = [torch.zeros_like(p) for p in params]
    for g in range(roll.n):
        for h in range(int(roll.lengths[g])):
            gs = torch.autograd.grad(logp[g, h], params, retain_graph=True, allow_unused=True)
            for w, gi in zip(want, gs):
                if gi is not None:
                    w -= credit[g, h] * gi / roll.n
    for a, b in zip(g_loss, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_token_logprobs_match_unpadded_forward():
    pol = _tiny_policy()
    roll = _rollouts()
    logp = token_logprobs(pol, roll.sequences, roll.attention_mask, roll.prompt_len)
    seq = torch.tensor([5, 6, 1, 2, 3, 4])  # row 0 without its left pad
    ref = pol.model(input_ids=seq[None]).logits[0].log_softmax(-1)[1:5].gather(-1, seq[2:, None]).squeeze(-1)
    torch.testing.assert_close(logp[0], ref, rtol=1e-5, atol=1e-6)


def test_micro_batching_changes_neither_update_nor_tokens():
    roll = _rollouts()
    credit = token_credit(torch.tensor([1.0, -1.0, 0.5, -0.5]), roll.completion_mask)
    from trainer.core.update import make_optimizer

    states = []
    for micro in (0, 1, 3):
        pol = _tiny_policy(micro)
        opt = make_optimizer(pol)
        stats = update_step(pol, opt, roll, credit, lr=1e-2)
        # the gradient the Adam step used (clipped in place, as the step saw it)
        states.append((stats, [p.grad.detach().clone() for p in pol.model.parameters()]))
    for stats, grads in states[1:]:
        assert stats["loss"] == pytest.approx(states[0][0]["loss"], rel=1e-5)
        assert stats["grad_norm"] == pytest.approx(states[0][0]["grad_norm"], rel=1e-5)
        for a, b in zip(grads, states[0][1]):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-8)
    assert roll.tokens == 10  # generated tokens: 4 + 2 + 1 + 3, whatever the micro-batch


def test_adam_settings_are_the_papers():
    from trainer.core.update import make_optimizer

    pol = _tiny_policy()
    opt = make_optimizer(pol)
    g = opt.param_groups[0]
    assert type(opt).__name__ == "Adam" and g["betas"] == (0.9, 0.999) and g["eps"] == 1e-8 and g["weight_decay"] == 0
    d = TrainerConfig()
    u, r = d.update, d.rollout
    assert (u.learning_rate, u.lr_schedule, u.grad_clip, r.group_size, r.prompts_per_iteration, r.completion_limit,
            r.temperature, r.top_p) == (1e-6, "constant", 1.0, 8, 8, 380, 1.0, 1.0)


def test_credit_rule_table_matches_the_allowed_names():
    """Every name ``TrainerConfig.credit.rule`` allows has exactly one rule, and back."""
    import typing

    from trainer.config import CreditSection
    from trainer.interventions.credit_rules import CREDIT_RULES

    assert tuple(CREDIT_RULES) == typing.get_args(CreditSection.model_fields["rule"].annotation)
