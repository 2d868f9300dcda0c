"""A hostile server asks its egress proxy for a name its attacker's DNS points into a
special-purpose IPv6 range: NAT64 (``64:ff9b::/96``) of the host's loopback or the cloud
metadata address, a 6to4 or Teredo address carrying a private one, a documentation address.
Each is refused before any connection, with the address inside named, and reported like
every other refusal (the session writes these to stderr and the audit log). The controls: a
name resolving to NAT64 of a public address is let through to the connection, and so is a
NAT64 address the user pinned with ``hosts``. (The whole table:
``tests/unit/policy/test_egress_ipv6.py``.)"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from launcher.servers import egress_proxy as egress
from launcher.servers.egress_proxy import EgressProxy, Refusal
from policy.egress import EgressRules

DNS = {
    "nat64-loopback.test": "64:ff9b::7f00:1",
    "nat64-metadata.test": "64:ff9b::a9fe:a9fe",
    "sixtofour.test": "2002:a00:1::1",
    "teredo.test": "2001:0:5db8:d822::f5ff:fffe",
    "docs.test": "3fff::1",
    "nat64-public.test": "64:ff9b::5db8:d822",  # 93.184.216.34
    "pinned.test": "2001:db8::99",  # never looked up: pinned below
}


async def _connect(sock: str, host: str) -> bytes:
    """What the proxy answers a CONNECT to ``host``:443 (its status line)."""
    reader, writer = await asyncio.open_unix_connection(sock)
    writer.write(f"CONNECT {host}:443 HTTP/1.1\r\n\r\n".encode())
    await writer.drain()
    line = await reader.readline()
    writer.close()
    return line


def test_names_resolving_into_special_ipv6_ranges_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def resolve(host: str, port: int, pool: Any = None) -> list[str]:
        return [DNS[host]]

    dialled: list[str] = []

    async def dial(address: str, port: int, **kwargs: Any) -> Any:
        dialled.append(address)  # never the internet: every connection fails here
        raise ConnectionRefusedError(111, "refused by the test")

    monkeypatch.setattr(egress, "_resolve", resolve)
    monkeypatch.setattr(asyncio, "open_connection", dial)
    refusals: list[Refusal] = []
    rules = EgressRules.from_config(["*"], [], {"pinned.test": "64:ff9b::7f00:1"})
    sock = str(tmp_path / "egress.sock")
    answers: dict[str, bytes] = {}

    async def scenario() -> None:
        proxy = EgressProxy("hostile", rules, sock, refusals.append)
        await proxy.start()
        try:
            for host in DNS:
                answers[host] = await _connect(sock, host)
        finally:
            await proxy.stop()

    asyncio.run(scenario())
    said = {r.host: r.reason for r in refusals}
    for host, inner in [
        ("nat64-loopback.test", "a loopback address (127.0.0.1) inside 64:ff9b::/96"),
        ("nat64-metadata.test", "a cloud metadata address (169.254.169.254)"),
        ("sixtofour.test", "a private address (10.0.0.1) inside 2002::/16"),
        ("teredo.test", "a private address (10.0.0.1) inside 2001::/32"),
        ("docs.test", "a documentation address"),
    ]:
        assert answers[host].startswith(b"HTTP/1.1 403"), (host, answers[host])
        assert f"it resolves to {DNS[host]}, {inner}" in said[host]
    # Nothing refused by the check was dialled; the controls were: NAT64 of a public address
    # (an IPv6-only network's way out), and the address the user pinned for its name.
    assert dialled == ["64:ff9b::5db8:d822", "64:ff9b::7f00:1"]
    for host in ("nat64-public.test", "pinned.test"):
        assert answers[host].startswith(b"HTTP/1.1 502"), (host, answers[host])
        assert "cannot connect" in said[host]
