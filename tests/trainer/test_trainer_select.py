"""Prompt selection: the selection rule, identical candidates for the filter and its
random-choice control, dynamic sampling's discarded tokens, and short real runs of every rule."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch
from plans import run_plan

from prereg_kit.runlog import read_run
from trainer.config import ConfigError, TrainerConfig, parse_config, updated
from trainer.core.engines import Rollouts
from trainer.data.problems import Problem, ProblemPool, prompt_stream_batch, prompt_stream_positions
from trainer.interventions import selection as sel
from trainer.interventions.ridge import Ridge
from trainer.launch import plan_jobs


# --------------------------------------------------------------------------------------------
# The rule on given predictions
# --------------------------------------------------------------------------------------------
def test_nearest_target_keeps_six_nearest_plus_two_random_others():
    pred = np.array([0.0, 0.1, 0.45, 0.9, 0.55, 1.0, 0.3, 0.5, 0.62, 0.2, 0.05, 0.7,
                     0.95, 0.4, 0.8, 0.15, 0.35, 0.85, 0.25, 0.75, 0.6, 0.65, 0.98, 0.02])
    keep = sel.nearest_target(pred, 0.5, 6, 2, np.random.default_rng(0))
    near = {7, 2, 4, 13, 20, 8}  # |p - 1/2| = 0, .05, .05, .1, .1, .12
    assert len(keep) == 8 and keep == sorted(keep) and near <= set(keep)
    others = set(keep) - near
    assert len(others) == 2 and all(abs(pred[i] - 0.5) > 0.12 for i in others)
    assert keep == sel.nearest_target(pred, 0.5, 6, 2, np.random.default_rng(0))  # seeded
    # the 2 others are uniform over the remaining 18: every one of them is drawn sometimes
    drawn = set()
    for s in range(200):
        drawn |= set(sel.nearest_target(pred, 0.5, 6, 2, np.random.default_rng(s))) - near
    assert drawn == set(range(24)) - near
    # another target; ties go to the earlier candidate
    keep7 = sel.nearest_target(pred, 0.7, 6, 0, np.random.default_rng(0))
    assert keep7 == sorted([11, 21, 19, 8, 20, 14])  # .7, .65, .75, .62, .6, .8
    assert sel.nearest_target([0.5] * 10, 0.5, 3, 0, np.random.default_rng(0)) == [0, 1, 2]


def test_ridge_fit_primal_and_dual_agree_with_normal_equations():
    g = torch.Generator().manual_seed(0)
    for n, d in [(40, 5), (6, 20)]:
        x, y = torch.randn(n, d, generator=g), torch.rand(n, generator=g)
        fit = Ridge.fit(x, y, 0.7, standardize=False)
        w, b = fit.weight, fit.bias
        xa = torch.cat([x.double(), torch.ones(n, 1, dtype=torch.float64)], 1)
        pen = torch.diag(torch.tensor([0.7] * d + [0.0], dtype=torch.float64))
        ref = torch.linalg.lstsq(xa.T @ xa + pen, xa.T @ y.double()).solution
        assert torch.allclose(torch.cat([w, b.view(1)]), ref, atol=1e-6)
        p = fit.predict(x)
        assert p.min() >= 0 and p.max() <= 1


def test_config_checks_the_selection_fields():
    assert TrainerConfig().selection.rule == "none"
    with pytest.raises(ConfigError, match="keep_nearest"):
        parse_config({"selection": "critic", "keep_nearest": 5})
    with pytest.raises(ConfigError, match="candidates"):
        parse_config({"selection": "random_choice", "candidates": 4})
    with pytest.raises(ConfigError, match="selection"):
        parse_config({"selection": "oracle"})


# --------------------------------------------------------------------------------------------
# Candidates shared by the filter and its control; the selector's state
# --------------------------------------------------------------------------------------------
def _pool(n: int = 60) -> ProblemPool:
    return ProblemPool.from_problems([Problem(f"p{i}", f"{i} + 1 =", str(i + 1), level=1 + i % 3) for i in range(n)])


def _fake_features(policy, prompts, layer=-1):  # a deterministic "hidden state" per prompt
    v = torch.tensor([float(p.split()[0]) for p in prompts])
    return torch.stack([v / 60, torch.sin(v), torch.cos(v)], 1)


def test_filter_and_random_control_score_identical_candidates(monkeypatch):
    monkeypatch.setattr(sel, "prompt_features", _fake_features)
    pool = _pool()
    seen = {}
    for rule in ("critic", "random_choice", "history", "level"):
        cfg = TrainerConfig(selection=rule, candidates=24, warmup_prompts=16)
        s = sel.Selector(cfg, seed=3, pool=pool, render=lambda p: p.prompt)
        rows = []
        for it in range(6):
            chosen = s.choose(it)
            cand = [pool[int(i)] for i in prompt_stream_batch(len(pool), 3, it, 24)]
            assert {p.id for p in chosen} <= {p.id for p in cand} and len(chosen) == 8
            if it < 2:  # warm-up: the first 8 candidates
                assert chosen == cand[:8]
            # a reward that depends only on the prompt: group mean = (i mod 5) / 4
            rewards = torch.tensor([[float(j < int(p.id[1:]) % 5) for j in range(4)] for p in chosen]).flatten()
            rows.append(s.record(chosen, rewards))
        seen[rule] = rows
        assert s.state.trained_prompts == 48 and rows[-1]["sel_distinct_prompts"] <= 48
    for a, b in zip(seen["critic"], seen["random_choice"]):
        assert a["sel_candidates"] == b["sel_candidates"]
    assert [r["sel_warmup"] for r in seen["critic"]] == [True, True, False, False, False, False]
    # the critic predicts from the previous iterations' fit data; the control fits and logs it too
    assert all(r["sel_pred_candidates"] is not None for r in seen["random_choice"][1:])
    # the filter moves its trained prompts' prediction toward the target (here: 1/2)
    late = seen["critic"][2:]
    assert np.mean([abs(r["sel_pred_trained"] - 0.5) for r in late]) <= np.mean([abs(r["sel_pred_candidates"] - 0.5) for r in late])


def test_selection_state_round_trips(monkeypatch):
    monkeypatch.setattr(sel, "prompt_features", _fake_features)
    pool = _pool()
    cfg = TrainerConfig(selection="critic", warmup_prompts=8, prompt_critic_window=2)
    a = sel.Selector(cfg, seed=1, pool=pool, render=lambda p: p.prompt)
    for it in range(4):
        chosen = a.choose(it)
        a.record(chosen, torch.rand(8 * 4, generator=torch.Generator().manual_seed(it)).round())
    assert len(a.state.critic_x) == 2  # the window
    b = sel.Selector(cfg, seed=1, pool=pool, render=lambda p: p.prompt)
    b.load_state_dict(a.state_dict())
    assert [p.id for p in a.choose(4)] == [p.id for p in b.choose(4)]


# --------------------------------------------------------------------------------------------
# Dynamic sampling
# --------------------------------------------------------------------------------------------
class _FakeEngine:
    """Completions "right"/"wrong" by a fixed per-prompt pattern; each completion has length 3 + g."""

    def __init__(self, pattern):
        self.pattern, self.calls = pattern, []

    def generate(self, prompts, *, noise_seed, keys, limit, temperature, top_p, batch_size=None):
        keys = list(keys)
        self.calls.append(keys)
        G = 4
        texts, lengths = [], []
        for j, p in enumerate(prompts):
            i, g = int(p.split()[0]), j % G
            texts.append("right" if self.pattern(i, g) else "wrong")
            lengths.append(3 + g)
        n, T, P = len(prompts), 6, 2
        cmask = (torch.arange(T)[None] < torch.tensor(lengths)[:, None]).float()
        seqs = torch.full((n, P + T), 5)
        return Rollouts(seqs, torch.cat([torch.ones(n, P, dtype=torch.long), cmask.long()], 1), P, cmask,
                        torch.tensor(lengths), torch.zeros(n, dtype=torch.bool), texts)


class _Tok:
    pad_token_id = 0


class _Pol:
    tokenizer = _Tok()


def _dynamic(pattern, cap=96):
    pool = _pool()
    cfg = TrainerConfig(selection="dynamic", prompts_per_iteration=8, group_size=4, dynamic_max_groups=cap)
    eng = _FakeEngine(pattern)
    s = sel.Selector(cfg, seed=2, pool=pool, policy=_Pol(), engine=eng, render=lambda p: p.prompt,
                     reward=lambda text, answer: text == "right")
    problems = s.choose(0)
    assert [p.id for p in problems] == [pool[int(i)].id for i in prompt_stream_batch(len(pool), 2, 0, 8)]
    roll = eng.generate([p.prompt for p in problems for _ in range(4)], noise_seed=0, keys=range(32), limit=6,
                        temperature=1.0, top_p=1.0)
    out_p, out_r = s.complete(0, problems, roll)
    return pool, s, eng, out_p, out_r


def test_dynamic_sampling_keeps_mixed_groups_and_charges_discarded_ones():
    def mixed(i):
        return i % 3 == 0  # a third of the prompts have mixed outcomes

    pool, s, eng, out_p, out_r = _dynamic(lambda i, g: g == 0 if mixed(i) else i % 2 == 0)
    stream = [pool[int(i)] for i in prompt_stream_positions(len(pool), 2, 0, s.state.cursor)]
    assert [p.id for p in out_p] == [p.id for p in stream if mixed(int(p.id[1:]))][:8]  # stream order
    made = s.state.cursor
    assert made % 8 == 0 and made == s._info["sel_groups_generated"] and len(eng.calls) == made // 8
    assert [k for c in eng.calls for k in c] == list(range(made * 4))  # distinct per-request keys
    # every generated token is charged: trained groups as rollout, the rest as discarded
    assert out_r.n == 32 and out_r.tokens == 8 * (3 + 4 + 5 + 6)
    assert s.discarded_tokens == (made - 8) * 18 and s._info["sel_groups_discarded"] == made - 8
    assert out_r.texts == ["right", "wrong", "wrong", "wrong"] * 8
    row = s.record(out_p, torch.tensor([1.0, 0, 0, 0] * 8))
    assert row["sel_groups_discarded"] == made - 8 and row["sel_realized_trained"] == 0.25


def test_dynamic_sampling_cap_fills_with_uniform_groups():
    pool, s, eng, out_p, out_r = _dynamic(lambda i, g: g == 0 if i in (7, 11) else True, cap=20)
    assert s.state.cursor == 20 and [len(c) for c in eng.calls] == [32, 32, 16]
    mixed_ids = {"p7", "p11"} & {pool[int(i)].id for i in prompt_stream_positions(len(pool), 2, 0, 20)}
    assert mixed_ids <= {p.id for p in out_p} and len(out_p) == 8
    assert s.discarded_tokens == 12 * 18 and out_r.tokens == 8 * 18


def test_dynamic_sampling_first_batch_all_mixed_is_unchanged():
    _, s, eng, out_p, out_r = _dynamic(lambda i, g: g == 0)
    assert len(eng.calls) == 1 and s.discarded_tokens == 0 and s.state.cursor == 8


# --------------------------------------------------------------------------------------------
# Short real runs of every configuration
# --------------------------------------------------------------------------------------------
PLAN = run_plan(
    id="select", title="Prompt selection test", question="Do the selection rules run?", comparator="outcome",
    treatment="critic", task_levels="[1, 2]", recipe="""\
