"""Tool-list pinning: a tool whose description changes is escalated until accepted."""

from __future__ import annotations

import asyncio
import json

from tests.support.faulty import faulty_and_probe
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.sdk import call, connect

pytestmark = needs_bwrap


def _echo(user: Home, args: list[str], variant: str, *extra: str) -> tuple[bool, str]:
    config = user.root / "servers.json"
    data = json.loads(config.read_text())
    data["mcpServers"]["faulty"]["env"]["FAULTY_VARIANT"] = variant
    config.write_text(json.dumps(data))
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, *args, *extra) as s:
            out.append(await call(s, "faulty__echo", {"text": "hi"}))
            out.append(await call(s, "faulty__garbage", {}))  # unchanged: still trusted

    asyncio.run(scenario())
    assert out[1] == (False, "after garbage")
    return out[0]


def test_a_changed_tool_is_escalated_until_the_change_is_accepted(user: Home) -> None:
    args, _, _ = faulty_and_probe(user)
    assert _echo(user, args, "1") == (False, "hi")  # first use: pinned
    pins = json.loads((user.state / "ironcurtain" / "pins" / "faulty.json").read_text())
    assert set(pins["tools"]) == {"echo", "crash_now", "exit_soon", "hang", "garbage", "huge"}
    error, text = _echo(user, args, "2")  # the description changed
    assert error and text.startswith("ESCALATION REQUIRED (rule: tool-changed)")
    assert _echo(user, args, "2", "--accept-tool-changes") == (False, "hi")
    assert _echo(user, args, "2") == (False, "hi")  # the new description is the pin now
    error, _ = _echo(user, args, "1")  # and going back is a change too
    assert error
