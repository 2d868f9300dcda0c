"""The pattern approvals a session holds: given by a human (the operator in gateway mode),
each its owner's alone (a caller's pattern never answers another caller's call), listed and
revocable.

Kept behind :class:`PatternStore`, a small interface; :class:`LocalPatterns` keeps them in
this process (a store shared between instances implements the same five methods).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import field
from typing import Any, Protocol

from launcher.audit.log import hash_value
from launcher.shared_state.store import StateLost
from policy.patterns import CallShape, Pattern, covers
from sandbox_profiles.records import frozen, mutable

# The owner of the patterns given in a session without callers (one local user).
LOCAL = ""


@frozen(slots=True)
class Given:
    """A pattern given: its id, whose calls it answers, when it was given."""

    pid: str
    owner: str
    pattern: Pattern
    given_at: float

    def record(self) -> dict[str, object]:
        """As the list shows it (and a shared store keeps it)."""
        return {
            "id": self.pid,
            "owner": self.owner,
            "text": self.pattern.text(),
            "givenAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.given_at)),
            **self.pattern.record(),
        }


def owner_of(caller: dict[str, str] | None) -> str:
    """The owner key of ``caller``'s patterns (:data:`LOCAL` without callers)."""
    if caller is None:
        return LOCAL
    return f"{caller.get('issuer', '')}\0{caller.get('name', '')}"


class PatternStore(Protocol):
    def give(self, owner: str, pattern: Pattern) -> Given:
        """Record ``pattern`` for ``owner``'s calls."""
        ...

    def find(self, owner: str, shape: CallShape) -> Given | None:
        """The pattern of ``owner``'s that the call ``shape`` falls under, if any."""
        ...

    def listed(self) -> list[Given]:
        """Every pattern in force, oldest first."""
        ...

    def revoke(self, pid: str) -> Given | None:
        """Take back the pattern ``pid`` (None: there is none)."""
        ...

    def forget(self, server: str, tool: str) -> list[Given]:
        """Drop the patterns of ``tool`` of ``server`` (it changed since); those dropped."""
        ...


@mutable
class LocalPatterns:
    """Patterns kept in this process, for this session."""

    given: dict[str, Given] = field(default_factory=dict)  # by id

    def give(self, owner: str, pattern: Pattern) -> Given:
        for known in self.given.values():
            if known.owner == owner and known.pattern == pattern:
                return known
        pid = f"p-{secrets.token_hex(4)}"
        entry = Given(pid, owner, pattern, time.time())
        self.given[pid] = entry
        return entry

    def find(self, owner: str, shape: CallShape) -> Given | None:
        for entry in self.given.values():
            if entry.owner == owner and covers(entry.pattern, shape):
                return entry
        return None

    def listed(self) -> list[Given]:
        return sorted(self.given.values(), key=lambda g: g.given_at)

    def revoke(self, pid: str) -> Given | None:
        return self.given.pop(pid, None)

    def forget(self, server: str, tool: str) -> list[Given]:
        gone = [
            g for g in self.given.values() if (g.pattern.server, g.pattern.tool) == (server, tool)
        ]
        for entry in gone:
            del self.given[entry.pid]
        return gone


def lister(
    store: PatternStore, record: Callable[[dict[str, object]], object]
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """What answers a lister on the approvals socket: ``{"type": "patterns"}`` with every
    pattern in force, ``{"type": "revoke", "id"}`` by revoking it (the revocation handed to
    ``record``, for the audit log, which keeps the directory or host as its hash)."""

    def answer(request: dict[str, Any]) -> dict[str, Any]:
        try:
            return answered(request)
        except StateLost as lost:
            return {"type": "error", "error": f"the shared state cannot be reached ({lost})"}

    def answered(request: dict[str, Any]) -> dict[str, Any]:
        if request.get("type") == "patterns":
            return {"type": "patterns", "patterns": [g.record() for g in store.listed()]}
        pid = str(request.get("id"))
        gone = store.revoke(pid)
        if gone is not None:
            record(
                {
                    "event": "pattern-revoked",
                    "pattern": {
                        "id": gone.pid,
                        "kind": gone.pattern.kind,
                        "server": gone.pattern.server,
                        "tool": gone.pattern.tool,
                        "value": hash_value(gone.pattern.value),
                    },
                }
            )
        return {"type": "revoked", "id": pid, "pattern": gone.record() if gone else None}

    return answer
