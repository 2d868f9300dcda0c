"""``ironcurtain auth login`` attacked: by a hostile remote server and the authorization server
it names (aiming the login at this machine's services, at plain http, answering with
something that is not a token), and by another local process racing the browser to the
loopback receiver. The hostile servers are plain HTTP listeners on loopback answering what
the attack needs; the honest one is the ``mcp`` SDK's server and authorization server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest

from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.listener import Listener, Reply, listening
from tests.support.oauth import OAuthRemote, approving, oauth_server
from tests.support.remote import free_port

pytestmark = pytest.mark.sandbox

TOKEN = "at-" + "5ec7e7" * 6  # what the hostile authorization server hands out


@pytest.fixture
def remote() -> Iterator[Listener]:
    with listening() as server:
        yield server


@pytest.fixture
def victim() -> Iterator[Listener]:
    """A service of this machine's loopback the hostile server aims the login at."""
    with listening() as service:
        yield service


def _hostile_remote(remote: Listener, authorization_server: str) -> str:
    """``remote`` as an MCP server that requires a login at ``authorization_server``; its
    URL (by ``localhost``)."""
    url = f"http://localhost:{remote.port}/mcp"
    named = f"http://localhost:{remote.port}/.well-known/oauth-protected-resource/mcp"
    remote.answers["/mcp"] = Reply(401, {"WWW-Authenticate": f'Bearer resource_metadata="{named}"'})
    remote.answers["/.well-known/oauth-protected-resource/mcp"] = {
        "resource": url,
        "authorization_servers": [authorization_server],
    }
    return url


def _approve(request: dict[str, Any]) -> Reply:
    query = dict(parse_qsl(urlsplit(request["target"]).query))
    back = urlencode({"code": "c0de", "state": query["state"]})
    return Reply(302, {"Location": f"{query['redirect_uri']}?{back}"})


def _authorization_server(listener: Listener, issuer: str, **metadata: Any) -> None:
    """``listener`` as an authorization server (issuer ``issuer``) that approves at once and
    answers a token request with ``token``."""
    listener.answers["/.well-known/oauth-authorization-server"] = {
        "issuer": issuer,
        "authorization_endpoint": f"{issuer}/authorize",
        "token_endpoint": f"{issuer}/token",
        "registration_endpoint": f"{issuer}/register",
        "code_challenge_methods_supported": ["S256"],
        **metadata,
    }
    listener.answers["/register"] = lambda r: Reply(
        201, {}, {**json.loads(r["body"]), "client_id": "hostile-client"}
    )
    listener.answers["/authorize"] = _approve
    listener.answers["/token"] = {"access_token": TOKEN, "token_type": "Bearer"}


def _login(user: Home, url: str, *more: str, **entry: Any) -> Any:
    config = user.root / "c.json"
    config.write_text(json.dumps({"mcpServers": {"far": {"url": url, **entry}}}))
    return ironcurtain(approving(user), "auth", "login", "far", "--config", str(config), *more)


def _one_line_failure(done: Any) -> str:
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    last: str = done.stderr.splitlines()[-1]
    assert last.startswith("ironcurtain: error: remote server 'far'"), done.stderr
    return last


@pytest.mark.parametrize(
    ("named", "reached"),
    [
        ("http://127.0.0.1:{port}", False),
        ("http://127.1:{port}", False),
        ("http://2130706433:{port}", False),
        ("http://[::ffff:127.0.0.1]:{port}", False),
        ("http://victim.localhost:{port}", False),
        ("http://localhost:{port}", True),  # the control: the server's own host
        ("http://as.internal:{port}", True),  # the control: a name the user pinned
    ],
    ids=["address", "short", "decimal", "mapped-v6", "dot-localhost", "own-host", "pinned"],
)
def test_a_server_cannot_aim_the_login_at_this_machine(
    user: Home, remote: Listener, victim: Listener, named: str, reached: bool
) -> None:
    """The remote server (reached by ``localhost``, the user's choice) names as its
    authorization server an address of this machine's loopback, written any way an address
    can be: nothing is dialled there. The controls, the server's own host and a name the
    user pinned, show the same login does reach the listener when it may."""
    url = _hostile_remote(remote, named.format(port=victim.port))
    done = _login(user, url, hosts={"as.internal": "127.0.0.1"})
    assert done.returncode != 0  # the listener is no authorization server either way
    assert bool(victim.requests) == reached, victim.paths
    if not reached:
        assert "loopback" in _one_line_failure(done)


def test_a_cloud_metadata_address_is_never_dialled(user: Home, remote: Listener) -> None:
    url = _hostile_remote(remote, "http://169.254.169.254")
    said = _one_line_failure(_login(user, url))
    assert "169.254.169.254 is a cloud metadata address" in said


