"""``ironcurtain run``: start the servers, serve one MCP endpoint on stdio, check every call."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import os
import selectors
import shutil
import signal
import sys
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import psutil

from launcher import acl, dirs
from launcher.approval import APPROVALS_SOCKET, Approvals, Terminals
from launcher.audit import AuditLog, Prepared, argument_hashes, hash_value, hashed_arguments
from launcher.breaker import CircuitBreaker
from launcher.config import RestartConfig
from launcher.egress import EgressProxy, Refusal
from launcher.errors import StartupError
from launcher.guard import Guard, GuardError, GuardFailure, Quarantined
from launcher.http_transport import HttpEndpoint
from launcher.jsonrpc import (
    LATEST_PROTOCOL,
    LINE_LIMIT,
    PROTOCOL_VERSIONS,
    Message,
    ServerGone,
    encode,
)
from launcher.lines import LineBuffer, LineProtocol
from launcher.pins import Pins
from launcher.plan import SessionPlan
from launcher.servers import ServerConnection
from policy import Decision
from sandbox_profiles import write_runtime_files

SEPARATOR = "__"
STARTUP_TIMEOUT = 60.0
FORWARDED_NOTIFICATIONS = ("notifications/progress", "notifications/message")
# Bytes waiting for the client beyond which servers' notifications are dropped.
NOTIFICATION_BACKLOG = 16 * 1024 * 1024


@dataclass(slots=True)
class _Call:
    """One ``tools/call`` on its way through the session."""

    request_id: Any
    params: Message
    started: float
    server: str | None
    tool: str
    transport: dict[str, object]
    conn: ServerConnection | None
    entry: dict[str, Any] = field(default_factory=dict)
    downstream: int | None = None  # the id it was sent to the server with
    prepared: Prepared | None = None  # its audit entry, serialised while the server works


def tool_result(text: str, is_error: bool = True) -> Message:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


class Session:
    def __init__(self, plan: SessionPlan) -> None:
        self.plan = plan
        self.engine = plan.engine
        self.servers = {
            name: ServerConnection(sp.launch, self._on_server_notification)
            for name, sp in plan.servers.items()
        }
        self.routes: dict[str, tuple[str, str]] = {}
        self.exposed_tools: list[Message] = []
        self.prompt_routes: dict[str, tuple[str, str]] = {}
        self.exposed_prompts: list[Message] = []
        self.resource_routes: dict[str, str] = {}
        self.template_prefixes: list[tuple[str, str]] = []
        self.audit: AuditLog | None = None
        self._audit_existed = False
        self._write_lock = threading.Lock()
        self._writer: asyncio.StreamWriter | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()
        self.guard: Guard | None = None
        self.egress: dict[str, EgressProxy] = {}
        self._placeholders: list[str] = []
        self._in_flight: dict[str | int, asyncio.Task[None]] = {}
        self._calls: dict[str | int, _Call] = {}  # forwarded tools/call, by the client's id
        self.approvals = Approvals(
            plan.approval,
            plan.approval_timeout,
            Terminals(os.path.join(plan.runtime_dir, APPROVALS_SOCKET))
            if plan.approval in ("auto", "socket")
            else None,
        )
        self.breaker = CircuitBreaker(plan.max_identical_calls)
        self.pins: dict[str, Pins] = {}
        self.http: HttpEndpoint | None = None
        self._pinning = True
        self._supervisors: list[asyncio.Task[None]] = []
        self.changed_tools: dict[str, dict[str, str]] = {}
        self.client_elicits = False
        self._upstream_ids = itertools.count(1)
        self._upstream_pending: dict[str, asyncio.Future[Message]] = {}
        # Servers the guard stopped (it could not neutralise what their sandbox wrote): why.
        self.halted: dict[str, str] = {}
        self._dropping = False
        self._refreshing: dict[str, bool] = {}  # list refreshes under way: another wanted?
        self.unneutralised: list[GuardFailure] = []

    # -- lifecycle -------------------------------------------------------------------------

    async def collect_tools(self) -> dict[str, list[Message]]:
        """Start every server in its sandbox, list its tools, stop (annotate-tools)."""
        self._pinning = False
        try:
            self._prepare_files()
            await self._start_egress()
            await self._start_servers()
            return {name: list(conn.tools) for name, conn in self.servers.items()}
        finally:
            await self.stop()
            self._remove_unused_files()

    async def collect_listings(self) -> dict[str, dict[str, list[Message]]]:
        """Start every server in its sandbox, list its tools and prompts, stop: for
        annotating them (``annotate-tools``, ``compile-policy``)."""
        self._pinning = False
        try:
            self._prepare_files()
            await self._start_egress()
            await self._start_servers()
            return {
                name: {"tools": list(conn.tools), "prompts": list(conn.prompts)}
                for name, conn in self.servers.items()
            }
        finally:
            await self.stop()
            self._remove_unused_files()

    async def run(self) -> int:
        raise_descriptor_limit()
        try:
            self._prepare_files()
            self._start_guard()
            await self._start_egress()
            if self.approvals.terminals is not None:
                try:
                    await self.approvals.terminals.start()
                except OSError as exc:
                    raise StartupError(f"cannot open the approvals socket: {exc}") from None
            await self._start_servers()
            if self.plan.http_port is not None:
                self.http = HttpEndpoint(self.plan.http_port, self._handle_line)
                try:
                    await self.http.start()
                except OSError as exc:
                    raise StartupError(
                        f"--http {self.plan.http_port}: cannot listen on 127.0.0.1: {exc.strerror}"
                    ) from None
            self._report()
            # What start-up built lives as long as the session: out of the collector's way,
            # so a full collection during a call walks only what calls allocate.
            gc.freeze()
            await self._serve()
        finally:
            await self.stop()
            self._remove_unused_files()
        return 1 if self.unneutralised else 0

    def _prepare_files(self) -> None:
        plan = self.plan
        try:
            if plan.create_workspace:
                os.makedirs(plan.workspace, mode=0o700, exist_ok=True)
            uid, gid = plan.run_as or (os.getuid(), os.getgid())
            sweep_stale_runtime_dirs(os.environ.get("XDG_RUNTIME_DIR") or "/tmp")
            write_runtime_files(plan.runtime_dir, uid, gid)
            with open(os.path.join(plan.runtime_dir, "pid"), "w", encoding="utf-8") as pid:
                pid.write(str(os.getpid()))
            for sp in plan.servers.values():
                for path, is_dir in sp.placeholders:
                    if os.path.lexists(path):
                        continue
                    if is_dir:
                        os.makedirs(path)
                    else:
                        os.makedirs(os.path.dirname(path), exist_ok=True)
                        with open(path, "x", encoding="utf-8"):
                            pass
                    self._placeholders.append(path)
        except OSError as exc:
            raise StartupError(f"cannot create {exc.filename}: {exc.strerror}") from None
        if plan.run_as is not None:
            self._open_roots_to(plan.run_as)
        try:
            self._audit_existed = os.path.exists(plan.audit_path)
            self.audit = AuditLog(plan.audit_path, plan.session_id)
        except OSError as exc:
            raise StartupError(
                f"cannot open the audit log {plan.audit_path}: {exc.strerror}"
            ) from None

    def _writable_roots(self) -> list[str]:
        roots: dict[str, None] = {}
        for sp in self.plan.servers.values():
            if sp.profile is not None:
                roots.update(dict.fromkeys(sp.profile.writable))
        return list(roots)

    def _open_roots_to(self, identity: tuple[int, int]) -> None:
        """Running as root, servers run as ``identity``: make the workspace (and allowWrite
        roots) theirs to use. A workspace this session created is simply given to them; an
        existing one owned by someone else gets an ACL entry, nobody's ownership changes."""
        uid, gid = identity
        roots = self._writable_roots()
        shown = any(
            m.dest == self.plan.workspace
            for sp in self.plan.servers.values()
            if sp.profile is not None
            for m in sp.profile.mounts
        )
        if shown and self.plan.workspace not in roots:
            roots.append(self.plan.workspace)  # shown read-only: still theirs to read
        for root in roots:
            try:
                if root == self.plan.workspace and self.plan.create_workspace:
                    os.chown(root, uid, gid)
                elif os.stat(root).st_uid != uid:
                    acl.grant(root, uid)
            except OSError as exc:
                raise StartupError(
                    f"cannot give the sandbox's user (uid {uid}) access to {root}: "
                    f"{exc.strerror}.\nTo fix: use a workspace on a filesystem with ACLs, or "
                    f"one owned by an ordinary user (servers then run as that user)"
                ) from None

    def _start_guard(self) -> None:
        roots = self._writable_roots()
        if not roots:
            return
        guarded = [p for sp in self.plan.servers.values() for p in sp.guarded]
        quarantine = os.path.join(str(dirs.state_dir()), "quarantine", self.plan.session_id)
        try:
            self.guard = Guard(roots, guarded, quarantine, self._quarantined, self._guard_failed)
            self.guard.start()
        except GuardError as exc:
            raise StartupError(f"cannot watch the workspace for protected files: {exc}") from None

    async def _start_egress(self) -> None:
        for name, sp in self.plan.servers.items():
            if sp.egress is None or sp.egress_socket is None:
                continue
            proxy = EgressProxy(name, sp.egress, sp.egress_socket, self._egress_refused)
            try:
                await proxy.start()
            except OSError as exc:
                raise StartupError(
                    f"cannot start the egress proxy for '{name}' at {sp.egress_socket}: "
                    f"{exc.strerror}"
                ) from None
            self.egress[name] = proxy

    def _egress_refused(self, refusal: Refusal) -> None:
        self._event(
            "egress-refused",
            f"egress refused for '{refusal.server}': "
            f"{refusal.host}:{refusal.port}: {refusal.reason}",
            server=refusal.server,
            host=refusal.host,
            port=refusal.port,
            reason=refusal.reason,
        )

    def _event(self, event: str, text: str, **fields: object) -> None:
        """Something the session did on its own: a stderr line and an audit entry."""
        print(f"ironcurtain: {text}", file=sys.stderr, flush=True)
        if self.audit is not None:
            self.audit.write({"event": event, **fields})

    def _quarantined(self, record: Quarantined) -> None:
        path = _as_text(record.path)
        self._event(
            "quarantine",
            f"quarantined {path} ({record.why}); moved to {record.moved_to}",
            path=path,
            movedTo=record.moved_to,
            reason=record.why,
        )

    def _guard_failed(self, failure: GuardFailure) -> None:
        """The guard could not neutralise something in a writable root: every server that
        can write there is stopped (the guard cannot tell which of them made it), its calls
        refused from now on; the others go on."""
        path = _as_text(failure.path)
        reason = (
            f"the guard could not neutralise {path} in its writable root "
            f"{failure.root} ({failure.reason})"
        )
        stopped = []
        for name, sp in self.plan.servers.items():
            writable = sp.profile.writable if sp.profile is not None else ()
            if failure.root in writable and name not in self.halted:
                self.halted[name] = reason
                if self.servers[name].running:
                    stopped.append(name)
                    self.servers[name].halt(reason)
        self._event(
            "guard-failure",
            f"FAILED CLOSED: {reason}; stopped: {', '.join(stopped) or 'none still running'}",
            root=failure.root,
            path=path,
            reason=failure.reason,
            stopped=stopped,
        )

    def settle(self) -> None:
        """Quarantine whatever protected path a server has created so far. Whatever goes
        wrong in the guard stops the servers that can write to the roots it watches."""
        guard = self.guard
        if guard is None:
            return
        failures = len(guard.failures)
        guard.settle()
        if len(guard.failures) > failures:
            # The servers that could write there are stopped now, so nothing races a sweep:
            # what the events could not show is found and moved out at once.
            guard.sweep()

    def _remove_unused_files(self) -> None:
        """A session leaves nothing behind that it created and never used (an empty
        workspace, an empty audit log), whether it started or not."""
        plan = self.plan
        if self.audit is not None and not self._audit_existed:
            with contextlib.suppress(OSError):
                if os.path.getsize(plan.audit_path) == 0:
                    os.unlink(plan.audit_path)
        if plan.create_workspace:
            with contextlib.suppress(OSError):
                os.rmdir(plan.workspace)  # only if still empty

    async def _start_one(self, conn: ServerConnection) -> None:
        await conn.start()
        await conn.initialize()
        await conn.list_tools()
        await conn.list_extras()

    async def _start_servers(self) -> None:
        conns = list(self.servers.values())
        results = await asyncio.gather(
            *(asyncio.wait_for(self._start_one(c), STARTUP_TIMEOUT) for c in conns),
            return_exceptions=True,
        )
        for conn, result in zip(conns, results, strict=True):
            if isinstance(result, BaseException):
                await asyncio.sleep(0.05)  # let the last stderr lines arrive
                why = "did not answer in time" if isinstance(result, TimeoutError) else result
                tail = "\n".join(f"    {line}" for line in conn.stderr_tail[-8:])
                raise StartupError(
                    f"server '{conn.name}' failed to start: {why}"
                    + (f"\n  its last output:\n{tail}" if tail else "")
                )
        for conn in conns:
            if self._pinning:
                self._check_pins(conn, at_start=True)
        self._build_routes()
        for name, sp in self.plan.servers.items():
            policy = sp.config.restart_policy
            if policy is not None:
                self._supervisors.append(asyncio.create_task(self._supervise(name, policy)))

    def _public(self, server: str, name: str) -> str:
        return f"{server}{SEPARATOR}{name}" if self.plan.prefixed else name

    def _build_routes(self) -> None:
        routes: dict[str, tuple[str, str]] = {}
        exposed: list[Message] = []
        prompt_routes: dict[str, tuple[str, str]] = {}
        prompts: list[Message] = []
        resources: dict[str, str] = {}
        prefixes: list[tuple[str, str]] = []
        for name, conn in self.servers.items():
            for tool in conn.tools:
                public = self._public(name, str(tool.get("name", "")))
                routes[public] = (name, str(tool.get("name", "")))
                exposed.append({**tool, "name": public})
            for prompt in conn.prompts:
                public = self._public(name, str(prompt.get("name", "")))
                prompt_routes[public] = (name, str(prompt.get("name", "")))
                prompts.append({**prompt, "name": public})
            for resource in conn.resources:
                resources.setdefault(str(resource.get("uri", "")), name)
            for template in conn.resource_templates:
                prefix = str(template.get("uriTemplate", "")).split("{", 1)[0]
                if prefix:
                    prefixes.append((prefix, name))
        self.routes, self.exposed_tools = routes, exposed
        self.prompt_routes, self.exposed_prompts = prompt_routes, prompts
        self.resource_routes = resources
        # Longest prefix first, so the most specific template wins.
        self.template_prefixes = sorted(prefixes, key=lambda p: -len(p[0]))

    async def _supervise(self, name: str, policy: RestartConfig) -> None:
        """Restart a server that exits, with back-off, at most ``maxRestarts`` times."""
        for attempt in range(1, policy.max_restarts + 1):
            conn = self.servers[name]
            await conn.exited.wait()
            if name in self.halted:
                return  # stopped by the guard: it stays stopped
            conn.restarting = True
            delay = min(30.0, policy.backoff_seconds * 2 ** (attempt - 1))
            status = conn.gone.status if conn.gone else None
            self._event(
                "server-restart",
                f"server '{name}' exited ({status}); restarting in {delay:g} s "
                f"(restart {attempt} of {policy.max_restarts})",
                server=name,
                exitStatus=status,
                attempt=attempt,
            )
            await asyncio.sleep(delay)
            fresh = ServerConnection(conn.spec, self._on_server_notification)
            try:
                await asyncio.wait_for(self._start_one(fresh), STARTUP_TIMEOUT)
            except Exception as exc:  # it counts as one more exit
                print(f"ironcurtain: restarting '{name}' failed: {exc}", file=sys.stderr)
                await fresh.stop()
                if fresh.gone is None:
                    fresh.gone = ServerGone(name, None, f"it could not be restarted: {exc}")
                fresh.exited.set()
            self.servers[name] = fresh
            await conn.stop()
            if fresh.gone is None:
                self._check_pins(fresh, at_start=False)
                self._build_routes()
                self.send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        self.servers[name].restarting = False

    async def stop(self) -> None:
        for call in list(self._calls.values()):
            self._cancel_call(call, "the session is stopping")
        for task in [*self._tasks, *self._supervisors]:
            task.cancel()
        await asyncio.gather(*self._supervisors, return_exceptions=True)
        await asyncio.gather(*(c.stop() for c in self.servers.values()), return_exceptions=True)
        await asyncio.gather(*(p.stop() for p in self.egress.values()), return_exceptions=True)
        if self.approvals.terminals is not None:
            await self.approvals.terminals.stop()
        if self.guard is not None:
            self.settle()
            self._sweep(self.guard)
            self.guard.close()
        for path in reversed(self._placeholders):
            with contextlib.suppress(OSError):
                if os.path.isdir(path):
                    os.rmdir(path)  # only while still empty
                elif os.path.getsize(path) == 0:
                    os.unlink(path)
        if self.audit is not None:
            self.audit.close()
        shutil.rmtree(self.plan.runtime_dir, ignore_errors=True)

    def _sweep(self, guard: Guard) -> None:
        """The backstop at the end: the roots checked against the catalogue without
        relying on events (each failure is reported as it happens); what is still there and
        cannot be moved is said loudly once more."""
        failed_before = len(guard.failures)
        guard.sweep()
        # The sweep looked at every root again: only what it could not handle is left.
        left = guard.failures[failed_before:]
        self.unneutralised = left
        if left:
            listing = "\n".join(f"  {f.path}: {f.reason}" for f in left)
            print(
                "ironcurtain: WARNING: these paths in the workspace may be loaded or run by "
                "host tools (git, shells, editors) and could not be moved out; inspect and "
                f"remove them before using the workspace:\n{listing}",
                file=sys.stderr,
                flush=True,
            )

    def _box(self, name: str) -> str:
        """How a server is contained, for the start-up report."""
        plan = self.plan
        sp = plan.servers[name]
        if sp.profile is None:
            return "UNSANDBOXED" + (
                f" ({plan.sandbox_problem})"
                if plan.sandbox_problem and sp.config.sandboxed
                else " (sandbox: false)"
            )
        net = "no network"
        if sp.egress is not None:
            count = len(sp.egress.allowed)
            net = f"egress proxy: {count} domain{'s' if count != 1 else ''}"
        return f"sandboxed (bwrap, {net}" + (")" if sp.profile.seccomp else ", NO seccomp filter)")

    def _report(self) -> None:
        plan = self.plan
        lines = [f"ironcurtain: session {plan.session_id}"]
        width = max(len(n) for n in self.servers)
        boxes = {name: self._box(name) for name in self.servers}
        box_width = max(32, *(len(b) for b in boxes.values()))
        for name, conn in self.servers.items():
            count = len(conn.tools)
            lines.append(
                f"  {name:<{width}}  {boxes[name]:<{box_width}} "
                f"{count} tool{'' if count == 1 else 's'}"
            )
        if plan.run_as is not None:
            uid, gid = plan.run_as
            lines.append(f"  servers run as uid {uid}, gid {gid} (ironcurtain runs as root)")
        # Per sandboxed server: how it sees the workspace, and the limits in force.
        access: dict[str, list[str]] = {}
        limits: dict[str, list[str]] = {}
        for name, sp in plan.servers.items():
            if sp.profile is not None:
                access.setdefault(sp.workspace_access, []).append(name)
                limits.setdefault(sp.profile.limits.describe(), []).append(name)
        seen = "; ".join(
            f"{label}: {', '.join(access[key])}"
            for key, label in (("write", "writable"), ("read", "read-only"), ("none", "not shown"))
            if key in access
        )
        lines.append(f"  workspace:  {plan.workspace}" + (f" ({seen})" if seen else ""))
        lines += [f"  limits:     {', '.join(names)}: {text}" for text, names in limits.items()]
        lines += [
            f"  audit log:  {plan.audit_path}",
            f"  config:     {plan.config.path} ({plan.config.source})",
            f"  policy:     {plan.policy.directory}",
            f"  approvals:  {_approval_channels(plan.approval, plan.session_id)}",
        ]
        if self.http is not None:
            lines.append(f"ironcurtain: bearer token: {self.http.token}")
            lines.append("ironcurtain: client configuration for this session:")
            entry = {
                "type": "http",
                "url": self.http.url,
                "headers": {"Authorization": f"Bearer {self.http.token}"},
            }
            lines.append(json.dumps({"mcpServers": {"ironcurtain": entry}}, indent=2))
            lines.append(f"ironcurtain: ready, serving MCP on {self.http.url} (Ctrl-C stops)")
        else:
            if sys.stdin.isatty():
                lines.append("ironcurtain: client configuration for this session:")
                lines.append(client_entry(plan))
            lines.append("ironcurtain: ready, serving MCP on stdio (end of input or Ctrl-C stops)")
        print("\n".join(lines), file=sys.stderr, flush=True)

    # -- upstream --------------------------------------------------------------------------

    async def _open_stdio(self) -> None:
        """Read the client's lines as they arrive (each handled in the callback that got it),
        and write answers through a pipe transport. End of input stops the session."""
        loop = asyncio.get_running_loop()
        lines = LineBuffer(self._handle_line, LINE_LIMIT, self._oversized_request)

        def end_of_input() -> None:
            lines.close()
            self._stop.set()

        if _pollable(sys.stdin.fileno()):
            await loop.connect_read_pipe(lambda: LineProtocol(lines, self._stop.set), sys.stdin)
        else:
            # A regular file or /dev/null on stdin (epoll refuses both): read it in a thread.
            def pump() -> None:
                for data in iter(lambda: os.read(sys.stdin.fileno(), 1 << 16), b""):
                    loop.call_soon_threadsafe(lines.feed, data)
                loop.call_soon_threadsafe(end_of_input)

            threading.Thread(target=pump, daemon=True).start()
        try:
            transport, protocol = await loop.connect_write_pipe(
                asyncio.streams.FlowControlMixin, sys.stdout
            )
            self._writer = asyncio.StreamWriter(transport, protocol, None, loop)
        except (ValueError, OSError):
            self._writer = None

    def _oversized_request(self) -> None:
        self.send(_error(None, -32700, "message too large"))

    def send(self, message: Message) -> None:
        if self.http is not None:
            self.http.deliver(message)
            return
        data = encode(message)
        if self._writer is not None:
            self._writer.write(data)
        else:
            with self._write_lock:
                sys.stdout.buffer.write(data)
                sys.stdout.buffer.flush()

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        if self.guard is not None:
            # Between calls too: a server's background process is caught as it writes.
            loop.add_reader(self.guard.fd, self.settle)
        if self.http is None:
            await self._open_stdio()
        try:
            await self._stop.wait()
            # Requests read before the input ended (a file on stdin) are still answered,
            # given a moment; what waits longer (a human's approval) is cancelled at stop.
            pending = [t for t in self._tasks if not t.done()]
            if pending:
                await asyncio.wait(pending, timeout=0.5)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            if self.guard is not None:
                loop.remove_reader(self.guard.fd)
            if self.http is not None:
                await self.http.stop()
            elif self._writer is not None:
                with contextlib.suppress(Exception):
                    await self._writer.drain()

    def _handle_line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = json.loads(line)
        except ValueError:
            self.send(_error(None, -32700, "parse error: not JSON"))
            return
        if not isinstance(message, dict):
            return  # a batch: ignored
        # Nothing the audit log cannot hold reaches a server: a string with no UTF-8 form (a
        # lone surrogate, which a "\ud800" escape gives) is refused here, cheaply on the call
        # path (a call's arguments are hashed, which fails on one, before anything is sent).
        no_utf8 = "holds a lone surrogate (\\ud800-\\udfff), which has no UTF-8 form"
        request_id = message.get("id")
        if type(request_id) is not int and _unencodable(request_id):
            if "method" in message:
                self.send(_error(None, -32600, f"invalid request: its id {no_utf8}"))
            return
        if "method" not in message:
            # The client's answer to a request of ours (an elicitation), else nothing.
            key = message.get("id")
            future = self._upstream_pending.pop(key, None) if isinstance(key, str) else None
            if future is not None and not future.done():
                future.set_result(message)
            return
        if message["method"] == "tools/call" and "id" in message:
            params = message.get("params")
            params = params if isinstance(params, dict) else {}
            if _unencodable(params.get("name")) or (
                len(params) > 2
                and _unencodable({k: v for k, v in params.items() if k != "arguments"})
            ):
                self.send(_error(request_id, -32600, f"invalid request: its params {no_utf8}"))
                return
            try:
                self._tools_call(request_id, params)
            except UnicodeEncodeError:  # from hashing its arguments: nothing was sent
                self.send(_error(request_id, -32600, f"invalid request: an argument {no_utf8}"))
            except Exception as exc:  # never take the session down for one request
                self.send(_error(request_id, -32603, f"internal error: {exc}"))
            return
        if _unencodable(message):  # not the call path: the whole message is checked
            if "id" in message:
                self.send(_error(request_id, -32600, f"invalid request: a string in it {no_utf8}"))
            return
        self._spawn(self._handle(message))

    async def _handle(self, message: Message) -> None:
        method = message.get("method")
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        assert isinstance(params, dict)
        if "id" not in message:
            await self._client_notification(method, params)
            return
        request_id = message["id"]
        task = asyncio.current_task()
        if task is not None and isinstance(request_id, str | int):
            self._in_flight[request_id] = task
        try:
            result = await self._request(str(method), params, request_id)
        except asyncio.CancelledError:
            return  # the client cancelled it: no response (MCP), the server was told
        except _RpcError as exc:
            self.send(_error(request_id, exc.code, exc.message))
            return
        except Exception as exc:  # never take the session down for one request
            self.send(_error(request_id, -32603, f"internal error: {exc}"))
            return
        finally:
            self._in_flight.pop(request_id, None)
        if result is not None:
            self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    async def _request(self, method: str, params: Message, request_id: Any) -> Message | None:
        if method == "initialize":
            client_caps = params.get("capabilities")
            self.client_elicits = isinstance(client_caps, dict) and bool(
                client_caps.get("elicitation") is not None
            )
            requested = params.get("protocolVersion")
            version = requested if requested in PROTOCOL_VERSIONS else LATEST_PROTOCOL
            capabilities: Message = {"tools": {"listChanged": True}, "logging": {}}
            if any(c.prompts for c in self.servers.values()):
                capabilities["prompts"] = {}
            if any(c.resources or c.resource_templates for c in self.servers.values()):
                capabilities["resources"] = {}
            return {
                "protocolVersion": version,
                "capabilities": capabilities,
                "serverInfo": {"name": "ironcurtain", "version": "0.1.0"},
                "instructions": "Tools of several MCP servers, each sandboxed; every call is "
                "checked by policy. Denied calls return an error result starting with DENIED.",
            }
        if method == "ping" or method == "logging/setLevel":
            return {}
        if method == "tools/list":
            return {"tools": self.exposed_tools}
        if method == "prompts/list":
            return {"prompts": self.exposed_prompts}
        if method == "prompts/get":
            route = self.prompt_routes.get(str(params.get("name")))
            if route is None:
                raise _RpcError(-32602, f"unknown prompt: {params.get('name')}")
            return await self._forward(route[0], method, {**params, "name": route[1]})
        if method == "resources/list":
            return {"resources": [r for c in self.servers.values() for r in c.resources]}
        if method == "resources/templates/list":
            return {
                "resourceTemplates": [
                    t for c in self.servers.values() for t in c.resource_templates
                ]
            }
        if method == "resources/read":
            return await self._read_resource(params, request_id)
        raise _RpcError(-32601, f"method not found: {method}")

    async def _forward(self, server: str, method: str, params: Message) -> Message:
        conn = self.servers[server]
        try:
            response = await conn.request(method, params, conn.spec.timeout)
        except ServerGone as gone:
            raise _RpcError(-32603, str(gone)) from None
        except TimeoutError:
            raise _RpcError(-32001, f"server '{server}' did not answer in time") from None
        if "error" in response:
            err = response["error"] if isinstance(response["error"], dict) else {}
            raise _RpcError(int(err.get("code", -32603)), str(err.get("message", "error")))
        result = response.get("result")
        return result if isinstance(result, dict) else {}

    def _resource_server(self, uri: str) -> str | None:
        if uri in self.resource_routes:
            return self.resource_routes[uri]
        for prefix, server in self.template_prefixes:
            if uri.startswith(prefix):
                return server
        return None

    async def _read_resource(self, params: Message, request_id: Any) -> Message:
        """``resources/read``: routed by URI; ``file://`` URIs are checked as read-paths."""
        started = time.perf_counter()
        uri = params.get("uri")
        server = self._resource_server(uri) if isinstance(uri, str) else None
        if server is None or not isinstance(uri, str):
            raise _RpcError(-32002, "resource not found")
        cwd = self.plan.servers[server].cwd
        decision, forward_uri = self.engine.decide_resource_read(server, uri, cwd)
        entry = self._entry(request_id, server, "resources/read", {"uri": forward_uri}, decision)
        assert self.audit is not None
        if not self.audit.check() or decision.decision != "allow":
            self._finish(entry, started, "denied")
            if not self.audit.healthy:
                decision = Decision(
                    "deny", "audit-log-unwritable", "the audit log cannot be written"
                )
            raise _RpcError(-32001, denial_text(decision))
        try:
            result = await self._forward(server, "resources/read", {**params, "uri": forward_uri})
        except _RpcError:
            self._finish(entry, started, "error")
            raise
        self._finish(entry, started, "success")
        return result

    async def _client_notification(self, method: Any, params: Message) -> None:
        if method == "notifications/cancelled":
            # Stop waiting for the call; the server gets its own notifications/cancelled.
            request_id = params.get("requestId")
            if not isinstance(request_id, str | int):
                return
            call = self._calls.get(request_id)
            if call is not None:
                self._cancel_call(call, "cancelled")
                return
            task = self._in_flight.get(request_id)
            if task is not None:
                task.cancel()

    def _on_server_notification(self, conn: ServerConnection, message: Message) -> None:
        method = message.get("method")
        if method in FORWARDED_NOTIFICATIONS:
            if self._backlog() > NOTIFICATION_BACKLOG:
                # The client is not reading: a server's progress and log messages are
                # dropped rather than held without limit (answers are never dropped).
                if not self._dropping:
                    print(
                        f"ironcurtain: the client is not reading; dropping notifications from "
                        f"'{conn.name}' until it catches up",
                        file=sys.stderr,
                        flush=True,
                    )
                self._dropping = True
                return
            self._dropping = False
            self.send(message)
        elif method == "notifications/tools/list_changed":
            # One refresh per server at a time; changes meanwhile make one more.
            if conn.name in self._refreshing:
                self._refreshing[conn.name] = True
                return
            self._refreshing[conn.name] = False
            self._spawn(self._tools_changed(conn))

    def _backlog(self) -> int:
        """Bytes (stdio) or messages (HTTP) written for the client and not yet taken."""
        if self.http is not None:
            return self.http.backlog() * 1024
        if self._writer is not None:
            return self._writer.transport.get_write_buffer_size()
        return 0

    async def _tools_changed(self, conn: ServerConnection) -> None:
        try:
            while True:
                with contextlib.suppress(Exception):
                    await conn.list_tools()
                    self._check_pins(conn, at_start=False)
                    self._build_routes()
                    self.send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
                if not self._refreshing.get(conn.name):
                    return
                self._refreshing[conn.name] = False
        finally:
            self._refreshing.pop(conn.name, None)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- the policy-checked call -----------------------------------------------------------

    def _tools_call(self, request_id: Any, params: Message) -> None:
        """``tools/call``: decided, audited and forwarded in the callback that read it; the
        answer is relayed in the callback that reads it (:meth:`_call_done`). Only an
        escalation, which waits for a human, runs as a task."""
        started = time.perf_counter()
        public = params.get("name")
        raw_args = params.get("arguments") or {}
        if not isinstance(raw_args, dict):
            self._reply(request_id, tool_result("DENIED: arguments must be a JSON object"))
            return
        route = self.routes.get(public) if isinstance(public, str) else None
        server, tool = route if route else (None, str(public))
        conn = self.servers.get(server) if server else None
        cwd = self.plan.servers[server].cwd if server else self.plan.workspace
        decision, transport = self.engine.decide(server or "", tool, raw_args, cwd=cwd)
        changed = self.changed_tools.get(server, {}).get(tool) if server else None
        if changed and decision.decision == "allow":
            decision = Decision(
                "escalate",
                "tool-changed",
                f"the tool is {changed} since its description and schema were pinned; "
                "a human must approve its calls",
            )
        hashes = argument_hashes(transport)
        if (
            decision.decision != "deny"
            and server is not None
            and not self.breaker.allow(server, tool, hashes)
        ):
            decision = Decision(
                "deny",
                "circuit-breaker",
                f"the same call was made {self.breaker.limit} times within "
                f"{self.breaker.window:g} s; it is refused until that slows down",
            )
        call = _Call(request_id, params, started, server, tool, transport, conn)
        call.entry = self._entry(request_id, server, tool, transport, decision, hashes)
        audit = self.audit
        assert audit is not None
        if not audit.check():
            self._end(
                call,
                "denied",
                tool_result(
                    f"DENIED (rule: audit-log-unwritable): the audit log cannot be written "
                    f"({audit.error}), so no call is allowed"
                ),
            )
        elif decision.decision == "escalate" and conn is not None and server is not None:
            task = self._spawn(self._escalate(call, decision))
            if isinstance(request_id, str | int):
                self._in_flight[request_id] = task
        elif decision.decision != "allow" or conn is None:
            self._end(call, "denied", tool_result(denial_text(decision)))
        else:
            self._forward_call(call)

    async def _escalate(self, call: _Call, decision: Decision) -> None:
        assert call.server is not None
        try:
            outcome = await self.approvals.decide(
                call.server,
                call.tool,
                call.transport,
                decision,
                self.client_elicits,
                self.ask_client,
            )
        except asyncio.CancelledError:
            self._finish_call(call, "cancelled")  # by the client, or at stop
            raise
        except Exception as exc:  # never leave the client without an answer
            self._end(call, "error", tool_result(f"ERROR: the approval failed: {exc}"))
            return
        finally:
            if self._in_flight.get(call.request_id) is asyncio.current_task():
                del self._in_flight[call.request_id]
        call.entry["escalation"] = outcome.escalation
        if outcome.escalation == "approved-for-session":
            call.entry["whitelisted"] = {  # what later identical calls will match
                "server": call.server,
                "tool": call.tool,
                "arguments": hash_value(call.transport),
            }
        if outcome.approved:
            self._forward_call(call)
            return
        text = (
            denial_text(decision)
            if outcome.escalation == "no-approval-channel"
            else f"ESCALATION DENIED (rule: {decision.rule}): {decision.reason}; "
            f"{outcome.detail or 'not approved'}"
        )
        self._end(call, "denied", tool_result(text))

    def _forward_call(self, call: _Call) -> None:
        conn = call.conn
        assert conn is not None
        forward = {**call.params, "name": call.tool, "arguments": call.transport}
        try:
            call.downstream = conn.send_request(
                "tools/call",
                forward,
                lambda outcome: self._call_done(call, outcome),
                conn.spec.timeout,
            )
        except ServerGone as gone:
            self._call_done(call, gone)
            return
        if isinstance(call.request_id, str | int):
            self._calls[call.request_id] = call
        assert self.audit is not None
        call.prepared = self.audit.prepare(call.entry, late=("result", "durationMs"))

    def _call_done(self, call: _Call, outcome: Message | BaseException) -> None:
        """The server answered, exited, or ran out of time: audit, then answer the client."""
        if self._calls.get(call.request_id) is call:
            del self._calls[call.request_id]
        try:
            self.settle()  # what the call created is dealt with before it returns
            halted = self.halted.get(call.server) if call.server else None
            if halted is not None:
                text = f"ERROR: server '{call.server}' was stopped: {halted}; it is not running"
                self._end(call, "error", tool_result(text))
                return
            self._relay_answer(call, outcome)
        except Exception as exc:  # never take the session down for one call
            self.send(_error(call.request_id, -32603, f"internal error: {exc}"))

    def _relay_answer(self, call: _Call, outcome: Message | BaseException) -> None:
        server, conn = call.server, call.conn
        assert conn is not None
        if isinstance(outcome, ServerGone):
            self._end(
                call,
                "server-exited",
                tool_result(
                    f"ERROR: {outcome}; it is being restarted, try again shortly"
                    if conn.restarting
                    else f"ERROR: {outcome}; it is not running"
                ),
            )
            return
        if isinstance(outcome, TimeoutError):
            self._end(
                call,
                "timeout",
                tool_result(
                    f"ERROR: server '{server}' did not answer within {conn.spec.timeout} s; "
                    "the call was cancelled"
                ),
            )
            return
        if isinstance(outcome, BaseException):
            raise outcome
        if "error" in outcome:
            err = outcome["error"] if isinstance(outcome["error"], dict) else {}
            self._finish_call(call, "error")
            code, text = err.get("code", -32603), err.get("message", "error")
            self.send(_error(call.request_id, code if type(code) is int else -32603, str(text)))
            return
        result = outcome.get("result")
        if not isinstance(result, dict):
            self._end(
                call, "error", tool_result(f"ERROR: server '{server}' returned a malformed result")
            )
            return
        self._finish_call(call, "error" if result.get("isError") else "success")
        assert self.audit is not None
        if not self.audit.healthy:
            result = tool_result(
                "DENIED (rule: audit-log-unwritable): the audit log cannot be "
                "written; the call ran but its result is withheld"
            )
        self._reply(call.request_id, result)

    def _end(self, call: _Call, status: str, result: Message) -> None:
        self._finish_call(call, status)
        self._reply(call.request_id, result)

    def _finish_call(self, call: _Call, status: str) -> None:
        self._finish(call.entry, call.started, status, call.prepared)

    def _reply(self, request_id: Any, result: Message) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def _cancel_call(self, call: _Call, reason: str) -> None:
        """The client cancelled it, or the session is stopping: the server is told, the
        audit says ``cancelled``, the client gets no answer (MCP)."""
        if self._calls.get(call.request_id) is call:
            del self._calls[call.request_id]
        assert call.conn is not None and call.downstream is not None
        if call.conn.cancel_request(call.downstream, reason):
            self._finish_call(call, "cancelled")

    def _entry(
        self,
        request_id: Any,
        server: str | None,
        tool: str,
        args: dict[str, object],
        decision: Decision,
        hashes: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        return {
            "requestId": request_id,
            "server": server,
            "tool": tool,
            "arguments": hashed_arguments(
                args, self.plan.audit_args_clear, self._pii(server, tool), hashes
            ),
            "policy": {
                "decision": decision.decision,
                "rule": decision.rule,
                "reason": decision.reason,
            },
            "escalation": None,
            "sandboxed": bool(server and self.plan.servers[server].sandboxed),
        }

    async def ask_client(self, method: str, params: Message, timeout: float) -> Message:
        """Send a request to the upstream client and wait for its whole response."""
        request_id = f"ironcurtain-{next(self._upstream_ids)}"
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._upstream_pending[request_id] = future
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        try:
            return await asyncio.wait_for(future, timeout)
        except (TimeoutError, asyncio.CancelledError):
            self.send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": request_id, "reason": "no answer in time"},
                }
            )
            raise
        finally:
            self._upstream_pending.pop(request_id, None)

    def _check_pins(self, conn: ServerConnection, at_start: bool) -> None:
        """Compare the server's tools with their pins (pinning them the first time, or when
        the user accepts changes); tools that differ are escalated from now on."""
        pins = self.pins.get(conn.name) or Pins.load(
            os.path.join(str(dirs.state_dir()), "pins"), conn.name
        )
        self.pins[conn.name] = pins
        if at_start and (not pins.existed or self.plan.accept_tool_changes):
            try:
                pins.save(conn.tools)
            except OSError as exc:
                print(
                    f"ironcurtain: warning: cannot pin tools of '{conn.name}': {exc}",
                    file=sys.stderr,
                )
            self.changed_tools[conn.name] = {}
            return
        changed = pins.changed(conn.tools)
        self.changed_tools[conn.name] = changed
        if changed:
            listing = ", ".join(f"{name} ({kind})" for name, kind in sorted(changed.items()))
            print(
                f"ironcurtain: server '{conn.name}' has tools that differ from their pins, "
                f"escalated until accepted (run --accept-tool-changes): {listing}",
                file=sys.stderr,
                flush=True,
            )

    def _pii(self, server: str | None, tool: str) -> list[str]:
        if not self.plan.audit_args_clear or server is None:
            return []
        annotation = self.engine.get_annotation(server, tool)
        return list(annotation.pii_fields) if annotation else []

    def _finish(
        self,
        entry: dict[str, Any],
        started: float,
        status: str,
        prepared: Prepared | None = None,
    ) -> None:
        """Write the call's audit entry with its outcome (``entry`` holds what was known
        before, already serialised in ``prepared`` when the call was forwarded)."""
        outcome = {"result": status, "durationMs": round((time.perf_counter() - started) * 1000, 3)}
        audit = self.audit
        assert audit is not None
        if prepared is not None:
            written = audit.write(outcome, prepared)
        else:
            written = audit.write({**entry, **outcome})
        if not written:
            print(
                f"ironcurtain: audit log write failed ({audit.error}); denying every further call",
                file=sys.stderr,
                flush=True,
            )


