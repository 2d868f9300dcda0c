"""One client's servers and the relay over them: the only one on stdio; over HTTP, one per
MCP session and one for the stateless protocol's requests, or in gateway mode one for each
caller's (:mod:`launcher.session.wiring` makes them, :mod:`launcher.transports` asks).

What a caller is granted lasts beyond one of its relays: approvals "for this session" and
the circuit breaker's counts are kept per caller (:class:`Kept`), shared by the relays that
serve it, and kept ``KEEP_FOR`` seconds after the last of them ends (a client that opens a
new session is the same caller); at most ``MAX_KEPT`` callers' no relay serves."""

from __future__ import annotations

import os
import time
from collections import ChainMap
from collections.abc import Awaitable, Callable
from typing import Protocol

from launcher.audit.log import AuditLog
from launcher.audit.telemetry import Telemetry
from launcher.plan.caller_plan import own_dirs
from launcher.plan.config import CALLER
from launcher.plan.server_plan import ServerPlan
from launcher.plan.session_plan import SessionPlan
from launcher.relay.approving.approval import Approvals
from launcher.relay.core import Relay
from launcher.relay.gate.breaker import CircuitBreaker
from launcher.relay.gate.caller_places import CallerPlaces
from launcher.relay.gate.decide import Gate, label
from launcher.relay.outputs import Outputs
from launcher.relay.router import Router
from launcher.relay.seams import Carried, Core, ServerSettings, Upstream
from launcher.servers.connection import ServerConnection
from launcher.servers.fleet import Fleet
from launcher.servers.token_store import caller_key
from launcher.servers.widen import Widener
from launcher.session.report import say
from launcher.shared import dirs
from launcher.shared.caller_identity import Caller
from launcher.shared.jsonrpc import Message
from launcher.shared.user_errors import Names
from launcher.shared_state.store import SharedState
from policy.argument_scan import ArgumentScan
from sandbox_profiles.records import mutable

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
    state: SharedState | None  # what instances of one gateway share (None: nothing)

    @property
    def guard(self) -> Carried | None:
        """What keeps the writable roots (None: no sandboxed server writes there)."""
        ...

    def event(self, event: str, text: str, **fields: object) -> None: ...

    def settle(self) -> None: ...

    def kept_for(self, caller: Caller) -> Kept: ...

    def release(self, caller: Caller) -> None: ...


KEEP_FOR = 30 * 60.0
MAX_KEPT = 1024


@mutable
class Kept:
    """What is kept of one caller: what it was approved for the session, and its circuit
    breaker."""

    approvals: Approvals
    breaker: CircuitBreaker
    users: int = 0  # the relays serving it now
    unused_since: float = 0.0  # when the last of them ended (time.monotonic)


class KeptCallers:
    """What is kept of each caller, made by ``make`` with its first relay."""

    def __init__(self, make: Callable[[Caller], Kept]) -> None:
        self._make = make
        self._kept: dict[tuple[str, str], Kept] = {}  # the most recently used last

    def __len__(self) -> int:
        return len(self._kept)

    def take(self, caller: Caller) -> Kept:
        """What is kept of ``caller``, for one more relay that serves it."""
        kept = self._kept.pop(caller.key, None) or self._make(caller)
        self._kept[caller.key] = kept
        kept.users += 1
        return kept

    def release(self, caller: Caller) -> bool:
        """One relay of ``caller``'s is gone; with the last, what is kept of it starts to
        expire, and the callers unused longest beyond ``MAX_KEPT`` go. Whether a relay still
        serves ``caller``."""
        kept = self._kept.get(caller.key)
        now = time.monotonic()
        if kept is not None:
            kept.users -= 1
            if kept.users <= 0:
                kept.unused_since = now
        unused = [key for key, held in self._kept.items() if held.users <= 0]
        over = len(unused) - MAX_KEPT  # unused longest first: the order they were used in
        for key in unused:
            if over > 0 or now - self._kept[key].unused_since > KEEP_FOR:
                del self._kept[key]
                over -= 1
        return kept is not None and kept.users > 0


