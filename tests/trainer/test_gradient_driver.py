"""The gradient-test driver (trainer/gradient_test.py, trainer/probe_grad.py): the results
contract on a tiny study, the projection's numerical checks, determinism and seed separation,
the update direction against update_step's gradient, and the refusals."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("pandas")

import pandas as pd
import torch
from plans import run_plan
from test_trainer_credit import _rollouts, _tiny_policy

from prereg_kit.errors import PreregError
from prereg_kit.runlog import RunLock
from trainer import probe_grad as pg
from trainer.core.credit import token_credit
from trainer.core.policy import token_logprobs
from trainer.core.update import make_optimizer, policy_loss, update_step
from trainer.gradient_test import COLUMNS, _plan, _test_spec, resolve_spec, run_gradient_test
from trainer.plugin import RUNNER

CONFIGS = """\
[configurations.outcome]
[configurations.mc_k1]
overrides = { credit = { rule = "monte_carlo", mc_k = 1, mc_segments = 3 } }
[configurations.mc_k2]
overrides = { credit = { rule = "monte_carlo", mc_k = 2, mc_segments = 3 } }
[configurations.critic]
overrides = { credit = { rule = "critic_td", mc_segments = 3, critic_start_iteration = 2 } }
[configurations.reuse]
overrides = { credit = { rule = "continuation_reuse", mc_k = 2, mc_segments = 3 } }
"""


def _gradient_table(seed: int = 0, batches: int = 2, extra: str = "",
                    configurations: str = '["outcome", "mc_k1", "mc_k2"]') -> str:
    return f"""
