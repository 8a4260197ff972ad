"""Obtaining a receipt: an RFC 3161 request for a digest, sent to a TSA, and its answer checked."""

from __future__ import annotations

import secrets
import socket
from typing import Iterable

from .base import MAX_RESPONSE_BYTES, CertSource, TimestampError, _check_digest, _libs
from .receipt import _load_certs, _one_line, _parse_response, _status_text, _tst_info, verify_receipt

# ---------------------------------------------------------------------------------------------
# requesting


def build_request(digest: bytes, nonce: int) -> bytes:
    """DER TimeStampReq (v1) for a sha256 ``digest`` with ``nonce`` and certReq = true."""
    _libs()
    from asn1crypto import core, tsp

    return tsp.TimeStampReq({
        "version": "v1",
        "message_imprint": {"hash_algorithm": {"algorithm": "sha256", "parameters": core.Null()},
                            "hashed_message": _check_digest(digest)},
        "nonce": nonce,
        "cert_req": True,
    }).dump()


def _post(url: str, body: bytes, timeout: float) -> bytes:
    import urllib.error  # http.client and ssl cost 0.1 s; verify and lock never post
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TimestampError(f"timestamp authority URL must be http(s)://host/..., got {url!r}")
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/timestamp-query", "Accept": "application/timestamp-reply"})
    handlers = []
    if parts.hostname in ("localhost", "127.0.0.1", "::1"):
        handlers.append(urllib.request.ProxyHandler({}))  # a proxy would not reach our loopback
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(req, timeout=timeout) as resp:
            data = resp.read(MAX_RESPONSE_BYTES + 1)
    except urllib.error.HTTPError as e:
        raise TimestampError(f"timestamp authority {url} answered HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        reason = e.reason
        if isinstance(reason, (TimeoutError, socket.timeout)):
            raise TimestampError(f"timestamp authority {url} did not answer within {timeout:g} s") from None
        raise TimestampError(f"timestamp authority {url} is unreachable: {reason}") from None
    except (TimeoutError, socket.timeout):
        raise TimestampError(f"timestamp authority {url} did not answer within {timeout:g} s") from None
    except OSError as e:
        raise TimestampError(f"timestamp authority {url} is unreachable: {e}") from None
    if len(data) > MAX_RESPONSE_BYTES:
        raise TimestampError(f"timestamp authority {url} answered more than {MAX_RESPONSE_BYTES} bytes")
    return data


def request_timestamp(digest: bytes, url: str, *, timeout: float = 30, nonce: int | None = None,
                      trusted: CertSource | Iterable[CertSource] | None = None) -> bytes:
    """Ask the TSA at ``url`` to stamp the sha256 ``digest``; return its DER TimeStampResp (the receipt).

    The request carries a random 63-bit nonce (``secrets``: a nonce must be unpredictable, so it
    takes no seed; ``nonce`` overrides it) and asks for the TSA certificate. The
    answer is accepted only if its status is *granted*, it stamps exactly ``digest`` with sha256,
    it echoes the nonce (so it answers this request, not an old one) and it verifies as
    :func:`verify_receipt` does (against ``trusted`` when given).
    """
    _libs()
    digest = _check_digest(digest)
    if nonce is None:
        nonce = secrets.randbelow(2**63 - 1) + 1
    trusted_certs = _load_certs(trusted)
    body = _post(url, build_request(digest, nonce), timeout)
    try:
        return _check_answer(body, digest, nonce, url, trusted_certs)
    except TimestampError:
        raise
    except Exception as e:  # noqa: BLE001 - a structure that parses but holds unexpected values
        raise TimestampError(f"the answer of {url} is malformed: {_one_line(e)}") from None


def _check_answer(body: bytes, digest: bytes, nonce: int, url: str, trusted_certs: list) -> bytes:
    resp, body = _parse_response(body, f"the answer of {url}")
    if resp["status"]["status"].native != "granted":
        raise TimestampError(f"timestamp authority {url} refused the request: {_status_text(resp)}")
    tst = _tst_info(resp, f"the answer of {url}")
    imprint = tst["message_imprint"]
    if imprint["hash_algorithm"]["algorithm"].native != "sha256" \
            or imprint["hashed_message"].native != digest:
        raise TimestampError(f"timestamp authority {url} stamped another digest "
                             f"({imprint['hashed_message'].native.hex()[:16]}…, not {digest.hex()[:16]}…)")
    got = tst["nonce"].native
    if got != nonce:
        raise TimestampError(f"timestamp authority {url} answered with nonce {got}, not the request's "
                             f"{nonce}: the answer is not for this request")
    try:
        verify_receipt(body, digest, trusted=trusted_certs or None)
    except TimestampError as e:
        raise TimestampError(f"timestamp authority {url} answered a receipt that does not verify: {e}") from None
    return body


