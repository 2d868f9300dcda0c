"""The relay core's two seams, as plain callbacks so a relayed call costs no extra trip
round the event loop.

- **downstream**: a server connection (:class:`Downstream`): send a request with a
  completion callback, cancel it, notify; what the server lists;
- **upstream**: a client transport (:class:`Upstream`): it hands each message it reads to
  the relay's ``feed`` and takes what the relay sends through ``deliver``.

A server process over stdio (:mod:`launcher.servers.connection`) is one downstream, a fake in the
tests is another; stdio and streamable HTTP are the upstreams.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any, Protocol

from launcher.audit.log import AuditLog
from launcher.audit.telemetry import Telemetry
from launcher.relay.approving.grants import Grant
from launcher.relay.gate.decide import Gate
from launcher.relay.outputs import Outputs
from launcher.relay.router import Listing, Router
from launcher.shared.caller_identity import Caller
from launcher.shared.jsonrpc import Message, OnDone
from launcher.shared_state.store import SharedState
from policy.output import OutputPolicy
from sandbox_profiles.records import frozen, mutable


class Downstream(Listing, Protocol):
    """One server, as the relay sees it."""

    name: str
    restarting: bool
    era: str  # the protocol era it is spoken to in

    @property
    def roots(self) -> tuple[Message, ...]:
        """What it is told its client's roots are."""
        ...

    # Where the server's requests of the client go (the relay core sets it).
    on_request: Callable[[Any, Message], None] | None

    def send_request(
        self, method: str, params: Message | None, on_done: OnDone, timeout: float | None = None
    ) -> int: ...

    def cancel_request(self, request_id: int, reason: str) -> bool: ...

    def notify(self, method: str, params: Message | None) -> None: ...

    def reply(self, request_id: object, outcome: Message) -> None:
        """Answer a request the server made (``outcome`` holds ``result`` or ``error``)."""
        ...

    async def list_tools(self) -> list[Message]: ...

    async def list_extras(self) -> None: ...


class Upstream(Protocol):
    """The client's side: where the relay's messages go."""

    def deliver(self, message: Message, related: str | int | None = None) -> None:
        """Send ``message`` to the client; ``related`` is the id of the client's request it
        belongs to (an answer's own id, or the call a progress notification or a server's
        request was made during), so a transport with a stream per request (streamable
        HTTP) sends it there; None: the client's stream for what nobody asked."""
        ...

    def backlog(self) -> int:
        """Bytes written for the client and not yet taken by it."""
        ...


class Carried(Protocol):
    """Who must know what the trusted process writes in a writable root for an approved
    call (the guard, which would otherwise take it for a sandbox's)."""

    def expect(self, paths: Iterable[str]) -> None: ...

    def accept(self, paths: Iterable[str], wrote: bool = True) -> None: ...


class OneShot(Protocol):
    """An instance of a server for approved calls that need more than its standing
    sandbox (:mod:`launcher.servers.widen`): for one call, or *kept* for the identical calls an
    approval for the session covers."""

    @property
    def conn(self) -> Downstream: ...

    @property
    def kept(self) -> bool: ...

    @property
    def grants(self) -> tuple[Grant, ...]: ...

    async def stop(self) -> None: ...

    def commit(self) -> tuple[list[dict[str, object]], str | None]:
        """After the call (after :meth:`stop`, unless kept): carry its changes to the
        approved paths over to the host; a record per path, and why nothing could be
        carried over (None: done)."""
        ...

    def release(self) -> None:
        """A kept instance's call is over (it serves the next identical call)."""
        ...

    def discard(self) -> None:
        """Remove what the instance was given (it has stopped)."""
        ...


class Widening(Protocol):
    """Approved calls that need more than their server's standing sandbox."""

    def grants(self, server: str, tool: str, arguments: Mapping[str, object]) -> list[Grant]:
        """What the call needs beyond the standing sandbox (empty: nothing); raises
        :class:`launcher.relay.approving.grants.CannotWiden` when no approval could give it."""
        ...

    async def start(
        self, server: str, grants: Sequence[Grant], keep: str | None = None, era: str | None = None
    ) -> OneShot:
        """An instance for the call; ``keep`` names the session approval it was made
        under (its instance is kept for the identical calls after it); ``era``: the one
        the server is spoken to for the call's client (None: as its config says)."""
        ...

    async def close(self) -> None:
        """Stop every instance (the session ends)."""
        ...

    def carried(self) -> Carried | None:
        """Who must know what the trusted process writes for an approved call (None:
        no one)."""
        ...


@frozen(slots=True)
class ServerSettings:
    """What the relay core needs to know of one server beyond its connection."""

    cwd: str  # where its relative paths are resolved
    timeout: float | None  # seconds a request may take
    sandboxed: bool
    elicitation: str = "allow"  # what it may ask of the client: allow, deny
    sampling: str = "ask"  # allow, ask (a human first), deny
    # Its egress lists: where a link it asks the human to open (URL elicitation) may lead.
    allowed_domains: tuple[str, ...] = ()
    denied_domains: tuple[str, ...] = ()


@mutable
class Core:
    """What the relay core works with; the session gives it."""

    servers: Mapping[str, Downstream]  # live: a restarted server's connection replaces one
    settings: Mapping[str, ServerSettings]
    gate: Gate
    audit: AuditLog
    router: Router
    workspace: str  # where a request no server takes is resolved
    audit_args_clear: bool = False
    halted: Mapping[str, str] = field(default_factory=dict)  # servers stopped, and why
    settle: Callable[[], None] = lambda: None  # the guard: deal with what servers wrote
    say: Callable[[str], None] = print  # a line for the operator
    # What servers send the client, filtered (output policies, credential detectors).
    outputs: Outputs = field(default_factory=lambda: Outputs(OutputPolicy(), {}))
    widen: Widening | None = None  # None: an approved call runs where any call runs
    # Whose requests this relay serves (None: no caller source; one local user).
    caller: Caller | None = None
    telemetry: Telemetry | None = None  # None: calls are not exported
    # The relay's client speaks this era: what is to be awaited before its first request
    # is served (servers of both eras opened in it), or None when nothing is.
    speak: Callable[[str], Awaitable[None] | None] = lambda era: None
    # What instances of one gateway share: the key question rounds are sealed with, and
    # their handles' single use (None: this relay's own key).
    state: SharedState | None = None
