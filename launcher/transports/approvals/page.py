"""The approvals page: every running session's questions on a web page on loopback, answered
there (approve, approve for the session, deny), live (server-sent events), with the recent
decisions. Served by uvicorn (starlette), on 127.0.0.1 only.

Who may use it: whoever holds the token printed in its address (new each start). The first
request carries it in the address and gets it back as an HttpOnly, SameSite=Strict cookie (and
is sent on without it); every request after needs the cookie. A request whose ``Host`` is not
this address (a DNS-rebinding page) is refused, as is any request with an ``Origin`` not this
page's; an answer is a POST carrying a form token derived from the session's token (CSRF), so
a page of another site can neither read the page nor answer through it. No CORS header is ever
sent, and the page may not be framed. And whatever it holds, a connection from a process of
another user's is refused: browsers send a cookie of 127.0.0.1 to every port of it, so
another local user's server there could be handed the token.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import secrets
import socket
import threading
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from launcher.transports.approvals.board import Board
from launcher.transports.approvals.page_html import board_html, page
from launcher.transports.approvals.peer_owner import peer_uid

COOKIE = "ironcurtain-approvals"
MAX_FORM = 4096  # bytes of an answer's form
EVENT_POLL = 0.25  # seconds between looks at the board for an event stream
KEEPALIVE = 15.0  # seconds of quiet before an event stream hears a comment
NOT_OPEN = (
    "not taken: that question is no longer open (answered elsewhere, or given up), "
    "or the answer is not one the page offers; nothing was done. Go back to the page."
)


class PageGuard:
    """The checks every request passes: ``Host``, ``Origin``, the token (cookie, or the
    address on first load), and for an answer the form token."""

    def __init__(self, port: int, token: str | None = None) -> None:
        self.port = port
        self.uid = os.getuid()
        self.host = f"127.0.0.1:{port}"
        self.origin = f"http://{self.host}"
        self.token = token or secrets.token_urlsafe(32)
        self.csrf = hmac.new(self.token.encode(), b"approvals-form", hashlib.sha256).hexdigest()

    @property
    def url(self) -> str:
        return f"{self.origin}/?token={self.token}"

    def stranger(self, request: Request) -> Response | None:
        """The refusal of a connection whose process is not this user's (or unknown)."""
        client = request.client
        owner = None if client is None else peer_uid((client.host, client.port), self._server)
        if owner == self.uid:
            return None
        return PlainTextResponse(
            f"refused: this page serves only the processes of uid {self.uid}", 403
        )

    @property
    def _server(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def refusal(self, request: Request) -> Response | None:
        """Why ``request`` is refused (None: it may go on)."""
        if request.headers.get("host") != self.host:
            return PlainTextResponse("refused: this page answers only at " + self.host, 421)
        origin = request.headers.get("origin")
        if origin is not None and origin != self.origin:
            return PlainTextResponse("refused: a request from another site", 403)
        if not self._holds_token(request.cookies.get(COOKIE)):
            return PlainTextResponse("refused: no valid token (open the address printed)", 403)
        return None

    def _holds_token(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.token.encode())

    def first_load(self, request: Request) -> Response | None:
        """The first load (the token in the address): the cookie set, and the page loaded
        again without the token in its address."""
        if request.headers.get("host") != self.host or "origin" in request.headers:
            return None
        if not self._holds_token(request.query_params.get("token")):
            return None
        response = RedirectResponse("/", 303)
        response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict", path="/")
        return _hardened(response, "")

    def form_refusal(self, request: Request, form: dict[str, str]) -> Response | None:
        if request.headers.get("origin") != self.origin:
            return PlainTextResponse("refused: an answer must come from this page", 403)
        if not hmac.compare_digest(form.get("csrf", "").encode(), self.csrf.encode()):
            return PlainTextResponse("refused: the form's token is missing or wrong", 403)
        return None


def _hardened(response: Response, nonce: str) -> Response:
    """No caching, no framing, no referrer to another site (the first address holds the
    token), and only this page's own nonce'd script and style."""
    own = f"'nonce-{nonce}'" if nonce else "'none'"
    response.headers["content-security-policy"] = (
        f"default-src 'none'; script-src {own}; style-src {own}; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    )
    response.headers["cache-control"] = "no-store"
    # same-origin, not no-referrer: under no-referrer a form's POST carries "Origin: null".
    response.headers["referrer-policy"] = "same-origin"
    response.headers["x-frame-options"] = "DENY"
    response.headers["x-content-type-options"] = "nosniff"
    return response


Handler = Callable[[Request], Awaitable[Response]]


def page_app(board: Board, guard: PageGuard) -> Starlette:
    """The page's routes, each behind ``guard``."""

    def guarded(handler: Handler) -> Handler:
        async def checked(request: Request) -> Response:
            stranger = guard.stranger(request)
            if stranger is not None:
                return _hardened(stranger, "")
            if request.url.path == "/" and request.method == "GET":
                first = guard.first_load(request)
                if first is not None:
                    return first
            refused = guard.refusal(request)
            if refused is not None:
                return _hardened(refused, "")
            return await handler(request)

        return checked

    async def index(request: Request) -> Response:
        _, pending, recent, notes = board.snapshot()
        nonce = secrets.token_urlsafe(16)
        shown = board_html(pending, recent, notes, guard.csrf, board.logged())
        html = page(shown, guard.csrf, nonce)
        return _hardened(Response(html, media_type="text/html"), nonce)

    async def fragment(request: Request) -> Response:
        _, pending, recent, notes = board.snapshot()
        shown = board_html(pending, recent, notes, guard.csrf, board.logged())
        return _hardened(Response(shown, 200, media_type="text/html"), "")

    async def answer(request: Request) -> Response:
        form = await _form(request)
        if form is None:
            return _hardened(PlainTextResponse("refused: form too large", 413), "")
        refused = guard.form_refusal(request, form)
        if refused is not None:
            return _hardened(refused, "")
        if not board.give(form.get("session", ""), form.get("id", ""), form.get("answer", "")):
            return _hardened(PlainTextResponse(NOT_OPEN, 409), "")
        return _hardened(RedirectResponse("/", 303), "")

    async def events(request: Request) -> Response:
        return _hardened(StreamingResponse(_changes(board), media_type="text/event-stream"), "")

    return Starlette(
        routes=[
            Route("/", guarded(index), methods=["GET"]),
            Route("/board", guarded(fragment), methods=["GET"]),
            Route("/events", guarded(events), methods=["GET"]),
            Route("/answer", guarded(answer), methods=["POST"]),
        ]
    )


async def _form(request: Request) -> dict[str, str] | None:
    """The urlencoded form of ``request`` (each field's first value); None when too large
    (or of too many fields)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            return None
    try:
        parsed = urllib.parse.parse_qs(body.decode(errors="replace"), max_num_fields=8)
    except ValueError:
        return None
    return {key: values[0] for key, values in parsed.items()}


async def _changes(board: Board) -> AsyncIterator[str]:
    """Server-sent events: ``board`` each time what it shows changed (the page then fetches
    it), a comment after a long quiet; until the page stops."""
    seen, quiet = -1, 0.0
    while not board.stopping:
        version = board.snapshot()[0]
        if version != seen:
            seen, quiet = version, 0.0
            yield f"event: board\ndata: {version}\n\n"
        elif quiet >= KEEPALIVE:
            quiet = 0.0
            yield ": still here\n\n"
        await asyncio.sleep(EVENT_POLL)
        quiet += EVENT_POLL


def serve_page(board: Board, sock: socket.socket, announce: Callable[[str], None]) -> None:
    """Serve the page for ``board`` on the listening ``sock`` (127.0.0.1) until interrupted;
    ``announce`` is told the page's address (with its token) once it is served."""
    import uvicorn

    port = sock.getsockname()[1]
    guard = PageGuard(port)
    config = uvicorn.Config(
        page_app(board, guard),
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    sessions = threading.Thread(target=board.run, name="approvals-sessions", daemon=True)
    sessions.start()
    announce(guard.url)
    try:
        server.run(sockets=[sock])
    finally:
        board.stop()
        sessions.join(5)
