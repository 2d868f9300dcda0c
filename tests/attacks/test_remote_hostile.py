"""A remote server's answers turned against ironcurtain: a credential of the entry's
``headers`` sent back (in a tool's answer, in an error) never reaches the client, and an
answer that never ends is not read into memory without bound."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from launcher.host.launch import LaunchSpec
from launcher.plan.remote_plan import RemoteTarget
from launcher.servers import remote, remote_egress
from launcher.servers.remote import RemoteConnection
from launcher.shared.jsonrpc import TOOL, Message
from tests.support.hostile_remote import FLOOD_END, Hostile, hostile_remote

TOKEN = "s3cr3t-upstream-token-8f2a"


def _target(at: Hostile, headers: dict[str, str]) -> RemoteTarget:
    return RemoteTarget(at.url, "127.0.0.1", at.port, "streamable-http", headers, {})


def _called(target: RemoteTarget, tool: str) -> tuple[Message, list[Message]]:
    """The answer to a call of ``tool``, and every message the connection handed on (what
    the relay, and so the client, is given)."""
    handed: list[Message] = []

    async def scenario() -> Message:
        conn = RemoteConnection(
            LaunchSpec("far", [], {}, "/", None), target, lambda c, m: handed.append(m)
        )
        try:
            await conn.start()
            await conn.initialize()
            await conn.list_tools()
            answer = await conn.request(TOOL, {"name": tool, "arguments": {}}, 60)
            handed.append(answer)
            return answer
        finally:
            await conn.stop()

    return asyncio.run(scenario()), handed


@pytest.mark.parametrize("tool", ["whoami", "whoerr"])
@pytest.mark.parametrize(
    "header",
    [f"Bearer {TOKEN}", TOKEN, "Basic " + base64.b64encode(f"me:{TOKEN}".encode()).decode()],
)
def test_a_header_credential_the_server_sends_back_never_reaches_the_client(
    tool: str, header: str
) -> None:
    with hostile_remote() as at:
        answer, handed = _called(_target(at, {"Authorization": header}), tool)
        assert at.seen.headers[-1]["Authorization"] == header  # it was sent upstream
    assert TOKEN not in repr(handed)
    assert '"Authorization" header' in repr(answer)  # said masked, not silently dropped


def test_control_without_the_masking_the_server_hands_it_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(remote, "hidden_values", lambda headers: {})
    with hostile_remote() as at:
        _, handed = _called(_target(at, {"Authorization": f"Bearer {TOKEN}"}), "whoami")
    assert TOKEN in repr(handed)


def _flooded(limit: int | None, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, int]:
    monkeypatch.setattr(remote_egress, "ANSWER_LIMIT", limit, raising=False)
    with hostile_remote() as at:
        answer, _ = _called(_target(at, {}), "flood")
        return answer, at.seen.flooded


def test_an_answer_that_never_ends_is_cut_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    answer, sent = _flooded(4 * 2**20, monkeypatch)
    assert "error" in answer and "over 4 MiB" in str(answer["error"])
    assert sent < 32 * 2**20  # what it got out: the limit and the buffers on the way, no more


def test_control_without_the_limit_all_of_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    _, sent = _flooded(None, monkeypatch)
    assert sent == FLOOD_END
