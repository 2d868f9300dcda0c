"""Newline-delimited JSON-RPC framing, fed straight from protocol callbacks.

The relay reads its pipes through asyncio protocols rather than ``StreamReader.readline``:
each readline is a task wake-up and a trip round the event loop, and a call crosses four
pipes. Lines are handed on in the callback that received them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class LineBuffer:
    """Splits a byte stream into lines (without the newline). A line longer than ``limit``
    is dropped whole, and ``on_overflow`` is told once for it.

    >>> out = []
    >>> buf = LineBuffer(out.append, limit=4)
    >>> buf.feed(b"ab\\ncdefgh"); buf.feed(b"ij\\nk\\n")
    >>> out
    [b'ab', b'k']
    """

    def __init__(
        self,
        on_line: Callable[[bytes], None],
        limit: int,
        on_overflow: Callable[[], None] | None = None,
    ) -> None:
        self._on_line = on_line
        self._limit = limit
        self._on_overflow = on_overflow
        self._buffer = bytearray()
        self._skipping = False  # inside an oversized line: drop up to its newline

    def feed(self, data: bytes) -> None:
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            if self._skipping:
                self._skipping = False
            elif self._buffer:
                self._buffer += data[start:end]
                line, self._buffer = bytes(self._buffer), bytearray()
                if len(line) <= self._limit:
                    self._on_line(line)
                elif self._on_overflow is not None:
                    self._on_overflow()
            elif end - start <= self._limit:
                self._on_line(data[start:end])
            elif self._on_overflow is not None:
                self._on_overflow()
            start = end + 1
        if start < len(data) and not self._skipping:
            self._buffer += data[start:]
            if len(self._buffer) > self._limit:
                self._buffer = bytearray()
                self._skipping = True
                if self._on_overflow is not None:
                    self._on_overflow()

    def close(self) -> None:
        """End of stream: a last line without its newline still counts."""
        if self._buffer and not self._skipping:
            line, self._buffer = bytes(self._buffer), bytearray()
            self._on_line(line)


class LineProtocol(asyncio.Protocol):
    """A read pipe whose data goes to a :class:`LineBuffer`; ``on_end`` once it closes."""

    def __init__(self, lines: LineBuffer, on_end: Callable[[], None] | None = None) -> None:
        self.lines = lines
        self.on_end = on_end

    def data_received(self, data: bytes) -> None:
        self.lines.feed(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lines.close()
        if self.on_end is not None:
            self.on_end()
