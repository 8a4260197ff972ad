"""CPU benchmark of one GRPO iteration on the CPU study's tiny model.

Runs the real loop (``trainer.loop.train``) on the recipe of ``registry/cpu-grpo/plan.toml``
(learning rate 1e-4, 8 prompts × 8 completions, 40-token limit) for ``--tokens`` generated tokens with
evaluations only at the start and the end, then splits the mean iteration time into

* generation (HF ``generate`` with the common-random-number sampler),
* forward/backward (the loss's forward and backward passes, all micro-batches),
* everything else: prompt selection, verification and credit, gradient clipping and the Adam
  step, weight sync, accounting, and (second figure) writing the iteration row with fsync.

Usage: ``python3 benchmarks/bench_trainer_cpu.py [--tokens 20000] [--threads 2]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's code, whatever is installed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "prereg-kit" / "bench-cpu-grpo"),
                    help="where the warm start is cached (built if absent)")
    args = ap.parse_args()

    import torch

    from prereg_kit.plan import load_plan
    from prereg_kit.runlog import read_run
    from trainer.config import EvalSetSpec, RunSpec, config_of, updated
    from trainer.loop import train

    plan = load_plan(ROOT / "registry" / "cpu-grpo" / "plan.toml").plan
    cfg = updated(config_of(plan, "grpo"), {"engine": {"threads": args.threads}})
    tmp = Path(tempfile.mkdtemp(prefix="bench-trainer-"))
    spec = RunSpec(study="bench", configuration="grpo", seed=0, plan_hash="bench", study_dir=str(tmp),
                   run_dir=str(tmp / "run"), cache_dir=args.cache, budget_tokens=args.tokens,
                   eval_interval=args.tokens, eval_sets=[EvalSetSpec(name="heldout", source="synthetic:eval", n_problems=64)],
                   config=cfg)
    stamps: list[float] = []
    t0 = time.perf_counter()
    train(spec, progress=lambda info: stamps.append(time.perf_counter()))
    total = time.perf_counter() - t0
    it = read_run(spec.run_dir).iterations
    shutil.rmtree(tmp, ignore_errors=True)

    it = it.iloc[1:-1]  # drop the first (warm-up) and the last (followed by the final evaluation)
    n = len(it)
    wall = sum(b - a for a, b in zip(stamps[1:-2], stamps[2:-1])) / max(1, len(stamps) - 3)  # between iteration ends
    train_s = it["seconds_total"].mean()
    gen = it["seconds_generation"].mean()
    fb = it["fwd_bwd_seconds"].mean()
    rest_train = train_s - gen - fb
    rest_all = wall - gen - fb
    print(f"tiny model, {cfg.rollout.prompts_per_iteration}x{cfg.rollout.group_size} completions, limit {cfg.rollout.completion_limit}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"{n} iterations measured, mean {it['tokens_total'].mean():.0f} generated tokens each; whole run {total:.1f} s")
    print(f"per iteration (training stages)       : {train_s * 1e3:7.1f} ms")
    print(f"  generation                           : {gen * 1e3:7.1f} ms  {gen / train_s:6.1%}")
    print(f"  forward/backward                     : {fb * 1e3:7.1f} ms  {fb / train_s:6.1%}")
    print(f"  everything else                      : {rest_train * 1e3:7.1f} ms  {rest_train / train_s:6.1%}")
    for stage in ("selection", "credit", "update", "weight_sync"):
        extra = " (incl. forward/backward)" if stage == "update" else ""
        print(f"    seconds_{stage:<12}{extra:<25}: {it['seconds_' + stage].mean() * 1e3:7.1f} ms")
    print(f"per iteration incl. logging (wall)    : {wall * 1e3:7.1f} ms; everything else {rest_all / wall:6.1%}")


if __name__ == "__main__":
    main()
