"""Network egress in process: the decision table, the proxy (in this process, with a
loopback web server standing in for the internet), and the configurations refused before
any server starts. (The real ``mcp-server-fetch`` and the probe inside the sandbox:
``tests/sandbox/test_egress.py``.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from launcher.servers import egress_proxy as egress
from launcher.servers.egress_proxy import EgressProxy, Refusal
from policy.egress import EgressRules, check_address, check_host
from tests.support.cli import ironcurtain
from tests.support.home import Home

RULES = EgressRules.from_config(
    ["example.test", "*.example.test", "api.pinned.test:443", "10.0.0.5:8080", "[fd00::7]:80"],
    ["secret.example.test"],
    {"example.test": "127.0.0.1"},
)


# (host, port, allowed before DNS?)
HOST_TABLE = [
    ("example.test", 80, True),
    ("EXAMPLE.TEST.", 80, True),  # case and trailing dot
    ("www.example.test", 8443, True),
    ("secret.example.test", 443, False),  # deniedDomains wins over *.example.test
    ("evilexample.test", 80, False),  # suffix confusion
    ("example.test.evil.net", 80, False),
    ("api.pinned.test", 443, True),
    ("api.pinned.test", 80, False),  # port scoping
    ("10.0.0.5", 8080, True),  # an address named with its port
    ("10.0.0.5", 80, False),
    ("[fd00::7]", 80, True),
    ("127.0.0.1", 80, False),
    ("2130706433", 80, False),  # decimal
    ("0177.0.0.1", 80, False),  # octal
    ("0x7f.0.0.1", 80, False),  # hex
    ("0x7f000001", 80, False),
    ("127.1", 80, False),  # short form
    ("[::1]", 80, False),
    ("[::ffff:127.0.0.1]", 80, False),
    ("169.254.169.254", 80, False),
    ("[::ffff:a9fe:a9fe]", 80, False),  # metadata, IPv4-mapped in hex
    ("xn--exmple-cua.test", 80, False),  # punycode look-alike
    ("", 80, False),
]


@pytest.mark.parametrize(("host", "port", "allowed"), HOST_TABLE)
def test_host_decisions(host: str, port: int, allowed: bool) -> None:
    verdict = check_host(RULES, host, port)
    assert (verdict.reason is None) == allowed, verdict.reason


ADDRESS_TABLE = [
    ("93.184.216.34", None),
    ("127.0.0.1", "a loopback address"),
    ("10.1.2.3", "a private address"),
    ("192.168.0.1", "a private address"),
    ("172.16.5.4", "a private address"),
    ("100.64.0.1", "a carrier-grade NAT address"),
    ("169.254.169.254", "a cloud metadata address"),
    ("169.254.1.1", "a link-local address"),
    ("::1", "a loopback address"),
    ("fe80::1", "a link-local address"),
    ("fd00:ec2::254", "a cloud metadata address"),
    ("::ffff:10.0.0.1", "a private address"),
    ("0.0.0.0", "a private address"),
    ("224.0.0.1", "a reserved address"),
    ("fec0::5", "a site-local address"),
]


@pytest.mark.parametrize(("address", "kind"), ADDRESS_TABLE)
def test_resolved_address_decisions(address: str, kind: str | None) -> None:
    reason = check_address(RULES, address, 80)
    assert (reason is None) == (kind is None)
    if kind:
        assert kind in str(reason)


def test_an_address_named_with_its_port_is_the_only_private_exception() -> None:
    assert check_address(RULES, "10.0.0.5", 8080) is None
    assert check_address(RULES, "10.0.0.5", 80) is not None


# -- the proxy, in this process ---------------------------------------------------------------


async def _ask(path: str, request: bytes, status_only: bool = False) -> bytes:
    """The proxy's whole answer to ``request``; ``status_only``: its status line alone (a
    tunnel it opens is closed at once)."""
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(request)
    await writer.drain()
    data = await (reader.readline() if status_only else reader.read())
    writer.close()
    return data


def test_proxy_forwards_allowed_names_and_never_resolves_refused_ones(
    tmp_path: Path, web: tuple[int, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, hits = web
    looked_up: list[str] = []
    real_resolve = egress._resolve

    async def spy(host: str, p: int, pool: Any = None) -> list[str]:
        looked_up.append(host)
        return await real_resolve(host, p, pool)

    monkeypatch.setattr(egress, "_resolve", spy)
    refusals: list[Refusal] = []
    rules = EgressRules.from_config(
        ["example.test", "localhost"], [], {"example.test": "127.0.0.1"}
    )
    sock = str(tmp_path / "egress.sock")

    async def scenario() -> None:
        proxy = EgressProxy("web", rules, sock, refusals.append)
        await proxy.start()
        try:
            head = f"GET http://example.test:{port}/page HTTP/1.1\r\nHost: example.test:{port}"
            ok = await _ask(sock, (head + "\r\n\r\n").encode())
            assert b"200 OK" in ok and b"hello egress" in ok
            refused = await _ask(sock, b"CONNECT denied.test:443 HTTP/1.1\r\n\r\n")
            assert b"403" in refused and b"not in allowedDomains" in refused
            # A name that is allowed but resolves to loopback (no hosts pin): refused after
            # the lookup, before any connection.
            local = await _ask(sock, f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n".encode())
            assert b"403" in local and b"loopback" in local
            # The Host header must agree with the request target.
            smuggled = await _ask(
                sock,
                f"GET http://example.test:{port}/ HTTP/1.1\r\nHost: internal.test\r\n\r\n".encode(),
            )
            assert b"400" in smuggled and b"does not match" in smuggled
            # CONNECT to an allowed name: a tunnel to the pinned address.
            reader, writer = await asyncio.open_unix_connection(sock)
            writer.write(f"CONNECT example.test:{port} HTTP/1.1\r\n\r\n".encode())
            assert b"200" in await reader.readuntil(b"\r\n\r\n")
            writer.write(f"GET /tunnel HTTP/1.1\r\nHost: example.test:{port}\r\n\r\n".encode())
            assert b"hello egress" in await reader.read()  # until the server closes
            writer.close()
        finally:
            await proxy.stop()

    asyncio.run(scenario())
    assert looked_up == ["localhost"]  # never denied.test; example.test is pinned
    assert [(r.host, r.port) for r in refusals] == [
        ("denied.test", 443),
        ("localhost", port),
        ("example.test", port),  # the Host header that did not match
    ]
    assert hits == [f"example.test:{port} /page", f"example.test:{port} /tunnel"]


def test_one_servers_hanging_lookups_leave_another_servers_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server allowed "*" asks for many names whose name server never answers; another
    # server's lookup must still be answered while those hang (they give way only once the
    # other's answer is in, or after a safety bound).
    released = threading.Event()
    real = socket.getaddrinfo

    def lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        if str(host).endswith(".hangs.test"):
            released.wait(20)
            raise socket.gaierror("no answer")
        return real("127.0.0.1", *args, **kwargs) if host == "fast.test" else real(host, *args)

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    order: list[str] = []
    hostile_rules = EgressRules.from_config(["*"], [], {})
    other_rules = EgressRules.from_config(["fast.test"], [], {})

    async def scenario() -> None:
        hostile = EgressProxy("hostile", hostile_rules, str(tmp_path / "h.sock"), lambda r: None)
        other = EgressProxy("other", other_rules, str(tmp_path / "o.sock"), lambda r: None)
        await hostile.start()
        await other.start()
        try:
            asks = [f"CONNECT n{i}.hangs.test:443 HTTP/1.1\r\n\r\n".encode() for i in range(24)]
            hanging = [asyncio.ensure_future(_ask(hostile.socket_path, a)) for a in asks]
            await asyncio.sleep(0.3)  # every hostile lookup has started, or is queued
            asked = _ask(other.socket_path, b"CONNECT fast.test:9 HTTP/1.1\r\n\r\n")
            answer = await asyncio.wait_for(asked, 30)
            order.append("other answered" if answer.startswith(b"HTTP/1.1") else "other failed")
            released.set()
            await asyncio.gather(*hanging, return_exceptions=True)
        finally:
            released.set()
            await hostile.stop()
            await other.stop()

    def safety() -> None:
        if not released.wait(8):
            order.append("released by the safety bound")
            released.set()

    threading.Thread(target=safety, daemon=True).start()
    asyncio.run(scenario())
    assert order == ["other answered"], order


def test_a_name_resolving_to_this_machine_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A name the attacker's DNS points at one of this machine's own public addresses reaches
    # whatever listens on every address. This machine's own are private or loopback, which
    # are refused before: the classification is set aside here, so the bind test alone
    # decides (an address of this machine, against one that is not).
    async def resolve(host: str, port: int, pool: Any = None) -> list[str]:
        return ["127.0.0.1" if host == "mine.test" else "203.0.113.7"]

    monkeypatch.setattr(egress, "_resolve", resolve)
    monkeypatch.setattr(egress, "check_address", lambda rules, address, port: None)
    monkeypatch.setattr(egress, "CONNECT_TIMEOUT", 0.5)
    refusals: list[Refusal] = []
    rules = EgressRules.from_config(["*"], [], {})
    sock = str(tmp_path / "egress.sock")

    async def scenario() -> None:
        proxy = EgressProxy("web", rules, sock, refusals.append)
        await proxy.start()
        try:
            await _ask(sock, b"CONNECT mine.test:8080 HTTP/1.1\r\n\r\n", status_only=True)
            await _ask(sock, b"CONNECT elsewhere.test:8080 HTTP/1.1\r\n\r\n", status_only=True)
        finally:
            await proxy.stop()

    asyncio.run(scenario())
    said = {r.host: r.reason for r in refusals}
    assert "127.0.0.1, an address of this machine" in said["mine.test"]
    assert "this machine" not in said.get("elsewhere.test", "")  # let through


def test_a_body_is_passed_on_as_the_upstream_takes_it(tmp_path: Path) -> None:
    # An upstream that takes nothing (listening, never accepting): the proxy reads the
    # announced 256 MiB body no faster than it can pass it on, so the server's writes stall
    # instead of filling the trusted process's memory.
    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen(1)
    port = upstream.getsockname()[1]
    rules = EgressRules.from_config(["example.test"], [], {"example.test": "127.0.0.1"})
    sock = str(tmp_path / "egress.sock")
    sent = 0

    async def scenario() -> None:
        nonlocal sent
        proxy = EgressProxy("web", rules, sock, lambda r: None)
        await proxy.start()
        try:
            _, writer = await asyncio.open_unix_connection(sock)
            size = 256 << 20
            head = f"POST http://example.test:{port}/ HTTP/1.1\r\nContent-Length: {size}"
            writer.write((head + "\r\n\r\n").encode())
            piece = b"x" * (1 << 20)

            # Pushed until the proxy takes nothing for a second (or all of it is taken).
            with contextlib.suppress(TimeoutError):
                while sent < size:
                    writer.write(piece)
                    await asyncio.wait_for(writer.drain(), 1)
                    sent += len(piece)
            writer.transport.abort()
        finally:
            await proxy.stop()

    try:
        asyncio.run(scenario())
    finally:
        upstream.close()
    assert sent < 64 << 20, f"{sent >> 20} MiB taken from the server by a stalled upstream"


@pytest.mark.parametrize(
    ("request_line", "said"),
    [
        ("CONNECT 127.0.0.1:\u00b2 HTTP/1.1", "control or non-ASCII"),  # '²'.isdigit()
        ("GET http://example.test:99999/ HTTP/1.1", "bad port"),
        ("CONNECT example.test:0 HTTP/1.1", "bad port"),
        ("CONNECT evil\x1bc.test:443 HTTP/1.1", "control or non-ASCII"),
        ("GET http://[::1 HTTP/1.1", "malformed request"),  # one nothing foresaw
    ],
)
def test_a_malformed_request_is_refused_and_said(
    tmp_path: Path, request_line: str, said: str
) -> None:
    rules = EgressRules.from_config(["example.test"], [], {"example.test": "127.0.0.1"})
    sock = str(tmp_path / "egress.sock")
    refusals: list[Refusal] = []

    async def scenario() -> bytes:
        proxy = EgressProxy("web", rules, sock, refusals.append)
        await proxy.start()
        try:
            return await _ask(sock, (request_line + "\r\n\r\n").encode("utf-8"))
        finally:
            await proxy.stop()

    answer = asyncio.run(scenario())
    assert answer.startswith(b"HTTP/1.1 400"), answer
    assert len(refusals) == 1 and said in refusals[0].reason, refusals


# -- configurations refused or left without a proxy ------------------------------------------


def test_no_allowed_domains_means_no_proxy_at_all(user: Home) -> None:
    config = user.root / "c.json"
    config.write_text(json.dumps({"mcpServers": {"t": {"command": "mcp-server-time"}}}))
    done = ironcurtain(user, "profile", "t", "--config", str(config))
    assert "egress" not in done.stdout and "PROXY" not in done.stdout
    assert "--unshare-net" in done.stdout


def test_hosts_must_pin_names_to_addresses(user: Home) -> None:
    server = {
        "command": "mcp-server-fetch",
        "sandbox": {
            "network": {"allowedDomains": ["db.internal"], "hosts": {"db.internal": "other.name"}}
        },
    }
    config = user.root / "c.json"
    config.write_text(json.dumps({"mcpServers": {"f": server}}))
    done = ironcurtain(user, "run", "--config", str(config))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "$.mcpServers.f.sandbox.network.hosts" in done.stderr
    assert "'other.name' is not an IP address" in done.stderr


def test_a_workspace_holding_the_sessions_sockets_is_refused(user: Home) -> None:
    out = ironcurtain(user, "run", "--workspace", "/tmp")
    assert out.returncode != 0
    assert "workspace" in out.stderr and "keeps its sockets" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
