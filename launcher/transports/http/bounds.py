"""What ``ironcurtain run --http`` adds to uvicorn: bounds on connections that nobody on
this machine (no token is needed to connect) can use to hold the launcher's descriptors,
and the HTTP stack's log lines made one short line each, repeats held back."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

HEAD_TIMEOUT = 10.0  # seconds a connection has to send a whole request head
MAX_CONNECTIONS = 256  # open at once; more are closed as they come


def _longest_idle(new: Any, connections: Iterable[Any]) -> Any:
    """Of the open connections of ``new``'s kind but itself, the one waiting longest with no
    request being served, or None."""
    idle = [
        c for c in connections if isinstance(c, type(new)) and c is not new and not c._serving()
    ]
    return min(idle, key=lambda c: c._since, default=None)


def bounded_protocol() -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol with two bounds it lacks, so that nobody on this machine
    (no token is needed to connect) can hold the launcher's descriptors: a connection has
    ``HEAD_TIMEOUT`` seconds from connecting, and again from each answer, to send a whole
    request head (headers trickled a line at a time would otherwise keep it forever), and
    at most ``MAX_CONNECTIONS`` are open at once: a new one beyond that ends the one idle
    longest (no request being served), or is itself closed when every one is busy."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class Bounded(H11Protocol):
        _timer: asyncio.TimerHandle | None = None
        _waiting: object = None  # the cycle current when the timer was set

        _since = 0.0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._since = self.loop.time()
            if len(self.connections) > MAX_CONNECTIONS:
                # Full: the connection waiting longest with no request being served makes
                # room (holding idle connections then keeps nobody out); none, this one goes.
                oldest = _longest_idle(self, self.connections)
                if oldest is None:
                    transport.abort()
                    return
                oldest.transport.abort()
            self._arm()

        def _serving(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _arm(self) -> None:
            self._waiting = self.cycle
            self._timer = self.loop.call_later(HEAD_TIMEOUT, self._late)

        def _late(self) -> None:
            self._timer = None
            if self.cycle is self._waiting and not self.transport.is_closing():
                self.transport.close()  # no whole head in time

        def handle_events(self) -> None:
            super().handle_events()
            if self._timer is not None and self.cycle is not self._waiting:
                self._timer.cancel()  # a head came: the request is served
                self._timer = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self._timer is None and not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            super().connection_lost(exc)

    return Bounded


class OneLine(logging.Handler):
    """The HTTP stack's warnings and errors as one line each on stderr, the same line at
    most once every ``QUIET`` seconds (a failing accept is logged on every attempt)."""

    QUIET = 10.0

    def __init__(self, say: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self.say = say
        self._said: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage().splitlines()[0] if record.getMessage() else ""
        if record.exc_info and record.exc_info[1] is not None:
            text += f": {record.exc_info[1]!r}"
        now = time.monotonic()
        if now - self._said.get(text, -self.QUIET) < self.QUIET:
            return
        if len(self._said) > 256:
            self._said.clear()
        self._said[text] = now
        self.say(f"http: {text}")


def quiet_logs(say: Callable[[str], None]) -> None:
    """The HTTP stack's loggers (and asyncio's, whose failing accepts repeat) to stderr
    through :class:`OneLine`."""
    handler = OneLine(say)
    for name in ("uvicorn", "uvicorn.error", "mcp", "sse_starlette", "asyncio"):
        log = logging.getLogger(name)
        log.handlers[:] = [handler]
        log.propagate = False
        log.setLevel(logging.WARNING)
