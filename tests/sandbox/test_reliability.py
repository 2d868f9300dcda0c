"""A session that survives its servers: crashes, hangs, garbage, 50 MB lines,
cancellation from the client, and 500 concurrent calls across two servers."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tests.support.audit import audit_entries
from tests.support.client import Client
from tests.support.faulty import faulty_and_probe
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN
from tests.support.sdk import Calls, call, connect, session_calls

pytestmark = needs_bwrap


def test_a_crash_mid_call_and_between_calls_leaves_the_others_working(user: Home) -> None:
    args, _, audit = faulty_and_probe(user)
    out = session_calls(
        user,
        args,
        [
            ("faulty__crash_now", {}),
            ("probe__env_value", {"name": "HOME"}),
            ("faulty__echo", {"text": "still there?"}),
        ],
    )
    assert out[0] == (True, "ERROR: server 'faulty' exited with status 3; it is not running")
    assert out[1] == (False, "/tmp/home")
    assert out[2][0] and "exited with status 3" in out[2][1]
    assert [e["result"] for e in audit_entries(audit)] == [
        "server-exited",
        "success",
        "server-exited",
    ]


def test_a_server_that_dies_between_calls(user: Home) -> None:
    args, _, _ = faulty_and_probe(user)
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, *args) as s:
            out.append(await call(s, "faulty__exit_soon", {}))
            await asyncio.sleep(0.6)
            out.append(await call(s, "faulty__echo", {"text": "hello"}))

    asyncio.run(scenario())
    assert out[0] == (False, "bye")
    assert out[1] == (True, "ERROR: server 'faulty' exited with status 4; it is not running")


def test_a_call_over_its_timeout_is_cancelled_downstream(user: Home) -> None:
    args, ws, _ = faulty_and_probe(user, timeout=1)
    calls: Calls = [("faulty__hang", {"seconds": 30}), ("faulty__echo", {"text": "next"})]
    out = session_calls(user, args, calls)
    assert out[0] == (
        True,
        "ERROR: server 'faulty' did not answer within 1.0 s; the call was cancelled",
    )
    assert out[1] == (False, "next")
    assert (ws / "faulty.log").read_text() == "cancelled\n"


def test_garbage_and_a_50_mb_line_do_not_take_the_session_down(user: Home) -> None:
    args, _, _ = faulty_and_probe(user)
    calls: Calls = [
        ("faulty__garbage", {}),
        ("faulty__huge", {"megabytes": 50}),
        ("faulty__echo", {"text": "fine"}),
    ]
    out = session_calls(user, args, calls)
    assert out == [(False, "after garbage"), (False, "after huge"), (False, "fine")]


def _session(user: Home, args: list[str]) -> Client:
    """`ironcurtain run` spoken to in raw JSON lines, past its handshake."""
    client = Client.spawn([IRONCURTAIN, "run", *args], user.env)
    client.initialize(protocol="2025-06-18")
    return client


def test_a_call_the_client_cancels_is_cancelled_downstream_and_never_answered(
    user: Home,
) -> None:
    args, ws, audit = faulty_and_probe(user)
    client = _session(user, args)
    client.request("tools/call", {"name": "faulty__hang", "arguments": {"seconds": 30}}, id=5)
    time.sleep(0.5)
    client.notify("notifications/cancelled", {"requestId": 5, "reason": "user pressed stop"})
    client.request("tools/call", {"name": "faulty__echo", "arguments": {"text": "after"}}, id=6)
    reply = client.receive()
    assert reply["id"] == 6  # nothing for 5, ever: the next message is the answer to 6
    log = ws / "faulty.log"
    for _ in range(30):  # the server hears of it while the session still runs
        if log.exists():
            break
        time.sleep(0.1)
    assert log.read_text() == "cancelled\n"
    client.hang_up()
    assert client.rest() == b""
    client.proc.wait(timeout=10)
    assert (ws / "faulty.log").read_text() == "cancelled\n"
    results = {e["requestId"]: e["result"] for e in audit_entries(audit)}
    assert results == {5: "cancelled", 6: "success"}


def test_a_call_in_flight_when_the_client_leaves_is_audited_as_cancelled(user: Home) -> None:
    args, _, audit = faulty_and_probe(user)
    client = _session(user, args)
    client.request("tools/call", {"name": "faulty__hang", "arguments": {"seconds": 30}}, id=7)
    time.sleep(0.5)
    started = time.monotonic()
    client.hang_up()  # the client is gone, its call still out at the server
    assert client.rest() == b""
    client.proc.wait(timeout=10)
    assert time.monotonic() - started < 5  # not after the server's 30 s
    assert [(e["requestId"], e["result"]) for e in audit_entries(audit)] == [(7, "cancelled")]


def test_500_concurrent_calls_across_two_servers_each_answered_and_audited_once(
    user: Home,
) -> None:
    args, _, audit = faulty_and_probe(user)
    answers: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, *args) as s:

            async def one(i: int) -> tuple[bool, str]:
                if i % 2:
                    return await call(s, "faulty__echo", {"text": f"call {i}"})
                return await call(s, "probe__env_value", {"name": f"UNSET_{i}"})

            answers.extend(await asyncio.gather(*(one(i) for i in range(500))))

    asyncio.run(scenario())
    for i, (error, text) in enumerate(answers):
        assert not error and text == (f"call {i}" if i % 2 else "<unset>")
    entries = audit_entries(audit)
    ids = [e["requestId"] for e in entries]
    assert len(entries) == 500 and len(set(ids)) == 500
    assert {e["server"] for e in entries} == {"faulty", "probe"}
    assert all(e["result"] == "success" for e in entries)


def test_the_circuit_breaker_refuses_the_same_call_past_its_limit(user: Home) -> None:
    args, _, audit = faulty_and_probe(user)
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, *args, "--max-identical-calls", "3") as s:
            for _ in range(4):
                out.append(await call(s, "faulty__echo", {"text": "again"}))
            out.append(await call(s, "faulty__echo", {"text": "something else"}))

    asyncio.run(scenario())
    assert out[:3] == [(False, "again")] * 3
    assert out[3][0] and out[3][1].startswith("DENIED (rule: circuit-breaker)")
    assert out[4] == (False, "something else")
    assert [e["policy"]["rule"] for e in audit_entries(audit)][3] == "circuit-breaker"


def test_restart_with_back_off_until_the_limit(user: Home) -> None:
    args, _, audit = faulty_and_probe(user)
    config = user.root / "servers.json"
    data = json.loads(config.read_text())
    data["mcpServers"]["faulty"]["restart"] = {"maxRestarts": 2, "backoffSeconds": 0.2}
    config.write_text(json.dumps(data))
    out: list[tuple[bool, str]] = []

    async def eventually(s: Any, text: str) -> tuple[bool, str]:
        # back-off 0.2 s, then 0.4 s, plus a start (seconds on a loaded machine); each try
        # its own arguments, so the circuit breaker does not take them for a loop
        for attempt in range(100):
            answer = await call(s, "faulty__echo", {"text": f"{text} #{attempt}"})
            if not answer[0]:
                return answer
            await asyncio.sleep(0.1)
        return answer

    async def scenario() -> None:
        async with connect(user, *args) as s:
            out.append(await call(s, "faulty__crash_now", {}))
            out.append(await eventually(s, "back once"))
            out.append(await call(s, "faulty__crash_now", {}))
            out.append(await eventually(s, "back twice"))
            out.append(await call(s, "faulty__crash_now", {}))
            await asyncio.sleep(1.0)
            out.append(await call(s, "faulty__echo", {"text": "no more"}))
            out.append(await call(s, "probe__env_value", {"name": "HOME"}))

    asyncio.run(scenario())
    assert out[0][0] and "exited with status 3" in out[0][1]
    assert not out[1][0] and out[1][1].startswith("back once #")
    assert not out[3][0] and out[3][1].startswith("back twice #")
    assert out[5] == (True, "ERROR: server 'faulty' exited with status 3; it is not running")
    assert out[6] == (False, "/tmp/home")
    restarts = [e for e in audit_entries(audit) if e.get("event") == "server-restart"]
    assert [(e["attempt"], e["exitStatus"]) for e in restarts] == [(1, 3), (2, 3)]


def test_a_server_writing_what_no_client_can_parse_is_not_relayed(user: Home) -> None:
    args, _, _ = faulty_and_probe(user)
    client = _session(user, args)
    try:
        # The server also writes a log message holding NaN (valid for Python's json module
        # alone); the strict reader of every message here would fail on it.
        answer = client.call("faulty__garbage", {})
        assert answer["result"]["content"][0]["text"] == "after garbage"
        assert (
            client.call("faulty__echo", {"text": "fine"})["result"]["content"][0]["text"] == "fine"
        )
    finally:
        client.close(timeout=10)
