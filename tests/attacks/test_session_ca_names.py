"""A server's session CA is trusted inside its sandbox; were a certificate for any other
name ever signed with it (a leaked key, a minting mistake), a TLS client there must still
refuse it: the CA is valid for its secrets' hosts alone (X.509 name constraints). Shown with
real TLS clients (Python's ssl and curl, both OpenSSL) against a real TLS server on loopback
presenting the CA's leaf, with the control of an unconstrained CA, whose leaf for the same
other name is accepted."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from launcher.host.session_ca import SessionCA

OWN, OTHER = "api.test", "evil.test"


@contextmanager
def _serving(context: ssl.SSLContext) -> Iterator[int]:
    """A TLS server on loopback answering one HTTP request per connection, until closed."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(raw, server_side=True) as tls:
                    tls.recv(4096)
                    tls.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                    )
            except (OSError, ssl.SSLError):
                raw.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        stop.set()
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (closing alone does not)
        listener.close()
        thread.join(timeout=60)


def _python_client(ca: Path, name: str, port: int) -> str:
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=60) as raw,
            context.wrap_socket(raw, server_hostname=name) as tls,
        ):
            tls.sendall(f"GET / HTTP/1.1\r\nHost: {name}\r\n\r\n".encode())
            return "accepted: " + tls.recv(4096).decode().split("\r\n")[0]
    except ssl.SSLCertVerificationError as exc:
        return f"refused: {exc.verify_message}"


def _curl(ca: Path, name: str, port: int) -> str:
    done = subprocess.run(
        ["curl", "-sS", "--cacert", str(ca), "--resolve", f"{name}:{port}:127.0.0.1",
         f"https://{name}:{port}/"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return "accepted: " + done.stdout if done.returncode == 0 else f"refused: {done.stderr}"


def _clients() -> list[str]:
    return ["python", *(["curl"] if shutil.which("curl") else [])]


def _ask(client: str, ca: SessionCA, tmp_path: Path, name: str) -> str:
    pem = tmp_path / "ca.pem"
    pem.write_bytes(ca.pem())
    with _serving(ca.server_context(name)) as port:
        ask = _python_client if client == "python" else _curl
        return ask(pem, name, port)


@pytest.mark.parametrize("client", _clients())
def test_a_leaf_for_the_secrets_host_is_accepted(client: str, tmp_path: Path) -> None:
    said = _ask(client, SessionCA("probe", [OWN]), tmp_path, OWN)
    assert said.startswith("accepted"), said


@pytest.mark.parametrize("client", _clients())
def test_a_leaf_for_another_name_is_refused_by_a_real_client(client: str, tmp_path: Path) -> None:
    said = _ask(client, SessionCA("probe", [OWN]), tmp_path, OTHER)
    assert said.startswith("refused") and "ok" not in said, said


@pytest.mark.parametrize("client", _clients())
def test_an_address_is_refused_too(client: str, tmp_path: Path) -> None:
    # A DNS constraint alone leaves addresses free: the CA excludes every one its hosts
    # do not name.
    said = _ask(client, SessionCA("probe", [OWN]), tmp_path, "127.0.0.1")
    assert said.startswith("refused"), said


@pytest.mark.parametrize("client", _clients())
def test_control_an_unconstrained_ca_vouches_for_any_name(client: str, tmp_path: Path) -> None:
    said = _ask(client, SessionCA("probe"), tmp_path, OTHER)
    assert said.startswith("accepted"), said


ADDRESS = "127.0.0.2"


@pytest.mark.parametrize("client", _clients())
def test_a_ca_for_an_address_alone_vouches_for_no_name(client: str, tmp_path: Path) -> None:
    # A secret whose hosts are addresses only: a constraint on addresses alone leaves every
    # DNS name free, so the CA excludes them all.
    said = _ask(client, SessionCA("probe", [ADDRESS]), tmp_path, OTHER)
    assert said.startswith("refused") and "ok" not in said, said


@pytest.mark.parametrize("client", _clients())
def test_a_ca_for_an_address_alone_vouches_for_it(client: str, tmp_path: Path) -> None:
    said = _ask(client, SessionCA("probe", [ADDRESS]), tmp_path, ADDRESS)
    assert said.startswith("accepted"), said


@pytest.mark.parametrize("client", _clients())
def test_control_addresses_permitted_alone_leave_names_free(
    client: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ipaddress

    from cryptography import x509

    from launcher.host import session_ca

    def permitted_only(hosts: list[str]) -> x509.NameConstraints:
        nets = [x509.IPAddress(ipaddress.ip_network(h)) for h in hosts]
        return x509.NameConstraints(permitted_subtrees=nets, excluded_subtrees=None)

    monkeypatch.setattr(session_ca, "name_constraints", permitted_only)
    said = _ask(client, SessionCA("probe", [ADDRESS]), tmp_path, OTHER)
    assert said.startswith("accepted"), said


@pytest.mark.parametrize("client", _clients())
def test_a_ca_for_a_name_and_an_address_vouches_for_both_and_no_other(
    client: str, tmp_path: Path
) -> None:
    ca = SessionCA("probe", [OWN, ADDRESS])
    for name, outcome in ((OWN, "accepted"), (ADDRESS, "accepted"), (OTHER, "refused")):
        said = _ask(client, ca, tmp_path, name)
        assert said.startswith(outcome), (name, said)
    assert _ask(client, ca, tmp_path, "127.0.0.3").startswith("refused")
