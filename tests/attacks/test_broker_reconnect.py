"""A brokered connection the host ended while idle is made again when the server's next
request comes; by then the host's name may lead elsewhere (its address changed, a name
server that answers otherwise the second time). Attacked with a real TLS host on loopback
(its own CA, pinned) that ends each connection after one answer, and an impostor on
another loopback address, on the same port, presenting a certificate for the host's name
from a CA nobody trusts; between the two requests the name is made to lead to the
impostor. The promise: the value goes only to where the host's certificate verifies, on
the new connection as on the first. The control turns the verification off and shows the
impostor getting the value."""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from launcher.host.session_ca import SessionCA
from launcher.plan.secrets_plan import Brokered
from launcher.servers.broker import Broker
from launcher.servers.egress_proxy import EgressProxy, Refusal
from policy.egress import EgressRules
from tests.attacks.test_broker_keepalive import AUTH, HOST, SENTINEL, VALUE, KeptAlive
from tests.support.tls_upstream import make_authority

IMPOSTOR = "127.0.0.3"


@dataclass
class Outcome:
    seen: bytes  # what the server read
    host: KeptAlive
    impostor: KeptAlive
    refusals: list[Refusal]


def _get(path: str, more: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\n{AUTH}\r\n{more}\r\n".encode()


async def _tls_server(
    directory: Path, handle: Any, address: str, port: int
) -> tuple[asyncio.Server, Path]:
    ca_file, chain = make_authority(directory, [HOST])
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(chain)
    return await asyncio.start_server(handle, address, port, ssl=context), ca_file


def moved(tmp_path: Path, verify: bool = True) -> Outcome:
    """Two requests on one brokered connection, the host's name leading to the impostor
    once the first was answered (and the host had ended the connection)."""
    (tmp_path / "host").mkdir()
    (tmp_path / "impostor").mkdir()
    secret = Brokered("API_TOKEN", SENTINEL, VALUE, ((HOST, None),))
    refusals: list[Refusal] = []

    async def scenario() -> Outcome:
        host, impostor = KeptAlive(drop=True), KeptAlive()
        real, ca_file = await _tls_server(tmp_path / "host", host.handle, "127.0.0.1", 0)
        port = real.sockets[0].getsockname()[1]
        fake, _ = await _tls_server(tmp_path / "impostor", impostor.handle, IMPOSTOR, port)
        rules = EgressRules.from_config([f"{HOST}:{port}"], [], {HOST: "127.0.0.1"})
        session_ca = SessionCA("probe")
        broker = Broker([secret], session_ca)
        broker.upstream.load_verify_locations(ca_file)  # the host's CA, pinned
        if not verify:
            broker.upstream.check_hostname = False
            broker.upstream.verify_mode = ssl.CERT_NONE
        proxy = EgressProxy("probe", rules, str(tmp_path / "egress.sock"), refusals.append, broker)
        await proxy.start()
        try:
            reader, writer = await asyncio.open_unix_connection(str(tmp_path / "egress.sock"))
            writer.write(f"CONNECT {HOST}:{port} HTTP/1.1\r\n\r\n".encode())
            await reader.readuntil(b"\r\n\r\n")
            trusted = ssl.create_default_context(cadata=session_ca.pem().decode())
            await writer.start_tls(trusted, server_hostname=HOST)
            writer.write(_get("/1"))
            seen = await reader.readuntil(b"\r\n0\r\n\r\n")
            await asyncio.wait_for(host.ended.wait(), 60)  # the host ended it, idle
            cast(dict[str, str], rules.hosts)[HOST] = IMPOSTOR  # the name now leads there
            writer.write(_get("/2", "Connection: close\r\n"))
            try:
                async with asyncio.timeout(60):
                    while more := await reader.read(65536):
                        seen += more
            except (ConnectionError, ssl.SSLError):
                pass
            writer.close()
            return Outcome(seen, host, impostor, refusals)
        finally:
            await proxy.stop()
            for server in (real, fake):
                server.close()
                await server.wait_closed()

    return asyncio.run(scenario())


def _loopback_alias() -> bool:
    try:
        import socket

        with socket.socket() as probe:
            probe.bind((IMPOSTOR, 0))
    except OSError:
        return False
    return True


needs_alias = pytest.mark.skipif(not _loopback_alias(), reason=f"needs {IMPOSTOR} on loopback")


@needs_alias
def test_a_new_connection_to_a_name_that_leads_elsewhere_takes_the_value_nowhere(
    tmp_path: Path,
) -> None:
    outcome = moved(tmp_path)
    assert [f"Bearer {VALUE}".encode() in r for r in outcome.host.requests] == [True]
    assert not outcome.impostor.requests  # no request, so no value, reached it
    assert [r for r in outcome.refusals if "certificate did not verify" in r.reason]
    assert b" 502 " in outcome.seen and VALUE.encode() not in outcome.seen


@needs_alias
def test_control_unverified_the_impostor_gets_the_value(tmp_path: Path) -> None:
    outcome = moved(tmp_path, verify=False)
    assert any(f"Bearer {VALUE}".encode() in r for r in outcome.impostor.requests)
