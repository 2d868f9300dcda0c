"""What a session does on its own, said on stderr and written to the audit log: an egress
connection refused, a file the guard quarantined, a failure of the guard (the servers that
can write where it happened are stopped), and the guard's last sweep."""

from __future__ import annotations

import os

from launcher.audit.log import AuditLog
from launcher.guard.watch import Guard, GuardFailure, Quarantined
from launcher.servers.egress_proxy import Refusal
from launcher.session.report import say
from launcher.session.served import Served


class SessionEvents:
    """The session's own events (a mixin of the session: its audit log, guard and served
    clients)."""

    audit: AuditLog | None
    guard: Guard | None
    served: list[Served]
    unneutralised: list[GuardFailure]

    def event(self, event: str, text: str, **fields: object) -> None:
        say(text)  # on one line, as escapes: names in it are a server's choice
        if self.audit is not None:
            self.audit.write({"event": event, **fields})

    def egress_refused(self, refusal: Refusal) -> None:
        self.event(
            "egress-refused",
            f"egress refused for '{refusal.server}': "
            f"{refusal.host}:{refusal.port}: {refusal.reason}",
            server=refusal.server,
            host=refusal.host,
            port=refusal.port,
            reason=refusal.reason,
        )

    def _quarantined(self, record: Quarantined) -> None:
        path = _as_text(record.path)
        self.event(
            "quarantine",
            f"quarantined {path} ({record.why}); moved to {_as_text(record.moved_to)}",
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
        stopped = [
            name for served in self.served for name in served.fleet.halt(failure.root, reason)
        ]
        stopped = list(dict.fromkeys(stopped))
        self.event(
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
            say(
                "WARNING: these paths in the workspace may be loaded or run by "
                "host tools (git, shells, editors) and could not be moved out; inspect and "
                f"remove them before using the workspace:\n{listing}"
            )


def _as_text(path: str) -> str:
    """A path as text the audit log can hold: bytes that are not UTF-8 (a name a server
    chose) are shown as escapes, so they cannot make the log fail.

    >>> _as_text("/ws/" + b"\\xff".decode("utf-8", "surrogateescape"))
    '/ws/\\\\xff'
    """
    return os.fsencode(path).decode("utf-8", "backslashreplace")
