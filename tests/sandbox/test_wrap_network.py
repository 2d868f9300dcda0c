"""``wrap`` gives a server the network its package is known to need (the real
``mcp-server-fetch``: any public name), says so with the field that changes it, and says of a
server whose needs are not known that it has none and where to grant them. The wrapped fetch
server, started from the entry wrap wrote, reaches a name allowed for it (pinned to a loopback
web server with ``sandbox.network.hosts``) and is still refused an address literal and a name
that resolves to this machine. A project's entry naming the same package gets no network
from wrap (its runner could take the package from the project); the control is the user's
own entry."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import BIN, IRONCURTAIN
from tests.support.sdk import call
from tests.support.web import serving_pages

FETCH = os.path.join(BIN, "mcp-server-fetch")
TIME = os.path.join(BIN, "mcp-server-time")
# The reference fetch server refuses private addresses and asks robots.txt first; a user
# fetching from a loopback test site turns both off.
FETCH_ARGS = ["--ignore-robots-txt", "--allow-private-ips"]


@pytest.fixture
def web() -> Iterator[tuple[int, list[str]]]:
    with serving_pages() as served:
        yield served


def _wrap(user: Home, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, "wrap", "--client", "claude-code", *args], env=user.env, cwd=cwd,
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600,
    )  # fmt: skip


def _config_path(user: Home) -> Path:
    return user.config / "ironcurtain" / "mcp-servers.json"


def _network(user: Home, name: str) -> Any:
    servers = json.loads(_config_path(user).read_text())["mcpServers"]
    return servers[name].get("sandbox", {}).get("network")


def _fetches(user: Home, entry: dict[str, Any], urls: list[str]) -> list[tuple[bool, str]]:
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        params = StdioServerParameters(
            command=entry["command"], args=entry["args"], env=user.env, cwd=str(user.root)
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for url in urls:
                out.append(await call(session, "fetch", {"url": url}))

    asyncio.run(scenario())
    return out


@needs_bwrap
def test_a_wrapped_fetch_server_reaches_a_name_allowed_for_it_and_nothing_else(
    user: Home, web: tuple[int, list[str]]
) -> None:
    port, hits = web
    servers = {
        "fetch": {"command": FETCH, "args": FETCH_ARGS},
        "clock": {"command": TIME},
        "mystery": {"command": "/usr/bin/env", "args": ["true"]},
    }
    (user.home / ".claude.json").write_text(json.dumps({"mcpServers": servers}))
    done = _wrap(user, user.root)
    assert done.returncode == 0, done.stderr
    config = _config_path(user)
    field = f"mcpServers.fetch.sandbox.network.allowedDomains in {config}"
    assert "fetch: network: any public name (*), as mcp-server-fetch needs" in done.stderr
    assert field in done.stderr, done.stderr
    assert _network(user, "fetch") == {"allowedDomains": ["*"]}
    # A server whose needs are not known is named, with the field; one known to need none
    # is not.
    assert (
        "mystery: no network (what it needs is not known); if it needs some, list the hosts "
        f"in mcpServers.mystery.sandbox.network.allowedDomains in {config}"
    ) in done.stderr
    assert _network(user, "mystery") is None and _network(user, "clock") is None
    assert "clock: no network" not in done.stderr
    # The test's internet: a name pinned to the loopback web server.
    data = json.loads(config.read_text())
    data["mcpServers"]["fetch"]["sandbox"]["network"]["hosts"] = {"site.test": "127.0.0.1"}
    config.write_text(json.dumps(data))
    entry = json.loads((user.home / ".claude.json").read_text())["mcpServers"]["fetch"]
    out = _fetches(
        user,
        entry,
        [
            f"http://site.test:{port}/page",
            f"http://127.0.0.1:{port}/literal",
            f"http://localhost:{port}/loopback",
        ],
    )
    assert out[0][0] is False and "hello egress" in out[0][1], out[0]
    assert all(is_error for is_error, _ in out[1:]), out
    assert hits == [f"site.test:{port} /page"], hits


@needs_bwrap
def test_control_without_the_network_wrap_gives_the_same_fetch_fails(
    user: Home, web: tuple[int, list[str]]
) -> None:
    port, hits = web
    (user.home / ".claude.json").write_text(
        json.dumps({"mcpServers": {"fetch": {"command": FETCH, "args": FETCH_ARGS}}})
    )
    assert _wrap(user, user.root).returncode == 0
    config = _config_path(user)
    data = json.loads(config.read_text())
    data["mcpServers"]["fetch"]["sandbox"]["network"] = {"hosts": {"site.test": "127.0.0.1"}}
    config.write_text(json.dumps(data))
    entry = json.loads((user.home / ".claude.json").read_text())["mcpServers"]["fetch"]
    out = _fetches(user, entry, [f"http://site.test:{port}/page"])
    assert out[0][0] is True, out
    assert hits == []


@pytest.mark.parametrize(
    "entry",
    [
        {"command": FETCH, "args": FETCH_ARGS},
        {"command": os.path.join(BIN, "python3"), "args": ["-m", "mcp_server_fetch"]},
    ],
    ids=["program", "module"],
)
def test_a_projects_entry_gets_no_network_from_wrap(user: Home, entry: dict[str, Any]) -> None:
    project = user.root / "proj"
    project.mkdir()
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": {"web": entry}}))
    done = _wrap(user, project, "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert _network(user, "web") is None
    assert "web: no network: a project's entry gets none from wrap" in done.stderr
    assert "grant it in mcpServers.web.sandbox.network.allowedDomains" in done.stderr
    # The control: the user's own entry, the same, gets what its package needs.
    (project / ".mcp.json").unlink()
    (user.home / ".claude.json").write_text(json.dumps({"mcpServers": {"own": entry}}))
    done = _wrap(user, user.root, "--no-annotate")
    assert done.returncode == 0, done.stderr
    assert _network(user, "own") is not None, done.stderr
