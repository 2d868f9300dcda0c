"""Logging in to a remote server (``ironcurtain auth login``): ironcurtain as the OAuth client
MCP's authorization specification describes, on the ``mcp`` SDK's client
(:class:`mcp.client.auth.OAuthClientProvider`): protected-resource metadata (RFC 9728), the
authorization server's metadata (RFC 8414, its ``issuer`` checked), dynamic client
registration (RFC 7591), the authorization code with PKCE, ``state`` and the ``iss`` of the
answer (RFC 9207) checked, and the RFC 8707 ``resource`` in every authorization and token
request.

The person approves in their browser (``$BROWSER``, else the system's, through
:mod:`webbrowser`; the address is printed too); the browser comes back to a one-shot receiver
on 127.0.0.1 at a port chosen at random. The login is kept encrypted
(:mod:`launcher.servers.token_store`); no token is ever printed. Every address dialled passes
the egress check of :mod:`launcher.servers.remote_egress`, the authorization server's too.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import logging
import secrets
import threading
import time
import webbrowser
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlsplit

import anyio
import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.exceptions import OAuthFlowError, OAuthRegistrationError, OAuthTokenError
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
)
from pydantic import AnyUrl, PrivateAttr

from launcher.plan.remote_plan import SSE, RemoteAuth, RemoteTarget, is_loopback_name
from launcher.servers.remote_auth import expiry
from launcher.servers.remote_egress import EVERY_HOST, EgressRefused, client_for
from launcher.servers.token_store import Login, TokenStore

CALLBACK_PATH = "/callback"
# Seconds the person has to approve in the browser.
LOGIN_TIMEOUT = 300.0
CLIENT_NAME = "ironcurtain"
# The protocol version the login's opening request is made in (any server answers it; what
# counts is its 401 and, after the login, that it takes the token).
OPENING_VERSION = "2025-11-25"
# The OAuth client's loggers (one per module: a logger's being disabled is not inherited).
SDK_LOGGERS = ("mcp.client.auth", "mcp.client.auth.oauth2", "mcp.client.auth.utils")
_FAILURES = (
    OAuthFlowError,
    OAuthRegistrationError,
    OAuthTokenError,
    EgressRefused,
    httpx2.HTTPError,
)


class LoginFailed(Exception):
    """A login that did not happen: why, in one line naming the server."""


class _Receiver:
    """The one-shot receiver the browser is sent back to: 127.0.0.1, a random port, one
    path; the first answer carrying a ``code`` or an ``error`` and the ``state`` of the
    address the browser was sent to is taken. Any other (another local process's, racing
    the browser with a code or an error of its own) is refused and waited past, said once."""

    def __init__(self, loop: asyncio.AbstractEventLoop, say: Callable[[str], None]) -> None:
        self.answer: asyncio.Future[dict[str, str]] = loop.create_future()
        self.state: str | None = None  # the state of the address the browser was sent to
        self.say = say
        self.strays = 0
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                if parts.path != CALLBACK_PATH or not ({"code", "error"} & query.keys()):
                    self.send_error(404)
                    return
                if not receiver.awaits(query.get("state")):
                    self.send_error(400, "not the answer this login waits for")
                    loop.call_soon_threadsafe(receiver.stray)
                    return
                body = b"ironcurtain: the login is done here; you may close this window.\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                loop.call_soon_threadsafe(receiver.take, query)

            def log_message(self, format: str, *args: Any) -> None:
                del format, args  # the query holds the code: never logged

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def awaits(self, state: str | None) -> bool:
        """Whether an answer with ``state`` is the one this login waits for."""
        expected = self.state
        return None not in (state, expected) and secrets.compare_digest(
            str(state).encode(), str(expected).encode()
        )

    def stray(self) -> None:
        self.strays += 1
        if self.strays == 1:
            self.say(
                "An answer that is not this login's (another state) came to the receiver and "
                "was ignored; still waiting for the browser."
            )

    def take(self, query: dict[str, str]) -> None:
        if not self.answer.done():
            self.answer.set_result(query)

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{CALLBACK_PATH}"

    def __enter__(self) -> _Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Collected:
    """The SDK's token storage during a login: starts empty (a login registers anew and
    asks anew), keeps what the flow obtains."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None
        self.obtained = 0.0

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens, self.obtained = tokens, time.time()

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def open_browser(url: str, say: Callable[[str], None]) -> None:
    """Send the person to ``url``: ``$BROWSER`` or the system's browser, and the address
    printed for when neither opens."""
    say(f"Opening your browser to log in (if it does not open, visit this address):\n  {url}")
    if not webbrowser.open(url):
        say("No browser could be started: open the address above yourself.")


