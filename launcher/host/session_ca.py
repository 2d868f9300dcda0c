"""A certificate authority made for one server's session: the egress proxy presents a
certificate it signs for each host whose TLS it opens (a brokered secret's), and only that
server's sandbox trusts it. Made with ``cryptography`` (imported only when a server has
brokered secrets); its key never leaves the trusted process's memory."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl

LIFETIME_DAYS = 2  # how long its certificates are valid


def name_constraints(hosts: Sequence[str]) -> Any:
    """The names a CA made for ``hosts`` may vouch for: those hosts (and names under them,
    as RFC 5280 reads a DNS constraint), the addresses among them, no other address, and
    no DNS name at all when they are addresses only."""
    import ipaddress

    from cryptography import x509

    names: list[Any] = []
    addresses: list[Any] = []
    for host in hosts:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            names.append(x509.DNSName(host))
            continue
        addresses.append(x509.IPAddress(ipaddress.ip_network(address)))
    # A kind of name none of them is goes wholly excluded: a constraint on DNS names alone
    # leaves every address free, one on addresses alone every DNS name (an empty DNS name
    # is every name under the root).
    excluded: list[Any] = []
    if not addresses:
        excluded += [
            x509.IPAddress(ipaddress.ip_network("0.0.0.0/0")),
            x509.IPAddress(ipaddress.ip_network("::/0")),
        ]
    if not names:
        excluded.append(x509.DNSName(""))
    return x509.NameConstraints(
        permitted_subtrees=names + addresses, excluded_subtrees=excluded or None
    )


class SessionCA:
    """``hosts``: the only names its certificates are valid for, to any client that
    checks name constraints (OpenSSL does): a leaf for another name, however it came to be
    signed, is refused. None: unconstrained."""

    def __init__(self, server: str, hosts: Sequence[str] | None = None) -> None:
        import datetime  # here: only a certificate made needs the dates

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
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=LIFETIME_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                critical=True,
            )
        )
        if hosts is not None:
            builder = builder.add_extension(name_constraints(hosts), critical=True)
        self.cert = builder.sign(self._key, hashes.SHA256())
        self._contexts: dict[tuple[str, ...], ssl.SSLContext] = {}

    def pem(self) -> bytes:
        from cryptography.hazmat.primitives.serialization import Encoding

        return self.cert.public_bytes(Encoding.PEM)

    def server_context(self, *hosts: str) -> ssl.SSLContext:
        """A TLS server context presenting a certificate this CA signed for ``hosts``
        (one certificate for all of them: made once, whichever is asked for first)."""
        names = tuple(sorted(set(hosts)))
        if names not in self._contexts:
            self._contexts[names] = self._make_context(names)
        return self._contexts[names]

    def _make_context(self, hosts: tuple[str, ...]) -> ssl.SSLContext:
        import datetime  # here: only a certificate made needs the dates
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        alt: list[Any] = []
        for host in hosts:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                alt.append(x509.DNSName(host))
        # Its names are its SANs; a common name that reads as a DNS name would be held to
        # the CA's DNS constraints when the SANs are addresses only (every DNS name excluded).
        common = next((h for h in hosts if not _ip(h)), "ironcurtain session address")
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=LIFETIME_DAYS))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
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


def _ip(host: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


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
