"""The key presets of tracker imports (our column -> the logged key, per trainer) and their error.

Kept apart from the conversion (trackers.py) so that the command's help loads no pandas.
"""

from __future__ import annotations

from prereg_kit.errors import PreregError

PRESETS: dict[str, dict[str, str]] = {
    # TRL GRPOTrainer (0.14–0.2x): one logged step per optimizer step, completion metrics of the
    # global generation batch; ``num_tokens`` is cumulative prompt + completion (cross-check only).
    "trl": {
        "length_mean": "completions/mean_length",
        "tokens_total_cumulative": "num_tokens",
        "reward_mean": "reward",
        "zero_std_share": "frac_reward_zero_std",
        "truncation_rate": "completions/clipped_ratio",
        "updates": "step",
    },
    # verl (0.3–0.5 ray_trainer): per-step prompt + response tokens and the stage timers;
    # ``timing_s/step`` is deliberately absent (it includes validation and checkpointing).
    "verl": {
        "tokens_total": "perf/total_num_tokens",
        "length_mean": "response_length/mean",
        "prompt_length_mean": "prompt_length/mean",
        "truncation_rate": "response_length/clip_ratio",
        "reward_mean": "critic/score/mean",
        "generation_batches": "batch/num_gen_batches",
        "seconds_generation": "timing_s/gen",
        "seconds_credit+reward": "timing_s/reward",
        "seconds_credit+adv": "timing_s/adv",
        "seconds_update+old_log_prob": "timing_s/old_log_prob",
        "seconds_update+ref": "timing_s/ref",
        "seconds_update+actor": "timing_s/update_actor",
        "seconds_update+critic": "timing_s/update_critic",
    },
    # OpenRLHF (0.5–0.8 PPOTrainer, wandb/tensorboard loggers): ``train/<key>`` per global step,
    # mean lengths and reward; no stage timers (use a custom preset or --wallclock).
    "openrlhf": {
        "length_mean": "train/response_length",
        "total_length_mean": "train/total_length",
        "reward_mean": "train/reward",
    },
}


class TrackerError(PreregError):
    """A tracker export that cannot be turned into run-log rows honestly (one line)."""
