"""One GRPO run at matched compute: the loop of the dense-rewards paper §2.3 and §C.1, one screen per
iteration — select prompts → generate → reward → credit → update → account → evaluate / log /
checkpoint. ``setup`` builds (or resumes) everything the loop needs.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

import prereg_kit
import trainer
from prereg_kit.chain.lock import read_chain
from prereg_kit.chain.seal import code_sha256, seal_runs, sealed_not_complete
from prereg_kit.errors import PreregError
from prereg_kit.runlog import RunLock, RunLogError, RunLogWriter, RunMeta, election_sha256, read_meta, run_dir, utc_now
from prereg_kit.study.jobs import require_locked
from trainer.config import RunSpec, derive_seed
from trainer.core.assets import prepare_assets, synthetic_eval_size
from trainer.core.budget import Counters, Schedule, StageClock
from trainer.core.checkpoint import load_checkpoint, remove_checkpoint, save_checkpoint
from trainer.core.credit import CreditContext
from trainer.core.engines import Engine, make_engine
from trainer.core.evaluate import EvalSet, accuracy, evaluate, load_eval_sets
from trainer.core.policy import Policy, load_policy, set_determinism, synchronize
from trainer.core.program_judge import judge_meta
from trainer.core.reward_step import Rewarder, make_rewarder, state_from_dict, state_to_dict
from trainer.core.tracking import Tracking, check_trackers
from trainer.core.update import learning_rate_at, make_optimizer, update_step
from trainer.data.problems import ProblemPool, load_problems, task_pool
from trainer.data.verifiers import get_verifier
from trainer.interventions.credit_rules import compute_credit
from trainer.interventions.length import with_length_reward
from trainer.interventions.reuse import reuse_update, steps_per_iteration, uses_reuse_update
from trainer.interventions.selection import Selector
from trainer.interventions.state import DenseState


class RunAlreadyComplete(PreregError):
    """The run's log says it is complete: it is never reopened (another process may have finished it)."""

    exit_code = 3


def train(spec: RunSpec, progress: Callable[[dict], None] = lambda info: None) -> Counters:
    """Train one (configuration, seed) to its budget, logging every iteration and evaluation;
    a main-stage run is sealed into the plan's lock chain when it completes.

    The run folder's one-writer lock is taken before anything of the run is read and held until
    the seal is written, so a second process on the same run stops at once and loses nothing.
    A main-stage run refuses an unlocked or changed plan (``prereg_kit.study.jobs.require_locked``), and
    a run the lock chain seals already (``prereg_kit.chain.seal.sealed_not_complete``), as the launchers
    do, so a run process started by hand obeys the lock as well."""
    if spec.stage == "main":
        require_locked(spec.study_dir)
        again = sealed_not_complete(spec.study_dir, [spec.run_dir], read_chain(spec.study_dir))
        if again:  # a run process started by hand obeys it too
            raise PreregError(*again)
    check_trackers(spec.trackers)  # a tracker whose package is missing: refused before the run is touched
    with RunLock(spec.run_dir, wait_s=float(os.environ.get("PREREG_LEASE_WAIT_S", "0"))) as lock:
        if lock.stale:
            print(f"warning: {spec.run_dir}: {lock.stale}; taking the run over", file=sys.stderr)
        return _train(spec, progress, lock)


