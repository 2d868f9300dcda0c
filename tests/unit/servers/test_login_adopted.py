"""A session's login, made anew meanwhile (``auth login`` again, the server now with another
authorization server): the session takes it whole, and its refresh token goes to the token
endpoint of the authorization server that issued it, never to the old one's. Real loopback
listeners stand for the server and both authorization servers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.plan.remote_plan import STREAMABLE_HTTP, RemoteTarget
from launcher.servers.remote_auth import StoredLogin
from launcher.servers.remote_egress import client_for
from launcher.servers.token_store import Login, TokenStore
from tests.support.listener import Listener, listening

ANSWER = {"access_token": "at-fresh", "token_type": "Bearer", "expires_in": 3600}


def _login(url: str, issuer: Listener, refresh: str) -> Login:
    base = f"http://127.0.0.1:{issuer.port}"
    return {
        "server": "far",
        "caller": None,
        "url": url,
        "issuer": base,
        "obtained": 0.0,
        "expires_at": 1.0,  # long expired: the next request refreshes first
        "tokens": {"access_token": "at-old", "refresh_token": refresh, "expires_in": 60},
        "client": {"client_id": "c-1", "redirect_uris": ["http://127.0.0.1:9/callback"]},
        "resource_metadata": None,
        "server_metadata": {
            "issuer": base,
            "authorization_endpoint": f"{base}/authorize",
            "token_endpoint": f"{base}/token",
        },
    }


@pytest.fixture
def three() -> Iterator[tuple[Listener, Listener, Listener]]:
    with (
        listening({"/mcp": {}}) as server,
        listening({"/token": ANSWER}) as old,
        listening({"/token": ANSWER}) as new,
    ):
        yield server, old, new


@pytest.mark.parametrize("anew", [True, False], ids=["made-anew", "control"])
def test_a_login_made_anew_is_refreshed_where_it_was_issued(
    tmp_path: Path, three: tuple[Listener, Listener, Listener], anew: bool
) -> None:
    server, old, new = three
    url = f"http://127.0.0.1:{server.port}/mcp"
    store = TokenStore(tmp_path / "logins")
    store.save(_login(url, old, "rt-first"))
    made = StoredLogin(_login(url, old, "rt-first"), store)
    if anew:  # while the session runs, the user logs in again, at the other server
        store.save(_login(url, new, "rt-second"))
    target = RemoteTarget(url, "127.0.0.1", server.port, STREAMABLE_HTTP, {}, {})

    async def request() -> int:
        async with client_for(target, auth=made, also=made.hosts()) as http:
            return (await http.post(url, json={})).status_code

    assert asyncio.run(request()) == 200
    refreshed = new if anew else old
    (asked,) = [r for r in refreshed.requests if r["path"] == "/token"]
    assert f"refresh_token=rt-{'second' if anew else 'first'}" in asked["body"]
    other = old if anew else new
    assert other.requests == []  # the other authorization server saw nothing
    assert server.requests[-1]["headers"]["Authorization"] == "Bearer at-fresh"
