"""RFC 3161 timestamps: requests to a local TSA, offline verification, and receipts of a lock chain.

Every check is attacked: another digest, each flipped byte, a back-dated or re-signed token, a
second TSA, a misbehaving TSA (altered nonce or imprint, rejection, HTTP error, garbage), a
rewritten chain.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import pytest
from plans import amend_at, lock_at
from tsa import LocalTSA, make_tsa_cert, resign

from prereg_kit.chain.lock import entry_hash, read_chain, serialize
from prereg_kit.chain.timestamp import (
    TimestampError,
    build_request,
    check_receipts,
    digest_of,
    receipt_name,
    request_timestamp,
    verify_receipt,
)
from prereg_kit.errors import PreregError

pytest.importorskip("rfc3161_client", reason="the 'timestamp' extra is not installed")

DIGEST = hashlib.sha256(b"entry 0").digest()
OTHER = hashlib.sha256(b"entry 1").digest()


def _one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg and "Traceback" not in msg, msg
    assert isinstance(e.value, PreregError) and e.value.exit_code == 2
    return msg


def test_round_trip_proves_time_and_names_the_tsa(tsa):
    before = datetime.now(timezone.utc)
    receipt = request_timestamp(DIGEST, tsa.url)
    info = verify_receipt(receipt, DIGEST)
    assert abs(info.gen_time - before) < timedelta(seconds=10)
    assert info.gen_time.tzinfo == timezone.utc
    assert info.tsa == tsa.subject == "CN=Test TSA,O=prereg-kit tests"
    assert info.digest == DIGEST.hex()
    assert info.cert_sha256 == hashlib.sha256(tsa.cert.public_bytes(_der())).hexdigest()
    assert info.chain_checked is False and info.policy == "1.3.6.1.4.1.99999.1" and info.accuracy_s == 1.0
    # what the TSA received: sha256 imprint = the digest itself, a nonce, certReq
    from asn1crypto import tsp

    q = tsp.TimeStampReq.load(tsa.queries[-1])
    assert q["message_imprint"]["hashed_message"].native == DIGEST
    assert q["message_imprint"]["hash_algorithm"]["algorithm"].native == "sha256"
    assert q["cert_req"].native is True and q["nonce"].native > 0
    # two requests carry different nonces and get different serials
    info2 = verify_receipt(request_timestamp(DIGEST, tsa.url), DIGEST)
    assert tsp.TimeStampReq.load(tsa.queries[-1])["nonce"].native != q["nonce"].native
    assert info2.serial != info.serial


def _der():
    from cryptography.hazmat.primitives.serialization import Encoding

    return Encoding.DER


def test_trusted_roots_in_every_form(tsa):
    receipt = request_timestamp(DIGEST, tsa.url, trusted=tsa.ca_pem_path)
    ca_pem = tsa.ca_pem_path.read_bytes()
    for trusted in (tsa.ca_pem_path, str(tsa.ca_pem_path), ca_pem, tsa.ca_cert.public_bytes(_der()),
                    tsa.ca_cert, [tsa.ca_pem_path], tsa.tsa_pem_path):
        assert verify_receipt(receipt, DIGEST, trusted=trusted).chain_checked is True


def test_openssl_verifies_the_receipt_independently(tsa, tmp_path):
    """The imprint is the entry hash itself: `openssl ts -verify -digest <hex>` agrees."""
    f = tmp_path / (DIGEST.hex() + ".tsr")
    f.write_bytes(request_timestamp(DIGEST, tsa.url))
    cmd = ["openssl", "ts", "-verify", "-in", str(f), "-CAfile", str(tsa.ca_pem_path)]
    assert subprocess.run([*cmd, "-digest", DIGEST.hex()], capture_output=True).returncode == 0
    assert subprocess.run([*cmd, "-digest", OTHER.hex()], capture_output=True).returncode != 0


def test_bare_token_verifies(tsa):
    from asn1crypto import tsp

    token = tsp.TimeStampResp.load(request_timestamp(DIGEST, tsa.url))["time_stamp_token"].dump()
    assert verify_receipt(token, DIGEST, trusted=tsa.ca_pem_path).tsa == tsa.subject


def test_another_digest_fails(tsa):
    receipt = request_timestamp(DIGEST, tsa.url)
    with pytest.raises(TimestampError) as e:
        verify_receipt(receipt, OTHER, name="r.tsr")
    assert _one_line(e) == f"r.tsr stamps digest {DIGEST.hex()[:16]}…, not {OTHER.hex()[:16]}…"


def test_flipped_signature_byte_fails(tsa):
    receipt = bytearray(request_timestamp(DIGEST, tsa.url))
    receipt[-5] ^= 0x01  # inside the ECDSA signature, the last field of the response
    with pytest.raises(TimestampError) as e:
        verify_receipt(bytes(receipt), DIGEST)
    assert "bad signature" in _one_line(e)


def test_every_flipped_byte_fails(tsa):
    """No single-bit change anywhere in a receipt goes unnoticed, unsigned fields included."""
    receipt = request_timestamp(DIGEST, tsa.url)
    passed = []
    for i in range(len(receipt)):
        bad = bytearray(receipt)
        bad[i] ^= 0x01
        try:
            verify_receipt(bytes(bad), DIGEST)
            passed.append(i)
        except TimestampError as e:
            assert "\n" not in str(e)
    assert passed == []


def test_truncated_empty_and_garbage_receipts_fail():
    for bad, reason in ((b"", "is empty"), (b"\x30\x03\x02\x01", "is not an RFC 3161 timestamp response"),
                        (b"not a receipt", "is not an RFC 3161 timestamp response")):
        with pytest.raises(TimestampError) as e:
            verify_receipt(bad, DIGEST, name="x.tsr")
        assert _one_line(e).startswith("x.tsr ") and reason in str(e.value)


def test_receipt_of_another_tsa_is_untrusted(tsa, tsa_factory):
    other = tsa_factory("Other TSA")
    receipt = request_timestamp(DIGEST, other.url)
    assert verify_receipt(receipt, DIGEST).tsa == "CN=Other TSA,O=prereg-kit tests"  # self-consistent
    with pytest.raises(TimestampError) as e:
        verify_receipt(receipt, DIGEST, trusted=tsa.ca_pem_path)
    assert "is untrusted: its TSA certificate does not chain to the trusted certificates" in _one_line(e)
    with pytest.raises(TimestampError) as e:  # pinning the first TSA's certificate
        verify_receipt(receipt, DIGEST, trusted=tsa.tsa_pem_path)
    assert "is untrusted: none of the trusted certificates is a root" in _one_line(e)
    # the requester refuses it at once when told whom to trust
    with pytest.raises(TimestampError) as e:
        request_timestamp(DIGEST, other.url, trusted=tsa.ca_pem_path)
    assert "answered a receipt that does not verify" in _one_line(e) and "untrusted" in str(e.value)


def test_forged_token_with_own_key_passes_only_untrusted(tsa):
    """A forger who re-signs a token (here back-dated by a year) with a key of their own: the
    receipt is self-consistent, so only ``trusted`` catches it; editing the time without
    re-signing breaks the signature."""
    from asn1crypto import tsp
    from cryptography.hazmat.primitives.asymmetric import ec
    from tsa import make_ca

    receipt = request_timestamp(DIGEST, tsa.url)
    tst = tsp.TimeStampResp.load(receipt)["time_stamp_token"]["content"]["encap_content_info"]["content"].parsed
    back = tst["gen_time"].native - timedelta(days=365)
    forged_tst = tsp.TSTInfo({**{k: tst[k] for k in ("version", "policy", "message_imprint", "serial_number",
                                                     "accuracy", "ordering", "nonce", "tsa")},
                              "gen_time": back}).dump()
    with pytest.raises(TimestampError) as e:  # edited time, old signature
        verify_receipt(_swap_tst(receipt, forged_tst), DIGEST)
    assert "bad signature (the signed TSTInfo does not match its message digest)" in _one_line(e)

    ca_key, ca_cert = make_ca("Forger CA")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = make_tsa_cert(ca_key, ca_cert, key, "Test TSA", not_before=back - timedelta(days=1))
    forged = resign(receipt, key, cert, econtent=forged_tst)
    info = verify_receipt(forged, DIGEST)
    assert info.gen_time == back and info.chain_checked is False and info.tsa == tsa.subject
    with pytest.raises(TimestampError) as e:
        verify_receipt(forged, DIGEST, trusted=tsa.ca_pem_path)
    assert "is untrusted" in _one_line(e)


def _swap_tst(receipt: bytes, tst_der: bytes) -> bytes:
    from asn1crypto import cms, tsp

    resp = tsp.TimeStampResp.load(receipt)
    resp["time_stamp_token"]["content"]["encap_content_info"]["content"] = cms.ParsableOctetString(tst_der)
    return resp.dump(force=True)


@pytest.mark.parametrize("eku, critical, reason", [
    (False, True, "the TSA certificate has no extended key usage (timeStamping)"),
    (True, False, "the TSA certificate's extended key usage is not a critical, sole timeStamping"),
])
def test_certificate_without_critical_timestamping_eku_fails(tsa, eku, critical, reason):
    cert = make_tsa_cert(tsa.ca_key, tsa.ca_cert, tsa.key, "Test TSA", eku=eku, eku_critical=critical)
    forged = resign(request_timestamp(DIGEST, tsa.url), tsa.key, cert)
    with pytest.raises(TimestampError) as e:
        verify_receipt(forged, DIGEST)
    assert _one_line(e) == f"receipt: {reason}"


def test_certificate_not_valid_at_stamped_time_fails(tsa):
    receipt = request_timestamp(DIGEST, tsa.url)
    later = verify_receipt(receipt, DIGEST).gen_time + timedelta(days=2)  # the TSA's clock, not the test's
    cert = make_tsa_cert(tsa.ca_key, tsa.ca_cert, tsa.key, "Test TSA", not_before=later)
    forged = resign(receipt, tsa.key, cert)
    with pytest.raises(TimestampError) as e:
        verify_receipt(forged, DIGEST)
    assert "the TSA certificate was not valid at the stamped time" in _one_line(e)


def test_expired_tsa_certificate_still_proves_what_it_stamped_while_valid(tsa):
    """The chain is checked at the stamped time: a receipt outlives its TSA certificate."""
    from asn1crypto import tsp

    stamped = datetime(2021, 3, 1, 8, 0, 0, tzinfo=timezone.utc)  # fixed: valid 20 h around it, long expired
    cert = make_tsa_cert(tsa.ca_key, tsa.ca_cert, tsa.key, "Test TSA", not_before=stamped - timedelta(hours=8),
                         not_after=stamped + timedelta(hours=11))
    receipt = request_timestamp(DIGEST, tsa.url)
    tst = tsp.TimeStampResp.load(receipt)["time_stamp_token"]["content"]["encap_content_info"]["content"].parsed
    fields = ("version", "policy", "message_imprint", "serial_number", "accuracy", "ordering", "nonce", "tsa")
    then = tsp.TSTInfo({**{k: tst[k] for k in fields}, "gen_time": stamped}).dump()
    info = verify_receipt(resign(receipt, tsa.key, cert, econtent=then), DIGEST, trusted=tsa.ca_pem_path)
    assert info.chain_checked and info.gen_time == stamped
    with pytest.raises(TimestampError) as e:  # the same certificate on a stamp made after it expired
        verify_receipt(resign(receipt, tsa.key, cert), DIGEST, trusted=tsa.ca_pem_path)
    assert "the TSA certificate was not valid at the stamped time" in _one_line(e)


def test_swapped_certificate_fails_the_ess_binding(tsa):
    """Same key, another certificate than the one the signature names (ESS signing-certificate)."""
    other_cert = make_tsa_cert(tsa.ca_key, tsa.ca_cert, tsa.key, "Test TSA")
    forged = resign(request_timestamp(DIGEST, tsa.url), tsa.key, other_cert, ess_cert=tsa.cert)
    with pytest.raises(TimestampError) as e:
        verify_receipt(forged, DIGEST)
    assert _one_line(e) == "receipt: its embedded certificate is not the one it was signed with"


def test_chain_embedded_by_the_tsa_verifies(tsa_factory):
    """OpenSSL writes the certificate set out of DER order; the stored receipt is put in order
    (the set is not signed) and still refuses any flipped byte outside the embedded CA certificate."""
    from rfc3161_client import decode_timestamp_response

    t = tsa_factory("Chain TSA", embed_chain=True)
    raw = t.reply(build_request(DIGEST, 5))
    with pytest.raises(ValueError, match="InvalidSetOrdering"):
        decode_timestamp_response(raw)
    assert verify_receipt(raw, DIGEST, trusted=t.ca_pem_path).chain_checked
    receipt = request_timestamp(DIGEST, t.url)
    decode_timestamp_response(receipt)  # what is stored is DER
    assert verify_receipt(receipt, DIGEST, trusted=t.ca_pem_path).chain_checked
    ca = t.ca_cert.public_bytes(_der())
    start = raw.index(ca)
    for i in [*range(0, start, 3), *range(start + len(ca), len(raw), 3)]:
        bad = bytearray(raw)
        bad[i] ^= 0x01
        with pytest.raises(TimestampError):
            verify_receipt(bytes(bad), DIGEST)


# January and December in the default suite (the months a date that no longer parsed failed in),
# every month in the slow step
@pytest.mark.parametrize("month", [m if m in (1, 12) else pytest.param(m, marks=pytest.mark.slow)
                                   for m in range(1, 13)])
def test_embedded_ca_certificate_is_checked_where_it_can_be(tsa_factory, month):
    """The embedded CA certificate is not bound by the token's signature: its own (self-)signature
    is checked, and a certificate off the signer's chain is refused. Its issuer name is not
    checkable offline (then it claims an issuer that is not embedded, like an intermediate).

    Its validity is altered in the seconds' last digit, which stays a digit whatever the date, and
    the certificates are dated in every month (the seconds through all ten digits): the refusal is
    the signature's on any day, not a date that no longer parses."""
    made = datetime(2020, month, 28, 11 + month, 59, 7 * month % 60, tzinfo=timezone.utc)
    t = tsa_factory("Chain TSA", embed_chain=True, valid_from=made)
    raw = t.reply(build_request(DIGEST, 5))
    ca = t.ca_cert.public_bytes(_der())
    start = raw.index(ca)
    not_before = b"\x17\x0d" + made.strftime("%y%m%d%H%M%SZ").encode()  # UTCTime, 13 bytes
    assert ca.count(not_before) == 1
    seconds_digit = ca.index(not_before) + 2 + 11
    for offset, reason in ((len(ca) - 3, "is not signed by CN=Chain TSA Root CA"),  # its signature
                           (seconds_digit, "is not signed by CN=Chain TSA Root CA")):  # its validity
        bad = bytearray(raw)
        bad[start + offset] ^= 0x01
        with pytest.raises(TimestampError) as e:
            verify_receipt(bytes(bad), DIGEST)
        assert reason in _one_line(e)
    from asn1crypto import cms, tsp
    from asn1crypto import x509 as ax509
    from tsa import make_ca

    resp = tsp.TimeStampResp.load(raw)
    sd = resp["time_stamp_token"]["content"]
    stranger = ax509.Certificate.load(make_ca("Stranger CA")[1].public_bytes(_der()))
    sd["certificates"] = [cms.CertificateChoices({"certificate": ax509.Certificate.load(c.chosen.dump())})
                          for c in sd["certificates"] if c.chosen.dump() != ca] + [
        cms.CertificateChoices({"certificate": stranger})]
    swapped = resp.dump(force=True)
    with pytest.raises(TimestampError) as e:
        verify_receipt(swapped, DIGEST)
    assert "embeds a certificate that is not on its signer's chain (CN=Stranger CA" in _one_line(e)


