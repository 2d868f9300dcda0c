"""Each caller's own servers in a session planned for every caller (over HTTP with callers,
the workspace or a server's config naming ``${caller}``): when a caller first calls, the
session is planned again for it (:mod:`launcher.plan.caller_plan`), its workspace and the
other places its servers use are made, the guard watches the roots they may write, and its
servers start from its plan. Nothing is started for a caller before it calls: no server can
be started in advance without knowing whose it is.

A caller whose places cannot be made or watched is refused, said why, and nothing of its is
started. Its plan is kept while a relay serves it; its workspace stays watched until the
session ends (the last sweep covers it), and is removed then if it is still empty."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Protocol

from launcher.guard.watch import Guard, GuardError
from launcher.plan.caller_plan import own_dirs, plan_for_caller
from launcher.plan.session_plan import SessionPlan
from launcher.relay.seams import Upstream
from launcher.servers.broker import Broker
from launcher.servers.egress_proxy import EgressProxy, Refusal
from launcher.session.hostfiles import HostFiles, writable_roots
from launcher.session.prestart import authority, egress_listener
from launcher.session.served import Hosting, Served
from launcher.shared.caller_identity import Caller
from launcher.shared.user_errors import USER_ERRORS, StartupError


class Session(Hosting, Protocol):
    """What a caller's servers need of the session: what every client's do, the guard, and
    its egress proxies (each caller's brokers among them)."""

    guard: Guard | None
    egress: dict[str, EgressProxy]

    def egress_refused(self, refusal: Refusal) -> None: ...


class CallerPlans:
    """The plans (and places) of the callers of one session planned for every caller."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._plans: dict[tuple[str, str], SessionPlan] = {}
        # What was made for the callers (their workspaces, placeholders, allowWrite
        # directories), in order: removed at the end if still empty. Paths only, a few a
        # caller: no plan is kept beyond its relays.
        self._made: list[str] = []
        self._opened: list[HostFiles] = []  # each caller's, to undo what it opened (as root)
        # Per caller, for the whole session: its servers the guard stopped (what one caller's
        # servers did to its own workspace stops no other caller's).
        self._halted: dict[tuple[str, str], dict[str, str]] = {}
        self._pinned = False  # whether a relay has compared the servers' tools at start

    async def served_for(self, caller: Caller, upstream: Upstream) -> Served:
        """A new client's servers for ``caller``, started from its plan, and its relay
        sending to ``upstream``. The first is the session's start: its servers' tools are
        pinned if they never were."""
        fresh = caller.key not in self._plans  # planned now: its sentinels are new
        plan = self.plan_for(caller)
        served = Served(self.session, plan, self._halted_for(caller, plan), caller)
        self.session.served.append(served)  # from now on the guard can halt its servers too
        try:
            if fresh:
                await self._brokers(plan)
            await served.fleet.start()
        except BaseException:
            await served.close()
            raise
        served.say_closed(caller)
        served.attach(upstream, at_start=not self._pinned)
        self._pinned = True
        return served

    async def _brokers(self, plan: SessionPlan) -> None:
        """The egress proxies that broker the secrets of ``plan``'s servers (one caller's):
        each with a CA of its own, written where its sandbox trusts it, and the caller's
        sentinels. A caller's earlier ones (from a plan no longer kept) are stopped first:
        their sentinels are no server's now."""
        for name, sp in plan.servers.items():
            if not sp.secrets or sp.egress is None or None in (sp.egress_socket, sp.ca_bundle):
                continue
            assert sp.egress_socket is not None and sp.ca_bundle is not None
            earlier = self.session.egress.pop(sp.egress_socket, None)
            if earlier is not None:
                await earlier.stop()
            hosts = sorted({host for b in sp.secrets for host, _ in b.hosts})
            ca = authority(name, sp.ca_bundle, hosts)
            broker = Broker(sp.secrets, ca)
            refused = self.session.egress_refused
            proxy = EgressProxy(name, sp.egress, sp.egress_socket, refused, broker)
            self.session.egress[sp.egress_socket] = proxy  # stopped with the session
            try:
                await proxy.start(egress_listener(name, sp.egress_socket))
            except OSError as exc:
                raise StartupError(
                    f"cannot start the egress proxy for '{name}' at {sp.egress_socket}: "
                    f"{exc.strerror}"
                ) from None

    def plan_for(self, caller: Caller) -> SessionPlan:
        """``caller``'s plan, its places made and watched (the one kept, while a relay
        serves it); :class:`StartupError` saying why when they cannot be."""
        plan = self._plans.get(caller.key)
        if plan is not None:
            return plan
        began = time.perf_counter()
        try:
            plan = plan_for_caller(self.session.plan, caller)
            if self._make_own_dirs(plan):  # a directory is mounted only when it is there
                plan = plan_for_caller(self.session.plan, caller)
        except USER_ERRORS as exc:
            raise self._refused(caller, str(exc)) from None
        except OSError as exc:
            raise self._refused(caller, f"cannot create {exc.filename}: {exc.strerror}") from None
        took = time.perf_counter() - began
        places = HostFiles(plan)  # what is there already is left as it is
        try:
            places.make_places()
        except StartupError as exc:
            places.remove_places()
            raise self._refused(caller, str(exc)) from None
        self._made += [plan.workspace] if plan.create_workspace else []
        self._made += places.placeholders
        self._opened.append(places)
        self._watch(caller, plan)
        self._plans[caller.key] = plan
        self.session.event(
            "caller-workspace",
            f"caller {caller.name!r}: workspace {plan.workspace} (planned in {took * 1000:.0f} ms)",
            caller=caller.audited,
            workspace=plan.workspace,
        )
        return plan

    def _halted_for(self, caller: Caller, plan: SessionPlan) -> dict[str, str]:
        """``caller``'s servers the guard stopped: those stopped in one of its clients, and
        any that can write a root the guard failed in (a root it shares with others)."""
        halted = self._halted.setdefault(caller.key, {})
        guard = self.session.guard
        for failure in guard.failures if guard is not None else ():
            for name, sp in plan.servers.items():
                if sp.profile is not None and failure.root in sp.profile.writable:
                    halted.setdefault(
                        name,
                        f"the guard could not neutralise {failure.path} in its writable root "
                        f"{failure.root} ({failure.reason})",
                    )
        return halted

    def _make_own_dirs(self, plan: SessionPlan) -> bool:
        """Make the caller's own ``allowWrite`` directories (those naming ``${caller}``) that
        are not there yet, owner-only; whether any was."""
        made = False
        for _, _, path, writable in own_dirs(self.session.plan, plan):
            if writable and not os.path.lexists(path):
                os.makedirs(path, mode=0o700)
                self._made.append(path)
                made = True
        return made

    def _watch(self, caller: Caller, plan: SessionPlan) -> None:
        """The guard watches the roots ``caller``'s servers may write, or none start."""
        guard = self.session.guard
        roots = writable_roots(plan)
        if not roots:
            return
        if guard is None:
            raise self._refused(caller, "no guard watches the roots its servers may write")
        guarded = [p for sp in plan.servers.values() for p in sp.guarded]
        anchored = [p for sp in plan.servers.values() for p in sp.anchored]
        try:
            guard.add_roots(roots, guarded, anchored)
        except GuardError as exc:
            raise self._refused(
                caller, f"cannot watch its workspace for protected files: {exc}"
            ) from None

    def _refused(self, caller: Caller, why: str) -> StartupError:
        """Said on stderr and in the audit log: no server of ``caller``'s starts."""
        self.session.event(
            "caller-refused",
            f"caller {caller.name!r} refused: {why}",
            caller=caller.audited,
            reason=why,
        )
        return StartupError(f"caller {caller.name!r} refused: {why}")

    def forget(self, caller: Caller) -> None:
        """No relay serves ``caller`` any more: its plan is made again when it calls again."""
        self._plans.pop(caller.key, None)
        if not self._halted.get(caller.key):
            self._halted.pop(caller.key, None)  # kept only when something was stopped

    def remove(self) -> None:
        """At the end of the session, its servers stopped: what was made for the callers
        and is still empty, and the ACL entries given to the servers' user (as root)."""
        for places in reversed(self._opened):
            places.close_access()
        self._opened.clear()
        for path in reversed(self._made):
            with contextlib.suppress(OSError):
                if os.path.isdir(path):
                    os.rmdir(path)  # only while still empty
                elif os.path.getsize(path) == 0:
                    os.unlink(path)  # a placeholder file nothing was written to
        self._made.clear()
