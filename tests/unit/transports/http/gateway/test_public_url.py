"""The gateway behind a load balancer, in process on the real HTTP stack: with a public URL
it answers the public host (and loopback) and nothing else, however a hostile page or
client spells another; what it says about itself (the 401 challenge, its protected resource
metadata) names the public URL, never a Host the request supplied; its health probes need
no token and tell nothing but up or down."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
import pytest

from launcher.shared.caller_identity import Caller
from launcher.shared_state.memory import MemoryState
from launcher.shared_state.store import SharedState
from launcher.transports.http.endpoint import HttpEndpoint
from launcher.transports.http.gateway.gatekeeper import Gatekeeper
from launcher.transports.http.gateway.keys import gateway
from launcher.transports.http.public_address import Reached
from launcher.transports.http.stateless_requests import Upstream
from tests.support.idp import Provider, identity_provider
from tests.support.shared_state import needs_redis, redis_server
from tests.unit.transports.http.gateway.test_http_gateway import Recording, stateless

PUBLIC = "https://mcp.example.com/mcp"
METADATA = "https://mcp.example.com/.well-known/oauth-protected-resource"

# Hosts an attacker would send: its own name rebound to the gateway's address, and names
# that only look like the public one (by suffix, prefix, port, a trailing dot, a user part).
HOSTILE_HOSTS = {
    "rebound name": "attacker.example",
    "rebound name with the port": "attacker.example:{port}",
    "suffix only": "evil-mcp.example.com",
    "suffix with a dot": "x.mcp.example.com",
    "public name as a prefix": "mcp.example.com.attacker.example",
    "shorter name": "example.com",
    "another port": "mcp.example.com:8443",
    "trailing dot": "mcp.example.com.",
    "user part": "mcp.example.com@attacker.example",
    "listening port on the public name": "mcp.example.com:{port}",
    "bind address": "0.0.0.0:{port}",
}
GOOD_HOSTS = ("mcp.example.com", "MCP.Example.COM", "mcp.example.com:443", "127.0.0.1:{port}")

Work = Callable[[httpx2.AsyncClient, str, Provider, HttpEndpoint], Awaitable[None]]


@contextmanager
def gateway_behind_balancer(
    work: Work, public: str | None = PUBLIC, state: SharedState | None = None
) -> Iterator[list[tuple[str, Any]]]:
    """The gateway with ``public`` as its public URL, listening on loopback (where a
    balancer's connections arrive); ``work`` runs against it. Yields what reached a relay."""
    seen: list[tuple[str, Any]] = []
    with identity_provider() as idp:
        audience = Reached(0, public).url if public is not None else "https://aud.example"

        async def main() -> None:
            async def opener(upstream: Upstream, caller: Caller | None) -> Recording:
                return Recording(upstream, seen)

            keeper = Gatekeeper(gateway(idp.issuer, audience, None), lambda text: None)
            endpoint = HttpEndpoint(
                0, None, opener, lambda text: None, keeper, state=state, public_url=public
            )
            await endpoint.start()
            try:
                async with httpx2.AsyncClient(timeout=30) as http:
                    await work(http, endpoint.url, idp, endpoint)
            finally:
                await endpoint.stop()

        asyncio.run(asyncio.wait_for(main(), 120))
        yield seen


def _request(token: str | None, host: str) -> dict[str, Any]:
    request = stateless(token)
    request["headers"]["Host"] = host
    return request


@pytest.mark.parametrize("why", sorted(HOSTILE_HOSTS))
def test_a_host_not_the_public_one_reaches_nothing(why: str) -> None:
    statuses: list[int] = []

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, end: HttpEndpoint) -> None:
        host = HOSTILE_HOSTS[why].format(port=end.port)
        token = idp.token("alice", aud=PUBLIC)
        statuses.append((await http.post(url, **_request(token, host))).status_code)
        meta = url.removesuffix("/mcp") + "/.well-known/oauth-protected-resource"
        statuses.append((await http.get(meta, headers={"Host": host})).status_code)
        # Control: the same request naming the public host is served.
        statuses.append((await http.post(url, **_request(token, "mcp.example.com"))).status_code)

    with gateway_behind_balancer(work) as seen:
        # 421 from the endpoint (400 where the HTTP parser refuses the name itself).
        assert statuses[:2] in ([421, 421], [400, 400]) and statuses[2] == 200, statuses
        assert [method for method, _ in seen] == ["tools/call"]


