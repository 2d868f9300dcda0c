"""A server of both protocol eras spoken to in the era of the client it serves.

A server is opened offering one era first (:mod:`launcher.servers.eras`); one that takes it
may well serve the other era too, and its tools may be written for one era only (asking its
client by requests of its own, or by ``input_required`` results). When a client of the other
era comes, another instance of the server is opened offering that era first, from the same
launch spec (the same sandbox, the same limits): when it opens in that era, it takes the
first one's place for that client's relay; when it falls back to the first one's era, the
server serves one era only, the new instance is stopped and the first is kept (spoken to in
its own era, bridged, as before).
"""

from __future__ import annotations

import asyncio
import dataclasses

from launcher.servers import eras
from launcher.servers.connection import NotificationHandler, ServerConnection

STARTUP_TIMEOUT = 60.0
# Seconds at least that the other instance has to answer ``server/discover``.
TWIN_PATIENCE = 15.0


def made(
    conn: ServerConnection, era: str, on_notification: NotificationHandler | None
) -> ServerConnection:
    """Another instance of ``conn``'s server (not started), to be opened offering ``era``
    first; made before it is opened so that what stops its server stops it too."""
    side = dataclasses.replace(conn.client_capabilities, era=era)
    fresh = conn.another(side, on_notification)
    # Slow to answer (a loaded machine, a start that takes its time) is not "does not
    # serve": a server that ignores the question costs its first such client this, once.
    fresh.patience = max(TWIN_PATIENCE, eras.DISCOVER_TIMEOUT + 2 * conn.opened_in)
    return fresh


async def in_era(fresh: ServerConnection, era: str) -> ServerConnection | None:
    """``fresh`` (:func:`made`) started, opened offering ``era`` first and listed; None
    when it answers in the other era (it serves one era only; the instance is stopped).
    Raises what starting it raised (the instance is stopped)."""
    try:
        await asyncio.wait_for(_opened(fresh, era), STARTUP_TIMEOUT)
    except BaseException:
        await fresh.stop()
        raise
    if fresh.era != era:
        await fresh.stop()
        return None
    return fresh


async def _opened(fresh: ServerConnection, era: str) -> None:
    await fresh.start()
    await fresh.initialize()
    if fresh.era == era:
        await fresh.list_tools()
        await fresh.list_extras()


def others(servers: dict[str, ServerConnection], era: str, known: set[str]) -> list[str]:
    """The servers that might serve ``era`` and are spoken to in the other: running, not
    known to serve one era only (they refused it when opened, or another instance did)."""
    return [
        name
        for name, conn in servers.items()
        if conn.running and conn.era != era and not conn.one_era and name not in known
    ]
