"""The ``mcp`` SDK's own client in each of its modes, over stdio and over ``--http``, through
``ironcurtain run``
to the real reference servers in their sandboxes: pinned to the stateless era (2026-07-28),
in ``auto`` (which asks ``server/discover`` and so takes the stateless era), and in the
handshake era, as before. The same policy answers all three, and the audit says the era."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import anyio
import pytest
from mcp import Client

from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.modes import client_in

pytestmark = needs_bwrap

MODES = [("2026-07-28", "2026-07-28"), ("auto", "2026-07-28"), ("legacy", "2025-11-25")]


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize(("mode", "era"), MODES)
def test_each_mode_of_the_sdk_client_gets_the_same_policy(
    user: Home, mode: str, era: str, transport: str
) -> None:
    ws = user.ws()
    (ws / "notes.txt").write_text("inside")
    audit = user.root / "audit.jsonl"
    argv = ["--workspace", str(ws), "--audit-log", str(audit)]
    argv += ["--server", "filesystem", "--server", "time"]
    seen: dict[str, object] = {}

    async def scenario() -> None:
        async with client_in(user, transport, argv, mode) as client:
            await session(client)

    async def session(client: Client) -> None:
        seen["version"] = client.protocol_version
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"filesystem__read_text_file", "time__get_current_time"} <= names
        inside = await client.call_tool(
            "filesystem__read_text_file", {"path": str(ws / "notes.txt")}
        )
        seen["inside"] = (inside.is_error, inside.content[0].text)  # type: ignore[union-attr]
        outside = await client.call_tool("filesystem__read_text_file", {"path": "/etc/shadow"})
        seen["outside"] = (outside.is_error, outside.content[0].text)  # type: ignore[union-attr]
        now = await client.call_tool("time__get_current_time", {"timezone": "UTC"})
        seen["time"] = now.is_error

    anyio.run(scenario)
    assert seen["version"] == era
    assert seen["inside"] == (False, "inside")
    error, text = cast(tuple[bool, str], seen["outside"])
    assert error and text.startswith("DENIED")
    assert seen["time"] is False
    entries = [json.loads(line) for line in Path(audit).read_text().splitlines()]
    calls = [e for e in entries if e.get("method") == "tools/call"]
    assert [e["policy"]["decision"] for e in calls] == ["allow", "deny", "allow"]
    expected = "stateless" if era == "2026-07-28" else None
    assert {e.get("era") for e in calls} == {expected}
    if transport == "http" and era == "2026-07-28":
        # ironcurtain's own id for each request, and the client's beside it.
        assert all(e["requestId"].startswith("http-") for e in calls)
        assert len({e["clientRequestId"] for e in calls}) == len(calls)
