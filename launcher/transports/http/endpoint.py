"""``ironcurtain run --http PORT``: the MCP endpoint as streamable HTTP, on 127.0.0.1 unless
a public URL says where clients reach it (:mod:`launcher.transports.http.public_address`).

Served by uvicorn; each MCP session is the ``mcp`` SDK's streamable-HTTP server transport
(sessions, an event stream per request, the stream a client opens with GET for what nobody
asked). Each session gets its own relay and its own instances of the servers (a client's
subscriptions, log level and questions are its own), opened when its ``initialize`` arrives.

Checked here, on the request head, before any body is read and before a session is looked
at:

- ``Host`` names this loopback address and port, or the public URL's host (421 otherwise),
  and an ``Origin``, when sent, does too (403): a web page that rebinds a DNS name to the
  endpoint's address is refused;
- ``Authorization: Bearer TOKEN`` (401): there is no unauthenticated endpoint; in gateway
  mode the token is the caller's JWT (:mod:`launcher.transports.http.gateway.gatekeeper`), the
  request is its caller's, and a session serves only the caller that opened it (404 to another);
- the path is ``/mcp`` (404), the method POST, GET or DELETE (405);
- ``MCP-Protocol-Version``, when sent, is one this endpoint speaks (400);
- the body is at most ``BODY_LIMIT`` bytes (413), a session id is known (404).

At most ``max_sessions`` sessions are open (``MAX_SESSIONS`` unless the session says): a new
one ends the session unused longest that has no request being served (clients that go away
without DELETE leave theirs behind), and is refused (503) only when every one is busy. In
gateway mode a caller holds at most a quarter of them: its new session past that ends its
own session unused longest, or is refused (503) when every one of its own is busy, so one
caller cannot keep the others out; nor can it by its requests: at most ``CALLER_REQUESTS``
of its own are served at once (429 beyond), a quarter of the connections the endpoint
holds.

The health probes (:mod:`launcher.transports.http.health`) are answered before all of
these, for any ``Host`` and without a token: they tell nothing but whether it can serve.

A session no request has used for ``IDLE_TIMEOUT`` seconds (no call out, no GET stream
open) is ended, as is one the client DELETEs; its servers stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import secrets
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

import uvicorn
from mcp.server.transport_security import RequestBodyLimitMiddleware
from starlette.types import Message as AsgiMessage
from starlette.types import Receive, Scope, Send

from launcher.shared.error_codes import INTERNAL_ERROR, INVALID_REQUEST, SESSION_NOT_FOUND
from launcher.shared.jsonrpc import PROTOCOL_VERSIONS, STATELESS_VERSIONS, error
from launcher.shared_state.store import SharedState, StateLost
from launcher.transports.http.bearer_token import bearer
from launcher.transports.http.bounds import MAX_CONNECTIONS, bounded_protocol, quiet_logs
from launcher.transports.http.client_stream import Attached, ClientStream, owner
from launcher.transports.http.gateway.admission import giving_way, parted, party_room
from launcher.transports.http.health import PATHS as HEALTH_PATHS
from launcher.transports.http.health import Health
from launcher.transports.http.listener import listen_http
from launcher.transports.http.public_address import LOOPBACK, Reached
from launcher.transports.http.stateless_requests import CALLER, Opener, StatelessClients

if TYPE_CHECKING:
    from launcher.shared.caller_identity import Caller
    from launcher.transports.http.gateway.gatekeeper import Gatekeeper

BODY_LIMIT = 64 * 1024 * 1024
MAX_SESSIONS = 16  # each has its own servers
CALLER_SHARE = 4  # in gateway mode a caller holds at most 1/CALLER_SHARE of the sessions
CALLER_REQUESTS = MAX_CONNECTIONS // CALLER_SHARE  # ... and of the requests being served
PARTY_REQUESTS = MAX_CONNECTIONS - CALLER_REQUESTS  # what one party's callers hold together
KEEP_ALIVE = 5  # seconds an idle connection is kept open
ONLY_POST = "a request of the stateless protocol is a POST"
_SESSION_GONE = "session not found (it ended or expired)"
_NO_SESSION = "missing Mcp-Session-Id: initialize first"


class HttpEndpoint:
    def __init__(
        self,
        port: int,
        token: str | None,
        opener: Opener,
        say: Callable[[str], None],
        gatekeeper: Gatekeeper | None = None,
        max_sessions: int = MAX_SESSIONS,
        state: SharedState | None = None,
        *,
        bind: str = LOOPBACK,
        public_url: str | None = None,
    ):
        """``token``: the bearer token every request sends; or, with ``gatekeeper`` (gateway
        mode), each request's caller is who its JWT names, and no token is taken;
        ``max_sessions``: sessions open at once (and, in gateway mode, callers whose
        requests of the stateless protocol are served at once); ``state``: where the
        callers' requests are counted with other instances' (None: here alone);
        ``bind``: the address to listen on; ``public_url``: where clients reach the endpoint
        (a URL :func:`~launcher.transports.http.public_address.public_url_problem`
        accepts), as its ``Host`` checks and what it says about itself name it."""
        self.state = state
        self.health = Health(state)
        self.bind, self.public_url = bind, public_url
        self.port = port
        self.token = token
        self.gatekeeper = gatekeeper
        self._opener = opener
        self.say = say
        self.sessions: dict[str, ClientStream] = {}
        # Requests being served, by caller (its key) and by party.
        self._out: dict[tuple[str, str], int] = {}
        self.max_sessions = max_sessions
        self.stateless = StatelessClients(opener, max_sessions, say)
        self._server: uvicorn.Server | None = None
        self._socket: socket.socket | None = None
        self._limited = RequestBodyLimitMiddleware(self._route, BODY_LIMIT)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/mcp"

    @property
    def reached(self) -> Reached:
        """How clients reach the endpoint (the port known once it listens)."""
        return Reached(self.port, self.public_url)

    async def start(self, sock: socket.socket | None = None) -> None:
        """Serve on ``sock`` (listening already: the session's, made before any server
        started), or listen on 127.0.0.1:port (raises StartupError when that is not
        possible)."""
        quiet_logs(self.say)
        if sock is None:
            sock = listen_http(self.port, self.bind)
        self._socket = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self,
            lifespan="off",
            interface="asgi3",
            http=bounded_protocol(),
            log_config=None,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            date_header=False,
            timeout_keep_alive=KEEP_ALIVE,
            timeout_graceful_shutdown=1,
            h11_max_incomplete_event_size=64 * 1024,
        )
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[sock])
        self._server = server

    async def stop(self) -> None:
        self.health.stopping = True
        await asyncio.gather(
            *(c.end() for c in list(self.sessions.values())),
            self.stateless.close(),
            return_exceptions=True,
        )
        if self._server is not None:
            self._server.force_exit = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.shutdown(), 3)
        if self._socket is not None:
            self._socket.close()

    # -- ASGI ------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers: dict[str, str] = {}
        for key, value in scope["headers"]:
            headers[key.decode("latin-1").lower()] = value.decode("latin-1")
        if scope["path"] in HEALTH_PATHS:
            await self.health.answer(scope["method"], scope["path"], send)
            return
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await _plain(send, *refusal)
            return
        if self.gatekeeper is not None:
            caller = await self.gatekeeper.admit(scope, headers, send, self.reached.base)
            if caller is None:  # refused, or the metadata a client finds its provider by
                return
            scope[CALLER] = caller
            refusal = self._refusal_of_request(scope, headers)
            if refusal is not None:
                await _plain(send, *refusal)
                return
            # No caller holds more than its share of the connections with requests out, nor
            # one party (however many subjects it has) more than all but a caller's share.
            counted: list[tuple[str, str, int]] = [
                ("caller", "\0".join(caller.key), CALLER_REQUESTS),
                ("party", caller.party, PARTY_REQUESTS),
            ]
            refused, give_back = self._places(counted)
            if refused is not None:
                await _json_error(send, 429, INTERNAL_ERROR, refused)
                return
            try:
                await self._limited(scope, receive, send)
            finally:
                give_back()
            return
        await self._limited(scope, receive, send)

    def _places(self, counted: list[tuple[str, str, int]]) -> tuple[str | None, Callable[[], None]]:
        """A place for one request among those of its caller and of its party (``counted``:
        what, whose, how many at most): why there is none, or how to give it back. Counted
        here, and with the other instances when they share a state: either count full
        refuses (so a shared state lost or emptied never gives a caller more here)."""
        for what, key, most in counted:
            if self._out.get((what, key), 0) >= most:
                return f"too many requests of this {what} at once ({most})", _nothing
        shared_back = _nothing
        if self.state is not None and self.state.shared:
            refused, shared_back = _shared_places(self.state, counted)
            if refused is not None:
                return refused, _nothing
        for what, key, _ in counted:
            self._out[what, key] = self._out.get((what, key), 0) + 1

        def give_back() -> None:
            self._give_back(counted)
            shared_back()

        return None, give_back

    def _give_back(self, counted: list[tuple[str, str, int]]) -> None:
        for what, key, _ in counted:
            self._out[what, key] -= 1
            if not self._out[what, key]:
                del self._out[what, key]

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> tuple[int, str] | None:
        """Why this request may not be served, from its head alone."""
        reached = self.reached
        if not reached.accepts(headers.get("host")):
            names = "its public URL's host, 127.0.0.1 and localhost"
            return 421, f"wrong Host (this endpoint answers only to {names})"
        origin = headers.get("origin")
        if origin is not None and origin.lower() not in reached.origins():
            return 403, "cross-origin request refused"
        if self.gatekeeper is not None:
            return None  # the caller's token next, then the request's own checks
        given = bearer(headers.get("authorization", ""))
        if self.token is None or not (
            given and hmac.compare_digest(given.encode(), self.token.encode())
        ):
            return 401, "missing or wrong bearer token"
        return self._refusal_of_request(scope, headers)

    def _refusal_of_request(self, scope: Scope, headers: dict[str, str]) -> tuple[int, str] | None:
        """Why this request may not be served, from its path, method and version."""
        if scope["path"] != "/mcp":
            return 404, "the endpoint is /mcp"
        if scope["method"] not in ("POST", "GET", "DELETE"):
            return 405, "POST, GET or DELETE"
        version = headers.get("mcp-protocol-version")
        if [k for k, _ in scope["headers"] if k.lower() == b"mcp-protocol-version"][1:]:
            return 400, "the MCP-Protocol-Version header is repeated"
        if version in STATELESS_VERSIONS and scope["method"] != "POST":
            return 405, ONLY_POST
        spoken_here = (*PROTOCOL_VERSIONS, *STATELESS_VERSIONS)
        if version is not None and version not in spoken_here and scope["method"] != "POST":
            spoken = ", ".join((*PROTOCOL_VERSIONS, *STATELESS_VERSIONS))
            return (
                400,
                f"unsupported MCP-Protocol-Version {version!r}; this endpoint speaks {spoken}",
            )
        return None

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        version = _header(scope, b"mcp-protocol-version")
        if version in STATELESS_VERSIONS:
            await self.stateless.serve(scope, receive, send)
            return
        if version is not None and version not in PROTOCOL_VERSIONS:  # a POST: the era's error
            await self.stateless.unsupported(receive, send, version)
            return
        sid = _header(scope, b"mcp-session-id")
        if sid is not None:
            client = self.sessions.get(sid)
            # A session is its caller's: another caller's token on it finds nothing there.
            if client is None or client.owner != owner(scope.get(CALLER)):
                await _json_error(send, 404, SESSION_NOT_FOUND, _SESSION_GONE)
                return
            await client.serve(scope, receive, send)
            if client.transport.is_terminated:
                await client.end()
            return
        if scope["method"] != "POST":
            await _json_error(send, 400, INVALID_REQUEST, _NO_SESSION)
            return
        caller = owner(scope.get(CALLER))
        if caller is not None:  # gateway mode: no caller takes more than its share
            share = max(1, self.max_sessions // CALLER_SHARE)
            own = [c for c in self.sessions.values() if c.owner == caller]
            if len(own) >= share and not await self._evict(own):
                text = f"too many open sessions of this caller ({share})"
                await _json_error(send, 503, INTERNAL_ERROR, text)
                return
        if caller is not None and not await self._party_room(scope[CALLER]):
            cap = party_room(self.max_sessions)
            text = f"too many open sessions of this caller's party ({cap})"
            await _json_error(send, 503, INTERNAL_ERROR, text)
            return
        if len(self.sessions) >= self.max_sessions and not await self._evict(
            party=party_of(scope.get(CALLER))
        ):
            await _json_error(
                send, 503, INTERNAL_ERROR, f"too many open sessions ({self.max_sessions})"
            )
            return
        client = ClientStream(self, scope.get(CALLER))
        self.sessions[client.id] = client
        await client.open()
        status: list[int] = []

        async def noting(message: AsgiMessage) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        try:
            await client.serve(scope, receive, noting)
        finally:
            # Only an initialize opens a session; whatever else came without an id did not.
            if not client.initialized or not status or status[0] >= 400:
                await client.end()

    async def _party_room(self, caller: Caller) -> bool:
        """Whether ``caller``'s party may open another session: it holds less than
        :func:`party_room` of them, or one of its own that is idle made room."""
        if not parted(caller.issuer, caller.party):
            return True
        ours = [c for c in self.sessions.values() if party_of(c.caller) == caller.party]
        return len(ours) < party_room(self.max_sessions) or await self._evict(ours)

    async def _evict(self, among: list[ClientStream] | None = None, party: str = "") -> bool:
        """Make room for a new session by ending the one unused longest (of ``among``,
        else of those of the newcomer's ``party`` and of the parties holding more than their
        share), if one has no request being served and has answered its ``initialize`` (a
        client that went away without DELETE leaves its session behind; it would answer
        404 and initialize again)."""
        candidates = list(self.sessions.values()) if among is None else among
        if among is None:
            held = [party_of(c.caller) for c in candidates]
            parties = giving_way(party, held, self.max_sessions)
            candidates = [c for c, p in zip(candidates, held, strict=True) if p in parties]
        idle = [c for c in candidates if not c.busy and c.started]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c.last_used)
        self.say(f"http session {oldest.id[:8]} ended: the oldest idle one, for a new client")
        await oldest.end()
        return True

    async def attach(self, client: ClientStream) -> Attached:
        return await self._opener(client, client.caller)

    def forget(self, client: ClientStream) -> None:
        self.sessions.pop(client.id, None)


def party_of(caller: Caller | None) -> str:
    """The party a session's caller belongs to ('' without callers: one party)."""
    return caller.party if caller is not None else ""


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


