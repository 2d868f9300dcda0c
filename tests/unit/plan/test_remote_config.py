"""A remote server's entry (a ``url``): what is refused in it, each with one message naming
where; and the egress check of the addresses a connection to it may dial."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher.plan.config import load_config
from launcher.plan.remote_plan import target_of
from launcher.servers.remote_egress import EgressRefused, judged
from launcher.shared.user_errors import ConfigError
from tests.support.cli import ironcurtain
from tests.support.home import Home

URL = "https://mcp.example.com/mcp"
REFUSED = [
    ("both", {"command": "x", "url": URL}, "$.mcpServers.a.url", "not both"),
    ("neither", {"args": []}, "$.mcpServers.a.command", '"url" (a remote one)'),
    ("plain-http-out", {"url": "http://mcp.example.com/mcp"}, "url", "use https://"),
    (
        "plain-http-pinned-away",  # localhost, pinned elsewhere: dialled there in clear
        {"url": "http://localhost:8080/mcp", "hosts": {"localhost": "10.0.0.5"}},
        "url",
        "use https://",
    ),
    ("not-a-url", {"url": "ftp://mcp.example.com/"}, "url", "expected an https:// URL"),
    ("password-in-url", {"url": "https://u:pw@mcp.example.com/"}, "url", '"headers"'),
    ("sandbox", {"url": URL, "sandbox": {"network": False}}, "sandbox", "no sandbox"),
    ("args", {"url": URL, "args": ["-v"]}, "args", "local server"),
    ("headers-local", {"command": "x", "headers": {"A": "b"}}, "headers", "remote server"),
    ("stdio-type", {"url": URL, "type": "stdio"}, "type", '"http" or "sse"'),
    (
        "expansion",
        {"url": URL, "headers": {"Authorization": "Bearer ${T}"}},
        "Authorization",
        "not expanded",
    ),
    ("reserved", {"url": URL, "headers": {"Host": "evil.example"}}, "Host", "written by"),
    ("smuggled", {"url": URL, "headers": {"X-A": "b\r\nX-B: c"}}, "X-A", "line break"),
    ("bad-pin", {"url": URL, "hosts": {"mcp.example.com": "nowhere"}}, "hosts", "not an IP"),
]


def _load(tmp_path: Path, entry: dict[str, Any]) -> Any:
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"mcpServers": {"a": entry}}))
    return load_config(config, "--config", str(tmp_path / "ws"), env={})


@pytest.mark.parametrize(
    ("entry", "where", "what"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED]
)
def test_a_bad_remote_entry_is_one_error_naming_where(
    tmp_path: Path, entry: dict[str, Any], where: str, what: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        _load(tmp_path, entry)
    said = str(refused.value)
    assert where in said and what in said
    assert "${T}" not in said or "Bearer" not in said  # a header's value is never repeated


def test_a_remote_entry_is_unsandboxed_and_keeps_its_pins_and_headers(tmp_path: Path) -> None:
    entry = {
        "url": "http://mcp.test:8080/mcp",
        "hosts": {"mcp.test": "127.0.0.1"},
        "headers": {"X-Api-Key": "k"},
        "type": "http",
    }
    server = _load(tmp_path, entry).servers["a"]
    assert server.sandbox is False and not server.sandboxed and server.remote
    target = target_of(server)
    assert (target.host, target.port, target.transport) == ("mcp.test", 8080, "streamable-http")
    assert target.hosts == {"mcp.test": "127.0.0.1"} and target.headers == {"X-Api-Key": "k"}


def test_a_local_entry_keeps_the_type_its_client_wrote(tmp_path: Path) -> None:
    # A key the clients share: on a local entry it is theirs, whatever they write there.
    for kind in ("stdio", "local"):
        assert not _load(tmp_path, {"command": "x", "type": kind}).servers["a"].remote


def test_plain_http_only_to_this_machine(tmp_path: Path) -> None:
    for url in ("http://127.0.0.1:9/mcp", "http://localhost:9/mcp", "http://[::1]:9/mcp"):
        assert _load(tmp_path, {"url": url}).servers["a"].remote
    # The control of a name pinned away from loopback: pinned to loopback, it stays allowed.
    pinned = {"url": "http://localhost:9/mcp", "hosts": {"localhost": "127.0.0.2"}}
    assert _load(tmp_path, pinned).servers["a"].remote


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "192.168.0.1",
        "169.254.169.254",
        "::1",
        "fd00::1",
        "100.64.0.1",
        "::ffff:127.0.0.1",
    ],
)
def test_a_name_resolving_to_a_special_address_is_refused(address: str) -> None:
    with pytest.raises(EgressRefused, match=f"resolves to {address}"):
        judged("mcp.example.com", [address], {})


def test_one_special_answer_among_public_ones_is_refused() -> None:
    with pytest.raises(EgressRefused):
        judged("mcp.example.com", ["93.184.215.14", "127.0.0.1"], {})


def test_control_a_pinned_name_goes_where_it_is_pinned() -> None:
    # The same private address, pinned by the entry: the user's choice, and the only one used.
    pins = {"mcp.example.com": "10.1.2.3"}
    assert judged("mcp.example.com", ["93.184.215.14"], pins) == ["10.1.2.3"]
    assert judged("mcp.example.com", ["93.184.215.14"], {}) == ["93.184.215.14"]


def test_a_bad_remote_entry_stops_everything_with_exit_2(user: Home) -> None:
    config = user.root / "c.json"
    config.write_text(json.dumps({"mcpServers": {"a": {"url": "http://mcp.example.com/"}}}))
    done = ironcurtain(user, "run", "--config", str(config))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "$.mcpServers.a.url" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not user.left_behind()
