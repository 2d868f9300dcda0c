"""One client's servers and the relay over them: the only one on stdio; over HTTP, one per
MCP session (:mod:`launcher.session.wiring` makes them,
:mod:`launcher.transports.streamable_http` asks)."""

from __future__ import annotations

import os
from typing import Protocol

from launcher.audit.log import AuditLog
from launcher.audit.telemetry import Telemetry
from launcher.plan.server_plan import ServerPlan
from launcher.plan.session_plan import SessionPlan
from launcher.relay.approval import Approvals
from launcher.relay.breaker import CircuitBreaker
from launcher.relay.core import Relay
from launcher.relay.gate import Gate
from launcher.relay.outputs import Outputs
from launcher.relay.router import Router
from launcher.relay.seams import Core, ServerSettings, Upstream
from launcher.servers.connection import ServerConnection
from launcher.servers.fleet import Fleet
from launcher.servers.widen import Widener
from launcher.session.report import say
from launcher.shared import dirs
from launcher.shared.errors import Names
from launcher.shared.jsonrpc import Message

# What a one-shot instance (one approved call beyond its sandbox) may tell the client.
ONE_SHOT_NOTIFICATIONS = ("notifications/progress", "notifications/message")


class Hosting(Protocol):
    """What the session shares with each client's servers: the plan, its audit log and
    approvals, the servers stopped for good, and where to report and settle."""

    plan: SessionPlan
    names: Names  # how the person running the session calls a setting
    audit: AuditLog | None
    approvals: Approvals
    halted: dict[str, str]
    served: list[Served]
    telemetry: Telemetry | None  # where each call is exported (None: nowhere)

    def event(self, event: str, text: str, **fields: object) -> None: ...

    def settle(self) -> None: ...


class Served:
    """One client's servers and its relay: the only one on stdio; over HTTP, one per MCP
    session, so a client's subscriptions, log level and questions stay its own."""

    def __init__(self, session: Hosting) -> None:
        self.session = session
        self.fleet = Fleet(session.plan, self._notified, session.halted)
        self.relay: Relay | None = None

    def attach(self, upstream: Upstream | None, at_start: bool) -> Relay:
        """The relay over these servers, sending to ``upstream`` (None: given later)."""
        relay = self.relay = self._relay(at_start)
        relay.upstream = upstream
        self.fleet.supervise(self.session.event, self._restarted)
        return relay

    def feed(self, line: bytes) -> None:
        if self.relay is not None:
            self.relay.feed(line)

    async def close(self) -> None:
        """Stop this client's relay and servers (the session goes on)."""
        if self.relay is not None:
            await self.relay.stop()
        await self.fleet.stop()
        if self in self.session.served:
            self.session.served.remove(self)
        self.session.settle()

    def _relay(self, at_start: bool) -> Relay:
        """A relay over these servers: its own gate (pins compared for its own servers,
        its own circuit breaker), the session's audit log, approvals and guard."""
        session, fleet = self.session, self.fleet
        plan = session.plan
        assert session.audit is not None
        gate = Gate(
            plan.engine,
            CircuitBreaker(plan.max_identical_calls),
            session.audit,
            session.approvals,
            os.path.join(str(dirs.state_dir()), "pins"),
            plan.accept_tool_changes,
            say,
            session.names,
        )
        for name, conn in fleet.servers.items():
            gate.pin(name, conn.tools, conn.prompts, at_start=at_start)
        settings = {name: relay_settings(sp) for name, sp in plan.servers.items()}
        core = Core(
            fleet.servers,
            settings,
            gate,
            session.audit,
            Router(plan.prefixed),
            workspace=plan.workspace,
            audit_args_clear=plan.audit_args_clear,
            halted=session.halted,
            settle=session.settle,
            say=say,
            outputs=Outputs(
                plan.policy.output,
                {name: sp.config.mask_secrets for name, sp in plan.servers.items()},
            ),
            widen=Widener(plan, self._one_shot_notified),
            telemetry=session.telemetry,
        )
        return Relay(core)

    def _notified(self, conn: ServerConnection, message: Message) -> None:
        if self.relay is not None:
            self.relay.on_server_notification(conn, message)

    def _one_shot_notified(self, conn: ServerConnection, message: Message) -> None:
        if message.get("method") in ONE_SHOT_NOTIFICATIONS:
            self._notified(conn, message)

    def _restarted(self, conn: ServerConnection) -> None:
        if self.relay is not None:
            self.relay.core.gate.pin(conn.name, conn.tools, conn.prompts, at_start=False)
            self.relay.lists_changed()


def relay_settings(sp: ServerPlan) -> ServerSettings:
    """What the relay core needs to know of one planned server."""
    asks = sp.config.client_requests
    sandbox = sp.config.sandbox
    denied = sandbox.network.denied_domains if sandbox and sandbox.network else []
    return ServerSettings(
        sp.cwd,
        sp.launch.timeout,
        sp.sandboxed,
        asks.elicitation,
        asks.sampling,
        tuple(sp.config.allowed_domains),
        tuple(denied),
    )
