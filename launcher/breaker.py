"""The identical-call circuit breaker: an agent stuck in a loop (or driven to hammer one
call) is stopped. The same server, tool and canonical arguments more than ``limit`` times
within ``window`` seconds is refused until the window has room again."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from launcher.audit import hash_value


class CircuitBreaker:
    def __init__(
        self, limit: int, window: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._seen: dict[tuple[str, str, str], deque[float]] = {}

    def allow(self, server: str, tool: str, arguments: dict[str, object]) -> bool:
        """Count this call; False when it is one too many (``limit`` 0: never refuses).

        >>> b = CircuitBreaker(2, 60, clock=lambda: 0.0)
        >>> [b.allow("s", "t", {"a": 1}) for _ in range(3)], b.allow("s", "t", {"a": 2})
        ([True, True, False], True)
        """
        if self.limit <= 0:
            return True
        now = self._clock()
        times = self._seen.setdefault((server, tool, hash_value(arguments)), deque())
        while times and now - times[0] > self.window:
            times.popleft()
        if len(times) >= self.limit:
            return False
        times.append(now)
        return True
