"""The trainer's user error: a recipe or run spec it cannot use (one line per problem, exit code 2)."""

from __future__ import annotations

from prereg_kit.errors import PreregError


class ConfigError(PreregError):
    """A recipe or run spec the trainer cannot use (exit code 2)."""
