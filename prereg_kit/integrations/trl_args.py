"""The TRL settings a preregistered recipe fixes: :func:`check_args` holds a ``GRPOConfig`` to the
configuration (group size, completion limit, sampling, learning rate and its schedule, prompts per
batch), to a logging interval that neither merges nor drops generation batches, and to TRL's
evaluation loop off; :func:`generation_span` is the optimizer steps per generation batch."""

from __future__ import annotations

import math

from prereg_kit.errors import PreregError

from .trl_state import generation_span as steps_per_batch


def generation_span(args) -> int:
    """Optimizer steps per TRL generation batch of ``args`` (:func:`.trl_state.generation_span`;
    a generation batch ending inside an optimizer step is refused)."""
    spg, gas = int(args.steps_per_generation), int(args.gradient_accumulation_steps)
    iters = int(getattr(args, "num_iterations", 1) or 1)
    span = steps_per_batch(spg, iters, gas)
    if span is None:
        raise PreregError(f"TRL: steps_per_generation × num_iterations = {spg * iters} is not a multiple of "
                          f"gradient_accumulation_steps = {gas}: a generation batch would end inside an optimizer step")
    return span


def check_args(args, cfg, configuration: str) -> int:
    """Refuse TRL settings the run log cannot account for honestly, or that differ from the
    preregistered recipe; return the optimizer steps per generation batch."""
    k = generation_span(args)
    strategy = str(getattr(args.logging_strategy, "value", args.logging_strategy))
    steps = args.logging_steps
    if strategy != "steps" or steps < 1 or int(steps) != steps or k % int(steps):
        raise PreregError(f"TRL: logging_strategy = {strategy!r}, logging_steps = {steps} merges or drops generation "
                          f"batches (TRL averages its metrics between logs, a batch spans {k} step(s)); set "
                          f"logging_strategy = 'steps' and logging_steps to a divisor of {k} (1 always works)")
    if getattr(args, "fsdp", None) or getattr(args, "deepspeed", None):
        raise PreregError("TRL: FSDP / DeepSpeed shard the model, and the plan's evaluations generate with the whole "
                          "policy on the main process; train on one process or DDP")
    if str(getattr(args.eval_strategy, "value", args.eval_strategy)) != "no":
        raise PreregError("TRL: eval_strategy must be 'no': TRL's evaluation calls the reward functions, and the "
                          "plan's evaluations are run by PreregCallback")
    pairs = [("num_generations", "rollout.group_size", args.num_generations, cfg.rollout.group_size),
             ("max_completion_length", "rollout.completion_limit", args.max_completion_length, cfg.rollout.completion_limit),
             ("temperature", "rollout.temperature", args.temperature, cfg.rollout.temperature),
             ("top_p", "rollout.top_p", args.top_p, cfg.rollout.top_p),
             ("learning_rate", "update.learning_rate", args.learning_rate, cfg.update.learning_rate),
             ("generation_batch_size / num_generations", "rollout.prompts_per_iteration",
              args.generation_batch_size // args.num_generations, cfg.rollout.prompts_per_iteration)]
    sched = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
    warm = args.warmup_steps or getattr(args, "warmup_ratio", 0)
    if cfg.update.lr_schedule != "constant":  # ours decays over B's tokens, TRL's over max_steps
        raise PreregError(f"configuration {configuration!r}: update.lr_schedule = {cfg.update.lr_schedule!r} decays "
                          "over the token budget, which TRL's schedulers cannot follow; preregister 'constant'")
    if sched != "constant" or warm:
        raise PreregError(f"TRL: lr_scheduler_type = {sched!r}, warmup {warm} but configuration {configuration!r} "
                          "preregisters update.lr_schedule = 'constant' (set lr_scheduler_type = 'constant')")
    for trl_key, ours, got, want in pairs:
        if got is None or not math.isclose(float(got), float(want), rel_tol=1e-9, abs_tol=0.0):
            raise PreregError(f"TRL: {trl_key} = {got} but configuration {configuration!r} preregisters {ours} = {want}")
    return k


__all__ = ["check_args", "generation_span"]
