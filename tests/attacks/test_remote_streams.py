"""A remote server's answers in event streams, as ironcurtain's streamable-HTTP transport
reads them: the calls of a session go over one kept-alive connection (a stream is read to
its end after its answer, so its connection can carry the next call), a server that never
ends a stream neither holds its call's answer back nor stops the calls after it, and a
session the server has ended answers each call with an error saying so; a redirect is
followed only on the server's own origin."""

from __future__ import annotations

import asyncio

import pytest

from launcher.host.launch_spec import LaunchSpec
from launcher.plan.remote_plan import RemoteTarget
from launcher.servers import remote_wire
from launcher.servers.remote import RemoteConnection
from launcher.shared.jsonrpc import TOOL, Message
from tests.support.hostile_remote import Hostile, hostile_remote

CALLS = 8


def _session(at: Hostile, tools: list[str]) -> tuple[list[Message], list[Message]]:
    """The answers to calls of ``tools`` in order, in one session; and every notification
    the connection handed on."""
    handed: list[Message] = []
    target = RemoteTarget(at.url, "127.0.0.1", at.port, "streamable-http", {}, {})

    async def scenario() -> list[Message]:
        conn = RemoteConnection(
            LaunchSpec("far", [], {}, "/", None), target, lambda c, m: handed.append(m)
        )
        try:
            await conn.start()
            await conn.initialize()
            return [await conn.request(TOOL, {"name": t, "arguments": {}}, 120) for t in tools]
        finally:
            await conn.stop()

    return asyncio.run(scenario()), handed


def _text(answer: Message) -> str:
    return str(answer["result"]["content"][0]["text"])


def test_the_calls_of_a_session_share_one_connection() -> None:
    with hostile_remote() as at:
        answers, handed = _session(at, ["streamed"] * CALLS)
        connections = at.seen.connections
    assert [_text(a) for a in answers] == ["streamed"] * CALLS
    assert sum(m.get("method") == "notifications/message" for m in handed) == CALLS
    # A call may go out while the stream before it is still read to its end (then it takes
    # another connection, kept for the calls after it), and so may the GET stream and the
    # DELETE: a few connections, never one per call.
    assert connections < CALLS


def test_control_a_stream_closed_at_its_answer_takes_its_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(remote_wire, "DRAINED", 0)
    with hostile_remote() as at:
        answers, _ = _session(at, ["streamed"] * CALLS)
        connections = at.seen.connections
    assert [_text(a) for a in answers] == ["streamed"] * CALLS
    assert connections > CALLS


def test_a_stream_that_never_ends_neither_holds_its_answer_nor_the_next_calls() -> None:
    with hostile_remote() as at:
        answers, _ = _session(at, ["lingering", "lingering", "whoami"])
    assert [_text(a) for a in answers[:2]] == ["streamed", "streamed"]
    assert _text(answers[2]).startswith("you sent")


def test_a_session_the_server_ended_is_said_to_be_ended() -> None:
    with hostile_remote() as at:
        answers, _ = _session(at, ["expired", "whoami"])
    assert answers[0]["error"]["message"] == "Session terminated"
    assert _text(answers[1]).startswith("you sent")


def test_a_redirect_on_the_servers_own_origin_is_followed() -> None:
    with hostile_remote() as at:
        answers, _ = _session(at, ["moved"])
    assert _text(answers[0]).startswith("you sent")


def test_a_redirect_to_another_host_is_not_followed_and_says_where() -> None:
    with hostile_remote() as at:
        answers, _ = _session(at, ["away", "whoami"])
    assert "redirect to http://127.0.0.2:9/mcp not followed" in answers[0]["error"]["message"]
    assert _text(answers[1]).startswith("you sent")  # the session goes on


def test_control_without_following_a_redirect_on_the_same_origin_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(remote_wire, "_moved", lambda response: None)
    with hostile_remote() as at:
        answers, _ = _session(at, ["moved"])
    assert "not followed" in answers[0]["error"]["message"]
