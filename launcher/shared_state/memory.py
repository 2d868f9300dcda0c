"""The shared state of one instance: kept in this process (the default, ``--state`` not
given). Nothing is shared and nothing can be lost."""

from __future__ import annotations

import secrets
import time
from collections import deque
from collections.abc import Callable

from launcher.shared_state.store import KEEP_FOR, LEASE

# Grants kept at most, all scopes together; the ones used longest ago go first.
MAX_GRANTS = 64 * 1024
# Counted keys kept at most (breaker and in-flight); the oldest go first.
MAX_KEYS = 64 * 1024


class MemoryState:
    """:class:`~launcher.shared_state.store.SharedState` in this process.

    >>> state = MemoryState(clock=lambda: 0.0)
    >>> state.grant("alice", "fs/write_file", "h1")
    >>> state.granted("alice", "fs/write_file", "h1"), state.granted("bob", "fs/write_file", "h1")
    (True, False)
    """

    where = "in this process"
    shared = False

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._key = secrets.token_bytes(32)
        self._grants: dict[tuple[str, str, str], float] = {}  # -> last used
        self._counts: dict[str, deque[float]] = {}
        self._entered: dict[str, dict[str, float]] = {}  # key -> token -> lapses at
        self._marks: dict[str, float] = {}  # mark -> lapses at
        self._patterns: dict[str, tuple[float, dict[str, str]]] = {}  # scope -> (used, records)

    def reachable(self) -> bool:
        return True

    def sealing_key(self) -> bytes:
        return self._key

    def granted(self, scope: str, group: str, item: str) -> bool:
        key = (scope, group, item)
        used = self._grants.pop(key, None)
        now = self._clock()
        if used is None or now - used > KEEP_FOR:
            return False
        self._grants[key] = now  # the most recently used last
        return True

    def grant(self, scope: str, group: str, item: str) -> None:
        self._grants.pop((scope, group, item), None)
        self._grants[(scope, group, item)] = self._clock()
        while len(self._grants) > MAX_GRANTS:
            del self._grants[next(iter(self._grants))]

    def revoke(self, scope: str, group: str) -> None:
        for key in [k for k in self._grants if k[:2] == (scope, group)]:
            del self._grants[key]

    def count(self, key: str, limit: int, window: float) -> bool:
        now = self._clock()
        times = self._counts.pop(key, None) or deque()
        self._counts[key] = times
        while times and now - times[0] > window:
            times.popleft()
        while len(self._counts) > MAX_KEYS:
            del self._counts[next(iter(self._counts))]
        if len(times) >= limit:
            return False
        times.append(now)
        return True

    def enter(self, key: str, token: str, most: int) -> bool:
        now = self._clock()
        entered = self._entered.setdefault(key, {})
        for lapsed in [t for t, until in entered.items() if until < now]:
            del entered[lapsed]
        if len(entered) >= most:
            return False
        entered[token] = now + LEASE
        return True

    def leave(self, key: str, token: str) -> None:
        entered = self._entered.get(key)
        if entered is not None:
            entered.pop(token, None)
            if not entered:
                del self._entered[key]

    def first_use(self, mark: str, ttl: float) -> bool:
        now = self._clock()
        for lapsed in [m for m, until in self._marks.items() if until < now][:64]:
            del self._marks[lapsed]
        if mark in self._marks:
            return False
        self._marks[mark] = now + ttl
        return True

    def _kept_patterns(self, scope: str) -> dict[str, str]:
        """``scope``'s patterns, kept longer from now (none once they lapsed)."""
        used, records = self._patterns.pop(scope, (0.0, {}))
        now = self._clock()
        if now - used > KEEP_FOR:
            records = {}
        self._patterns[scope] = (now, records)  # the most recently used last
        while len(self._patterns) > MAX_KEYS:
            del self._patterns[next(iter(self._patterns))]
        return records

    def patterns(self, scope: str) -> dict[str, str]:
        return dict(self._kept_patterns(scope))

    def add_pattern(self, scope: str, pid: str, record: str) -> None:
        self._kept_patterns(scope)[pid] = record

    def drop_pattern(self, scope: str, pid: str) -> bool:
        _, records = self._patterns.get(scope, (0.0, {}))
        return records.pop(pid, None) is not None

    def every_pattern(self) -> dict[str, dict[str, str]]:
        now = self._clock()
        return {
            scope: dict(records)
            for scope, (used, records) in self._patterns.items()
            if records and now - used <= KEEP_FOR
        }
