"""A local RFC 3161 time-stamping authority for tests: a throwaway CA and TSA on 127.0.0.1.

Certificates are made with ``cryptography`` (EC P-256, the TSA certificate with the critical
timeStamping extended key usage); each query is answered by ``openssl ts -reply``, an independent
implementation, so the client and verifier are tested against a real TSA and not against themselves.

``conftest.py`` registers the fixtures for every test file:

- ``tsa``: a running :class:`LocalTSA` (``.url``, ``.ca_pem_path``, ``.tsa_pem_path``, ``.subject``);
- ``tsa_factory(name, **kw)``: start another, different TSA (its own CA and key), or a misbehaving
  one (``mode=...``), one that embeds its CA (``embed_chain=True``) or signs with RSA.

Every server listens on loopback only and is shut down at fixture teardown.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import http.server
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

MODES = ("ok", "wrong_imprint", "wrong_nonce", "reject", "http_error", "garbage", "huge")

# The local TSA stamps at the real time (``openssl ts -reply`` takes no clock), so its certificates
# carry fixed dates over a window that holds any day the tests run: a test that alters a certificate's
# date alters the same digits on every day of the year. Before 2050, so every date is a UTCTime.
VALID_FROM = dt.datetime(2020, 6, 15, 12, 0, 0, tzinfo=dt.timezone.utc)
VALID_UNTIL = dt.datetime(2049, 6, 15, 12, 0, 0, tzinfo=dt.timezone.utc)


def _name(cn: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "prereg-kit tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key_usage(*, sign: bool, ca: bool):
    from cryptography import x509

    return x509.KeyUsage(digital_signature=sign, content_commitment=sign, key_encipherment=False,
                         data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=ca,
                         encipher_only=False, decipher_only=False)


def make_tsa_cert(ca_key, ca_cert, tsa_key, cn: str, *, eku: bool = True, eku_critical: bool = True,
                  days: int = 30, not_before: dt.datetime | None = None,
                  not_after: dt.datetime | None = None):
    """A TSA certificate for ``tsa_key`` issued by the CA (timeStamping EKU unless told otherwise),
    valid from ``not_before`` for ``days`` (or to ``not_after``); by default over the fixed window."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    start = not_before or VALID_FROM
    end = not_after or (VALID_UNTIL if not_before is None else start + dt.timedelta(days=days))
    b = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_cert.subject)
         .public_key(tsa_key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(start).not_valid_after(end)
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(_key_usage(sign=True, ca=False), critical=True)
         .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False))
    if eku:
        b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.TIME_STAMPING]), critical=eku_critical)
    return b.sign(ca_key, hashes.SHA256())


def make_ca(cn: str, *, not_before: dt.datetime = VALID_FROM):
    """A self-signed CA: (key, certificate), valid from ``not_before`` to the window's end."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(not_before).not_valid_after(VALID_UNTIL)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(_key_usage(sign=False, ca=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


_CONFIG = """\
[ tsa ]
default_tsa = tsa_ok

