"""What servers tell the client unasked, as the relay passes it on: progress (of the call
it is about, in the client's own token), log messages, resources updated (to a stateless
client's listens that watch them), and their lists changed (listed again, routes rebuilt,
the client told); and what a caller's new token changes of what it may see.

Notifications are dropped, never answers, while the client is not reading
(``NOTIFICATION_BACKLOG``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol

from launcher.relay.call import Call
from launcher.relay.checked import CheckedCalls
from launcher.relay.questions.server_requests import ServerAsks
from launcher.relay.seams import Core, Downstream, Upstream
from launcher.relay.stateless.listens import UPDATED, Listens
from launcher.shared.caller_identity import Caller
from launcher.shared.jsonrpc import STATELESS, Message, notification

FORWARDED_NOTIFICATIONS = (
    "notifications/progress",
    "notifications/message",
    "notifications/resources/updated",
)
LIST_CHANGED = {
    "notifications/tools/list_changed": "tools",
    "notifications/prompts/list_changed": "prompts",
    "notifications/resources/list_changed": "resources",
}
# Bytes waiting for the client beyond which servers' notifications are dropped.
NOTIFICATION_BACKLOG = 16 * 1024 * 1024


class Relayed(Protocol):
    """What passing notices on reads of the relay: the era its client speaks, whether it
    has initialized, where its messages go, the calls out and its listens; and a task on
    its loop."""

    era: str | None
    initialized: bool
    upstream: Upstream | None
    calls: CheckedCalls
    asks: ServerAsks
    listens: Listens

    def send(self, message: Message, related: str | int | None = None) -> None: ...

    def spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]: ...


class Notices:
    """What servers tell the client unasked, passed on; ``relay``: the relay, as
    :class:`Relayed`."""

    def __init__(self, core: Core, relay: Relayed) -> None:
        self.core = core
        self.relay = relay
        self._dropping = False
        self._refreshing: dict[tuple[str, str], bool] = {}  # refreshes: another wanted?

    def attach(self) -> None:
        """The servers' requests of the client come here (a restarted server's too)."""
        for conn in self.core.servers.values():
            conn.on_request = self.relay.asks.request

    def on_server_notification(self, conn: Downstream, message: Message) -> None:
        method = message.get("method")
        if method == "notifications/cancelled":
            params = message.get("params")
            self.relay.asks.cancelled(conn, params if isinstance(params, dict) else {})
        elif method in FORWARDED_NOTIFICATIONS:
            if self.relay.era == STATELESS:
                if method == UPDATED:  # to the listens that watch it
                    self.relay.listens.notify(self.core.outputs.message(conn.name, message))
                if method != "notifications/progress":
                    return  # only what belongs to a request or a listen reaches it
            elif not self.relay.initialized:
                return  # nothing reaches the client before its initialize answer
            related = None
            if method == "notifications/progress":
                call = self._progress_of(conn, message)
                if call is None:
                    return
                related = call.request_id
                params = dict(message["params"])
                params["progressToken"] = call.progress_token()  # the client's own again
                message = {**message, "params": params}
                if call.progress_sent:  # after what was reported while a human decided
                    message = _after(message, call.progress_sent)
                shown = self.core.outputs.progress(conn.name, call.method, call.name or "", message)
                if shown is None:
                    return  # nothing of it may be shown
                message = shown
            upstream = self.relay.upstream
            if upstream is not None and upstream.backlog() > NOTIFICATION_BACKLOG:
                # The client is not reading: a server's progress and log messages are
                # dropped rather than held without limit (answers are never dropped).
                if not self._dropping:
                    self.core.say(
                        f"the client is not reading; dropping notifications from "
                        f"'{conn.name}' until it catches up"
                    )
                self._dropping = True
                return
            self._dropping = False
            if related is None:
                message = self.core.outputs.message(conn.name, message)
            self.relay.send(message, related)
        elif isinstance(method, str) and method in LIST_CHANGED:
            # One refresh per server and list at a time; changes meanwhile make one more.
            key = (conn.name, LIST_CHANGED[method])
            if key in self._refreshing:
                self._refreshing[key] = True
                return
            self._refreshing[key] = False
            self.relay.spawn(self._refresh(conn, key[1], method))

    def _progress_of(self, conn: Downstream, message: Message) -> Call | None:
        """The call of this server still out that a progress notification is about."""
        params = message.get("params")
        token = params.get("progressToken") if isinstance(params, dict) else None
        return (
            self.relay.calls.progress.get((conn.name, token)) if type(token) in (str, int) else None
        )

    async def _refresh(self, conn: Downstream, kind: str, method: str) -> None:
        key = (conn.name, kind)
        try:
            while True:
                try:
                    if kind == "tools":
                        await conn.list_tools()
                    else:
                        await conn.list_extras()
                    self.core.gate.pin(conn.name, conn.tools, conn.prompts, at_start=False)
                except Exception as exc:  # the old list stays
                    self.core.say(f"server '{conn.name}': listing its {kind} again failed: {exc}")
                else:
                    self.lists_changed(method)
                if not self._refreshing.get(key):
                    return
                self._refreshing[key] = False
        finally:
            self._refreshing.pop(key, None)

    def serve(self, caller: Caller | None) -> None:
        """Serve ``caller``'s requests (the same caller again: with what its latest token
        permits). When that changes what ``permissions.json`` lets it see, its client is told
        its lists changed."""
        before, self.core.caller = self.core.caller, caller
        if before is None or caller is None or before.permissions == caller.permissions:
            return
        if self.core.gate.engine.permissions:
            self.lists_changed()
            self.lists_changed("notifications/prompts/list_changed")

    def lists_changed(self, method: str = "notifications/tools/list_changed") -> None:
        """A server's lists changed (or a restarted server replaced one): routes anew."""
        self.attach()
        self.core.router.build(self.core.servers, self.core.outputs.listed)
        if self.relay.initialized:
            self.relay.send(notification(method))
        elif self.relay.era == STATELESS:
            self.relay.listens.notify(notification(method))


def _after(message: Message, offset: int) -> Message:
    """A server's progress moved past what ironcurtain reported for the call already, so
    the client sees it go on increasing."""
    params = dict(message["params"])
    for key in ("progress", "total"):
        if isinstance(params.get(key), int | float):
            params[key] += offset
    return {**message, "params": params}