candidates = 6
keep_nearest = 1
keep_random = 1
warmup_prompts = 4
dynamic_max_groups = 8
""", configurations="""\
[configurations.outcome]
[configurations.critic]
overrides = { selection = "critic" }
[configurations.random_choice]
overrides = { selection = "random_choice" }
[configurations.history]
overrides = { selection = "history" }
[configurations.level]
overrides = { selection = "level", target = 0.7 }
[configurations.dynamic]
overrides = { selection = "dynamic" }
""", tokens=700, eval_every="B/2", samples=1, n_problems=4, smoke_seeds=None)

RULES = ["critic", "random_choice", "history", "level", "dynamic"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    from trainer.loop import train

    d = tmp_path_factory.mktemp("select") / "study"
    d.mkdir()
    (d / "plan.toml").write_text(PLAN)
    threads = torch.get_num_threads()
    out = {}
    try:
        for rule in RULES:
            _, jobs = plan_jobs(d, "smoke", [rule], [0])
            train(jobs[0].spec)
            out[rule] = (jobs[0].spec, read_run(jobs[0].spec.run_dir, strict=True))
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.mark.slow  # trains the tiny model
@pytest.mark.parametrize("rule", RULES)
def test_short_run_of_every_rule_writes_a_valid_run_log(runs, rule):
    spec, run = runs[rule]
    it = run.iterations
    assert run.meta.status == "complete" and not run.problems
    assert it["iteration"].tolist() == list(range(len(it))) and len(it) >= (2 if rule == "dynamic" else 4)
    assert (it["seconds_selection"] > 0).all()
    assert it["tokens_total"].sum() == run.evals["tokens"].max() >= spec.stop_tokens
    assert "sel_realized_trained" in it and it["sel_realized_trained"].between(0, 1).all()
    if rule == "dynamic":
        assert (it["sel_groups_discarded"] > 0).any() and (it["tokens_discarded"] > 0).any()
        assert ((it["tokens_discarded"] > 0) == (it["sel_groups_discarded"] > 0)).all()
        assert (it["tokens_total"] == it["tokens_rollout"] + it["tokens_discarded"]).all()
    else:
        assert (it["tokens_discarded"] == 0).all()
        assert it["sel_warmup"].tolist()[:2] == [True, True] and not it["sel_warmup"].iloc[2:].any()
        assert it["sel_pred_candidates"].iloc[1:].between(0, 1).all()


def test_filter_and_control_runs_log_identical_candidates(runs):
    a, b = runs["critic"][1].iterations, runs["random_choice"][1].iterations
    n = min(len(a), len(b))
    assert (a["sel_candidates"][:n].to_numpy() == b["sel_candidates"][:n].to_numpy()).all()
    # the warm-up trains the same prompts with the same random numbers: identical rewards
    assert a["reward_mean"][:2].tolist() == b["reward_mean"][:2].tolist()


@pytest.mark.slow  # trains the tiny model
def test_resume_restores_the_selection_state(tmp_path, runs):
    """A run interrupted after a checkpoint resumes to the same rows (the critic's fit data and the
    trained-prompt count come back from the checkpoint)."""
    from trainer.loop import train

    spec, ref = runs["critic"]
    spec = spec.model_copy(update={"run_dir": str(tmp_path / "killed"),
                                   "config": updated(spec.config, {"engine": {"checkpoint_every": 1}})})

    class Stop(Exception):
        pass

    def stop_at(info):
        if info.get("iteration") == 4:
            raise Stop

    threads = torch.get_num_threads()
    try:
        with pytest.raises(Stop):
            train(spec, progress=stop_at)
        train(spec)
    finally:
        torch.set_num_threads(threads)
    run = read_run(spec.run_dir)
    drop = lambda df: df.drop(columns=[c for c in df.columns if "seconds" in c])  # noqa: E731
    assert run.meta.status == "complete" and len(run.meta.model_extra["resumes"]) == 1
    assert drop(run.iterations).equals(drop(ref.iterations))


def test_history_and_level_predictions():
    pool = _pool(12)
    for rule in ("history", "level"):
        s = sel.Selector(TrainerConfig(selection=rule), seed=0, pool=pool)
        assert s.predict([pool[0]], None) is None  # no data yet
        s.choose(0)
        s.record([pool[0], pool[1]], torch.tensor([1.0, 1, 1, 0, 0, 0, 0, 0]))  # p0: 3/4 (level 1), p1: 0 (level 2)
        pred = s.predict([pool[0], pool[1], pool[3], pool[4], pool[2]], None)
        if rule == "history":  # own last group mean, else the recent mean (3/8)
            assert pred.tolist() == [0.75, 0.0, 0.375, 0.375, 0.375]
        else:  # the level's recent mean (levels 1, 2, 1, 2, 3), else the recent mean
            assert pred.tolist() == [0.75, 0.0, 0.75, 0.0, 0.375]


def test_selection_rule_table_matches_the_allowed_names():
    """Every name ``TrainerConfig.selection.rule`` allows has exactly one rule, and back."""
    import typing

    assert tuple(sel.SELECTION_RULES) == typing.get_args(TrainerConfig.model_fields["selection"].annotation.model_fields["rule"].annotation)
