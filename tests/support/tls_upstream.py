"""A loopback web server that records every request whole (Host, path, headers, body), over
TLS with a certificate of its own authority (made here) or over plain HTTP. A path that
starts ``/echo`` answers with the ``Authorization`` header it received."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


class Seen:
    """One request as it arrived."""

    def __init__(self, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.method, self.path, self.headers, self.body = method, path, headers, body

    @property
    def host(self) -> str:
        return self.headers.get("host", "").rsplit(":", 1)[0]

    def whole(self) -> str:
        """Everything the request carried, as text."""
        head = "\n".join(f"{k}: {v}" for k, v in self.headers.items())
        return f"{self.method} {self.path}\n{head}\n\n{self.body.decode(errors='replace')}"


class _Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[Seen]] = []
    protocol_version = "HTTP/1.1"

    def _any(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        type(self).seen.append(Seen(self.command, self.path, headers, body))
        page = b"recorded"
        if self.path.startswith("/echo"):
            page = ("you sent " + headers.get("authorization", "")).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(page)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(page)

    do_GET = do_POST = _any

    def log_message(self, *args: Any) -> None:
        pass


def _name(text: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


def make_authority(directory: Path, names: Sequence[str]) -> tuple[Path, Path]:
    """A CA of the test's own (its certificate written to ``ca.pem``) and a certificate it
    signed for ``names`` (key and chain in ``server.pem``)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("test upstream CA"))
        .issuer_name(_name("test upstream CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alt = [x509.DNSName(n) for n in names] + [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(_name("test upstream CA"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    ca_file, server_file = directory / "ca.pem", directory / "server.pem"
    ca_file.write_bytes(ca.public_bytes(pem))
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    server_file.write_bytes(key_pem + leaf.public_bytes(pem))
    return ca_file, server_file


@contextmanager
def recording(chain: Path | None = None) -> Iterator[tuple[int, list[Seen]]]:
    """A recording server on 127.0.0.1 (TLS with ``chain``, else plain HTTP): its port, and
    the requests it got."""
    seen: list[Seen] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if chain is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(chain)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], seen
    finally:
        server.shutdown()
        server.server_close()
