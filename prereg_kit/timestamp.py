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
"""

from __future__ import annotations

import functools
import hashlib
import re
import secrets
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterable, Union

from .errors import PreregError
from .lock import format_time, parse_time

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
        import asn1crypto.cms  # noqa: F401
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
    except Exception as e:  # a structure that parses but holds unexpected values
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


# ---------------------------------------------------------------------------------------------
# verifying


def _status_text(resp) -> str:
    st = resp["status"]
    details = [str(x).strip().rstrip(".") for x in (st["status_string"].native or [])]
    if st["fail_info"].native:
        details.append("failure: " + ", ".join(sorted(st["fail_info"].native)))
    text = str(st["status"].native).replace("_", " ")
    return text + (f" ({'; '.join(details)})" if details else "")


@functools.lru_cache(maxsize=1)
def _resp_class():
    """asn1crypto's TimeStampResp with the token optional, as RFC 3161 has it (a rejection has none)."""
    from asn1crypto import cms, core, tsp

    class TimeStampResp(core.Sequence):
        _fields = [("status", tsp.PKIStatusInfo),
                   ("time_stamp_token", cms.ContentInfo, {"optional": True})]

    return TimeStampResp


def _sort_certificates(receipt: bytes) -> bytes | None:
    """``receipt`` with its certificate SET OF in DER order, or None if that is not its only flaw.

    OpenSSL (``openssl ts -reply`` with a chain, and TSAs built on it) writes the TSA certificate
    first, whatever DER's order; the strict parser refuses that. The certificate set is outside
    the signature, so reordering it changes nothing signed.
    """
    from asn1crypto import tsp

    try:
        certs = tsp.TimeStampResp.load(receipt)["time_stamp_token"]["content"]["certificates"]
        raw = certs.dump()
        parts = [c.dump() for c in certs]
        joined = b"".join(parts)
        if not raw.endswith(joined) or receipt.count(raw) != 1:
            return None
        return receipt.replace(raw, raw[:len(raw) - len(joined)] + b"".join(sorted(parts)))
    except Exception:
        return None


def _parse_response(receipt: bytes, what: str):
    """``(TimeStampResp, its DER)``: asn1crypto's reading after rfc3161-client's strict DER parse.

    A bare TimeStampToken (CMS ContentInfo) is wrapped in a granted response; a certificate set out
    of DER order is put in order (see :func:`_sort_certificates`).
    """
    from asn1crypto import cms
    from rfc3161_client import decode_timestamp_response

    if not isinstance(receipt, (bytes, bytearray)) or not receipt:
        raise TimestampError(f"{what} is empty")
    resp_cls = _resp_class()
    receipt = bytes(receipt)
    try:
        info = cms.ContentInfo.load(receipt, strict=True)
        if info["content_type"].native == "signed_data":
            receipt = resp_cls({"status": {"status": "granted"}, "time_stamp_token": info}).dump()
    except Exception:
        pass  # not a bare token: read it as a response
    try:
        try:
            decode_timestamp_response(receipt)
        except ValueError as e:
            fixed = _sort_certificates(receipt) if "InvalidSetOrdering" in str(e) else None
            if fixed is None:
                raise
            decode_timestamp_response(fixed)
            receipt = fixed
        resp = resp_cls.load(receipt, strict=True)
    except Exception as e:
        raise TimestampError(f"{what} is not an RFC 3161 timestamp response: {_one_line(e)}") from None
    return resp, receipt


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _tst_info(resp, what: str):
    from asn1crypto import core

    token = resp["time_stamp_token"]
    if isinstance(token, core.Void) or token["content_type"].native != "signed_data":
        raise TimestampError(f"{what} carries no signed timestamp token")
    encap = token["content"]["encap_content_info"]
    if encap["content_type"].dotted != _OID_TSTINFO:
        raise TimestampError(f"{what}: the signed content is not a TSTInfo")
    return encap["content"].parsed


