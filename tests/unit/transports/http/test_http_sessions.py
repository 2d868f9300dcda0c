"""The session registry of ``--http`` in process, on the real HTTP stack (uvicorn and the
``mcp`` SDK's transport) with a relay that answers by itself: a client that goes away
without DELETE does not lock the next one out, and a busy session is never taken away."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx2
import pytest

from launcher.shared.caller_identity import Caller
from launcher.shared.jsonrpc import result
from launcher.transports.http import bounds
from launcher.transports.http.client_stream import ClientStream
from launcher.transports.http.endpoint import HttpEndpoint

TOKEN = "t" * 32
HEAD = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream"}  # fmt: skip
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip


class Answering:
    """A relay that answers every request at once, and records that it was closed."""

    caller: Caller | None = None

    def __init__(self, upstream: ClientStream, closed: list[str]) -> None:
        self.upstream = upstream
        self.closed = closed

    def feed(self, line: bytes) -> None:
        message = json.loads(line)
        if "id" in message and "method" in message:
            answer: dict[str, Any] = {}
            if message["method"] == "initialize":
                answer = {"protocolVersion": "2025-11-25", "capabilities": {},
                          "serverInfo": {"name": "fake", "version": "1"}}  # fmt: skip
            self.upstream.deliver(result(message["id"], answer))

    def holds(self) -> bool:
        return False

    def listed_tool(self, name: str) -> dict[str, Any] | None:
        return None

    async def close(self) -> None:
        self.closed.append(self.upstream.id)


async def _endpoint(closed: list[str], max_sessions: int = 16) -> HttpEndpoint:
    async def opener(upstream: Any, caller: Caller | None) -> Answering:
        return Answering(upstream, closed)

    endpoint = HttpEndpoint(0, TOKEN, opener, lambda text: None, max_sessions=max_sessions)
    await endpoint.start()
    return endpoint


async def _open(http: httpx2.AsyncClient, url: str) -> str:
    opened = await http.post(url, json=INIT, headers=HEAD)
    assert opened.status_code == 200, opened.text
    return str(opened.headers["mcp-session-id"])


async def _ping(http: httpx2.AsyncClient, url: str, sid: str) -> int:
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {**HEAD, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
    return (await http.post(url, json=ping, headers=headers)).status_code


def test_a_new_client_ends_the_session_unused_longest(monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[str] = []
    found: dict[str, Any] = {}

    async def scenario() -> None:
        endpoint = await _endpoint(closed, max_sessions=3)
        try:
            async with httpx2.AsyncClient(timeout=10) as http:
                sids = [await _open(http, endpoint.url) for _ in range(3)]
                assert await _ping(http, endpoint.url, sids[0]) == 200  # the first is used again
                fourth = await _open(http, endpoint.url)  # the second, unused longest, ends
                found["statuses"] = [await _ping(http, endpoint.url, s) for s in (*sids, fourth)]
                found["sids"] = sids
        finally:
            await endpoint.stop()

    asyncio.run(scenario())
    assert found["statuses"] == [200, 404, 200, 200]
    assert closed[0] == found["sids"][1]


def test_busy_sessions_are_kept_and_the_new_client_is_told_to_come_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found: dict[str, Any] = {}

    async def scenario() -> None:
        endpoint = await _endpoint([], max_sessions=2)
        try:
            async with httpx2.AsyncClient(timeout=10) as http:
                sids = [await _open(http, endpoint.url) for _ in range(2)]
                # Each keeps its GET stream open: both are in use.
                streams = []
                for sid in sids:
                    get = http.build_request("GET", endpoint.url, headers={
                        **HEAD, "Mcp-Session-Id": sid, "Accept": "text/event-stream"})  # fmt: skip
                    streams.append(await http.send(get, stream=True))
                refused = await http.post(endpoint.url, json=INIT, headers=HEAD)
                found["refused"] = refused.status_code
                for stream in streams:
                    await stream.aclose()
                await asyncio.sleep(0.2)
                found["after"] = (
                    await http.post(endpoint.url, json=INIT, headers=HEAD)
                ).status_code
        finally:
            await endpoint.stop()

    asyncio.run(scenario())
    assert found == {"refused": 503, "after": 200}


def test_servers_that_cannot_start_fail_the_initialize_and_open_no_session() -> None:
    found: dict[str, Any] = {}

    async def failing(upstream: Any, caller: Caller | None) -> Answering:
        raise RuntimeError("server 'probe' failed to start: exit status 3")

    async def scenario() -> None:
        endpoint = HttpEndpoint(0, TOKEN, failing, lambda text: None)
        await endpoint.start()
        try:
            async with httpx2.AsyncClient(timeout=10) as http:
                opened = await http.post(endpoint.url, json=INIT, headers=HEAD)
                found["status"] = opened.status_code
                found["events"] = [
                    json.loads(line[6:])
                    for line in opened.text.splitlines()
                    if line.startswith("data: {")
                ]
                sid = opened.headers.get("mcp-session-id")
                found["after"] = await _ping(http, endpoint.url, sid) if sid else None
                found["open"] = len(endpoint.sessions)
        finally:
            await endpoint.stop()

    asyncio.run(scenario())
    (answer,) = found["events"]
    assert answer["id"] == 0 and answer["error"]["code"] == -32603
    assert "cannot start the servers: server 'probe' failed to start" in answer["error"]["message"]
    assert found["after"] in (None, 404) and found["open"] == 0


async def _held(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that has sent part of a request head, as a slow client would."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    await writer.drain()
    return reader, writer


def test_a_head_trickled_a_line_at_a_time_does_not_hold_a_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No token is needed to connect: whoever trickles header lines must not keep the
    # launcher's descriptors; a whole request on another connection is served meanwhile.
    monkeypatch.setattr(bounds, "HEAD_TIMEOUT", 0.5)
    found: dict[str, Any] = {}

    async def scenario() -> None:
        endpoint = await _endpoint([])
        try:
            reader, writer = await _held(endpoint.port)
            closed_by_server = False
            for _ in range(30):  # three seconds of a header line every 0.1 s
                await asyncio.sleep(0.1)
                if reader.at_eof():
                    closed_by_server = True
                    break
                try:
                    writer.write(b"X-Slow: 1\r\n")
                    await writer.drain()
                except ConnectionError:
                    closed_by_server = True
                    break
            found["closed"] = closed_by_server
            writer.close()
            async with httpx2.AsyncClient(timeout=10) as http:
                found["served"] = bool(await _open(http, endpoint.url))
        finally:
            await endpoint.stop()

    asyncio.run(scenario())
    assert found == {"closed": True, "served": True}


def test_idle_connections_beyond_the_bound_keep_nobody_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Whoever holds as many connections as the bound, sending nothing, keeps nobody out: a
    # new connection ends the one idle longest, and the client with the token is served.
    monkeypatch.setattr(bounds, "MAX_CONNECTIONS", 4)
    found: dict[str, Any] = {}

    async def scenario() -> None:
        endpoint = await _endpoint([])
        try:
            held = [await _held(endpoint.port) for _ in range(4)]
            async with httpx2.AsyncClient(timeout=10) as http:
                found["served"] = bool(await _open(http, endpoint.url))
            found["oldest"] = await asyncio.wait_for(held[0][0].read(), 5)  # ended
            for _, writer in held:
                writer.close()
        finally:
            await endpoint.stop()

    asyncio.run(scenario())
    assert found == {"served": True, "oldest": b""}
