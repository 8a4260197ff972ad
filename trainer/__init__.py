"""The built-in GRPO trainer (needs the `train` extra: torch, transformers)."""
