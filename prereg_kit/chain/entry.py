"""What every lock-chain entry shares: its kinds, and how the chain writes and reads its time
(ISO 8601 in UTC with a ``Z``: one form, so that entries compare as written). The clock itself
(``utc_now``) stays in :mod:`prereg_kit.chain.lock`, the one place entries take their time from."""

from __future__ import annotations

from datetime import datetime, timezone

PLAN_KINDS = ("lock", "amendment")
KINDS = (*PLAN_KINDS, "seal", "gradient", "look")  # gradient: a sealed gradient-test result (gradient_seal);
# look: an interim or final look of a sequential plan (look_chain)


def format_time(t: datetime) -> str:
    """A time as the chain writes it: ISO 8601 in UTC with a ``Z``."""
    return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def parse_time(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


__all__ = ["KINDS", "PLAN_KINDS", "format_time", "parse_time"]