@pytest.mark.parametrize("mode, reason", [
    ("wrong_nonce", "answered with nonce"),
    ("wrong_imprint", "stamped another digest"),
    ("reject", "refused the request: rejection (Message digest algorithm is not supported; failure: bad_alg)"),
    ("http_error", "answered HTTP 500"),
    ("garbage", "is not an RFC 3161 timestamp response"),
    ("huge", "answered more than 1048576 bytes"),
])
def test_misbehaving_tsa_is_refused(tsa_factory, mode, reason):
    t = tsa_factory("Bad TSA", mode=mode)
    with pytest.raises(TimestampError) as e:
        request_timestamp(DIGEST, t.url)
    assert reason in _one_line(e) and t.url in str(e.value)


def test_misbehaving_tsa_receipt_fails_verification_too(tsa_factory):
    from asn1crypto import core, tsp

    t = tsa_factory("Bad TSA", mode="wrong_imprint")
    q = tsp.TimeStampReq({"version": "v1", "message_imprint": {
        "hash_algorithm": {"algorithm": "sha256", "parameters": core.Null()}, "hashed_message": DIGEST},
        "nonce": 7, "cert_req": True}).dump()
    with pytest.raises(TimestampError) as e:
        verify_receipt(t.reply(q), DIGEST)
    assert "receipt stamps digest" in _one_line(e)