def _load_certs(trusted) -> list:
    """Certificates from paths, PEM/DER bytes or ``cryptography`` certificates (one or a list)."""
    from cryptography import x509

    if trusted is None:
        return []
    items = [trusted] if isinstance(trusted, (str, Path, bytes, bytearray, x509.Certificate)) else list(trusted)
    certs = []
    for item in items:
        if isinstance(item, x509.Certificate):
            certs.append(item)
            continue
        where = "trusted certificate bytes"
        if isinstance(item, (str, Path)):
            where = str(item)
            try:
                item = Path(item).read_bytes()
            except OSError as e:
                raise TimestampError(f"cannot read trusted certificate {where}: {e.strerror}") from None
        try:
            if b"-----BEGIN CERTIFICATE-----" in item:
                certs.extend(x509.load_pem_x509_certificates(bytes(item)))
            else:
                certs.append(x509.load_der_x509_certificate(bytes(item)))
        except ValueError as e:
            raise TimestampError(f"{where} is not a PEM or DER certificate: {_one_line(e)}") from None
    return certs


def _signer(signed_data, what: str):
    """The signerInfo and the embedded certificate (asn1crypto) it names."""
    infos = signed_data["signer_infos"]
    if len(infos) != 1:
        raise TimestampError(f"{what} has {len(infos)} signers, not one")
    si = infos[0]
    sid = si["sid"]
    # unsigned fields, held to RFC 5652 so that a changed byte there is noticed too
    if signed_data["version"].native != "v3":
        raise TimestampError(f"{what} is malformed: SignedData {signed_data['version'].native}, not v3")
    want = "v1" if sid.name == "issuer_and_serial_number" else "v3"
    if si["version"].native != want:
        raise TimestampError(f"{what} is malformed: SignerInfo {si['version'].native} for its "
                             f"signer identifier, not {want}")
    if si["digest_algorithm"]["algorithm"].dotted not in \
            [a["algorithm"].dotted for a in signed_data["digest_algorithms"]]:
        raise TimestampError(f"{what} is malformed: its signer's digest algorithm is not among the "
                             f"SignedData digest algorithms")
    certs = [c.chosen for c in (signed_data["certificates"] or []) if c.name == "certificate"]
    if not certs:
        raise TimestampError(f"{what} embeds no TSA certificate (request it with certReq)")
    for c in certs:
        if sid.name == "issuer_and_serial_number":
            if c.issuer == sid.chosen["issuer"] and c.serial_number == sid.chosen["serial_number"].native:
                return si, c
        elif c.key_identifier is not None and c.key_identifier == sid.chosen.native:
            return si, c
    raise TimestampError(f"{what}: none of its embedded certificates is the signer's")


