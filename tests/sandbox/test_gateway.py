"""Callers end to end: the real ``ironcurtain run`` with the real ``time`` server in its
sandbox, through the ``mcp`` SDK's clients and raw HTTP. Over ``--http`` in gateway mode each
caller is who its identity provider's JWT says (a provider on loopback, tests/support/idp.py),
every refused token is answered 401 and reaches no server, a session is its caller's, and
every audit entry names the caller; over stdio a caller file names the caller of every
request; bad input at start stops the session before anything is made."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import httpx2
import pytest

from tests.support.audit import audit_entries
from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.http import ACCEPT, TOKEN, http_session, serving
from tests.support.idp import AUDIENCE, Key, Provider, identity_provider
from tests.support.marks import needs_bwrap
from tests.support.sdk import call, connect

pytestmark = needs_bwrap
NOW = {"timezone": "UTC"}
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}  # fmt: skip


@pytest.fixture
def idp() -> Iterator[Provider]:
    with identity_provider() as provider:
        yield provider


def _args(user: Home, idp: Provider) -> list[str]:
    return ["--server", "time", "--workspace", str(user.ws()),
            "--audit-log", str(user.root / "audit.jsonl"),
            "--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE]  # fmt: skip


def _stateless_call(url: str, token: str | None) -> httpx2.Response:
    """A tools/call of the stateless era: if it is let in, it reaches the server."""
    headers = {"Content-Type": "application/json", "Accept": ACCEPT,
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
               "Mcp-Name": "get_current_time"}  # fmt: skip
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    params = {"name": "get_current_time", "arguments": NOW, "_meta": META}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    return httpx2.post(url, json=body, headers=headers, timeout=30)


def test_two_callers_are_served_and_each_entry_names_its_caller(user: Home, idp: Provider) -> None:
    async def as_caller(url: str, token: str) -> None:
        async with http_session(url, token) as session:
            failed, text = await call(session, "get_current_time", NOW)
            assert not failed and "UTC" in text

    with serving(user, *_args(user, idp)) as served:
        printed = "".join(served.stderr)
        assert f"callers: JWTs of {idp.issuer} for the audience {AUDIENCE}" in printed
        assert "bearer token:" not in printed

        async def both() -> None:
            await asyncio.gather(
                as_caller(served.url, idp.token("alice")), as_caller(served.url, idp.token("bob"))
            )

        asyncio.run(both())
        answer = _stateless_call(served.url, idp.token("carol", scope="time:read"))
        assert answer.status_code == 200 and not answer.json()["result"].get("isError")
    entries = audit_entries(user.root / "audit.jsonl")
    calls = [e for e in entries if e.get("tool") == "get_current_time"]
    assert sorted(e["caller"]["name"] for e in calls) == ["alice", "bob", "carol"]
    assert {e["caller"]["issuer"] for e in calls} == {idp.issuer}
    sessions = {e["caller"]["name"]: e.get("httpSession") for e in calls}
    assert sessions["alice"] and sessions["bob"] and sessions["alice"] != sessions["bob"]
    assert sessions["carol"] is None  # the stateless era has no HTTP session
    verified = ironcurtain(user, "audit", "verify", str(user.root / "audit.jsonl"))
    assert verified.returncode == 0 and "chain intact" in verified.stdout
    tail = ironcurtain(user, "audit", "tail", str(user.root / "audit.jsonl"), "--caller", "bob")
    assert tail.returncode == 0 and tail.stdout.count("get_current_time") == 1
    assert "caller=bob" in tail.stdout and "alice" not in tail.stdout


def test_refused_tokens_reach_no_server_and_the_401_says_where_to_look(
    user: Home, idp: Provider
) -> None:
    now = int(time.time())
    refused = {
        "missing": None,
        "the static bearer token": TOKEN,
        "expired": idp.token("mallory", exp=now - 3600),
        "not yet valid": idp.token("mallory", nbf=now + 3600),
        "wrong audience": idp.token("mallory", aud="https://elsewhere.example"),
        "wrong issuer": idp.token("mallory", iss="https://evil.example/realms/team"),
        "bad signature": idp.token("mallory", key=Key("RS256", kid=idp.key.kid)),
        "alg none": idp.forged_none("mallory"),
        "HS256 with the public key": idp.forged_hs256("mallory"),
        "unknown key id": idp.token("mallory", key=Key("ES256")),
    }
    with serving(user, *_args(user, idp)) as served:
        base = served.url.removesuffix("/mcp")
        for why, token in refused.items():
            answer = _stateless_call(served.url, token)
            assert answer.status_code == 401, why
            expected = f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource"'
            if token is not None:
                expected += ', error="invalid_token"'
            assert answer.headers["www-authenticate"] == expected, why
        metadata = httpx2.get(f"{base}/.well-known/oauth-protected-resource", timeout=10)
        assert metadata.status_code == 200
        assert metadata.json() == {
            "resource": served.url,
            "authorization_servers": [idp.issuer],
            "bearer_methods_supported": ["header"],
        }
        # A rotation at the provider: a token of its new key is taken once it is fetched.
        rotated = idp.rotate("EdDSA")
        assert _stateless_call(served.url, idp.token("dave", key=rotated)).status_code == 200
    entries = audit_entries(user.root / "audit.jsonl")
    assert [e["caller"]["name"] for e in entries if e.get("tool")] == ["dave"]  # none refused
    assert "mallory" not in (user.root / "audit.jsonl").read_text()


def test_another_callers_token_on_a_session_is_refused(user: Home, idp: Provider) -> None:
    headers = {"Content-Type": "application/json", "Accept": ACCEPT}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
    calling = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
               "params": {"name": "get_current_time", "arguments": NOW}}  # fmt: skip
    with serving(user, *_args(user, idp)) as served, httpx2.Client(timeout=30) as http:
        alice = {**headers, "Authorization": f"Bearer {idp.token('alice')}"}
        opened = http.post(served.url, json=init, headers=alice)
        sid = opened.headers["mcp-session-id"]
        on_it = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
        http.post(served.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                  headers={**alice, **on_it})  # fmt: skip
        bob = {**headers, **on_it, "Authorization": f"Bearer {idp.token('bob')}"}
        assert http.post(served.url, json=calling, headers=bob).status_code == 404
        # Control: the caller that opened it is served on it.
        mine = http.post(served.url, json=calling, headers={**alice, **on_it})
        assert mine.status_code == 200 and "UTC" in mine.text
    entries = audit_entries(user.root / "audit.jsonl")
    assert [e["caller"]["name"] for e in entries if e.get("tool")] == ["alice"]


def test_the_static_caller_over_stdio_is_in_every_entry(user: Home) -> None:
    caller = user.root / "caller.json"
    caller.write_text('{"name": "billing-agent", "permissions": ["crm:read"]}')
    audit = user.root / "audit.jsonl"

    async def scenario() -> None:
        args = ["--server", "time", "--workspace", str(user.ws()), "--audit-log", str(audit)]
        async with connect(user, *args, "--caller", str(caller)) as session:
            for _ in range(2):
                failed, _ = await call(session, "get_current_time", NOW)
                assert not failed

    asyncio.run(scenario())
    calls = [e for e in audit_entries(audit) if e.get("tool")]
    assert [e["caller"] for e in calls] == [{"name": "billing-agent", "issuer": "static"}] * 2
    assert all("httpSession" not in e for e in calls)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--http", "0", "--oidc-issuer", "{issuer}"],
         "--oidc-issuer {issuer}: needs --oidc-audience"),
        (["--http", "0", "--oidc-issuer", "http://127.0.0.1:9/realms/x", "--oidc-audience", "a"],
         "--oidc-issuer http://127.0.0.1:9/realms/x: its discovery document"),
        (["--http", "0", "--oidc-issuer", "http://id.example/realms/x", "--oidc-audience", "a"],
         "plain http is accepted only on a loopback address"),
        (["--http", "0", "--oidc-issuer", "{issuer}", "--oidc-audience", "a",
          "--oidc-jwks-url", "{issuer}/missing"],
         "--oidc-jwks-url {issuer}/missing: the key set (JWKS) answered HTTP 404"),
        (["--oidc-issuer", "{issuer}", "--oidc-audience", "a"],
         "--oidc-issuer {issuer}: is only used with --http"),
        (["--http", "0", "--caller", "{caller}"],
         "--caller {caller}: names the caller of a session on stdio; over HTTP use the OIDC "
         "options (--oidc-issuer and --oidc-audience)"),
        (["--caller", "{bad}"], '--caller {bad}: has the unknown key "role"; expected a JSON'),
        (["--caller", "{notjson}"], "--caller {notjson}: is not JSON (line 1, column 1)"),
    ],
)  # fmt: skip
def test_bad_input_at_start_is_exit_2_and_nothing_starts(
    user: Home, idp: Provider, args: list[str], said: str
) -> None:
    files = {"caller": user.root / "c.json", "bad": user.root / "bad.json",
             "notjson": user.root / "n.json"}  # fmt: skip
    files["caller"].write_text('{"name": "a"}')
    files["bad"].write_text('{"name": "a", "role": "admin"}')
    files["notjson"].write_text("name: a")
    values = {"issuer": idp.issuer, **{k: str(v) for k, v in files.items()}}
    argv = [a.format(**values) for a in args]
    done = ironcurtain(user, "run", "--server", "time", "--workspace", str(user.ws()), *argv)
    assert done.returncode == 2, done.stderr
    assert said.format(**values) in done.stderr
    assert "Traceback" not in done.stderr and "ready" not in done.stderr
    assert user.left_behind() == []


def test_a_key_set_from_a_file_serves_without_discovery(user: Home, idp: Provider) -> None:
    keys = user.root / "jwks.json"
    keys.write_text(json.dumps(idp.jwks()))
    args = [*_args(user, idp), "--oidc-jwks-url", keys.as_uri(), "--permissions-claim", "roles"]
    with serving(user, *args) as served:
        answer = _stateless_call(served.url, idp.token("erin", roles=["time:read"]))
        assert answer.status_code == 200
    assert idp.discovery_fetches == 0 and idp.jwks_fetches == 0
    assert [e["caller"]["name"] for e in audit_entries(user.root / "audit.jsonl")
            if e.get("tool")] == ["erin"]  # fmt: skip


def test_without_a_caller_source_entries_name_the_http_session_only(user: Home) -> None:
    audit = user.root / "audit.jsonl"
    args = ["--server", "time", "--workspace", str(user.ws()), "--audit-log", str(audit)]

    async def twice(url: str) -> None:
        for _ in range(2):
            async with http_session(url) as session:
                failed, _ = await call(session, "get_current_time", NOW)
                assert not failed

    with serving(user, *args) as served:
        asyncio.run(twice(served.url))
    calls = [e for e in audit_entries(audit) if e.get("tool")]
    assert len(calls) == 2 and all("caller" not in e for e in calls)
    assert len({e["httpSession"] for e in calls}) == 2  # two sessions, told apart


def test_an_unreachable_provider_fails_closed_and_is_said_once(user: Home, idp: Provider) -> None:
    with serving(user, *_args(user, idp)) as served:
        known = idp.token("alice")
        assert _stateless_call(served.url, known).status_code == 200
        idp.down = True
        for _ in range(5):  # tokens of a key the session has not seen, nowhere to fetch it
            assert (
                _stateless_call(served.url, idp.token("bob", key=Key("ES256"))).status_code == 401
            )
        assert _stateless_call(served.url, known).status_code == 200  # a known key still checks
        served.proc.terminate()
        assert served.proc.stderr is not None
        later = served.proc.stderr.read()
    said = [line for line in later.splitlines() if "key set" in line]
    assert len(said) == 1, later
    assert "answered HTTP 503" in said[0] and "refused until it can be fetched" in said[0]
    names = [e["caller"]["name"] for e in audit_entries(user.root / "audit.jsonl") if e.get("tool")]
    assert names == ["alice", "alice"]
