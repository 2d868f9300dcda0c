"""The identical-call circuit breaker: an agent stuck in a loop (or driven to hammer one
call) is stopped. The same server, tool and canonical arguments more than ``limit`` times
within ``window`` seconds is refused until the window has room again. Arguments are known by
their per-field hashes (the ones the audit entry stores), so they are serialised once.

With a shared state (several instances of one gateway), the count is the instances'
together, and this instance counts its own as well: a call is refused when either count is
full, so a store lost, restarted empty or flushed never gives a caller a fresh limit on
this instance (the loss was said)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping

from launcher.audit.log import hash_value
from launcher.shared_state.store import SharedState, StateLost


class CircuitBreaker:
    def __init__(
        self,
        limit: int,
        window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        shared: SharedState | None = None,
        scope: str = "-",
    ) -> None:
        """``shared``: where instances count together (None: this one alone); ``scope``:
        whose counts these are there (a caller's, hashed)."""
        self.limit = limit
        self.window = window
        self._clock = clock
        self.shared = shared if shared is not None and shared.shared else None
        self.scope = scope
        self._seen: dict[tuple[str, str, tuple[tuple[str, str], ...]], deque[float]] = {}

    def allow(self, server: str, tool: str, hashes: Mapping[str, str]) -> bool:
        """Count this call (``hashes``: each argument's hash); False when it is one too many
        (``limit`` 0: never refuses).

        >>> b = CircuitBreaker(2, 60, clock=lambda: 0.0)
        >>> [b.allow("s", "t", {"a": "h1"}) for _ in range(3)], b.allow("s", "t", {"a": "h2"})
        ([True, True, False], True)
        """
        if self.limit <= 0:
            return True
        key = (server, tool, tuple(sorted(hashes.items())))
        if not self._here(key):
            return False
        if self.shared is not None:
            counted = f"breaker:{self.scope}:{hash_value(key)}"
            try:
                return self.shared.count(counted, self.limit, self.window)
            except StateLost:
                pass  # counted here alone meanwhile
        return True

    def _here(self, key: tuple[str, str, tuple[tuple[str, str], ...]]) -> bool:
        """Counted on this instance: False when this instance alone saw ``limit`` already."""
        now = self._clock()
        times = self._seen.setdefault(key, deque())
        while times and now - times[0] > self.window:
            times.popleft()
        if len(times) >= self.limit:
            return False
        times.append(now)
        return True