def test_unreachable_tsa_fails_without_waiting_for_the_timeout():
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    with pytest.raises(TimestampError) as e:
        request_timestamp(DIGEST, f"http://127.0.0.1:{port}/tsr", timeout=120)
    assert time.monotonic() - t0 < 120  # refused at once, not timed out
    assert "timed out" not in _one_line(e)
    assert _one_line(e).startswith(f"timestamp authority http://127.0.0.1:{port}/tsr is unreachable: ")


def test_silent_tsa_times_out():
    with socket.socket() as s:  # accepts connections (backlog) but never answers
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        url = f"http://127.0.0.1:{s.getsockname()[1]}/tsr"
        t0 = time.monotonic()
        with pytest.raises(TimestampError) as e:
            request_timestamp(DIGEST, url, timeout=0.5)
        assert time.monotonic() - t0 < 3
    assert _one_line(e) == f"timestamp authority {url} did not answer within 0.5 s"


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/x", "127.0.0.1:80", ""])
def test_non_http_url_is_refused(url):
    with pytest.raises(TimestampError) as e:
        request_timestamp(DIGEST, url)
    assert _one_line(e) == f"timestamp authority URL must be http(s)://host/..., got {url!r}"


def test_bad_digest_and_bad_trusted_file(tsa, tmp_path):
    with pytest.raises(TimestampError) as e:
        request_timestamp(b"short", tsa.url)
    assert "a timestamp digest is 32 bytes of sha256" in _one_line(e)
    receipt = request_timestamp(DIGEST, tsa.url)
    with pytest.raises(TimestampError) as e:
        verify_receipt(receipt, DIGEST, trusted=tmp_path / "missing.pem")
    assert _one_line(e).startswith(f"cannot read trusted certificate {tmp_path / 'missing.pem'}")
    junk = tmp_path / "junk.pem"
    junk.write_text("-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")
    with pytest.raises(TimestampError) as e:
        verify_receipt(receipt, DIGEST, trusted=junk)
    assert _one_line(e).startswith(f"{junk} is not a PEM or DER certificate")