[[gradient_tests]]
id = "G1"
configurations = {configurations}
batches = {batches}
seed = {seed}
subspace = 8
reference = {{ completions = 4, cuts = 2, continuations = 2, continuation_limit = 8 }}
{extra}"""


def _study(root: Path, cache: Path, name: str = "study", **kw) -> Path:
    d = root / name
    d.mkdir()
    plan = run_plan(id="grad", comparator="outcome", treatment="mc_k2", configurations=CONFIGS, tokens=400,
                    eval_every="B/2", samples=1, n_problems=4, completion_limit=24, warm_steps=100, stages=False)
    (d / "plan.toml").write_text(plan + _gradient_table(**kw))
    (d / ".cache").symlink_to(cache, target_is_directory=True)
    return d


def _run(study: Path, **kw) -> Path:
    threads = torch.get_num_threads()
    try:
        return run_gradient_test(study, "G1", log=lambda m: None, **kw)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """Two runs with seed 0 (two study folders) and one with seed 1, sharing the warm start."""
    root = tmp_path_factory.mktemp("grad")
    cache = root / "cache"
    cache.mkdir()
    a, b, c = _study(root, cache, "a"), _study(root, cache, "b"), _study(root, cache, "c", seed=1)
    return {k: (s, _run(s)) for k, s in (("a", a), ("b", b), ("c", c))}


def _table(folder: Path) -> "pd.DataFrame":
    return pd.read_parquet(folder / "batches.parquet")


def test_the_table_has_the_contracts_columns_and_rows(results):
    study, folder = results["a"]
    assert folder == study / "gradient" / "G1"
    df = _table(folder)
    assert list(df.columns) == COLUMNS
    assert len(df) == 2 * 3 and sorted(set(df.batch)) == [0, 1]
    assert list(df.configuration[:3]) == ["outcome", "mc_k1", "mc_k2"]
    assert dict(zip(df.configuration, df.mc_k)) == {"outcome": 0, "mc_k1": 1, "mc_k2": 2}
    assert set(df.credit_rule) == {"outcome", "monte_carlo"}
    for c in ("batch", "mc_k", "v_rank", "rollout_tokens", "continuation_tokens", "tokens"):
        assert df[c].dtype == "int64", c
    for c in ("dot_uh", "uu", "hh", "perp_dh", "perp_dd", "perp_hh", "alignment", "projection_residual", "seconds"):
        assert df[c].dtype == "float64", c
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["status"] == "complete" and meta["test"] == "G1" and meta["policy"] == "initial"
    assert meta["model_sha256"].startswith("sha256:") and meta["parameters"] > 0
    P = meta["parameters"]
    assert meta["memory"]["held_vectors"] == 8 + 3 and meta["memory"]["bytes_per_vector"] == 4 * P
    assert meta["memory"]["peak_held_bytes"] == (8 + 3) * 4 * P  # exact: the q_g, ĥ, u and d at once
    assert meta["memory"]["peak_rss_bytes"] > 0
    s = meta["spec"]
    assert s["baseline"] == "outcome" and s["warmup"] == 0 and s["prompts"] == 2 and s["completions"] == 4
    assert s["reference"]["on"] == "fresh_completions" and s["reference"]["prior"] == 0.5
    assert meta["plan_hash"].startswith("sha256:") and len(meta["plan_hash"]) == 71


def test_outcome_lies_in_v_and_the_projection_checks(results):
    df = _table(results["a"][1])
    out = df[df.configuration == "outcome"]
    assert (out.uu > 0).any()  # a mixed group: the check is not vacuous
    assert out.alignment.isna().all()
    assert (out.perp_dd.abs() <= 1e-6 * out.uu.clip(lower=1e-30)).all(), out[["perp_dd", "uu"]]
    assert (df.projection_residual < 1e-6).all(), df.projection_residual
    assert (df.v_rank >= 1).all() and (df.v_rank <= 8).all()
    mc = df[df.configuration != "outcome"]
    assert (mc.perp_dd > 1e-6 * mc.uu).any()  # dense credit leaves V
    assert mc.alignment.dropna().between(-1, 1).all()
    assert (df.perp_hh <= df.hh * (1 + 1e-9)).all() and (df.perp_hh >= -1e-9 * df.hh).all()


def test_token_accounting(results):
    df = _table(results["a"][1])
    assert (df.tokens == df.rollout_tokens + df.continuation_tokens).all()
    mc = df[df.configuration != "outcome"]
    assert (mc.continuation_tokens > 0).all()
    assert (df[df.configuration == "outcome"].continuation_tokens == 0).all()
    k1 = df[df.configuration == "mc_k1"].continuation_tokens.to_numpy()
    k2 = df[df.configuration == "mc_k2"].continuation_tokens.to_numpy()
    assert (k2 > k1).all()
    # per batch the rollouts are shared by every configuration
    assert (df.groupby("batch").rollout_tokens.nunique() == 1).all()


def test_same_seed_same_rows_other_seed_other_reference(results):
    a, b, c = (_table(results[k][1]).drop(columns="seconds") for k in "abc")
    pd.testing.assert_frame_equal(a, b)
    assert not (a.hh.to_numpy() == c.hh.to_numpy()).all()


def test_reference_seeds_are_disjoint_from_the_rules(results):
    """ĥ is drawn apart from every configuration: its squared norm matches no rule's ‖u‖²."""
    df = _table(results["a"][1])
    for _, r in df.iterrows():
        assert not math.isclose(r.hh, r.uu, rel_tol=1e-9)
    # and the same reference for every configuration of a batch
    assert (df.groupby("batch").hh.nunique() == 1).all()


def test_update_direction_is_minus_update_steps_gradient():
    pol = _tiny_policy()
    pol = pg.Policy(pol.model, None, pol.device, None, pol.cfg.model_copy(
        update={"update": pol.cfg.update.model_copy(update={"grad_clip": 1e30, "learning_rate": 0.0})}))
    roll = _rollouts()
    credit = token_credit(torch.tensor([1.5, -0.5, 0.0, 2.0]), roll.completion_mask)
    opt = make_optimizer(pol)
    update_step(pol, opt, roll, credit, 0.0)
    g_step = torch.cat([p.grad.reshape(-1) for p in pol.model.parameters()])
    logp = token_logprobs(pol, roll.sequences, roll.attention_mask, roll.prompt_len)
    direct = torch.autograd.grad(policy_loss(logp, credit, roll.completion_mask, roll.n), list(pol.model.parameters()),
                                 retain_graph=True)
    g_direct = torch.cat([g.reshape(-1) for g in direct])
    u, d = pg.update_direction(pol, roll, type("C", (), {"tokens": credit})(), 2)
    assert torch.allclose(u, -g_step, rtol=1e-5, atol=1e-7)
    assert torch.allclose(u, -g_direct, rtol=1e-5, atol=1e-7)
    d_want = torch.autograd.grad(policy_loss(logp[:2], credit[:2], roll.completion_mask[:2], roll.n),
                                 list(pol.model.parameters()), allow_unused=True)
    d_want = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                        for g, p in zip(d_want, pol.model.parameters())])
    assert torch.allclose(d, -d_want, rtol=1e-5, atol=1e-7)


