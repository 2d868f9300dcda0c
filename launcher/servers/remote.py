"""One remote MCP server (a ``url``): spoken to over streamable HTTP (or the legacy SSE
transport) by the ``mcp`` SDK's client transports, with the same surface as a local server's
connection, so the relay, the gate, approvals, audit and masking treat it as they treat a
local one. The era it is spoken to in is chosen as for a local server
(:mod:`launcher.servers.eras`); each request carries the HTTP headers that era asks for.
Every address it dials passes :mod:`launcher.servers.remote_egress`.

A token provider plugs in where :meth:`RemoteConnection._http` makes the HTTP client
(:func:`launcher.servers.remote_egress.client_for`'s ``auth``): it is consulted on every
request, and handed every 401, without the relay knowing.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import sys
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from launcher.host.launch_spec import LaunchSpec
from launcher.plan.remote_plan import SSE, RemoteTarget
from launcher.servers.connection import NotificationHandler, ServerConnection
from launcher.servers.remote_egress import EgressRefused, client_for
from launcher.shared.jsonrpc import META_VERSION, ClientSide, Message, ServerGone
from sandbox_profiles.records import frozen

if TYPE_CHECKING:
    import subprocess

    import httpx2

# Seconds a stopping connection has to end its session upstream (``DELETE``).
CLOSE_GRACE = 2.0
# The shortest part of a header value hidden in what the server sends (a shorter one is no
# credential, and hiding it would mangle ordinary text).
SHORTEST_HIDDEN = 8


# The connections open now: what each hides is hidden in the SDK's log lines too.
_OPEN: weakref.WeakSet[RemoteConnection] = weakref.WeakSet()


class _SdkLines(logging.Handler):
    """The ``mcp`` SDK client transports' warnings and errors, as one line each on stderr
    with every open remote connection's credentials hidden: never a traceback, and never
    the server's answer (which the SDK quotes when it cannot parse it) as it came."""

    def emit(self, record: logging.LogRecord) -> None:
        from launcher.shared.shown import visible

        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += f": {record.exc_info[1]}"
        for conn in list(_OPEN):
            text = conn.hide(text)
        line = visible(" ".join(text.split()), one_line=True)
        print(f"ironcurtain: remote: {line}", file=sys.stderr, flush=True)


def _sdk_lines() -> None:
    """Route the SDK client's log to :class:`_SdkLines` (once; not on to any other handler)."""
    log = logging.getLogger("mcp.client")
    if not any(isinstance(h, _SdkLines) for h in log.handlers):
        log.addHandler(_SdkLines(logging.WARNING))
        log.setLevel(logging.WARNING)
        log.propagate = False


@frozen
class Whose:
    """Whose login a connection's requests are signed in with, where each caller has its own
    (gateway mode): ``caller``, a key of :func:`launcher.servers.token_store.caller_key`
    (None: not known yet, and then none is used)."""

    caller: str | None


def own_logins(target: RemoteTarget) -> bool:
    """Whether, in gateway mode, each caller logs in to this server on its own: it is
    signed in by a login (its ``headers`` carry no ``Authorization``) not shared by all."""
    return not target.auth.shared and not _authorization(target.headers)


class RemoteUnavailable(Exception):
    """A remote server that could not be reached or refused ironcurtain: one line, naming it."""