def test_missing_extra_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "rfc3161_client", None)
    with pytest.raises(TimestampError) as e:
        verify_receipt(b"x", DIGEST)
    assert _one_line(e) == ("timestamps need the 'timestamp' extra (rfc3161_client is not installed): "
                            "pip install 'prereg-kit[timestamp]'")


def test_receipt_names_follow_entry_hashes():
    h = "sha256:" + DIGEST.hex()
    assert receipt_name(h) == DIGEST.hex() + ".tsr" and digest_of(h) == DIGEST
    for bad in ("sha256:" + "A" * 64, DIGEST.hex(), "sha256:" + "0" * 63, None):
        with pytest.raises(TimestampError):
            digest_of(bad)


# ---------------------------------------------------------------------------------------------
# receipts of a lock chain


@pytest.fixture
def chain(study):
    """A lock entry and an amendment a minute later."""
    plan = study / "plan.toml"
    t0 = datetime.now(timezone.utc) - timedelta(minutes=5)
    lock_at(plan, t0)
    plan.write_text(plan.read_text() + "\n# a comment\n")
    amend_at(plan, "comment", t0 + timedelta(minutes=1))
    return read_chain(plan).entries


def _stamp(tsa, entry) -> tuple[str, bytes]:
    return receipt_name(entry["hash"]), request_timestamp(digest_of(entry["hash"]), tsa.url)


