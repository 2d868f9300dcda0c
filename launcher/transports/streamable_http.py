"""``ironcurtain run --http PORT``: the MCP endpoint as streamable HTTP on 127.0.0.1.

Served by uvicorn; each MCP session is the ``mcp`` SDK's streamable-HTTP server transport
(sessions, an event stream per request, the stream a client opens with GET for what nobody
asked). Each session gets its own relay and its own instances of the servers (a client's
subscriptions, log level and questions are its own), opened when its ``initialize`` arrives.

Checked here, on the request head, before any body is read and before a session is looked
at:

- ``Host`` names this loopback address and port (421 otherwise), and an ``Origin``, when
  sent, does too (403): a web page that rebinds a DNS name to 127.0.0.1 is refused;
- ``Authorization: Bearer TOKEN`` (401): there is no unauthenticated endpoint; in gateway
  mode the token is the caller's JWT (:mod:`launcher.transports.gateway_auth`), the request
  is its caller's, and a session serves only the caller that opened it (404 to another);
- the path is ``/mcp`` (404), the method POST, GET or DELETE (405);
- ``MCP-Protocol-Version``, when sent, is one this endpoint speaks (400);
- the body is at most ``BODY_LIMIT`` bytes (413), a session id is known (404).

At most ``max_sessions`` sessions are open (``MAX_SESSIONS`` unless the session says): a new
one ends the session unused longest that has no request being served (clients that go away
without DELETE leave theirs behind), and is refused (503) only when every one is busy.

A session no request has used for ``IDLE_TIMEOUT`` seconds (no call out, no GET stream
open) is ended, as is one the client DELETEs; its servers stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import uvicorn
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.transport_security import RequestBodyLimitMiddleware
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types import JSONRPCNotification, JSONRPCRequest, jsonrpc_message_adapter
from pydantic import ValidationError
from starlette.types import Message as AsgiMessage
from starlette.types import Receive, Scope, Send

from launcher.shared.jsonrpc import PROTOCOL_VERSIONS, STATELESS_VERSIONS, Message, error
from launcher.transports.http_bounds import bounded_protocol, quiet_logs
from launcher.transports.http_socket import listen_http
from launcher.transports.stateless_http import CALLER, Opener, Relayed, StatelessClients

if TYPE_CHECKING:
    from launcher.shared.callers import Caller
    from launcher.transports.gateway_auth import Gatekeeper

BODY_LIMIT = 64 * 1024 * 1024
MAX_SESSIONS = 16  # each has its own servers
IDLE_TIMEOUT = 30 * 60.0
KEEP_ALIVE = 5  # seconds an idle connection is kept open
REQUEST_CANCELLED = -32800  # ends the event stream of a request the client cancelled
ONLY_POST = "a request of the stateless protocol is a POST"


Attached = Relayed  # one client session's relay, as the transport sees it


class HttpEndpoint:
    def __init__(
        self,
        port: int,
        token: str | None,
        opener: Opener,
        say: Callable[[str], None],
        gatekeeper: Gatekeeper | None = None,
        max_sessions: int = MAX_SESSIONS,
    ):
        """``token``: the bearer token every request sends; or, with ``gatekeeper`` (gateway
        mode), each request's caller is who its JWT names, and no token is taken;
        ``max_sessions``: sessions open at once (and, in gateway mode, callers whose
        requests of the stateless protocol are served at once)."""
        self.port = port
        self.token = token
        self.gatekeeper = gatekeeper
        self._opener = opener
        self.say = say
        self.sessions: dict[str, ClientStream] = {}
        self.max_sessions = max_sessions
        self.stateless = StatelessClients(opener, max_sessions, say)
        self._server: uvicorn.Server | None = None
        self._socket: socket.socket | None = None
        self._limited = RequestBodyLimitMiddleware(self._route, BODY_LIMIT)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self, sock: socket.socket | None = None) -> None:
        """Serve on ``sock`` (listening already: the session's, made before any server
        started), or listen on 127.0.0.1:port (raises StartupError when that is not
        possible)."""
        quiet_logs(self.say)
        if sock is None:
            sock = listen_http(self.port)
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
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await _plain(send, *refusal)
            return
        if self.gatekeeper is not None:
            caller = await self.gatekeeper.admit(scope, headers, send)
            if caller is None:  # refused, or the metadata a client finds its provider by
                return
            scope[CALLER] = caller
            refusal = self._refusal_of_request(scope, headers)
            if refusal is not None:
                await _plain(send, *refusal)
                return
        await self._limited(scope, receive, send)

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> tuple[int, str] | None:
        """Why this request may not be served, from its head alone."""
        allowed_hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}
        if headers.get("host") not in allowed_hosts:
            return 421, "wrong Host (this endpoint answers only to 127.0.0.1 and localhost)"
        origin = headers.get("origin")
        if origin is not None and origin not in {f"http://{h}" for h in allowed_hosts}:
            return 403, "cross-origin request refused"
        if self.gatekeeper is not None:
            return None  # the caller's token next, then the request's own checks
        given = headers.get("authorization", "")
        if self.token is None or not (
            given.startswith("Bearer ")
            and hmac.compare_digest(given[7:].encode(), self.token.encode())
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
            if client is None or client.owner != _owner(scope.get(CALLER)):
                await _json_error(send, 404, -32001, "session not found (it ended or expired)")
                return
            await client.serve(scope, receive, send)
            if client.transport.is_terminated:
                await client.end()
            return
        if scope["method"] != "POST":
            await _json_error(send, 400, -32600, "missing Mcp-Session-Id: initialize first")
            return
        if len(self.sessions) >= self.max_sessions and not await self._evict():
            await _json_error(send, 503, -32603, f"too many open sessions ({self.max_sessions})")
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

    async def _evict(self) -> bool:
        """Make room for a new session by ending the one unused longest, if one has no
        request being served (a client that went away without DELETE leaves its session
        behind; it would answer 404 and initialize again)."""
        idle = [c for c in self.sessions.values() if not c.busy]
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


class ClientStream:
    """One MCP session over HTTP: the relay's upstream. What the relay sends goes out in
    order through one queue; an answer, and whatever belongs to a request (``related``),
    on that request's event stream, the rest on the client's GET stream."""

    def __init__(self, endpoint: HttpEndpoint, caller: Caller | None = None) -> None:
        self.endpoint = endpoint
        self.id = uuid.uuid4().hex
        self.owner = _owner(caller)  # who opened it (gateway mode): the only one it serves
        self.caller = caller  # as its latest token says
        self._audited = {"httpSession": self.id, **({"caller": caller.audited} if caller else {})}
        self.transport = StreamableHTTPServerTransport(self.id, idle_timeout=IDLE_TIMEOUT)
        self.attached: Attached | None = None
        self.initialized = False
        self._outbox: asyncio.Queue[tuple[Message, str | int | None]] = asyncio.Queue()
        self._in_flight: set[str | int] = set()  # the client's requests not yet answered
        self._connected = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._ended = False
        self.busy = 0  # requests being served, an open GET stream among them
        self.last_used = time.monotonic()

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.caller = scope.get(CALLER, self.caller)  # what it may do: as this token says
        self.busy += 1
        try:
            await self.transport.handle_request(scope, receive, send)
        finally:
            self.busy -= 1
            self.last_used = time.monotonic()

    async def open(self) -> None:
        self._task = asyncio.create_task(self._run())
        await self._connected.wait()

    async def end(self) -> None:
        if self._ended:
            return
        self._ended = True
        self.endpoint.forget(self)
        with contextlib.suppress(Exception):
            await self.transport.terminate()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.attached is not None:
            attached, self.attached = self.attached, None
            await attached.close()

    # -- Upstream --------------------------------------------------------------------------

    def deliver(self, message: Message, related: str | int | None = None) -> None:
        key = message.get("id")
        if "method" not in message and isinstance(key, str | int):
            if key not in self._in_flight:
                return  # the client cancelled it: its stream was ended already
            self._in_flight.discard(key)
        self._outbox.put_nowait((message, related))

    def backlog(self) -> int:
        """Roughly the bytes waiting to go out (a message counts 1 KiB)."""
        return self._outbox.qsize() * 1024

    def audit_fields(self, entry: Mapping[str, Any]) -> Mapping[str, object]:
        """What each audit entry of this session adds: the session, and who opened it."""
        return self._audited

    # -- the session's two directions ------------------------------------------------------

    async def _run(self) -> None:
        try:
            async with self.transport.connect() as (read, write):
                self._connected.set()
                pump = asyncio.create_task(self._pump(write))
                try:
                    idle = self.transport.idle_scope or anyio.CancelScope()
                    with idle:
                        async for item in read:
                            if not isinstance(item, Exception):
                                await self._take(item.message)
                    if idle.cancelled_caught:
                        self.endpoint.say(f"http session {self.id[:8]} ended: idle")
                finally:
                    pump.cancel()
                    await asyncio.gather(pump, return_exceptions=True)
        finally:
            self._connected.set()
            if not self._ended:
                asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(self.end()))

    async def _take(self, message: Any) -> None:
        """One message from the client, handed to the relay as JSON text."""
        is_request = isinstance(message, JSONRPCRequest)
        if self.attached is None:
            if not (is_request and message.method == "initialize"):
                if is_request:
                    self._in_flight.add(message.id)
                    self.deliver(error(message.id, -32600, "initialize first"))
                return
            try:
                self.attached = await self.endpoint.attach(self)
            except Exception as exc:
                # No session comes of it: from now on its id is not found, while this
                # request still gets its answer.
                self.endpoint.forget(self)
                self._in_flight.add(message.id)
                self.deliver(error(message.id, -32603, f"cannot start the servers: {exc}"))
                return
            self.initialized = True
        if is_request:
            self._in_flight.add(message.id)
        self.attached.caller = self.caller
        self.attached.feed(message.model_dump_json(by_alias=True, exclude_unset=True).encode())
        if isinstance(message, JSONRPCNotification) and message.method == (
            "notifications/cancelled"
        ):
            cancelled = (message.params or {}).get("requestId")
            if isinstance(cancelled, str | int) and cancelled in self._in_flight:
                # Nothing more is sent for it; its event stream is ended so the client's
                # POST does not hang.
                self._in_flight.discard(cancelled)
                self._outbox.put_nowait((error(cancelled, REQUEST_CANCELLED, "cancelled"), None))

    async def _pump(self, write: Any) -> None:
        while True:
            message, related = await self._outbox.get()
            try:
                parsed = jsonrpc_message_adapter.validate_python(message, by_name=False)
            except ValidationError as exc:
                self.endpoint.say(f"http: a message could not be sent: {exc.errors()[0]['msg']}")
                continue
            metadata = None
            if related is not None and "method" in message:
                metadata = ServerMessageMetadata(related_request_id=related)
            await write.send(SessionMessage(parsed, metadata=metadata))


def _owner(caller: Caller | None) -> tuple[str, str] | None:
    """Who a session belongs to: its caller, whatever permissions its next token carries."""
    return caller.key if caller is not None else None


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