class RemoteConnection(ServerConnection):
    def __init__(
        self,
        spec: LaunchSpec,
        target: RemoteTarget,
        on_notification: NotificationHandler | None = None,
        client: ClientSide | None = None,
        whose: Whose | None = None,
    ) -> None:
        """``whose``: the caller whose login signs its requests in (None: the user's)."""
        super().__init__(spec, on_notification, client)
        self.target = target
        self.whose = whose
        self._outbox: asyncio.Queue[Message] = asyncio.Queue()
        self._carrier: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self.refused: int | None = None  # the last HTTP status >= 400 it answered with
        self.failure: str | None = None  # why the connection ended, when it failed
        # The entry's header values (its credentials), each with what stands in for it in
        # anything the server sends and in every line about the connection.
        self._hidden = hidden_values(target.headers, urlsplit(target.url).query)
        self.login: Any = None  # the login that signs its requests in (remote_auth), if any

    def another(self, client: ClientSide, on_notification: NotificationHandler | None) -> Any:
        return RemoteConnection(self.spec, self.target, on_notification, client, self.whose)

    @property
    def running(self) -> bool:
        return self._carrier is not None and self.gone is None

    async def start(self, proc: subprocess.Popen[bytes] | None = None) -> None:
        """Open the transport (nothing is sent until the first request)."""
        del proc
        _sdk_lines()
        _OPEN.add(self)
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._carrier = asyncio.create_task(self._carry(ready))
        await ready

    async def initialize(self) -> None:
        """Open the conversation; a server that cannot be reached, or refuses, is
        :class:`RemoteUnavailable` with one line saying why."""
        try:
            await super().initialize()
        except (RuntimeError, ServerGone) as exc:
            raise RemoteUnavailable(self.why_unavailable(exc)) from None

    def why_unavailable(self, exc: BaseException | None = None) -> str:
        """Why this server cannot be used, in one line naming it and where it is."""
        where = f"remote server '{self.name}' ({self.target.where})"
        if self.refused in (401, 403):
            if _authorization(self.target.headers):
                return (
                    f'{where} refused ironcurtain (HTTP {self.refused}): its "headers" carry '
                    "no credential it accepts"
                )
            from launcher.servers import remote_auth

            caller = self.whose.caller if self.whose is not None else None
            why = (self.login and self.login.needed) or remote_auth.missing(
                self.name, self.target, caller
            )
            return (
                f"{where} refused ironcurtain (HTTP {self.refused}): {why}; "
                f"run `{remote_auth.login_command(self.name, caller)}`"
            )
        if self.refused is not None:
            return f"{where} answered HTTP {self.refused}"
        if self.failure is not None:
            return f"{where} cannot be reached: {self.failure}"
        return f"{where} did not open: {self.hide(str(exc))}"

    def hide(self, value: Any) -> Any:
        """``value`` (a message, or a line) with every header value of the entry in it
        replaced by a marker naming the header: whatever the server sends back (a tool that
        reflects its request, an error quoting the token it refused) carries no credential
        of ironcurtain's on to the client, the audit log or the terminal."""
        if not self._hidden:
            return value
        if isinstance(value, str):
            for secret, marker in self._hidden.items():
                if secret in value:
                    value = value.replace(secret, marker)
            return value
        if isinstance(value, dict):
            pairs = [(self.hide(k), self.hide(v)) for k, v in value.items()]
            same = all(
                a is k and b is v for (a, b), (k, v) in zip(pairs, value.items(), strict=True)
            )
            return value if same else dict(pairs)
        if isinstance(value, list):
            items = [self.hide(item) for item in value]
            return value if all(a is b for a, b in zip(items, value, strict=True)) else items
        return value  # unchanged, the same object: nothing is copied on the common path

    # -- the transport -----------------------------------------------------------------------

    def _write(self, message: Message) -> None:
        if self.gone is not None:
            raise self.gone
        if self.limit_reason is not None or self._carrier is None:
            raise ServerGone(self.name, None, self.limit_reason or "it is not connected")
        self._outbox.put_nowait(message)

    def _sse_http(
        self,
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        """The SSE transport's HTTP client: the same as the other's (its own arguments are
        the entry's headers and the default timeouts, which that client has already)."""
        del headers, timeout, auth
        return self._http()

    def _http(self) -> httpx2.AsyncClient:
        """The HTTP client of the server: its requests signed in by the server's login, when
        one is kept for it (and the entry's headers carry no ``Authorization`` of their own)."""
        if self.login is None and not _authorization(self.target.headers):
            from launcher.servers import remote_auth

            whose = self.whose
            if whose is not None and whose.caller is None:
                # Each caller's own login, and no caller known: never the user's instead.
                raise RemoteUnavailable(
                    f"remote server '{self.name}' ({self.target.where}) is opened with its "
                    "caller's login, and no caller is known"
                )
            caller = whose.caller if whose is not None else None
            self.login = remote_auth.login_for(self.name, self.target, caller)
        also = self.login.hosts() if self.login is not None else ()
        client = client_for(self.target, auth=self.login, also=also)

        async def seen(response: httpx2.Response) -> None:
            if response.status_code >= 400 and response.request.method == "POST":
                self.refused = response.status_code

        client.event_hooks["response"].append(seen)
        return client

    async def _carry(self, ready: asyncio.Future[None]) -> None:
        """The transport's whole life: open, carry messages both ways, close."""
        try:
            if self.target.transport != SSE:
                await self._carry_wire(ready)
                return
            async with contextlib.AsyncExitStack() as stack:
                streams = await stack.enter_async_context(self._transport())
                ready.set_result(None)
                await self._pump(*streams)
        except BaseException as exc:
            self.failure = self.hide(_one_line(exc))
            if not ready.done():
                ready.set_result(None)  # the first request fails, naming why
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._ended()

    def _transport(self) -> Any:
        """The legacy SSE transport (the ``mcp`` SDK's client)."""
        from mcp.client.sse import sse_client

        return sse_client(
            self.target.url,
            headers=dict(self.target.headers),
            httpx_client_factory=self._sse_http,
        )

    async def _carry_wire(self, ready: asyncio.Future[None]) -> None:
        """Streamable HTTP (:mod:`launcher.servers.remote_wire`): each message sent in
        order, each the server sends dispatched, until the connection closes or fails."""
        from launcher.servers.remote_wire import Wire

        ended: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()

        def failed(exc: BaseException) -> None:
            if not ended.done():
                ended.set_result(exc)

        async with self._http() as http:
            wire = Wire(self.target.url, http, self._arrived, self._said, failed)
            ready.set_result(None)
            sending = asyncio.create_task(self._send_all(wire))
            closing = asyncio.create_task(self._closing.wait())
            try:
                waiting: list[asyncio.Future[Any]] = [sending, closing, ended]
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            finally:
                sending.cancel()
                closing.cancel()
                await wire.close(CLOSE_GRACE)
        problem = ended.result() if ended.done() else None
        if problem is not None:
            raise problem

    async def _send_all(self, wire: Any) -> None:
        while True:
            message = await self._outbox.get()
            await wire.send(message, era_headers(message, self._version()))

    def _arrived(self, message: Message) -> None:
        self._dispatch(self.hide(message))

    def _said(self, line: str) -> None:
        from launcher.shared.shown import visible

        text = visible(" ".join(self.hide(line).split()), one_line=True)
        print(f"ironcurtain: remote: {text}", file=sys.stderr, flush=True)

    async def _pump(self, read: Any, write: Any) -> None:
        import anyio

        async with anyio.create_task_group() as group:

            async def closing() -> None:
                await self._closing.wait()
                group.cancel_scope.cancel()

            async def reading() -> None:
                async for item in read:
                    if isinstance(item, Exception):
                        self._log(f"transport: {self.hide(_one_line(item))}")
                        continue
                    dumped = item.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
                    self._dispatch(self.hide(dumped))
                group.cancel_scope.cancel()  # the transport closed

            group.start_soon(closing)
            group.start_soon(reading)
            while True:
                message = await self._outbox.get()
                await write.send(self._framed(message))

    def _framed(self, message: Message) -> Any:
        """``message`` as the SDK's transport sends it, with the era's HTTP headers."""
        from mcp.shared.message import ClientMessageMetadata, SessionMessage
        from mcp_types import jsonrpc_message_adapter

        headers = era_headers(message, self._version())
        parsed = jsonrpc_message_adapter.validate_python(message, by_name=False)
        return SessionMessage(parsed, metadata=ClientMessageMetadata(headers=headers or None))

    def _version(self) -> str | None:
        """The protocol version agreed in the handshake era (None before it, or stateless)."""
        version = self.initialize_result.get("protocolVersion")
        return version if isinstance(version, str) and self._envelope is None else None

    def _ended(self) -> None:
        if self.gone is None:
            self.gone = ServerGone(self.name, None, self.failure or "its connection was closed")
        for request_id in list(self._pending):
            self._complete(request_id, self.gone)
        self.exited.set()

    def halt(self, reason: str, tree: object = None) -> None:
        del tree
        if self.limit_reason is None:
            self.limit_reason = reason
            self._log(f"stopped: {reason}")
            self._closing.set()

    async def stop(self, grace: float = CLOSE_GRACE) -> None:
        """End the session upstream and close the transport; at most ``grace`` seconds."""
        carrier = self._carrier
        if carrier is None:
            return
        self._closing.set()
        try:
            await asyncio.wait_for(asyncio.shield(carrier), grace)
        except (TimeoutError, Exception):
            carrier.cancel()
            with contextlib.suppress(BaseException):
                await carrier


def hidden_values(headers: Mapping[str, str], query: str = "") -> dict[str, str]:
    """What of ``headers`` (and of the URL's ``query``, where some services put their key)
    is hidden wherever the server's messages carry it, longest first (a value is replaced
    before a part of it), each with its marker: the whole value, the credential after an
    authorization scheme (``Bearer X``: ``X``), a ``Basic`` credential decoded
    (``user:password``, and the password), the query and each of its values (decoded and
    as written), each of at
    least ``SHORTEST_HIDDEN`` characters.

    >>> hidden_values({"Authorization": "Basic bWU6czNjcjN0LXRva2Vu"})  # doctest: +ELLIPSIS
    {'Basic bWU6czNjcjN0LXRva2Vu': '[secret masked: "Authorization" header]', ...}
    """
    found: dict[str, str] = {}
    for name, value in headers.items():
        marker = f'[secret masked: "{name}" header]'
        scheme, _, credential = value.strip().partition(" ")
        parts = [value.strip(), credential.strip()]
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(credential.strip(), validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                decoded = ""
            parts += [decoded, decoded.partition(":")[2]]
        for part in parts:
            if len(part) >= SHORTEST_HIDDEN:
                found.setdefault(part, marker)
    # Each of its keys and values decoded, and as written (percent-encoded).
    in_query = [query, *(v for pair in parse_qsl(query) for v in pair)]
    in_query += [part for pair in query.split("&") for part in pair.split("=", 1)]
    for part in in_query:
        if len(part) >= SHORTEST_HIDDEN:
            found.setdefault(part, "[secret masked: the URL's query]")
    return dict(sorted(found.items(), key=lambda item: -len(item[0])))


def import_client_stack() -> None:
    """Import what a remote connection speaks with (the ``mcp`` SDK's client transports and
    its OAuth client), in this thread, now. The SDK's client and server packages import each
    other: imported in two threads at once (the HTTP endpoint's stack is imported in another
    while servers start), each thread can find the other's module half made."""
    import importlib

    for module in ("mcp.client.streamable_http", "mcp.client.sse", "launcher.servers.remote_auth"):
        importlib.import_module(module)


def era_headers(message: Message, agreed: str | None) -> dict[str, str]:
    """The HTTP headers a request carries in its era: in the stateless era (the version in
    its ``_meta``) the version, the method and the name it acts on; in the handshake era,
    once agreed, the version.

    >>> era_headers({"method": "tools/call", "params": {"name": "t", "_meta": {
    ...     "io.modelcontextprotocol/protocolVersion": "2026-07-28"}}}, None)
    {'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 't'}
    >>> era_headers({"method": "tools/list"}, "2025-11-25")
    {'mcp-protocol-version': '2025-11-25'}
    """
    from mcp.shared.inbound import (
        MCP_METHOD_HEADER,
        MCP_NAME_HEADER,
        MCP_PROTOCOL_VERSION_HEADER,
        NAME_BEARING_METHODS,
        encode_header_value,
    )

    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    meta = params.get("_meta")
    version = meta.get(META_VERSION) if isinstance(meta, dict) else None
    method = message.get("method")
    if isinstance(version, str) and isinstance(method, str):
        headers = {MCP_PROTOCOL_VERSION_HEADER: version, MCP_METHOD_HEADER: method}
        key = NAME_BEARING_METHODS.get(method)
        if key is not None and isinstance(params.get(key), str):
            headers[MCP_NAME_HEADER] = encode_header_value(params[key])
        return headers
    if agreed is not None and message.get("method") != "initialize":
        return {MCP_PROTOCOL_VERSION_HEADER: agreed}
    return {}


def _authorization(headers: Mapping[str, str]) -> bool:
    """Whether an entry's own headers carry a credential (then no login is used)."""
    return any(name.lower() == "authorization" for name in headers)


def _one_line(exc: BaseException) -> str:
    """What ended a connection, in one line: the innermost refusal or connection error of an
    exception group, never a traceback."""
    found: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for inner in e.exceptions:
                walk(inner)
        else:
            found.append(e)

    walk(exc)
    refusal = next((e for e in found if isinstance(e, EgressRefused)), None)
    chosen: BaseException = refusal or next(
        (e for e in found if not isinstance(e, asyncio.CancelledError)), exc
    )
    while True:
        inner = chosen.__cause__ or (chosen.__context__ if not str(chosen) else None)
        if inner is None:
            break
        chosen = inner
    text = str(chosen) or type(chosen).__name__
    return " ".join(text.split())
