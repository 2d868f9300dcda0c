"""Requests of the stateless era (MCP 2026-07-28) over HTTP: a POST whose
``MCP-Protocol-Version`` header names a version of that era carries all it needs, needs no
session, and is answered on its own response (``application/json``).

Such requests are served by one relay over one set of the session's servers, opened with
the first; in gateway mode, one for each caller (:mod:`launcher.transports.http.caller_relays`).
Nothing a client says lives between its requests, so any instance of ironcurtain behind a
load balancer could answer the next one. The client's request ids are replaced by
ironcurtain's own on the way in (two clients may both send id 1) and given back on the way
out. A client that goes away before its answer cancels the request.

A ``subscriptions/listen`` request is answered with an event stream (``text/event-stream``):
its acknowledgment first, then the notifications it asked for, each with the client's own id
as its subscription id, until the client closes it (which ends the listen) or the session
ends (its answer, the last event). So is a request whose ``_meta`` asks for progress, from a
client that takes an event stream: its progress, then its answer. A client that does not
read its stream loses notifications past ``STREAM_BACKLOG`` rather than holding them
without limit.

Checked before the relay sees a request, as the era's transport asks: the headers say what
the body does (``MCP-Protocol-Version`` its ``_meta`` version, ``Mcp-Method`` its method,
``Mcp-Name`` the tool or prompt name or the resource URI, plain or as
``=?base64?…?=``); a mismatch is ``-32020``, answered 400 as the era's errors about the
request's form are; a method that does not exist is 404. A ``tools/call``'s
``Mcp-Param-*`` headers are checked against its arguments by the tool's schema
(:mod:`launcher.shared.param_headers`), once the caller's relay is taken.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import itertools
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.types import Receive, Scope, Send

from launcher.shared import param_headers
from launcher.shared.error_codes import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_VERSION,
)
from launcher.shared.jsonrpc import (
    FOR_REQUEST,
    META_CAPABILITIES,
    META_VERSION,
    STATELESS_VERSIONS,
    Message,
    error,
    loads,
)
from launcher.transports.http.caller_relays import (
    CallerRelays,
    Held,
    Opener,
    Relayed,
    TooMany,
    Upstream,
)

if TYPE_CHECKING:
    from launcher.shared.caller_identity import Caller

__all__ = ["CALLER", "Opener", "Relayed", "StatelessClients", "Upstream"]

# Where a request's caller is kept in its ASGI scope, once its token made one (gateway mode).
CALLER = "ironcurtain.caller"
LISTEN = "subscriptions/listen"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
STREAM_BACKLOG = 1024  # notifications held for one listen's stream
CONTINUED = 4096  # callers kept for calls that go on as retries
# The era's errors about a request's form, answered 400 (a method that is not there, 404).
BAD_REQUEST = frozenset(
    {HEADER_MISMATCH, MISSING_CLIENT_CAPABILITY, UNSUPPORTED_VERSION, INVALID_REQUEST, PARSE_ERROR}
)
_NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
_CHECKED_HEADERS = ("mcp-protocol-version", "mcp-method", "mcp-name")


class StatelessClients:
    """The stateless era's requests over HTTP: the upstream of the relay that serves them
    (in gateway mode, of each caller's)."""

    def __init__(self, opener: Opener, max_callers: int = 16, say: Callable[[str], None] = print):
        self.relays = CallerRelays(opener, self, max_callers, say)
        self._ids = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[Message]] = {}
        self._streams: dict[str, asyncio.Queue[Message]] = {}  # listens, by their ids
        # What the audit entries of each request being served add (its client's own id, its
        # caller in gateway mode); and those of each answered input_required, whose call goes
        # on as a retry (the most recent CONTINUED of them).
        self._callers: dict[str, dict[str, object]] = {}
        self._continued: dict[str, Mapping[str, object]] = {}

    # -- Upstream --------------------------------------------------------------------------

    def deliver(self, message: Message, related: str | int | None = None) -> None:
        """An answer goes to the request waiting for it; nothing else is sent (a stateless
        request's answer is its whole response)."""
        key = message.get("id") if "method" not in message else related
        stream = self._streams.get(key) if isinstance(key, str) else None
        if stream is not None:  # a stream's: what it is told goes on it
            if stream.full():
                if "method" in message:
                    return  # a notification past what is held for a slow reader: dropped
                with contextlib.suppress(asyncio.QueueEmpty):
                    stream.get_nowait()  # the oldest notification, so the answer is never lost
            stream.put_nowait(message)
            return
        future = self._waiting.pop(key, None) if isinstance(key, str) else None
        if "method" not in message and future is not None and not future.done():
            future.set_result(message)

    def backlog(self) -> int:
        return 0

    def audit_fields(self, entry: Mapping[str, Any]) -> Mapping[str, object]:
        """The caller of the request ``entry`` is about (none: no caller source)."""
        # A server's question is its caller's whose request it was asked during (the id the
        # server gave it is the server's to choose); anything else, by its own id.
        asked = entry.get("direction") == "server-to-client"
        rid = entry.get("callRequestId") if asked else entry.get("requestId")
        if isinstance(rid, str) and FOR_REQUEST in rid:  # made for a listen: the listen's
            rid = rid.partition(FOR_REQUEST)[0]
        return self._callers.get(rid) or self._continued.get(rid, {})  # type: ignore[arg-type]

    # -- HTTP ------------------------------------------------------------------------------

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _body(receive)
        try:
            message = loads(body)
        except (ValueError, RecursionError):
            await _answer(send, error(None, PARSE_ERROR, "parse error: not JSON"))
            return
        refused = _refused(scope, message)
        if refused is not None:
            answer, status = refused
            if answer is None:  # a notification: nothing of this era's is one to act on
                await _status(send, 202)
            else:
                await _answer(send, answer, status)
            return
        rid = message["id"]
        caller: Caller | None = scope.get(CALLER)
        held = await self._take(caller, rid, send)
        if held is None:
            return
        relay = held.relay
        relay.caller = caller  # what it may do: as its latest token says
        # The tool's own headers, against the schema this caller is shown (after its token
        # was checked and its relay taken).
        unlike = _params_unlike(scope, relay, message)
        if unlike is not None:
            self.relays.done(held)
            await _answer(send, error(rid, HEADER_MISMATCH, unlike))
            return
        internal = f"http-{next(self._ids)}"
        # What its audit entries add: the client's own id for it (ironcurtain's stands in
        # requestId), and the caller, in gateway mode.
        self._callers[internal] = {"clientRequestId": message["id"]}
        if caller is not None:
            self._callers[internal]["caller"] = caller.audited
        try:
            if message["method"] == LISTEN or _wants_progress(scope, message):
                answer = await self._streamed(relay, message, internal, receive, send)
            else:
                answer = await self._answered(relay, message, internal, receive)
                if answer is not None:
                    await _answer(send, {**answer, "id": message["id"]})
        finally:
            who = self._callers.pop(internal, None)
            self.relays.done(held)
        self._continue(internal, who, message, answer)

    async def _take(self, caller: Caller | None, rid: str | int, send: Send) -> Held | None:
        """The caller's relay taken (its servers started when they are not yet); None when
        that cannot be, the client answered why."""
        try:
            return await self.relays.take(caller)
        except TooMany as exc:
            await _answer(send, error(rid, INTERNAL_ERROR, str(exc)), 503)
            return None
        except Exception as exc:  # the servers cannot be started (now, or again yet)
            await _answer(send, error(rid, INTERNAL_ERROR, f"cannot start the servers: {exc}"), 500)
            return None

    def _continue(
        self,
        internal: str,
        who: dict[str, object] | None,
        message: Message,
        answer: Message | None,
    ) -> None:
        """A request that goes on past its answer (a listen, a retry with requestState) keeps
        what its audit entries add until its last one is written."""
        result = answer.get("result") if answer is not None else None
        goes_on = message["method"] == LISTEN  # its unsubscribes come after its stream
        if who is not None and (goes_on or (isinstance(result, dict) and "requestState" in result)):
            self._continued[internal] = who  # its entries are written when the retry ends
            while len(self._continued) > CONTINUED:
                del self._continued[next(iter(self._continued))]

    async def _answered(
        self, relay: Relayed, message: Message, internal: str, receive: Receive
    ) -> Message | None:
        """The answer to a request; None when the client went away first (which cancels
        the request)."""
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._waiting[internal] = future
        relay.feed(json.dumps({**message, "id": internal}).encode())
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            either: set[asyncio.Future[Any]] = {future, gone}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if future.done():
            return future.result()
        self._waiting.pop(internal, None)
        _cancel(relay, internal, "the client closed its request")
        return None

    async def _streamed(
        self, relay: Relayed, message: Message, internal: str, receive: Receive, send: Send
    ) -> Message | None:
        """A request answered on an event stream: a listen (its acknowledgment, then what
        it asked to hear, until either side ends it), or a request whose progress the
        client asked for (its progress, then its answer). An answer before anything else
        is a plain one. The answer, or None when the client closed the stream first (which
        ends the listen, or cancels the request)."""
        stream: asyncio.Queue[Message] = asyncio.Queue(STREAM_BACKLOG)
        self._streams[internal] = stream
        relay.feed(json.dumps({**message, "id": internal}).encode())
        gone = asyncio.ensure_future(_disconnected(receive))
        started = False
        try:
            while True:
                got = asyncio.ensure_future(stream.get())
                await asyncio.wait({got, gone}, return_when=asyncio.FIRST_COMPLETED)
                if not got.done():
                    got.cancel()
                    break  # the client closed its stream
                item = _as_client(got.result(), internal, message["id"])
                answer = "method" not in item
                if not started and answer:  # a plain answer, not a stream
                    await _answer(send, item)
                    return got.result()
                if not started:
                    started = True
                    headers = [
                        (b"content-type", b"text/event-stream"),
                        (b"cache-control", b"no-cache"),
                    ]
                    await send({"type": "http.response.start", "status": 200, "headers": headers})
                event = b"event: message\ndata: " + json.dumps(item).encode() + b"\n\n"
                await send({"type": "http.response.body", "body": event, "more_body": not answer})
                if answer:
                    return got.result()
        finally:
            gone.cancel()
            self._streams.pop(internal, None)
        _cancel(relay, internal, "the client closed its stream")
        if started:
            with contextlib.suppress(Exception):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        return None

    async def unsupported(self, receive: Receive, send: Send, version: str) -> None:
        """A POST naming a protocol version this endpoint does not speak: the era's error,
        with the request's own id when it has one."""
        try:
            message = loads(await _body(receive))
        except (ValueError, RecursionError):
            message = None
        rid = message.get("id") if isinstance(message, dict) else None
        data = {"supported": list(STATELESS_VERSIONS), "requested": version}
        refused = error(rid, UNSUPPORTED_VERSION, f"unsupported protocol version: {version}", data)
        await _answer(send, refused, 400)

    async def close(self) -> None:
        await self.relays.close()