def test_check_receipts_proves_entries_up_to_the_stamped_one(tsa, chain):
    name0, r0 = _stamp(tsa, chain[0])
    rep = check_receipts(chain, {name0: r0}, trusted=tsa.ca_pem_path)
    assert rep.ok and set(rep.proven) == {0}
    assert rep.lines()[1] == "entry 1: no timestamp"
    name1, r1 = _stamp(tsa, chain[1])
    rep = check_receipts(chain, {name0: r0, name1: r1}, trusted=tsa.ca_pem_path)
    assert rep.ok and rep.proven[0].name == name0 and rep.proven[1].name == name1
    assert rep.proven[1].info.chain_checked and rep.proven[0].info.gen_time <= rep.proven[1].info.gen_time
    # a stamp on the head alone proves every entry before it, through the chain
    rep = check_receipts(chain, {name1: r1})
    assert rep.ok and rep.proven[0].name == name1
    assert rep.lines()[0].startswith("entry 0: existed by ") and f"({name1} through entry 1" not in rep.lines()[0]
    assert f"[{name1} (through entry 1); TSA not checked against trusted roots]" in rep.lines()[0]


def test_rewritten_chain_orphans_its_receipts(tsa, chain, study):
    """The attack timestamps exist for: rewrite the whole chain back-dated, hashes recomputed."""
    name0, r0 = _stamp(tsa, chain[0])
    forged, prev = [], None
    for e in chain:
        e = {**e, "time": "2020-01-01T00:00:00+00:00", "prev": prev}
        e["hash"] = entry_hash(e)
        forged.append(e)
        prev = e["hash"]
    lock = study / "plan.lock"
    doc = {**json.loads(lock.read_text()), "entries": forged}
    lock.write_text(serialize(doc))
    entries = read_chain(study / "plan.toml").entries  # the file alone does not tell
    rep = check_receipts(entries, {name0: r0})
    assert not rep.ok and rep.proven == {}
    assert rep.problems == [f"{name0} stamps {name0[:16]}… (at {rep.checks[0].info.gen_time.isoformat()}), "
                            f"which is no entry of the chain: the chain was rewritten after it was stamped"]


