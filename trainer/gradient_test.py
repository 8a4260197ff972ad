"""``prereg gradient-test``'s trainer side: one gradient test of a plan at one fixed policy
(dense-rewards paper §2.4 and Table 6, Appendix A "Efficiency", App. I, §H.3 "Gradient
probes"). Writes ``STUDY/gradient/<id>/batches.parquet`` (one row per scored batch ×
configuration) and ``meta.json`` (docs/gradient-tests.md).

Per batch b (``warmup`` unscored batches first, on which the stateful rules — ``critic_td``,
``critic_baseline`` — fit their buffers as across training iterations):

1. prompts: the plain prompt stream at (test seed, b) (``prompt_stream_batch``, as selection
   ``none``); completions generated once, noise seed ``derive_seed(seed, b, "gradient/rollout")``;
   rewards by the training verifier;
2. the reference gradient ĥ (Monte-Carlo progress credit, no group advantage) on fresh
   completions of the same prompts (``on = "fresh_completions"``) or on the batch's own; its
   context seed is ``derive_seed(seed, b, "gradient/reference")``, so its continuations never
   share draws with a configuration's (their seed is the test seed itself);
3. V from the first ``subspace`` completions (whole groups), one backward pass per completion;
4. per configuration: its credit (``compute_credit`` with the loop's context: seed = the test
   seed, iteration = b, so Monte-Carlo k = 1/2/4 share their first draws as in training), its
   update direction u and dense update d (``trainer.probe_grad``), reduced to inner products;
   then u and d are freed.

**Cost.** Memory: (subspace + 3)·P float32 numbers held at once (the q_g, ĥ, u, d), independent
of the number of batches and of configurations (plus the parameters' own gradient buffers during
a backward pass). Time per scored batch ≈ R + n_V + 1 backward passes — R over the whole batch
(u, with d its part on the V completions), one per q_g, one for ĥ; at most the (2R + subspace + 1)
of computing u and d apart — plus the generation (rollouts, the reference's completions and
continuations, the Monte-Carlo rules' continuations).
"""

from __future__ import annotations

import difflib
import json
import os
import resource
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import torch

from prereg_kit import __version__
from prereg_kit.errors import PreregError
from prereg_kit.plan import Plan, read_toml, resolve_plan_path, validate_plan
from prereg_kit.plan.canonical import content_hash
from prereg_kit.plan.gradient import with_variants
from prereg_kit.runlog import RunBusyError, RunLock, utc_now
from trainer import probe_grad as pg
from trainer.config import EvalSetSpec, RunSpec, TrainerConfig, config_of, derive_seed, updated
from trainer.core.assets import prepare_assets, synthetic_eval_size, weights_sha256
from trainer.core.credit import CreditContext
from trainer.core.engines import make_engine
from trainer.core.evaluate import load_eval_sets
from trainer.core.policy import load_policy, set_determinism
from trainer.core.reward_step import verify_rewards
from trainer.data.problems import load_problems, prompt_stream_batch, task_pool
from trainer.data.verifiers import get_verifier
from trainer.interventions.credit_rules import CONTINUATION_RULES, compute_credit
from trainer.interventions.length import with_length_reward
from trainer.interventions.state import DenseState

STATEFUL_RULES = ("critic_td", "critic_baseline")  # keep a buffer in DenseState across iterations
REFERENCE_DEFAULTS: dict[str, Any] = {"on": "fresh_completions", "completions": None, "cuts": 3, "continuations": 4,
                                      "continuation_limit": 200, "prior": 0.5, "top_p": 1.0}
COLUMNS = ["test", "batch", "configuration", "credit_rule", "mc_k", "dot_uh", "uu", "hh", "perp_dh", "perp_dd",
           "perp_hh", "alignment", "v_rank", "projection_residual", "rollout_tokens", "continuation_tokens", "tokens",
           "seconds"]


