"""``subscriptions/listen`` end to end: the ``mcp`` SDK's client pinned to 2026-07-28, over
stdio and ``--http``, through ``ironcurtain run`` to the probe server (a server of the
handshake era, whose resources are watched with ``resources/subscribe``): the listen is
acknowledged with what it gets, and a change of the watched resource reaches it; once it is
closed, the server is told to stop watching. A call's progress reaches such a client too
(over HTTP, on the call's own event stream)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.home import Home
from tests.support.http import probe_args
from tests.support.marks import needs_bwrap
from tests.support.modes import client_in

pytestmark = needs_bwrap
ERA = "2026-07-28"


def stateless_client(user: Home, transport: str) -> Any:
    return client_in(user, transport, probe_args(user), ERA)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_listen_hears_the_resource_it_watches_change(user: Home, transport: str) -> None:
    seen: dict[str, object] = {}

    async def scenario() -> None:
        async with stateless_client(user, transport) as client:
            async with client.listen(
                resource_subscriptions=["probe://status", "file:///etc/shadow"]
            ) as sub:
                seen["honored"] = sub.honored.resource_subscriptions
                touched = await client.call_tool("touch", {"uri": "probe://status"})
                seen["touched"] = touched.content[0].text
                with anyio.fail_after(10):
                    event = await sub.__anext__()
                seen["event"] = event
            # Closed: the server stops watching (after the unsubscribe reaches it).
            with anyio.fail_after(10):
                while True:
                    again = await client.call_tool("touch", {"uri": "probe://status"})
                    if again.content[0].text == "TOUCHED, nobody subscribed":
                        break
                    await anyio.sleep(0.05)

    anyio.run(scenario)
    # The file outside what the policy lets it read is not watched.
    assert seen["honored"] == ["probe://status"]
    assert seen["touched"] == "TOUCHED, subscribers told"
    assert "probe://status" in repr(seen["event"])
    entries = [
        json.loads(line) for line in Path(user.root / "audit.jsonl").read_text().splitlines()
    ]
    watched = [
        (e["method"], e["policy"]["decision"])
        for e in entries
        if "subscribe" in e.get("method", "")
    ]
    assert ("resources/subscribe", "allow") in watched
    assert ("resources/subscribe", "deny") in watched
    assert ("resources/unsubscribe", "allow") in watched


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_calls_progress_reaches_a_stateless_client(user: Home, transport: str) -> None:
    heard: list[float] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        heard.append(done)

    async def scenario() -> None:
        async with stateless_client(user, transport) as client:
            result = await client.call_tool("slow", {"steps": 3}, progress_callback=progress)
            assert result.content[0].text == "SLOW done 3"

    anyio.run(scenario)
    assert heard == [1, 2, 3]