def _check_signature(si, cert, econtent: bytes, what: str) -> None:
    """The CMS signature of ``si`` over ``econtent``, by ``cert``'s key (RFC 5652 §5.4, RFC 5816)."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
    from cryptography.x509 import load_der_x509_certificate

    attrs = si["signed_attrs"]
    raw = attrs.dump()
    if not raw or raw[0] != 0xA0:
        raise TimestampError(f"{what} has no signed attributes")
    # the signature covers the received attributes re-tagged as a SET OF (RFC 5652 §5.4)
    signed = b"\x31" + raw[1:]
    digest_algo = si["digest_algorithm"]["algorithm"].native
    if digest_algo not in _SIGNING_DIGESTS:
        raise TimestampError(f"{what} is signed with digest {digest_algo}, which is not accepted")
    by_type: dict[str, list] = {}
    for a in attrs:
        by_type.setdefault(a["type"].native, []).append(a["values"])
    if [len(v) for v in by_type.get("content_type", [])] != [1] \
            or by_type["content_type"][0][0].dotted != _OID_TSTINFO:
        raise TimestampError(f"{what}: its signed content type is not TSTInfo")
    md = by_type.get("message_digest", [])
    if [len(v) for v in md] != [1] or md[0][0].native != hashlib.new(digest_algo, econtent).digest():
        raise TimestampError(f"{what}: bad signature (the signed TSTInfo does not match its message digest)")

    cert_der = cert.dump()
    ess = by_type.get("signing_certificate_v2") or by_type.get("signing_certificate")
    if not ess or len(ess[0]) != 1 or not len(ess[0][0]["certs"]):
        raise TimestampError(f"{what} does not name its signing certificate (ESS attribute missing)")
    first = ess[0][0]["certs"][0]
    algo = first["hash_algorithm"]["algorithm"].native if "hash_algorithm" in first else "sha1"
    if algo not in _SIGNING_DIGESTS | {"sha1"} or first["cert_hash"].native != hashlib.new(algo, cert_der).digest():
        raise TimestampError(f"{what}: its embedded certificate is not the one it was signed with")

    sig = si["signature"].native
    sig_algo = si["signature_algorithm"]
    key = load_der_x509_certificate(cert_der).public_key()
    try:
        kind = sig_algo.signature_algo
    except ValueError:
        raise TimestampError(f"{what}: unknown signature algorithm {sig_algo['algorithm'].dotted}") from None
    try:
        hash_name = sig_algo.hash_algo
    except ValueError:
        hash_name = digest_algo
    if hash_name not in _SIGNING_DIGESTS:
        raise TimestampError(f"{what} is signed with digest {hash_name}, which is not accepted")
    h = getattr(hashes, hash_name.upper())()
    try:
        if kind == "rsassa_pkcs1v15" and isinstance(key, rsa.RSAPublicKey):
            key.verify(sig, signed, padding.PKCS1v15(), h)
        elif kind == "ecdsa" and isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(sig, signed, ec.ECDSA(h))
        else:
            raise TimestampError(f"{what}: unsupported signature algorithm {kind} "
                                 f"(accepted: RSA PKCS#1 v1.5, ECDSA)")
    except InvalidSignature:
        raise TimestampError(f"{what}: bad signature (it does not verify with the TSA certificate)") from None
    except (ValueError, TypeError, AttributeError) as e:
        raise TimestampError(f"{what}: bad signature ({_one_line(e)})") from None


def _check_tsa_cert(cert, gen_time: datetime, what: str) -> None:
    from cryptography import x509

    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    except x509.ExtensionNotFound:
        raise TimestampError(f"{what}: the TSA certificate has no extended key usage (timeStamping)") from None
    if [o.dotted_string for o in eku.value] != [_OID_TIME_STAMPING] or not eku.critical:
        raise TimestampError(f"{what}: the TSA certificate's extended key usage is not a critical, "
                             f"sole timeStamping")
    if not cert.not_valid_before_utc <= gen_time <= cert.not_valid_after_utc:
        raise TimestampError(f"{what}: the TSA certificate was not valid at the stamped time "
                             f"{gen_time.isoformat()}")


def _check_embedded_chain(signer, signed_data, what: str) -> None:
    """Every embedded certificate is on the signer's chain and signed by the next one up.

    Only the signer's certificate is bound by the token's signature (ESS); this makes the others
    tamper-evident as far as offline checking can: the top one, when its issuer is not embedded,
    is checked only against ``trusted`` roots (and is relied on for nothing otherwise).
    """
    from cryptography.exceptions import InvalidSignature
    from cryptography.x509 import load_der_x509_certificate

    embedded = [load_der_x509_certificate(c.chosen.dump()) for c in signed_data["certificates"]
                if c.name == "certificate"]
    chain, cur = [signer], signer
    for _ in embedded:
        issuer = cur if cur.issuer == cur.subject else next(
            (c for c in embedded if c.subject == cur.issuer and c not in chain), None)
        if issuer is None:
            break
        try:
            cur.verify_directly_issued_by(issuer)
        except (InvalidSignature, ValueError, TypeError):
            raise TimestampError(f"{what}: its embedded certificate {cur.subject.rfc4514_string()} is not "
                                 f"signed by {issuer.subject.rfc4514_string()}") from None
        if issuer is cur:
            break
        chain.append(cur := issuer)
    extra = [c for c in embedded if c not in chain]
    if extra:
        raise TimestampError(f"{what} embeds a certificate that is not on its signer's chain "
                             f"({extra[0].subject.rfc4514_string()})")


def _check_chain(resp_der: bytes, digest: bytes, trusted: list, what: str) -> None:
    """OpenSSL path validation (via rfc3161-client) of the TSA certificate up to a trusted root."""
    from rfc3161_client import VerificationError, VerifierBuilder, decode_timestamp_response

    roots = [c for c in trusted if c.issuer == c.subject]
    if not roots:
        raise TimestampError(f"{what} is untrusted: none of the trusted certificates is a root (self-signed) "
                             f"or the TSA certificate itself")
    builder = VerifierBuilder(roots=roots, intermediates=[c for c in trusted if c.issuer != c.subject])
    try:
        builder.build().verify(decode_timestamp_response(resp_der), digest)
    except (VerificationError, ValueError) as e:
        raise TimestampError(f"{what} is untrusted: its TSA certificate does not chain to the trusted "
                             f"certificates ({_one_line(e)[:120]})") from None


def verify_receipt(receipt: bytes, digest: bytes, *, trusted: CertSource | Iterable[CertSource] | None = None,
                   name: str = "receipt") -> TimestampInfo:
    """Check offline that ``receipt`` proves ``digest`` (sha256) existed by the TSA's time.

    The receipt (a DER TimeStampResp or bare TimeStampToken) must parse, be granted, stamp exactly
    ``digest`` with sha256, carry a CMS signature that verifies with its embedded TSA certificate
    (signed attributes, message digest and ESS signing-certificate binding), and that certificate
    must have the sole, critical timeStamping extended key usage and be valid at the stamped time.
    With ``trusted`` (paths, PEM/DER bytes or certificates: a root CA with any intermediates, or the
    TSA certificate itself), the certificate must also be one of them or chain to one of the roots.
    ``name`` is how error messages refer to the receipt (its file name).
    """
    _libs()
    digest = _check_digest(digest)
    trusted_certs = _load_certs(trusted)
    try:
        return _verify(receipt, digest, trusted_certs, name)
    except TimestampError:
        raise
    except Exception as e:  # a structure that parses but holds unexpected values
        raise TimestampError(f"{name} is malformed: {_one_line(e)}") from None


def _verify(receipt: bytes, digest: bytes, trusted_certs: list, name: str) -> TimestampInfo:
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509 import load_der_x509_certificate

    resp, receipt = _parse_response(receipt, name)
    if resp["status"]["status"].native != "granted":
        raise TimestampError(f"{name} is not a granted timestamp: {_status_text(resp)}")
    tst = _tst_info(resp, name)
    imprint = tst["message_imprint"]
    algo = imprint["hash_algorithm"]["algorithm"].native
    if algo != "sha256":
        raise TimestampError(f"{name} stamps a {algo} digest, not sha256")
    stamped = imprint["hashed_message"].native
    if stamped != digest:
        raise TimestampError(f"{name} stamps digest {stamped.hex()[:16]}…, not {digest.hex()[:16]}…")

    signed_data = resp["time_stamp_token"]["content"]
    si, cert_asn1 = _signer(signed_data, name)
    econtent = signed_data["encap_content_info"]["content"].contents
    _check_signature(si, cert_asn1, econtent, name)

    cert = load_der_x509_certificate(cert_asn1.dump())
    gen_time = tst["gen_time"].native.astimezone(timezone.utc)
    _check_tsa_cert(cert, gen_time, name)
    _check_embedded_chain(cert, signed_data, name)

    chain_checked = False
    if trusted_certs:
        if any(cert == t for t in trusted_certs):
            chain_checked = True  # pinned: the TSA certificate itself is trusted
        else:
            _check_chain(receipt, digest, trusted_certs, name)
            chain_checked = True

    acc = tst["accuracy"]
    accuracy = None
    if acc.native is not None:
        accuracy = (acc["seconds"].native or 0) + (acc["millis"].native or 0) / 1e3 \
            + (acc["micros"].native or 0) / 1e6
    return TimestampInfo(
        gen_time=gen_time,
        tsa=cert.subject.rfc4514_string(),
        cert_sha256=cert.fingerprint(hashes.SHA256()).hex(),
        serial=tst["serial_number"].native,
        policy=tst["policy"].dotted,
        digest=digest.hex(),
        chain_checked=chain_checked,
        accuracy_s=accuracy,
    )


# ---------------------------------------------------------------------------------------------
# receipts of a chain


@dataclass(frozen=True)
class ReceiptCheck:
    """One receipt file: the chain entry it stamps (index, or None) and what it proves, or why not."""

    name: str
    entry: int | None
    info: TimestampInfo | None
    problem: str | None = None


@dataclass
class ReceiptReport:
    """The receipts of a study checked against its chain.

    A receipt on entry ``k`` proves entries ``0..k`` (each entry's ``prev`` covers the one before).
    ``proven[i]`` is the earliest valid receipt covering entry ``i`` (at equal TSA times, the one
    on the nearest entry).
    """

    checks: list[ReceiptCheck]
    n_entries: int
    proven: dict[int, ReceiptCheck] = field(default_factory=dict)

    @property
    def problems(self) -> list[str]:
        return [c.problem for c in self.checks if c.problem]

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        """One line per entry (proven when, by which receipt) and one per problem."""
        out = []
        for i in range(self.n_entries):
            c = self.proven.get(i)
            if c is None:
                out.append(f"entry {i}: no timestamp")
            else:
                trust = "trusted" if c.info.chain_checked else "TSA not checked against trusted roots"
                via = "" if c.entry == i else f" (through entry {c.entry})"
                out.append(f"entry {i}: existed by {c.info.gen_time.isoformat()} per {c.info.tsa}"
                           f" [{c.name}{via}; {trust}]")
        return out + self.problems


def check_receipts(entries: list[dict], receipts: dict[str, bytes], *,
                   trusted: CertSource | Iterable[CertSource] | None = None) -> ReceiptReport:
    """Which chain entries the receipts prove, at which TSA times, and which receipts are bad.

    ``receipts`` maps a receipt's file name (``<64 hex of the entry hash>.tsr``) to its bytes. A
    receipt whose digest is no entry's hash is reported: it stamped a chain that was rewritten
    since (or belongs to another study). A misnamed, unparseable, forged or untrusted receipt is
    reported too; the report's ``ok`` is False if any receipt has a problem.
    """
    _libs()
    index = {}
    for i, e in enumerate(entries):
        m = _ENTRY_HASH.match(str(e.get("hash", "")))
        if m:
            index[m.group(1)] = i
    trusted_certs = _load_certs(trusted)
    checks = []
    for name in sorted(receipts):
        m = _RECEIPT_NAME.match(Path(name).name)
        if not m:
            checks.append(ReceiptCheck(name, None, None,
                                       f"{name}: a receipt is named <64 hex of the entry hash>.tsr"))
            continue
        hexd = m.group(1)
        entry = index.get(hexd)
        try:
            info = verify_receipt(receipts[name], bytes.fromhex(hexd), trusted=trusted_certs or None,
                                  name=name)
        except TimestampError as e:
            checks.append(ReceiptCheck(name, entry, None, str(e)))
            continue
        if entry is None:
            checks.append(ReceiptCheck(name, None, info,
                                       f"{name} stamps {hexd[:16]}… (at {info.gen_time.isoformat()}), which "
                                       f"is no entry of the chain: the chain was rewritten after it was stamped"))
            continue
        checks.append(ReceiptCheck(name, entry, info))
    report = ReceiptReport(checks, len(entries))
    for c in checks:
        if c.problem is None and c.entry is not None:
            for i in range(c.entry + 1):
                best = report.proven.get(i)
                # earliest time; at equal times the receipt on the nearest entry
                if best is None or (c.info.gen_time, c.entry) < (best.info.gen_time, best.entry):
                    report.proven[i] = c
    return report


# ---------------------------------------------------------------------------------------------
# a study's receipts: <study>/timestamps/<64 hex>.tsr, checked by `prereg verify`

TIMESTAMPS_DIR = "timestamps"
CLOCK_SKEW = timedelta(minutes=5)  # an entry may read up to this much later than its TSA time
LATE_PROOF = timedelta(days=1)  # a lock first stamped later than this proves only the later time


def stamp_entry(study_dir: str | Path, entry: dict, url: str, *, trusted: CertSource | None = None,
                timeout: float = 30) -> Path:
    """Obtain a receipt for ``entry`` (usually the chain's head) from the TSA at ``url`` and keep it
    in ``<study>/timestamps/``; with ``trusted`` (the TSA's CA certificate, a file), the receipt must
    verify against it, and a copy of the certificate is kept beside the receipts for offline checks."""
    folder = Path(study_dir) / TIMESTAMPS_DIR
    receipt = request_timestamp(digest_of(entry["hash"]), url, timeout=timeout, trusted=trusted)
    folder.mkdir(exist_ok=True)
    if trusted is not None:
        data = Path(trusted).read_bytes()
        (folder / f"tsa-ca-{hashlib.sha256(data).hexdigest()[:12]}.pem").write_bytes(data)
    target = folder / receipt_name(entry["hash"])
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(receipt)
    tmp.replace(target)
    return target


@dataclass
class StudyTimestamps:
    """``prereg verify``'s reading of a study's receipts (empty lists when it has none)."""

    violations: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)
    report: ReceiptReport | None = None


def check_study_timestamps(study_dir: str | Path, entries: list[dict], *,
                           trusted: CertSource | Iterable[CertSource] | None = None) -> StudyTimestamps:
    """Check every receipt in ``<study>/timestamps/`` against the chain ``entries``.

    A receipt that fails (forged, misnamed, untrusted) or stamps no entry of the chain (the chain was
    rewritten after it was stamped) is a violation. An entry whose recorded time is later than its
    TSA time by more than :data:`CLOCK_SKEW` is a warning (its machine's clock ran ahead), and so
    is a lock first stamped more than :data:`LATE_PROOF` after its recorded time: only the TSA's
    time is proven. ``trusted``: the TSA roots to check against; by default the ``*.pem`` files kept
    in the folder (kept by the author, so a reader should compare their fingerprints with the TSA's
    published root).
    """
    out = StudyTimestamps()
    folder = Path(study_dir) / TIMESTAMPS_DIR
    receipts = {p.name: p.read_bytes() for p in sorted(folder.glob(f"*{RECEIPT_SUFFIX}"))} if folder.is_dir() else {}
    if not receipts:
        return out
    kept = sorted(folder.glob("*.pem"))
    roots = trusted if trusted is not None else (kept or None)
    try:
        rep = check_receipts(entries, receipts, trusted=roots)
    except TimestampError as e:  # the extra is missing, or a trusted certificate is unreadable
        out.problems.append(f"{folder}: {e}")
        return out
    out.report = rep
    out.violations.extend(f"{TIMESTAMPS_DIR}/{c.problem}" for c in rep.checks if c.problem)  # each names its receipt
    source = ("the given certificates" if trusted is not None else
              f"{', '.join(p.name for p in kept)} kept in {TIMESTAMPS_DIR}/" if kept else "nothing: self-consistent only")
    head = len(entries) - 1
    proof = rep.proven.get(head)
    stamped = {c.entry for c in rep.checks if c.problem is None and c.entry is not None}
    out.info.append(f"{len(receipts)} timestamp receipt(s); TSA roots: {source}; "
                    + (f"the head (entry {head}) existed by {format_time(proof.info.gen_time)} per {proof.info.tsa}"
                       if proof else f"latest proven entry {max(stamped)} of {head}" if stamped else "no entry proven"))
    for i, e in enumerate(entries):
        c = rep.proven.get(i)
        if c is None or c.entry != i:
            continue
        claimed = parse_time(e["time"])
        if claimed - c.info.gen_time > CLOCK_SKEW:
            out.warnings.append(f"entry {i} is dated {e['time']}, after its TSA time {format_time(c.info.gen_time)}: "
                                "the clock of the machine that wrote it ran ahead")
    first = rep.proven.get(0)
    if first is not None:
        claimed = parse_time(entries[0]["time"])
        if first.info.gen_time - claimed > LATE_PROOF:
            out.warnings.append(f"the lock (entry 0) is dated {entries[0]['time']} but was first timestamped "
                                f"{format_time(first.info.gen_time)}: only the later time is proven")
    return out

