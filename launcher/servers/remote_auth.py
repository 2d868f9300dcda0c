"""A remote server's login, used at run: the access token of ``ironcurtain auth login`` put on
every request to that server, refreshed before it expires and when the server refuses it.

It is the ``mcp`` SDK's OAuth client (:class:`mcp.client.auth.OAuthClientProvider`) resumed
from the login kept in :mod:`launcher.servers.token_store`: the refresh request (with the RFC
8707 ``resource``, to the token endpoint of the authorization server that issued the login)
is the SDK's. What differs is what happens when the login cannot be used: a session never
opens a browser nor registers anew, nor follows a server to another authorization server; the
request goes out unsigned or with the refused token, its refusal is the server's, and
:attr:`StoredLogin.needed` says why in words a person can act on.

A login is used for the URL it was made with only (one made for another URL, after the
config changed, is not sent), and only by the session of the user (and caller) it belongs to.
Two sessions of a user that share a login refresh it once: the refresh happens under a lock
on the login's file, and a login another session refreshed meanwhile is taken from the store.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import time
from collections.abc import AsyncGenerator, AsyncIterator
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.utils import (
    create_oauth_metadata_request,
    extract_resource_metadata_from_www_auth,
    handle_protected_resource_response,
    issuers_match,
)
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)

from launcher.plan.remote_plan import RemoteTarget
from launcher.servers.token_store import Login, TokenStore, caller_shown

# Seconds before its expiry a token is refreshed (at most; a fifth of its lifetime when that
# is shorter), so a request never leaves with a token about to lapse.
REFRESH_MARGIN = 60.0


def login_command(server: str, caller: str | None = None) -> str:
    """What to run to log in to ``server`` (for ``caller``, a key of
    :func:`launcher.servers.token_store.caller_key`).

    >>> print(login_command("far", "https://idp.example bob smith"))
    ironcurtain auth login far --caller 'bob smith' --issuer https://idp.example
    """
    if caller is None:
        return f"ironcurtain auth login {server}"
    issuer, _, name = caller.partition(" ")
    return (
        f"ironcurtain auth login {server} --caller {shlex.quote(name)} "
        f"--issuer {shlex.quote(issuer)}"
    )


def margin(lifetime: float | None) -> float:
    """How long before expiry a token of ``lifetime`` seconds is refreshed.

    >>> margin(3600), margin(5), margin(None)
    (60.0, 1.0, 0.0)
    """
    return 0.0 if lifetime is None else min(REFRESH_MARGIN, lifetime / 5)


def expiry(token: OAuthToken, now: float | None = None) -> float | None:
    """When ``token`` expires (epoch seconds), by its ``expires_in``."""
    if token.expires_in is None:
        return None
    return (time.time() if now is None else now) + int(token.expires_in)


class _KeptTokens:
    """The SDK's token storage over one kept login: a refreshed token is written back."""

    def __init__(self, owner: StoredLogin) -> None:
        self.owner = owner

    async def get_tokens(self) -> OAuthToken | None:
        return self.owner.context.current_tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.owner.kept(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.owner.context.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        del client_info  # a session never registers: a login registers


class StoredLogin(OAuthClientProvider):
    """The SDK's OAuth client, resumed from a kept login (see the module's docstring)."""

    def __init__(self, login: Login, store: TokenStore) -> None:
        client = OAuthClientInformationFull.model_validate(login["client"])
        wanted = client.model_dump(include=set(OAuthClientMetadata.model_fields), exclude_none=True)
        super().__init__(
            login["url"], OAuthClientMetadata.model_validate(wanted), _KeptTokens(self)
        )
        self.store = store
        self.needed: str | None = None  # why the login cannot be used, once it cannot
        self._resume(login)
        self._initialized = True

    def _resume(self, login: Login) -> None:
        """Take ``login`` whole: its tokens, its client, and the authorization server that
        issued it (its token endpoint is where its refresh token goes, and nowhere else)."""
        self.login = login
        context = self.context
        context.client_info = OAuthClientInformationFull.model_validate(login["client"])
        context.current_tokens = OAuthToken.model_validate(login["tokens"])
        context.auth_server_url = login.get("issuer")
        found = login.get("resource_metadata")
        context.protected_resource_metadata = (
            ProtectedResourceMetadata.model_validate(found) if found else None
        )
        found = login.get("server_metadata")
        context.oauth_metadata = OAuthMetadata.model_validate(found) if found else None
        self._set_expiry(login.get("expires_at"))

    def hosts(self) -> frozenset[str]:
        """The hosts it sends requests to besides the server's: its authorization server's
        token endpoint (a refresh goes there)."""
        endpoint = urlsplit(self._get_token_endpoint()).hostname
        return frozenset({endpoint.lower()} if endpoint else ())

    # -- the token ------------------------------------------------------------------------

    def _set_expiry(self, expires_at: float | None) -> None:
        token = self.context.current_tokens
        lifetime = token.expires_in if token is not None else None
        self.context.token_expiry_time = (
            None if expires_at is None else expires_at - margin(lifetime)
        )

    def _token(self) -> str | None:
        tokens = self.context.current_tokens
        return tokens.access_token if tokens is not None else None

    def kept(self, tokens: OAuthToken) -> None:
        """A refreshed token: used from now on, and written to the store."""
        at = expiry(tokens)
        self._set_expiry(at)
        login: Login = {**self.login, "tokens": tokens.model_dump(mode="json", exclude_none=True)}
        login["obtained"] = time.time()
        login["expires_at"] = at
        self.store.save(login)
        self.login = login

    def _adopt_stored(self) -> None:
        """Take the login as the store has it now (another session refreshed it, or the user
        logged in again), when it is still for this server's URL."""
        stored = self.store.load(self.login["server"], self.login.get("caller"))
        if stored is None or stored.get("url") != self.login["url"] or stored == self.login:
            return
        self._resume(stored)  # a login made anew may be another authorization server's
        self.needed = None

    @contextlib.asynccontextmanager
    async def _shared(self) -> AsyncIterator[None]:
        """Held while the login is refreshed: no other session of the user refreshes it."""
        lock = self.store.lock_file(self.login["server"], self.login.get("caller"))
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await anyio.sleep(0.05)
            yield
        finally:
            os.close(fd)

    # -- the flow ---------------------------------------------------------------------------

    def _stale(self, refused: str | None) -> bool:
        """Whether the token must be refreshed: about to expire, or the one just refused."""
        if refused is not None:
            return self._token() == refused
        return not self.context.is_token_valid()

    async def _auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        """Sign ``request``; refresh first when the token is about to expire, and once more
        when the server refuses it. No refusal is turned into anything but itself."""
        refused: str | None = None
        for attempt in range(2):
            async with self.context.lock:
                if self._stale(refused):
                    async with self._shared():
                        self._adopt_stored()
                        if self._stale(refused) and self.needed is None:
                            refresh = self._refresh_request()
                            if refresh is not None:
                                answer = yield refresh
                                await self._refreshed(answer)
                if self.context.current_tokens is not None:
                    self._add_auth_header(request)
                sent = self._token()
            response = yield request
            if response.status_code != 401:
                return
            refused = sent
            named = self._metadata_named(response) if attempt == 0 else None
            if named is not None:
                moved = self._moved(await handle_protected_resource_response((yield named)))
                self.needed = moved or self.needed
        self.needed = self.needed or "it refused the login's token even after a refresh"

    def _metadata_named(self, refusal: httpx2.Response) -> httpx2.Request | None:
        """The request for the protected-resource metadata a refusal names, when it is on the
        server's own host (the only host it is asked of)."""
        named = extract_resource_metadata_from_www_auth(refusal)
        own = urlsplit(self.login["url"]).hostname
        if named is None or urlsplit(named).hostname != own:
            return None
        return create_oauth_metadata_request(named)

    def _moved(self, metadata: ProtectedResourceMetadata | None) -> str | None:
        """Why the login no longer fits, when the server now names another authorization
        server than the one that issued it (a session never follows it: a login does)."""
        issuer = self.login.get("issuer")
        if metadata is None or not metadata.authorization_servers or issuer is None:
            return None
        named = str(metadata.authorization_servers[0])
        if issuers_match(named, issuer):
            return None
        return f"it now names another authorization server ({named}; the login is from {issuer})"

    def _refresh_request(self) -> httpx2.Request | None:
        tokens, client = self.context.current_tokens, self.context.client_info
        if tokens is None or tokens.refresh_token is None or client is None:
            self.needed = "its login has expired and holds no refresh token"
            return None
        data = {
            "grant_type": "refresh_token",
            "refresh_token": tokens.refresh_token,
            "client_id": client.client_id or "",
            "resource": self.context.get_resource_url(),  # RFC 8707: always, to its server
        }
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        data, headers = self.context.prepare_token_auth(data, headers)
        return httpx2.Request("POST", self._get_token_endpoint(), data=data, headers=headers)

    async def _refreshed(self, answer: httpx2.Response) -> None:
        """Take a refresh's answer: the new token, or why the login is no longer good."""
        refused = answer.status_code
        tokens = self.context.current_tokens
        if await self._handle_refresh_response(answer):
            return
        self.context.current_tokens = tokens  # the refused one: the server says so itself
        self.needed = (
            f"its authorization server refused to refresh the login (HTTP {refused}): "
            "the refresh token expired or was revoked"
        )


# The logins of this process, one per server, caller and URL: every connection to a server
# (one per protocol era) shares its token, its refreshes and its lock.
_LOGINS: dict[tuple[str, str, str | None, str], StoredLogin] = {}


def login_for(
    server: str, target: RemoteTarget, caller: str | None = None, store: TokenStore | None = None
) -> StoredLogin | None:
    """What signs the requests to ``server`` in: its kept login, when there is one for this
    very URL (None otherwise; :func:`missing` then says why)."""
    store = store or TokenStore()
    key = (str(store.root), server, caller, target.url)
    if key in _LOGINS:
        return _LOGINS[key]
    login = store.load(server, caller)
    if login is None or login.get("url") != target.url:
        return None
    made = StoredLogin(login, store)
    _LOGINS[key] = made
    return made


def missing(
    server: str, target: RemoteTarget, caller: str | None = None, store: TokenStore | None = None
) -> str:
    """Why no login signs the requests to ``server``, in words a person can act on."""
    login = (store or TokenStore()).load(server, caller)
    if login is None:
        return (
            f"no login is kept for it for the {caller_shown(caller)}"
            if caller
            else ("no login is kept for it")
        )
    return f"its login was made for {login.get('url')}, not {target.where}"
