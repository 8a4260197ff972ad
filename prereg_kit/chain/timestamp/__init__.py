"""RFC 3161 trusted timestamps for the lock chain: proof that an entry of ``plan.lock`` existed by a time.

A hash chain is tamper-evident but not anchored in time: an author could rewrite every entry with
back-dated times and recompute all hashes. A time-stamping authority (TSA) signs
``(sha256 digest, its own clock time)``; a receipt on an entry's ``hash`` proves that the entry, and
through ``prev`` every entry before it, existed by the TSA's time. The message imprint is the
entry hash itself (not a hash of it), so ``openssl ts -verify -digest <64 hex> -in <file>.tsr``
checks a receipt independently of this module.

Libraries (the ``timestamp`` extra), and why:

- ``rfc3161-client`` (Trail of Bits, used by sigstore) parses responses with a strict DER parser
  and checks a receipt's certificate chain against trusted roots with OpenSSL's ``PKCS7_verify``
  at the TSA's time with the time-stamping purpose. It can neither take a precomputed digest for a
  request (its builder hashes the data itself) nor check a signature without a chain up to a
  self-signed root, which offline checking of a receipt against its own embedded certificate (or a
  pinned TSA certificate) needs.
- ``asn1crypto`` (pure Python, used by pyHanko and oscrypto) builds the request and reads the
  signed attributes of the token, whose signature ``cryptography`` then checks: the
  ``messageDigest`` attribute against the signed TSTInfo, the ESS signing-certificate attribute
  against the embedded certificate, and the signature against that certificate's key.

Both are imported only when a function here runs, so the core package imports without them.
OpenTimestamps is not supported: it needs network calendars and cannot be tested offline.

Modules: :mod:`.base` (the error, digests, receipt names), :mod:`.request` (obtaining a
receipt), :mod:`.receipt` (checking one), :mod:`.study` (a study's receipts against its lock chain).
"""

from __future__ import annotations

from .base import (
    EXTRA_HINT,
    MAX_RESPONSE_BYTES,
    RECEIPT_SUFFIX,
    CertSource,
    TimestampError,
    TimestampInfo,
    digest_of,
    receipt_name,
)
from .receipt import stamped_digest, verify_receipt
from .request import build_request, request_timestamp
from .study import (
    CLOCK_SKEW,
    LATE_PROOF,
    TIMESTAMPS_DIR,
    ReceiptCheck,
    ReceiptReport,
    StudyTimestamps,
    check_receipts,
    check_study_timestamps,
    stamp_entry,
)

__all__ = [
    "build_request", "CertSource", "check_receipts", "check_study_timestamps", "CLOCK_SKEW", "digest_of",
    "EXTRA_HINT", "LATE_PROOF", "MAX_RESPONSE_BYTES", "receipt_name", "RECEIPT_SUFFIX", "ReceiptCheck",
    "ReceiptReport", "request_timestamp", "stamp_entry", "stamped_digest", "StudyTimestamps", "TimestampError",
    "TimestampInfo", "TIMESTAMPS_DIR", "verify_receipt",
]
