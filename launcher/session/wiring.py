"""``ironcurtain run``: the wiring of one session.

The host's files are made (:mod:`launcher.session.hostfiles`), the guard watches the roots servers
may write, the egress sockets listen and the servers start in their sandboxes, all before
the event loop exists (:mod:`launcher.session.prestart`); then the session takes them over, the
egress proxies and the approvals socket start, the servers are initialised and listed
(:mod:`launcher.servers.fleet`), and a client transport (:mod:`launcher.transports.stdio` or
:mod:`launcher.transports.http.endpoint`) is joined to the relay core
(:mod:`launcher.relay.core`), which checks every request through one gate
(:mod:`launcher.relay.gate.decide`). Everything stops on end of input, SIGINT or SIGTERM; the
guard then sweeps the writable roots once more.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING, Any

from launcher.audit.log import AuditLog
from launcher.audit.telemetry import Telemetry
from launcher.guard.watch import Guard, GuardFailure
from launcher.host.session_ca import SessionCA
from launcher.plan import coherence
from launcher.plan.session_plan import SessionPlan
from launcher.relay.approving.approval import Approvals
from launcher.relay.approving.patterns import LocalPatterns, lister
from launcher.relay.approving.shared_patterns import SharedPatterns
from launcher.relay.core import Relay
from launcher.relay.gate.breaker import CircuitBreaker
from launcher.servers.broker import Broker
from launcher.servers.egress_proxy import EgressProxy
from launcher.servers.remote import import_client_stack
from launcher.session.checks import audit_stamp, check_output_tools, unguarded_resources
from launcher.session.events import SessionEvents
from launcher.session.hostfiles import HostFiles
from launcher.session.per_caller import CallerPlans
from launcher.session.prestart import Prestarted, prestart
from launcher.session.report import say, say_lines, startup_report
from launcher.session.served import Kept, KeptCallers, Served
from launcher.shared.caller_identity import Caller
from launcher.shared.jsonrpc import Message
from launcher.shared.user_errors import Names, StartupError, by_field
from launcher.shared_state.store import SharedState, scope_of
from launcher.transports.approvals.session_socket import APPROVALS_SOCKET, ApprovalsSocket
from launcher.transports.stdio import StdioTransport, client_gone

# Seconds between settles of the guard when no event wakes it.
SETTLE_EVERY = 1.0

if TYPE_CHECKING:
    from launcher.transports.approvals.page_thread import PageThread
    from launcher.transports.http.endpoint import HttpEndpoint
    from launcher.transports.http.stateless_requests import Upstream as HttpUpstream


def _terminals(plan: SessionPlan) -> ApprovalsSocket | None:
    """The socket the operator's terminals (and the approvals page) attach to, where the
    session's approvals may ask them."""
    if plan.approval not in ("auto", "socket", "web"):
        return None
    path = os.path.join(plan.runtime_dir, APPROVALS_SOCKET)
    return ApprovalsSocket(path, list(plan.servers), plan.audit_path)


def _approvals(
    plan: SessionPlan, terminals: ApprovalsSocket | None, state: SharedState | None
) -> Approvals:
    """How the session's escalations are asked, and where what is approved is kept."""
    shared = state is not None and state.shared
    return Approvals(
        # The page answers through the approvals socket, attached as a terminal is.
        "socket" if plan.approval == "web" else plan.approval,
        plan.approval_timeout,
        terminals,
        callers=plan.caller is not None or plan.gateway is not None,
        shared=state,
        patterns=SharedPatterns(state) if shared and state is not None else LocalPatterns(),
    )


