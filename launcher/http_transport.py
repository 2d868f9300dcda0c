"""``ironcurtain run --http PORT``: the MCP endpoint as streamable HTTP on 127.0.0.1.

One endpoint, ``/mcp``. Every request must carry the bearer token printed at start (no
unauthenticated endpoint), and a ``Host`` (and, when sent, ``Origin``) naming this loopback
address and port, so a web page that rebinds a DNS name to 127.0.0.1 is refused.

- ``POST``: one JSON-RPC message. A request is answered in the response body
  (``application/json``); a notification or a response (an answer to an elicitation) gets
  ``202 Accepted``. ``initialize`` hands out the ``Mcp-Session-Id`` that every later
  request must carry.
- ``GET``: a ``text/event-stream`` for what the session sends unasked (notifications,
  elicitation requests).
- ``DELETE``: ends the client's session id (the ironcurtain session goes on until stopped).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import secrets
from collections.abc import Callable
from typing import Any

Message = dict[str, Any]
HEAD_LIMIT = 64 * 1024
BODY_LIMIT = 64 * 1024 * 1024
_REASONS = {
    200: "OK",
    202: "Accepted",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    421: "Misdirected Request",
}


class HttpEndpoint:
    def __init__(self, port: int, feed: Callable[[bytes], None], token: str | None = None):
        self.port = port
        self.token = token or secrets.token_urlsafe(32)
        self._feed = feed  # hands one message (raw JSON) to the session
        self._server: asyncio.Server | None = None
        self._pending: dict[str | int, asyncio.Future[Message]] = {}
        self._events: asyncio.Queue[Message] = asyncio.Queue()
        self.session_id: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1)

    def backlog(self) -> int:
        """Roughly the bytes waiting for a client to read them (a message counts 1 KiB)."""
        return self._events.qsize() * 1024

    def deliver(self, message: Message, related: str | int | None = None) -> None:
        """Where the session's outgoing messages go: the waiting POST, else the event stream."""
        key = message.get("id")
        if ("result" in message or "error" in message) and isinstance(key, str | int):
            future = self._pending.pop(key, None)
            if future is not None and not future.done():
                future.set_result(message)
                return
        self._events.put_nowait(message)

    # -- HTTP ------------------------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                if len(parts) != 3:
                    await _respond(writer, 400, b"bad request line")
                    return
                method, target, _ = parts
                headers = {
                    k.strip().lower(): v.strip()
                    for k, v in (h.split(":", 1) for h in lines[1:] if ":" in h)
                }
                length = int(headers.get("content-length", "0") or 0)
                if length > BODY_LIMIT:
                    await _respond(writer, 413, b"message too large")
                    return
                body = await reader.readexactly(length) if length else b""
                if not await self._request(method, target, headers, body, writer):
                    return
        except (ConnectionError, OSError, ValueError):
            return
        finally:
            writer.close()

    def _refusal(self, target: str, headers: dict[str, str]) -> tuple[int, bytes] | None:
        """Why this request may not be served, checked before anything else is looked at."""
        allowed_hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}
        if headers.get("host") not in allowed_hosts:
            return 421, b"wrong Host (this endpoint answers only to 127.0.0.1 and localhost)"
        origin = headers.get("origin")
        if origin is not None and origin not in {f"http://{h}" for h in allowed_hosts}:
            return 403, b"cross-origin request refused"
        given = headers.get("authorization", "")
        if not given.startswith("Bearer ") or not hmac.compare_digest(
            given[7:].encode(), self.token.encode()
        ):
            return 401, b"missing or wrong bearer token"
        if target.split("?", 1)[0] != "/mcp":
            return 404, b"the endpoint is /mcp"
        return None

    async def _request(
        self, method: str, target: str, headers: dict[str, str], body: bytes, writer: Any
    ) -> bool:
        """Serve one request; False when the connection is done."""
        refusal = self._refusal(target, headers)
        if refusal is not None:
            await _respond(writer, *refusal)
            return False
        sid = headers.get("mcp-session-id")
        if method == "GET":
            if self.session_id is None or sid != self.session_id:
                await _respond(writer, 400, b"initialize first; then send Mcp-Session-Id")
                return False
            await self._event_stream(writer)
            return False
        if method == "DELETE":
            if sid is not None and sid == self.session_id:
                self.session_id = None
            await _respond(writer, 200, b"")
            return True
        if method != "POST":
            await _respond(writer, 405, b"POST, GET or DELETE")
            return True
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            await _respond(writer, 400, b"the body is not JSON")
            return True
        if not isinstance(message, dict):
            await _respond(writer, 400, b"one JSON-RPC message per request")
            return True
        is_initialize = message.get("method") == "initialize"
        if not is_initialize and (self.session_id is None or sid != self.session_id):
            await _respond(writer, 400, b"missing or unknown Mcp-Session-Id")
            return True
        key = message.get("id")
        if "method" not in message or not isinstance(key, str | int):
            self._feed(body)  # a notification, or the client's answer to us
            await _respond(writer, 202, b"")
            return True
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        self._feed(body)
        response = await future
        extra = {}
        if is_initialize and "result" in response:
            self.session_id = secrets.token_urlsafe(16)
            extra["mcp-session-id"] = self.session_id
        payload = json.dumps(response, separators=(",", ":"), ensure_ascii=False).encode()
        await _respond(writer, 200, payload, "application/json", extra)
        return True

    async def _event_stream(self, writer: Any) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Connection: keep-alive\r\n\r\n"
        )
        await writer.drain()
        while True:
            try:
                message = await asyncio.wait_for(self._events.get(), 15)
            except TimeoutError:
                writer.write(b": keep-alive\n\n")
            else:
                data = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
                writer.write(f"event: message\ndata: {data}\n\n".encode())
            await writer.drain()


async def _respond(
    writer: Any,
    status: int,
    body: bytes,
    content_type: str = "text/plain",
    extra: dict[str, str] | None = None,
) -> None:
    head = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        *(f"{k}: {v}" for k, v in (extra or {}).items()),
    ]
    if status == 401:
        head.append('WWW-Authenticate: Bearer realm="ironcurtain"')
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
    await writer.drain()