@pytest.mark.parametrize(
    ("endpoint", "refused"),
    [
        ("authorization_endpoint", True),
        ("token_endpoint", True),
        (None, False),  # the control: every endpoint on this machine
    ],
    ids=["authorization", "token", "control"],
)
def test_an_endpoint_in_plain_http_elsewhere_is_refused_before_the_browser(
    user: Home, remote: Listener, endpoint: str | None, refused: bool
) -> None:
    """The authorization server's metadata sends the person's browser (their password), or
    the code and the tokens, over plain http to another machine: refused before the browser
    opens. The control: the same server with its endpoints on loopback is approved in the
    browser and its token taken."""
    issuer = f"http://localhost:{remote.port}"
    url = _hostile_remote(remote, issuer)
    plain = {endpoint: "http://as.example.net/x"} if endpoint else {}
    _authorization_server(remote, issuer, **plain)
    record = user.root / "browsed.txt"
    user.env["RECORD"] = str(record)
    done = _login(user, url, "--wait", "60")
    assert record.exists() != refused
    if endpoint is not None:
        said = _one_line_failure(done)
        assert f"{endpoint.replace('_', ' ')} is plain http:// to as.example.net" in said
    else:  # the server refuses the token after: the login got that far
        assert "refused the token its authorization server issued" in _one_line_failure(done)
        assert "/token" in remote.paths


def test_a_token_answer_that_is_not_one_is_not_quoted(user: Home, remote: Listener) -> None:
    """The token endpoint answers with its fields named otherwise (``accessToken``): the
    failure says it is no token answer, without the answer (its parse error repeats it,
    token and all). The control: the parse error the SDK raises does hold the token."""
    from mcp.client.auth.exceptions import OAuthTokenError
    from mcp.shared.auth import OAuthToken
    from pydantic import ValidationError

    issuer = f"http://localhost:{remote.port}"
    url = _hostile_remote(remote, issuer)
    _authorization_server(remote, issuer)
    short = TOKEN[:12]  # the parse error quotes a long answer cut short: some of the token
    answer = {"accessToken": short}
    remote.answers["/token"] = answer
    done = _login(user, url, "--wait", "60")
    said = _one_line_failure(done)
    assert "not a token response" in said
    assert short not in done.stdout + done.stderr
    with pytest.raises(ValidationError) as raised:
        OAuthToken.model_validate_json(json.dumps(answer))
    assert short in str(OAuthTokenError(f"Invalid token response: {raised.value}"))


@pytest.fixture
def far(user: Home) -> Iterator[OAuthRemote]:
    outside = user.root / "outside"
    outside.mkdir()
    with oauth_server(outside, free_port(), 3600) as server:
        yield server


@pytest.mark.parametrize("race", ["wrong-state", "error", ""], ids=["code", "error", "control"])
def test_another_process_racing_the_browser_does_not_end_the_login(
    user: Home, far: OAuthRemote, race: str
) -> None:
    """Another local process finds the receiver's port and answers first, with a code of its
    own and a guessed state, or with an error: the login waits past it for the browser's
    answer and logs in; one line says an answer was ignored."""
    user.env["RACE"] = race
    done = _login(user, far.url, "--wait", "120")
    assert done.returncode == 0, done.stderr
    assert ("not this login's" in done.stderr) == bool(race)
    (grant,) = far.grants()
    assert grant["grant"] == "authorization_code"


def test_a_forged_state_alone_is_waited_past_until_the_wait_ends(
    user: Home, far: OAuthRemote
) -> None:
    """The only answer has a forged state: no code is exchanged, nothing kept; the login
    ends when the wait does, in one line."""
    user.env["TAMPER"] = "state=forged-state"
    done = _login(user, far.url, "--wait", "3")
    said = _one_line_failure(done)
    assert "no answer came back from the browser within 3 s" in said
    assert "not this login's" in done.stderr
    assert far.grants() == []
    assert not Path(user.state / "ironcurtain" / "logins").exists() or (
        ironcurtain(user, "auth", "status", "far").returncode == 1
    )


def test_the_entrys_headers_go_to_its_own_host_only(
    user: Home, remote: Listener, victim: Listener
) -> None:
    """The entry's headers (a team key, say) are the server's: the authorization server it
    names, elsewhere, is sent none of them (the OAuth client's own requests carry only what
    it puts in them). The control: the server's own host gets them."""
    url = _hostile_remote(remote, f"http://as.internal:{victim.port}")
    headers = {"X-Team-Key": "k-team-1234"}
    _login(user, url, hosts={"as.internal": "127.0.0.1"}, headers=headers)
    assert victim.requests and remote.requests
    assert remote.requests[0]["headers"].get("X-Team-Key") == "k-team-1234"
    assert not any("k-team-1234" in json.dumps(r) for r in victim.requests)


@pytest.mark.parametrize("own", [False, True], ids=["address", "control-own-origin"])
def test_a_redirect_of_the_metadata_cannot_aim_the_login_either(
    user: Home, remote: Listener, victim: Listener, own: bool
) -> None:
    """The server's metadata answers with a redirect to this machine's loopback: it is not
    followed there (the OAuth client follows a redirect on the same origin only, and the
    egress check would judge the address). The control: a redirect on the server's own
    origin is followed."""
    url = _hostile_remote(remote, f"http://localhost:{remote.port}")
    base = f"http://localhost:{remote.port}" if own else f"http://127.0.0.1:{victim.port}"
    for path in (
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ):
        remote.answers[path] = Reply(307, {"Location": f"{base}/moved"})
    done = _login(user, url)
    assert done.returncode != 0
    assert victim.requests == []
    assert ("/moved" in remote.paths) == own, remote.paths