def _train(spec: RunSpec, progress: Callable[[dict], None], lock: RunLock) -> Counters:
    r = setup(spec, lock)
    cfg, c, G = spec.config, r.counters, spec.config.rollout.group_size
    with r.writer, r.tracker:  # closed as complete, stopped or failed
        if c.eval_index == 0:  # the evaluation at the start, before any update
            _evaluate_log_checkpoint(r, spec, row=None, progress=progress)
        while not c.done:
            it = c.iteration
            r.clock.reset()
            with r.clock.stage("selection"):  # (seed, iteration) and the checkpointed selection state
                problems = r.selector.choose(it)  # "none": prompt_stream_batch(pool, seed, it, 8)
                prompts = [r.render(p) for p in problems for _ in range(G)]
            with r.clock.stage("generation"):
                roll = r.engine.generate(prompts, noise_seed=derive_seed(spec.seed, it, "rollout"), keys=range(len(prompts)),
                                         limit=cfg.rollout.completion_limit, temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p)
                problems, roll = r.selector.complete(it, problems, roll)  # dynamic sampling: more groups until 8 mixed
            with r.clock.stage("credit"):
                rewards, advantages = iteration_rewards(r, it, problems, roll)  # verifier, or channels + aggregation
                credit = compute_credit(cfg.credit.rule, credit_context(r, it, problems, roll, rewards, advantages))
                credit = with_length_reward(credit, rewards, roll, G, cfg)  # −λ(L_i − m_g)/L_max; no-op at λ = 0
            with r.clock.stage("update"):
                lr = (learning_rate_at(cfg, c.total_tokens, spec.budget_tokens) if spec.budget_tokens is not None
                      else learning_rate_at(cfg, c.iteration, spec.budget_iterations))  # linear decay over B's axis
                if uses_reuse_update(cfg):  # reuse variants: clipped steps, continuation sequences
                    stats = reuse_update(r.policy, r.optimizer, roll, credit, lr, seed=spec.seed, iteration=it)
                else:
                    stats = update_step(r.policy, r.optimizer, roll, credit.tokens, lr,
                                        ref=r.ref_policy, kl_beta=r.rewarder.kl_beta if r.rewarder else 0.0)
            with r.clock.stage("weight_sync"):
                r.engine.sync_weights()
            before = c.total_tokens
            row = c.add_iteration({"rollout": roll.tokens, "continuation": credit.continuation_tokens,
                                   "discarded": r.selector.discarded_tokens}, r.clock.seconds, updates=steps_per_iteration(cfg))
            row.update(group_stats(rewards, roll, G), **stats)
            row.update(r.reward_log)  # channel/<name> means, shaped_reward, ν (multi-reward runs)
            row.update(r.selector.record(problems, rewards))  # selection history; sel_* columns
            if r.schedule.eval_due(before, c.total_tokens):
                c.done = r.schedule.finished(c.total_tokens)
                _evaluate_log_checkpoint(r, spec, row=row, progress=progress)
            else:
                _log(r, row, [], checkpoint=bool(cfg.engine.checkpoint_every) and c.iteration % cfg.engine.checkpoint_every == 0)
                progress({"tokens": c.total_tokens, "stop": r.schedule.stop_tokens, "iteration": c.iteration})
        r.writer.meta = r.writer.meta.model_copy(update={"excluded_seconds": dict(c.excluded_seconds)})
        r.writer.finish("complete")
    if not cfg.engine.keep_checkpoint:
        remove_checkpoint(spec.run_dir)
    if spec.stage == "main":
        seal_run(spec)
    return c


def seal_run(spec: RunSpec) -> None:
    """Seal the completed main run into the plan's lock chain (``prereg_kit.chain.seal``). A main-stage
    run trained outside the study's ``runs/`` (a copy, a test) is never analyzed and is not sealed."""
    if Path(spec.run_dir).resolve() != run_dir(spec.study_dir, spec.configuration, spec.seed).resolve():
        print(f"note: {spec.run_dir} is not the study's run folder for this run: not sealed", file=sys.stderr)
        return
    res = seal_runs(spec.study_dir, [spec.run_dir])
    if res.refused:
        raise PreregError(f"the run completed but was not sealed: {res.refused[0]}")


def _evaluate_log_checkpoint(r: "Run", spec: RunSpec, row: dict | None, progress) -> None:
    """Evaluate (timed apart from training), log the iteration row and the eval rows, checkpoint."""
    c = r.counters
    t0 = time.perf_counter()
    rows = evaluate(r.engine, r.policy, r.eval_sets, c, spec, sandbox=r.rewarder.sandbox if r.rewarder else None)
    synchronize(r.policy.device)
    secs = time.perf_counter() - t0
    c.excluded_seconds["evaluation"] += secs
    c.eval_index += 1
    if row is not None:
        row["seconds_evaluation"] = secs
    _log(r, row, rows, checkpoint=True)
    progress({"tokens": c.total_tokens, "stop": r.schedule.stop_tokens, "iteration": c.iteration,
              "eval_index": c.eval_index - 1, "accuracy": accuracy(rows, r.eval_sets[0].name)})


def _log(r: "Run", row: dict | None, eval_rows: list[dict], checkpoint: bool) -> None:
    c = r.counters
    t0 = time.perf_counter()
    if row is not None:
        r.writer.log_iteration(row)
    if eval_rows:
        r.writer.log_eval_rows(eval_rows)
    # live trackers get what the run log now holds (blind in the main stage: trainer.core.tracking)
    r.tracker.log(c, row, {s: accuracy(eval_rows, s) for s in dict.fromkeys(e["eval_set"] for e in eval_rows)})
    t1 = time.perf_counter()
    c.excluded_seconds["logging"] += t1 - t0
    if checkpoint:  # after the rows, so a checkpoint never describes rows that are not on disk
        save_checkpoint(r.spec.run_dir, r.policy.model, r.optimizer, c,
                        extra={"reward_state": state_to_dict(r.reward_state), "selection": r.selector.state_dict(),
                               "dense": r.dense.state_dict()})
        c.excluded_seconds["checkpoint"] += time.perf_counter() - t1


