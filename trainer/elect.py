"""Anchor election (multi-reward paper §5.1, §6.4, App. B): ``prereg elect STUDY_DIR``.

For each channel of the configuration that names ``anchor = "elected"``, a **probe** run trains
on that channel alone (rule ``primary``) from the base policy, for a small token budget, as a
calibration-stage run (``stages/calibration/probe-<channel>/seed-<n>/``: the lock audit admits it
before the lock). Then, on held-out prompts (the plan's primary evaluation set) at temperature 1:

* **reverse KL** of the probe from the base: sample from the probe, sum the per-token log-ratios
  log π_probe − log π_base over all generated tokens, divide by the number of tokens;
* **forward KL**: sample from the base, sum log π_base − log π_probe, divide by the tokens.

The channel whose probe moved least (smallest reverse KL, averaged over the probe seeds) is
elected. ``<study>/election.json`` records the probes, their KLs and token counts, the choice
and the time; a run with ``anchor = "elected"`` reads it when it starts.

Probe length: ``--steps T`` stops each probe after T iterations, as the paper's probes (T = 300
GRPO steps, §6.4); ``--tokens`` (default B/2) stops it at a token budget instead. Exactly one of
the two applies; ``election.json`` records which (``probe_stop``), T or the budget, and the
iterations and tokens each probe took. Difference from the paper: the probes use the plan's recipe
(prompts per iteration and G) rather than the paper's rollout batch 32 × n = 8.

The record also holds the plan's hashes and lock state at election time; runs with
``anchor = "elected"`` record the sha256 of the file they read, and ``prereg verify`` flags a main
run whose election file changed afterwards (``prereg_kit.study.audit``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from prereg_kit import __version__
from prereg_kit.errors import PreregError
from prereg_kit.plan import load_plan, parse_tokens
from prereg_kit.runlog import ELECTION_FILE, read_meta, read_run, run_dir, utc_now
from prereg_kit.study.jobs import lock_state
from trainer.config import EvalSetSpec, RunSpec, TrainerConfig, config_of, derive_seed, recipe_of, updated
from trainer.core.assets import prepare_assets, synthetic_eval_size
from trainer.core.evaluate import load_eval_sets
from trainer.launch import SPEC_FILE, Job, _state, prepare, run_jobs
from trainer.rewards.spec import channel_spec

__all__ = ["elect", "election_configuration", "lock_state", "probe_jobs", "sequence_kl"]

# With --steps the token budget does not stop a probe: the spec's budget is set out of reach. (A
# linear lr schedule, which decays over the budget, is therefore constant in a steps-mode probe.)
UNBOUNDED_TOKENS = 10**15


def election_configuration(plan, configuration: str | None = None) -> tuple[str, TrainerConfig]:
    """The configuration whose channels are the candidates: the named one, else the first with
    ``anchor = "elected"``."""
    names = list(plan.configurations)
    if configuration is not None:
        if configuration not in names:
            raise PreregError(f"--configuration: {configuration!r} is not a configuration (have: {', '.join(names)})")
        cands = [configuration]
    else:
        cands = [n for n in names if recipe_of(plan, n).get("rewards", {}).get("anchor") == "elected"]
        if not cands:
            raise PreregError("no configuration names anchor = \"elected\"; pass --configuration to elect among its channels")
    name = cands[0]
    cfg = config_of(plan, name)
    if len(cfg.rewards.channels) < 2:
        raise PreregError(f"configuration {name!r}: an election needs at least two channels (has {len(cfg.rewards.channels)})")
    return name, cfg


def probe_jobs(study_dir: str | Path, *, configuration: str | None = None, seeds: Sequence[int] | None = None,
               tokens: int | str | None = None, steps: int | None = None):
    """(plan file, election configuration, probe jobs): one per channel × seed.

    ``steps``: each probe stops after that many iterations (the paper's T); else ``tokens``
    (``15K``, ``B/2``; default B/2) of generated tokens. Giving both is an error. A complete probe
    is reused only if it was trained with the same stopping rule and recipe."""

    if steps is not None and tokens is not None:
        raise PreregError("give --steps or --tokens, not both: a probe stops after T iterations or at a token budget")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise PreregError(f"--steps: expected a positive number of iterations, got {steps!r}")
    pf = load_plan(study_dir)
    plan = pf.plan
    study = pf.path.parent
    name, cfg = election_configuration(plan, configuration)
    B, N = plan.budget_of(name).tokens, plan.budget_of(name).iterations
    if N is not None and steps is None and (tokens is None or str(tokens).strip().upper().startswith("B")):
        if tokens is not None:
            raise PreregError(f"--tokens {tokens}: B is {N} iterations in this plan; give --steps or a token count")
        steps = max(1, N // 2)  # as B/2 for a token budget: half the run length
    if steps is not None:
        budget = UNBOUNDED_TOKENS
    elif tokens is None:
        budget = max(1, B // 2)
    elif isinstance(tokens, str) and tokens.strip().upper().startswith("B"):
        t = tokens.strip().upper()
        budget = max(1, int(round(B / float(t[2:])))) if t.startswith("B/") else B
    else:
        budget = parse_tokens(tokens)
    seeds = list(seeds) if seeds else plan.seeds_for("main")[:1]
    ev = plan.evaluation
    sets = [EvalSetSpec(name=s.name, source=s.source, n_problems=s.n_problems, levels=s.levels) for s in ev.sets]
    jobs = []
    for item in cfg.rewards.channels:
        ch, _ = channel_spec(item)
        pcfg = updated(cfg, {"rewards": {"channels": [item], "aggregation": {"rule": "primary"}, "anchor": ""},
                             "engine": {"keep_checkpoint": True}})
        for seed in seeds:
            folder = run_dir(study, f"probe-{ch}", seed, "calibration")
            spec = RunSpec(study=plan.study.id, configuration=f"probe-{ch}", seed=seed, stage="calibration",
                           plan_hash=pf.content_sha256, study_dir=str(study), run_dir=str(folder),
                           cache_dir=str(study / ".cache"), budget_tokens=budget, eval_interval=budget, train_to=1.0,
                           stop_iterations=steps, eval_sets=sets, eval_samples=ev.samples,
                           eval_temperature=ev.temperature, eval_top_p=ev.top_p, eval_greedy=False, config=pcfg,
                           tool_version=__version__)
            state = _state(folder, pf.content_sha256)
            if state == "complete":
                _check_reusable(folder, spec, study)
            jobs.append(Job(f"probe-{ch}", seed, folder, spec, state))
    return pf, name, cfg, jobs


def _stop_rule(spec: RunSpec) -> str:
    if spec.stop_iterations is not None:
        return f"--steps {spec.stop_iterations}"
    return f"--tokens {spec.budget_tokens}"


def _check_reusable(folder: Path, spec: RunSpec, study: Path) -> None:
    """A complete probe is reused only when trained with the same stopping rule and recipe."""

    try:
        old = RunSpec.load(folder / SPEC_FILE)
    except PreregError:
        return  # no spec written (an older probe): reuse as before
    where = folder.relative_to(study) if folder.is_relative_to(study) else folder
    if (old.stop_iterations, old.budget_tokens if old.stop_iterations is None else None) != \
            (spec.stop_iterations, spec.budget_tokens if spec.stop_iterations is None else None):
        raise PreregError(f"{where}: this probe was trained with {_stop_rule(old)}, the election asks for "
                          f"{_stop_rule(spec)}: rerun with the same option, or move the probe folder aside to train it anew")
    if old.config != spec.config:
        raise PreregError(f"{where}: this probe was trained with another recipe; move the probe folder aside to train it anew")


def sequence_kl(p_policy, q_policy, prompts: Sequence[str], *, noise_seed: int, limit: int,
                batch_size: int = 256) -> tuple[float, int]:
    """Per-token KL(p ‖ q) on samples from p at temperature 1: Σ (log p − log q) over every
    generated token of every sample, divided by the number of those tokens. Returns (KL, tokens)."""
    import torch

    from trainer.core.engines import HFEngine
    from trainer.core.policy import token_logprobs

    total, n_tok = 0.0, 0
    eng = HFEngine(p_policy)
    for s in range(0, len(prompts), batch_size):
        chunk = list(prompts[s:s + batch_size])
        roll = eng.generate(chunk, noise_seed=noise_seed, keys=range(s, s + len(chunk)), limit=limit,
                            temperature=1.0, top_p=1.0)
        with torch.no_grad():
            lp = token_logprobs(p_policy, roll.sequences, roll.attention_mask, roll.prompt_len)
            lq = token_logprobs(q_policy, roll.sequences.to(q_policy.device), roll.attention_mask.to(q_policy.device),
                                roll.prompt_len).to(lp.device)
        m = roll.completion_mask.to(lp.device)
        total += float(((lp - lq) * m).sum())
        n_tok += int(m.sum())
    return (total / n_tok if n_tok else float("nan")), n_tok


def _load_probe(cfg: TrainerConfig, base_path: Path, folder: Path):
    import torch

    from trainer.core.checkpoint import checkpoint_path
    from trainer.core.policy import load_policy

    ck = checkpoint_path(folder)
    if not ck.is_file():
        raise PreregError(f"{folder}: the probe's final checkpoint is missing (delete the probe folder and rerun `prereg elect`)")
    pol = load_policy(cfg, base_path)
    pol.model.load_state_dict(torch.load(ck, map_location="cpu", weights_only=False)["model"])
    pol.model.eval()
    return pol


def elect(study_dir: str | Path, *, configuration: str | None = None, seeds: Sequence[int] | None = None,
          tokens: int | str | None = None, steps: int | None = None, prompts: int = 64, samples: int = 4,
          n_jobs: int | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or reuse) the probes, measure their KLs from the base, elect, write election.json.

    ``steps`` (the paper's T) or ``tokens`` (default B/2) stops each probe; see :func:`probe_jobs`."""
    import numpy as np
    import torch

    from trainer.core.policy import load_policy

    t0 = time.perf_counter()
    pf, name, cfg, jobs = probe_jobs(study_dir, configuration=configuration, seeds=seeds, tokens=tokens, steps=steps)
    study = pf.path.parent
    todo = [j for j in jobs if j.state != "complete"]
    length = f"{steps} steps" if steps is not None else f"{jobs[0].spec.budget_tokens} tokens"
    log(f"{pf.path}: anchor election among the channels of {name!r} "
        f"({', '.join(channel_spec(c)[0] for c in cfg.rewards.channels)}); {len(jobs)} probe(s), {len(todo)} to run, "
        f"{length} each")
    if todo:
        prepare(jobs, log=log)
        run_jobs(jobs, n_jobs)
        failed = [j for j in todo if not j.result.startswith("complete")]
        if failed:
            raise PreregError(*[f"probe {j.configuration} seed {j.seed}: {j.result} (log: {j.folder / 'train.log'})" for j in failed])
    if cfg.engine.threads:
        torch.set_num_threads(cfg.engine.threads)
    spec0 = jobs[0].spec
    n_eval = synthetic_eval_size(spec0.eval_sets)
    assets = prepare_assets(spec0.config, spec0.cache_dir, spec0.study_dir, n_eval)
    base = load_policy(cfg, assets.model_path)
    base.model.eval()
    primary = pf.plan.evaluation.primary
    es = [e for e in load_eval_sets(spec0, assets.synthetic_eval) if e.name == primary][0]
    probs = list(es.problems)[:prompts]
    rendered = [base.render(p.prompt) for p in probs for _ in range(samples)]
    probes = []
    for j in jobs:
        ch = j.configuration.removeprefix("probe-")
        pol = _load_probe(cfg, assets.model_path, j.folder)
        with torch.no_grad():
            kl_rev, tok_rev = sequence_kl(pol, base, rendered, noise_seed=derive_seed(j.seed, 0, "elect:probe"),
                                          limit=cfg.rollout.completion_limit, batch_size=cfg.evaluation.batch_size)
            kl_fwd, tok_fwd = sequence_kl(base, pol, rendered, noise_seed=derive_seed(j.seed, 0, "elect:base"),
                                          limit=cfg.rollout.completion_limit, batch_size=cfg.evaluation.batch_size)
        run = read_run(j.folder)
        it = run.iterations
        ch_col = f"channel/{ch}"
        probes.append({"channel": ch, "seed": j.seed, "run_dir": str(Path(j.folder).relative_to(study)),
                       "iterations": int(len(it)), "tokens": int(it["tokens_total"].sum()) if len(it) else 0,
                       "reward_first": float(it[ch_col].iloc[0]) if ch_col in it and len(it) else None,
                       "reward_last": float(it[ch_col].iloc[-1]) if ch_col in it and len(it) else None,
                       "kl_rev": kl_rev, "kl_fwd": kl_fwd, "tokens_rev": tok_rev, "tokens_fwd": tok_fwd,
                       "status": read_meta(j.folder).status})
        log(f"  probe {ch} seed {j.seed}: {len(it)} iterations, KL_rev {kl_rev:.4f} ({tok_rev} tokens), "
            f"KL_fwd {kl_fwd:.4f} ({tok_fwd} tokens)")
        del pol
    names = [channel_spec(c)[0] for c in cfg.rewards.channels]
    kl_rev = {c: float(np.mean([p["kl_rev"] for p in probes if p["channel"] == c])) for c in names}
    kl_fwd = {c: float(np.mean([p["kl_fwd"] for p in probes if p["channel"] == c])) for c in names}
    elected = min(names, key=lambda c: kl_rev[c])  # ties: the first channel listed
    record = {
        "format": "prereg-kit-election/1", "study": pf.plan.study.id, "configuration": name,
        "channels": names, "rule": "smallest per-token reverse KL of the probe from the base",
        "elected": elected, "kl_rev": kl_rev, "kl_fwd": kl_fwd, "probes": probes,
        "probe_stop": "steps" if steps is not None else "tokens",
        "probe_steps": steps, "probe_tokens": None if steps is not None else spec0.budget_tokens,
        "probe_batch": {"prompts_per_iteration": cfg.rollout.prompts_per_iteration, "group_size": cfg.rollout.group_size},
        "seeds": sorted({j.seed for j in jobs}),
        "heldout": {"eval_set": primary, "prompts": len(probs), "samples": samples, "temperature": 1.0},
        "plan_hash": pf.content_sha256, "plan_raw_sha256": pf.raw_sha256, "lock": lock_state(pf.path),
        "time": utc_now().isoformat().replace("+00:00", "Z"),
        "seconds": round(time.perf_counter() - t0, 1), "tool_version": __version__,
    }
    out = study / ELECTION_FILE
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(out)
    log(f"elected {elected!r} (KL_rev " + ", ".join(f"{c} {kl_rev[c]:.4f}" for c in names) + f"); wrote {out}")
    return record
