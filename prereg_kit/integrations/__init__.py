"""Bring your own trainer: the TRL callback and reward functions, and importers of other trainers' and trackers' logs (docs/integrations.md)."""