def test_renamed_misnamed_and_foreign_receipts_are_reported(tsa, tsa_factory, chain):
    name0, r0 = _stamp(tsa, chain[0])
    name1 = receipt_name(chain[1]["hash"])
    rep = check_receipts(chain, {name1: r0, "notes.tsr": r0})  # entry 0's receipt under entry 1's name
    assert not rep.ok and rep.proven == {}
    assert sorted(rep.problems) == sorted([f"{name1} stamps digest {name0[:16]}…, not {name1[:16]}…",
                                           "notes.tsr: a receipt is named <64 hex of the entry hash>.tsr"])
    other = tsa_factory("Other TSA")
    _, r_other = _stamp(other, chain[0])
    rep = check_receipts(chain, {name0: r_other}, trusted=tsa.ca_pem_path)
    assert not rep.ok and rep.proven == {} and "is untrusted" in rep.problems[0]


def test_local_tsa_stops_at_teardown(tmp_path):
    t = LocalTSA(tmp_path / "tsa")
    request_timestamp(DIGEST, t.url)
    t.close()
    with pytest.raises(TimestampError) as e:
        request_timestamp(DIGEST, t.url, timeout=2)
    assert "is unreachable" in _one_line(e)


def test_local_tsa_needs_openssl(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="needs the openssl command"):
        LocalTSA(tmp_path / "tsa")