[ tsa_ok ]
dir = {dir}
serial = $dir/serial
crypto_device = builtin
signer_cert = $dir/tsa.pem
signer_key = $dir/tsa.key
signer_digest = sha256
default_policy = 1.3.6.1.4.1.99999.1
digests = {digests}
accuracy = secs:1
ordering = yes
tsa_name = yes
ess_cert_id_chain = no
ess_cert_id_alg = sha256
{certs}
"""


class LocalTSA:
    """An RFC 3161 TSA on 127.0.0.1 answering with ``openssl ts -reply``.

    ``mode`` makes it misbehave: ``wrong_imprint`` / ``wrong_nonce`` sign an altered query,
    ``reject`` answers a rejection (no sha256 support), ``http_error`` answers HTTP 500,
    ``garbage`` answers 200 with bytes that are no response, ``huge`` with 2 MiB. ``embed_chain`` adds the CA
    certificate to every token; ``key_type`` "rsa" signs with RSA PKCS#1 v1.5 instead of ECDSA.
    ``valid_from`` dates both certificates (they stay valid to the end of the fixed window).
    ``queries`` keeps the DER queries received.
    """

    def __init__(self, directory: Path, name: str = "Test TSA", *, mode: str = "ok",
                 embed_chain: bool = False, key_type: str = "ec", valid_from: dt.datetime = VALID_FROM):
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec, rsa

        if shutil.which("openssl") is None:
            raise RuntimeError("the local TSA needs the openssl command (Debian package openssl)")
        assert mode in MODES, mode
        self.mode = mode
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca_key, self.ca_cert = make_ca(f"{name} Root CA", not_before=valid_from)
        self.key = (rsa.generate_private_key(65537, 2048) if key_type == "rsa"
                    else ec.generate_private_key(ec.SECP256R1()))
        self.cert = make_tsa_cert(self.ca_key, self.ca_cert, self.key, name, not_before=valid_from,
                                  not_after=VALID_UNTIL)
        pem = serialization.Encoding.PEM
        self.ca_pem_path = self.dir / "ca.pem"
        self.tsa_pem_path = self.dir / "tsa.pem"
        self.ca_pem_path.write_bytes(self.ca_cert.public_bytes(pem))
        self.tsa_pem_path.write_bytes(self.cert.public_bytes(pem))
        (self.dir / "tsa.key").write_bytes(self.key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        (self.dir / "serial").write_text("01\n")
        (self.dir / "tsa.cnf").write_text(_CONFIG.format(
            dir=self.dir, digests="sha512" if mode == "reject" else "sha256, sha384, sha512",
            certs=f"certs = {self.ca_pem_path}" if embed_chain else ""))
        self.subject = self.cert.subject.rfc4514_string()
        self.queries: list[bytes] = []
        self._lock = threading.Lock()
        self._server = http.server.HTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/tsr"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def reply(self, query: bytes) -> bytes:
        """The DER response ``openssl ts -reply`` gives to ``query`` (after the mode's alteration)."""
        query = self._alter(query)
        with self._lock:
            qf = self.dir / "query.tsq"
            qf.write_bytes(query)
            res = subprocess.run(["openssl", "ts", "-reply", "-config", str(self.dir / "tsa.cnf"),
                                  "-queryfile", str(qf)], capture_output=True, timeout=30)
        if res.returncode != 0:
            raise RuntimeError(res.stderr.decode(errors="replace"))
        return res.stdout

    def _alter(self, query: bytes) -> bytes:
        if self.mode not in ("wrong_imprint", "wrong_nonce"):
            return query
        from asn1crypto import tsp

        q = tsp.TimeStampReq.load(query)
        native = {"version": "v1", "message_imprint": q["message_imprint"], "cert_req": q["cert_req"],
                  "nonce": q["nonce"].native}
        if self.mode == "wrong_imprint":
            native["message_imprint"] = {"hash_algorithm": {"algorithm": "sha256"},
                                         "hashed_message": hashlib.sha256(b"something else").digest()}
        else:
            native["nonce"] = q["nonce"].native + 1
        return tsp.TimeStampReq(native).dump()

    def _handler(self):
        tsa = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                tsa.queries.append(body)
                if tsa.mode == "http_error" or self.headers.get("Content-Type") != "application/timestamp-query":
                    self.send_error(500, "TSA failure")
                    return
                out = {"garbage": b"this is no timestamp response",
                       "huge": bytes(2 << 20)}.get(tsa.mode) or tsa.reply(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/timestamp-reply")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):  # keep test output clean
                pass

        return Handler

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def resign(receipt: bytes, key, cert, *, ess_cert=None, econtent: bytes | None = None,
           pss: bool = False) -> bytes:
    """``receipt`` re-signed with ``key`` and embedding ``cert`` (a forger's tool, for hostile tests).

    The ESS attribute names ``ess_cert`` (default ``cert``); ``econtent`` replaces the signed TSTInfo
    bytes (the message digest attribute is updated to match). An RSA key signs with PKCS#1 v1.5,
    or RSASSA-PSS with ``pss``.
    """
    from asn1crypto import cms, tsp
    from asn1crypto import x509 as ax509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

    resp = tsp.TimeStampResp.load(receipt)
    token = resp["time_stamp_token"]
    sd = token["content"]
    if econtent is not None:
        sd["encap_content_info"]["content"] = cms.ParsableOctetString(econtent)
    content = sd["encap_content_info"]["content"].contents
    der = cert.public_bytes(serialization.Encoding.DER)
    ess_der = (ess_cert or cert).public_bytes(serialization.Encoding.DER)
    si = sd["signer_infos"][0]
    acert = ax509.Certificate.load(der)
    si["sid"] = cms.SignerIdentifier({"issuer_and_serial_number": {
        "issuer": acert.issuer, "serial_number": acert.serial_number}})
    attrs = []
    for a in si["signed_attrs"]:
        t = a["type"].native
        if t == "message_digest":
            a = cms.CMSAttribute({"type": "message_digest", "values": [hashlib.sha256(content).digest()]})
        elif t == "signing_certificate_v2":
            a = cms.CMSAttribute({"type": "signing_certificate_v2", "values": [
                {"certs": [{"hash_algorithm": {"algorithm": "sha256"},
                            "cert_hash": hashlib.sha256(ess_der).digest()}]}]})
        attrs.append(a)
    si["signed_attrs"] = cms.CMSAttributes(attrs)
    signed = si["signed_attrs"].untag().dump()
    if not isinstance(key, rsa.RSAPrivateKey):
        si["signature_algorithm"] = {"algorithm": "sha256_ecdsa"}
        si["signature"] = key.sign(signed, ec.ECDSA(hashes.SHA256()))
    elif pss:
        si["signature_algorithm"] = {"algorithm": "rsassa_pss", "parameters": {
            "hash_algorithm": {"algorithm": "sha256"},
            "mask_gen_algorithm": {"algorithm": "mgf1", "parameters": {"algorithm": "sha256"}},
            "salt_length": 32}}
        si["signature"] = key.sign(signed, padding.PSS(padding.MGF1(hashes.SHA256()), 32), hashes.SHA256())
    else:
        si["signature_algorithm"] = {"algorithm": "sha256_rsa"}
        si["signature"] = key.sign(signed, padding.PKCS1v15(), hashes.SHA256())
    sd["certificates"] = [cms.CertificateChoices({"certificate": acert})]
    return tsp.TimeStampResp({"status": resp["status"], "time_stamp_token": token}).dump()


@pytest.fixture
def tsa_factory(tmp_path_factory):
    """Start local TSAs: ``tsa_factory(name="Other TSA", mode="ok", embed_chain=False)``."""
    started: list[LocalTSA] = []

    def start(name: str = "Test TSA", **kw) -> LocalTSA:
        t = LocalTSA(tmp_path_factory.mktemp("tsa"), name, **kw)
        started.append(t)
        return t

    yield start
    for t in started:
        t.close()


@pytest.fixture
def tsa(tsa_factory) -> LocalTSA:
    """A running local TSA (``.url``, ``.ca_pem_path``, ``.tsa_pem_path``, ``.subject``)."""
    return tsa_factory("Test TSA")
