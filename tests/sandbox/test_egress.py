"""Network egress: the decision table, the proxy in process, and the real
``mcp-server-fetch`` and the probe inside the sandbox, with a loopback web server standing
in for the internet (``sandbox.network.hosts`` pins the test names to it)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from mcp import MCPError as McpError

from launcher.servers import egress
from launcher.servers.egress import EgressProxy, Refusal
from policy.egress import EgressRules, check_address, check_host
from tests.support.audit import audit_entries
from tests.support.cli import ironcurtain
from tests.support.home import Home, make_home
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_server_config, run_probe, write_raw_policy
from tests.support.sdk import call, connect

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


class _Page(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).hits.append(f"{self.headers.get('Host')} {self.path}")
        body = b"<html><head><title>t</title></head><body><p>hello egress</p></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def web() -> Iterator[tuple[int, list[str]]]:
    hits: list[str] = []
    handler = type("Page", (_Page,), {"hits": hits})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], hits
    server.shutdown()


async def _ask(path: str, request: bytes) -> bytes:
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(request)
    await writer.drain()
    data = await reader.read()
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
            await _ask(sock, b"CONNECT mine.test:8080 HTTP/1.1\r\n\r\n")
            await _ask(sock, b"CONNECT elsewhere.test:8080 HTTP/1.1\r\n\r\n")
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

            async def push() -> None:
                nonlocal sent
                while sent < size:
                    writer.write(piece)
                    await writer.drain()
                    sent += len(piece)

            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(push(), 5)
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


# -- real servers inside the sandbox ------------------------------------------------------------


def _fetch_config(user: Home, port: int, policy_raw: bool) -> tuple[Path, Path | None]:
    server = {
        "command": "mcp-server-fetch",
        # The server's own private-address check is switched off: the proxy must hold alone.
        "args": ["--ignore-robots-txt", "--allow-private-ips"],
        "sandbox": {
            "network": {
                "allowedDomains": ["example.test", "*.example.test"],
                "deniedDomains": ["secret.example.test"],
                "hosts": {"example.test": "127.0.0.1", "secret.example.test": "127.0.0.1"},
            }
        },
    }
    config = user.root / "fetch.json"
    config.write_text(json.dumps({"mcpServers": {"fetch": server}}))
    if not policy_raw:
        return config, None
    fetch_tools = {"fetch": ["url", "max_length", "start_index", "raw"]}
    return config, write_raw_policy(user.root / "fetch-policy", {"fetch": fetch_tools})


def _fetch_session(
    user: Home, port: int, urls: list[str], policy_raw: bool
) -> list[tuple[bool, str]]:
    config, policy = _fetch_config(user, port, policy_raw)
    audit = user.root / "audit.jsonl"
    args = ["--config", str(config), "--audit-log", str(audit), "--workspace", str(user.ws())]
    if policy:
        args += ["--policy-dir", str(policy)]
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, *args) as session:
            for url in urls:
                out.append(await call(session, "fetch__fetch", {"url": url}))

    asyncio.run(scenario())
    return out


LITERALS = [
    "127.0.0.1",
    "2130706433",
    "0177.0.0.1",
    "0x7f.0.0.1",
    "0x7f000001",
    "127.1",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "169.254.169.254",
]


@needs_bwrap
def test_fetch_in_the_sandbox_reaches_only_what_is_allowed(
    user: Home, web: tuple[int, list[str]]
) -> None:
    port, hits = web
    urls = [
        f"http://example.test:{port}/page",
        f"http://secret.example.test:{port}/page",  # denied, though pinned to a reachable address
        f"http://unlisted.test:{port}/page",
        *(f"http://{literal}:{port}/page" for literal in LITERALS),
    ]
    results = _fetch_session(user, port, urls, policy_raw=True)
    error, text = results[0]
    assert not error and "hello egress" in text, text
    for url, (error, text) in zip(urls[1:], results[1:], strict=True):
        assert error or "hello egress" not in text, (url, text)
    assert hits == [f"example.test:{port} /page"]  # nothing else ever arrived
    refused = [e for e in audit_entries(user.root / "audit.jsonl") if e.get("event")]
    reasons = {e["host"]: e["reason"] for e in refused if e["event"] == "egress-refused"}
    assert reasons["secret.example.test"] == "secret.example.test is in deniedDomains"
    assert reasons["unlisted.test"] == "unlisted.test is not in allowedDomains"
    assert all(e["server"] == "fetch" for e in refused)
    # Every literal was refused by the proxy (httpx spells some of them differently on the
    # wire: 2130706433 arrives as 127.0.0.1, [::1] without its brackets).
    assert len([e for e in refused if e["event"] == "egress-refused"]) == len(urls) - 1


@needs_bwrap
def test_the_policy_stops_unlisted_domains_before_the_proxy_does(
    user: Home, web: tuple[int, list[str]]
) -> None:
    port, hits = web
    results = _fetch_session(
        user,
        port,
        [f"http://example.test:{port}/page", f"http://unlisted.test:{port}/", "http://127.0.0.1/"],
        policy_raw=False,  # the bundled policy
    )
    assert not results[0][0] and "hello egress" in results[0][1]
    assert results[1][0] and results[1][1].startswith("ESCALATION")
    assert results[2][0] and results[2][1].startswith(("DENIED", "ESCALATION"))
    assert len(hits) == 1


@needs_bwrap
def test_the_fetch_prompt_is_checked_like_the_fetch_tool(
    user: Home, web: tuple[int, list[str]]
) -> None:
    # The fetch server's `fetch` prompt fetches its `url` while it builds the prompt: a way
    # to the network that is not a tool call. It passes the same gate as the tool.
    port, hits = web
    config, _ = _fetch_config(user, port, policy_raw=False)
    tools_only = write_raw_policy(user.root / "tools-only", {"fetch": {"fetch": ["url"]}})
    base = ["--config", str(config), "--workspace", str(user.ws())]
    page = {"url": f"http://example.test:{port}/page"}

    async def scenario() -> None:
        async with connect(user, *base) as session:  # the bundled policy
            got = await session.get_prompt("fetch__fetch", page)
            assert "hello egress" in str(got.messages[0].content)
            outside = {"url": f"http://unlisted.test:{port}/page"}
            with pytest.raises(
                McpError, match=r"ESCALATION REQUIRED \(rule: structural-untrusted-domain\)"
            ):
                await session.get_prompt("fetch__fetch", outside)
        # A policy that annotates the tool and not the prompt: the prompt is never called.
        async with connect(user, *base, "--policy-dir", str(tools_only)) as session:
            with pytest.raises(McpError, match=r"DENIED \(rule: structural-unknown-prompt\)"):
                await session.get_prompt("fetch__fetch", page)

    asyncio.run(scenario())
    assert hits == [f"example.test:{port} /page"]  # the allowed fetch, and nothing else


@needs_bwrap
def test_a_server_that_ignores_the_proxy_has_no_route(
    tmp_path: Path, web: tuple[int, list[str]]
) -> None:
    port, hits = web
    user = make_home(tmp_path)
    server = probe_server_config(True)
    server["sandbox"]["network"] = {
        "allowedDomains": ["example.test"],
        "hosts": {"example.test": "127.0.0.1"},
    }
    answers = run_probe(
        user,
        user.ws("ws"),
        server,
        lambda: [
            ("http_get", {"url": f"http://example.test:{port}/via-proxy"}),
            ("connect_tcp", {"host": "127.0.0.1", "port": port}),
            ("connect_tcp", {"host": "1.1.1.1", "port": 443}),
            ("udp_send", {"host": "8.8.8.8", "port": 53}),
            ("resolve", {"name": "example.test"}),
            ("resolve", {"name": "example.com"}),
        ],
    )
    texts = [text for _, text in answers]
    assert texts[0].startswith("OK 200") and "hello egress" in texts[0]
    assert all(t.startswith("FAILED") for t in texts[1:]), texts
    assert hits == [f"example.test:{port} /via-proxy"]


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


# -- where sessions keep their sockets ---------------------------------------------------------


@needs_bwrap
def test_a_socket_in_a_read_only_grant_can_be_connected_to(tmp_path: Path) -> None:
    # Why no grant may hold where sessions keep their sockets: a read-only mount does not
    # stop a connect(), so a server shown the approvals socket or another server's egress
    # socket could use it.
    user = make_home(tmp_path)
    shown = tmp_path / "shown"
    shown.mkdir()
    shown.chmod(0o755)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(shown / "egress-other.sock"))
    (shown / "egress-other.sock").chmod(0o666)
    listener.listen(8)
    try:
        server = probe_server_config(True, allow_read=(str(shown),))
        path = str(shown / "egress-other.sock")
        answers = run_probe(
            user, user.ws("ws"), server, lambda: [("hold_connections", {"path": path, "count": 1})]
        )
    finally:
        listener.close()
    assert answers[0][1].startswith("OK"), answers


def test_a_grant_holding_the_sessions_sockets_is_refused(user: Home) -> None:
    server = probe_server_config(True, allow_read=("/tmp",))  # /tmp: where sockets go
    config = user.root / "c.json"
    config.write_text(json.dumps({"mcpServers": {"probe": server}}))
    policy = write_raw_policy(user.root / "policy")
    out = ironcurtain(user, "run", "--config", str(config), "--policy-dir", str(policy))
    assert out.returncode != 0
    assert "$.mcpServers.probe.sandbox.filesystem.allowRead[1]" in out.stderr, out.stderr
    assert "keeps its sockets" in out.stderr and "Traceback" not in out.stderr


def test_a_workspace_holding_the_sessions_sockets_is_refused(user: Home) -> None:
    out = ironcurtain(user, "run", "--workspace", "/tmp")
    assert out.returncode != 0
    assert "workspace" in out.stderr and "keeps its sockets" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
