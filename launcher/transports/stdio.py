"""The client on stdio: one JSON message per line in, one per line out.

Lines are handed on in the callback that read them; answers are written through a pipe
transport (so a client that does not read makes a backlog, not a blocked session). The
writer is connected before the first line is read, and what is delivered while it is being
connected waits for it: connecting makes stdout non-blocking, and a plain write of an
answer bigger than the pipe holds (a long ``tools/list``) would then fail part-way. A
regular file or ``/dev/null`` on stdin, which the event loop cannot watch, is read in a
thread. End of input ends the session; so does a client that closes its end while the
servers are still starting, having sent nothing (:func:`client_gone`).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import fcntl
import os
import select
import selectors
import sys
import termios
import threading
from collections.abc import Callable

from launcher.shared.error_codes import PARSE_ERROR
from launcher.shared.jsonrpc import LINE_LIMIT, Message, encode, error
from launcher.shared.lines import LineBuffer, LineProtocol


class StdioTransport:
    def __init__(self, feed: Callable[[bytes], None], on_end: Callable[[], None]) -> None:
        self._feed = feed
        self._on_end = on_end
        self._writer: asyncio.StreamWriter | None = None
        self._write_lock = threading.Lock()
        # What is delivered before the writer is connected, written once it is.
        self._early: list[bytes] | None = []

    async def open(self) -> None:
        await self._connect_writer()
        loop = asyncio.get_running_loop()
        lines = LineBuffer(self._feed, LINE_LIMIT, self._oversized)

        def end_of_input() -> None:
            lines.close()
            self._on_end()

        if _pollable(sys.stdin.fileno()):
            await loop.connect_read_pipe(lambda: LineProtocol(lines, self._on_end), sys.stdin)
        else:

            def pump() -> None:
                for data in iter(lambda: os.read(sys.stdin.fileno(), 1 << 16), b""):
                    loop.call_soon_threadsafe(lines.feed, data)
                loop.call_soon_threadsafe(end_of_input)

            threading.Thread(target=pump, daemon=True).start()

    async def _connect_writer(self) -> None:
        """The pipe transport on stdout (none when stdout is a file: written directly); what
        was delivered before is written through it, in order."""
        try:
            transport, protocol = await asyncio.get_running_loop().connect_write_pipe(
                asyncio.streams.FlowControlMixin, sys.stdout
            )
            self._writer = asyncio.StreamWriter(
                transport, protocol, None, asyncio.get_running_loop()
            )
        except (ValueError, OSError):
            self._writer = None
        early, self._early = self._early, None
        for data in early or ():
            self._write(data)

    def _oversized(self) -> None:
        self.deliver(error(None, PARSE_ERROR, "message too large"))

    def deliver(self, message: Message, related: str | int | None = None) -> None:
        data = encode(message)
        if self._early is not None:
            self._early.append(data)
        else:
            self._write(data)

    def _write(self, data: bytes) -> None:
        if self._writer is not None:
            self._writer.write(data)
        else:
            with self._write_lock:
                sys.stdout.buffer.write(data)
                sys.stdout.buffer.flush()

    def backlog(self) -> int:
        if self._writer is not None:
            return self._writer.transport.get_write_buffer_size()
        return 0

    async def close(self) -> None:
        """Write out what is still buffered for the client."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer.drain()


def _pollable(fd: int) -> bool:
    """Whether the event loop's selector can watch ``fd`` (pipes, sockets, ttys can)."""
    selector = selectors.DefaultSelector()
    try:
        selector.register(fd, selectors.EVENT_READ)
    except (OSError, ValueError):
        return False
    finally:
        selector.close()
    return True


async def client_gone(fd: int, every: float = 0.1) -> None:
    """Return once the client has closed its end of ``fd`` (a pipe or socket) having left
    nothing unread in it: it went away before the session was ready to read it. A client
    that wrote its requests and then closed its end has not gone; neither has a terminal,
    a file or ``/dev/null`` (they never hang up): for those this never returns."""
    poller = select.poll()
    try:
        poller.register(fd, 0)  # the hang-up and errors are reported whatever is asked for
    except (OSError, ValueError):
        await asyncio.Event().wait()
    while True:
        for _fd, events in poller.poll(0):
            if events & (select.POLLHUP | select.POLLERR) and _unread(fd) == 0:
                return
        await asyncio.sleep(every)


def _unread(fd: int) -> int:
    """Bytes waiting to be read from ``fd`` (-1: it cannot say)."""
    count = array.array("i", [0])
    try:
        fcntl.ioctl(fd, termios.FIONREAD, count)
    except OSError:
        return -1
    return count[0]