class Session(SessionEvents):
    def __init__(
        self,
        plan: SessionPlan,
        started: Prestarted | None = None,
        names: Names = by_field,
        state: SharedState | None = None,
    ) -> None:
        """``started``: the servers, started before the event loop (None: :meth:`run` starts
        them); ``names``: how the person running the session calls a setting; ``state``:
        what it shares with other instances (None: nothing, its own kept here)."""
        self.plan = plan
        self.state = state
        self.names = names
        self._started = started
        # Servers the guard stopped (it could not neutralise what their sandbox wrote), and
        # why: in every client's fleet, and never started again in a new one.
        self.halted: dict[str, str] = {}
        self.first = Served(self)
        self.served: list[Served] = [self.first]
        self.fleet = self.first.fleet
        self.servers = self.fleet.servers
        self.files = HostFiles(plan)
        self.audit: AuditLog | None = None
        self.telemetry: Telemetry | None = None
        self.guard: Guard | None = None
        self.egress: dict[str, EgressProxy] = {}
        self.terminals = _terminals(plan)
        self.page: PageThread | None = None  # the approvals page (--approval web)
        self.approvals = _approvals(plan, self.terminals, state)
        # What is kept of each caller: approvals for the session, its circuit breaker.
        self.kept = KeptCallers(
            lambda caller: Kept(
                self.approvals.for_caller(caller.audited, scope_of(caller.key)),
                CircuitBreaker(plan.max_identical_calls, shared=state, scope=scope_of(caller.key)),
            )
        )
        self.relay: Relay | None = None
        self.http: HttpEndpoint | None = None
        self.stdio: StdioTransport | None = None
        self._spare: asyncio.Task[Served] | None = None
        # Planned for every caller: each caller's servers are planned and started for it.
        self.callers = CallerPlans(self) if plan.per_caller else None
        self._stop = asyncio.Event()
        self.unneutralised: list[GuardFailure] = []

    # -- lifecycle -------------------------------------------------------------------------

    async def collect_listings(self) -> dict[str, dict[str, list[Message]]]:
        """Start every server in its sandbox, list its tools and prompts, stop: for
        annotating them (``annotate-tools``, ``compile-policy``)."""
        started = None
        try:
            started = self._started = prestart(self.plan)
            await self._take_over(started)
            await self.fleet.start()
            return {
                name: {"tools": list(conn.tools), "prompts": list(conn.prompts)}
                for name, conn in self.servers.items()
            }
        finally:
            if started is not None:
                started.drop_unadopted()
            await self.stop()

    async def run(self) -> int:
        started = self._started
        try:
            if started is None:
                started = self._started = prestart(self.plan)
            await self._take_over(started)
            await self._open_terminals()
            if self.plan.http_port is not None and any(
                server.remote is not None for server in self.plan.servers.values()
            ):
                import_client_stack()  # before the HTTP stack's import starts in another thread
            # The HTTP stack takes about half a second to import: done while servers start.
            stack = (
                asyncio.get_running_loop().run_in_executor(
                    None, importlib.import_module, "launcher.transports.http.endpoint"
                )
                if self.plan.http_port is not None
                else None
            )
            # The OpenTelemetry SDK too (a tenth of a second), when calls are exported.
            exporting = (
                asyncio.get_running_loop().run_in_executor(
                    None, Telemetry, self.plan.telemetry, say, self.plan.session_id
                )
                if self.plan.telemetry is not None
                else None
            )
            if self.plan.http_port is None:
                if not await self._start_while_client_waits():
                    say("the client closed its input before the servers were ready; stopped")
                    return 0
            elif self.callers is None:
                await self.fleet.start()
            self._warn_at_start()
            if exporting is not None:
                self.telemetry = await exporting
            await self._attach_first(stack)
            self._say_ready()
            # What start-up built lives as long as the session: out of the collector's way,
            # so a full collection during a call walks only what calls allocate.
            gc.freeze()
            await self._serve()
        finally:
            if started is not None:
                started.drop_unadopted()
            await self.stop()
        return 1 if self.unneutralised else 0

    async def _open_terminals(self) -> None:
        if self.terminals is not None:
            self.terminals.control = lister(self.approvals.patterns, self._record)
            try:
                await self.terminals.start()
            except OSError as exc:
                raise StartupError(f"cannot open the approvals socket: {exc}") from None
        if self.plan.approval == "web":
            from launcher.relay.approving.approval import APPROVE, APPROVE_SESSION, DENY
            from launcher.transports.approvals.page_thread import PageThread

            answers = {"approve": APPROVE, "session": APPROVE_SESSION, "deny": DENY}
            self.page = PageThread(self.plan.session_id, answers)
            # The token is in the address: said to the person who started the session only.
            self.page.start(lambda url: say(f"approvals page: open {url}"))

    def _record(self, entry: dict[str, object]) -> None:
        """An event of the session's approvals (a pattern revoked), in the audit log."""
        if self.audit is not None:
            self.audit.write(entry)

    def _warn_at_start(self) -> None:
        """What the plan leaves unguarded or incoherent, said once the servers are up."""
        # (A session planned for every caller has no tools yet: each caller's servers
        # list theirs when it first calls.)
        every = self.callers is None
        for warning in check_output_tools(
            self.plan,
            {n: c.tools for n, c in self.servers.items()} if every else {},
            {n: c.prompts for n, c in self.servers.items()} if every else {},
        ):
            say(warning)
        offers = {n: bool(c.resources or c.resource_templates) for n, c in self.servers.items()}
        tools = {n: c.tools for n, c in self.servers.items()} if every else {}
        for warning in unguarded_resources(self.plan, tools, offers):
            say(warning)
        for mismatch in coherence.check(self.plan):
            say(f"warning: {mismatch}")
        for name, why in self.fleet.unreachable.items():  # said on stderr as it was found
            if self.audit is not None:
                self.audit.write({"event": "server-unreachable", "server": name, "reason": why})

    async def _attach_first(self, stack: asyncio.Future[Any] | None) -> None:
        """The first client attached: listening over HTTP once its stack is imported, or on
        stdio (its one caller named in every audit entry)."""
        if stack is not None and self.plan.http_port is not None:
            await stack
            if self.callers is None:
                self.relay = self.first.attach(None, at_start=True)  # the first client's
            await self._listen(self.plan.http_port)
        else:
            self.stdio = StdioTransport(self.first.feed, self._stop.set)
            self.relay = self.first.attach(self.stdio, at_start=True)
            self.first.caller = self.plan.caller
            if self.plan.caller is not None and self.audit is not None:
                # The one caller of a session on stdio: every entry names it.
                audited = {"caller": self.plan.caller.audited}
                self.audit = self.audit.for_client(lambda entry: audited)
                self.relay.core.audit = self.audit

    def _say_ready(self) -> None:
        """The start-up report: what started."""
        tools = {name: conn.tools for name, conn in self.servers.items()}
        eras = {name: conn.era for name, conn in self.servers.items()}
        report = startup_report(self.plan, tools, self.http, eras)
        say_lines(report.removeprefix("ironcurtain: "))

    async def _take_over(self, started: Prestarted) -> None:
        """Take over what was started before the event loop: from here on, stopping the
        session stops and removes it."""
        self.files, self.audit, self.guard = started.files, started.audit, started.guard
        if self.guard is not None:
            self.guard.on_quarantine = self._quarantined
            self.guard.on_failure = self._guard_failed
        await self.fleet.adopt(started.procs)
        await self._start_egress(started.listeners, started.authorities)

    async def _start_while_client_waits(self) -> bool:
        """Start the servers, unless the client on stdin goes away first (closes its input
        having sent nothing): then False, and they are stopped with the session rather
        than waited for (a server may take up to a minute to be given up on)."""
        start = asyncio.ensure_future(self.fleet.start())
        gone = asyncio.ensure_future(client_gone(sys.stdin.fileno()))
        try:
            await asyncio.wait({start, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (gone, start):
                if not task.done():
                    task.cancel()
            # The servers' start, once cancelled, has stopped waiting for them; stopping
            # the session stops them.
            await asyncio.gather(gone, start, return_exceptions=True)
        if start.cancelled():
            return False
        start.result()
        return True

    async def _listen(self, port: int) -> None:
        from launcher.transports.http.endpoint import HttpEndpoint  # only over HTTP

        assert self._started is not None
        gatekeeper = None
        if self.plan.gateway is not None:
            from launcher.transports.http.gateway.gatekeeper import Gatekeeper

            gatekeeper = Gatekeeper(self.plan.gateway, say, self._not_admitted)
        token = self.plan.http_token.value if self.plan.http_token is not None else None
        self.http = HttpEndpoint(
            port,
            token,
            self._open_client,
            say,
            gatekeeper,
            self.plan.max_clients,
            self.state,
            bind=self.plan.http_bind,
            public_url=self.plan.public_url,
        )
        # The socket was bound before any server started (a port that cannot be had stops
        # the session before anything does); the endpoint owns it from here.
        sock, self._started.http = self._started.http, None
        await self.http.start(sock)

    def _not_admitted(self, caller: Caller, why: str) -> None:
        """A valid token of a subject the gateway does not admit: no server starts for it."""
        self.event(
            "admission-refused",
            f"gateway: refused admission to {caller.name!r} ({caller.issuer}): {why}",
            caller=caller.audited,
            reason=why,
        )

    async def _open_client(self, upstream: HttpUpstream, caller: Caller | None) -> Served:
        """Servers and a relay for a new HTTP session (or the stateless requests of one
        caller): the ones started with the session for the first, then a spare started in
        advance (the next one is started at once). Its audit entries say what the client's
        transport adds (the caller, the session)."""
        first = self.first.relay
        if self.callers is not None:
            if caller is None:
                raise StartupError("the servers are each caller's own: a caller is needed")
            served = await self.callers.served_for(caller, upstream)
        elif first is not None and first.upstream is None:
            first.upstream = upstream
            served = self.first
        else:
            spare = self._spare or asyncio.create_task(self._start_spare())
            self._spare = None
            served = await spare
            served.attach(upstream, at_start=False)
        assert served.relay is not None and self.audit is not None
        served.relay.core.audit = self.audit.for_client(audit_stamp(upstream, caller))
        served.caller = caller
        if caller is not None and served.fleet.awaiting:
            await served.open_for(caller)
        spares = self.callers is None  # a spare would be no caller's
        if spares and self._spare is None and len(self.served) < 2 * self.plan.max_clients:
            self._spare = asyncio.create_task(self._start_spare())
        return served

    def kept_for(self, caller: Caller) -> Kept:
        return self.kept.take(caller)

    def release(self, caller: Caller) -> None:
        if not self.kept.release(caller) and self.callers is not None:
            self.callers.forget(caller)  # no relay serves it: planned again when it calls

    async def _start_spare(self) -> Served:
        served = Served(self)
        self.served.append(served)  # from now on the guard can halt its servers too
        try:
            await served.fleet.start()
        except BaseException:
            await served.close()
            raise
        return served

    async def _start_egress(
        self, listening: dict[str, socket.socket], authorities: dict[str, SessionCA]
    ) -> None:
        """Start each server's egress proxy on its socket, ``listening`` already (taken out
        of the dict: from then on the proxy closes it)."""
        for name, sp in self.plan.servers.items():
            if sp.egress is None or sp.egress_socket is None:
                continue
            ca = authorities.get(name)
            broker = Broker(sp.secrets, ca) if sp.secrets and ca is not None else None
            proxy = EgressProxy(name, sp.egress, sp.egress_socket, self.egress_refused, broker)
            try:
                await proxy.start(listening.pop(name, None))
            except OSError as exc:
                raise StartupError(
                    f"cannot start the egress proxy for '{name}' at {sp.egress_socket}: "
                    f"{exc.strerror}"
                ) from None
            self.egress[name] = proxy

    # -- serving ---------------------------------------------------------------------------

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        ticker = None
        if self.guard is not None:
            # Between calls too: a server's background process is caught as it writes.
            loop.add_reader(self.guard.fd, self.settle)
            ticker = asyncio.ensure_future(self._settle_often())
        if self.stdio is not None:
            await self.stdio.open()
        try:
            await self._stop.wait()
            # Requests read before the input ended (a file on stdin) are still answered,
            # given a moment; what waits longer (a human's approval) is cancelled at stop.
            pending = [t for served in self.served if served.relay for t in served.relay.pending]
            if pending:
                await asyncio.wait(pending, timeout=0.5)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            if self.guard is not None:
                loop.remove_reader(self.guard.fd)
            if ticker is not None:
                ticker.cancel()
            if self.http is not None:
                await self.http.stop()
            elif self.stdio is not None:
                await self.stdio.close()

    async def _settle_often(self) -> None:
        """Settle the guard every :data:`SETTLE_EVERY` seconds too: a store through a shared
        mapping of a repository configuration it admitted changes the file with no event."""
        while True:
            await asyncio.sleep(SETTLE_EVERY)
            self.settle()

    async def stop(self) -> None:
        if self._spare is not None:
            self._spare.cancel()
            await asyncio.gather(self._spare, return_exceptions=True)
        for served in list(self.served):
            if served.relay is not None:
                await served.relay.stop()
        await asyncio.gather(*(s.fleet.stop() for s in self.served), return_exceptions=True)
        await asyncio.gather(*(p.stop() for p in self.egress.values()), return_exceptions=True)
        if self.page is not None:
            await asyncio.to_thread(self.page.stop)
        if self.terminals is not None:
            await self.terminals.stop()
        if self.guard is not None:
            self.settle()
            self._sweep(self.guard)
            self.guard.close()
        if self.callers is not None:
            self.callers.remove()
        self.files.remove()
        if self.telemetry is not None:  # what is still queued leaves (or is given up on)
            telemetry, self.telemetry = self.telemetry, None
            await asyncio.to_thread(telemetry.stop)
