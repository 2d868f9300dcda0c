"""Each caller's own login to a remote server in gateway mode, attacked by a caller with
allowed calls only: the real ``ironcurtain run --http`` in gateway mode (JWTs of an identity
provider on loopback) in front of a real OAuth-protected server and its authorization server
(the ``mcp`` SDK's, on loopback), which record the bearer token every call came with.

Bob's calls never carry alice's token, nor the operator's: each caller's requests are
signed in with its own login, and a caller with none gets one line naming what to run. The
control: with ``"auth": {"login": "shared"}`` (the protection off, by the operator's word),
the same call of bob's goes out with the operator's token."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.audit import audit_entries
from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.http import http_session, serving
from tests.support.idp import AUDIENCE, Provider, identity_provider
from tests.support.oauth import OAuthRemote, approving, oauth_server
from tests.support.remote import free_port, remote_args
from tests.support.sdk import call

pytestmark = pytest.mark.sandbox

LIFETIME = 3600  # no refresh during a test: each caller's calls carry its login's token
TOOLS = {"far": {"echo": ["text"]}}
OTHER_ISSUER = "https://other-idp.example"


@pytest.fixture
def far(user: Home) -> Iterator[OAuthRemote]:
    outside = user.root / "outside"  # the record holds every token in clear
    outside.mkdir()
    with oauth_server(outside, free_port(), LIFETIME) as server:
        yield server


@pytest.fixture
def idp() -> Iterator[Provider]:
    with identity_provider() as provider:
        yield provider


def _config(user: Home, far: OAuthRemote, **auth: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"url": far.url, **({"auth": auth} if auth else {})}
    (user.root / "c.json").write_text(json.dumps({"mcpServers": {"far": entry}}))
    return {"far": entry}


def _login(user: Home, far: OAuthRemote, *whose: str) -> str:
    """Log in (as ``whose``: ``--caller SUB --issuer URL``, else the user's own); the access
    token the authorization server issued for it."""
    before = len(far.grants())
    done = ironcurtain(
        approving(user), "auth", "login", "far", "--config", str(user.root / "c.json"), *whose
    )
    assert done.returncode == 0, done.stderr
    grants = far.grants()
    assert len(grants) == before + 1
    return str(grants[-1]["access"])


def _as(idp: Provider, name: str) -> list[str]:
    return ["--caller", name, "--issuer", idp.issuer]


def _calls(
    user: Home, idp: Provider, servers: dict[str, Any], *who: str, own_places: bool = False
) -> dict[str, Any]:
    """Each of ``who`` in a session of its own, in turn: its listed tools and its call.
    ``own_places``: the session is planned for every caller (a workspace of each's own),
    else its servers are started ahead of their callers."""
    out: dict[str, Any] = {}

    async def scenario(url: str) -> None:
        for name in who:
            async with http_session(url, idp.token(name)) as session:
                tools = sorted(t.name for t in (await session.list_tools()).tools)
                out[name] = (tools, await call(session, "far__echo", {"text": f"from {name}"}))

    args = remote_args(user, servers, TOOLS)
    if own_places:
        (user.root / "work").mkdir()
        args[args.index("--workspace") + 1] = f"{user.root}/work/${{caller}}"
    oidc = ["--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE]
    with serving(user, *args, *oidc) as served:
        asyncio.run(scenario(served.url))
        served.proc.terminate()
        served.proc.wait(timeout=15)
        assert served.proc.stderr is not None
        out["said"] = served.stderr + served.proc.stderr.readlines()
        served.proc.stderr.close()
    return out


def _bearers(far: OAuthRemote) -> dict[str, str]:
    """The bearer token each call that reached the server came with, by its text."""
    return {c["args"]["text"]: c["bearer"] for c in far.calls()}


@pytest.mark.parametrize("own_places", [False, True], ids=["started-ahead", "planned-per-caller"])
def test_each_callers_calls_carry_its_own_login(
    user: Home, far: OAuthRemote, idp: Provider, own_places: bool
) -> None:
    servers = _config(user, far)
    alice = _login(user, far, *_as(idp, "alice"))
    bob = _login(user, far, *_as(idp, "bob"))
    logged_in = len(far.seen())  # what the logins themselves sent
    out = _calls(user, idp, servers, "alice", "bob", "alice", own_places=own_places)
    assert out["alice"] == (["far__echo"], (False, "echo: from alice"))
    assert out["bob"] == (["far__echo"], (False, "echo: from bob"))
    assert _bearers(far) == {"from alice": alice, "from bob": bob}
    said = "started for each caller" if own_places else "opened for each caller with its own login"
    assert any(said in line and "far" in line for line in out["said"]), out["said"]
    # Every request that reached the server came signed by one of the two callers' logins.
    during = far.seen()[logged_in:]
    assert during and {seen.removeprefix("Bearer ") for seen in during} <= {alice, bob}


@pytest.mark.parametrize("shared", [False, True], ids=["own-logins", "control-shared"])
def test_a_caller_without_a_login_never_gets_anothers(
    user: Home, far: OAuthRemote, idp: Provider, shared: bool
) -> None:
    servers = _config(user, far, **({"login": "shared"} if shared else {}))
    operator = _login(user, far)  # the user's own login, e.g. for stdio sessions
    alice = _login(user, far, *_as(idp, "alice"))
    # Bob of ANOTHER identity provider is logged in: not the bob this gateway admits.
    elsewhere = _login(user, far, "--caller", "bob", "--issuer", OTHER_ISSUER)
    logged_in = len(far.seen())  # what the logins themselves sent
    out = _calls(user, idp, servers, "alice", "bob")
    bearers = _bearers(far)
    if shared:
        # The control: one login for every caller, as the config says; bob's call goes out
        # with the operator's token, and so does alice's.
        assert out["bob"] == (["far__echo"], (False, "echo: from bob"))
        assert bearers == {"from alice": operator, "from bob": operator}
        return
    assert out["alice"] == (["far__echo"], (False, "echo: from alice"))
    assert bearers == {"from alice": alice}  # bob's call never reached the server
    tools, (failed, text) = out["bob"]
    run = f"ironcurtain auth login far --caller bob --issuer {idp.issuer}"
    assert tools == [] and failed  # offered to bob: nothing; his call: why, and what to run
    assert text.startswith("ERROR: server 'far' is not serving: ") and run in text, text
    # No request of bob's carried anyone's token: not alice's, the operator's, nor that of
    # the bob another provider vouches for.
    during = {seen.removeprefix("Bearer ") for seen in far.seen()[logged_in:]}
    assert during == {alice}
    assert not {operator, elsewhere} & during
    said = [line for line in out["said"] if "'far'" in line and "caller" in line]
    assert len(said) == 1, said  # one line, for bob alone
    assert "no login is kept for it for the caller 'bob'" in said[0] and run in said[0]
    assert "Traceback" not in "".join(out["said"])
    entries = audit_entries(user.root / "audit.jsonl")
    refused = [e for e in entries if e.get("event") == "server-unreachable"]
    assert [(e["server"], e["caller"]["name"]) for e in refused] == [("far", "bob")]


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--caller", "bob"], "--caller needs --issuer too"),
        (["--issuer", "https://idp.example"], "--issuer needs --caller too"),
        (["--caller", "bob", "--issuer", "idp.example"], "expected the identity provider's"),
    ],
    ids=["no-issuer", "no-caller", "issuer-not-a-url"],
)
def test_a_callers_login_names_both_its_name_and_issuer(
    user: Home, tmp_path: Path, given: list[str], said: str
) -> None:
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"mcpServers": {"far": {"url": "http://127.0.0.1:9/mcp"}}}))
    done = ironcurtain(user, "auth", "login", "far", "--config", str(config), *given)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and "Traceback" not in done.stderr
