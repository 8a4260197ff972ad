"""Checking a receipt (RFC 3161 token): its DER, the signed TSTInfo, the signature, the TSA
certificate and its chain at the stamped time."""

from __future__ import annotations

import functools
import hashlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from .base import (
    _OID_TIME_STAMPING,
    _OID_TSTINFO,
    _SIGNING_DIGESTS,
    CertSource,
    TimestampError,
    TimestampInfo,
    _check_digest,
    _libs,
)

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
    except Exception:  # noqa: BLE001 - asn1crypto raises several kinds on bytes that are no receipt: leave it unchanged
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
    except Exception:  # noqa: BLE001 - any parse error: not a bare token, read it as a response
        pass
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
    except Exception as e:  # noqa: BLE001 - asn1crypto and rfc3161-client raise several kinds on bytes that are no response
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


def load_certs(trusted) -> list:
    """The trusted certificates a check will use (paths, PEM/DER bytes, certificates), read once:
    an unreadable one is the caller's input, one line (:class:`TimestampError`)."""
    return _load_certs(trusted)


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
    except Exception as e:  # noqa: BLE001 - a structure that parses but holds unexpected values
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




def stamped_digest(receipt: bytes, *, name: str = "receipt") -> bytes:
    """The sha256 digest ``receipt`` says it stamps (its message imprint), read without checking the
    signature: for receipts kept under any file name (a reader's copies), which
    :func:`verify_receipt` then checks against that digest."""
    _libs()
    try:
        resp, _ = _parse_response(receipt, name)
        if resp["status"]["status"].native != "granted":
            raise TimestampError(f"{name} is not a granted timestamp: {_status_text(resp)}")
        imprint = _tst_info(resp, name)["message_imprint"]
        algo = imprint["hash_algorithm"]["algorithm"].native
        digest = imprint["hashed_message"].native
    except TimestampError:
        raise
    except Exception as e:  # noqa: BLE001 - a structure that parses but holds unexpected values
        raise TimestampError(f"{name} is malformed: {_one_line(e)}") from None
    if algo != "sha256" or len(digest) != 32:
        raise TimestampError(f"{name} stamps a {algo} digest, not sha256")
    return digest
