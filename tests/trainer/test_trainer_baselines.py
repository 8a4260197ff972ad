"""REINFORCE-LOO, the frozen PRM as reward or state-only baseline, and the asymmetric ratio clip,
against hand computations (dense-rewards paper App. E; multi-reward paper App. C.4)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch

from trainer.config import ConfigError, TrainerConfig, parse_config
from trainer.core.credit import CreditContext
from trainer.core.engines import Rollouts
from trainer.core.policy import Policy
from trainer.core.prm import load_prm, split_steps, step_end_tokens
from trainer.core.update import clipped_loss
from trainer.interventions.baselines import process_advantages, state_baseline
from trainer.interventions.credit_rules import compute_credit
from trainer.interventions.state import DenseState

STEP = "<extra_0>"


# ---- REINFORCE with a leave-one-out baseline ----------------------------------------------------
def test_rloo_advantage_by_hand_no_sd_division():
    r = torch.tensor([1.0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0])
    mask = torch.ones(12, 2)
    out = compute_credit("rloo", CreditContext.of(r, mask, group_size=4, eps=1e-6))
    # group 1: R=1 → 1 − (1/3)·1 = 2/3; R=0 → 0 − (1/3)·2 = −2/3; group 2 uniform → 0;
    # group 3: R=1 → 1 − 0 = 1; R=0 → 0 − 1/3
    want = [2 / 3, -2 / 3, -2 / 3, 2 / 3, 0, 0, 0, 0, 1, -1 / 3, -1 / 3, -1 / 3]
    assert out.advantages.tolist() == pytest.approx(want, abs=1e-7)
    assert out.tokens[:, 1].tolist() == pytest.approx(want, abs=1e-7)
    # = G/(G−1)·(R − R̄): the group-normalized advantage without its SD (group 1: SD 0.5 would give ±1)
    assert out.advantages[0].item() == pytest.approx(4 / 3 * 0.5)


def test_rloo_and_prm_rules_refuse_what_they_cannot_do():
    for bad in [dict(credit="rloo", group_size=1), dict(credit="prm_baseline", group_size=1, prm_model="p"),
                dict(credit="prm_reward"), dict(credit="prm_baseline", prm_model="  "),
                dict(credit="outcome", prm_add_outcome=True), dict(credit="RLOO"), dict(credit="prm-reward"),
                dict(credit="rloo", channels=["correct", "brief"], aggregation="additive"),
                dict(credit="prm_reward", prm_model="p", prm_step_separator="")]:
        with pytest.raises(ConfigError):
            parse_config(bad)
    ok = parse_config({"credit": {"rule": "prm_reward", "prm_model": "Qwen/Qwen2.5-Math-PRM-7B", "prm_add_outcome": True}})
    assert ok.credit.prm_step_separator == "\n\n" and ok.credit.prm_step_token == STEP


# ---- the PRM's credit, pure parts -------------------------------------------------------------
def test_process_supervision_reward_to_go_by_hand():
    # group of 2: completion 0 has steps ending at tokens 1 and 3 (scores 0.9, 0.5); completion 1
    # one step ending at 2 (score 0.1). Normalized over the group's 3 scores: mean 0.5, SD √(0.32/3)
    scores, ends = [[0.9, 0.5], [0.1]], [[1, 3], [2]]
    sd = (((0.4 ** 2) + 0 + (0.4 ** 2)) / 3) ** 0.5
    z = [0.4 / sd, 0.0, -0.4 / sd]
    got = process_advantages(scores, ends, 2, 5, eps=0.0)
    want = [[z[0] + z[1], z[0] + z[1], z[1], z[1], 0], [z[2], z[2], z[2], 0, 0]]
    assert got.tolist() == [pytest.approx(w, abs=1e-6) for w in want]
    assert process_advantages([[], []], [[], []], 2, 3, eps=1e-6).abs().sum() == 0  # no steps: no credit


def test_state_only_baseline_uses_only_finished_steps():
    v = state_baseline([[0.9, 0.5], []], [[1, 3], []], torch.tensor([0.25, 0.75]), 5)
    # tokens 0-1 before the first step has ended (inclusive of its end token): V(prompt); then 0.9; after 3: 0.5
    assert v.tolist() == [pytest.approx([0.25, 0.25, 0.9, 0.9, 0.5]), pytest.approx([0.75] * 5)]


def test_step_split_and_end_tokens():
    from trainer.data.synthetic import build_tokenizer

    tok = build_tokenizer()
    text = "1+1=2\n\n\n\nso 2\n\n"
    assert split_steps(text, "\n\n") == [("1+1=2", 5), ("so 2", 13)]
    assert split_steps("\n\n\n\n", "\n\n") == [] and split_steps("", "\n\n") == []
    ids = tok(text, add_special_tokens=False)["input_ids"]
    ends = step_end_tokens(tok, ids, [5, 13])
    assert tok.decode(ids[:ends[0] + 1]) == "1+1=2" and ends[1] == len(ids) - 1


# ---- the PRM end to end on a tiny token-classification model -----------------------------------
def _tiny_prm(folder):
    from transformers import Qwen2Config, Qwen2ForTokenClassification

    from trainer.data.synthetic import build_tokenizer

    tok = build_tokenizer()
    tok.add_tokens([STEP], special_tokens=True)
    conf = Qwen2Config(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=2, intermediate_size=32, max_position_embeddings=256, num_labels=2,
                       pad_token_id=tok.pad_token_id)
    torch.manual_seed(3)
    Qwen2ForTokenClassification(conf).save_pretrained(folder)
    tok.save_pretrained(folder)
    return tok


def _context(tmp_path, rule: str, rewards: list[float], texts: list[str], **credit):
    from trainer.data.synthetic import build_tokenizer

    tok = build_tokenizer()
    rows = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    width = max(map(len, rows))
    comp = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])
    cmask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in rows])
    prompt = torch.full((len(rows), 2), tok.bos_token_id)
    roll = Rollouts(torch.cat([prompt, comp], 1), torch.cat([torch.ones_like(prompt), cmask.long()], 1), 2, cmask,
                    cmask.sum(1).long(), torch.zeros(len(rows), dtype=torch.bool), texts)
    cfg = TrainerConfig.model_validate({"rollout": {"group_size": 2},
                                        "credit": {"rule": rule, "prm_model": "prm", **credit}})
    pol = Policy(None, tok, torch.device("cpu"), None, cfg)
    return CreditContext.of(torch.tensor(rewards), cmask, group_size=2, eps=1e-6, cfg=cfg, rollouts=roll, policy=pol,
                            problems=["1+2"] * 2 + ["3+4"] * 2, state=DenseState(), study_dir=str(tmp_path))


TEXTS = ["1+2=3\n\nso 3", "1+2=4", "3+4=7\n\n7\n\nso 7", "no\n\n8"]


@pytest.mark.parametrize("rule", ["prm_reward", "prm_baseline"])
def test_prm_rules_on_a_tiny_model_match_the_hand_formula(tmp_path, rule):
    _tiny_prm(tmp_path / "prm")
    ctx = _context(tmp_path, rule, [1.0, 0.0, 1.0, 0.0], TEXTS)
    out = compute_credit(rule, ctx)
    prm = ctx.state.prm(lambda: None)  # loaded once, kept in the run's dense state
    assert not any(p.requires_grad for p in prm.model.parameters()) and not prm.model.training
    steps = [[s for s, _ in split_steps(t, "\n\n")] for t in TEXTS]
    scores = prm.score(["1+2"] * 2 + ["3+4"] * 2, steps)
    assert [len(s) for s in scores] == [2, 1, 3, 2] and all(0 < x < 1 for s in scores for x in s)
    lengths = [int(n) for n in ctx.completion_mask.sum(1)]
    ends = [step_end_tokens(ctx.policy.tokenizer, ctx.rollouts.completion_ids[g, :lengths[g]].tolist(),
                            [e for _, e in split_steps(t, "\n\n")]) for g, t in enumerate(TEXTS)]
    T = ctx.completion_mask.shape[1]
    for g in range(4):
        for h in range(lengths[g]):
            if rule == "prm_reward":  # Σ over the group-normalized scores of the steps ending at or after h
                grp = [x for k in (g // 2 * 2, g // 2 * 2 + 1) for x in scores[k]]
                mean = sum(grp) / len(grp)
                sd = (sum((x - mean) ** 2 for x in grp) / len(grp)) ** 0.5
                want = sum((s - mean) / (sd + 1e-6) for s, e in zip(scores[g], ends[g]) if e >= h)
            else:  # R − V(last finished step), V(prompt) = the other outcome of the pair
                done = [s for s, e in zip(scores[g], ends[g]) if e < h]
                want = ctx.rewards[g].item() - (done[-1] if done else ctx.rewards[g ^ 1].item())
            assert out.tokens[g, h].item() == pytest.approx(want, abs=1e-5), (g, h)
        assert out.tokens[g, lengths[g]:T].abs().sum() == 0  # nothing past the completion
    if rule == "prm_reward":
        assert out.advantages.abs().sum() == 0  # no outcome term unless prm_add_outcome
        added = compute_credit(rule, _context(tmp_path, rule, [1.0, 0.0, 1.0, 0.0], TEXTS, prm_add_outcome=True))
        assert torch.allclose(added.tokens - out.tokens, ctx.advantages[:, None] * ctx.completion_mask, atol=1e-5)


def test_prm_loading_refuses_a_missing_model_or_step_token(tmp_path):
    with pytest.raises(ConfigError, match="neither a model folder"):
        load_prm("no-such-prm", tmp_path, torch.device("cpu"), STEP)
    with pytest.raises(ConfigError, match="neither a model folder"):
        load_prm("nobody/NoSuchPRM-0B", tmp_path, torch.device("cpu"), STEP)  # a hub id not in the cache
    _tiny_prm(tmp_path / "prm")
    with pytest.raises(ConfigError, match="prm_step_token"):
        load_prm("prm", tmp_path, torch.device("cpu"), "<extra_1>")
    prm = load_prm(str(tmp_path / "prm"), "/elsewhere", torch.device("cpu"), STEP)  # an absolute folder
    # a step whose text holds the step token is scored once, not twice
    assert len(prm.score(["1+1"], [[f"2{STEP}2", "so 2"]])[0]) == 2


# ---- the asymmetric ratio clip (clip-higher) ---------------------------------------------------
def test_asymmetric_clip_gradient_by_hand():
    # ε_low = 0.2, ε_high = 0.28. Tokens (c, ρ): (+1, 1.25) inside [0.8, 1.28]; (+1, 1.3) clipped high;
    # (−1, 0.75) clipped low; (−1, 0.85) inside; (+1, 0.5) and (−1, 1.5): the clip never binds there
    credit = torch.tensor([[1.0, 1.0, -1.0], [-1.0, 1.0, -1.0]])
    ratio = torch.tensor([[1.25, 1.3, 0.75], [0.85, 0.5, 1.5]])
    mask = torch.ones(2, 3)
    old = torch.full((2, 3), -2.0)
    logp = (old + ratio.log()).requires_grad_(True)
    loss, binds = clipped_loss(logp, old, credit, mask, (0.2, 0.28), n=2)
    (g,) = torch.autograd.grad(loss, logp)
    # d/dlogp (−ρc/n) = −ρc/n where the surrogate is unclipped, 0 where the clip binds
    want = torch.tensor([[-1.25 / 2, 0.0, 0.0], [0.85 / 2, -0.5 / 2, 1.5 / 2]])
    assert torch.allclose(g, want, atol=1e-6)
    assert binds.tolist() == [[False, True, True], [False, False, False]]
    # the loss value: −Σ min(ρc, clip(ρ)c) / n
    surr = [1.25, 1.28, -0.8, -0.85, 0.5, -1.5]
    assert loss.item() == pytest.approx(-sum(surr) / 2)
    # a symmetric 0.28 clips low at 0.72, so ρ = 0.75 with c = −1 is inside: its gradient flows
    (g_sym,) = torch.autograd.grad(clipped_loss(logp, old, credit, mask, 0.28, n=2)[0], logp)
    assert g_sym[0, 2].item() == pytest.approx(0.75 / 2)
    # a pair (ε, ε) is the symmetric clip
    a, b = clipped_loss(logp, old, credit, mask, (0.2, 0.2), 2), clipped_loss(logp, old, credit, mask, 0.2, 2)
    assert a[0].item() == pytest.approx(b[0].item()) and torch.equal(a[1], b[1])


def test_clip_settings_and_the_code_recipe_batch():
    cfg = parse_config({"update": {"ppo_clip": [0.2, 0.28], "ppo_epochs": 2, "ppo_minibatches": 2},
                        "rollout": {"prompts_per_iteration": 32, "group_size": 8}})
    assert cfg.update.clip_range == (0.2, 0.28) and cfg.rollout.prompts_per_iteration * cfg.rollout.group_size == 256
    assert parse_config({"update": {"ppo_clip": 0.2}}).update.clip_range == (0.2, 0.2)
    assert TrainerConfig.model_validate_json(cfg.model_dump_json()).update.ppo_clip == (0.2, 0.28)  # spec.json round trip
    for bad in [[0.2], [0.2, 0.28, 0.3], [0.2, 1.0], [-0.1, 0.2], "0.2", True, ["a", "b"], 1.0]:
        with pytest.raises(ConfigError, match="ppo_clip"):
            parse_config({"update": {"ppo_clip": bad}})
