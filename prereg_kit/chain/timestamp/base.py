"""What the timestamp modules share: the error, what a receipt proves, digests of chain entries
and receipt names, and the check that the ``timestamp`` extra is installed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Union

from ...errors import PreregError

EXTRA_HINT = "pip install 'prereg-kit[timestamp]'"
RECEIPT_SUFFIX = ".tsr"
MAX_RESPONSE_BYTES = 1 << 20
_RECEIPT_NAME = re.compile(r"^([0-9a-f]{64})\.tsr$")
_ENTRY_HASH = re.compile(r"^sha256:([0-9a-f]{64})$")
_OID_TSTINFO = "1.2.840.113549.1.9.16.1.4"
_OID_TIME_STAMPING = "1.3.6.1.5.5.7.3.8"
# digests accepted for the CMS signature itself (SHA-1 is not: collisions are practical)
_SIGNING_DIGESTS = {"sha224", "sha256", "sha384", "sha512"}

CertSource = Union[str, Path, bytes, Any]


class TimestampError(PreregError):
    """A timestamp could not be obtained or a receipt does not prove what it claims (one line)."""


@dataclass(frozen=True)
class TimestampInfo:
    """What a verified receipt proves: ``digest`` existed by ``gen_time`` according to ``tsa``.

    ``chain_checked`` is True only when the TSA certificate was checked against ``trusted``
    certificates; otherwise the receipt is only self-consistent (anyone can mint a TSA certificate).
    """

    gen_time: datetime
    tsa: str
    cert_sha256: str
    serial: int
    policy: str
    digest: str
    chain_checked: bool
    accuracy_s: float | None = None


def _libs():
    try:
        import asn1crypto.cms
        import asn1crypto.tsp  # noqa: F401
        import cryptography.x509  # noqa: F401
        import rfc3161_client  # noqa: F401
    except ImportError as e:
        raise TimestampError(f"timestamps need the 'timestamp' extra ({e.name} is not installed): "
                             f"{EXTRA_HINT}") from None


def _check_digest(digest: bytes) -> bytes:
    if not isinstance(digest, (bytes, bytearray)) or len(digest) != 32:
        raise TimestampError(f"a timestamp digest is 32 bytes of sha256, got {digest!r:.80}")
    return bytes(digest)


def digest_of(entry_hash: str) -> bytes:
    """The 32-byte digest a TSA stamps for a chain entry whose ``hash`` is ``sha256:<64 hex>``."""
    m = _ENTRY_HASH.match(entry_hash or "")
    if not m:
        raise TimestampError(f"an entry hash is 'sha256:<64 hex>', got {entry_hash!r:.80}")
    return bytes.fromhex(m.group(1))


def receipt_name(entry_hash: str) -> str:
    """File name of the receipt that stamps the chain entry with this ``hash``: ``<64 hex>.tsr``."""
    return digest_of(entry_hash).hex() + RECEIPT_SUFFIX


