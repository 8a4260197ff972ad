"""CPU benchmark of one GRPO iteration on the CPU study's tiny model.

Runs the real loop (``trainer.loop.train``) on the recipe of ``registry/cpu-grpo/plan.toml``
(learning rate 1e-4, 8 prompts × 8 completions, 40-token limit) for ``--tokens`` generated tokens with
evaluations only at the start and the end, then splits the mean iteration time into

* generation (HF ``generate`` with the common-random-number sampler),
* forward/backward (the loss's forward and backward passes, all micro-batches),
* everything else: prompt selection, verification and credit, gradient clipping and the Adam
  step, weight sync, accounting, and (second figure) writing the iteration row with fsync.

Reference: a bare transformers loop on the same warm-started model, threads and sizes
(:func:`bare_loop`: ``generate`` of 8 prompts × 8 samples up to 40 tokens, a policy-gradient
loss on the completions' log-probabilities with random ±1 advantages, backward, Adam step): no
verification, credit, accounting or logging. The ratio line compares time per generated token,
as completion lengths differ between the two. The bare loop runs half its iterations just before
the trainer and half just after (pooled), so that a change of load during the run hits both sides.

``--quick`` (make bench): 6K tokens, 6 bare iterations, one torch thread. With two threads on two
cores that other processes also use, every OpenMP barrier waits for a thread that is not running:
at a load average of about 2 an iteration took 4.3 s instead of 0.33 s with one thread (both sides
alike, but the run then takes minutes). One thread keeps the quick mode's time proportional to
its CPU share.

Usage: ``python3 benchmarks/bench_trainer_cpu.py [--tokens 20000] [--threads 2] [--quick]``.
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


def bare_loop(model_path, cfg, prompts: list[str], iterations: int) -> tuple[float, float]:
    """Mean seconds per iteration and generated tokens per iteration of a plain transformers GRPO-shaped loop."""
    import torch

    from trainer.core.policy import load_policy

    pol = load_policy(cfg, model_path)  # the same model and tokenizer as the trainer's (loading only)
    model, tok = pol.model, pol.tokenizer
    r = cfg.rollout
    opt = torch.optim.Adam(model.parameters(), lr=cfg.update.learning_rate, foreach=False)
    gen = torch.Generator().manual_seed(0)
    times, tokens = [], []
    for it in range(iterations + 1):
        batch = [prompts[(it * r.prompts_per_iteration + i) % len(prompts)] for i in range(r.prompts_per_iteration)]
        t0 = time.perf_counter()
        enc = tok(batch, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, max_new_tokens=r.completion_limit, temperature=1.0, top_p=1.0,
                                 num_return_sequences=r.group_size, pad_token_id=tok.pad_token_id)
        plen = enc["input_ids"].shape[1]
        comp = out[:, plen:]
        done = (comp == tok.eos_token_id).cumsum(1)
        cmask = ((done == 0) | ((done == 1) & (comp == tok.eos_token_id))).float()  # up to and including EOS
        attn = torch.cat([enc["attention_mask"].repeat_interleave(r.group_size, 0), cmask.long()], 1)
        logits = model(input_ids=out, attention_mask=attn).logits[:, plen - 1:-1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, comp.unsqueeze(-1)).squeeze(-1)
        adv = torch.randint(0, 2, (comp.shape[0], 1), generator=gen).float() * 2 - 1
        loss = -(adv * logp * cmask).sum() / cmask.sum().clamp(min=1)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if it:  # the first is warm-up
            times.append(time.perf_counter() - t0)
            tokens.append(float(cmask.sum()))
    return sum(times) / len(times), sum(tokens) / len(tokens)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", default=str(Path.home() / ".cache" / "prereg-kit" / "bench-cpu-grpo"),
                    help="where the warm start is cached (built if absent)")
    ap.add_argument("--bare-iterations", type=int, default=12,
                    help="timed iterations of the bare transformers loop (half before the trainer, half after)")
    ap.add_argument("--quick", action="store_true", help="6K tokens, 6 bare iterations, 1 thread (make bench)")
    args = ap.parse_args()
    if args.quick:
        args.tokens, args.bare_iterations, args.threads = 6000, 6, 1

    import torch

    from prereg_kit.chain.lock import lock_plan
    from prereg_kit.plan import load_plan
    from prereg_kit.runlog import read_run
    from trainer.config import EvalSetSpec, RunSpec, config_of, updated
    from trainer.core.assets import prepare_assets
    from trainer.core.policy import load_policy, set_determinism
    from trainer.data.problems import load_problems
    from trainer.data.synthetic import render_prompt
    from trainer.loop import train

    plan = load_plan(ROOT / "registry" / "cpu-grpo" / "plan.toml").plan
    cfg = updated(config_of(plan, "grpo"), {"engine": {"threads": args.threads}})

    torch.manual_seed(0)
    set_determinism(cfg, torch.device("cpu"))  # the trainer's threads and kernels for both halves of the bare loop, as train sets them
    work = Path(tempfile.mkdtemp(prefix="bench-bare-"))
    assets = prepare_assets(cfg, args.cache, work, 64)  # the warm start, built here on a first run (not timed)
    tok = load_policy(cfg, assets.model_path).tokenizer
    prompts = [render_prompt(tok, p.prompt) for p in list(load_problems(assets.train_file))[:512]]
    halves = [max(1, args.bare_iterations // 2), max(1, args.bare_iterations - args.bare_iterations // 2)]
    bare = [bare_loop(assets.model_path, cfg, prompts, halves[0])]

    tmp = Path(tempfile.mkdtemp(prefix="bench-trainer-"))
    shutil.copy(ROOT / "registry" / "cpu-grpo" / "plan.toml", tmp / "plan.toml")
    lock_plan(tmp / "plan.toml")  # main-stage runs need a locked plan
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

    bare.append(bare_loop(assets.model_path, cfg, prompts, halves[1]))
    shutil.rmtree(work, ignore_errors=True)
    bare_s = sum(n * s for n, (s, _) in zip(halves, bare)) / sum(halves)  # the mean over every timed iteration
    bare_tokens = sum(n * t for n, (_, t) in zip(halves, bare)) / sum(halves)
    ours_tok = train_s / it["tokens_total"].mean()
    bare_tok = bare_s / bare_tokens
    print(f"bare transformers loop                 : {bare_s * 1e3:7.1f} ms per iteration, {bare_tokens:.0f} generated tokens "
          f"(before the trainer {bare[0][0] * 1e3:.1f} ms, after {bare[1][0] * 1e3:.1f} ms)")
    print(f"trainer vs bare transformers loop: {ours_tok / bare_tok:5.2f}× the time per generated token "
          f"({ours_tok * 1e6:.0f} µs vs {bare_tok * 1e6:.0f} µs)")


if __name__ == "__main__":
    main()