def test_without_the_host_check_a_rebound_name_is_served(monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: the attack above succeeds once the Host check accepts any name."""
    monkeypatch.setattr(Reached, "accepts", lambda self, host: True)
    statuses: list[int] = []

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, end: HttpEndpoint) -> None:
        token = idp.token("alice", aud=PUBLIC)
        for why in ("rebound name", "suffix only"):
            request = _request(token, HOSTILE_HOSTS[why])
            statuses.append((await http.post(url, **request)).status_code)

    with gateway_behind_balancer(work) as seen:
        assert statuses == [200, 200]
        assert len(seen) == 2


def _challenges(public: str | None) -> list[tuple[str, str, str]]:
    """For each Host a request may name: the challenge of its 401, and the resource and
    metadata URL it is told."""
    told: list[tuple[str, str, str]] = []

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, end: HttpEndpoint) -> None:
        for host in (*GOOD_HOSTS, "localhost:{port}", "[::1]:{port}"):
            host = host.format(port=end.port)
            refused = await http.post(url, **_request(None, host))
            if refused.status_code == 421:  # no public URL: the public name is not one
                continue
            assert refused.status_code == 401, (host, refused.text)
            meta = url.removesuffix("/mcp") + "/.well-known/oauth-protected-resource/mcp"
            document = (await http.get(meta, headers={"Host": host})).json()
            told.append((host, refused.headers["www-authenticate"], document["resource"]))

    with gateway_behind_balancer(work, public):
        return told


def test_the_challenge_and_metadata_name_the_public_url_never_the_host_given() -> None:
    told = _challenges(PUBLIC)
    assert len(told) == 6
    for host, challenge, resource in told:
        assert challenge == f'Bearer resource_metadata="{METADATA}"', host
        assert resource == PUBLIC, host


def test_without_a_public_url_they_name_the_listening_address() -> None:
    told = _challenges(None)
    assert len(told) == 3  # 127.0.0.1, localhost and [::1] at the port
    port = told[0][0].rsplit(":", 1)[1]
    for host, challenge, resource in told:
        assert f'resource_metadata="http://127.0.0.1:{port}/.well-known/' in challenge, host
        assert resource == f"http://127.0.0.1:{port}/mcp", host


def test_a_challenge_built_from_host_would_be_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: were the challenge built from the request's Host (as a gateway behind a
    Host-rewriting front used to be told), the checks above would fail."""
    admit = Gatekeeper.admit

    async def from_host(self: Gatekeeper, scope: Any, headers: Any, send: Any, base: str) -> Any:
        return await admit(self, scope, headers, send, f"http://{headers['host']}")

    monkeypatch.setattr(Gatekeeper, "admit", from_host)
    told = _challenges(PUBLIC)
    assert any(METADATA not in challenge for _, challenge, _ in told)
    assert any(resource != PUBLIC for _, _, resource in told)


def test_a_token_for_the_public_url_is_taken_one_for_another_audience_is_not() -> None:
    statuses: list[int] = []

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, end: HttpEndpoint) -> None:
        for audience in (PUBLIC, f"http://127.0.0.1:{end.port}/mcp", "https://other.example/mcp"):
            token = idp.token("alice", aud=audience)
            response = await http.post(url, **_request(token, "mcp.example.com"))
            statuses.append(response.status_code)

    with gateway_behind_balancer(work):
        assert statuses == [200, 401, 401]


class _Lost(MemoryState):
    """A shared state that cannot be reached."""

    shared = True

    def reachable(self) -> bool:
        return False


@pytest.mark.parametrize("state", ["none", "memory", "lost"])
def test_health_needs_no_token_and_says_only_up_or_down(state: str) -> None:
    answers: list[tuple[str, int, str]] = []
    stores: dict[str, SharedState | None] = {"none": None, "memory": MemoryState(),
                                             "lost": _Lost()}  # fmt: skip

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, end: HttpEndpoint) -> None:
        base = url.removesuffix("/mcp")
        for path in ("/healthz", "/readyz", "/livez"):
            for host in ("attacker.example", f"10.1.2.3:{end.port}"):  # a probe's own Host
                response = await http.get(base + path, headers={"Host": host})
                answers.append((path, response.status_code, response.text))
        head = await http.head(base + "/healthz")
        answers.append(("HEAD", head.status_code, head.text))
        answers.append(("POST", (await http.post(base + "/healthz")).status_code, ""))

    with gateway_behind_balancer(work, state=stores[state]) as seen:
        ready = (200, "ok\n") if state != "lost" else (503, "unavailable\n")
        assert answers == [
            *[(p, *ready) for p in ("/healthz", "/healthz", "/readyz", "/readyz")],
            *[("/livez", 200, "ok\n")] * 2,
            ("HEAD", ready[0], ""),
            ("POST", 405, ""),
        ]
        assert seen == []