def test_score_sums_and_inner_products_match_dense_numpy():
    from analyses.gradient import perp_cosine, project_out

    pol = _tiny_policy()
    roll = _rollouts()
    held = pg.Held()
    Q = pg.score_sums(pol, roll, 3, held)
    assert held.now == held.peak == Q.numel() * 4
    q0 = torch.autograd.grad(token_logprobs(pol, roll.sequences[:1], roll.attention_mask[:1], 3)
                             .mul(roll.completion_mask[:1]).sum(), list(pol.model.parameters()))
    assert torch.allclose(Q[0], torch.cat([g.reshape(-1) for g in q0]), rtol=1e-5, atol=1e-7)
    g = torch.Generator().manual_seed(0)
    d, h = torch.randn(Q.shape[1], generator=g), torch.randn(Q.shape[1], generator=g)
    K = pg.gram(Q)
    row = pg.inner_products(K, pg.dots(Q, h), pg.dot(h, h), h, d, d, Q, in_v=False)
    Qn, dn, hn = Q.double().numpy(), d.double().numpy(), h.double().numpy()
    pd_, ph = project_out(dn, Qn), project_out(hn, Qn)
    assert row["perp_dh"] == pytest.approx(float(pd_ @ ph), rel=1e-6)
    assert row["perp_dd"] == pytest.approx(float(pd_ @ pd_), rel=1e-6)
    assert row["alignment"] == pytest.approx(perp_cosine(dn, hn, Qn), rel=1e-6)
    assert row["v_rank"] == 3 and row["projection_residual"] < 1e-9


def test_a_second_writer_is_refused(results, tmp_path):
    study, _ = results["a"]
    other = tmp_path / "s"
    other.mkdir()
    (other / "plan.toml").write_text((study / "plan.toml").read_text())
    with RunLock(other / "gradient" / "G1"):
        err = []
        t = threading.Thread(target=lambda: err.append(_catch(lambda: _run(other))))
        t.start()
        t.join()
    assert isinstance(err[0], PreregError) and "another writer holds this run" in str(err[0])
    assert not (other / "gradient" / "G1" / "batches.parquet").exists()


