"""``python -m trainer.smoke``: one iteration of every runnable registry configuration on the
built-in tiny CPU model, so that every plan in the registry is known to start (``make
registry-smoke``; docs/trainer.md, "Smoke-testing a plan on the tiny model").

A configuration's settings are read from its plan exactly as for a real run (``config_of``); then
the parts that need hardware or data this machine lacks are replaced by the built-in ones
(:data:`SUBSTITUTE` and :func:`substituted`):

* the model becomes a smaller tiny model without warm start (its answers do not matter here);
* a MATH, GSM8K or file task becomes the synthetic task; a code task keeps the built-in code task;
* the completion limit is capped (the Monte-Carlo cut offsets and continuation cap scale with it),
  and a code task trains on 4 prompts per iteration (each completion's program runs in the sandbox);
* a process-reward model becomes a tiny one built from a config;
* an elected anchor (``rewards.anchor = "elected"``, read from a study's ``election.json``) becomes
  the first channel, since no election has run;
* evaluation is four synthetic problems, one sample each.

Everything else the configuration chose — credit rule, prompt selection, reward channels and
aggregation, the update — is kept, so a smoke run goes through the code paths the real run would.
Runs go to ``build/registry-smoke/<study>/<configuration>`` as stage ``smoke`` (never analyzed).
Configurations run side by side, one per CPU (``--jobs``), each in a worker process with its own
cache folder; the lines come out in registry order.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from prereg_kit.plan import PlanFile, load_plan
from prereg_kit.registry import default_root, study_dirs
from trainer.config import ConfigError, EvalSetSpec, RunSpec, TrainerConfig, config_of, updated

SMOKE_LIMIT = 24  # completion tokens: room for every cut rule, small enough for a CPU
SMOKE_CODE_PROMPTS = 4  # prompts per iteration of a code task (each completion's program is run)
SMOKE_EVAL = EvalSetSpec(name="smoke", source="synthetic:eval", n_problems=4)

# What every smoke run replaces, whatever the configuration says (sectioned settings).
SUBSTITUTE: dict[str, Any] = {
    "model": {"name": "tiny", "sha256": "", "warm_start": {"steps": 0},
              "tiny": {"hidden_size": 32, "layers": 1, "heads": 2, "intermediate_size": 64}},
    "engine": {"name": "hf", "device": "cpu", "precision": "float32", "threads": 1, "checkpoint_every": 0,
               "keep_checkpoint": False},
    "evaluation": {"batch_size": 64},
}


def substituted(cfg: TrainerConfig, limit: int = SMOKE_LIMIT, prm_path: str = "tiny-prm") -> TrainerConfig:
    """``cfg`` with the tiny model, a built-in task, a capped completion limit and the other
    substitutions of the module docstring (``prm_path``: the tiny process-reward model's folder);
    every rule the configuration chose is kept."""
    changes: dict[str, Any] = {k: dict(v) for k, v in SUBSTITUTE.items()}
    if cfg.task.name != "code":
        changes["task"] = {"name": "synthetic", "train_file": "", "levels": [1, 2], "train_problems": 256}
    else:
        changes["task"] = {"train_file": "", "levels": [1], "train_problems": 64}
    old = cfg.rollout.completion_limit
    new = min(old, limit)
    changes["rollout"] = {"completion_limit": new}
    if cfg.task.name == "code" and cfg.rollout.prompts_per_iteration > SMOKE_CODE_PROMPTS:
        # every completion's program runs in the judge's sandbox (a process each): a code plan's
        # 32 prompts × 8 took 13 s per configuration, most of the smoke run; the group is kept
        changes["rollout"]["prompts_per_iteration"] = SMOKE_CODE_PROMPTS
    credit: dict[str, Any] = {}
    if cfg.credit.mc_cuts:  # the same relative cut positions in the shorter completion
        credit["mc_cuts"] = sorted({min(max(1, round(c * new / old)), new - 1) for c in cfg.credit.mc_cuts})
    if cfg.credit.mc_continuation_limit:
        credit["mc_continuation_limit"] = max(1, min(cfg.credit.mc_continuation_limit, new))
    if getattr(cfg.credit, "prm_model", ""):
        credit["prm_model"] = prm_path
    if credit:
        changes["credit"] = credit
    if cfg.rewards.anchor == "elected":
        first = cfg.rewards.channels[0] if cfg.rewards.channels else ""
        changes["rewards"] = {"anchor": first if isinstance(first, str) else first.get("name", "")}
    return updated(cfg, changes)


def tiny_prm(folder: str | Path, step_token: str) -> Path:
    """A tiny process-reward model in the layout of Qwen2.5-Math-PRM (a token classifier with two
    labels read at each step token), built from a config with the synthetic task's tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForTokenClassification

    from trainer.data.synthetic import build_tokenizer

    tok = build_tokenizer()
    tok.add_tokens([step_token], special_tokens=True)
    conf = Qwen2Config(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                       num_key_value_heads=2, intermediate_size=32, max_position_embeddings=512, num_labels=2,
                       pad_token_id=tok.pad_token_id)
    with torch.random.fork_rng(devices=[]):  # the same tiny PRM every time, the caller's generator untouched
        torch.manual_seed(0)
        model = Qwen2ForTokenClassification(conf)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return Path(folder)


@dataclass
class SmokeCase:
    study: str
    study_dir: Path
    plan: PlanFile
    configuration: str


def cases(root: str | Path, only: list[str] | None = None) -> Iterator[SmokeCase]:
    """Every configuration of every registry plan, in study order (``only``: study ids)."""
    for d in study_dirs(root):
        if only and d.name not in only:
            continue
        pf = load_plan(d / "plan.toml")
        for name in pf.plan.configurations:
            yield SmokeCase(d.name, d, pf, name)


def not_runnable(case: SmokeCase) -> str:
    """Why the configuration is not run: marked ``runnable = false`` in its plan (the reason), or
    refused by the trainer's settings; "" when it can run."""
    c = case.plan.plan.configurations[case.configuration]
    if getattr(c, "runnable", True) is False:
        return f"marked not runnable: {getattr(c, 'not_runnable', '')}"
    try:
        config_of(case.plan.plan, case.configuration, where="recipe")
    except ConfigError as e:
        return e.lines[0]
    return ""


def smoke_spec(case: SmokeCase, out: Path, limit: int = SMOKE_LIMIT, cache: Path | None = None) -> RunSpec:
    """The run spec of one smoke run: one iteration, evaluations at the start and the end only.
    ``cache``: the run's cache folder (default ``out/.cache``; each parallel worker has its own, since
    the cache's builders are not shared between processes); the tiny PRM is always ``out/.cache/tiny-prm``."""
    cfg = substituted(config_of(case.plan.plan, case.configuration, where="recipe"), limit,
                      prm_path=str((out / ".cache" / "tiny-prm").resolve()))
    run_dir = out / case.study / case.configuration
    return RunSpec(study=case.plan.plan.study.id, configuration=case.configuration, seed=0, stage="smoke",
                   plan_hash=case.plan.content_sha256, study_dir=str(case.study_dir), run_dir=str(run_dir),
                   cache_dir=str(cache or out / ".cache"), budget_tokens=10**12, eval_interval=10**12,
                   stop_iterations=1, eval_sets=[SMOKE_EVAL], eval_samples=1, config=cfg)


def ensure_prm(spec: RunSpec) -> None:
    """Build the tiny PRM a spec names, once (before parallel workers start, so none builds it twice)."""
    if spec.config.credit.prm_model and not Path(spec.config.credit.prm_model, "config.json").exists():
        tiny_prm(spec.config.credit.prm_model, spec.config.credit.prm_step_token)


def run_case(case: SmokeCase, out: Path, limit: int = SMOKE_LIMIT, cache: Path | None = None) -> tuple[bool, str]:
    """Train one smoke run from scratch; (ok, one line saying what happened)."""
    import shutil

    from trainer.loop import train  # torch only when a run starts

    spec = smoke_spec(case, out, limit, cache)
    shutil.rmtree(spec.run_dir, ignore_errors=True)
    ensure_prm(spec)
    t0 = time.perf_counter()
    try:
        c = train(spec)
    except Exception as e:  # noqa: BLE001 - a smoke run reports every failure and goes on to the next configuration
        last = traceback.extract_tb(e.__traceback__)[-1]
        return False, f"{type(e).__name__}: {' '.join(str(e).split())[:200]} ({Path(last.filename).name}:{last.lineno})"
    return True, f"{c.iteration} iteration, {c.total_tokens} tokens, {time.perf_counter() - t0:.1f} s"


_WORKER: dict[str, Any] = {}  # in a parallel worker: its own cache folder


def _start_worker(slots: Any, out: Path, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    _WORKER["cache"] = out / ".cache" / f"worker-{slots.get()}"


def _run_in_worker(job: tuple[SmokeCase, Path, int]) -> tuple[bool, str]:
    case, out, limit = job
    return run_case(case, out, limit, _WORKER["cache"])


def default_jobs() -> int:
    """Smoke runs at once: one per CPU this process may use (each run uses one thread), at most 8
    (each worker holds its own torch)."""
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cpus, 8))


