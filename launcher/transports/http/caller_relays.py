"""The relays that serve requests of the stateless protocol era over HTTP: one for all of
them, or in gateway mode one for each caller, opened with its first request, ended when it
has made none for ``IDLE_TIMEOUT`` seconds or when room is needed for another caller (at
most ``max_callers`` at once, the one idle longest going first; never one with a request
out; and only of the newcomer's own party, or of a party holding more than its fair share,
:func:`launcher.transports.http.gateway.admission.giving_way`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from launcher.shared.jsonrpc import Message
from launcher.transports.http.gateway.admission import giving_way, parted, party_room
from sandbox_profiles.records import mutable

if TYPE_CHECKING:
    from launcher.shared.caller_identity import Caller

RETRY_AFTER = 5.0  # seconds a failed start of the servers is answered without trying again
IDLE_TIMEOUT = 30 * 60.0  # seconds a caller's servers are kept with no request from it
SWEEP_EVERY = 60.0  # seconds between looks for callers idle that long


class Relayed(Protocol):
    """A relay as a transport sees it: what the client says goes in as JSON text; whose
    requests it serves (gateway mode: one caller's, whose latest token says what it may do)."""

    caller: Caller | None

    def feed(self, line: bytes) -> None: ...

    def holds(self) -> bool:
        """Whether its client is to come back for something (a question's retry), so it is
        not ended to make room."""
        ...

    def listed_tool(self, name: str) -> Message | None:
        """The tool ``name`` as its caller is shown it (None: not shown)."""
        ...

    async def close(self) -> None: ...


class Upstream(Protocol):
    """Where a relay's messages for its client go (the relay core's upstream seam)."""

    def deliver(self, message: Message, related: str | int | None = None) -> None: ...

    def backlog(self) -> int: ...

    def audit_fields(self, entry: Mapping[str, Any]) -> Mapping[str, object]:
        """What the audit log adds to ``entry``, written for this client (who called)."""
        ...


# Given where its messages go and whose requests it serves, start a client's servers and
# relay (raises, with a message for the client, when they cannot be started).
Opener = Callable[[Upstream, "Caller | None"], Awaitable[Relayed]]
CallerKey = tuple[str, str] | None  # a caller's key; None: no caller source


@mutable
class Held:
    """One caller's relay, and how it is used."""

    relay: Relayed
    busy: int = 0  # its requests being served (a listen's stream among them)
    last_used: float = 0.0
    party: str = ""  # who stands behind its caller (the room is shared by parties)


class CallerRelays:
    """The relays of the stateless protocol's requests, by caller; ``upstream`` is where
    each sends its client's messages."""

    def __init__(
        self,
        opener: Opener,
        upstream: Upstream,
        max_callers: int = 16,
        say: Callable[[str], None] = print,
    ) -> None:
        self._opener = opener
        self._upstream = upstream
        self.max_callers = max_callers
        self._say = say
        self._relays: dict[CallerKey, Held] = {}
        self._opening: dict[CallerKey, asyncio.Future[Held]] = {}
        self._opening_party: dict[CallerKey, str] = {}  # the party of each opening
        self._sweeper: asyncio.Task[None] | None = None
        # When a caller's servers last could not start, and why (each caller's own: one
        # caller refused, say for a workspace that cannot be made, delays no other).
        self._failed: dict[CallerKey, tuple[float, str]] = {}
        self._awaited: dict[CallerKey, int] = {}  # requests waiting for their relay to open

    def __len__(self) -> int:
        return len(self._relays)

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        for opening in list(self._opening.values()):
            opening.cancel()
        held, self._relays = list(self._relays.values()), {}
        await asyncio.gather(*(h.relay.close() for h in held), return_exceptions=True)

    async def take(self, caller: Caller | None) -> Held:
        """The relay of ``caller``'s requests, its servers started with its first (other
        callers' requests go on meanwhile); after they could not be, the same failure for
        ``RETRY_AFTER`` seconds rather than a start for each request. A new caller past
        ``max_callers`` ends the one idle longest (:class:`TooMany` when every one has a
        request out). Counted as busy until :meth:`done`."""
        key = caller.key if caller is not None else None
        while True:
            held = self._relays.get(key)
            if held is not None:
                held.busy += 1  # counted before anything can end it
                return held
            opening = self._opening.get(key)
            if opening is None:
                loop = asyncio.get_running_loop()
                failed = self._failed.get(key)
                if failed is not None and loop.time() < failed[0] + RETRY_AFTER:
                    raise RuntimeError(failed[1])
                if caller is not None and self._party_full(caller):
                    if not await self._evict(caller.party, own=True):
                        raise TooMany(
                            "too many callers of this caller's party at once "
                            f"({party_room(self.max_callers)}); none of them is idle"
                        )
                    continue
                if len(self._relays) + len(self._opening) >= self.max_callers:
                    if not await self._evict(caller.party if caller is not None else ""):
                        raise TooMany(
                            f"too many callers at once ({self.max_callers}); none that "
                            "could make room is idle"
                        )
                    continue  # another request of this caller may have opened it meanwhile
                opening = self._opening[key] = asyncio.ensure_future(self._open(key, caller))
                self._opening_party[key] = caller.party if caller is not None else ""
            # Until this request is counted on it, the relay is not ended to make room.
            self._awaited[key] = self._awaited.get(key, 0) + 1
            try:
                await asyncio.shield(opening)
            finally:
                self._awaited[key] -= 1
                if not self._awaited[key]:
                    del self._awaited[key]

    async def _open(self, key: CallerKey, caller: Caller | None) -> Held:
        loop = asyncio.get_running_loop()
        try:
            relay = await self._opener(self._upstream, caller)
        except Exception as exc:
            self._failed.pop(key, None)
            self._failed[key] = (loop.time(), str(exc))
            while len(self._failed) > self.max_callers:  # the oldest failure goes first
                del self._failed[next(iter(self._failed))]
            raise
        finally:
            self._opening.pop(key, None)
            self._opening_party.pop(key, None)
        self._failed.pop(key, None)
        party = caller.party if caller is not None else ""
        held = self._relays[key] = Held(relay, last_used=loop.time(), party=party)
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep())
        return held

    def _party_full(self, caller: Caller) -> bool:
        """Whether ``caller``'s party, told apart by required claims, holds (or is opening)
        all the relays it may: :func:`party_room` of them."""
        if not parted(caller.issuer, caller.party):
            return False
        held = [h.party for h in self._relays.values()] + list(self._opening_party.values())
        return held.count(caller.party) >= party_room(self.max_callers)

    async def _evict(self, party: str, own: bool = False) -> bool:
        """For a newcomer of ``party``: end the caller's relay unused longest, if one has no
        request out (nor one on its way to it, nor a question whose retry is awaited), of
        the newcomer's party or (unless ``own``) of one holding more than its share."""
        holders = (h.party for h in self._relays.values())
        parties = {party} if own else giving_way(party, holders, self.max_callers)
        idle = [
            (h.last_used, k)
            for k, h in self._relays.items()
            if not h.busy and k not in self._awaited and not h.relay.holds()
            if h.party in parties
        ]
        if not idle:
            return False
        _, key = min(idle, key=lambda pair: pair[0])
        await self._end(key, "the one idle longest, for a new caller", self._relays[key])
        return True

    async def _sweep(self) -> None:
        """End the relays (and servers) of callers that made no request for
        ``IDLE_TIMEOUT`` seconds."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(SWEEP_EVERY)
            for key, held in list(self._relays.items()):
                unused = loop.time() - held.last_used > IDLE_TIMEOUT
                # Without a caller source the one relay serves for the whole session.
                if key is not None and unused and not held.busy and key not in self._awaited:
                    await self._end(key, "idle", held)

    async def _end(self, key: CallerKey, why: str, held: Held) -> None:
        """End ``held``, the relay of ``key`` (unless another replaced it meanwhile)."""
        if self._relays.get(key) is not held:
            return
        del self._relays[key]
        if key is not None:
            self._say(f"servers of caller {key[1]!r} ({key[0]}) stopped: {why}")
        with contextlib.suppress(Exception):
            await held.relay.close()

    def done(self, held: Held) -> None:
        """A request ``take`` was for is served."""
        held.busy -= 1
        held.last_used = asyncio.get_running_loop().time()


class TooMany(Exception):
    """No room for another caller's servers now."""