def _catch(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return e
    return None


def test_a_complete_result_is_never_overwritten(results):
    study, folder = results["a"]
    before = (folder / "batches.parquet").read_bytes()
    with pytest.raises(PreregError, match=r"gradient/G1: gradient test 'G1' is already complete"):
        _run(study)
    assert (folder / "batches.parquet").read_bytes() == before


def test_unknown_test_configuration_and_keys_are_refused(tmp_path):
    d = tmp_path / "p"
    d.mkdir()
    plan = run_plan(id="grad", comparator="outcome", treatment="mc_k2", configurations=CONFIGS, tokens=400,
                    eval_every="B/2", samples=1, n_problems=4, stages=False)
    (d / "plan.toml").write_text(plan + _gradient_table())
    with pytest.raises(PreregError, match=r"no test 'G2' \(have: G1\); did you mean 'G1'\?"):
        run_gradient_test(d, "G2", log=lambda m: None)
    (d / "plan.toml").write_text(plan + _gradient_table().replace('"mc_k2"]', '"mc_k3"]'))
    with pytest.raises(PreregError, match=r"unknown configuration 'mc_k3'; did you mean 'mc_k[12]'\?"):
        run_gradient_test(d, "G1", log=lambda m: None)
    (d / "plan.toml").write_text(plan + _gradient_table(extra='subspaces = 3\n'))
    with pytest.raises(PreregError, match=r"gradient_tests\[0\]\.subspaces: unknown key"):
        run_gradient_test(d, "G1", log=lambda m: None)
    (d / "plan.toml").write_text(plan + _gradient_table(extra='fit = ["mc_k1", "critic"]\n'))
    with pytest.raises(PreregError, match=r"\.fit: 'critic' is not one of the test's configurations"):
        run_gradient_test(d, "G1", log=lambda m: None)
    (d / "plan.toml").write_text(plan + _gradient_table(extra='baseline = "mc_k3"\n'))
    with pytest.raises(PreregError, match="the baseline 'mc_k3' is not one of the test's configurations"):
        run_gradient_test(d, "G1", log=lambda m: None)
    (d / "plan.toml").write_text(plan + _gradient_table(extra='reference = { on = "same" }\n').replace(
        "reference = { completions = 4, cuts = 2, continuations = 2, continuation_limit = 8 }\n", ""))
    with pytest.raises(PreregError, match="reference.on: input should be 'fresh_completions' or 'same_completions'"):
        run_gradient_test(d, "G1", log=lambda m: None)


def test_configurations_with_other_rollout_settings_are_refused(tmp_path):
    d = tmp_path / "p"
    d.mkdir()
    configs = CONFIGS.replace('mc_k = 2, mc_segments = 3 }', 'mc_k = 2, mc_segments = 3 }, rollout = { temperature = 0.7 }')
    plan = run_plan(id="grad", comparator="outcome", treatment="mc_k2", configurations=configs, tokens=400,
                    eval_every="B/2", samples=1, n_problems=4, stages=False)
    (d / "plan.toml").write_text(plan + _gradient_table())
    with pytest.raises(PreregError, match=r"'mc_k2' differs from 'outcome' in rollout.temperature"):
        run_gradient_test(d, "G1", log=lambda m: None)


def test_the_runner_hands_the_test_on(results, monkeypatch):
    import trainer.gradient_test as gt

    seen = {}
    monkeypatch.setattr(gt, "run_gradient_test", lambda s, t, *, log: seen.update(s=s, t=t) or Path(s) / "x")
    assert RUNNER.gradient_test("S", "G1", log=print) == str(Path("S") / "x") and seen == {"s": "S", "t": "G1"}


def test_warmup_defaults_to_4_only_for_stateful_rules(tmp_path):
    d = tmp_path / "p"
    d.mkdir()
    plan = run_plan(id="grad", comparator="outcome", treatment="mc_k2", configurations=CONFIGS, tokens=400,
                    eval_every="B/2", samples=1, n_problems=4, stages=False)
    for configs, extra, want in (('["outcome", "mc_k1"]', "", 0), ('["outcome", "critic"]', "", 4),
                                 ('["outcome", "critic"]', "warmup = 1\n", 1)):
        (d / "plan.toml").write_text(plan + _gradient_table(configurations=configs, extra=extra))
        path, _, p = _plan(d)
        spec, cfgs = resolve_spec(*_test_spec(p, path, "G1"), "w")
        assert spec["warmup"] == want and list(cfgs) == eval(configs)
        assert spec["reference"]["completions"] == spec["completions"] == 4


def test_critic_reuse_and_the_same_completions_reference(tmp_path, results):
    """A stateful rule after its warm-up, continuation reuse's extra sequences, ĥ on the batch's own
    completions (the H.3 probe's equal-iteration form)."""
    cache = Path(str(results["a"][0] / ".cache")).resolve()
    d = tmp_path / "s"
    d.mkdir()
    plan = run_plan(id="grad", comparator="outcome", treatment="mc_k2", configurations=CONFIGS, tokens=400,
                    eval_every="B/2", samples=1, n_problems=4, completion_limit=24, warm_steps=100, stages=False)
    table = _gradient_table(configurations='["outcome", "critic", "reuse"]', extra="warmup = 2\n").replace(
        "reference = { completions = 4, ", 'reference = { on = "same_completions", ')
    (d / "plan.toml").write_text(plan + table)
    (d / ".cache").symlink_to(cache, target_is_directory=True)
    df = _table(_run(d))
    assert len(df) == 6 and sorted(set(df.batch)) == [0, 1]
    reuse, critic = df[df.configuration == "reuse"], df[df.configuration == "critic"]
    assert (reuse.continuation_tokens > 0).all() and (reuse.mc_k == 2).all()
    assert (critic.continuation_tokens == 0).all() and (critic.mc_k == 0).all()
    assert (df.projection_residual < 1e-6).all()
    assert critic.alignment.notna().all()  # after its warm-up the critic's credit varies within completions
    assert (df.groupby("batch").hh.nunique() == 1).all() and (df.hh > 0).all()


def test_every_credit_rule_without_a_prm_is_measured(tmp_path, results):
    """The rules of the equal-iteration study and its controls, VinePPO-style values and
    REINFORCE-LOO as variants of one test: each gets a row per batch; rules whose credit is
    constant within a completion (rloo) have no alignment, the others one."""
    cache = Path(str(results["a"][0] / ".cache")).resolve()
    d = tmp_path / "s"
    d.mkdir()
    plan = run_plan(id="grad", comparator="outcome", treatment="mc_k2", configurations=CONFIGS, tokens=400,
                    eval_every="B/2", samples=1, n_problems=4, completion_limit=24, warm_steps=100, stages=False)
    rules = ("equal_iteration", "shuffled", "implicit", "vineppo", "rloo")
    variants = ", ".join(f'{r} = {{ credit = {{ rule = "{r}", mc_k = 2, mc_segments = 3 }} }}' for r in rules)
    table = _gradient_table(configurations=str(["outcome", *rules]).replace("'", '"'), batches=2,
                            extra=f"variants = {{ {variants} }}\n")
    (d / "plan.toml").write_text(plan + table)
    (d / ".cache").symlink_to(cache, target_is_directory=True)
    df = _table(_run(d))
    df = df[df["batch"] == 0].set_index("configuration")
    assert list(df.index) == ["outcome", *rules] and list(df["credit_rule"]) == ["outcome", *rules]
    assert np.isnan(df.loc["rloo", "alignment"]) and np.isnan(df.loc["outcome", "alignment"])
    assert df.loc[["equal_iteration", "shuffled", "vineppo"], "alignment"].notna().all()
    assert (df.loc[["equal_iteration", "shuffled", "vineppo"], "continuation_tokens"] > 0).all()
    assert df.loc["implicit", "continuation_tokens"] == 0 and (df["projection_residual"] < 1e-6).all()


def test_a_model_folder_in_the_study_is_the_policy(tmp_path, results):
    """``policy = "ckpt"``: the test runs at the weights in that folder. A copy of the initial
    model gives the initial policy's rows exactly; a perturbed copy gives other rows and another
    model hash in meta.json."""
    import shutil

    study_a, folder_a = results["a"]
    cache = Path(str(study_a / ".cache")).resolve()
    model = next(p.parent for p in cache.rglob("config.json") if (p.parent / "model.safetensors").is_file())
    plan = run_plan(id="grad", comparator="outcome", treatment="mc_k2", configurations=CONFIGS, tokens=400,
                    eval_every="B/2", samples=1, n_problems=4, completion_limit=24, warm_steps=100, stages=False)
    ref, ref_meta = _table(folder_a), json.loads((folder_a / "meta.json").read_text())
    rows = {}
    for name, perturb in (("same", False), ("moved", True)):
        d = tmp_path / name
        d.mkdir()
        shutil.copytree(model, d / "ckpt")
        if perturb:
            from safetensors.torch import load_file, save_file

            w = load_file(d / "ckpt" / "model.safetensors")
            k = next(k for k in w if k.endswith("lm_head.weight") or k.endswith("embed_tokens.weight"))
            w[k] = w[k] + 0.05 * torch.randn(w[k].shape, generator=torch.Generator().manual_seed(0))
            save_file(w, d / "ckpt" / "model.safetensors")
        (d / "plan.toml").write_text(plan + _gradient_table(extra='policy = "ckpt"\n'))
        (d / ".cache").symlink_to(cache, target_is_directory=True)
        folder = _run(d)
        rows[name], meta = _table(folder), json.loads((folder / "meta.json").read_text())
        assert meta["policy"] == "ckpt" and (meta["model_sha256"] == ref_meta["model_sha256"]) == (not perturb)
    cols = [c for c in COLUMNS if c != "seconds"]
    pd.testing.assert_frame_equal(rows["same"][cols], ref[cols])
    assert not np.allclose(rows["moved"]["uu"], ref["uu"])
