"""What MCP lets a client and a server do besides tool calls, through ``ironcurtain run`` with
the real ``mcp`` client, over stdio and over ``--http``: subscriptions and the updates they
bring, the client's log level honoured by the server, a cancelled call (the server told, the
audit saying so, the session going on), and a batch answered, never met with silence."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.session import IncomingMessage

from tests.support.audit import audit_entries
from tests.support.client import Client
from tests.support.home import Home
from tests.support.http import TOKEN, http_session, probe_args, serving
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN
from tests.support.probe import probe_calls
from tests.support.sdk import call

# The 2026-07-28 protocol replaces these methods; servers and clients of 2025-11-25 use them.
pytestmark = [needs_bwrap, pytest.mark.filterwarnings("ignore:.*2026-07-28")]

TRANSPORTS = ["stdio", "http"]


class Heard:
    """What the client was sent unasked."""

    def __init__(self) -> None:
        self.updated: list[str] = []
        self.logs: list[tuple[str, Any]] = []

    async def message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updated.append(str(message.params.uri))

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append((params.level, params.data))


async def _settle(check: Callable[[], object], seconds: float = 5) -> None:
    for _ in range(int(seconds * 20)):
        if check():
            return
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_subscriptions_and_log_levels_reach_the_server(user: Home, transport: str) -> None:
    heard = Heard()
    out: list[str] = []

    async def scenario(opened: ClientSession) -> None:
        await opened.subscribe_resource("probe://status")
        out.append((await call(opened, "touch", {"uri": "probe://status"}))[1])
        await _settle(lambda: heard.updated)
        await opened.unsubscribe_resource("probe://status")
        out.append((await call(opened, "touch", {"uri": "probe://status"}))[1])
        await opened.set_logging_level("error")
        out.append((await call(opened, "log_each", {}))[1])
        await _settle(lambda: heard.logs)

    asyncio.run(_with(user, transport, scenario, heard))
    assert out == ["TOUCHED, subscribers told", "TOUCHED, nobody subscribed", "LOGGED error"]
    assert heard.updated == ["probe://status"]
    assert heard.logs == [("error", "at error")]


async def _with(
    user: Home, transport: str, scenario: Callable[[ClientSession], Awaitable[None]], heard: Heard
) -> None:
    if transport == "stdio":
        argv = [IRONCURTAIN, "run", *probe_args(user)]
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=user.env)
        async with (
            stdio_client(params) as (read, write),
            ClientSession(
                read, write, message_handler=heard.message, logging_callback=heard.log
            ) as opened,
        ):
            await opened.initialize()
            await scenario(opened)
        return
    with serving(user, *probe_args(user)) as served:
        async with http_session(
            served.url, message_handler=heard.message, logging_callback=heard.log
        ) as opened:
            await scenario(opened)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_cancelled_call_is_audited_as_cancelled_and_the_session_goes_on(
    user: Home, transport: str
) -> None:
    out: list[tuple[bool, str]] = []

    async def scenario(opened: ClientSession) -> None:
        slow = asyncio.create_task(opened.call_tool("slow", {"steps": 100}))
        await _settle(lambda: any(c["tool"] == "slow" for c in probe_calls(user.ws())))
        slow.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await slow
        out.append(await call(opened, "instance", {}))

    asyncio.run(_with(user, transport, scenario, Heard()))
    assert not out[0][0] and out[0][1].startswith("INSTANCE ")
    slow_entries = [e for e in audit_entries(user.root / "audit.jsonl") if e.get("tool") == "slow"]
    assert [e.get("result") for e in slow_entries] == ["cancelled"]


def test_a_batch_is_answered_with_a_clear_error(user: Home) -> None:
    args = [IRONCURTAIN, "run", *probe_args(user)]
    peer = Client.spawn(args, user.env)
    try:
        peer.initialize(client="raw")
        batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"},
                 {"jsonrpc": "2.0", "id": 2, "method": "ping"}]  # fmt: skip
        peer.send(json.dumps(batch).encode())
        answer = peer.receive()
        assert answer["error"]["code"] == -32600 and "batch" in answer["error"]["message"]
    finally:
        peer.close(timeout=10)
    with serving(user, *probe_args(user)) as served, httpx2.Client(timeout=10) as http:
        head = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream"}  # fmt: skip
        refused = http.post(served.url, content=json.dumps(batch), headers=head)
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] in (-32600, -32602)
