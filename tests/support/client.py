"""A raw JSON-lines MCP client: one message a line on a server's stdin and stdout, nothing
in between (no SDK), so a test can send what a real client never would and a benchmark
measures the server, not a client library. Used by the tests and by ``scripts/benchlib.py``:
it imports nothing of pytest or of the tests."""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any

Message = dict[str, Any]
PROTOCOL = "2025-11-25"
HELD: list[Client] | None = None
"""Every client started since ``hold`` (the tests call it): what a test left open is
released after it (``release_since``). None: nothing is held (a benchmark's many starts)."""


def hold() -> None:
    """From now on every client started is held until ``release_since`` lets it go."""
    global HELD
    if HELD is None:
        HELD = []


class Client:
    """A process spoken to in JSON lines. Every read waits at most ``timeout`` seconds
    (None: for ever) and raises TimeoutError after that, EOFError when the stream ends."""

    def __init__(self, proc: subprocess.Popen[bytes], timeout: float | None = 60) -> None:
        assert proc.stdin and proc.stdout
        self.proc = proc
        program = proc.args[0] if isinstance(proc.args, list) else proc.args
        self.name = os.path.basename(str(program))
        self.timeout = timeout
        self._stdout = proc.stdout.fileno()
        self._buffer = bytearray()
        self._ids = itertools.count()
        if HELD is not None:
            HELD.append(self)

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: str | os.PathLike[str] | None = None,
        *,
        stderr: int | None = subprocess.DEVNULL,
        pass_fds: Sequence[int] = (),
        new_session: bool = False,
        timeout: float | None = 60,
    ) -> Client:
        """Start ``argv`` with pipes on stdin and stdout (stderr: DEVNULL, PIPE, or None for
        the caller's); ``new_session`` puts it in its own process group."""
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=dict(env),
            cwd=cwd,
            pass_fds=tuple(pass_fds),
            start_new_session=new_session,
        )
        return cls(proc, timeout)

    # -- writing -------------------------------------------------------------------------

    def send(self, message: Mapping[str, Any] | bytes) -> None:
        """One line: a message, or bytes as they are (for what json.dumps would not write)."""
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        assert self.proc.stdin
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def request(
        self, method: str, params: Mapping[str, Any] | None = None, *, id: object = None
    ) -> object:
        """Send a request (the next free number as its id unless given); its id."""
        request_id = next(self._ids) if id is None else id
        message: Message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)
        return request_id

    def notify(self, method: str, params: Mapping[str, Any] | None = None) -> None:
        message: Message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    # -- reading -------------------------------------------------------------------------

    def receive(self, timeout: float | None = None) -> Message:
        """The next message, whatever it is."""
        line = self._line(self.timeout if timeout is None else timeout)
        if not line:
            raise EOFError(f"{self.name} ended its output")
        # Strictly JSON (no NaN or Infinity, which Python alone would take): what a client
        # in another language can parse.
        message: Message = json.loads(line, parse_constant=_not_json)
        return message

    def answer(self, request_id: object, timeout: float | None = None) -> Message:
        """The answer to ``request_id``; notifications before it are passed over, anything
        else is an error (a test that expects other messages reads them with receive)."""
        while True:
            message = self.receive(timeout)
            if "id" in message and "method" not in message:
                if message["id"] != request_id:
                    raise AssertionError(f"expected the answer to {request_id!r}: {message}")
                return message
            if "id" in message:
                raise AssertionError(f"a request while waiting for {request_id!r}: {message}")

    def ask(
        self, method: str, params: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> Message:
        """A request and its answer."""
        return self.answer(self.request(method, params), timeout)

    def call(
        self, tool: str, arguments: Mapping[str, Any], timeout: float | None = None
    ) -> Message:
        """One ``tools/call``; its answer (a result or an error, as it came)."""
        return self.ask("tools/call", {"name": tool, "arguments": arguments}, timeout)

    def start_initialize(
        self,
        capabilities: Mapping[str, Any] | None = None,
        client: str = "test",
        protocol: str = PROTOCOL,
    ) -> object:
        """Send ``initialize`` without waiting for its answer (a benchmark starting many
        servers at once does); its id."""
        params = {
            "protocolVersion": protocol,
            "capabilities": dict(capabilities or {}),
            "clientInfo": {"name": client, "version": "0"},
        }
        return self.request("initialize", params)

    def initialize(
        self,
        capabilities: Mapping[str, Any] | None = None,
        client: str = "test",
        protocol: str = PROTOCOL,
        timeout: float | None = None,
    ) -> Message:
        """The handshake: ``initialize``, its answer (returned), ``notifications/initialized``."""
        answer = self.answer(self.start_initialize(capabilities, client, protocol), timeout)
        self.notify("notifications/initialized")
        return answer

    def rest(self, timeout: float | None = None) -> bytes:
        """Everything still to come, up to the end of the stream."""
        timeout = self.timeout if timeout is None else timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        out = bytes(self._buffer)
        self._buffer.clear()
        while chunk := self._read(deadline):
            out += chunk
        return out

    def _line(self, timeout: float | None) -> bytes:
        """The next line with its newline; what is left without one at the end; b"" after."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while (end := self._buffer.find(b"\n")) < 0:
            chunk = self._read(deadline)
            if not chunk:
                line = bytes(self._buffer)
                self._buffer.clear()
                return line
            self._buffer += chunk
        line = bytes(self._buffer[: end + 1])
        del self._buffer[: end + 1]
        return line

    def _read(self, deadline: float | None) -> bytes:
        if deadline is not None:
            left = max(0.0, deadline - time.monotonic())
            if not select.select([self._stdout], [], [], left)[0]:
                raise TimeoutError(f"nothing from {self.name} within the time")
        return os.read(self._stdout, 1 << 16)

    # -- the end -------------------------------------------------------------------------

    def hang_up(self) -> None:
        """Close its stdin: the client is gone (the end of the session)."""
        assert self.proc.stdin
        if not self.proc.stdin.closed:
            self.proc.stdin.close()

    def close(self, timeout: float = 5) -> int:
        """Hang up and wait for it; killed (its process group when it has its own) if it is
        not gone within ``timeout`` seconds. Its exit status."""
        self.hang_up()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.wait()

    def kill(self) -> None:
        if self.proc.poll() is not None:
            return
        try:
            if os.getpgid(self.proc.pid) == self.proc.pid:
                os.killpg(self.proc.pid, signal.SIGKILL)
                return
        except ProcessLookupError:
            return
        self.proc.kill()

    def release(self) -> None:
        """Its process killed if still running, reaped, and every pipe to it closed."""
        self.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()

    def __del__(self) -> None:
        # A client dropped once its process has ended (a loop's previous one): its pipes are
        # closed here rather than left to the garbage collector, which would only warn. One
        # still running is left alone: whoever kept its process (``.proc``) still uses it.
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is not None:
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()


def release_since(mark: int) -> None:
    """Every client held since ``len(HELD)`` was ``mark`` released (a test's end: what it
    read is read by now); those held before (a longer-lived fixture's) are left."""
    while HELD is not None and len(HELD) > mark:
        HELD.pop().release()


def _not_json(name: str) -> object:
    raise ValueError(f"{name} is not a JSON value: the peer wrote invalid JSON")