def _cancel(relay: Relayed, internal: str, why: str) -> None:
    note = {"requestId": internal, "reason": why}
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": note}
    relay.feed(json.dumps(cancel).encode())


def _wants_progress(scope: Scope, message: Message) -> bool:
    """A request whose progress its client asked for, and can read on an event stream."""
    accept = b",".join(v for k, v in scope["headers"] if k.lower() == b"accept")
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return b"text/event-stream" in accept and isinstance(meta, dict) and "progressToken" in meta


def _meta_fault(message: Message) -> str | None:
    """What a request's ``_meta`` lacks that every request of the era must give, or None."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get(META_VERSION), str):
        return f"invalid params: _meta must name {META_VERSION}"
    if not isinstance(meta.get(META_CAPABILITIES), dict):
        return f"invalid params: _meta must give {META_CAPABILITIES} (an object)"
    return None


def _as_client(message: Message, internal: str, client_id: object) -> Message:
    """A message of a listen's, with the client's own id where ironcurtain's stood."""
    if "method" not in message:
        message = {**message, "id": client_id}
    for part in ("params", "result"):
        body = message.get(part)
        meta = body.get("_meta") if isinstance(body, dict) else None
        if (
            isinstance(body, dict)
            and isinstance(meta, dict)
            and meta.get(SUBSCRIPTION_ID) == internal
        ):
            message = {**message, part: {**body, "_meta": {**meta, SUBSCRIPTION_ID: client_id}}}
    return message


