"""The session's servers: started together, each in its sandbox; restarted with back-off when
one exits and its config says so; halted when the guard cannot neutralise what they wrote;
stopped together."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable

from launcher.plan.config_schema import RestartConfig
from launcher.plan.server_plan import ServerPlan, client_capabilities
from launcher.plan.session_plan import SessionPlan
from launcher.servers import era_twin
from launcher.servers.connection import NotificationHandler, ServerConnection
from launcher.servers.remote import RemoteConnection, RemoteUnavailable, Whose, own_logins
from launcher.shared.jsonrpc import Message, ServerGone
from launcher.shared.shown import visible
from launcher.shared.user_errors import StartupError

STARTUP_TIMEOUT = 60.0

Notified = Callable[[ServerConnection, Message], None]
Event = Callable[..., None]  # (event, text, **fields): stderr and the audit log


def connection(
    sp: ServerPlan, on_notification: NotificationHandler, whose: Whose | None = None
) -> ServerConnection:
    """The connection a server of the plan is spoken to through: a process of its own, or
    a remote server's HTTP (signed in by ``whose`` login: None, the user's)."""
    if sp.remote is not None:
        capabilities = client_capabilities(sp)
        return RemoteConnection(sp.launch, sp.remote, on_notification, capabilities, whose)
    return ServerConnection(sp.launch, on_notification, client_capabilities(sp))


class Fleet:
    def __init__(
        self,
        plan: SessionPlan,
        on_notification: Notified,
        halted: dict[str, str] | None = None,
        caller: str | None = None,
    ) -> None:
        """``caller``: whose servers these are, in gateway mode (a key of
        :func:`launcher.servers.token_store.caller_key`; None: not known yet)."""
        self.plan = plan
        self._on_notification = on_notification
        # Remote servers each caller logs in to on its own (gateway mode): opened only once
        # the caller is known (:meth:`open_for`), never with another's login.
        self.own = [
            name
            for name, sp in plan.servers.items()
            if plan.gateway is not None and sp.remote is not None and own_logins(sp.remote)
        ]
        self.awaiting = set(self.own) if caller is None else set()
        self.servers: dict[str, ServerConnection] = {
            name: connection(sp, on_notification, Whose(caller) if name in self.own else None)
            for name, sp in plan.servers.items()
        }
        # Of those, the ones that did not open for this fleet's caller (no login of its, or
        # refused): why. Its own, not the session's: another caller's may open.
        self.closed: dict[str, str] = {}
        # Remote servers that could not be reached or refused ironcurtain: why, in one line.
        # The other servers serve; these offer nothing this session.
        self.unreachable: dict[str, str] = {}
        # Servers the guard stopped (it could not neutralise what their sandbox wrote): why.
        # Shared by every fleet of a session (of a caller, when each has its own plan): a
        # server halted in one is started in none.
        self.halted: dict[str, str] = {} if halted is None else halted
        self._supervisors: list[asyncio.Task[None]] = []
        # Servers found to serve one protocol era only (another instance refused the other).
        self.one_era: set[str] = set()
        # Instances being opened in another era than their server's (:meth:`speak`).
        self.opening: dict[str, ServerConnection] = {}

    async def adopt(self, procs: dict[str, subprocess.Popen[bytes]]) -> None:
        """Take over servers started before the session's event loop (not yet spoken to),
        taking each out of ``procs``: from now on it is stopped with the fleet."""
        for name in list(procs):
            await self.servers[name].start(procs.pop(name))

    @staticmethod
    async def _start_one(conn: ServerConnection) -> None:
        if conn.pid is None:  # not started already (adopted)
            await conn.start()
        await conn.initialize()
        await conn.list_tools()
        await conn.list_extras()

    async def start(self) -> None:
        """Start every server and list what it offers; the first that fails is reported with
        its last output, and none of them is left running (the caller stops them)."""
        conns = [
            c
            for name, c in self.servers.items()
            if name not in self.halted and name not in self.awaiting
        ]
        await self._start(conns)

    async def open_for(self, caller: str) -> list[ServerConnection]:
        """Open the remote servers each caller logs in to on its own, with ``caller``'s
        logins: those that opened (one that did not is said, and closed to this fleet)."""
        names = [name for name in self.own if name in self.awaiting and name not in self.halted]
        self.awaiting.clear()
        for name in names:
            self.servers[name] = connection(
                self.plan.servers[name], self._on_notification, Whose(caller)
            )
        conns = [self.servers[name] for name in names]
        await self._start(conns)
        return [conn for conn in conns if conn.name not in self.closed]

    async def _start(self, conns: list[ServerConnection]) -> None:
        results = await asyncio.gather(
            *(asyncio.wait_for(self._start_one(c), STARTUP_TIMEOUT) for c in conns),
            return_exceptions=True,
        )
        for conn, outcome in zip(conns, results, strict=True):
            if isinstance(conn, RemoteConnection) and isinstance(outcome, BaseException):
                self._unreachable(conn, outcome)
            elif isinstance(outcome, BaseException):
                await asyncio.sleep(0.05)  # let the last stderr lines arrive
                why = "did not answer in time" if isinstance(outcome, TimeoutError) else outcome
                # The server's lines, each shown on its own line: never a line of its own
                # making that reads as ironcurtain's.
                tail = "\n".join(
                    f"    {visible(line, one_line=True)}" for line in conn.stderr_tail[-8:]
                )
                raise StartupError(
                    f"server {visible(repr(conn.name), one_line=True)} failed to start: "
                    f"{visible(str(why), one_line=True)}"
                    + (f"\n  its last output:\n{tail}" if tail else ""),
                    own_lines=True,
                )

    def _unreachable(self, conn: RemoteConnection, outcome: BaseException) -> None:
        """A remote server that did not open: said in one line, its tools offered to no one,
        its connection closed (the session goes on with the others)."""
        if isinstance(outcome, RemoteUnavailable):
            why = str(outcome)
        elif isinstance(outcome, TimeoutError):
            why = conn.why_unavailable(TimeoutError("it did not answer in time"))
        else:
            why = conn.why_unavailable(outcome)
        why = visible(why, one_line=True)
        self.unreachable[conn.name] = why
        conn.tools, conn.prompts, conn.resources, conn.resource_templates = [], [], [], []
        if conn.whose is not None:  # this caller's (said by whoever opened it), not everyone's
            self.closed.setdefault(conn.name, why)
            return
        self.halted.setdefault(conn.name, why)
        print(f"ironcurtain: {why}; its tools are not offered this session", file=sys.stderr)

    def supervise(self, event: Event, restarted: Callable[[ServerConnection], None]) -> None:
        """Watch the servers whose config asks for restarts."""
        for name, sp in self.plan.servers.items():
            policy = sp.config.restart_policy
            if policy is not None:
                task = asyncio.create_task(self._supervise(name, policy, event, restarted))
                self._supervisors.append(task)

    async def _supervise(
        self,
        name: str,
        policy: RestartConfig,
        event: Event,
        restarted: Callable[[ServerConnection], None],
    ) -> None:
        """Restart a server that exits, with back-off, at most ``maxRestarts`` times."""
        for attempt in range(1, policy.max_restarts + 1):
            conn = await self._exit_of(name)
            if name in self.halted:
                return  # stopped by the guard: it stays stopped
            conn.restarting = True
            delay = min(30.0, policy.backoff_seconds * 2 ** (attempt - 1))
            status = conn.gone.status if conn.gone else None
            event(
                "server-restart",
                f"server '{name}' exited ({status}); restarting in {delay:g} s "
                f"(restart {attempt} of {policy.max_restarts})",
                server=name,
                exitStatus=status,
                attempt=attempt,
            )
            await asyncio.sleep(delay)
            if self.servers[name] is not conn:
                # Another instance took its place meanwhile (one opened in its client's era):
                # that one serves; a restart over it would leave it running, never stopped.
                conn.restarting = False
                continue
            fresh = ServerConnection(conn.spec, self._on_notification, conn.client_capabilities)
            try:
                await asyncio.wait_for(self._start_one(fresh), STARTUP_TIMEOUT)
            except Exception as exc:  # it counts as one more exit
                event("server-restart-failed", f"restarting '{name}' failed: {exc}", server=name)
                await fresh.stop()
                if fresh.gone is None:
                    fresh.gone = ServerGone(name, None, f"it could not be restarted: {exc}")
                fresh.exited.set()
            self.servers[name] = fresh
            await conn.stop()
            if fresh.gone is None:
                restarted(fresh)
        self.servers[name].restarting = False

    async def _exit_of(self, name: str) -> ServerConnection:
        """The server's connection, once it exits; one replaced meanwhile by an instance
        in another era (:meth:`speak`) is not waited for: its successor is."""
        while True:
            conn = self.servers[name]
            await conn.exited.wait()
            if self.servers[name] is conn:
                return conn

    def others(self, era: str) -> list[str]:
        """The servers :meth:`speak` would open again in ``era`` (none whose config names the
        era it is spoken to in)."""
        live = {
            n: c
            for n, c in self.servers.items()
            if n not in self.halted
            and n not in self.closed
            and n not in self.awaiting
            and self.plan.servers[n].config.era is None
        }
        return era_twin.others(live, era, self.one_era)

    async def speak(self, era: str, event: Event) -> list[ServerConnection]:
        """Each server that serves ``era`` too, spoken to in it from now on: an instance
        opened in it takes the place of the one in the other era (stopped). Those that
        serve one era only are kept as they are. The connections that took a place."""
        names = self.others(era)
        made = {n: era_twin.made(self.servers[n], era, self._on_notification) for n in names}
        self.opening.update(made)  # halted with their servers while they open
        try:
            found = await asyncio.gather(
                *(era_twin.in_era(made[n], era) for n in names), return_exceptions=True
            )
        finally:
            for name in names:
                self.opening.pop(name, None)
        took = []
        for name, fresh in zip(names, found, strict=True):
            if isinstance(fresh, BaseException):
                event("server-era-failed", f"server '{name}' could not be opened in the "
                      f"{era} era (it stays in the other): {fresh}", server=name)  # fmt: skip
            if not isinstance(fresh, ServerConnection) or name in self.halted:
                self.one_era.add(name)
                if isinstance(fresh, ServerConnection):
                    await fresh.stop()
                continue
            old, self.servers[name] = self.servers[name], fresh
            took.append(fresh)
            await old.stop()
        return took

    def halt(self, root: str, reason: str) -> list[str]:
        """Stop every server that can write ``root``; their requests are refused from now
        on. Returns the names of those that were still running."""
        stopped = []
        for name, sp in self.plan.servers.items():
            writable = sp.profile.writable if sp.profile is not None else ()
            if root in writable:
                self.halted.setdefault(name, reason)
                opening = self.opening.get(name)
                for conn in (self.servers[name], *([opening] if opening else [])):
                    if conn.running:
                        stopped.append(name)
                        conn.halt(reason)
        return stopped

    async def stop(self) -> None:
        for task in self._supervisors:
            task.cancel()
        await asyncio.gather(*self._supervisors, return_exceptions=True)
        conns = [*self.servers.values(), *self.opening.values()]
        await asyncio.gather(*(c.stop() for c in conns), return_exceptions=True)
