"""Remote servers (a ``url``) through ironcurtain, against a real server on the ``mcp`` SDK
served over streamable HTTP (and SSE) on loopback, with real MCP clients of both eras: the
same gate, the same masking, and one line for a server that cannot be used."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.modes import STATELESS, client_in
from tests.support.probe import PROBE_TOOLS, probe_server_config
from tests.support.remote import (
    DENY_WIPE,
    REMOTE_TOOLS,
    free_port,
    remote_args,
    remote_server,
)
from tests.support.sdk import call, connect

TOOLS = {"far": REMOTE_TOOLS}


def _calls(user: Home, args: list[str], *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    """One session through the SDK's stdio client: the tools listed, then each answer."""
    out: list[Any] = []

    async def scenario() -> None:
        async with connect(user, *args) as session:
            out.append(sorted(t.name for t in (await session.list_tools()).tools))
            for tool, arguments in calls:
                out.append(await call(session, tool, arguments))

    asyncio.run(scenario())
    return out


@pytest.mark.parametrize("mode", ["legacy", STATELESS])
def test_tools_are_listed_and_called_in_either_era_of_the_client(user: Home, mode: str) -> None:
    with remote_server(user.root) as remote:
        args = remote_args(user, {"far": {"url": remote.url}}, TOOLS)
        said: list[str] = []

        async def scenario() -> None:
            async with client_in(user, "stdio", args, mode) as client:
                listed = await client.list_tools()
                said.extend(t.name for t in listed.tools)
                result = await client.call_tool("far__echo", {"text": "hi"})
                said.append(getattr(result.content[0], "text", ""))

        asyncio.run(scenario())
        assert sorted(said[:3]) == ["far__echo", "far__leak", "far__wipe"]
        assert said[3].startswith("echo: hi (")
        # The server of both eras is spoken to in its client's era.
        assert (STATELESS in said[3]) == (mode == STATELESS)
        assert remote.calls() == [{"tool": "echo", "args": {"text": "hi"}}]
    entries = [json.loads(x) for x in (user.root / "audit.jsonl").read_text().splitlines()]
    assert any(e.get("server") == "far" and e.get("tool") == "echo" for e in entries)


def test_a_denied_call_never_reaches_the_remote_server(user: Home) -> None:
    with remote_server(user.root) as remote:
        args = remote_args(user, {"far": {"url": remote.url}}, TOOLS, [DENY_WIPE])
        _, (error, text) = _calls(user, args, ("far__wipe", {"target": "/srv"}))
        assert error and "DENIED" in text
        assert remote.calls() == []


def test_control_without_the_rule_the_call_reaches_it(user: Home) -> None:
    with remote_server(user.root) as remote:
        args = remote_args(user, {"far": {"url": remote.url}}, TOOLS)
        _, (error, text) = _calls(user, args, ("far__wipe", {"target": "/srv"}))
        assert not error and text == "wiped /srv"
        assert remote.calls() == [{"tool": "wipe", "args": {"target": "/srv"}}]


@pytest.mark.parametrize("masked", [True, False])
def test_a_credential_the_remote_tool_returns_is_masked(user: Home, masked: bool) -> None:
    from tests.servers.remote_server import LEAKED

    with remote_server(user.root) as remote:
        entry = {"url": remote.url, "maskSecrets": masked}
        args = remote_args(user, {"far": entry}, TOOLS)
        _, (error, text) = _calls(user, args, ("far__leak", {}))
    assert not error
    # With masking off (the control), the credential arrives as the server sent it.
    assert (LEAKED in text) != masked
    assert ("[secret masked: github-token]" in text) == masked


