"""Dense rewards: the Monte-Carlo reward, the equal-iteration rule and its controls and gates, and
the group-relative length reward (paper 1 §2.3 "Monte-Carlo reward", C.1 L2372-2391, App. G;
extract §3.6, §3.9, §1.E). Registered in ``trainer.credit.CREDIT_RULES``; the learned critic is
in ``trainer.critic``. Every choice the paper leaves open is a ``TrainerConfig`` field
(docs/interventions.md, "Dense rewards").

Segments. A completion of limit L_max is cut at interior offsets b_1 < … < b_C (tokens), default
b_i = round(i·L_max/S) for i = 1 … S−1 with S = ``mc_segments`` = 6 (128 … 640 at 768, the
paper's offsets; 63 … 317 at 380; 7 … 33 at 40). Segment s covers token positions
[b_{s−1}, b_s), b_0 = 0, b_{C+1} = ∞. Given values V at the boundaries — V(b_0) the prompt value,
V(b_s) the value of the prefix of b_s tokens, V(end) the value at the completion's end — segment
s's credit is V(b_s) − V(b_{s−1}) on each of its tokens. **A completion of length ℓ ≤ b_s has
ended before cut s**: its prefix is the whole completion, whose value is known (V = V(end)), so
no continuation is drawn there, and the segment holding its last token ends at V(end).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from trainer.config import TrainerConfig, derive_seed
from trainer.credit import Credit, group_advantages, token_credit

MAX_K = 1 << 20  # request keys n·MAX_K + j: draw j of completion n, whatever k (common random numbers)


# --------------------------------------------------------------------------------------------
# Segments
# --------------------------------------------------------------------------------------------
def cut_offsets(cfg: TrainerConfig) -> list[int]:
    """Interior cut offsets: ``mc_cuts``, or round(i·L_max/S), i = 1 … S−1 (128 … 640 at 768)."""
    if cfg.credit.mc_cuts:
        return list(cfg.credit.mc_cuts)
    L, S = cfg.rollout.completion_limit, cfg.credit.mc_segments
    cuts = sorted({int(i * L / S + 0.5) for i in range(1, S)})  # round half up, no duplicates
    return [b for b in cuts if 0 < b < L]


def segment_index(cuts: Sequence[int], width: int) -> torch.Tensor:
    """[T] segment of each token position h: the number of cuts b ≤ h (0 … C)."""
    return torch.bucketize(torch.arange(width), torch.tensor(list(cuts), dtype=torch.long), right=True)


def boundary_values(v0: torch.Tensor, interior: torch.Tensor, end: torch.Tensor, cuts: Sequence[int],
                    lengths: torch.Tensor) -> torch.Tensor:
    """V at boundaries b_0 … b_C and the end: [N, C+2]. A cut at or past the completion's length
    takes the end value (the completion has ended there)."""
    ended = torch.tensor(list(cuts))[None, :] >= lengths[:, None]  # [N, C]
    mid = torch.where(ended, end[:, None], interior)
    return torch.cat([v0[:, None], mid, end[:, None]], 1).double()


def last_start_value(values: torch.Tensor, cuts: Sequence[int], lengths: torch.Tensor) -> torch.Tensor:
    """V at the start of the segment that holds each completion's last token."""
    idx = (torch.tensor(list(cuts))[None, :] < lengths[:, None]).sum(1)  # cuts strictly inside
    return values.gather(1, idx[:, None]).squeeze(1)


def segment_credit(values: torch.Tensor, cuts: Sequence[int], mask: torch.Tensor) -> torch.Tensor:
    """w_{n,h} = V(b_s) − V(b_{s−1}) for token h in segment s: [N, T] (0 on padding)."""
    seg = values[:, 1:] - values[:, :-1]  # [N, C+1]
    idx = segment_index(cuts, mask.shape[1])
    return seg[:, idx].to(mask) * mask


