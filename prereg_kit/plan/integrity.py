"""The ``[integrity]`` table: how the plan's lock chain is anchored outside ``plan.lock``.

A hash chain alone proves only its own consistency: a forger who rewrites every entry and rehashes
the chain produces a valid file. The plan therefore says, as part of what it locks, which outside
anchors hold the chain (``docs/locking.md``, "Outside anchors"):

- ``"git"``: ``plan.lock`` in git's history; with ``commit = true`` every append (lock, amendment,
  seal, look, gradient seal) commits ``plan.lock`` at once, so every entry is in a commit;
- ``"rfc3161"``: every entry written under the plan is stamped by the time-stamping authority at
  ``tsa_url`` as it is written (its receipt kept in ``<study>/timestamps/``), checked against the
  CA certificate ``tsa_ca`` (a path, relative to the study folder) when given.

The table is optional: a plan without it declares no anchor, and ``prereg verify`` says what is
then not proven. Changing it after the lock is an amendment like any other key.
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Anchor = Literal["git", "rfc3161"]
ANCHORS: tuple[str, ...] = ("git", "rfc3161")


class Integrity(BaseModel):
    """``[integrity]``: the outside anchors the plan declares (``anchors``) and their settings."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)
    anchors: list[Anchor] = Field(default=[], description="outside anchors of the lock chain")
    commit: bool = False  # git: commit plan.lock after every append
    tsa_url: str | None = Field(default=None, max_length=2000)  # rfc3161: the time-stamping authority
    tsa_ca: str | None = Field(default=None, min_length=1, max_length=4096)  # rfc3161: its CA certificate file

    @field_validator("anchors")
    @classmethod
    def _once(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"each anchor once, got {v}")
        return v

    @field_validator("tsa_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None:
            parts = urlsplit(v)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"tsa_url is the time-stamping authority's http(s)://host/... URL, got {v!r:.80}")
        return v

    @model_validator(mode="after")
    def _settings_of_declared_anchors(self) -> "Integrity":
        if "rfc3161" in self.anchors and self.tsa_url is None:
            raise ValueError('anchors = ["rfc3161"] needs tsa_url = "https://…" (the time-stamping authority)')
        if "rfc3161" not in self.anchors and (self.tsa_url is not None or self.tsa_ca is not None):
            raise ValueError('tsa_url and tsa_ca are settings of the rfc3161 anchor: add "rfc3161" to anchors')
        if self.commit and "git" not in self.anchors:
            raise ValueError('commit = true is a setting of the git anchor: add "git" to anchors')
        return self

    @property
    def stamped(self) -> bool:
        return "rfc3161" in self.anchors

    @property
    def commits(self) -> bool:
        return "git" in self.anchors and self.commit


NONE = Integrity()


def declared_integrity(content: dict[str, Any] | None) -> Integrity:
    """The ``[integrity]`` table of a plan's parsed content (a chain entry's ``content``); none
    declared when the table is absent or does not validate (the plan check reports that)."""
    table = (content or {}).get("integrity")
    if not isinstance(table, dict):
        return NONE
    try:
        return Integrity.model_validate(table)
    except ValueError:
        return NONE
