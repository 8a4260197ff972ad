"""The GRPO core: the policy and its generation engines, the update (loss, optimizer, learning
rate), outcome credit (eq. 1-2), the reward step, evaluation, the compute budget, checkpoints and
the run's assets (task files, warm start)."""