class Served:
    """One client's servers and its relay: the only one on stdio; over HTTP, one per MCP
    session, so a client's subscriptions, log level and questions stay its own."""

    def __init__(
        self,
        session: Hosting,
        plan: SessionPlan | None = None,
        halted: dict[str, str] | None = None,
        caller: Caller | None = None,
    ) -> None:
        """``plan``: what its servers and relay are made from, and ``halted``: its servers
        the guard stopped, when not the session's (in a session planned for every caller,
        its caller's own); ``caller``: whose they are, when known before they start."""
        self.session = session
        self.plan = session.plan if plan is None else plan
        self.halted = session.halted if halted is None else halted
        whose = caller_key(caller.issuer, caller.name) if caller is not None else None
        self.fleet = Fleet(self.plan, self._notified, self.halted, whose)
        self.relay: Relay | None = None
        self._kept: Caller | None = None  # whose approvals and breaker the gate uses

    @property
    def caller(self) -> Caller | None:
        """Whose requests these servers serve (None: no caller source)."""
        return self.relay.core.caller if self.relay is not None else None

    @caller.setter
    def caller(self, caller: Caller | None) -> None:
        """Serve ``caller`` (the same one again: with the permissions its latest token
        gives); the first time, its approvals and breaker become the gate's."""
        assert self.relay is not None
        core = self.relay.core
        self.relay.serve(caller)
        if caller is None or self._kept is not None:
            return
        kept = self.session.kept_for(caller)
        self._kept = caller
        core.gate.places = caller_places(self.session.plan, self.plan, caller)
        core.gate.approvals = kept.approvals
        core.gate.breaker = kept.breaker
        # What these servers list that changed since it was pinned was approved for the
        # session for no one: not for this caller either.
        for server, changed in core.gate.changed.items():
            for method, name in changed:
                kept.approvals.forget(server, label(method, name))

    async def open_for(self, caller: Caller) -> None:
        """Its caller is known: the remote servers each caller logs in to on its own are
        opened with ``caller``'s logins (their tools compared with their pins)."""
        opened = await self.fleet.open_for(caller_key(caller.issuer, caller.name))
        self.say_closed(caller)
        if self.relay is not None:
            for conn in opened:
                self.relay.core.gate.pin(conn.name, conn.tools, conn.prompts, at_start=True)
            self.relay.lists_changed()  # routed anew (its client told, if it listed already)

    def say_closed(self, caller: Caller) -> None:
        """Said on stderr and in the audit log: each of ``caller``'s remote servers that
        did not open with its login, and what to run."""
        for name, why in self.fleet.closed.items():
            self.session.event(
                "server-unreachable",
                f"{why}; its tools are not offered to caller {caller.name!r}",
                server=name,
                reason=why,
                caller=caller.audited,
            )

    def attach(self, upstream: Upstream | None, at_start: bool) -> Relay:
        """The relay over these servers, sending to ``upstream`` (None: given later)."""
        relay = self.relay = self._relay(at_start)
        relay.upstream = upstream
        self.fleet.supervise(self.session.event, self._restarted)
        return relay

    def feed(self, line: bytes) -> None:
        if self.relay is not None:
            self.relay.feed(line)

    def holds(self) -> bool:
        """Whether its client is to come back with the answers to a question."""
        return self.relay is not None and self.relay.rounds.waiting()

    def listed_tool(self, name: str) -> Message | None:
        """The tool ``name`` as its caller is shown it (None: not shown)."""
        if self.relay is None:
            return None
        core = self.relay.core
        shown = core.gate.listed("tools/list", core.router, core.caller)
        return next((tool for tool in shown if tool.get("name") == name), None)

    async def close(self) -> None:
        """Stop this client's relay and servers (the session goes on)."""
        if self.relay is not None:
            await self.relay.stop()
        await self.fleet.stop()
        if self in self.session.served:
            self.session.served.remove(self)
        if self._kept is not None:
            self.session.release(self._kept)
            self._kept = None
        self.session.settle()

    def _relay(self, at_start: bool) -> Relay:
        """A relay over these servers: its own gate (pins compared for its own servers,
        its own circuit breaker), the session's audit log, approvals and guard."""
        session, fleet, plan = self.session, self.fleet, self.plan
        assert session.audit is not None
        gate = Gate(
            plan.engine,
            CircuitBreaker(plan.max_identical_calls, shared=session.state),
            session.audit,
            session.approvals,
            os.path.join(str(dirs.state_dir()), "pins"),
            plan.accept_tool_changes,
            say,
            session.names,
            argument_scans(plan),
        )
        for name, conn in fleet.servers.items():
            if name not in fleet.awaiting:  # pinned as they open, once their caller is known
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
            # What stopped for every caller, and what did not open for this one.
            halted=ChainMap(fleet.closed, self.halted),
            settle=session.settle,
            say=say,
            outputs=Outputs(
                plan.policy.output,
                {name: sp.config.mask_secrets for name, sp in plan.servers.items()},
                known_secrets(plan),
            ),
            widen=Widener(plan, self._one_shot_notified, lambda: session.guard),
            telemetry=session.telemetry,
            speak=self._speak,
            state=session.state,
        )
        return Relay(core)

    def _notified(self, conn: ServerConnection, message: Message) -> None:
        if self.relay is not None:
            self.relay.on_server_notification(conn, message)

    def _one_shot_notified(self, conn: ServerConnection, message: Message) -> None:
        if message.get("method") in ONE_SHOT_NOTIFICATIONS:
            self._notified(conn, message)

    def _speak(self, era: str) -> Awaitable[None] | None:
        """Its client speaks ``era``: the servers that serve it too are opened in it
        (awaited before the client's first request is served); None when none might."""
        return self._spoken(era) if self.fleet.others(era) else None

    async def _spoken(self, era: str) -> None:
        for conn in await self.fleet.speak(era, self.session.event):
            self._restarted(conn)

    def _restarted(self, conn: ServerConnection) -> None:
        if self.relay is not None:
            self.relay.core.gate.pin(conn.name, conn.tools, conn.prompts, at_start=False)
            self.relay.lists_changed()


def caller_places(base: SessionPlan, plan: SessionPlan, caller: Caller) -> CallerPlaces | None:
    """``caller``'s places, and every caller's, in a session planned for every caller
    (``base``; ``plan``: the caller's own), else None (no place is a caller's own)."""
    if not base.per_caller:
        return None
    dirs_ = own_dirs(base, plan)
    templates = [base.workspace, *(template for _, template, _, _ in dirs_)]
    own = [plan.workspace] if CALLER in base.workspace else []
    own += [path for _, _, path, _ in dirs_]
    return CallerPlaces.of(own, templates, CALLER, caller.path_name)


def known_secrets(plan: SessionPlan) -> list[tuple[str, str]]:
    """The values of the config's secrets, by name: masked in what every server sends,
    looked for in what the agent sends every server."""
    return [(b.variable, b.value) for sp in plan.servers.values() for b in sp.secrets]


def argument_scans(plan: SessionPlan) -> dict[str, ArgumentScan]:
    """What each server's arguments are scanned for (a server whose config turns the scan
    off is absent)."""
    known = known_secrets(plan)
    scans: dict[str, ArgumentScan] = {}
    for name, sp in plan.servers.items():
        skips = sp.config.argument_scan_skips
        if skips is not None:
            scans[name] = ArgumentScan.of(known, skips)
    return scans


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