@needs_redis
def test_health_follows_a_real_shared_state() -> None:
    from launcher.shared_state.redis_store import RedisState

    answers: list[int] = []
    with redis_server() as server:
        store = RedisState(server.url, lambda text: None)

        async def poll(http: httpx2.AsyncClient, url: str, want: int) -> None:
            for _ in range(600):  # the answer is kept a moment: asked again until it moves
                status = (await http.get(url)).status_code
                if status == want:
                    break
                await asyncio.sleep(0.1)
            answers.append(status)

        async def work(
            http: httpx2.AsyncClient, url: str, idp: Provider, end: HttpEndpoint
        ) -> None:
            health = url.removesuffix("/mcp") + "/healthz"
            await poll(http, health, 200)
            await asyncio.to_thread(server.stop)
            await poll(http, health, 503)
            answers.append((await http.get(url.removesuffix("/mcp") + "/livez")).status_code)
            await asyncio.to_thread(server.start)
            await poll(http, health, 200)

        with gateway_behind_balancer(work, state=store):
            pass
    assert answers == [200, 503, 200, 200]


async def _raw_status(port: int, hosts: list[str], token: str) -> bytes:
    """The status line of a request naming each of ``hosts`` in a Host header of its own."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = "".join(f"Host: {h}\r\n" for h in hosts)
    writer.write(
        f"GET /mcp HTTP/1.1\r\n{head}Authorization: Bearer {token}\r\n"
        "Accept: text/event-stream\r\nConnection: close\r\n\r\n".encode()
    )
    await writer.drain()
    line = (await reader.read(256)).split(b"\r\n")[0]
    writer.close()
    return line


def test_two_hosts_one_public_reach_nothing() -> None:
    """The public host beside the attacker's, in either order: refused by the HTTP parser
    before the endpoint looks (whichever one a check kept, the other would be a way in)."""
    lines: list[bytes] = []

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, end: HttpEndpoint) -> None:
        token = idp.token("alice", aud=PUBLIC)
        for hosts in (["mcp.example.com", "attacker.example"],
                      ["attacker.example", "mcp.example.com"]):  # fmt: skip
            lines.append(await _raw_status(end.port, hosts, token))

    with gateway_behind_balancer(work) as seen:
        assert lines == [b"HTTP/1.1 400 Bad Request"] * 2
        assert seen == []


@pytest.mark.parametrize(
    ("origin", "status"),
    [("https://attacker.example", 403), ("https://evil-mcp.example.com", 403),
     ("http://mcp.example.com", 403), ("https://mcp.example.com", 200)],
    ids=["attacker", "suffix", "plain-http", "control-public-origin"],
)  # fmt: skip
def test_a_page_of_another_origin_is_refused(origin: str, status: int) -> None:
    """A browser's request from another site names the public host (the page talks to the
    real gateway, with a token it got somehow) but its Origin gives it away."""
    statuses: list[int] = []

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, end: HttpEndpoint) -> None:
        request = _request(idp.token("alice", aud=PUBLIC), "mcp.example.com")
        request["headers"]["Origin"] = origin
        statuses.append((await http.post(url, **request)).status_code)

    with gateway_behind_balancer(work):
        assert statuses == [status]


def test_the_endpoint_listens_on_an_ipv6_loopback_and_answers_its_name() -> None:
    from launcher.shared.user_errors import StartupError
    from launcher.transports.http.listener import listen_http

    try:
        sock = listen_http(0, "::1")
    except StartupError:
        pytest.skip("no IPv6 loopback on this machine")
    try:
        assert sock.getsockname()[0] == "::1"
    finally:
        sock.close()
    port = 8765
    assert Reached(port).accepts(f"[::1]:{port}") and not Reached(port).accepts("[::2]:8765")