async def log_in(
    server: str,
    target: RemoteTarget,
    say: Callable[[str], None],
    caller: str | None = None,
    store: TokenStore | None = None,
    wait: float = LOGIN_TIMEOUT,
    secret: str | None = None,
) -> Login:
    """Log in to ``server`` through the person's browser (who has ``wait`` seconds to
    approve) and keep the login. The client is the entry's ``auth``: a pre-registered one
    (with ``secret``, its client secret, read by the caller), a client ID metadata document,
    or, failing both, one that registers itself."""
    store = store or TokenStore()
    where = f"remote server '{server}' ({target.where})"
    kept = _Collected()
    with _Receiver(asyncio.get_running_loop(), say) as receiver, _sdk_quiet():
        kept.client = pre_registered(target.auth, receiver.redirect_uri, secret)
        provider = _provider(target, receiver, kept, say, wait)
        try:
            status = await _knock(target, provider)
        except _FAILURES as exc:
            raise LoginFailed(f"{where}: the login failed: {_said(exc)}") from None
        except TimeoutError:
            raise LoginFailed(
                f"{where}: no answer came back from the browser within {wait:.0f} s"
            ) from None
    context = provider.context
    if kept.tokens is None or kept.client is None:
        raise LoginFailed(f"{where} asked for no login (it answered HTTP {status} unsigned)")
    if status in (401, 403):
        raise LoginFailed(
            f"{where} refused the token its authorization server issued (HTTP {status})"
        )
    login: Login = {
        "server": server,
        "caller": caller,
        "url": target.url,
        "issuer": str(context.oauth_metadata.issuer) if context.oauth_metadata else None,
        "obtained": kept.obtained,
        "expires_at": expiry(kept.tokens, kept.obtained),
        "tokens": kept.tokens.model_dump(mode="json", exclude_none=True),
        "client": kept.client.model_dump(mode="json", exclude_none=True),
        "resource_metadata": _dumped(context.protected_resource_metadata),
        "server_metadata": _dumped(context.oauth_metadata),
    }
    store.save(login)
    return login


@contextlib.contextmanager
def _sdk_quiet() -> Iterator[None]:
    """The OAuth client's own log silenced while a login runs: it logs a failed flow with
    its traceback (to stderr, where no logging is set up); the failure is said in one line
    by :func:`log_in` instead."""
    loggers = [logging.getLogger(name) for name in SDK_LOGGERS]
    were = [logger.disabled for logger in loggers]
    for logger in loggers:
        logger.disabled = True
    try:
        yield
    finally:
        for logger, was in zip(loggers, were, strict=True):
            logger.disabled = was


def plain_endpoint(metadata: OAuthMetadata | None, target: RemoteTarget) -> str | None:
    """Why the authorization server's endpoints cannot be used, when one of them (or its
    issuer) is plain ``http://`` to another machine than this one: the person's password,
    the code and the tokens would travel readable."""
    if metadata is None:
        return None
    for name in ("issuer", "authorization_endpoint", "token_endpoint", "registration_endpoint"):
        value = getattr(metadata, name)
        refused = None if value is None else plain_endpoint_url(name, str(value), target)
        if refused is not None:
            return refused
    return None


