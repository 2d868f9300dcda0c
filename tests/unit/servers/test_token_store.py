"""The store of logins to remote servers, on real files: encrypted at rest, owner-only, and a
login used for the URL it was made with only."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from launcher.plan.remote_plan import STREAMABLE_HTTP, RemoteTarget
from launcher.servers.remote_auth import login_for, missing
from launcher.servers.token_store import KEY_FILE, Login, StoreError, TokenStore

URL = "https://mcp.example.com/mcp"
ACCESS, REFRESH = "at-" + "a1" * 16, "rt-" + "b2" * 16


def _login(server: str = "far", url: str = URL) -> Login:
    return {
        "server": server,
        "caller": None,
        "url": url,
        "issuer": "https://auth.example.com",
        "obtained": 0.0,
        "expires_at": None,
        "tokens": {"access_token": ACCESS, "refresh_token": REFRESH, "expires_in": 3600},
        "client": {"client_id": "c-1", "redirect_uris": ["http://127.0.0.1:9/callback"]},
        "resource_metadata": None,
        "server_metadata": None,
    }


def _target(url: str) -> RemoteTarget:
    return RemoteTarget(url, "mcp.example.com", 443, STREAMABLE_HTTP, {}, {})


@pytest.fixture
def store(tmp_path: Path) -> TokenStore:
    return TokenStore(tmp_path / "logins")


def test_a_login_is_kept_encrypted_and_owner_only(store: TokenStore) -> None:
    store.save(_login())
    assert store.load("far") == _login()
    assert os.stat(store.root).st_mode & 0o777 == 0o700
    for path in store.root.iterdir():
        assert path.stat().st_mode & 0o777 == 0o600, path
        data = path.read_bytes()
        assert ACCESS.encode() not in data and REFRESH.encode() not in data
    assert store.remove("far") and store.load("far") is None and not store.remove("far")


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o600])
def test_a_key_others_may_read_is_refused(store: TokenStore, mode: int) -> None:
    store.save(_login())
    (store.root / KEY_FILE).chmod(mode)
    fresh = TokenStore(store.root)  # a later session, reading the key anew
    if mode == 0o600:  # the control: owner-only, it is read
        assert fresh.load("far") == _login()
        return
    with pytest.raises(StoreError, match=r"key: others may use it .*owner-only"):
        fresh.load("far")


def test_a_directory_others_may_enter_is_refused(store: TokenStore) -> None:
    store.save(_login())
    store.root.chmod(0o755)
    with pytest.raises(StoreError, match="others may use it"):
        TokenStore(store.root).load("far")


def test_a_login_sealed_under_another_key_is_refused(store: TokenStore, tmp_path: Path) -> None:
    other = TokenStore(tmp_path / "other")
    other.save(_login())
    store.save(_login("near"))
    store.path("far").write_bytes(other.path("far").read_bytes())
    with pytest.raises(StoreError, match="cannot be read with the key"):
        store.load("far")


def test_a_login_moved_to_another_servers_name_is_refused(store: TokenStore) -> None:
    """A login made for one server, put where another's belongs, is never used for it."""
    store.save(_login("far"))
    os.replace(store.path("far"), store.path("near"))
    with pytest.raises(StoreError, match="holds another login"):
        store.load("near")


@pytest.mark.parametrize("url", [URL, "https://mcp.example.com/other"])
def test_a_login_signs_only_the_url_it_was_made_with(store: TokenStore, url: str) -> None:
    """The config's URL changed since the login: its token is not sent there. The control:
    the same URL gets the login, whose refresh names that server (RFC 8707)."""
    store.save(_login())
    made: Any = login_for("far", _target(url), store=store)
    if url != URL:
        assert made is None
        assert missing("far", _target(url), store=store) == (
            f"its login was made for {URL}, not {url}"
        )
        return
    assert made is not None
    refresh = made._refresh_request()
    assert refresh is not None and refresh.url == "https://mcp.example.com/token"
    form = refresh.content.decode()
    assert (
        "grant_type=refresh_token" in form
        and "resource=https%3A%2F%2Fmcp.example.com%2Fmcp" in form
    )
