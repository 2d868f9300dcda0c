"""The HTTP endpoint's health, for a load balancer's or an orchestrator's probes.

``/livez`` answers 200 while the endpoint answers at all. ``/healthz`` (and ``/readyz``, the
same) answers 200 while it can serve callers as it should: 503 once it is stopping, or while
the state it shares with other instances cannot be reached (then approvals are not taken and
escalations are denied, so a balancer should send callers to an instance that has it).

No token is needed and nothing is told but ``ok`` or ``unavailable``: not the store, not
why. The store is asked at most once at a time and its answer kept ``FRESH`` seconds, so
a flood of probes from anywhere costs it nothing more.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from starlette.types import Send

if TYPE_CHECKING:
    from launcher.shared_state.store import SharedState

LIVE = "/livez"
READY = ("/healthz", "/readyz")
PATHS = (LIVE, *READY)
FRESH = 1.0  # seconds an answer of the shared state is kept


class Health:
    """Whether the endpoint can serve: ``state`` is what it shares with other instances
    (None, or one not shared: nothing to lose)."""

    def __init__(self, state: SharedState | None) -> None:
        self.state = state
        self.stopping = False
        self._asking: asyncio.Future[bool] | None = None
        self._known: tuple[float, bool] | None = None  # when asked, and the answer

    async def ready(self) -> bool:
        if self.stopping:
            return False
        state = self.state
        if state is None or not state.shared:
            return True
        known = self._known
        if known is not None and time.monotonic() - known[0] < FRESH:
            return known[1]
        if self._asking is None:
            self._asking = asyncio.ensure_future(self._ask(state))
        return await asyncio.shield(self._asking)

    async def _ask(self, state: SharedState) -> bool:
        try:
            answer = await asyncio.to_thread(state.reachable)
        except Exception:  # whatever stopped it: not reachable
            answer = False
        finally:
            self._asking = None
        self._known = (time.monotonic(), answer)
        return answer

    async def answer(self, method: str, path: str, send: Send) -> None:
        """The answer to a probe of ``path`` (one of :data:`PATHS`)."""
        if method not in ("GET", "HEAD"):
            await _send(send, 405, b"GET\n", [(b"allow", b"GET, HEAD")], method)
            return
        good = path == LIVE or await self.ready()
        body = b"ok\n" if good else b"unavailable\n"
        await _send(send, 200 if good else 503, body, [], method)


async def _send(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]], method: str
) -> None:
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
        *headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})