def baseline_credit(values: torch.Tensor, outcome: torch.Tensor, cuts: Sequence[int],
                    mask: torch.Tensor) -> torch.Tensor:
    """w_{n,h} = R_n − V(b_{s−1}) for token h in segment s (the critic's baseline form)."""
    start = values[:, :-1]  # [N, C+1]: the value at each segment's start
    idx = segment_index(cuts, mask.shape[1])
    return (outcome.double()[:, None] - start)[:, idx].to(mask) * mask


# --------------------------------------------------------------------------------------------
# Monte-Carlo continuations
# --------------------------------------------------------------------------------------------
@dataclass
class Draws:
    """The continuations drawn at one cut: k per parent completion, parent-major."""

    cut: int  # the cut offset b (tokens of the parent kept as prefix)
    parents: torch.Tensor  # [M] index of each draw's parent completion
    generated: Any  # the engine's output for the draws (completion_ids, lengths, completion_mask, ...)
    outcomes: torch.Tensor  # [M] verifier outcome of prefix + continuation (0/1)


@dataclass
class MonteCarlo:
    """p̂ at each interior cut, the draws behind it, and what the continuations cost."""

    cuts: list[int]
    p_hat: torch.Tensor  # [N, C] fraction of k continuations that succeed (NaN where the completion ended)
    drawn: torch.Tensor  # [N, C] bool: continuations were drawn (cut inside the completion)
    tokens: int  # continuation tokens generated (EOS included), what B counts as ``continuation``
    draws: list[Draws] = field(default_factory=list)  # discarded by the MC reward; continuation reuse trains on them


def score(verifier, texts: Sequence[str], answers: Sequence[str]) -> torch.Tensor:
    """0/1 verifier outcomes, identical (text, answer) pairs checked once."""
    seen: dict[tuple[str, str], float] = {}
    for t, a in zip(texts, answers):
        if (t, a) not in seen:
            seen[(t, a)] = float(verifier(t, a))
    return torch.tensor([seen[(t, a)] for t, a in zip(texts, answers)])


def monte_carlo_values(cfg: TrainerConfig, *, engine, policy, rollouts, prompts: Sequence[str],
                       answers: Sequence[str], iteration: int, seed: int, verifier) -> MonteCarlo:
    """k continuations from each prefix that ends at an interior cut inside its completion (§3.6).

    One batched ``engine.generate`` call per cut: prompt text + decoded prefix, limit = the rest
    of the completion limit (capped by ``mc_continuation_limit``). Seeds: noise seed
    derive_seed(run seed, iteration, "mc/<cut offset>"), request key n·MAX_K + j for draw j of
    completion n, so k = 1 and k = 4 share their first draw. Each continuation is scored on
    prefix + continuation by the training verifier; the draws are kept in ``MonteCarlo.draws``
    (the Monte-Carlo reward discards them, continuation reuse trains on them).
    """
    cuts, k, tok = cut_offsets(cfg), cfg.credit.mc_k, policy.tokenizer
    comp = rollouts.completion_ids.cpu()
    lengths = rollouts.lengths
    n = rollouts.n
    p_hat = torch.full((n, len(cuts)), float("nan"), dtype=torch.float64)
    drawn = torch.zeros((n, len(cuts)), dtype=torch.bool)
    tokens, draws = 0, []
    for ci, b in enumerate(cuts):
        rows = [i for i in range(n) if int(lengths[i]) > b]  # completions still running after b tokens
        if not rows:
            continue
        prefixes = {i: comp[i, :b].tolist() for i in rows}
        texts = [prompts[i] + tok.decode(prefixes[i], skip_special_tokens=False) for i in rows for _ in range(k)]
        keys = [i * MAX_K + j for i in rows for j in range(k)]
        limit = cfg.rollout.completion_limit - b
        if cfg.credit.mc_continuation_limit:
            limit = min(limit, cfg.credit.mc_continuation_limit)
        cont = engine.generate(texts, noise_seed=derive_seed(seed, iteration, f"mc/{b}"), keys=keys, limit=limit,
                               temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)
        tokens += cont.tokens
        cids = cont.completion_ids.cpu()
        full = [prefixes[i] + cids[r, :int(cont.lengths[r])].tolist()
                for r, i in enumerate(i for i in rows for _ in range(k))]
        ok = score(verifier, tok.batch_decode(full, skip_special_tokens=True), [answers[i] for i in rows for _ in range(k)])
        p_hat[rows, ci] = ok.view(len(rows), k).double().mean(1)
        drawn[rows, ci] = True
        draws.append(Draws(b, torch.tensor(rows).repeat_interleave(k), cont, ok))
    return MonteCarlo(cuts, p_hat, drawn, tokens, draws)