def _near(name: str, have) -> str:
    close = difflib.get_close_matches(name, list(have), n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else ""


# --------------------------------------------------------------------------------------------
# The test's plan entry
# --------------------------------------------------------------------------------------------
def _test_spec(plan: Plan, path: Path, test_id: str) -> tuple[dict, Plan]:
    """The ``[[gradient_tests]]`` entry ``test_id`` (the plan's validated model) as a dict with the
    plan-level defaults filled in (``baseline`` = the study's comparator), and the plan with the
    test's variants added as configurations; ``prompts``, ``completions``, ``warmup`` and
    ``reference.completions`` stay None until the configurations are known (:func:`resolve_spec`)."""
    ids = [t.id for t in plan.gradient_tests]
    if test_id not in ids:
        have = ", ".join(ids) or "none"
        raise PreregError(f"{path}: gradient_tests: no test {test_id!r} (have: {have}){_near(test_id, ids)}")
    t = plan.gradient_tests[ids.index(test_id)]
    out = t.model_dump(mode="json")
    out["baseline"] = t.baseline_of(plan.study.comparator)
    out["reference"] = {**REFERENCE_DEFAULTS, **out["reference"]}
    return out, with_variants(plan, t)


def _first_difference(a: Any, b: Any, prefix: str) -> str | None:
    """The first key path where two settings dumps differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            d = _first_difference(a.get(k), b.get(k), f"{prefix}.{k}")
            if d:
                return d
        return None
    return None if a == b else prefix


def resolve_spec(spec: dict, plan: Plan, where: str) -> tuple[dict, dict[str, TrainerConfig]]:
    """The configurations' settings (the test's prompts × completions per batch) and the spec with
    every default resolved. Refuses an unknown configuration, a baseline outside the test, and
    configurations whose model, task, rollout or verifier differ (the batches are shared)."""
    names = list(spec["configurations"])
    for n in names + [spec["baseline"]] + list(spec["fit"]):
        if n not in plan.configurations:
            raise PreregError(f"{where}: unknown configuration {n!r}{_near(str(n), plan.configurations)}")
    if spec["baseline"] not in names:
        raise PreregError(f"{where}.baseline: {spec['baseline']!r} is not one of the test's configurations")
    outside = [n for n in spec["fit"] if n not in names]
    if outside:
        raise PreregError(f"{where}.fit: {outside[0]!r} is not one of the test's configurations")
    raw = {n: config_of(plan, n, where=f"{where}: configuration {n!r}") for n in names}
    first = raw[names[0]]
    prompts = spec["prompts"] or first.rollout.prompts_per_iteration
    G = spec["completions"] or first.rollout.group_size
    cfgs = {n: updated(c, {"rollout": {"prompts_per_iteration": prompts, "group_size": G}}) for n, c in raw.items()}
    base = cfgs[names[0]].model_dump(mode="json")
    for n in names:
        c = cfgs[n]
        dump = c.model_dump(mode="json")
        for section in ("model", "task", "rollout"):
            diff = _first_difference(base[section], dump[section], section)
            if diff:
                raise PreregError(f"{where}: configuration {n!r}: {diff} differs from {names[0]!r}'s; the "
                                  "configurations of one gradient test share their batches")
        if c.rewards.verifier != first.rewards.verifier:
            raise PreregError(f"{where}: configuration {n!r}: rewards.verifier differs from {names[0]!r}'s")
        if c.rewards.channels or c.rewards.aggregation or c.task.name == "code":
            raise PreregError(f"{where}: configuration {n!r}: a gradient test scores with the training verifier; "
                              "reward channels, aggregation rules and the code task are not supported")
    out = dict(spec, prompts=prompts, completions=G)
    if out["warmup"] is None:
        out["warmup"] = 4 if any(c.credit.rule in STATEFUL_RULES for c in cfgs.values()) else 0
    out["reference"] = dict(spec["reference"], completions=spec["reference"]["completions"] or G)
    return out, cfgs


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------
def _plan(study_dir: Path) -> tuple[Path, dict, Plan]:
    """The plan's path, TOML data and validated plan (with its ``gradient_tests``)."""
    path = resolve_plan_path(study_dir)
    _, data = read_toml(path)
    plan = validate_plan(data, source=str(path))
    return path, data, plan


