"""Gateway mode at the HTTP endpoint, in process, on the real HTTP stack with a relay that
records what reaches it: every refused token is answered 401 with where the endpoint's
protected resource metadata is, before anything reaches a relay, in either protocol era; the
metadata is served without a token; a session serves only the caller that opened it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2

from launcher.shared.caller_identity import Caller
from launcher.shared.jsonrpc import result
from launcher.transports.http.endpoint import HttpEndpoint
from launcher.transports.http.gateway.gatekeeper import Gatekeeper
from launcher.transports.http.gateway.keys import gateway
from launcher.transports.http.stateless_requests import Upstream
from tests.support.idp import AUDIENCE, Key, Provider, identity_provider

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}  # fmt: skip
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
ACCEPT = "application/json, text/event-stream"


class Recording:
    """A relay that answers every request and records each with the audit fields its
    client's transport gives it."""

    caller: Caller | None = None

    def __init__(self, upstream: Upstream, seen: list[tuple[str, Any]]) -> None:
        self.upstream, self.seen = upstream, seen

    def feed(self, line: bytes) -> None:
        message = json.loads(line)
        fields = self.upstream.audit_fields({"requestId": message.get("id")})
        self.seen.append((message.get("method"), dict(fields)))
        if "id" not in message:
            return
        if message["method"] == "initialize":
            answer: dict[str, Any] = {"protocolVersion": "2025-11-25", "capabilities": {},
                                      "serverInfo": {"name": "r", "version": "1"}}  # fmt: skip
        else:
            answer = {"content": [{"type": "text", "text": "done"}]}
        self.upstream.deliver(result(message["id"], answer))

    def holds(self) -> bool:
        return False

    def listed_tool(self, name: str) -> dict[str, Any] | None:
        return None

    async def close(self) -> None:
        pass


Work = Callable[[httpx2.AsyncClient, str, Provider], Awaitable[None]]


def scenario(work: Work) -> tuple[list[tuple[str, Any]], list[str], Provider]:
    seen: list[tuple[str, Any]] = []
    said: list[str] = []
    with identity_provider() as idp:

        async def main() -> None:
            async def opener(upstream: Upstream, caller: Caller | None) -> Recording:
                return Recording(upstream, seen)

            keeper = Gatekeeper(gateway(idp.issuer, AUDIENCE, None), said.append)
            endpoint = HttpEndpoint(0, None, opener, said.append, keeper)
            await endpoint.start()
            try:
                async with httpx2.AsyncClient(timeout=10) as http:
                    await work(http, endpoint.url, idp)
            finally:
                await endpoint.stop()

        asyncio.run(asyncio.wait_for(main(), 60))
    return seen, said, idp


def stateless(token: str | None, name: str = "get_current_time") -> dict[str, Any]:
    headers = {"Content-Type": "application/json", "Accept": ACCEPT,
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
               "Mcp-Name": name}  # fmt: skip
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    params = {"name": name, "arguments": {}, "_meta": META}
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    return {"json": body, "headers": headers}


def handshake(token: str | None, sid: str | None = None) -> dict[str, Any]:
    headers = {"Content-Type": "application/json", "Accept": ACCEPT}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if sid is not None:
        headers["Mcp-Session-Id"] = sid
        headers["MCP-Protocol-Version"] = "2025-11-25"
    return {"json": INIT if sid is None else {**INIT, "id": 2, "method": "tools/list",
                                               "params": {}}, "headers": headers}  # fmt: skip


def bad_tokens(idp: Provider) -> dict[str, str | None]:
    """Each token a gateway must refuse, by what is wrong with it."""
    now = int(time.time())
    return {
        "missing": None,
        "the static bearer token": "a-test-token-" + "x" * 20,
        "expired": idp.token("alice", exp=now - 3600),
        "not yet valid": idp.token("alice", nbf=now + 3600),
        "wrong audience": idp.token("alice", aud="https://elsewhere.example"),
        "wrong issuer": idp.token("alice", iss="https://evil.example/realms/team"),
        "bad signature": idp.token("alice", key=Key("RS256", kid=idp.key.kid)),
        "alg none": idp.forged_none("alice"),
        "HS256 with the public key": idp.forged_hs256("alice"),
        "unknown key id": idp.token("alice", key=Key("ES256")),
    }