def mc_values(mc: MonteCarlo, cfg: TrainerConfig, rewards: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Boundary values of the Monte-Carlo reward: p̂_0 = ``mc_prompt_value``, p̂ at the cuts, and
    V(end) = R (``mc_end_value = "outcome"``) or the last segment's start (no credit on it)."""
    n = rewards.shape[0]
    v0 = torch.full((n,), cfg.credit.mc_prompt_value, dtype=torch.float64)
    end = rewards.double()
    values = boundary_values(v0, mc.p_hat.nan_to_num(0.0), end, mc.cuts, lengths)
    if cfg.credit.mc_end_value == "none":
        end = last_start_value(values, mc.cuts, lengths)
        values = boundary_values(v0, mc.p_hat.nan_to_num(0.0), end, mc.cuts, lengths)
    return values


def _advantages(rewards, group_size, eps, advantages):
    return group_advantages(rewards, group_size, eps) if advantages is None else advantages.float()


def monte_carlo_credit(rewards: torch.Tensor, completion_mask: torch.Tensor, *, group_size: int, eps: float,
                       cfg: TrainerConfig, rollouts, advantages: torch.Tensor | None = None, **ctx: Any) -> Credit:
    """The Monte-Carlo reward (S1, S25): c_{g,h} = A_g + (p̂_s − p̂_{s−1}) for h in segment s,
    the segment credit added to the group advantage **without centering** (L2378-2380)."""
    mc = monte_carlo_values(cfg, rollouts=rollouts, **mc_context(ctx))
    return mc_credit(mc, rewards, completion_mask, group_size=group_size, eps=eps, cfg=cfg,
                     lengths=rollouts.lengths, advantages=advantages)


def mc_credit(mc: MonteCarlo, rewards: torch.Tensor, completion_mask: torch.Tensor, *, group_size: int, eps: float,
              cfg: TrainerConfig, lengths: torch.Tensor, advantages: torch.Tensor | None = None) -> Credit:
    """The Monte-Carlo reward's credit from drawn continuations ``mc`` (see ``monte_carlo_credit``)."""
    w = segment_credit(mc_values(mc, cfg, rewards, lengths), mc.cuts, completion_mask)
    adv = _advantages(rewards, group_size, eps, advantages)
    return Credit(token_credit(adv, completion_mask, dense=w), adv, mc.tokens)


def mc_context(ctx: dict) -> dict:
    """The loop context ``monte_carlo_values`` needs (engine, policy, prompts, answers, …)."""
    return {k: ctx[k] for k in ("engine", "policy", "prompts", "answers", "iteration", "seed", "verifier")}


# --------------------------------------------------------------------------------------------
# The equal-iteration rule, its controls and gates (App. G; extract §1.E, §3.6)
# --------------------------------------------------------------------------------------------
def gate(w: torch.Tensor, kind: str, *, advantages: torch.Tensor, disagreement: torch.Tensor | None = None) -> torch.Tensor:
    """§G gates, applied to the raw credit before centering and normalization.

    ``opposition``: keep the entries whose sign is opposite to A_g (w·A_g < 0), zero the rest.
    ``disagreement``: multiply each segment's credit by p(1 − p), p the fraction of continuations
    that succeed from the segment's end (``disagreement`` = p(1 − p) per token; 0 on the last
    segment, whose end value is the 0/1 outcome).
    """
    if kind == "opposition":
        return torch.where(w * advantages[:, None].to(w) < 0, w, torch.zeros_like(w))
    if kind == "disagreement":
        return w * disagreement.to(w)
    return w


def end_disagreement(mc: MonteCarlo, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[N, T]: p(1 − p) with p the value at the end of each token's segment."""
    p = values[:, 1:]  # end of segment s = boundary s
    return (p * (1 - p))[:, segment_index(mc.cuts, mask.shape[1])].to(mask) * mask


def center_within(w: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Subtract each completion's mean credit over its tokens (per-token centering; the paper does
    not say whether per token or per segment)."""
    n_tok = mask.sum(1, keepdim=True).clamp(min=1)
    return (w - (w * mask).sum(1, keepdim=True) / n_tok) * mask


def _token_sd(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    n = mask.sum().clamp(min=1)
    mean = (x * mask).sum() / n
    return (((x - mean) ** 2 * mask).sum() / n).sqrt()


def combine(adv: torch.Tensor, w: torch.Tensor, mask: torch.Tensor, alpha: float, norm: str) -> torch.Tensor:
    """c = A + α·w (max-normalized: w / max|w| over the batch) or, co-equal, A/sd(A) + α·w/sd(w),
    both SDs population SDs over the batch's generated tokens. A zero w stays zero."""
    a_tok = adv[:, None].to(mask) * mask
    if norm == "coequal":
        sa, sw = _token_sd(a_tok, mask), _token_sd(w, mask)
        a_tok = a_tok / sa if sa > 0 else a_tok
        w = w / sw if sw > 0 else w
    else:
        m = (w * mask).abs().max()
        w = w / m if m > 0 else w
    return (a_tok + alpha * w) * mask


def shuffle_within(w: torch.Tensor, mask: torch.Tensor, seed: int) -> torch.Tensor:
    """Permute each completion's token credits among its own tokens (the shuffled control, L489)."""
    g = torch.Generator().manual_seed(seed)
    out = w.clone()
    for i in range(w.shape[0]):
        n = int(mask[i].sum())
        out[i, :n] = w[i, :n][torch.randperm(n, generator=g)]
    return out


def _mc_within(rewards, mask, *, group_size, eps, cfg, rollouts, advantages=None, shuffle_seed=None, **ctx) -> Credit:
    mc = monte_carlo_values(cfg, rollouts=rollouts, **mc_context(ctx))
    values = mc_values(mc, cfg, rewards, rollouts.lengths)
    w = segment_credit(values, mc.cuts, mask)
    adv = _advantages(rewards, group_size, eps, advantages)
    w = gate(w, cfg.credit.eq_gate, advantages=adv, disagreement=end_disagreement(mc, values, mask))
    if shuffle_seed is not None:
        w = shuffle_within(w, mask, shuffle_seed)
    return Credit(combine(adv, center_within(w, mask), mask, cfg.credit.eq_alpha, cfg.credit.eq_norm), adv, mc.tokens)


def equal_iteration_credit(rewards, completion_mask, *, group_size, eps, **ctx) -> Credit:
    """MC-within (equal-iteration study): the Monte-Carlo segment credit, gated (``eq_gate``),
    centered within each completion, normalized (``eq_norm``): c = A_g + α·w (``eq_alpha``)."""
    return _mc_within(rewards, completion_mask, group_size=group_size, eps=eps, **ctx)


def shuffled_credit(rewards, completion_mask, *, group_size, eps, **ctx) -> Credit:
    """The shuffled control: MC-within with the (gated) credit permuted within each completion;
    permutation seed derive_seed(run seed, iteration, "shuffle")."""
    seed = derive_seed(ctx["seed"], ctx["iteration"], "shuffle")
    return _mc_within(rewards, completion_mask, group_size=group_size, eps=eps, shuffle_seed=seed, **ctx)


def implicit_credit(rewards: torch.Tensor, completion_mask: torch.Tensor, *, group_size: int, eps: float,
                    cfg: TrainerConfig, policy, rollouts, state: "DenseState", advantages=None, **_: Any) -> Credit:
    """The implicit-reward control: w = log π_θ(a) − log π_ref(a), π_ref the initial policy (the
    warm start / the model the run started from), then gated, centered and normalized like
    MC-within. No continuations; two forward passes charged to the credit stage."""
    from trainer.policy import token_logprobs  # noqa: PLC0415

    ref = state.reference(policy)
    seqs, attn = rollouts.sequences, rollouts.attention_mask
    with torch.no_grad():
        lp = token_logprobs(policy, seqs, attn, rollouts.prompt_len)
        lr = token_logprobs(ref, seqs, attn, rollouts.prompt_len)
    mask = completion_mask
    w = (lp - lr).to(mask) * mask
    adv = _advantages(rewards, group_size, eps, advantages)
    w = gate(w, cfg.credit.eq_gate, advantages=adv)
    return Credit(combine(adv, center_within(w, mask), mask, cfg.credit.eq_alpha, cfg.credit.eq_norm), adv, 0)


# --------------------------------------------------------------------------------------------
# Length reward (S6-S9; extract §3.9)
# --------------------------------------------------------------------------------------------
def length_credit(rewards: torch.Tensor, lengths: torch.Tensor, mask: torch.Tensor, group_size: int,
                  lam: float, limit: int) -> torch.Tensor:
    """−λ(L_i − m_g)/L_max on every token of a correct completion, m_g the mean length of the
    group's correct completions; wrong completions get 0. Sums to 0 over each group's completions."""
    ok = (rewards > 0).double().view(-1, group_size)
    L = lengths.double().view(-1, group_size)
    m = (L * ok).sum(1, keepdim=True) / ok.sum(1, keepdim=True).clamp(min=1)
    per = (-lam * (L - m) / limit * ok).view(-1)
    return per[:, None].to(mask) * mask


def with_length_reward(credit: Credit, rewards: torch.Tensor, rollouts, group_size: int, cfg: TrainerConfig) -> Credit:
    """Add the length term to any rule's token credit (no-op at ``length_lambda = 0``)."""
    if not cfg.credit.length_lambda:
        return credit
    w = length_credit(rewards, rollouts.lengths, rollouts.completion_mask, group_size, cfg.credit.length_lambda,
                      cfg.rollout.completion_limit)
    return Credit(credit.tokens + w.to(credit.tokens), credit.advantages, credit.continuation_tokens)


# --------------------------------------------------------------------------------------------
# State across iterations
# --------------------------------------------------------------------------------------------
@dataclass
class DenseState:
    """What dense rules keep across iterations: the critic's buffer (checkpointed) and the frozen
    reference policy of the implicit reward (reloaded from the start model, never checkpointed)."""

    critic: Any = None  # trainer.critic.CriticBuffer, created on first use
    _reference: Any = field(default=None, repr=False)

    def reference(self, policy):
        if self._reference is None:
            from trainer.policy import Policy, load_policy  # noqa: PLC0415

            ref = load_policy(policy.cfg, policy.path)
            ref.model.eval().requires_grad_(False)
            self._reference = Policy(ref.model, ref.tokenizer, ref.device, ref.amp_dtype, ref.cfg, ref.path)
        return self._reference

    def state_dict(self) -> dict:
        return {"critic": None if self.critic is None else self.critic.state_dict()}

    def load_state_dict(self, d: dict | None) -> None:
        if d and d.get("critic") is not None:
            from trainer.critic import CriticBuffer  # noqa: PLC0415

            self.critic = CriticBuffer.from_state_dict(d["critic"])


def dense_context(run, iteration: int, problems: Sequence, rollouts) -> dict:
    """What the loop hands a credit rule (``compute_credit(..., **context)``): the recipe, engine,
    policy, rollouts, each completion's rendered prompt and answer, iteration, run seed, training
    verifier and the dense state. Prompts are rebuilt from ``problems`` (a selector may have
    added groups during generation)."""
    G = run.spec.config.rollout.group_size
    per = [p for p in problems for _ in range(G)]
    return {"cfg": run.spec.config, "engine": run.engine, "policy": run.policy, "rollouts": rollouts,
            "prompts": [run.render(p) for p in per], "answers": [p.answer for p in per], "iteration": iteration,
            "seed": run.spec.seed, "verifier": run.reward, "state": run.dense}
