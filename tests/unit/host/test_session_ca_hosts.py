"""The session CA's one certificate for all of a server's brokered hosts: a client that
trusts the CA verifies it for each of them, and for nothing else."""

from __future__ import annotations

import contextlib
import ssl

import pytest

from launcher.host.session_ca import SessionCA

CA = SessionCA("probe")


def _handshake(server: ssl.SSLContext, name: str) -> None:
    """A TLS handshake in memory, the client trusting ``CA`` and asking for ``name``."""
    client = ssl.create_default_context(cadata=CA.pem().decode())
    bios = [ssl.MemoryBIO() for _ in range(4)]
    tls_client = client.wrap_bio(bios[0], bios[1], server_hostname=name)
    tls_server = server.wrap_bio(bios[2], bios[3], server_side=True)
    for _ in range(10):
        for side in (tls_client, tls_server):
            with contextlib.suppress(ssl.SSLWantReadError):
                side.do_handshake()
        bios[2].write(bios[1].read())
        bios[0].write(bios[3].read())
        if tls_client.version() and tls_server.version():
            return
    raise AssertionError("no handshake")


@pytest.mark.parametrize("name", ["api.github.com", "uploads.github.com", "127.0.0.1"])
def test_each_brokered_host_is_named_in_the_one_certificate(name: str) -> None:
    context = CA.server_context("uploads.github.com", "api.github.com", "127.0.0.1")
    assert context is CA.server_context("127.0.0.1", "api.github.com", "uploads.github.com")
    _handshake(context, name)


def test_no_other_host_is() -> None:
    context = CA.server_context("api.github.com", "uploads.github.com")
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(context, "evil.example")
