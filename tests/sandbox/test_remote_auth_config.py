"""A remote server's ``auth``: the OAuth client a login is made as. A pre-registered client
(its secret read from where the config says, never written in it), a client ID metadata
document, or dynamic registration, in that order; the scopes asked for. Against the ``mcp``
SDK's authorization server on loopback (with a client registered beforehand), and a plain
listener for an authorization server that takes client ID metadata documents."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.listener import Reply, listening
from tests.support.oauth import OAuthRemote, approving, files_holding, oauth_server
from tests.support.remote import free_port, remote_args
from tests.support.sdk import call, connect

pytestmark = pytest.mark.sandbox

SECRET = "cs-" + "9f3a" * 8
LIFETIME = 3


@pytest.fixture
def far(user: Home) -> Iterator[OAuthRemote]:
    outside = user.root / "outside"
    outside.mkdir()
    with oauth_server(outside, free_port(), LIFETIME, client=f"pre-1:{SECRET}") as server:
        yield server


def _config(user: Home, entry: dict[str, Any]) -> Path:
    config = user.root / "c.json"
    config.write_text(json.dumps({"mcpServers": {"far": entry}}))
    return config


def _login(user: Home, entry: dict[str, Any]) -> Any:
    config = _config(user, entry)
    return ironcurtain(approving(user), "auth", "login", "far", "--config", str(config))


def _call_after_expiry(user: Home, entry: dict[str, Any]) -> Any:
    args = remote_args(user, {"far": entry}, {"far": {"echo": ["text"]}})

    async def scenario() -> Any:
        async with connect(user, *args) as session:
            await asyncio.sleep(LIFETIME + 1)
            return await call(session, "far__echo", {"text": "later"})

    return asyncio.run(scenario())


def test_dynamic_registration_asks_the_configured_scopes(user: Home, far: OAuthRemote) -> None:
    """No client named, two scopes: the client registers itself for them and is granted
    them (the server's challenge names "mcp" alone)."""
    done = _login(user, {"url": far.url, "auth": {"scopes": ["mcp", "extra"]}})
    assert done.returncode == 0, done.stderr
    (grant,) = far.grants()
    assert far.registered() == [grant["client"]] and grant["scopes"] == ["mcp", "extra"]
    registered = [e for e in far.events() if "registered" in e]
    assert registered[0]["scope"] == "mcp extra"


@pytest.mark.parametrize("pre", [True, False], ids=["pre-registered", "control-dynamic"])
def test_a_pre_registered_client_logs_in_with_its_secret_and_scopes(
    user: Home, far: OAuthRemote, pre: bool
) -> None:
    """The entry names a pre-registered client, its secret in an environment variable, and
    two scopes: nothing is registered, the grant is that client's with those scopes, and the
    refresh at run authenticates with the secret (the server's client check takes it). The
    secret is in no file in clear. The control: without ``auth``, the client registers
    itself and asks what the server names."""
    entry: dict[str, Any] = {"url": far.url}
    if pre:
        user.env["FAR_SECRET"] = SECRET
        entry["auth"] = {
            "clientId": "pre-1",
            "clientSecret": {"from": "env:FAR_SECRET"},
            "scopes": ["mcp", "extra"],
        }
    done = _login(user, entry)
    assert done.returncode == 0, done.stderr
    (grant,) = far.grants()
    assert (grant["client"] == "pre-1") == pre
    assert grant["scopes"] == (["mcp", "extra"] if pre else ["mcp"])
    assert (far.registered() == []) == pre
    assert _call_after_expiry(user, entry) == (False, "echo: later")
    assert [g["grant"] for g in far.grants()][:2] == ["authorization_code", "refresh_token"]
    assert all(g["client"] == grant["client"] for g in far.grants())
    assert files_holding([user.home, user.state], {SECRET}) == []
    assert SECRET not in done.stdout + done.stderr


def test_a_wrong_secret_is_refused_in_one_line(user: Home, far: OAuthRemote) -> None:
    wrong = "cs-wrong-" + "1" * 12
    user.env["FAR_SECRET"] = wrong
    auth = {"clientId": "pre-1", "clientSecret": {"from": "env:FAR_SECRET"}}
    done = _login(user, {"url": far.url, "auth": auth})
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and wrong not in done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith("ironcurtain: error: remote server 'far'") and "failed" in last
    assert far.grants() == []


@pytest.mark.parametrize(
    ("auth", "said"),
    [
        (
            {"clientId": "pre-1", "clientSecret": SECRET},
            "auth.clientSecret: a client secret is not written in the config",
        ),
        (
            {"clientSecret": {"from": "env:FAR_SECRET"}},
            "auth.clientSecret: a client secret belongs to a pre-registered client",
        ),
        (
            {"clientId": "https://ex.example/c.json", "clientSecret": {"from": "env:X"}},
            "auth.clientSecret: a client secret belongs to a pre-registered client",
        ),
        ({"clientId": "http://ex.example/c.json"}, "auth.clientId: 'http://ex.example/c.json'"),
        ({"clientId": "https://ex.example/"}, "auth.clientId: 'https://ex.example/'"),
        ({"clientId": "pre-1", "scopes": ["a b"]}, "auth.scopes[0]: String should match pattern"),
        (
            {"clientId": "pre-1", "clientSecret": {"from": "env:NOT_SET_ANYWHERE"}},
            "server 'far': auth.clientSecret: ironcurtain's environment has no variable",
        ),
    ],
    ids=["clear-secret", "no-client", "document-secret", "http-document", "root", "scope", "unset"],
)
def test_a_bad_auth_is_one_line_naming_where(user: Home, auth: dict[str, Any], said: str) -> None:
    config = _config(user, {"url": "https://mcp.example.com/mcp", "auth": auth})
    done = ironcurtain(user, "auth", "login", "far", "--config", str(config))
    assert done.returncode == 2 and done.stdout == "", done
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ironcurtain: error: "), done.stderr
    assert said in lines[0], lines[0]
    assert SECRET not in done.stderr


def test_auth_on_a_local_server_is_refused(user: Home) -> None:
    config = _config(user, {"command": "true", "auth": {"clientId": "x"}})
    done = ironcurtain(user, "auth", "login", "far", "--config", str(config))
    assert done.returncode == 2, done
    assert "$.mcpServers.far.auth" in done.stderr and '"auth" is for a remote server' in done.stderr


DOCUMENT = "https://client.example.org/ironcurtain.json"


@pytest.mark.parametrize("supported", [True, False], ids=["document", "control-dynamic"])
def test_a_client_id_metadata_document_is_used_where_it_is_taken(
    user: Home, supported: bool
) -> None:
    """The entry's client ID is a metadata document's URL and the authorization server says
    it takes those: it is the client ID, and nothing is registered. The control: a server
    that does not take them is registered with."""
    with listening() as remote:
        issuer = f"http://localhost:{remote.port}"
        url = f"{issuer}/mcp"
        named = f"{issuer}/.well-known/oauth-protected-resource/mcp"
        remote.answers["/mcp"] = Reply(
            401, {"WWW-Authenticate": f'Bearer resource_metadata="{named}"'}
        )
        remote.answers["/.well-known/oauth-protected-resource/mcp"] = {
            "resource": url,
            "authorization_servers": [issuer],
        }
        remote.answers["/.well-known/oauth-authorization-server"] = {
            "issuer": issuer,
            "authorization_endpoint": f"{issuer}/authorize",
            "token_endpoint": f"{issuer}/token",
            "registration_endpoint": f"{issuer}/register",
            "client_id_metadata_document_supported": supported,
        }
        remote.answers["/register"] = lambda r: Reply(
            201, {}, {**json.loads(r["body"]), "client_id": "dynamic-1"}
        )
        remote.answers["/authorize"] = Reply(400)  # seen, then refused: enough to tell
        user.env["RECORD"] = str(user.root / "browsed.txt")
        config = _config(user, {"url": url, "auth": {"clientId": DOCUMENT}})
        done = ironcurtain(
            approving(user), "auth", "login", "far", "--config", str(config), "--wait", "5"
        )
        assert done.returncode == 1
        browsed = (user.root / "browsed.txt").read_text()
        asked = _client_id(browsed)
        assert asked == (DOCUMENT if supported else "dynamic-1")
        assert ("/register" in remote.paths) != supported


def _client_id(address: str) -> str:
    return dict(parse_qsl(urlsplit(address.strip()).query))["client_id"]