def _eval_specs(plan: Plan) -> list[EvalSetSpec]:
    return [EvalSetSpec(name=s.name, source=s.source, n_problems=s.n_problems, levels=s.levels, at=s.at)
            for s in plan.evaluation.sets]


def _pool(cfg: TrainerConfig, assets, study_dir: Path, eval_sets: list[EvalSetSpec]):
    """The training pool exactly as a run of this configuration builds it (``trainer.loop.setup``)."""

    if cfg.task.name in ("math", "gsm8k"):
        pool = task_pool(cfg.task.name, assets.train_file, cfg.task.levels)
    else:
        pool = load_problems(assets.train_file, source="train")
    pool = pool.numeric_only()
    spec = RunSpec(study="gradient", configuration="gradient", seed=0, plan_hash="", study_dir=str(study_dir),
                   run_dir=str(study_dir), cache_dir=str(study_dir / ".cache"), budget_iterations=1, eval_interval=1,
                   eval_sets=eval_sets, config=cfg)
    return pool.without_near_duplicates(*[es.problems for es in load_eval_sets(spec, assets.synthetic_eval)])


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.replace(path)


def _write_table(path: Path, rows: list[dict]) -> None:

    df = pd.DataFrame(rows, columns=COLUMNS)
    for c in ("batch", "mc_k", "v_rank", "rollout_tokens", "continuation_tokens", "tokens"):
        df[c] = df[c].astype("int64")
    for c in ("dot_uh", "uu", "hh", "perp_dh", "perp_dd", "perp_hh", "alignment", "projection_residual", "seconds"):
        df[c] = df[c].astype("float64")
    tmp = path.with_name(path.name + ".tmp")
    df.to_parquet(tmp, index=False)
    tmp.replace(path)


def results_dir(study_dir: str | Path, test_id: str) -> Path:
    return Path(study_dir) / "gradient" / test_id


def run_gradient_test(study_dir: str | Path, test_id: str, *, log: Callable[[str], None] = print,
                      cache_dir: str | Path | None = None, batches: int | None = None) -> Path:
    """Run gradient test ``test_id`` of the study's plan; returns the results folder.

    ``batches`` overrides the plan's number of scored batches (benchmarks; the result then says
    so in ``meta.json``'s spec). Refuses a folder whose ``meta.json`` says complete, and a folder
    another process is writing (its one-writer lock)."""
    study = Path(study_dir)
    path, data, plan = _plan(study)
    spec, plan = _test_spec(plan, path, test_id)
    folder = results_dir(study, test_id)
    meta_file = folder / "meta.json"
    lock = RunLock(folder)
    try:
        lock.acquire()
    except RunBusyError as e:  # one line for the command, as a plan error is
        raise PreregError(str(e)) from None
    with lock:
        if meta_file.exists() and json.loads(meta_file.read_text() or "{}").get("status") == "complete":
            raise PreregError(f"{folder}: gradient test {test_id!r} is already complete; a complete result is never "
                              "overwritten (move the folder aside to run it again)")
        where = f"{path}: gradient_tests {test_id!r}"
        spec, cfgs = resolve_spec(spec, plan, where)
        if batches is not None:
            spec["batches"] = int(batches)
        return _run(study, folder, spec, cfgs, plan, content_hash(data), log, cache_dir)