def test_every_refused_token_reaches_nothing_in_either_era() -> None:
    answers: dict[str, list[httpx2.Response]] = {}

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider) -> None:
        for why, token in bad_tokens(idp).items():
            answers[why] = [
                await http.post(url, **stateless(token)),
                await http.post(url, **handshake(token)),
            ]
        # Control: the provider's token for the same requests reaches the relay.
        good = idp.token("alice")
        answers["control"] = [
            await http.post(url, **stateless(good)),
            await http.post(url, **handshake(good)),
        ]

    seen, _, _ = scenario(work)
    base = "http://127.0.0.1:"
    for why, responses in answers.items():
        if why == "control":
            assert [r.status_code for r in responses] == [200, 200]
            continue
        for response in responses:
            assert response.status_code == 401, (why, response.text)
            challenge = response.headers["www-authenticate"]
            assert challenge.startswith(f'Bearer resource_metadata="{base}'), why
            assert '/.well-known/oauth-protected-resource"' in challenge, why
            given = why != "missing"
            assert ('error="invalid_token"' in challenge) == given, why
    # Nothing but the control's two requests reached a relay.
    assert [method for method, _ in seen] == ["tools/call", "initialize"]
    issuer = seen[0][1]["caller"]["issuer"]
    assert seen[0][1]["caller"] == {"name": "alice", "issuer": issuer}
    assert seen[1][1]["caller"]["name"] == "alice" and len(seen[1][1]["httpSession"]) == 32


def test_the_metadata_is_served_without_a_token() -> None:
    documents: list[Any] = []

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider) -> None:
        base = url.removesuffix("/mcp")
        for path in ("/.well-known/oauth-protected-resource",
                     "/.well-known/oauth-protected-resource/mcp"):  # fmt: skip
            response = await http.get(base + path)
            assert response.status_code == 200
            assert response.headers["content-type"] == "application/json"
            documents.append((response.json(), idp.issuer, url))
        assert (await http.post(base + "/.well-known/oauth-protected-resource")).status_code == 405
        # Host checks still come first: a rebound name gets nothing, metadata included.
        evil = await http.get(base + "/.well-known/oauth-protected-resource",
                              headers={"Host": "evil.example"})  # fmt: skip
        assert evil.status_code == 421

    seen, _, _ = scenario(work)
    for document, issuer, url in documents:
        assert document == {
            "resource": url,
            "authorization_servers": [issuer],
            "bearer_methods_supported": ["header"],
        }
    assert seen == []


def test_a_session_serves_only_the_caller_that_opened_it() -> None:
    statuses: dict[str, int] = {}

    async def work(http: httpx2.AsyncClient, url: str, idp: Provider) -> None:
        alice, bob = idp.token("alice"), idp.token("bob")
        opened = await http.post(url, **handshake(alice))
        sid = opened.headers["mcp-session-id"]
        await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                        headers={**handshake(alice, sid)["headers"]})  # fmt: skip
        statuses["bob"] = (await http.post(url, **handshake(bob, sid))).status_code
        statuses["bob deletes"] = (
            await http.delete(url, headers=handshake(bob, sid)["headers"])
        ).status_code
        # Control: alice's own next token on her session.
        renewed = idp.token("alice", scope="crm:read")  # her next token, other permissions
        statuses["alice"] = (await http.post(url, **handshake(renewed, sid))).status_code

    seen, _, _ = scenario(work)
    assert statuses == {"bob": 404, "bob deletes": 404, "alice": 200}
    assert [method for method, _ in seen] == ["initialize", "notifications/initialized",
                                              "tools/list"]  # fmt: skip
    assert {fields["caller"]["name"] for _, fields in seen} == {"alice"}
