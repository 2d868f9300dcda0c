"""A remote server's name answered with an address it may not lead to (a DNS answer pointing
at this machine's loopback, where other services listen): the connection is refused before a
byte is sent; pinned by the entry, the same address is the user's choice and is reached."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from launcher.host.launch_spec import LaunchSpec
from launcher.plan.remote_plan import RemoteTarget
from launcher.servers import remote_egress
from launcher.servers.remote import RemoteConnection, RemoteUnavailable
from tests.support.remote import remote_server


def _opened(target: RemoteTarget) -> list[str]:
    """The tools of the server ``target`` leads to, through a remote connection."""

    async def scenario() -> list[str]:
        conn = RemoteConnection(LaunchSpec("far", [], {}, "/", None), target)
        try:
            await conn.start()
            await conn.initialize()
            return sorted(str(t.get("name")) for t in await conn.list_tools())
        finally:
            await conn.stop()

    return asyncio.run(scenario())


def _target(port: int, pins: dict[str, str]) -> RemoteTarget:
    url = f"http://mcp.example.com:{port}/mcp"
    return RemoteTarget(url, "mcp.example.com", port, "streamable-http", {}, pins)


@pytest.fixture
def lying_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every name resolves to loopback (a hostile or rebinding resolver's answer)."""

    async def resolve(host: str, port: int) -> list[str]:
        return ["127.0.0.1"]

    monkeypatch.setattr(remote_egress, "_resolve", resolve)


@pytest.mark.usefixtures("lying_dns")
def test_a_name_resolving_to_loopback_is_not_dialled(tmp_path: Path) -> None:
    with remote_server(tmp_path, "--any-host") as remote, pytest.raises(RemoteUnavailable) as no:
        _opened(_target(remote.port, {}))
    said = str(no.value)
    assert "remote server 'far'" in said and "resolves to 127.0.0.1, a loopback address" in said
    assert len(said.splitlines()) == 1


@pytest.mark.usefixtures("lying_dns")
def test_control_pinned_the_same_address_is_reached(tmp_path: Path) -> None:
    with remote_server(tmp_path, "--any-host") as remote:
        assert _opened(_target(remote.port, {"mcp.example.com": "127.0.0.1"})) == [
            "echo",
            "leak",
            "wipe",
        ]


def test_only_the_entrys_own_host_is_dialled(tmp_path: Path) -> None:
    # A transport asked to dial any other host (a redirect, a URL it was handed) is refused.
    with remote_server(tmp_path) as remote:
        target = RemoteTarget(remote.url, "127.0.0.2", remote.port, "streamable-http", {}, {})
        with pytest.raises(RemoteUnavailable, match=r"is not 127\.0\.0\.2"):
            _opened(target)
