"""One MCP session of the handshake era over streamable HTTP (:class:`ClientStream`): the
mcp SDK's server transport for it, and the relay's upstream; what the relay sends goes out
in order through one queue. A session is its caller's in gateway mode (:func:`owner`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.shared.message import ServerMessageMetadata, SessionMessage
from mcp_types import JSONRPCNotification, JSONRPCRequest, jsonrpc_message_adapter
from pydantic import ValidationError
from starlette.types import Receive, Scope, Send

from launcher.shared.error_codes import INTERNAL_ERROR, INVALID_REQUEST, REQUEST_CANCELLED
from launcher.shared.jsonrpc import Message, error
from launcher.transports.http.stateless_requests import CALLER, Relayed

if TYPE_CHECKING:
    from launcher.shared.caller_identity import Caller

IDLE_TIMEOUT = 30 * 60.0

Attached = Relayed  # one client session's relay, as the transport sees it


class Endpoint(Protocol):
    """What a session asks of the endpoint that serves it."""

    def say(self, text: str) -> None: ...

    async def attach(self, client: ClientStream) -> Attached: ...

    def forget(self, client: ClientStream) -> None: ...


class ClientStream:
    """One MCP session over HTTP: the relay's upstream. What the relay sends goes out in
    order through one queue; an answer, and whatever belongs to a request (``related``),
    on that request's event stream, the rest on the client's GET stream."""

    def __init__(self, endpoint: Endpoint, caller: Caller | None = None) -> None:
        self.endpoint = endpoint
        self.id = uuid.uuid4().hex
        self.owner = owner(caller)  # who opened it (gateway mode): the only one it serves
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
        # Its initialize answered: until then it is opening, never idle (a client whose
        # servers are starting is not one that went away).
        self.started = False
        self._initialize: object = None  # the id of its initialize request

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
        if "method" not in message and key == self._initialize and self.attached is not None:
            self.started = True
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
                    self.deliver(error(message.id, INVALID_REQUEST, "initialize first"))
                return
            self._initialize = message.id
            try:
                self.attached = await self.endpoint.attach(self)
            except Exception as exc:
                # No session comes of it: from now on its id is not found, while this
                # request still gets its answer.
                self.endpoint.forget(self)
                self._in_flight.add(message.id)
                self.deliver(error(message.id, INTERNAL_ERROR, f"cannot start the servers: {exc}"))
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


def owner(caller: Caller | None) -> tuple[str, str] | None:
    """Who a session belongs to: its caller, whatever permissions its next token carries."""
    return caller.key if caller is not None else None
