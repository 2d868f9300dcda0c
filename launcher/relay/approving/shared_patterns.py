"""Pattern approvals kept in the state instances of one gateway share (Redis): a pattern
given on one instance answers its owner's calls on every instance, and one taken back is
taken back on all of them at their next call (every call reads the store; nothing is
copied here).

The store never holds a pattern's directory or host in clear: each record keeps the value's
``sha256`` (as the audit log keeps it). A call is matched from its own values: each one a
pattern of that kind could name for it (every directory holding its first path, the host
of each of its URLs, its arguments' role class) is hashed and looked up, and a hit is judged
by :func:`policy.patterns.covers` on the pattern rebuilt from the call's clear value, as a
pattern kept in this process is. Whoever reads the store learns who holds patterns of which
tool and rule, and can confirm a guessed directory or host, not read one.

When the store cannot be reached, every operation raises
:class:`~launcher.shared_state.store.StateLost`: no pattern answers a call then.
"""

from __future__ import annotations

import json
import secrets
import time
from collections import OrderedDict
from typing import Any

from launcher.audit.log import hash_value
from launcher.relay.approving.patterns import LOCAL, Given
from launcher.shared_state.store import SharedState, scope_of
from policy.patterns import CallShape, Pattern, covers, strict_origin

# Values seen in clear here (given here, or matched by a call here), by hash: for the list
# alone, never for matching. A tool pattern's value is a role class, never a secret.
SEEN_MOST = 4096
_CLASSES = ("read", "opaque")


def candidates(kind: str, shape: CallShape) -> set[str]:
    """The values a pattern of ``kind`` covering the call ``shape`` could have: a superset,
    which :func:`~policy.patterns.covers` narrows."""
    if kind == "directory":
        if not shape.paths:
            return set()
        first = shape.paths[0]
        found = {first}
        for at, char in enumerate(first):
            if char == "/":
                found |= {first[:at], first[: at + 1]}
        return found - {""}
    if kind == "domain":
        # A host pattern is bound to scheme, host and port: its value is the origin.
        return {o for url in shape.urls if (o := strict_origin(url)) is not None}
    if kind == "tool":
        return set(shape.kinds)
    return set()


def _scope(owner: str) -> str:
    """Where ``owner``'s patterns are kept: as its approvals for the session are."""
    if owner == LOCAL:
        return scope_of(None)
    issuer, _, name = owner.partition("\0")
    return scope_of((issuer, name))


def _parsed(text: str) -> dict[str, Any] | None:
    """A record as written by :meth:`SharedPatterns.give` (None: not one)."""
    try:
        record = json.loads(text)
    except ValueError:
        return None
    wanted = ("owner", "kind", "server", "tool", "rule", "value")
    if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in wanted):
        return None
    if record["kind"] not in ("directory", "domain", "tool"):
        return None
    given_at = record.get("givenAt")
    record["givenAt"] = float(given_at) if isinstance(given_at, int | float) else 0.0
    return record


class SharedPatterns:
    """:class:`~launcher.relay.approving.patterns.PatternStore` in a shared state."""

    def __init__(self, state: SharedState) -> None:
        self.state = state
        self._seen: OrderedDict[str, str] = OrderedDict((hash_value(c), c) for c in _CLASSES)

    def _saw(self, value: str) -> None:
        self._seen[hash_value(value)] = value
        self._seen.move_to_end(hash_value(value))
        while len(self._seen) > SEEN_MOST:
            self._seen.popitem(last=False)

    def _given(self, pid: str, record: dict[str, Any], value: str | None = None) -> Given:
        """The record as a pattern given (its value in clear when known here)."""
        shown = value if value is not None else self._seen.get(record["value"], record["value"])
        pattern = Pattern(record["kind"], record["server"], record["tool"], record["rule"], shown)
        return Given(pid, record["owner"], pattern, record["givenAt"])

    def _records(self, scope: str) -> list[tuple[str, dict[str, Any]]]:
        found = ((pid, _parsed(text)) for pid, text in self.state.patterns(scope).items())
        return [(pid, record) for pid, record in found if record is not None]

    def give(self, owner: str, pattern: Pattern) -> Given:
        scope = _scope(owner)
        digest = hash_value(pattern.value)
        self._saw(pattern.value)
        head = (owner, pattern.kind, pattern.server, pattern.tool, pattern.rule, digest)
        for pid, record in self._records(scope):
            wanted = ("owner", "kind", "server", "tool", "rule", "value")
            if tuple(record[k] for k in wanted) == head:
                return self._given(pid, record, pattern.value)
        pid, now = f"p-{secrets.token_hex(4)}", time.time()
        record = {**pattern.record(), "owner": owner, "value": digest, "givenAt": now}
        self.state.add_pattern(scope, pid, json.dumps(record, sort_keys=True))
        return Given(pid, owner, pattern, now)

    def find(self, owner: str, shape: CallShape) -> Given | None:
        head = (shape.server, shape.tool, shape.rule)
        for pid, record in self._records(_scope(owner)):
            if (record["owner"], record["server"], record["tool"], record["rule"]) != (
                owner,
                *head,
            ):
                continue
            for value in candidates(record["kind"], shape):
                if hash_value(value) != record["value"]:
                    continue
                entry = self._given(pid, record, value)
                if covers(entry.pattern, shape):
                    self._saw(value)
                    return entry
        return None

    def _every(self) -> list[tuple[str, str, dict[str, Any]]]:
        """Every scope's patterns: (scope, id, record), oldest first."""
        found = [
            (scope, pid, record)
            for scope, records in self.state.every_pattern().items()
            for pid, text in records.items()
            if (record := _parsed(text)) is not None
        ]
        return sorted(found, key=lambda entry: entry[2]["givenAt"])

    def listed(self) -> list[Given]:
        return [self._given(pid, record) for _, pid, record in self._every()]

    def revoke(self, pid: str) -> Given | None:
        for scope, held, record in self._every():
            if held == pid and self.state.drop_pattern(scope, pid):
                return self._given(pid, record)
        return None

    def forget(self, server: str, tool: str) -> list[Given]:
        gone = []
        for scope, pid, record in self._every():
            ours = (record["server"], record["tool"]) == (server, tool)
            if ours and self.state.drop_pattern(scope, pid):
                gone.append(self._given(pid, record))
        return gone