async def _plain(send: Send, status: int, text: str) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8")]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="ironcurtain"'))
    if status == 405:
        headers.append((b"allow", b"POST" if text == ONLY_POST else b"GET, POST, DELETE"))
    body = text.encode()
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _json_error(send: Send, status: int, code: int, text: str) -> None:
    body = json.dumps(error(None, code, text)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _nothing() -> None:
    return None


def _shared_places(
    shared: SharedState, counted: list[tuple[str, str, int]]
) -> tuple[str | None, Callable[[], None]]:
    """:meth:`HttpEndpoint._places` among the instances (while the state is lost: nothing
    refused, nothing to give back; this instance's own count holds meanwhile)."""
    token, taken = secrets.token_hex(8), list[str]()
    try:
        for what, key, most in counted:
            name = f"{what}:{hashlib.sha256(key.encode()).hexdigest()[:32]}"
            if not shared.enter(name, token, most):
                _leave(shared, taken, token)
                return f"too many requests of this {what} at once ({most})", _nothing
            taken.append(name)
    except StateLost:
        _leave(shared, taken, token)
        return None, _nothing
    return None, lambda: _leave(shared, taken, token)


def _leave(state: SharedState, names: list[str], token: str) -> None:
    """``token``'s places of ``names`` given back (a store lost meanwhile lets them lapse)."""
    for name in names:
        try:
            state.leave(name, token)
        except StateLost:
            return
