"""ironcurtain as the OAuth client of a remote server, against real parts on loopback: a
server on the ``mcp`` SDK that requires OAuth, with the SDK's authorization server issuing
tokens that live a few seconds; the login driven through ``$BROWSER``; sessions through the
SDK's stdio client."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.http import TOKEN as HTTP_TOKEN
from tests.support.http import http_session, serving
from tests.support.oauth import OAuthRemote, approving, files_holding, oauth_server
from tests.support.probe import PROBE_TOOLS, probe_server_config
from tests.support.remote import free_port, remote_args
from tests.support.sdk import call, connect

LIFETIME = 3  # seconds an access token lives
TOOLS = {"far": {"echo": ["text"]}}


@pytest.fixture
def far(user: Home) -> Iterator[OAuthRemote]:
    # The record holds every token in clear: kept outside the user's home and state.
    outside = user.root / "outside"
    outside.mkdir()
    with oauth_server(outside, free_port(), LIFETIME) as server:
        yield server


def _config(user: Home, url: str) -> Path:
    config = user.root / "c.json"
    config.write_text(json.dumps({"mcpServers": {"far": {"url": url}}}))
    return config


def _login(user: Home, far: OAuthRemote) -> Any:
    done = ironcurtain(
        approving(user), "auth", "login", "far", "--config", str(_config(user, far.url))
    )
    return done


def _session(user: Home, args: list[str], *texts: str, pause: float = 0.0) -> list[Any]:
    """One session: the tools listed, then ``far__echo`` of each text, ``pause`` seconds
    apart; stderr goes to the user's ``stderr.txt``."""
    out: list[Any] = []
    prefix = ["sh", "-c", f'exec "$@" 2>{user.root / "stderr.txt"}', "sh"]

    async def scenario() -> None:
        async with connect(user, *args, prefix=prefix) as session:
            out.append(sorted(t.name for t in (await session.list_tools()).tools))
            for text in texts:
                await asyncio.sleep(pause)
                out.append(await call(session, "far__echo", {"text": text}))

    asyncio.run(scenario())
    return out


def test_login_then_calls_through_with_the_token_refreshed(user: Home, far: OAuthRemote) -> None:
    done = _login(user, far)
    assert done.returncode == 0, done.stderr
    assert "Logged in to 'far'" in done.stdout and "scopes: mcp" in done.stdout
    (first,) = far.grants()
    assert first["grant"] == "authorization_code" and first["resource"] == far.url

    args = remote_args(user, {"far": {"url": far.url}}, TOOLS)
    listed, one, two = _session(user, args, "one", "two", pause=LIFETIME + 1)
    assert listed == ["far__echo"]
    assert one == (False, "echo: one") and two == (False, "echo: two")
    # The token lived LIFETIME seconds; the second call went with a refreshed one, asked for
    # this server (RFC 8707 resource), and no login was needed for it.
    grants = far.grants()
    assert [g["grant"] for g in grants][:2] == ["authorization_code", "refresh_token"]
    assert all(g["resource"] == far.url for g in grants)
    calls = far.calls()
    assert [c["args"]["text"] for c in calls] == ["one", "two"]
    assert calls[0]["bearer"] != calls[1]["bearer"]
    assert {c["bearer"] for c in calls} <= {g["access"] for g in grants}

    # No token in clear in any file of the user's home or state directory; the control: the
    # same search finds them in the server's own record, which holds them in clear.
    tokens = far.tokens()
    assert files_holding([user.home, user.state], tokens) == []
    assert files_holding([far.record.parent], tokens) == [far.record]
    said = (user.root / "stderr.txt").read_text() + done.stdout + done.stderr
    assert not any(t in said for t in tokens)

    status = ironcurtain(user, "auth", "status", "far")
    assert status.returncode == 0 and "logged in" in status.stdout, status
    assert "scopes: mcp" in status.stdout and not any(t in status.stdout for t in tokens)


