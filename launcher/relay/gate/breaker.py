"""The identical-call circuit breaker: an agent stuck in a loop (or driven to hammer one
call) is stopped. The same server, tool and canonical arguments more than ``limit`` times
within ``window`` seconds is refused until the window has room again. Arguments are known by
their per-field hashes (the ones the audit entry stores), so they are serialised once."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping


class CircuitBreaker:
    def __init__(
        self, limit: int, window: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
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
        now = self._clock()
        key = (server, tool, tuple(sorted(hashes.items())))
        times = self._seen.setdefault(key, deque())
        while times and now - times[0] > self.window:
            times.popleft()
        if len(times) >= self.limit:
            return False
        times.append(now)
        return True
