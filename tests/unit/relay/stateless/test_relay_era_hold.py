"""The relay core when its client's first request says an era its servers were not opened
in: the request, and what follows it, waits while the servers of both eras are opened in
the client's era (the session's part, :meth:`launcher.servers.fleet.Fleet.speak`), then is
served as it came, through the same gate; with nothing to open it is served at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from launcher.relay.core import HELD
from launcher.relay.stateless.era import CAPABILITIES, VERSION
from launcher.shared.jsonrpc import Message
from tests.support.relay import Harness, build, run

META = {VERSION: "2026-07-28", CAPABILITIES: {}}


def call(h: Harness, rid: int, path: str) -> None:
    params = {"name": "read_file", "arguments": {"path": path}, "_meta": META}
    h.feed({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})


def answered(h: Harness) -> list[Message]:
    return [m for m in h.client.sent if "id" in m and "method" not in m]


def test_the_first_request_waits_for_the_servers_then_passes_the_gate(tmp_path: Path) -> None:
    h = build(tmp_path, initialize=False)
    asked: list[str] = []
    opened = asyncio.Event()

    async def opening() -> None:
        await opened.wait()

    def speak(era: str) -> asyncio.Future[None]:
        asked.append(era)
        return asyncio.ensure_future(opening())

    h.relay.core.speak = speak

    async def work() -> None:
        call(h, 1, str(h.ws / "a.txt"))
        call(h, 2, "/etc/passwd")  # the policy denies it (outside the workspace)
        await asyncio.sleep(0.05)
        assert h.fs.requests == [] and answered(h) == []  # nothing served meanwhile
        opened.set()
        first, second = await h.answer(1), await h.answer(2)
        assert first is not None and not first["result"].get("isError")
        assert second is not None and second["result"]["isError"]
        assert second["result"]["content"][0]["text"].startswith("DENIED")
        assert [m for m, _ in h.fs.requests] == ["tools/call"]  # only the allowed one
        call(h, 3, str(h.ws / "a.txt"))  # after: served at once, nothing opened again
        assert await h.answer(3) is not None

    run(work)
    assert asked == ["stateless"]
    entries = sorted((e["requestId"], e["result"], e.get("era")) for e in h.entries())
    assert entries == [(1, "success", "stateless"), (2, "denied", "stateless"),
                       (3, "success", "stateless")]  # fmt: skip


def test_with_nothing_to_open_the_request_is_served_at_once(tmp_path: Path) -> None:
    h = build(tmp_path, initialize=False)
    h.relay.core.speak = lambda era: None  # every server serves one era only

    async def work() -> None:
        call(h, 1, str(h.ws / "a.txt"))
        assert len(h.fs.requests) == 1  # forwarded in the callback that read it
        assert await h.answer(1) is not None

    run(work)


def test_what_cannot_be_held_is_refused_and_a_failed_opening_serves_as_before(
    tmp_path: Path,
) -> None:
    h = build(tmp_path, initialize=False)
    opened = asyncio.Event()

    async def failing() -> None:
        await opened.wait()
        raise RuntimeError("the instance could not start")

    h.relay.core.speak = lambda era: asyncio.ensure_future(failing())

    async def work() -> None:
        for rid in range(1, HELD + 3):
            call(h, rid, str(h.ws / "a.txt"))
        over = [m for m in answered(h) if m["id"] in (HELD + 1, HELD + 2)]
        assert [m["error"]["code"] for m in over] == [-32603, -32603]
        opened.set()
        assert await h.answer(HELD, wait=15) is not None  # served by the servers as they were
        assert len(h.fs.requests) == HELD

    run(work)
    assert any("could not start" in line for line in h.said)