def _far_and_probe(user: Home, far: OAuthRemote) -> list[str]:
    servers = {"far": {"url": far.url}, "probe": probe_server_config(sandboxed=False)}
    return remote_args(user, servers, {**TOOLS, "probe": PROBE_TOOLS})


def _listed_and_said(user: Home, args: list[str]) -> tuple[list[str], list[str]]:
    prefix = ["sh", "-c", f'exec "$@" 2>{user.root / "stderr.txt"}', "sh"]

    async def scenario() -> list[str]:
        async with connect(user, *args, prefix=prefix) as session:
            return sorted(t.name for t in (await session.list_tools()).tools)

    names = asyncio.run(scenario())
    said = (user.root / "stderr.txt").read_text()
    return names, [line for line in said.splitlines() if "'far'" in line]


@pytest.mark.parametrize("logged_out", [True, False])
def test_after_logout_a_session_says_what_to_run(
    user: Home, far: OAuthRemote, logged_out: bool
) -> None:
    assert _login(user, far).returncode == 0
    if logged_out:  # without it (the control), the same session serves far's tools
        done = ironcurtain(user, "auth", "logout", "far")
        assert done.returncode == 0 and "Logged out of 'far'" in done.stdout
    names, lines = _listed_and_said(user, _far_and_probe(user, far))
    assert any(n.startswith("probe__") for n in names)  # the other server is unaffected
    assert ("far__echo" in names) != logged_out
    if logged_out:
        assert len(lines) == 1, lines
        assert "no login is kept for it" in lines[0]
        assert "run `ironcurtain auth login far`" in lines[0]
        assert "Traceback" not in (user.root / "stderr.txt").read_text()
        status = ironcurtain(user, "auth", "status", "far")
        assert status.returncode == 1 and "ironcurtain auth login far" in status.stdout


def test_an_expired_refresh_says_what_to_run(user: Home) -> None:
    """The authorization server forgets every grant (restarted): the stored token is refused,
    its refresh too; one line says so and what to run."""
    before, after = user.root / "before", user.root / "after"
    before.mkdir()
    after.mkdir()
    port = free_port()
    with oauth_server(before, port, LIFETIME) as first:
        assert _login(user, first).returncode == 0
    time.sleep(LIFETIME + 1)
    with oauth_server(after, port, LIFETIME) as again:
        names, lines = _listed_and_said(user, _far_and_probe(user, again))
        assert again.grants() == []  # its refresh was refused: nothing issued
    assert "far__echo" not in names and any(n.startswith("probe__") for n in names)
    assert len(lines) == 1, lines
    assert "refused to refresh the login" in lines[0]
    assert "run `ironcurtain auth login far`" in lines[0]


@pytest.mark.parametrize("moved", [True, False])
def test_a_server_that_moved_to_another_authorization_server(user: Home, moved: bool) -> None:
    """The server now names another authorization server: the session neither follows it
    nor hands it anything; one line says so and what to run. The control: the same server,
    still its own authorization server, takes the login."""
    before, after = user.root / "before", user.root / "after"
    before.mkdir()
    after.mkdir()
    port = free_port()
    other = f"http://127.0.0.1:{free_port()}"
    with oauth_server(before, port, 3600) as first:
        assert _login(user, first).returncode == 0
        if not moved:
            names, lines = _listed_and_said(user, _far_and_probe(user, first))
            assert "far__echo" in names and lines == []
            return
    with oauth_server(after, port, 3600, moved_to=other) as again:
        names, lines = _listed_and_said(user, _far_and_probe(user, again))
    assert "far__echo" not in names and any(n.startswith("probe__") for n in names)
    assert len(lines) == 1, lines
    assert f"it now names another authorization server ({other}" in lines[0]
    assert "run `ironcurtain auth login far`" in lines[0]


