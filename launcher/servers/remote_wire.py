"""The streamable-HTTP transport of a remote server, spoken directly on its HTTP client: each
message a ``POST`` of its JSON, each answer read as a JSON body or an event stream (the
server's requests and notifications in it handed on as they come), the session's id and the
agreed protocol version sent with every later request, the ``GET`` stream for what the server
sends unasked (where it offers one), and ``DELETE`` at the end.

It parses no message into a model and runs no task per message but a request's own: the
messages are the relay's plain dicts both ways, so a call costs what its HTTP exchange costs.
Everything that guards the exchange is the HTTP client's (the egress check, the answer's
size bound, the refusal of a compressed answer, the login signing each request): this module
never dials or signs anything itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from launcher.shared.error_codes import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
)
from launcher.shared.jsonrpc import Message

if TYPE_CHECKING:
    import httpx2

# Bytes of one event of an event stream held at most (the bound the ``mcp`` SDK's client
# keeps); a JSON body is bounded by the HTTP client's transport.
EVENT_LIMIT = 1024 * 1024
# How often a stream that ended before its answer (or the GET stream) is opened again.
RECONNECTS = 2
# Seconds to wait before opening a stream again when the server names no ``retry``.
RETRY_DELAY = 1.0
# Redirects of one request followed at most (each on the same origin, keeping its method).
REDIRECTS = 5
# Seconds an event stream is read on after its answer, to its end, so that its connection
# carries the next call (0: closed at the answer, and the next call opens another).
DRAINED = 1.0
JSON = "application/json"
EVENTS = "text/event-stream"


class Wire:
    """One session with a streamable-HTTP server over ``http`` (kept alive: one connection
    carries the calls one after another). ``deliver`` is handed each message the server
    sends; ``say`` each line worth logging; ``failed`` the exception that ends the session."""

    def __init__(
        self,
        url: str,
        http: httpx2.AsyncClient,
        deliver: Callable[[Message], None],
        say: Callable[[str], None],
        failed: Callable[[BaseException], None],
    ) -> None:
        self.url = url
        self.http = http
        self.deliver = deliver
        self.say = say
        self.failed = failed
        self.session_id: str | None = None
        self.version: str | None = None  # the last protocol version a message was sent in
        self._posts: dict[Any, tuple[asyncio.Task[None], bool]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """What every request carries, with ``extra`` (a message's era headers) on top."""
        headers = {"accept": f"{JSON}, {EVENTS}", "content-type": JSON}
        if self.session_id:
            headers["mcp-session-id"] = self.session_id
        if self.version:
            headers["mcp-protocol-version"] = self.version
        if extra:
            headers.update(extra)
        return headers

    async def send(self, message: Message, era: dict[str, str]) -> None:
        """Send ``message`` (in order with the others): a request's answer is read in a task
        of its own, so a slow call does not hold back the next."""
        method = message.get("method")
        if method == "initialize":
            self.version = None
        elif "mcp-protocol-version" in era:
            self.version = era["mcp-protocol-version"]
        if method == "notifications/cancelled" and self._cancelled(message):
            return
        if method is None or "id" not in message:
            await self._post(message, era)
            if method == "notifications/initialized":
                self._spawn(self._listen())
            return
        modern = _modern(self.version)
        earlier = self._posts.pop(message["id"], None)
        if earlier is not None:
            earlier[0].cancel()
        task = self._spawn(self._post(message, era))
        self._posts[message["id"]] = (task, modern)
        task.add_done_callback(lambda _: self._forget(message["id"], task))

    def _forget(self, key: Any, task: asyncio.Task[None]) -> None:
        if self._posts.get(key, (None,))[0] is task:
            del self._posts[key]

    def _cancelled(self, message: Message) -> bool:
        """Whether a cancellation is carried by closing its request's stream (the stateless
        era has no notification for it) instead of being sent."""
        params = message.get("params")
        key = params.get("requestId") if isinstance(params, dict) else None
        post = self._posts.get(key) if key is not None else None
        if post is None:
            return _modern(self.version)
        if post[1]:
            post[0].cancel()
        return post[1]

    def _spawn(self, work: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.failed(task.exception())  # type: ignore[arg-type]

    async def _post(self, message: Message, era: dict[str, str]) -> None:
        """One message ``POST``ed, and (for a request) its answer read."""
        key = message.get("id") if "method" in message else None
        body = json.dumps(message, separators=(",", ":")).encode()
        url = self.url
        # A failure to reach the server (or the egress check's refusal) ends the session.
        for _ in range(REDIRECTS + 1):
            async with self.http.stream(
                "POST", url, content=body, headers=self.headers(era)
            ) as response:
                moved = _moved(response)
                if moved is None:
                    await self._answered(response, message, key)
                    return
            url = moved
        if key is not None:
            self._error(key, INVALID_REQUEST, f"more than {REDIRECTS} redirects")

    async def _answered(self, response: httpx2.Response, message: Message, key: Any) -> None:
        status = response.status_code
        if key is None:
            return  # a notification or an answer of ours: nothing comes back for it
        if status == 202:
            self._error(key, INVALID_REQUEST, "server answered a request with 202 Accepted")
        elif 300 <= status < 400:
            where = response.headers.get("location", "")
            self._error(key, INVALID_REQUEST, f"redirect to {where} not followed")
        elif status >= 400:
            await self._refused(response, key)
        else:
            if message.get("method") == "initialize":
                self.session_id = response.headers.get("mcp-session-id") or self.session_id
            await self._read(response, key)

    async def _refused(self, response: httpx2.Response, key: Any) -> None:
        """A request the server answered with an HTTP error: its JSON-RPC error when the body
        is one, else what the status says (404 in a session: the session has ended)."""
        import httpx2

        if _kind(response) == JSON:
            with contextlib.suppress(httpx2.StreamError, ValueError):
                parsed = json.loads(await response.aread())
                if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
                    self.deliver({"jsonrpc": "2.0", "id": key, "error": parsed["error"]})
                    return
        if response.status_code == 404:
            if self.session_id is None:
                self._error(key, METHOD_NOT_FOUND, "Not Found")
            else:
                self._error(key, INVALID_REQUEST, "Session terminated")
            return
        self._error(key, INTERNAL_ERROR, "Server returned an error response")

    async def _read(self, response: httpx2.Response, key: Any) -> None:
        """A request's answer: one JSON body, or an event stream up to the answer."""
        import httpx2

        kind = _kind(response)
        if kind == JSON:
            body = b""
            try:
                body = await response.aread()
                parsed = json.loads(body)
            except (httpx2.StreamError, ValueError) as exc:
                # What came is quoted (its start), as the caller hides credentials in it.
                quoted = f": {body[:200].decode(errors='replace')!r}" if body else ""
                self.say(f"Error parsing JSON response: {exc}{quoted}")
                self._error(key, PARSE_ERROR, f"Failed to parse JSON response: {exc}")
                return
            self._handed(parsed, key)
        elif kind == EVENTS:
            await self._stream(response, key)
        else:
            self._error(key, INVALID_REQUEST, f"Unexpected content type: {kind}")

    async def _stream(self, response: httpx2.Response, key: Any, attempt: int = 0) -> None:
        """Events up to ``key``'s answer; a stream that ends before it is opened again
        (``GET`` with ``Last-Event-ID``) when the server numbered its events."""
        import httpx2

        last: list[str | None] = [None, None]  # the last event id, the server's retry
        try:
            if await self._events(response, key, last):
                return
        except httpx2.SSEError as exc:
            self._error(key, INTERNAL_ERROR, f"SSE stream failed: {exc}")
            return
        except httpx2.TransportError:
            pass
        if last[0] is None or attempt >= RECONNECTS:
            self._error(key, INTERNAL_ERROR, "SSE stream ended without a response")
            return
        await asyncio.sleep(int(last[1]) / 1000 if last[1] else RETRY_DELAY)
        headers = self.headers({"accept": EVENTS, "last-event-id": last[0]})
        async with self.http.stream("GET", self.url, headers=headers) as again:
            if again.status_code >= 400 or _kind(again) != EVENTS:
                self._error(
                    key, INTERNAL_ERROR, f"SSE stream resumed with HTTP {again.status_code}"
                )
                return
            await self._stream(again, key, attempt + 1)

    async def _events(self, response: httpx2.Response, key: Any, last: list[str | None]) -> bool:
        """Hand on each event's message; whether ``key``'s answer (or error) came. The stream
        is read on to its end after the answer (for at most ``DRAINED`` seconds more): a
        stream closed before its end takes its connection with it, and the next call would
        open another."""
        answered = False
        try:
            async with asyncio.timeout(None) as deadline:
                async for parsed in self._messages(response, last):
                    if parsed is None:  # not JSON: an error for the request it answers
                        if key is not None and not answered:
                            self._error(key, PARSE_ERROR, "Failed to parse SSE message")
                            return True
                        continue
                    first = self._handed(parsed, None if answered else key) and not answered
                    if first and key is not None:
                        answered = True
                        if DRAINED <= 0:
                            return True
                        deadline.reschedule(asyncio.get_running_loop().time() + DRAINED)
        except TimeoutError:
            if not answered:
                raise
        return answered

    async def _messages(self, response: httpx2.Response, last: list[str | None]) -> Any:
        """The messages of an event stream, each parsed (None: one that is not JSON)."""
        import httpx2

        async for event in httpx2.EventSource(response, max_event_size=EVENT_LIMIT):
            if event.id:
                last[0] = event.id
            if event.retry is not None:
                last[1] = str(event.retry)
            if event.event != "message" or not event.data:
                continue
            try:
                yield json.loads(event.data)
            except ValueError as exc:
                self.say(f"Error parsing SSE message: {exc}")
                yield None

    def _handed(self, parsed: Any, key: Any) -> bool:
        """Hand on one message the server sent; whether it answers a request. An answer to
        ``key`` keeps ``key`` as it was sent (a server may echo it as another type)."""
        if not isinstance(parsed, dict) or parsed.get("jsonrpc") != "2.0":
            self.say(f"not a JSON-RPC message: {str(parsed)[:200]}")
            if key is not None:
                self._error(key, PARSE_ERROR, "the server's answer is not a JSON-RPC message")
            return True
        answer = "method" not in parsed and ("result" in parsed or "error" in parsed)
        if answer and key is not None:
            parsed["id"] = key
        self.deliver(parsed)
        return answer

    def _error(self, key: Any, code: int, text: str) -> None:
        self.deliver({"jsonrpc": "2.0", "id": key, "error": {"code": code, "message": text}})

    async def _listen(self) -> None:
        """The ``GET`` stream of what the server sends unasked, opened again when it ends
        (at most ``RECONNECTS`` failures in a row); a server that offers none is left be."""
        failures = 0
        last: list[str | None] = [None, None]
        while self.session_id and failures < RECONNECTS:
            extra = {"accept": EVENTS} | ({"last-event-id": last[0]} if last[0] else {})
            try:
                async with self.http.stream("GET", self.url, headers=self.headers(extra)) as got:
                    if got.status_code >= 300 or _kind(got) != EVENTS:
                        return  # 405: the server offers no such stream
                    await self._events(got, None, last)
                failures = 0
            except Exception:  # the stream is optional: opened again, or let be
                failures += 1
            if failures < RECONNECTS:
                await asyncio.sleep(int(last[1]) / 1000 if last[1] else RETRY_DELAY)

    async def close(self, grace: float) -> None:
        """End the session upstream (``DELETE``, within ``grace`` seconds) and every stream."""
        for task in list(self._tasks):
            task.cancel()
        if self.session_id:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    self.http.request("DELETE", self.url, headers=self.headers()), grace
                )
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task


def _moved(response: httpx2.Response) -> str | None:
    """Where a request is redirected, when it is to be followed: a ``307`` or ``308`` (the
    method and body kept) to the same scheme, host and port. Any other is not followed."""
    location = response.headers.get("location")
    if response.status_code not in (307, 308) or not location:
        return None
    there = response.request.url.join(location)
    here = response.request.url
    same = (there.scheme, there.host, there.port) == (here.scheme, here.host, here.port)
    return str(there) if same else None


def _kind(response: httpx2.Response) -> str:
    return response.headers.get("content-type", "").partition(";")[0].strip().lower()


def _modern(version: str | None) -> bool:
    """Whether ``version`` is of the stateless era (a request is cancelled by closing its
    stream there)."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return version in MODERN_PROTOCOL_VERSIONS
