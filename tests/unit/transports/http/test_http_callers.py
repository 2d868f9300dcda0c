"""Gateway mode keeps callers apart at the HTTP endpoint, in process, on the real HTTP stack
with real JWTs from a loopback identity provider and relays that record what reaches them:
each caller's stateless-protocol requests reach a relay of its own (opened with its first
request, with the permissions of its latest token), at most ``max_sessions`` at once (the one
idle longest makes room, none that is busy), and a caller's relay unused too long is
closed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest

from launcher.shared.caller_identity import Caller
from launcher.shared.jsonrpc import result
from launcher.transports.http import caller_relays
from launcher.transports.http import endpoint as http_endpoint
from launcher.transports.http.caller_relays import CallerRelays, TooMany
from launcher.transports.http.endpoint import HttpEndpoint
from launcher.transports.http.gateway.gatekeeper import Gatekeeper
from launcher.transports.http.gateway.keys import gateway
from launcher.transports.http.stateless_requests import StatelessClients, Upstream
from tests.support.idp import AUDIENCE, Provider, identity_provider
from tests.unit.transports.http.gateway.test_http_gateway import handshake, stateless


class CallerRelay:
    """A relay that answers each call with whose relay it is and the permissions it was
    given for the request; ``hold`` is held until the client goes away."""

    def __init__(self, upstream: Upstream, opened: list[CallerRelay]) -> None:
        self.upstream = upstream
        self.caller: Caller | None = None
        self.opened_for: Caller | None = None
        self.closed = False
        opened.append(self)

    def feed(self, line: bytes) -> None:
        message = json.loads(line)
        if "id" not in message or message["params"].get("name") == "hold":
            return
        assert self.caller is not None and self.opened_for is not None
        text = f"{self.opened_for.name}:{' '.join(sorted(self.caller.permissions))}"
        answer = {"content": [{"type": "text", "text": text}]}
        self.upstream.deliver(result(message["id"], answer))

    def holds(self) -> bool:
        return False

    def listed_tool(self, name: str) -> dict[str, Any] | None:
        return None

    async def close(self) -> None:
        self.closed = True


def serve(
    work: Any, max_sessions: int = 16, limits: httpx2.Limits | None = None
) -> tuple[list[CallerRelay], list[str]]:
    opened: list[CallerRelay] = []
    said: list[str] = []
    with identity_provider() as idp:

        async def main() -> None:
            async def opener(upstream: Upstream, caller: Caller | None) -> CallerRelay:
                relay = CallerRelay(upstream, opened)
                relay.opened_for = caller
                return relay

            keeper = Gatekeeper(gateway(idp.issuer, AUDIENCE, None), said.append)
            endpoint = HttpEndpoint(0, None, opener, said.append, keeper, max_sessions)
            await endpoint.start()
            try:
                bounds = limits or httpx2.Limits()
                async with httpx2.AsyncClient(timeout=10, limits=bounds) as http:
                    await work(http, endpoint.url, idp, endpoint)
            finally:
                await endpoint.stop()

        asyncio.run(asyncio.wait_for(main(), 60))
    return opened, said


def text(response: httpx2.Response) -> str:
    assert response.status_code == 200, response.text
    return str(response.json()["result"]["content"][0]["text"])


def who(response: httpx2.Response) -> str:
    """Whose relay answered."""
    return text(response).split(":")[0]


def test_each_callers_requests_reach_its_own_relay_with_its_latest_permissions() -> None:
    got: dict[str, Any] = {}

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, _: HttpEndpoint) -> None:
        alice = idp.token("alice", scope="crm:read")
        bob = idp.token("bob", scope="crm:read crm:write")
        got["first"] = await asyncio.gather(
            http.post(url, **stateless(alice)),
            http.post(url, **stateless(bob)),
            http.post(url, **stateless(alice)),
        )
        # A later token of alice's with less in it: her next request may do only that.
        got["narrowed"] = await http.post(url, **stateless(idp.token("alice", scope="")))

    opened, _ = serve(work)
    first = [text(r) for r in got["first"]]
    assert first == ["alice:crm:read", "bob:crm:read crm:write", "alice:crm:read"]
    assert text(got["narrowed"]) == "alice:"
    assert sorted(r.opened_for.name for r in opened if r.opened_for) == ["alice", "bob"]


def test_a_new_caller_past_the_limit_ends_the_one_idle_longest_never_a_busy_one() -> None:
    got: dict[str, Any] = {}

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, _: HttpEndpoint) -> None:
        a, b, c = (idp.token(name) for name in ("alice", "bob", "carol"))
        held = asyncio.ensure_future(http.post(url, **stateless(a, "hold")))  # alice is busy
        await asyncio.sleep(0.3)
        got["bob"] = await http.post(url, **stateless(b))
        got["carol"] = await http.post(url, **stateless(c))  # bob idle longest: ended
        got["dave"] = await http.post(url, **stateless(idp.token("dave")))  # carol ended
        got["bob again"] = await http.post(url, **stateless(b))  # dave ended, bob anew
        held.cancel()
        await asyncio.gather(held, return_exceptions=True)

    opened, said = serve(work, max_sessions=2)
    served = [who(got[k]) for k in ("bob", "carol", "dave", "bob again")]
    assert served == ["bob", "carol", "dave", "bob"]
    assert [r.opened_for.name for r in opened if r.opened_for] == [
        "alice",
        "bob",
        "carol",
        "dave",
        "bob",
    ]
    ended = [line.split("'")[1] for line in said if "for a new caller" in line]
    assert ended == ["bob", "carol", "dave"]  # never alice, whose request was out


def test_when_every_caller_has_a_request_out_a_new_one_is_told_to_come_back() -> None:
    got: dict[str, Any] = {}

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, _: HttpEndpoint) -> None:
        held = asyncio.ensure_future(http.post(url, **stateless(idp.token("alice"), "hold")))
        await asyncio.sleep(0.3)
        got["bob"] = await http.post(url, **stateless(idp.token("bob")))
        got["alice"] = await http.post(url, **stateless(idp.token("alice")))
        held.cancel()
        await asyncio.gather(held, return_exceptions=True)

    opened, _ = serve(work, max_sessions=1)
    assert got["bob"].status_code == 503
    assert got["bob"].json()["error"]["message"] == (
        "too many callers at once (1); none that could make room is idle"
    )
    assert who(got["alice"]) == "alice"  # her own relay still serves her
    assert [r.opened_for.name for r in opened if r.opened_for] == ["alice"]


def test_a_caller_unused_for_the_idle_time_has_its_relay_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(caller_relays, "IDLE_TIMEOUT", 0.2)
    monkeypatch.setattr(caller_relays, "SWEEP_EVERY", 0.1)
    got: dict[str, Any] = {}

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, end: HttpEndpoint) -> None:
        await http.post(url, **stateless(idp.token("alice")))
        await http.post(url, **stateless(idp.token("bob")))
        for _ in range(50):
            await asyncio.sleep(0.1)
            await http.post(url, **stateless(idp.token("bob")))  # bob keeps calling
            if len(end.stateless.relays) == 1:
                break
        got["left"] = len(end.stateless.relays)

    opened, said = serve(work)
    assert got["left"] == 1
    alice, _ = opened
    assert alice.closed and alice.opened_for is not None and alice.opened_for.name == "alice"
    assert any(line.startswith("servers of caller 'alice'") and "idle" in line for line in said)
    assert not any("'bob'" in line and "idle" in line for line in said)


def test_one_caller_holds_at_most_a_quarter_of_the_sessions_and_keeps_no_one_out() -> None:
    got: dict[str, Any] = {}

    async def opened(http: httpx2.AsyncClient, url: str, token: str) -> httpx2.Response:
        return await http.post(url, **handshake(token))

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, end: HttpEndpoint) -> None:
        mallory = idp.token("mallory")
        first = [await opened(http, url, mallory) for _ in range(2)]
        got["statuses"] = [r.status_code for r in first]
        # Her sessions busy: each holds a GET stream open, as a client listening does.
        streams = [
            asyncio.ensure_future(
                http.get(
                    url, headers={**handshake(mallory, r.headers["mcp-session-id"])["headers"]}
                )
            )
            for r in first
        ]
        await asyncio.sleep(0.3)
        got["third"] = await opened(http, url, mallory)  # past her share, all hers busy
        got["alice"] = await opened(http, url, idp.token("alice"))  # not kept out
        got["mallory sessions"] = sum(
            c.owner == (idp.issuer, "mallory") for c in end.sessions.values()
        )
        for stream in streams:
            stream.cancel()
        await asyncio.gather(*streams, return_exceptions=True)

    serve(work, max_sessions=8)
    assert got["statuses"] == [200, 200]
    assert got["third"].status_code == 503
    assert got["third"].json()["error"]["message"] == "too many open sessions of this caller (2)"
    assert got["alice"].status_code == 200
    assert got["mallory sessions"] == 2


def test_a_callers_new_session_past_its_share_ends_its_own_unused_longest() -> None:
    got: dict[str, Any] = {}

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, end: HttpEndpoint) -> None:
        bob = await http.post(url, **handshake(idp.token("bob")))
        sids = [
            (await http.post(url, **handshake(idp.token("mallory")))).headers["mcp-session-id"]
            for _ in range(3)
        ]
        got["left"] = sorted(
            c.id for c in end.sessions.values() if c.owner == (idp.issuer, "mallory")
        )
        got["sids"] = sids
        got["bob kept"] = bob.headers["mcp-session-id"] in end.sessions

    serve(work, max_sessions=8)
    assert got["left"] == sorted(got["sids"][1:])  # her first, unused longest, ended
    assert got["bob kept"]


def test_a_relay_a_request_is_opening_is_not_ended_for_another_caller() -> None:
    # A new caller's request that arrives just as the first caller's servers are ready:
    # the first caller keeps what its request started; the newcomer is told to come back.
    alice = Caller("alice", frozenset(), "https://idp.example")
    bob = Caller("bob", frozenset(), "https://idp.example")
    out: dict[str, str] = {}

    async def main() -> None:
        relays: CallerRelays

        async def bob_arrives() -> None:
            try:
                held = await relays.take(bob)
                out["bob"] = "served"
                relays.done(held)
            except TooMany:
                out["bob"] = "503"

        async def opener(upstream: Upstream, caller: Caller | None) -> CallerRelay:
            await asyncio.sleep(0.01)  # the servers start
            relay = CallerRelay(upstream, [])
            relay.opened_for = caller
            if caller is alice:
                asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(bob_arrives()))
            return relay

        relays = CallerRelays(opener, stateless_clients(), max_callers=1, say=lambda text: None)
        held = await relays.take(alice)
        out["alice"] = "closed" if held.relay.closed else "served"  # type: ignore[attr-defined]
        await asyncio.sleep(0.1)
        out["alice after"] = "closed" if held.relay.closed else "kept"  # type: ignore[attr-defined]
        relays.done(held)
        await relays.close()

    asyncio.run(main())
    assert out == {"alice": "served", "bob": "503", "alice after": "kept"}


def stateless_clients() -> StatelessClients:
    async def opener(upstream: Upstream, caller: Caller | None) -> CallerRelay:
        raise AssertionError("not opened here")

    return StatelessClients(opener)


class SlowClosing(CallerRelay):
    """A relay whose servers take a moment to stop."""

    async def close(self) -> None:
        await asyncio.sleep(0.5 if self.opened_for and self.opened_for.name == "a" else 0.0)
        self.closed = True


def test_the_idle_sweep_never_ends_a_relay_a_caller_opened_again_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(caller_relays, "IDLE_TIMEOUT", 0.3)
    monkeypatch.setattr(caller_relays, "SWEEP_EVERY", 0.1)
    opened: list[CallerRelay] = []

    def caller(name: str) -> Caller:
        return Caller(name, frozenset(), "https://idp.example")

    async def main() -> tuple[int, bool]:
        async def opener(upstream: Upstream, who: Caller | None) -> CallerRelay:
            relay = SlowClosing(upstream, opened)
            relay.opened_for = who
            return relay

        table = CallerRelays(opener, stateless_clients(), max_callers=2, say=lambda text: None)
        for name in ("a", "b"):
            table.done(await table.take(caller(name)))
        await asyncio.sleep(0.45)  # the sweep is ending a (which takes 0.5 s)
        table.done(await table.take(caller("c")))
        await asyncio.sleep(0.01)
        table.done(await table.take(caller("d")))  # b, idle longest, ends for d
        held = await table.take(caller("b"))  # b is back, its request out
        await asyncio.sleep(0.6)  # the sweep reaches b's old relay
        found = (held.busy, held.relay.closed)  # type: ignore[attr-defined]
        table.done(held)
        await table.close()
        return found

    assert asyncio.run(main()) == (1, False)


def test_without_a_caller_source_the_one_relay_serves_the_whole_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(caller_relays, "IDLE_TIMEOUT", 0.1)
    monkeypatch.setattr(caller_relays, "SWEEP_EVERY", 0.05)
    opened: list[CallerRelay] = []

    async def main() -> None:
        async def opener(upstream: Upstream, who: Caller | None) -> CallerRelay:
            relay = CallerRelay(upstream, opened)
            return relay

        table = CallerRelays(opener, stateless_clients(), say=lambda text: None)
        table.done(await table.take(None))
        await asyncio.sleep(0.5)
        assert len(table) == 1 and not opened[0].closed
        table.done(await table.take(None))
        await table.close()

    asyncio.run(main())
    assert len(opened) == 1


def test_one_caller_holds_at_most_a_quarter_of_the_requests_being_served() -> None:
    got: dict[str, Any] = {}

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider, _: HttpEndpoint) -> None:
        mallory = idp.token("mallory")
        held = [
            asyncio.ensure_future(http.post(url, **stateless(mallory, "hold")))
            for _ in range(http_endpoint.CALLER_REQUESTS)
        ]
        await asyncio.sleep(1.0)
        got["one more"] = await http.post(url, **stateless(mallory))
        got["alice"] = await http.post(url, **stateless(idp.token("alice")))
        for request in held:
            request.cancel()
        await asyncio.gather(*held, return_exceptions=True)

    limits = httpx2.Limits(max_connections=200)
    serve(work, limits=limits)
    assert got["one more"].status_code == 429
    assert got["one more"].json()["error"]["message"] == (
        f"too many requests of this caller at once ({http_endpoint.CALLER_REQUESTS})"
    )
    assert who(got["alice"]) == "alice"


def test_a_caller_whose_servers_cannot_start_delays_no_other_caller() -> None:
    opens: list[str] = []

    async def main() -> dict[str, str]:
        async def opener(upstream: Upstream, who: Caller | None) -> CallerRelay:
            assert who is not None
            opens.append(who.name)
            if who.name == "mallory":
                raise RuntimeError("caller 'mallory' refused: its workspace cannot be made")
            relay = CallerRelay(upstream, [])
            relay.opened_for = who
            return relay

        table = CallerRelays(opener, stateless_clients(), say=lambda text: None)
        out = {}
        for name in ("mallory", "mallory", "alice"):
            try:
                table.done(await table.take(Caller(name, frozenset(), "https://idp.example")))
                out[name] = "served"
            except RuntimeError as exc:
                out[name] = str(exc)
        await table.close()
        return out

    out = asyncio.run(main())
    assert out == {
        "mallory": "caller 'mallory' refused: its workspace cannot be made",
        "alice": "served",
    }
    assert opens == ["mallory", "alice"]  # her retry within the time is told the same