def iteration_rewards(r: "Run", it: int, problems: list, roll) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The iteration's rewards [N] and, for multi-reward runs, the aggregation rule's advantages
    (else None: eq. 1 on the rewards). Carries the rule's state (Lagrangian ν) and the log columns on ``r``."""
    cfg, G = r.spec.config, r.spec.config.rollout.group_size
    per_completion = [p for p in problems for _ in range(G)]
    res = r.rewarder(r.reward, roll.texts, roll.lengths.tolist(), per_completion, G, state=r.reward_state,
                     rng=np.random.default_rng(derive_seed(r.spec.seed, it, "dropout")),
                     l_max=cfg.rollout.completion_limit, eps=cfg.credit.advantage_eps)
    r.reward_state, r.reward_log = res.state, res.log
    return res.rewards, res.advantages


def credit_context(r: "Run", it: int, problems: list, roll, rewards: torch.Tensor,
                   advantages: torch.Tensor | None) -> CreditContext:
    """What the iteration's credit rule reads: A_g (the aggregation rule's, else eq. 1), the
    rollouts, each completion's rendered prompt and answer, and the run's policy, engine,
    verifier, seed and dense state. Prompts are rebuilt from ``problems`` (a selector may have
    added groups during generation)."""
    cfg = r.spec.config
    per = [p for p in problems for _ in range(cfg.rollout.group_size)]
    return CreditContext.of(rewards, roll.completion_mask, group_size=cfg.rollout.group_size, eps=cfg.credit.advantage_eps,
                            advantages=advantages, cfg=cfg, rollouts=roll, prompts=[r.render(p) for p in per],
                            answers=[p.answer for p in per], iteration=it, seed=r.spec.seed, policy=r.policy,
                            engine=r.engine, verifier=r.reward, state=r.dense, problems=[p.prompt for p in per],
                            study_dir=r.spec.study_dir)


def group_stats(rewards: torch.Tensor, roll, group_size: int) -> dict:
    """Reward and group statistics of the iteration's rollouts (run-log optional columns)."""
    g = rewards.view(-1, group_size)
    mixed = ((g.max(1).values > 0) & (g.min(1).values < 1)).float().mean()
    # beside the mixed share, the groups with no signal: all wrong, all correct (dense-rewards paper §C.5.4)
    wrong, right = (g.max(1).values <= 0).float().mean(), (g.min(1).values >= 1).float().mean()
    return {"reward_mean": float(rewards.mean()), "mixed_share": float(mixed),
            "all_wrong_share": float(wrong), "all_correct_share": float(right),
            "length_mean": float(roll.lengths.float().mean()), "truncation_rate": float(roll.truncated.float().mean())}


@dataclass
class Run:
    spec: RunSpec
    policy: Policy
    engine: Engine
    optimizer: torch.optim.Optimizer
    pool: ProblemPool
    eval_sets: list[EvalSet]
    reward: Callable[[str, str], bool]
    writer: RunLogWriter
    counters: Counters
    schedule: Schedule
    clock: StageClock
    render: Callable
    # --- multi-reward: the reward rule, its carried state (Lagrangian ν), last log columns,
    # the frozen base policy of the KL penalty (additive_kl only)
    rewarder: Rewarder | None = None
    reward_state: Any = None
    reward_log: dict = field(default_factory=dict)
    ref_policy: Policy | None = None
    selector: Selector | None = None  # prompt selection: candidates, filters, dynamic sampling
    dense: DenseState = field(default_factory=DenseState)  # dense rewards: the critic's buffer, π_ref
    tracker: Tracking = field(default_factory=Tracking)  # `prereg run --tracker`: W&B, MLflow, TensorBoard