def _mismatch(scope: Scope, message: Message) -> str | None:
    """What the headers say that the body does not, or None."""
    names = [k.decode("latin-1").lower() for k, _ in scope["headers"]]
    for name in _CHECKED_HEADERS:
        if names.count(name) > 1:
            return f"the {name} header is repeated"
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    meta = params.get("_meta")
    version = meta.get(META_VERSION) if isinstance(meta, dict) else None
    if headers.get("mcp-protocol-version") != version:
        return "the MCP-Protocol-Version header is not the request's _meta version"
    if "id" in message and headers.get("mcp-method") != message["method"]:
        return "the Mcp-Method header is not the request's method"
    named = _NAMED.get(message["method"])
    if named is not None and _decoded(headers.get("mcp-name")) != params.get(named):
        return f"the Mcp-Name header is not the request's {named}"
    return None


def _params_unlike(scope: Scope, relay: Relayed, message: Message) -> str | None:
    """What a ``tools/call``'s ``Mcp-Param-*`` headers say that its arguments do not, by
    the tool's schema as ``relay``'s caller is shown it (:mod:`launcher.shared.param_headers`)."""
    params = message.get("params")
    if message["method"] != "tools/call" or not isinstance(params, dict):
        return None
    name = params.get("name")
    tool = relay.listed_tool(name) if isinstance(name, str) else None
    if tool is None:
        return None
    return param_headers.mismatch(
        scope["headers"], tool.get("inputSchema"), params.get("arguments")
    )