def test_the_legacy_sse_transport(user: Home) -> None:
    with remote_server(user.root, "--sse") as remote:
        url = f"http://127.0.0.1:{remote.port}/sse"
        args = remote_args(user, {"far": {"url": url, "type": "sse"}}, TOOLS, [DENY_WIPE])
        listed, echoed, wiped = _calls(
            user,
            args,
            ("far__echo", {"text": "old"}),
            ("far__wipe", {"target": "/"}),
        )
        assert listed == ["far__echo", "far__leak", "far__wipe"]
        assert echoed[1].startswith("echo: old")
        assert wiped[0] and "DENIED" in wiped[1]
        assert remote.calls() == [{"tool": "echo", "args": {"text": "old"}}]


def _local_and(user: Home, far: dict[str, Any]) -> list[str]:
    servers = {"far": far, "probe": probe_server_config(sandboxed=False)}
    return remote_args(user, servers, {**TOOLS, "probe": PROBE_TOOLS})


def test_an_unreachable_remote_server_leaves_the_local_one_serving(user: Home) -> None:
    args = _local_and(user, {"url": f"http://127.0.0.1:{free_port()}/mcp"})
    stderr = user.root / "stderr.txt"

    async def scenario() -> list[str]:
        async with connect(user, *args, prefix=["sh", "-c", f'exec "$@" 2>{stderr}', "sh"]) as s:
            names = sorted(t.name for t in (await s.list_tools()).tools)
            error, text = await call(s, "probe__env_value", {"name": "PATH"})
            assert not error and text
            return names

    names = asyncio.run(scenario())
    assert names and all(n.startswith("probe__") for n in names)
    said = stderr.read_text()
    lines = [line for line in said.splitlines() if "'far'" in line]
    assert len(lines) == 1 and "cannot be reached" in lines[0], said
    assert "Traceback" not in said


@pytest.mark.parametrize("with_token", [False, True])
def test_a_refusal_is_one_line_naming_the_server(user: Home, with_token: bool) -> None:
    with remote_server(user.root, "--token", "s3cret-t0ken") as remote:
        far: dict[str, Any] = {"url": remote.url}
        if with_token:  # the control: the header it asks for, and it serves
            far["headers"] = {"Authorization": "Bearer s3cret-t0ken"}
        args = _local_and(user, far)
        stderr = user.root / "stderr.txt"

        async def scenario() -> list[str]:
            prefix = ["sh", "-c", f'exec "$@" 2>{stderr}', "sh"]
            async with connect(user, *args, prefix=prefix) as s:
                return sorted(t.name for t in (await s.list_tools()).tools)

        names = asyncio.run(scenario())
    said = stderr.read_text()
    assert ("far__echo" in names) == with_token
    assert any(n.startswith("probe__") for n in names)
    refused = [line for line in said.splitlines() if "refused ironcurtain (HTTP 401)" in line]
    assert len(refused) == (0 if with_token else 1), said
    assert "s3cret-t0ken" not in said and "Traceback" not in said


def test_profile_says_remote_and_unsandboxed_and_where(user: Home) -> None:
    config = user.root / "c.json"
    far = {"url": "https://mcp.example.com/mcp?team=1", "headers": {"X-Api-Key": "k3y-value"}}
    config.write_text(json.dumps({"mcpServers": {"far": far}}))
    done = ironcurtain(user, "profile", "far", "--config", str(config), "--format", "json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["remote"] is True and shown["sandboxed"] is False
    assert shown["url"] == "https://mcp.example.com/mcp" and shown["headers"] == ["X-Api-Key"]
    assert "k3y-value" not in done.stdout and "team=1" not in done.stdout


def test_annotate_tools_lists_a_remote_servers_tools(user: Home) -> None:
    with remote_server(user.root) as remote:
        config = user.root / "c.json"
        config.write_text(json.dumps({"mcpServers": {"far": {"url": remote.url}}}))
        out = user.root / "annotations.json"
        done = ironcurtain(
            user, "annotate-tools", "--all", "--heuristic", "--config", str(config),
            "--output", str(out),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    annotated = json.loads(out.read_text())["servers"]["far"]["tools"]
    assert sorted(t["toolName"] for t in annotated) == ["echo", "leak", "wipe"]
