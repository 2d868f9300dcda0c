"""A certificate authority made for one server's session: the egress proxy presents a
certificate it signs for each host whose TLS it opens (a brokered secret's), and only that
server's sandbox trusts it. Made with ``cryptography`` (imported only when a server has
brokered secrets); its key never leaves the trusted process's memory."""

from __future__ import annotations

import contextlib
import datetime
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl

LIFETIME = datetime.timedelta(days=2)


class SessionCA:
    def __init__(self, server: str) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name(
            [x509.NameAttribute(NameOID.COMMON_NAME, f"ironcurtain session CA for {server}")]
        )
        now = datetime.datetime.now(datetime.UTC)
        self._name = name
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + LIFETIME)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )
        self._contexts: dict[str, ssl.SSLContext] = {}

    def pem(self) -> bytes:
        from cryptography.hazmat.primitives.serialization import Encoding

        return self.cert.public_bytes(Encoding.PEM)

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context presenting a certificate for ``host`` this CA signed."""
        if host not in self._contexts:
            self._contexts[host] = self._make_context(host)
        return self._contexts[host]

    def _make_context(self, host: str) -> ssl.SSLContext:
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec

        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        try:
            alt: Any = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            alt = x509.DNSName(host)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, host)]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + LIFETIME)
            .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        import ssl  # lazy, as tempfile: a session without a brokered server needs neither
        import tempfile

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.set_alpn_protocols(["http/1.1"])
        # load_cert_chain reads files only: one private directory, gone once read.
        with tempfile.TemporaryDirectory(prefix="ironcurtain-leaf-") as directory:
            path = os.path.join(directory, "leaf.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as file:
                file.write(key_pem + cert.public_bytes(serialization.Encoding.PEM))
            context.load_cert_chain(path)
        return context


def write_bundle(ca: SessionCA, path: str) -> None:
    """The bundle a server's sandbox trusts: the system's authorities, then ``ca``."""
    import ssl

    system = ssl.get_default_verify_paths().cafile
    data = b""
    if system and os.path.isfile(system):
        with open(system, "rb") as file:
            data = file.read().rstrip(b"\n") + b"\n"
    tmp = f"{path}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "wb") as file:
            file.write(data + ca.pem())
        os.chmod(tmp, 0o644)  # the sandbox's own uid reads it
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