def _decoded(value: str | None) -> str | None:
    """A header value as sent: plain, or ``=?base64?…?=`` for what a header cannot hold."""
    if value is None or not (value.startswith("=?base64?") and value.endswith("?=")):
        return value
    try:
        return base64.b64decode(value[9:-2], validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def _refused(scope: Scope, message: Any) -> tuple[Message | None, int | None] | None:
    """(the error answer, its status when not the code's own) to what is not one request
    of this era to relay; (None, None) for a notification, which is only acknowledged;
    None for a request."""
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return error(None, INVALID_REQUEST, "invalid request: one JSON-RPC message"), None
    fault = _meta_fault(message) if "id" in message else None
    if fault is not None:  # the era's faults of form are answered 400
        return error(message.get("id"), INVALID_PARAMS, fault), 400
    mismatch = _mismatch(scope, message)
    if mismatch is not None:
        return error(message.get("id"), HEADER_MISMATCH, mismatch), None
    if "id" not in message:  # a notification: nothing of this era's is one to act on
        return None, None
    rid = message["id"]
    if type(rid) not in (str, int):
        return error(None, INVALID_REQUEST, "invalid request: an id is a string or number"), None
    if message["method"] == "initialize":  # not a method of the era
        return error(rid, METHOD_NOT_FOUND, "method not found: initialize"), None
    return None


async def _body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _answer(send: Send, message: Message, status: int | None = None) -> None:
    err = message.get("error")
    code = err.get("code") if isinstance(err, dict) else None
    if status is None:
        status = 404 if code == METHOD_NOT_FOUND else 400 if code in BAD_REQUEST else 200
    body = json.dumps(message).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _status(send: Send, status: int) -> None:
    headers: list[tuple[bytes, bytes]] = [(b"content-length", b"0")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
