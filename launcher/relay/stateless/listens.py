"""``subscriptions/listen``: a stateless client's stream of notifications (MCP 2026-07-28),
which takes the place of the handshake era's list-change notifications and
``resources/subscribe``.

The client names what it wants (``toolsListChanged``, ``promptsListChanged``,
``resourcesListChanged``, ``resourceSubscriptions``: URIs); it is told what it gets
(``notifications/subscriptions/acknowledged``, first), then only that, each notification
carrying the listen request's id as ``io.modelcontextprotocol/subscriptionId`` in its
``_meta``. A resource URI is subscribed to as ``resources/subscribe`` of it is in the
handshake era: through the gate (a subscription is a read of what it names), audited, at
the server that holds it; one the gate refuses, or that no server can watch, is left out
of the acknowledgment. The stream ends when the client cancels the listen request
(``notifications/cancelled``, or by closing the request over HTTP), its URIs unsubscribed
at their servers; when the session ends, it is answered (a graceful close).
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable
from dataclasses import field
from typing import Any

from launcher.relay.call import Send
from launcher.shared.error_codes import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST
from launcher.shared.jsonrpc import FOR_REQUEST, META, SUBSCRIBE, UNSUBSCRIBE, Message
from sandbox_profiles.records import mutable

LISTEN = "subscriptions/listen"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
SUBSCRIPTION_ID = META + "subscriptionId"
UPDATED = "notifications/resources/updated"
LISTS = {
    "toolsListChanged": "notifications/tools/list_changed",
    "promptsListChanged": "notifications/prompts/list_changed",
    "resourcesListChanged": "notifications/resources/list_changed",
}
MAX_URIS = 64  # resources one listen may watch
MAX_LISTENS = 32  # listens one caller may have open at once
MAX_ALL_LISTENS = 256  # listens open at once, every caller's


# Sends a checked request of ironcurtain's own (method, params, its id) through the gate.
Checked = Callable[[str, Message, str], None]


@mutable
class _Listen:
    request_id: Any
    meta: Message  # the request's _meta (its version and capabilities, for subscribing)
    lists: frozenset[str]  # the list-change methods it takes
    wanted: list[str]  # the URIs it asked for
    uris: set[str] = field(default_factory=set)  # those subscribed to
    waiting: set[str] = field(default_factory=set)  # own ids of subscriptions not answered
    acknowledged: bool = False
    caller: object = None  # who opened it (gateway mode)


@mutable
class Listens:
    """The listens open on one relay: ``send`` reaches the client, ``checked`` sends a
    request through the gate as the client's would be."""

    send: Send
    checked: Checked
    # Who sent the client's request of an id (gateway mode over HTTP), else None.
    caller_of: Callable[[object], object] = lambda request_id: None
    _open: dict[Any, _Listen] = field(default_factory=dict)
    # ironcurtain's own (un)subscribe requests out: id -> (listen, URI, method)
    _own: dict[str, tuple[_Listen, str, str]] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _token: str = field(default_factory=lambda: secrets.token_hex(8))

    def _own_id(self, listen: _Listen) -> str:
        return f"{listen.request_id}{FOR_REQUEST}{self._token}-{next(self._ids)}"

    def open(self, request_id: Any, params: Message) -> tuple[int, str] | None:
        """A listen request: acknowledged once its URIs are subscribed to; an error for one
        that cannot be taken."""
        wanted = params.get("notifications", {})
        if not isinstance(wanted, dict):
            return INVALID_PARAMS, "invalid params: notifications must be an object"
        uris = wanted.get("resourceSubscriptions", [])
        if not isinstance(uris, list) or not all(isinstance(u, str) for u in uris):
            return INVALID_PARAMS, "invalid params: resourceSubscriptions must be a list of URIs"
        if len(uris) > MAX_URIS:
            return INVALID_PARAMS, f"invalid params: at most {MAX_URIS} resourceSubscriptions"
        if any(not isinstance(wanted.get(k, False), bool) for k in LISTS):
            return INVALID_PARAMS, "invalid params: a list filter must be true or false"
        if request_id in self._open:
            return INVALID_REQUEST, "invalid request: a listen with that id is open"
        caller = self.caller_of(request_id)
        if sum(1 for other in self._open.values() if other.caller == caller) >= MAX_LISTENS:
            return (
                INTERNAL_ERROR,
                f"at most {MAX_LISTENS} listens of one caller may be open at once",
            )
        if len(self._open) >= MAX_ALL_LISTENS:
            return INTERNAL_ERROR, f"at most {MAX_ALL_LISTENS} listens may be open at once"
        meta = params.get("_meta")
        listen = _Listen(
            request_id,
            dict(meta) if isinstance(meta, dict) else {},
            frozenset(m for k, m in LISTS.items() if wanted.get(k) is True),
            list(dict.fromkeys(uris)),
        )
        listen.caller = caller
        self._open[request_id] = listen
        for uri in listen.wanted:
            own = self._own_id(listen)
            listen.waiting.add(own)
            self._own[own] = (listen, uri, SUBSCRIBE)
            self.checked(SUBSCRIBE, {"uri": uri, "_meta": listen.meta}, own)
        self._acknowledge(listen)
        return None

    def own(self, request_id: object) -> bool:
        """Whether an id is one of ironcurtain's own subscribe requests."""
        return isinstance(request_id, str) and request_id in self._own

    def answered(self, message: Message) -> None:
        """The answer to one of ironcurtain's own (un)subscribe requests."""
        own = self._own.pop(str(message.get("id")), None)
        if own is None:
            return
        listen, uri, method = own
        if method == UNSUBSCRIBE:
            return
        listen.waiting.discard(str(message.get("id")))
        if "result" in message and self._open.get(listen.request_id) is listen:
            listen.uris.add(uri)
        elif "result" in message:  # made after its listen ended: let go again
            self._unsubscribe(listen, {uri})
        self._acknowledge(listen)

    def cancelled(self, request_id: object) -> bool:
        """The client ended its listen: its URIs are unsubscribed (where no other listen
        still watches them); whether it was one."""
        listen = self._open.pop(request_id, None)
        if listen is None:
            return False
        self._unsubscribe(listen, listen.uris)
        return True

    def _unsubscribe(self, listen: _Listen, uris: set[str]) -> None:
        """Let go of ``uris`` at their servers, where no open listen watches them."""
        watched = {u for other in self._open.values() for u in other.uris}
        for uri in uris - watched:
            own = self._own_id(listen)
            self._own[own] = (listen, uri, UNSUBSCRIBE)
            self.checked(UNSUBSCRIBE, {"uri": uri, "_meta": listen.meta}, own)

    def close(self) -> None:
        """The session is ending: every listen is answered (a graceful close)."""
        for listen in list(self._open.values()):
            del self._open[listen.request_id]
            end = {"_meta": {SUBSCRIPTION_ID: listen.request_id}}
            self.send({"jsonrpc": "2.0", "id": listen.request_id, "result": end})

    def notify(self, message: Message) -> None:
        """A notification of a list change or a resource update, to the listens that
        asked for it."""
        method = message.get("method")
        params = message.get("params")
        uri = params.get("uri") if isinstance(params, dict) else None
        for listen in self._open.values():
            if not listen.acknowledged:
                continue
            if method in listen.lists or (method == UPDATED and uri in listen.uris):
                self.send(_tagged(message, listen.request_id), listen.request_id)

    def _acknowledge(self, listen: _Listen) -> None:
        if listen.acknowledged or listen.waiting:
            return
        listen.acknowledged = True
        honored: Message = {k: True for k, m in LISTS.items() if m in listen.lists}
        if listen.wanted:
            honored["resourceSubscriptions"] = [u for u in listen.wanted if u in listen.uris]
        ack = {"jsonrpc": "2.0", "method": ACKNOWLEDGED, "params": {"notifications": honored}}
        self.send(_tagged(ack, listen.request_id), listen.request_id)


def _tagged(message: Message, request_id: object) -> Message:
    """``message`` marked as belonging to the listen ``request_id``."""
    params = message.get("params")
    params = dict(params) if isinstance(params, dict) else {}
    meta = params.get("_meta")
    params["_meta"] = {**(meta if isinstance(meta, dict) else {}), SUBSCRIPTION_ID: request_id}
    return {**message, "params": params}
