"""One checked request on its way through the relay, and how the relay reaches its client:
what the checked calls and their escalations both hold; and the answer to a request whose
params are not of its method's shape (:func:`malformed_answer`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import field
from typing import Any, Protocol

from launcher.audit.log import Prepared
from launcher.relay.approving.approval import AskClient
from launcher.relay.seams import Downstream, OneShot
from launcher.shared.error_codes import INVALID_PARAMS
from launcher.shared.jsonrpc import (
    COMPLETE,
    HANDSHAKE,
    PROMPT,
    TOOL,
    Message,
    completion_arguments,
    error,
    result,
    tool_result,
)
from sandbox_profiles.records import frozen, mutable


class Send(Protocol):
    """Where messages for the client go; ``related``: the client's request one belongs to."""

    def __call__(self, message: Message, related: str | int | None = None) -> None: ...


@frozen
class ClientLink:
    """How the checked calls and their escalations reach the client: ``send`` it a message,
    ``ask`` it an approval's question, whether it ``elicits`` (takes form elicitations, now,
    during a call), and ``spawn`` a task on the relay's loop; the ``era`` it speaks."""

    send: Send
    ask: AskClient
    elicits: Callable[[object], bool]
    spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]]
    era: Callable[[], str] = lambda: HANDSHAKE  # the protocol era the client speaks
    # What the client takes as requests during a call (its declared capabilities).
    takes: Callable[[object], Message | None] = lambda call: None


@mutable(slots=True)
class Call:
    """One checked request on its way through the relay."""

    request_id: Any
    method: str
    params: Message
    started: float
    server: str | None
    name: str  # the server's own name of the tool or prompt; the method for a resource
    arguments: dict[str, object]
    conn: Downstream | None
    entry: dict[str, Any] = field(default_factory=dict)
    downstream: int | None = None  # the id it was sent to the server with
    prepared: Prepared | None = None  # its audit entry, serialised while the server works
    progress_sent: int = 0  # progress ironcurtain reported while a human decided
    one_shot: OneShot | None = None  # an approved call run beyond the standing sandbox
    granted: list[dict[str, object]] | None = None  # what it was given, for the audit
    rounds: int = 0  # times its server asked for input (the stateless era's way)
    asking: asyncio.Task[None] | None = None  # answering what its server asked, now
    ended: bool = False  # audited with its outcome: nothing more is asked during it
    # The progress token its server is given for the client's: ironcurtain's own, so two
    # clients that chose the same token (one relay serves every stateless client over
    # HTTP) never hear each other's progress.
    token: str | None = None
    # The client's answer to its approval question, given before it was asked here: a
    # retry of a round another instance of the gateway began (None: none given).
    given: Message | None = None
    asked: str = ""  # a digest of the question (method and params) ``given`` answers

    def progress_token(self) -> str | int | None:
        """The client's progress token for this call, if it sent one."""
        meta = self.params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        return token if type(token) in (str, int) else None


def malformed_answer(method: str, params: Message, request_id: Any) -> Message | None:
    """The answer to a request whose params are not of its method's shape, or None."""
    if method == TOOL and not isinstance(params.get("arguments") or {}, dict):
        return result(request_id, tool_result("DENIED: arguments must be a JSON object"))
    if method == PROMPT and not isinstance(params.get("arguments") or {}, dict):
        return error(request_id, INVALID_PARAMS, "invalid params: arguments must be an object")
    if method == COMPLETE and completion_arguments(params) is None:
        text = (
            "invalid params: a completion needs a ref (ref/prompt or ref/resource), an "
            "argument with a string name and value, and context arguments that are strings"
        )
        return error(request_id, INVALID_PARAMS, text)
    return None