def setup(spec: RunSpec, lock: RunLock | None = None) -> Run:
    """Load the policy, data and evaluation sets; open the run log (new, or resumed from the last
    checkpoint, dropping rows logged after it). ``lock``: the run's one-writer lock, held by the caller."""
    cfg = spec.config
    old = _existing_meta(spec.run_dir)  # read under the run's lock: it cannot change before the writer opens
    if old is not None and old.status == "complete":
        raise RunAlreadyComplete(f"{spec.run_dir}: already complete (ended {old.ended_at}); a complete run is never "
                                 "reopened (move the folder aside to train it again)")
    n_eval = synthetic_eval_size(spec.eval_sets)
    assets = prepare_assets(cfg, spec.cache_dir, spec.study_dir, n_eval)
    policy = load_policy(cfg, assets.model_path)
    set_determinism(cfg, policy.device)
    optimizer = make_optimizer(policy)
    if cfg.task.name in ("math", "gsm8k"):  # the MATH / GSM8K training split, levels kept
        pool = task_pool(cfg.task.name, assets.train_file, cfg.task.levels)
    else:
        pool = load_problems(assets.train_file, source="train")
    pool = pool.with_tests() if cfg.task.name == "code" else pool.numeric_only()  # what the reward can score
    eval_sets = load_eval_sets(spec, assets.synthetic_eval)
    pool = pool.without_near_duplicates(*[es.problems for es in eval_sets])
    cache: dict[str, str] = {}

    def render(p) -> str:  # the chat template, rendered once per problem
        if p.id not in cache:
            cache[p.id] = policy.render(p.prompt)
        return cache[p.id]

    meta = RunMeta(study=spec.study, configuration=spec.configuration, seed=spec.seed, stage=spec.stage,
                   plan_hash=spec.plan_hash, config=cfg.model_dump(mode="json"), started_at=utc_now(),
                   election_sha256=election_sha256(spec.study_dir) if cfg.rewards.anchor == "elected" else "",  # audited
                   device=_device_name(policy.device), tool_version=spec.tool_version,
                   engine=cfg.engine.name, threads=torch.get_num_threads(), torch_version=torch.__version__,
                   model_path=str(assets.model_path), model_sha256=assets.model_sha256, train_pool=len(pool),
                   cpu=cpu_kind(), packages=optional_packages(),
                   code_sha256=code_sha256([Path(prereg_kit.__file__).parent, Path(trainer.__file__).parent]),
                   **judge_meta(spec))  # code runs: judge_isolation; refuses a weak judge
    folder = spec.run_dir
    extra: dict = {}
    if old is not None:
        counters = load_checkpoint(folder, policy.model, optimizer, extra=extra) or Counters()
        writer = RunLogWriter(folder, meta, resume=True, at_iteration=counters.iteration, at_eval=counters.eval_index,
                              lock=lock)
    else:
        counters = Counters()
        writer = RunLogWriter(folder, meta, lock=lock)
    rewarder = make_rewarder(cfg, spec.study_dir)  # anchor = "elected": reads election.json now
    ref = None
    if rewarder.kl_beta > 0:  # additive_kl: KL to the base (initial) policy, frozen
        ref = load_policy(cfg, assets.model_path)
        ref.model.eval().requires_grad_(False)
    engine = make_engine(policy)
    selector = Selector(cfg, spec.seed, pool, policy, engine, render, get_verifier(cfg.rewards.verifier))
    selector.load_state_dict(extra.get("selection"))
    dense = DenseState()
    dense.load_state_dict(extra.get("dense"))  # the learned critic's buffer of earlier iterations
    return Run(spec, policy, engine, optimizer, pool, eval_sets, get_verifier(cfg.rewards.verifier),
               writer, counters, Schedule(spec.eval_interval, spec.stop_tokens, spec.iteration_stop, counters,
                                                   by_iterations=spec.budget_iterations is not None),
               StageClock(sync=lambda: synchronize(policy.device)), render,
               rewarder=rewarder, reward_state=state_from_dict(extra.get("reward_state")), ref_policy=ref,
               selector=selector, dense=dense, tracker=Tracking.open(spec, counters))


def _existing_meta(folder: str) -> RunMeta | None:
    """The run's metadata, or None for a new run (no readable ``meta.json``)."""
    try:
        return read_meta(folder)
    except RunLogError:
        return None


def _device_name(device: torch.device) -> str:
    return f"cuda:{torch.cuda.get_device_name(device)}" if device.type == "cuda" else "cpu"


def cpu_kind() -> str:
    """The CPU's model name and the kernels torch picks on it (e.g. ``AMD EPYC / AVX2``): CPU runs
    are bit-for-bit reproducible only where both match (docs/trainer.md, the warm start)."""
    name = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            name = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), name)
    except OSError:
        import platform

        name = platform.processor() or name
    return f"{name} / {torch.backends.cpu.get_cpu_capability()}"


# the optional packages a run can use (module → distribution): their versions go into meta.json
OPTIONAL_PACKAGES = {"transformers": "transformers", "vllm": "vllm", "math_verify": "math-verify",
                     "datasets": "datasets", "numba": "numba", "trl": "trl"}


def optional_packages() -> dict[str, str]:
    """Versions of the optional packages installed where the run trains (module name → version);
    found without importing them, and absent ones left out, so a run records what it could use."""
    from importlib.metadata import PackageNotFoundError, version
    from importlib.util import find_spec

    found: dict[str, str] = {}
    for module, dist in OPTIONAL_PACKAGES.items():
        try:
            if find_spec(module) is not None:
                found[module] = version(dist)
        except (PackageNotFoundError, ImportError, ValueError):  # a module without metadata, a broken install
            continue
    return found
