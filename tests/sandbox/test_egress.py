"""Network egress from the sandbox: the real ``mcp-server-fetch`` and the probe inside it,
with a loopback web server standing in for the internet (``sandbox.network.hosts`` pins the
test names to it), and a socket a read-only grant would still let a server connect to. (The
decision table and the proxy in process: ``tests/unit/servers/test_egress_proxy.py``.)"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import pytest
from mcp import MCPError as McpError

from tests.support.audit import audit_entries
from tests.support.home import Home, make_home
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_server_config, run_probe, write_raw_policy
from tests.support.sdk import call, connect

# -- real servers inside the sandbox ------------------------------------------------------------


def _fetch_config(user: Home, port: int, policy_raw: bool) -> tuple[Path, Path | None]:
    server = {
        "command": "mcp-server-fetch",
        # The server's own private-address check is switched off: the proxy must hold alone.
        "args": ["--ignore-robots-txt", "--allow-private-ips"],
        "sandbox": {
            "network": {
                "allowedDomains": ["example.test", "*.example.test"],
                "deniedDomains": ["secret.example.test"],
                "hosts": {"example.test": "127.0.0.1", "secret.example.test": "127.0.0.1"},
            }
        },
    }
    config = user.root / "fetch.json"
    config.write_text(json.dumps({"mcpServers": {"fetch": server}}))
    if not policy_raw:
        return config, None
    fetch_tools = {"fetch": ["url", "max_length", "start_index", "raw"]}
    return config, write_raw_policy(user.root / "fetch-policy", {"fetch": fetch_tools})


def _fetch_session(
    user: Home, port: int, urls: list[str], policy_raw: bool
) -> list[tuple[bool, str]]:
    config, policy = _fetch_config(user, port, policy_raw)
    audit = user.root / "audit.jsonl"
    args = ["--config", str(config), "--audit-log", str(audit), "--workspace", str(user.ws())]
    if policy:
        args += ["--policy-dir", str(policy)]
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, *args) as session:
            for url in urls:
                out.append(await call(session, "fetch__fetch", {"url": url}))

    asyncio.run(scenario())
    return out


LITERALS = [
    "127.0.0.1",
    "2130706433",
    "0177.0.0.1",
    "0x7f.0.0.1",
    "0x7f000001",
    "127.1",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "169.254.169.254",
]


@needs_bwrap
def test_fetch_in_the_sandbox_reaches_only_what_is_allowed(
    user: Home, web: tuple[int, list[str]]
) -> None:
    port, hits = web
    urls = [
        f"http://example.test:{port}/page",
        f"http://secret.example.test:{port}/page",  # denied, though pinned to a reachable address
        f"http://unlisted.test:{port}/page",
        *(f"http://{literal}:{port}/page" for literal in LITERALS),
    ]
    results = _fetch_session(user, port, urls, policy_raw=True)
    error, text = results[0]
    assert not error and "hello egress" in text, text
    for url, (error, text) in zip(urls[1:], results[1:], strict=True):
        assert error or "hello egress" not in text, (url, text)
    assert hits == [f"example.test:{port} /page"]  # nothing else ever arrived
    refused = [e for e in audit_entries(user.root / "audit.jsonl") if e.get("event")]
    reasons = {e["host"]: e["reason"] for e in refused if e["event"] == "egress-refused"}
    assert reasons["secret.example.test"] == "secret.example.test is in deniedDomains"
    assert reasons["unlisted.test"] == "unlisted.test is not in allowedDomains"
    assert all(e["server"] == "fetch" for e in refused)
    # Every literal was refused by the proxy (httpx spells some of them differently on the
    # wire: 2130706433 arrives as 127.0.0.1, [::1] without its brackets).
    assert len([e for e in refused if e["event"] == "egress-refused"]) == len(urls) - 1


@needs_bwrap
def test_the_policy_stops_unlisted_domains_before_the_proxy_does(
    user: Home, web: tuple[int, list[str]]
) -> None:
    port, hits = web
    results = _fetch_session(
        user,
        port,
        [f"http://example.test:{port}/page", f"http://unlisted.test:{port}/", "http://127.0.0.1/"],
        policy_raw=False,  # the bundled policy
    )
    assert not results[0][0] and "hello egress" in results[0][1]
    assert results[1][0] and results[1][1].startswith("ESCALATION")
    assert results[2][0] and results[2][1].startswith(("DENIED", "ESCALATION"))
    assert len(hits) == 1


@needs_bwrap
def test_the_fetch_prompt_is_checked_like_the_fetch_tool(
    user: Home, web: tuple[int, list[str]]
) -> None:
    # The fetch server's `fetch` prompt fetches its `url` while it builds the prompt: a way
    # to the network that is not a tool call. It passes the same gate as the tool.
    port, hits = web
    config, _ = _fetch_config(user, port, policy_raw=False)
    tools_only = write_raw_policy(user.root / "tools-only", {"fetch": {"fetch": ["url"]}})
    base = ["--config", str(config), "--workspace", str(user.ws())]
    page = {"url": f"http://example.test:{port}/page"}

    async def scenario() -> None:
        async with connect(user, *base) as session:  # the bundled policy
            got = await session.get_prompt("fetch__fetch", page)
            assert "hello egress" in str(got.messages[0].content)
            outside = {"url": f"http://unlisted.test:{port}/page"}
            with pytest.raises(
                McpError, match=r"ESCALATION REQUIRED \(rule: structural-untrusted-domain\)"
            ):
                await session.get_prompt("fetch__fetch", outside)
        # A policy that annotates the tool and not the prompt: the prompt is never called.
        async with connect(user, *base, "--policy-dir", str(tools_only)) as session:
            with pytest.raises(McpError, match=r"DENIED \(rule: structural-unknown-prompt\)"):
                await session.get_prompt("fetch__fetch", page)

    asyncio.run(scenario())
    assert hits == [f"example.test:{port} /page"]  # the allowed fetch, and nothing else


@needs_bwrap
def test_a_server_that_ignores_the_proxy_has_no_route(
    tmp_path: Path, web: tuple[int, list[str]]
) -> None:
    port, hits = web
    user = make_home(tmp_path)
    server = probe_server_config(True)
    server["sandbox"]["network"] = {
        "allowedDomains": ["example.test"],
        "hosts": {"example.test": "127.0.0.1"},
    }
    answers = run_probe(
        user,
        user.ws("ws"),
        server,
        lambda: [
            ("http_get", {"url": f"http://example.test:{port}/via-proxy"}),
            ("connect_tcp", {"host": "127.0.0.1", "port": port}),
            ("connect_tcp", {"host": "1.1.1.1", "port": 443}),
            ("udp_send", {"host": "8.8.8.8", "port": 53}),
            ("resolve", {"name": "example.test"}),
            ("resolve", {"name": "example.com"}),
        ],
    )
    texts = [text for _, text in answers]
    assert texts[0].startswith("OK 200") and "hello egress" in texts[0]
    assert all(t.startswith("FAILED") for t in texts[1:]), texts
    assert hits == [f"example.test:{port} /via-proxy"]


# -- where sessions keep their sockets ---------------------------------------------------------


@needs_bwrap
def test_a_socket_in_a_read_only_grant_can_be_connected_to(tmp_path: Path) -> None:
    # Why no grant may hold where sessions keep their sockets: a read-only mount does not
    # stop a connect(), so a server shown the approvals socket or another server's egress
    # socket could use it.
    user = make_home(tmp_path)
    shown = tmp_path / "shown"
    shown.mkdir()
    shown.chmod(0o755)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(shown / "egress-other.sock"))
    (shown / "egress-other.sock").chmod(0o666)
    listener.listen(8)
    try:
        server = probe_server_config(True, allow_read=(str(shown),))
        path = str(shown / "egress-other.sock")
        answers = run_probe(
            user, user.ws("ws"), server, lambda: [("hold_connections", {"path": path, "count": 1})]
        )
    finally:
        listener.close()
    assert answers[0][1].startswith("OK"), answers
