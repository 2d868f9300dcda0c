"""A remote server's answers turned against ironcurtain: a credential of the entry's
``headers`` sent back (in a tool's answer, in an error) never reaches the client, and an
answer that never ends is not read into memory without bound."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from launcher.host.launch_spec import LaunchSpec
from launcher.plan.config import load_config
from launcher.plan.remote_plan import RemoteTarget, target_of
from launcher.servers import remote, remote_egress
from launcher.servers.remote import RemoteConnection, RemoteUnavailable
from launcher.shared.jsonrpc import TOOL, Message
from launcher.shared.user_errors import ConfigError
from tests.support.home import Home
from tests.support.hostile_remote import BOMB, FLOOD_END, Hostile, hostile_remote
from tests.support.paths import TESTS
from tests.support.remote import remote_args
from tests.support.sdk import connect

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


def test_through_a_whole_session_the_client_never_sees_the_credential(user: Home) -> None:
    # ironcurtain run between a real SDK client and the hostile server: the answer, the
    # error, the audit log.
    entry = {"url": "", "headers": {"Authorization": f"Bearer {TOKEN}"}}
    got: list[str] = []
    with hostile_remote() as at:
        entry["url"] = at.url
        args = remote_args(user, {"far": entry}, {"far": {"whoami": [], "whoerr": []}})

        async def scenario() -> None:
            async with connect(user, *args) as session:
                answer = await session.call_tool("far__whoami", {})
                got.append(answer.model_dump_json())
                try:
                    got.append((await session.call_tool("far__whoerr", {})).model_dump_json())
                except Exception as refused:  # a JSON-RPC error is raised by the SDK client
                    got.append(str(refused))

        asyncio.run(scenario())
        assert at.seen.headers[-1]["Authorization"] == f"Bearer {TOKEN}"  # sent, and said back
    assert len(got) == 2 and all("[secret masked: " in text for text in got)
    assert TOKEN not in "".join(got) + (user.root / "audit.jsonl").read_text()


# One call of ``garbled`` in a process of its own, whose stderr is what ironcurtain's would be.
GARBLED = """
import sys
from launcher.plan.remote_plan import RemoteTarget
from launcher.servers import remote
from tests.attacks.test_remote_hostile import _called
url, port, token, protection = sys.argv[1:]
if protection == "off":
    remote._sdk_lines = lambda: None
    remote.hidden_values = lambda headers, query="": {}
target = RemoteTarget(url, "127.0.0.1", int(port), "streamable-http", {"Authorization": token}, {})
answer, handed = _called(target, "garbled")
print(repr(answer), repr(handed))
"""


def _garbled(protection: str) -> subprocess.CompletedProcess[str]:
    with hostile_remote() as at:
        argv = [sys.executable, "-c", GARBLED, at.url, str(at.port), f"Bearer {TOKEN}", protection]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=TESTS.parent)


def test_a_header_credential_in_an_answer_that_cannot_be_parsed_is_not_logged() -> None:
    # The unparsable answer is logged, quoted: the credential it carries is hidden there.
    done = _garbled("on")
    assert done.returncode == 0, done.stderr
    assert TOKEN not in done.stderr + done.stdout and "Traceback" not in done.stderr
    assert "ironcurtain: remote: Error parsing JSON response" in done.stderr


def test_control_without_the_hiding_the_log_quotes_the_answer_as_it_came() -> None:
    done = _garbled("off")
    assert TOKEN in done.stderr


def test_control_without_the_masking_the_server_hands_it_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(remote, "hidden_values", lambda headers, query="": {})
    with hostile_remote() as at:
        _, handed = _called(_target(at, {"Authorization": f"Bearer {TOKEN}"}), "whoami")
    assert TOKEN in repr(handed)


def test_a_key_in_the_url_is_never_repeated_in_what_is_said() -> None:
    # The legacy SSE transport's refusal quotes the whole URL, query and all.
    with hostile_remote() as at:
        said = _unavailable(f"{at.url}?key={TOKEN}", at)
    assert "remote server 'far'" in said and "405" in said
    assert TOKEN not in said


def test_control_without_the_hiding_the_key_is_repeated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "hidden_values", lambda headers, query="": {})
    with hostile_remote() as at:
        assert TOKEN in _unavailable(f"{at.url}?key={TOKEN}", at)


def _unavailable(url: str, at: Hostile) -> str:
    """Why a connection over the legacy SSE transport to ``url`` could not be opened."""
    target = RemoteTarget(url, "127.0.0.1", at.port, "sse", {}, {})
    with pytest.raises(RemoteUnavailable) as unavailable:
        _called(target, "whoami")
    return str(unavailable.value)


def _said_of(tmp_path: Path, at: Hostile, value: str) -> str:
    """Everything said of an entry whose ``Authorization`` header is ``value``: the config's
    refusal, or the tools it lists, or the line saying why it could not be opened."""
    config = tmp_path / "c.json"
    entry = {"url": at.url, "headers": {"Authorization": value}}
    config.write_text(json.dumps({"mcpServers": {"far": entry}}))
    try:
        server = load_config(config, "--config", str(tmp_path), env={}).servers["far"]
    except ConfigError as refused:
        return str(refused)

    async def scenario() -> str:
        conn = RemoteConnection(LaunchSpec("far", [], {}, "/", None), target_of(server))
        try:
            await conn.start()
            await conn.initialize()
            return repr(await conn.list_tools())
        except RemoteUnavailable as unavailable:
            return str(unavailable)
        finally:
            await conn.stop()

    return asyncio.run(scenario())


@pytest.mark.parametrize(
    "value", [f"Bearer {TOKEN}\x0bx", f" Bearer {TOKEN}", f"Bearer {TOKEN}\x7f"]
)
def test_a_header_value_http_cannot_carry_is_never_repeated(tmp_path: Path, value: str) -> None:
    # The HTTP layer refuses such a value when it sends it, in an error quoting it whole.
    with hostile_remote() as at:
        said = _said_of(tmp_path, at, value)
    assert "$.mcpServers.far.headers.Authorization" in said
    assert TOKEN not in said


def test_control_a_header_value_http_carries_is_sent(tmp_path: Path) -> None:
    with hostile_remote() as at:
        said = _said_of(tmp_path, at, f"Bearer {TOKEN}")
        assert at.seen.headers[-1]["Authorization"] == f"Bearer {TOKEN}"
    assert "whoami" in said


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


def _bombed(limit: int | None, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, int]:
    """The answer to the ``bomb`` call, and the most memory held while it was read."""
    monkeypatch.setattr(remote_egress, "ANSWER_LIMIT", limit, raising=False)
    with hostile_remote() as at:
        tracemalloc.start()
        try:
            answer, _ = _called(_target(at, {}), "bomb")
            return answer, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()


def test_a_small_answer_that_inflates_is_not_inflated(monkeypatch: pytest.MonkeyPatch) -> None:
    answer, peak = _bombed(remote_egress.ANSWER_LIMIT, monkeypatch)
    assert "error" in answer and "compressed" in str(answer["error"])
    assert peak < BOMB // 3


def test_control_without_the_check_it_is_inflated_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    _, peak = _bombed(None, monkeypatch)
    assert peak > BOMB