def plain_endpoint_url(name: str, url: str, target: RemoteTarget) -> str | None:
    """Why the authorization server's endpoint ``name`` at ``url`` is not used, when it is
    plain ``http://`` to another machine than this one."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        return None
    host = (parts.hostname or "").lower()
    if parts.scheme == "http" and is_loopback_name(host, target.hosts):
        return None
    return (
        f"its authorization server's {name.replace('_', ' ')} is plain http:// to "
        f"{host}: the login would travel readable (only https:// is used, http:// "
        "to this machine only)"
    )


def pre_registered(
    auth: RemoteAuth, redirect_uri: str, secret: str | None
) -> OAuthClientInformationFull | None:
    """The pre-registered client of ``auth`` (None when it names none: a metadata document's
    URL, or no client at all). With a secret, it authenticates to the token endpoint with
    HTTP Basic; a public client sends its ID alone."""
    if auth.client_id is None or auth.metadata_document:
        return None
    return OAuthClientInformationFull(
        client_id=auth.client_id,
        client_secret=secret,
        client_name=CLIENT_NAME,
        redirect_uris=[AnyUrl(redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="client_secret_basic" if secret else "none",
        scope=" ".join(auth.scopes) or None,
    )


class _Scoped(OAuthClientMetadata):
    """The client's metadata, whose scope stays the one the config names (when it names
    one) whatever the server's challenge or metadata suggests."""

    _fixed: str | None = PrivateAttr(default=None)  # never sent: not a field

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "scope" and self._fixed is not None:
            value = self._fixed
        super().__setattr__(name, value)


def _provider(
    target: RemoteTarget,
    receiver: _Receiver,
    kept: _Collected,
    say: Callable[[str], None],
    wait: float,
) -> OAuthClientProvider:
    scope = " ".join(target.auth.scopes) or None
    metadata = _Scoped.model_validate(
        {
            "client_name": CLIENT_NAME,
            "redirect_uris": [receiver.redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "scope": scope,
        }
    )
    metadata._fixed = scope
    document = target.auth.client_id if target.auth.metadata_document else None

    async def redirect(url: str) -> None:
        refused = plain_endpoint(provider.context.oauth_metadata, target)
        if refused is not None:
            raise OAuthFlowError(refused)
        receiver.state = dict(parse_qsl(urlsplit(url).query)).get("state")
        await anyio.to_thread.run_sync(open_browser, url, say)

    async def callback() -> AuthorizationCodeResult:
        with anyio.fail_after(wait):
            query = await receiver.answer
        if "error" in query:
            said = query.get("error_description") or query["error"]
            raise OAuthFlowError(f"the authorization server refused: {said}")
        return AuthorizationCodeResult(
            code=query["code"], state=query.get("state"), iss=query.get("iss")
        )

    provider = OAuthClientProvider(
        target.url, metadata, kept, redirect, callback, client_metadata_url=document
    )
    return provider


async def _knock(target: RemoteTarget, provider: OAuthClientProvider) -> int:
    """Open a conversation with the server, signed in by ``provider`` (which logs in on the
    server's 401); the status of its last answer. A session it opened is closed."""
    from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER

    async with client_for(target, auth=provider, also=EVERY_HOST) as http:
        if target.transport == SSE:
            async with http.stream(
                "GET", target.url, headers={"Accept": "text/event-stream"}
            ) as answer:
                return answer.status_code
        opening = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": OPENING_VERSION,
                "capabilities": {},
                "clientInfo": {"name": CLIENT_NAME, "version": "login"},
            },
        }
        headers = {
            "Accept": "application/json, text/event-stream",
            MCP_PROTOCOL_VERSION_HEADER: OPENING_VERSION,
        }
        async with http.stream("POST", target.url, json=opening, headers=headers) as answer:
            session = answer.headers.get("mcp-session-id")
        if session is not None and answer.status_code < 300:
            await http.delete(target.url, headers={"mcp-session-id": session})
        return answer.status_code


def _dumped(model: Any) -> dict[str, Any] | None:
    return None if model is None else dict(model.model_dump(mode="json", exclude_none=True))


# Characters of a failure's words said at most: what an authorization server answered is in
# some of them, and may be long.
SAID_LIMIT = 300


def _said(exc: BaseException) -> str:
    """A failure in one line. A token answer that is not one is not quoted: its parse error
    repeats the answer, tokens and all.

    >>> _said(OAuthTokenError("Invalid token response: 1 validation error ... at-secret"))
    'its token endpoint answered something that is not a token response'
    """
    text = str(exc) or type(exc).__name__
    if isinstance(exc, OAuthTokenError) and text.startswith("Invalid token response"):
        return "its token endpoint answered something that is not a token response"
    text = " ".join(text.split())
    return text if len(text) <= SAID_LIMIT else text[: SAID_LIMIT - 3] + "..."