def sweep_stale_runtime_dirs(base: str, min_age: float = 60.0) -> None:
    """Remove this user's runtime directories of sessions that are gone (a launcher that was
    killed cannot clean up after itself). A directory's ``pid`` names its launcher."""
    now = time.time()
    for directory in {base, "/tmp"}:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if not entry.name.startswith("ironcurtain-2") or not entry.is_dir(
                follow_symlinks=False
            ):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                if st.st_uid != os.getuid() or now - st.st_mtime < min_age:
                    continue
                with open(os.path.join(entry.path, "pid"), encoding="utf-8") as handle:
                    alive = psutil.pid_exists(int(handle.read().strip() or 0))
            except (OSError, ValueError):
                alive = False
            if not alive:
                shutil.rmtree(entry.path, ignore_errors=True)


def _as_text(path: str) -> str:
    """A path as text the audit log can hold: bytes that are not UTF-8 (a name a server
    chose) are shown as escapes, so they cannot make the log fail.

    >>> _as_text("/ws/" + b"\\xff".decode("utf-8", "surrogateescape"))
    '/ws/\\\\xff'
    """
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def raise_descriptor_limit(wanted: int = 65536) -> None:
    """Raise this process's soft limit on open descriptors (up to its hard limit), so what
    servers make it hold (proxy connections, watched directories) cannot exhaust it; the
    egress proxy caps connections per server on top of that."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _approval_channels(mode: str, session_id: str) -> str:
    terminal = f"`ironcurtain approvals --session {session_id}`"
    return {
        "auto": f"the client (MCP elicitation) if it can, else {terminal}, else deny",
        "elicit": "the client (MCP elicitation) if it can, else deny",
        "socket": f"{terminal}",
        "deny": "none: escalations are denied",
    }.get(mode, mode)


def denial_text(decision: Decision) -> str:
    """What the client is told when a call is not made; the first word is the contract."""
    if decision.decision == "escalate":
        return (
            f"ESCALATION REQUIRED (rule: {decision.rule}): {decision.reason}. "
            "No approval channel is available in this session, so the call was not made."
        )
    return f"DENIED (rule: {decision.rule}): {decision.reason}"


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


class _RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _error(request_id: Any, code: int, message: str) -> Message:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def client_entry(plan: SessionPlan) -> str:
    exe = shutil.which("ironcurtain") or os.path.join(
        os.path.dirname(sys.executable), "ironcurtain"
    )
    args = ["run", "--config", str(plan.config.path.resolve())]
    if plan.policy.directory:
        args += ["--policy-dir", str(plan.policy.directory)]
    if not plan.prefixed:
        args += ["--server", next(iter(plan.servers))]
    # With one selected server the entry replaces that server in a client's config.
    key = "ironcurtain" if plan.prefixed else next(iter(plan.servers))
    return json.dumps({"mcpServers": {key: {"command": exe, "args": args}}}, indent=2)


def _unencodable(value: object) -> bool:
    """Whether ``value`` holds a string with no UTF-8 form (a lone surrogate), which no
    audit entry and no message to a server can carry. Quick for an ASCII string.

    >>> _unencodable("call-1"), _unencodable("r\\u00e9"), _unencodable({"a": ["\\ud800"]})
    (False, False, True)
    """
    if type(value) is str:
        if value.isascii():
            return False
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if value is None or type(value) is int:
        return False
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except ValueError:
        return True
    return False