def _run(study: Path, folder: Path, spec: dict, cfgs: dict[str, TrainerConfig], plan: Plan, plan_hash: str,
         log: Callable[[str], None], cache_dir) -> Path:


    started, t_start = utc_now(), time.perf_counter()
    names = list(spec["configurations"])
    base = cfgs[names[0]]
    evs = _eval_specs(plan)
    n_eval = synthetic_eval_size(evs)
    assets = prepare_assets(base, Path(cache_dir) if cache_dir else study / ".cache", study, n_eval)
    model_path = assets.model_path if spec["policy"] == "initial" else study / spec["policy"]
    threads = torch.get_num_threads()
    if base.engine.threads:
        torch.set_num_threads(base.engine.threads)
    try:
        policy = load_policy(base, model_path)
        set_determinism(base, policy.device)
        engine = make_engine(policy)
        pool = _pool(base, assets, study, evs)
        verifier = get_verifier(base.rewards.verifier)
        cache: dict[str, str] = {}

        def render(p) -> str:
            if p.id not in cache:
                cache[p.id] = policy.render(p.prompt)
            return cache[p.id]

        P, G, seed = pg.n_parameters(policy), spec["completions"], spec["seed"]
        ref = spec["reference"]
        ref_cfg = base.model_copy(update={
            "credit": base.credit.__class__(rule="monte_carlo", mc_k=ref["continuations"], mc_segments=ref["cuts"] + 1,
                                            mc_continuation_limit=ref["continuation_limit"], mc_prompt_value=ref["prior"]),
            "rollout": base.rollout.model_copy(update={"top_p": ref["top_p"], "group_size": ref["completions"]})})
        rows_v = _subspace_rows(spec["subspace"], G, spec["prompts"] * G)
        dense = {n: DenseState() for n in names}
        held = pg.Held()
        rows: list[dict] = []
        total = spec["warmup"] + spec["batches"]
        for j in range(total):
            t0 = time.perf_counter()
            problems = [pool[int(i)] for i in prompt_stream_batch(len(pool), seed, j, spec["prompts"])]
            per = [p for p in problems for _ in range(G)]
            prompts = [render(p) for p in per]
            roll = engine.generate(prompts, noise_seed=derive_seed(seed, j, "gradient/rollout"), keys=range(len(prompts)),
                                   limit=base.rollout.completion_limit, temperature=base.rollout.temperature,
                                   top_p=base.rollout.top_p)
            rewards = verify_rewards(verifier, roll.texts, [p.answer for p in per])
            context = _contexts(policy, engine, verifier, study, per, prompts, roll, rewards, G, seed, j)
            if j < spec["warmup"]:  # unscored: only the stateful rules need the batch (their buffers)
                for n in names:
                    if cfgs[n].credit.rule in STATEFUL_RULES:
                        _credit(cfgs[n], context(cfgs[n], dense[n]), roll, rewards, G)
                log(f"gradient test {spec['id']}: warm-up batch {j + 1}/{spec['warmup']} ({time.perf_counter() - t0:.1f} s)")
                continue
            h = held.add(_reference(spec, ref_cfg, policy, engine, verifier, study, problems, per, prompts, roll,
                                    rewards, context, seed, j))
            Q = pg.score_sums(policy, roll, rows_v, held)
            K, Qh, hh = pg.gram(Q), pg.dots(Q, h), pg.dot(h, h)
            for n in names:
                t1 = time.perf_counter()
                cfg = cfgs[n]
                credit = _credit(cfg, context(cfg, dense[n]), roll, rewards, G)
                u, d = pg.update_direction(policy, roll, credit, rows_v)
                held.add(u), held.add(d)
                in_v = (not getattr(credit, "sequences", None)
                        and pg.constant_within(credit.tokens[:rows_v], roll.completion_mask[:rows_v]))
                nums = pg.inner_products(K, Qh, hh, h, u, d, Q, in_v)
                held.drop(u), held.drop(d)
                del u, d
                mc = cfg.credit.rule in CONTINUATION_RULES
                rows.append({"test": spec["id"], "batch": j - spec["warmup"], "configuration": n,
                             "credit_rule": cfg.credit.rule, "mc_k": cfg.credit.mc_k if mc else 0, **nums,
                             "rollout_tokens": roll.tokens, "continuation_tokens": int(credit.continuation_tokens),
                             "tokens": roll.tokens + int(credit.continuation_tokens),
                             "seconds": time.perf_counter() - t1})
            held.drop(Q), held.drop(h)
            del Q, h
            log(f"gradient test {spec['id']}: batch {j - spec['warmup'] + 1}/{spec['batches']} "
                f"({time.perf_counter() - t0:.1f} s)")
        _write_table(folder / "batches.parquet", rows)
        memory = {"held_vectors": rows_v + 3, "bytes_per_vector": 4 * P, "peak_held_bytes": held.peak,
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
        if policy.device.type == "cuda":
            memory["cuda_max_allocated_bytes"] = int(torch.cuda.max_memory_allocated(policy.device))
        ended = utc_now()
        meta = {"test": spec["id"], "plan_hash": plan_hash, "spec": spec,
                "policy": spec["policy"], "model_sha256": weights_sha256(model_path), "parameters": P,
                "device": (f"cuda:{torch.cuda.get_device_name(policy.device)}" if policy.device.type == "cuda" else "cpu"),
                "torch_version": torch.__version__, "tool_version": __version__, "started_at": started.isoformat(),
                "ended_at": ended.isoformat(), "seconds": time.perf_counter() - t_start, "memory": memory,
                "status": "complete"}
        _atomic_write(folder / "meta.json", (json.dumps(meta, indent=2, sort_keys=True) + "\n").encode())
        return folder
    finally:
        torch.set_num_threads(threads)


def _subspace_rows(subspace: int, G: int, N: int) -> int:
    """How many completions span V: whole groups, at most ``subspace`` (the first ``subspace``
    of the first group when one group is larger), at most the batch."""
    rows = (subspace // G) * G if subspace >= G else subspace
    return min(rows, N)


def _contexts(policy, engine, verifier, study: Path, per: list, prompts: list[str], roll, rewards, G: int, seed: int,
              it: int) -> Callable:
    """cfg, state → the batch's CreditContext as ``trainer.loop.credit_context`` builds it."""

    def make(cfg: TrainerConfig, state, *, ctx_seed: int = seed, rollouts=roll, r=rewards, prompts_=prompts,
             per_=per, group_size: int = G) -> CreditContext:
        return CreditContext.of(r, rollouts.completion_mask, group_size=group_size, eps=cfg.credit.advantage_eps,
                                cfg=cfg, rollouts=rollouts, prompts=prompts_, answers=[p.answer for p in per_],
                                iteration=it, seed=ctx_seed, policy=policy, engine=engine, verifier=verifier,
                                state=state, problems=[p.prompt for p in per_], study_dir=str(study))
    return make


def _credit(cfg: TrainerConfig, ctx, roll, rewards, G: int):

    return with_length_reward(compute_credit(cfg.credit.rule, ctx), rewards, roll, G, cfg)


def _reference(spec: dict, ref_cfg: TrainerConfig, policy, engine, verifier, study: Path, problems: list, per: list,
               prompts: list[str], roll, rewards, context: Callable, seed: int, it: int):
    """ĥ on the batch's prompts: fresh completions (``reference.completions`` per prompt, noise
    seed ``derive_seed(seed, b, "gradient/reference/rollout")``) or the batch's own; continuations
    from the context seed ``derive_seed(seed, b, "gradient/reference")``."""

    ref, cseed = spec["reference"], derive_seed(seed, it, "gradient/reference")
    if ref["on"] == "fresh_completions":
        Gr = ref["completions"]
        per_r = [p for p in problems for _ in range(Gr)]
        prompts_r = [prompts[i * len(per) // len(problems)] for i in range(len(problems)) for _ in range(Gr)]
        roll_r = engine.generate(prompts_r, noise_seed=derive_seed(seed, it, "gradient/reference/rollout"),
                                 keys=range(len(prompts_r)), limit=ref_cfg.rollout.completion_limit,
                                 temperature=ref_cfg.rollout.temperature, top_p=ref["top_p"])
        r_r = verify_rewards(verifier, roll_r.texts, [p.answer for p in per_r])
        ctx = context(ref_cfg, DenseState(), ctx_seed=cseed, rollouts=roll_r, r=r_r, prompts_=prompts_r, per_=per_r,
                      group_size=Gr)
    else:
        roll_r = roll
        ctx = context(ref_cfg, DenseState(), ctx_seed=cseed, group_size=len(per) // len(problems))
    w, _ = pg.reference_credit(ref_cfg, ctx)
    return pg.loss_gradient(policy, [pg.rollout_part(roll_r, w)], roll_r.n)
