"""The key presets of tracker imports (our column -> the logged key, per trainer) and their error.

Kept apart from the conversion (trackers.py) so that the command's help loads no pandas.
"""

from __future__ import annotations

from prereg_kit.errors import PreregError

# verl's stage timers -> our training stages, as the built-in trainer times them (trainer/loop.py):
# the old and reference policies' log-probabilities are computed inside our update, a critic's fit
# is credit assignment; a timer a run does not log took no time. ``timing_s/step`` is in no stage:
# it includes validation and checkpointing. verl versions without ``timing_s/update_weights`` sync
# inside generation's sharding manager, so that time is in generation. One table for the verl
# importer and the tracker preset.
VERL_STAGES: dict[str, tuple[str, ...]] = {
    "seconds_generation": ("timing_s/gen",),
    "seconds_credit": ("timing_s/reward", "timing_s/values", "timing_s/adv", "timing_s/update_critic"),
    "seconds_update": ("timing_s/old_log_prob", "timing_s/ref", "timing_s/update_actor"),
    "seconds_weight_sync": ("timing_s/update_weights",),
}

# OpenRLHF 0.11 (checked against its source, openrlhf/trainer/ppo_trainer.py: ``_compute_rollout_stats``
# and the ``timing/*`` keys; its W&B / TensorBoard loggers prefix ``train/``): per global step, the
# mean response length and the number of samples (so generated tokens are exact per step), reward,
# truncation, and ``timing/step_total`` = generation + make_experience + ppo_train + broadcast,
# taken before evaluation and checkpointing. make_experience computes rewards together with the old
# and reference log-probabilities (credit and update in our stages), so the time is kept unsplit.
# One table for both importers.
OPENRLHF: dict[str, str] = {"step": "train/global_step", "length_mean": "train/rollout/response_length_mean",
                            "samples_per_step": "train/rollout/num_samples", "reward_mean": "train/rollout/reward_mean",
                            "truncation_rate": "train/rollout/truncated_rate", "seconds_step": "train/timing/step_total"}

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
        **{f"{stage}+{key.rsplit('/', 1)[1]}": key for stage, keys in VERL_STAGES.items() for key in keys},
    },
    "openrlhf": {k: v for k, v in OPENRLHF.items() if k not in ("step", "samples_per_step")},
}


class TrackerError(PreregError):
    """A tracker export that cannot be turned into run-log rows honestly (one line)."""