def _results(runnable: list[SmokeCase], out: Path, limit: int, jobs: int, threads: int) -> Iterator[tuple[bool, str]]:
    """Each runnable case's (ok, line), in order: in this process, or in ``jobs`` worker processes
    (spawned: a forked torch may hang) that take the next case as they finish one."""
    if jobs <= 1 or len(runnable) <= 1:
        yield from (run_case(c, out, limit) for c in runnable)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    for case in runnable:
        ensure_prm(smoke_spec(case, out, limit))
    ctx = multiprocessing.get_context("spawn")
    slots = ctx.Queue()
    for k in range(jobs):
        slots.put(k)
    with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_start_worker, initargs=(slots, out, threads)) as ex:
        yield from ex.map(_run_in_worker, [(c, out, limit) for c in runnable])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainer.smoke", description=__doc__.split("\n\n")[0])
    ap.add_argument("studies", nargs="*", help="study ids (default: every study in the registry)")
    ap.add_argument("--registry", default=str(default_root()), help="registry folder (default: %(default)s)")
    ap.add_argument("--out", default="build/registry-smoke", help="where the smoke runs go (default: %(default)s)")
    ap.add_argument("--limit", type=int, default=SMOKE_LIMIT, help="completion-token cap (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads of each run (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=default_jobs(),
                    help="runs at once, each in a worker process (default: one per CPU, at most 8: %(default)s)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    todo = list(cases(args.registry, args.studies or None))
    why = [not_runnable(case) for case in todo]
    results = _results([c for c, w in zip(todo, why) if not w], out, args.limit, args.jobs, args.threads)
    ran = failed = skipped = 0
    t0 = time.perf_counter()
    for i, (case, w) in enumerate(zip(todo, why), 1):
        head = f"[{i}/{len(todo)}] {case.study}/{case.configuration}"
        if w:
            skipped += 1
            print(f"{head}: skipped ({w})", flush=True)
            continue
        ok, line = next(results)
        ran += 1
        failed += not ok
        print(f"{head}: {'ok' if ok else 'FAILED'} — {line}", flush=True)
    print(f"{ran - failed} of {ran} runnable configurations ran one iteration; {failed} failed; "
          f"{skipped} not runnable ({time.perf_counter() - t0:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
