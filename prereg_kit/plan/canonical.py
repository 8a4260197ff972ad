"""Canonical form of parsed content, so that a comment-only edit is told apart from a change of meaning.

The canonical JSON of a parsed TOML document sorts keys, uses compact separators, keeps Unicode,
and writes dates/times as ISO strings. Its sha256 is the plan's *content hash*: the same for two
files that differ only in comments, whitespace, key order or quoting style; different as soon as
any value changes. Runs record the content hash of the plan they were launched under.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from typing import Any


def _default(obj: Any) -> str:
    if isinstance(obj, (_dt.datetime, _dt.date, _dt.time)):
        return obj.isoformat()
    raise TypeError(f"cannot put {type(obj).__name__} in canonical JSON")


def canonical_json(data: Any) -> str:
    """Deterministic JSON text of ``data`` (sorted keys, no whitespace, ISO dates)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=_default, allow_nan=False)


def normalized(data: Any) -> Any:
    """``data`` as it reads back from its canonical JSON (dates become strings)."""
    return json.loads(canonical_json(data))


def sha256_hex(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def content_hash(data: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``data``."""
    return sha256_hex(canonical_json(data).encode("utf-8"))
