"""Requests of the stateless era over ``--http``, in process, on the real HTTP stack with a
relay that answers by itself: no session, each POST answered on its own response, the
headers held to the body, two clients' equal ids kept apart, and a client that goes away
cancelling its request."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from typing import Any

import httpx2

from launcher.shared.caller_identity import Caller
from launcher.shared.error_codes import METHOD_NOT_FOUND
from launcher.shared.jsonrpc import error, notification, result
from launcher.transports.http.endpoint import HttpEndpoint
from launcher.transports.http.stateless_requests import STREAM_BACKLOG, StatelessClients, Upstream

TOKEN = "t" * 32
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}  # fmt: skip


def head(method: str, name: str | None = None, version: str = "2026-07-28") -> dict[str, str]:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": version, "Mcp-Method": method}  # fmt: skip
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


def call(rid: object, name: str, **meta: object) -> dict[str, Any]:
    params = {"name": name, "arguments": {}, "_meta": {**META, **meta}}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


class Echoing:
    """A relay that answers each call with the id it was given; ``hold`` is held until
    cancelled."""

    caller: Caller | None = None

    def __init__(self, upstream: Upstream, seen: list[dict[str, Any]]) -> None:
        self.upstream = upstream
        self.seen = seen

    def feed(self, line: bytes) -> None:
        message = json.loads(line)
        self.seen.append(message)
        if "id" not in message:
            return
        name = message["params"].get("name")
        if name == "hold":
            return
        if name == "missing":
            self.upstream.deliver(error(message["id"], METHOD_NOT_FOUND, "method not found"))
            return
        if name == "burst":  # a server that reports more progress at once than is held
            for step in range(STREAM_BACKLOG + 10):
                progress = {"progressToken": "p", "progress": step}
                self.upstream.deliver(
                    notification("notifications/progress", progress), message["id"]
                )
            self.upstream.deliver(result(message["id"], {"content": []}), message["id"])
            return
        answer = {"content": [{"type": "text", "text": f"{name} as {message['id']}"}]}
        asyncio.get_running_loop().call_later(
            0.05, self.upstream.deliver, result(message["id"], answer)
        )

    def holds(self) -> bool:
        return False

    def listed_tool(self, name: str) -> dict[str, Any] | None:
        return None

    async def close(self) -> None:
        pass


def scenario(work: Any) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    async def main() -> None:
        async def opener(upstream: Upstream, caller: Caller | None) -> Echoing:
            return Echoing(upstream, seen)

        endpoint = HttpEndpoint(0, TOKEN, opener, lambda text: None)
        await endpoint.start()
        try:
            async with httpx2.AsyncClient(timeout=10) as http:
                await work(http, endpoint.url)
        finally:
            await endpoint.stop()

    asyncio.run(asyncio.wait_for(main(), 30))
    return seen


def test_each_request_is_answered_on_its_own_response_with_its_own_id() -> None:
    async def work(http: httpx2.AsyncClient, url: str) -> None:
        # Two clients, both with id 1, at once: each gets its own answer, under its own id.
        a, b = await asyncio.gather(
            http.post(url, json=call(1, "first"), headers=head("tools/call", "first")),
            http.post(url, json=call(1, "second"), headers=head("tools/call", "second")),
        )
        for response, name in ((a, "first"), (b, "second")):
            assert response.status_code == 200, response.text
            assert "mcp-session-id" not in response.headers
            answer = response.json()
            assert answer["id"] == 1
            assert answer["result"]["content"][0]["text"].startswith(f"{name} as http-")

    seen = scenario(work)
    assert len({m["id"] for m in seen}) == 2  # the relay saw two ids, never the client's


def test_the_headers_must_say_what_the_body_does() -> None:
    async def work(http: httpx2.AsyncClient, url: str) -> None:
        wrong_name = await http.post(url, json=call(1, "first"), headers=head("tools/call", "x"))
        no_name = await http.post(url, json=call(2, "first"), headers=head("tools/call"))
        wrong_method = await http.post(
            url, json=call(3, "first"), headers=head("prompts/get", "first")
        )
        for response in (wrong_name, no_name, wrong_method):
            assert response.status_code == 400
            assert response.json()["error"]["code"] == -32020
        # A name no header can hold goes as base64, and is read so.
        name = "caf\u00e9\nbar"
        encoded = "=?base64?" + base64.b64encode(name.encode()).decode() + "?="
        good = await http.post(url, json=call(4, name), headers=head("tools/call", encoded))
        assert good.status_code == 200 and good.json()["id"] == 4
        missing = await http.post(
            url, json=call(5, "missing"), headers=head("tools/call", "missing")
        )
        assert missing.status_code == 404

    seen = scenario(work)
    assert [m["params"]["name"] for m in seen] == ["caf\u00e9\nbar", "missing"]


def test_only_a_post_and_only_a_version_spoken() -> None:
    async def work(http: httpx2.AsyncClient, url: str) -> None:
        got = await http.get(url, headers=head("tools/call"))
        assert got.status_code == 405 and got.headers["allow"] == "POST"
        later = await http.post(
            url, json=call(1, "x"), headers=head("tools/call", "x", "2099-01-01")
        )
        assert later.status_code == 400
        # The era's error, for the request it came with: the versions spoken, the one named.
        assert later.json()["id"] == 1 and later.json()["error"]["code"] == -32022
        assert later.json()["error"]["data"] == {
            "supported": ["2026-07-28"],
            "requested": "2099-01-01",
        }
        # A request without what every request of the era gives: 400, -32602.
        for meta in ({}, {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}):
            bare = {**call(2, "x"), "params": {"name": "x", "arguments": {}, "_meta": meta}}
            refused = await http.post(url, json=bare, headers=head("tools/call", "x"))
            assert refused.status_code == 400 and refused.json()["error"]["code"] == -32602

    assert scenario(work) == []


def test_a_client_that_goes_away_cancels_its_request() -> None:
    async def work(http: httpx2.AsyncClient, url: str) -> None:
        post = http.post(url, json=call(1, "hold"), headers=head("tools/call", "hold"))
        with contextlib.suppress(TimeoutError):  # it goes away before the answer
            await asyncio.wait_for(post, 0.5)
        await asyncio.sleep(0.2)

    seen = scenario(work)
    held, cancelled = seen
    assert cancelled["method"] == "notifications/cancelled"
    assert cancelled["params"]["requestId"] == held["id"]


def test_an_initialize_repeated_headers_and_odd_ids_are_refused_before_the_relay() -> None:
    async def work(http: httpx2.AsyncClient, url: str) -> None:
        opening = {"protocolVersion": "2025-11-25", "capabilities": {}, "_meta": META}
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": opening}
        refused = await http.post(url, json=hello, headers=head("initialize"))  # not in the era
        assert refused.status_code == 404 and refused.json()["error"]["code"] == -32601
        twice = [*head("tools/call", "first").items(), ("Mcp-Name", "other")]
        repeated = await http.post(url, json=call(2, "first"), headers=twice)
        assert repeated.status_code == 400 and repeated.json()["error"]["code"] == -32020
        for odd in (True, None, [1], {"a": 1}):
            answer = await http.post(
                url, json=call(odd, "first"), headers=head("tools/call", "first")
            )
            assert answer.status_code == 400 and answer.json()["error"]["code"] == -32600

    assert scenario(work) == []


def test_servers_that_cannot_start_are_an_error_and_not_started_for_every_request() -> None:
    tries: list[int] = []

    async def main() -> None:
        async def opener(upstream: Upstream, caller: Caller | None) -> Echoing:
            tries.append(1)
            raise RuntimeError("server 'fs' failed to start")

        endpoint = HttpEndpoint(0, TOKEN, opener, lambda text: None)
        await endpoint.start()
        try:
            async with httpx2.AsyncClient(timeout=10) as http:
                for rid in (1, 2, 3):
                    failed = await http.post(
                        endpoint.url, json=call(rid, "x"), headers=head("tools/call", "x")
                    )
                    assert failed.status_code == 500
                    said = failed.json()
                    assert said["id"] == rid and said["error"]["code"] == -32603
                    assert "failed to start" in said["error"]["message"]
        finally:
            await endpoint.stop()

    asyncio.run(asyncio.wait_for(main(), 30))
    assert tries == [1]  # not again within the wait


def test_a_calls_progress_is_streamed_and_its_answer_is_never_lost() -> None:
    # A server that reports more progress at once than a stream holds: the oldest progress
    # is let go, never the answer (the client's request would wait for it forever).
    async def work(http: httpx2.AsyncClient, url: str) -> None:
        got = await http.post(url, json=call(4, "burst", progressToken="p"),
                              headers=head("tools/call", "burst"))  # fmt: skip
        assert got.headers["content-type"] == "text/event-stream"
        events = [
            json.loads(line[6:]) for line in got.text.splitlines() if line.startswith("data: ")
        ]
        *progress, answer = events
        assert answer == {"jsonrpc": "2.0", "id": 4, "result": {"content": []}}
        assert 0 < len(progress) <= STREAM_BACKLOG
        assert all(p["method"] == "notifications/progress" for p in progress)

    assert scenario(work)


def test_what_is_made_for_a_listen_is_its_callers_in_the_audit() -> None:
    async def opener(upstream: Upstream, caller: Caller | None) -> Echoing:
        return Echoing(upstream, [])

    clients = StatelessClients(opener)
    clients._callers["http-3"] = {"caller": {"name": "alice", "issuer": "i"}}
    made = {"requestId": "http-3#ironcurtain-0123abcd-1"}
    assert clients.audit_fields(made) == {"caller": {"name": "alice", "issuer": "i"}}
    assert clients.audit_fields({"requestId": "http-4#ironcurtain-0123abcd-2"}) == {}


def test_a_servers_question_is_the_callers_whose_request_it_was_asked_during() -> None:
    # As a hostile server: its question's own id names another client's request.
    async def opener(upstream: Upstream, caller: Caller | None) -> Echoing:
        return Echoing(upstream, [])

    clients = StatelessClients(opener)
    clients._callers["http-1"] = {"caller": {"name": "alice", "issuer": "i"}}
    clients._callers["http-2"] = {"caller": {"name": "bob", "issuer": "i"}}
    asked = {"requestId": "http-1", "direction": "server-to-client", "callRequestId": "http-2"}
    assert clients.audit_fields(asked)["caller"] == {"name": "bob", "issuer": "i"}
    unattributed = {"requestId": "http-1", "direction": "server-to-client"}
    assert clients.audit_fields(unattributed) == {}