@pytest.mark.parametrize(
    ("server", "said"),
    [
        ("nosuch", "server 'nosuch': no such server in"),
        ("git", "server 'git' is a local server (a command)"),
    ],
)
def test_a_login_to_what_is_no_remote_server_is_one_line(
    user: Home, server: str, said: str
) -> None:
    config = user.root / "c.json"
    entries = {"far": {"url": "https://mcp.example.com/mcp"}, "git": {"command": "true"}}
    config.write_text(json.dumps({"mcpServers": entries}))
    done = ironcurtain(user, "auth", "login", server, "--config", str(config))
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ironcurtain: error: {said}"), done.stderr
    assert not (user.state / "ironcurtain" / "logins").exists()


@pytest.mark.parametrize(
    ("tamper", "said"),
    [("iss=https://evil.example", "iss mismatch: https://evil.example")],
    ids=["iss"],
)
def test_a_forged_answer_to_the_login_is_refused(
    user: Home, far: OAuthRemote, tamper: str, said: str
) -> None:
    """The browser brings back an answer whose ``iss`` names another authorization server (a
    mix-up): no code is exchanged, nothing is kept. The control, the same answer untampered,
    is the login of the tests above. (An answer with another ``state`` is waited past:
    tests/attacks/test_oauth_login_attacks.py.)"""
    user.env["TAMPER"] = tamper
    done = _login(user, far)
    assert done.returncode == 1, done.stdout
    lines = done.stderr.splitlines()
    assert lines[-1].startswith("ironcurtain: error: remote server 'far'"), done.stderr
    assert "the login failed" in lines[-1] and said in lines[-1]
    assert "Traceback" not in done.stderr
    assert far.grants() == []  # the code was never exchanged
    assert ironcurtain(user, "auth", "status", "far").returncode == 1


@pytest.mark.parametrize("through", [True, False])
def test_the_clients_own_token_never_goes_upstream(
    user: Home, far: OAuthRemote, through: bool
) -> None:
    """A client of ``run --http`` sends its bearer token to ironcurtain: what reaches the
    remote server is the login's token, never the client's. The control: the same client
    straight at the server, whose every Authorization header is recorded, shows its token
    there."""
    assert _login(user, far).returncode == 0

    async def scenario(url: str) -> None:
        try:
            async with http_session(url) as session:
                assert await call(session, "far__echo", {"text": "via"}) == (False, "echo: via")
        except Exception:
            if through:
                raise

    if through:
        with serving(user, *remote_args(user, {"far": {"url": far.url}}, TOOLS)) as served:
            asyncio.run(scenario(served.url))
        assert [c["args"]["text"] for c in far.calls()] == ["via"]
    else:
        asyncio.run(scenario(far.url))  # refused: the server takes no such token
    seen = far.seen()
    assert any(HTTP_TOKEN in header for header in seen) != through
    if through:
        assert {h.removeprefix("Bearer ") for h in seen} <= {g["access"] for g in far.grants()}


@pytest.mark.parametrize("offered", [True, False], ids=["revoked", "control-none-offered"])
def test_logout_revokes_the_grant_where_it_is_offered(user: Home, offered: bool) -> None:
    """``auth logout`` revokes the login's tokens at its authorization server (RFC 7009):
    the access token no longer opens the server. The control: a server that offers no
    revocation keeps taking it, and the logout says so."""
    import httpx2

    outside = user.root / "outside"
    outside.mkdir()
    with oauth_server(outside, free_port(), 3600, revoke=offered) as far:
        assert _login(user, far).returncode == 0
        (grant,) = far.grants()
        done = ironcurtain(user, "auth", "logout", "far", "--config", str(user.root / "c.json"))
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("Logged out of 'far': its login is forgotten here; ")
        assert ("its tokens are revoked at" in done.stdout) == offered
        assert ("offers no revocation" in done.stdout) == (not offered)
        assert far.revoked() == ({grant["refresh"], grant["access"]} if offered else set())
        opening = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        answer = httpx2.post(
            far.url,
            json=opening,
            headers={
                "Authorization": f"Bearer {grant['access']}",
                "Accept": "application/json, text/event-stream",
            },
            timeout=30,
        )
        assert (answer.status_code == 401) == offered, answer.status_code
        assert not any(t in done.stdout + done.stderr for t in far.tokens())
