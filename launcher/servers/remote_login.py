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
import http.server
import threading
import time
import webbrowser
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.exceptions import OAuthFlowError, OAuthRegistrationError, OAuthTokenError
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from launcher.plan.remote_plan import SSE, RemoteTarget
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
    path; the first answer carrying a ``code`` or an ``error`` is taken."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.answer: asyncio.Future[dict[str, str]] = loop.create_future()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                if parts.path != CALLBACK_PATH or not ({"code", "error"} & query.keys()):
                    self.send_error(404)
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
) -> Login:
    """Log in to ``server`` through the person's browser and keep the login."""
    store = store or TokenStore()
    where = f"remote server '{server}' ({target.where})"
    kept = _Collected()
    with _Receiver(asyncio.get_running_loop()) as receiver:
        provider = _provider(target, receiver, kept, say)
        try:
            status = await _knock(target, provider)
        except _FAILURES as exc:
            raise LoginFailed(f"{where}: the login failed: {_said(exc)}") from None
        except TimeoutError:
            raise LoginFailed(
                f"{where}: no answer came back from the browser within {LOGIN_TIMEOUT:.0f} s"
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


def _provider(
    target: RemoteTarget, receiver: _Receiver, kept: _Collected, say: Callable[[str], None]
) -> OAuthClientProvider:
    metadata = OAuthClientMetadata.model_validate(
        {
            "client_name": CLIENT_NAME,
            "redirect_uris": [receiver.redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }
    )

    async def redirect(url: str) -> None:
        await anyio.to_thread.run_sync(open_browser, url, say)

    async def callback() -> AuthorizationCodeResult:
        with anyio.fail_after(LOGIN_TIMEOUT):
            query = await receiver.answer
        if "error" in query:
            said = query.get("error_description") or query["error"]
            raise OAuthFlowError(f"the authorization server refused: {said}")
        return AuthorizationCodeResult(
            code=query["code"], state=query.get("state"), iss=query.get("iss")
        )

    return OAuthClientProvider(target.url, metadata, kept, redirect, callback)


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


def _said(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())