# ---------------------------------------------------------------------------------------------
# other signature algorithms and real TSAs



def test_rsa_tsa_round_trip(tsa_factory):
    t = tsa_factory("RSA TSA", key_type="rsa")
    receipt = request_timestamp(DIGEST, t.url, trusted=t.ca_pem_path)
    assert verify_receipt(receipt, DIGEST, trusted=t.ca_pem_path).tsa == "CN=RSA TSA,O=prereg-kit tests"
    bad = bytearray(receipt)
    bad[-7] ^= 0x01  # inside the RSA signature
    with pytest.raises(TimestampError) as e:
        verify_receipt(bytes(bad), DIGEST)
    assert "bad signature (it does not verify with the TSA certificate)" in _one_line(e)


def test_rsa_pss_signature_is_refused(tsa_factory):
    """OpenSSL's PKCS#7 verification (``openssl ts -verify``, rfc3161-client's chain check) cannot
    check RSASSA-PSS, so such a receipt could not be checked independently: refused by name."""
    t = tsa_factory("RSA TSA", key_type="rsa")
    pss = resign(request_timestamp(DIGEST, t.url), t.key, t.cert, pss=True)
    with pytest.raises(TimestampError) as e:
        verify_receipt(pss, DIGEST)
    assert _one_line(e) == "receipt: unsupported signature algorithm rsassa_pss (accepted: RSA PKCS#1 v1.5, ECDSA)"


def test_resigned_receipt_with_a_key_not_the_certificates_fails(tsa):
    from cryptography.hazmat.primitives.asymmetric import ec

    forged = resign(request_timestamp(DIGEST, tsa.url), ec.generate_private_key(ec.SECP256R1()), tsa.cert)
    with pytest.raises(TimestampError) as e:
        verify_receipt(forged, DIGEST)
    assert _one_line(e) == "receipt: bad signature (it does not verify with the TSA certificate)"


def test_sha512_imprint_is_refused(tsa, tmp_path):
    """The chain's hashes are sha256; a receipt over another hash stamps something else."""
    import urllib.request

    query = tmp_path / "q.tsq"
    subprocess.run(["openssl", "ts", "-query", "-digest", hashlib.sha512(b"x").hexdigest(), "-sha512", "-cert",
                    "-out", str(query)], check=True, capture_output=True)
    req = urllib.request.Request(tsa.url, data=query.read_bytes(), headers={"Content-Type": "application/timestamp-query"})
    with urllib.request.urlopen(req, timeout=30) as r:
        receipt = r.read()
    with pytest.raises(TimestampError) as e:
        verify_receipt(receipt, DIGEST, name="other.tsr")
    assert _one_line(e) == "other.tsr stamps a sha512 digest, not sha256"
