"""One downstream MCP server: a (sandboxed) child process spoken to in raw JSON-RPC over stdio.

Messages are relayed as plain dicts; nothing is rebuilt through SDK models. Which protocol
era a server is spoken to in, and what that era asks of each request, is
:mod:`launcher.servers.eras`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from launcher.host.launch_spec import LaunchSpec as LaunchSpec
from launcher.host.oscalls import pidfd_open
from launcher.host.proctree import Member, kill, over_limits, process_tree
from launcher.servers import eras
from launcher.shared.error_codes import INTERNAL_ERROR
from launcher.shared.jsonrpc import (
    HANDSHAKE,
    LINE_LIMIT,
    STATELESS,
    ClientSide,
    Message,
    OnDone,
    ServerGone,
    encode,
    loads,
)
from launcher.shared.lines import LineBuffer, LineProtocol

NotificationHandler = Callable[["ServerConnection", Message], None]
RequestHandler = Callable[[Any, Message], None]  # (the connection, the request)


class ServerConnection:
    def __init__(
        self,
        spec: LaunchSpec,
        on_notification: NotificationHandler | None = None,
        client: ClientSide | None = None,
    ):
        self.spec = spec
        self.client_capabilities = client or ClientSide()
        # Where the server's requests of the client go (elicitation, sampling): set by the
        # relay core; None until then, and such a request is refused.
        self.on_request: RequestHandler | None = None
        self.name = spec.name
        self._on_notification = on_notification
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[OnDone, Any]] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._stdin: asyncio.WriteTransport | None = None
        self._transports: list[asyncio.BaseTransport] = []
        self._stdout_open = True
        self._returncode: int | None = None
        self._exit: asyncio.Future[int | None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.pid: int | None = None
        self.gone: ServerGone | None = None
        self.limit_reason: str | None = None
        self.exited = asyncio.Event()
        self.restarting = False  # set by the session while a restart is on its way
        self.stderr_tail: list[str] = []
        self.initialize_result: Message = {}
        self.era = HANDSHAKE  # the protocol era it is spoken to in, once initialized
        # Whether it refused the era offered first (so it serves only the one it is in).
        self.one_era = False
        # Seconds ``server/discover`` is waited for when offered first, and how long the
        # opening took (started to answered).
        self.patience = eras.DISCOVER_TIMEOUT
        self.opened_in = 0.0
        self._envelope: Message | None = None  # the _meta of each request, in the newer era
        self.tools: list[Message] = []
        self.prompts: list[Message] = []
        self.resources: list[Message] = []
        self.resource_templates: list[Message] = []

    def another(
        self, client: ClientSide, on_notification: NotificationHandler | None
    ) -> ServerConnection:
        """Another instance of this server (not started), told ``client`` of its client."""
        return ServerConnection(self.spec, on_notification, client)

    async def start(self, proc: subprocess.Popen[bytes] | None = None) -> None:
        """Start the process (or take over ``proc``, started from this connection's spec and
        not yet spoken to). Its pipes are read by plain protocols (not a subprocess
        transport, which hands every read on through one more trip round the event loop),
        and its exit is watched through a pidfd."""
        loop = asyncio.get_running_loop()
        self._exit = loop.create_future()
        if proc is None:
            proc = self.spec.spawn()
        self._proc, self.pid = proc, proc.pid
        assert proc.stdin and proc.stdout and proc.stderr
        stdout = LineBuffer(self._on_stdout_line, LINE_LIMIT, self._on_oversized)
        stderr = LineBuffer(self._on_stderr_line, LINE_LIMIT)
        stdin, _ = await loop.connect_write_pipe(asyncio.Protocol, proc.stdin)
        self._stdin = stdin  # a write transport (another loop's need not subclass asyncio's)
        out, _ = await loop.connect_read_pipe(
            lambda: LineProtocol(stdout, self._stdout_closed), proc.stdout
        )
        err, _ = await loop.connect_read_pipe(lambda: LineProtocol(stderr), proc.stderr)
        self._transports = [stdin, out, err]
        self._watch_exit(loop, proc)
        limits = self.spec.profile.limits if self.spec.profile else None
        if limits is not None and (limits.memory or limits.processes or limits.cpu_seconds):
            self._tasks.append(asyncio.create_task(self._watch_limits()))

    def _watch_exit(self, loop: asyncio.AbstractEventLoop, proc: subprocess.Popen[bytes]) -> None:
        pidfd = pidfd_open(proc.pid)
        if pidfd is None:  # not Linux >= 5.3: a thread waits instead

            def wait() -> None:
                proc.wait()
                loop.call_soon_threadsafe(self._process_exited)

            threading.Thread(target=wait, daemon=True).start()
            return

        def exited() -> None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
            self._process_exited()

        loop.add_reader(pidfd, exited)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._returncode is None

    async def _watch_limits(self, interval: float = 0.5) -> None:
        """Stop the server when its whole process tree goes over a limit (the rlimits set in
        the child bound each process; this bounds the tree), and say why it stopped."""
        assert self.pid is not None and self.spec.profile is not None
        limits = self.spec.profile.limits
        while self.running:
            await asyncio.sleep(interval)
            if not self.running:
                return  # reaped meanwhile: its pid may be another process's now
            tree = process_tree(self.pid)
            if not tree:
                return
            reason = over_limits(limits, tree)
            if reason:
                self.halt(reason, tree)
                return

    def halt(self, reason: str, tree: list[Member] | None = None) -> None:
        """Kill the server's whole process tree now; its calls, and every later one, are
        answered ``server 'x' was stopped: <reason>``."""
        if self.limit_reason is not None or self.pid is None:
            return
        self.limit_reason = reason
        self._log(f"stopped: {reason}")
        if self._returncode is not None:
            return  # it has exited and been reaped: its pid may be another process's now
        if tree is None:
            tree = process_tree(self.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        kill(tree)

    @property
    def roots(self) -> tuple[Message, ...]:
        """What it is told its client's roots are (what its sandbox holds)."""
        return self.client_capabilities.roots

    async def initialize(self) -> None:
        """Open the conversation, in the era the server serves (:mod:`launcher.servers.eras`)."""
        began = time.monotonic()
        era, self._envelope, self.initialize_result = await eras.opened_with(
            self.request, self.client_capabilities, self.patience
        )
        self.opened_in = time.monotonic() - began
        self.era = era
        self.one_era = (self.client_capabilities.era == STATELESS) != (era == STATELESS)
        if era == HANDSHAKE:
            self.notify("notifications/initialized", None)
            return
        wanted = eras.list_changes(self.capabilities)
        if wanted:  # its lists' changes, on a listen of ironcurtain's own for the session
            with contextlib.suppress(ServerGone, OSError):
                self.send_request("subscriptions/listen", {"notifications": wanted}, _no_answer)

    @property
    def capabilities(self) -> Message:
        caps = self.initialize_result.get("capabilities")
        return caps if isinstance(caps, dict) else {}

    async def list_all(self, method: str, key: str) -> list[Message]:
        """Every page of a ``*/list`` method."""
        items: list[Message] = []
        cursor: str | None = None
        while True:
            response = await self.request(method, {"cursor": cursor} if cursor else {})
            if "error" in response:
                raise RuntimeError(f"{method} failed: {response['error'].get('message')}")
            result = response.get("result") or {}
            items.extend(t for t in result.get(key, []) if isinstance(t, dict))
            cursor = result.get("nextCursor")
            if not cursor:
                return items

    async def list_tools(self) -> list[Message]:
        self.tools = await self.list_all("tools/list", "tools")
        return self.tools

    async def list_extras(self) -> None:
        """Prompts and resources, where the server offers them; a server that declares a
        capability but fails to list it simply contributes nothing."""
        caps = self.capabilities
        with contextlib.suppress(RuntimeError):
            if "prompts" in caps:
                self.prompts = await self.list_all("prompts/list", "prompts")
        with contextlib.suppress(RuntimeError):
            if "resources" in caps:
                self.resources = await self.list_all("resources/list", "resources")
                self.resource_templates = await self.list_all(
                    "resources/templates/list", "resourceTemplates"
                )

    # -- messaging -------------------------------------------------------------------------

    def _write(self, message: Message) -> None:
        if self.gone is not None:
            raise self.gone
        if self.limit_reason is not None:
            raise ServerGone(self.name, None, self.limit_reason)
        assert self._stdin is not None
        if self._stdin.is_closing():
            raise ServerGone(self.name, self._returncode, self.limit_reason)
        self._stdin.write(encode(message))

    def send_request(
        self, method: str, params: Message | None, on_done: OnDone, timeout: float | None = None
    ) -> int:
        """Write a request now; ``on_done`` is called once, from the callback that read the
        answer, with the whole response message (``result`` or ``error``), or with
        ``ServerGone`` or ``TimeoutError`` (the server is then told it was cancelled).
        Raises ``ServerGone`` when the server is not running. Returns the request's id.

        No task and no future: the answer is handled in the same trip round the event loop
        that read it, which is most of what a relayed call costs."""
        request_id = next(self._ids)
        message: Message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if self._envelope is not None:  # the stateless era: each request says it all
            params = eras.enveloped(params, self._envelope)
        if params is not None:
            message["params"] = params
        self._write(message)
        timer = None
        if timeout is not None:
            loop = asyncio.get_running_loop()
            timer = loop.call_later(timeout, self._expire, request_id)
        self._pending[request_id] = (on_done, timer)
        return request_id

    def cancel_request(self, request_id: int, reason: str) -> bool:
        """Stop waiting for a request and tell the server; False if it was already done."""
        entry = self._pending.pop(request_id, None)
        if entry is None:
            return False
        if entry[1] is not None:
            entry[1].cancel()
        with contextlib.suppress(ServerGone, OSError):
            self.notify("notifications/cancelled", {"requestId": request_id, "reason": reason})
        return True

    def _expire(self, request_id: int) -> None:
        entry = self._pending.get(request_id)
        if entry is not None and self.cancel_request(request_id, "timed out in ironcurtain"):
            entry[0](TimeoutError())

    def _complete(self, request_id: int, outcome: Message | BaseException) -> None:
        entry = self._pending.pop(request_id, None)
        if entry is not None:
            if entry[1] is not None:
                entry[1].cancel()
            entry[0](outcome)

    async def request(
        self, method: str, params: Message | None, timeout: float | None = None
    ) -> Message:
        """Send a request and wait for its whole response message (``result`` or
        ``error``); ``TimeoutError`` after ``timeout`` seconds."""
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()

        def done(outcome: Message | BaseException) -> None:
            if future.done():
                return
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)

        request_id = self.send_request(method, params, done, timeout)
        try:
            return await future
        except asyncio.CancelledError:
            self.cancel_request(request_id, "cancelled")
            raise

    def reply(self, request_id: object, outcome: Message) -> None:
        """Answer a request the server made (``outcome`` holds ``result`` or ``error``)."""
        self._write({"jsonrpc": "2.0", "id": request_id, **outcome})

    def notify(self, method: str, params: Message | None) -> None:
        message: Message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._write(message)

    def _on_stdout_line(self, line: bytes) -> None:
        try:
            message = loads(line)
        except (ValueError, RecursionError):
            if line.strip():
                self._log("sent output that is not JSON; ignored")
            return
        if isinstance(message, dict):
            self._dispatch(message)

    def _on_oversized(self) -> None:
        self._log("sent a line longer than the limit; dropped it")

    def _dispatch(self, message: Message) -> None:
        if "method" not in message:
            key = message.get("id")
            if type(key) is int:  # our ids are plain ints
                self._complete(key, message)
            return
        if "id" in message:
            self._server_request(message)
            return
        if self._on_notification is not None:
            self._on_notification(self, message)

    def _server_request(self, message: Message) -> None:
        """A request of the server's: ``ping`` and ``roots/list`` are answered here (the
        same for any client); elicitation and sampling go to the relay core."""
        method = message["method"]
        outcome: Message
        if method == "ping":
            outcome = {"result": {}}
        elif method == "roots/list":
            outcome = {"result": {"roots": list(self.client_capabilities.roots)}}
        elif self.on_request is not None:
            self.on_request(self, message)
            return
        else:
            text = f"{method} is not available: no client is connected to ironcurtain yet"
            outcome = {"error": {"code": INTERNAL_ERROR, "message": text}}
        with contextlib.suppress(ServerGone, OSError):
            self.reply(message["id"], outcome)

    def _on_stderr_line(self, line: bytes) -> None:
        from launcher.shared.shown import visible  # the operator's terminal is not the server's

        text = visible(line.decode("utf-8", "replace").rstrip(), one_line=True)
        self.stderr_tail = [*self.stderr_tail[-19:], text]
        self._log(text)

    def _log(self, text: str) -> None:
        print(f"[{self.name}] {text}", file=sys.stderr, flush=True)

    # -- exit and stopping -----------------------------------------------------------------

    def _stdout_closed(self) -> None:
        self._stdout_open = False
        self._maybe_gone()

    def _process_exited(self) -> None:
        assert self._proc is not None
        self._returncode = self._proc.wait()  # it has exited: this only reaps it
        if self._exit is not None and not self._exit.done():
            self._exit.set_result(self._returncode)
        self._maybe_gone()

    def _maybe_gone(self) -> None:
        """Gone once it has exited and everything it wrote has been read."""
        if self._stdout_open or self._returncode is None or self.gone is not None:
            return
        self.gone = ServerGone(self.name, self._returncode, self.limit_reason)
        for request_id in list(self._pending):
            self._complete(request_id, self.gone)
        self.exited.set()

    async def stop(self, grace: float = 0.6) -> None:
        """Close stdin, then SIGTERM, then SIGKILL the whole process tree; at most ~2 s."""
        pid = self.pid
        if self._proc is None or pid is None:
            return
        # Once reaped, its pid may be another process's: then there is no tree to look at.
        tree = process_tree(pid) if self._returncode is None else []
        if self._returncode is None:
            if self._stdin is not None:
                with contextlib.suppress(OSError):
                    self._stdin.close()
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if await self._wait(grace):
                    break
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, sig)
            await self._wait(grace)
        kill(tree[1:])  # anything that left the process group
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for transport in self._transports:
            transport.close()

    async def _wait(self, timeout: float) -> bool:
        assert self._exit is not None
        try:
            await asyncio.wait_for(asyncio.shield(self._exit), timeout)
        except TimeoutError:
            return False
        return True


def _no_answer(outcome: Message | BaseException) -> None:
    """An answer nobody waits for."""
