r"""The relay core: the client's messages in, the servers' answers out, every request that
reaches a server checked on the way (:mod:`launcher.relay.checked`).

It knows no process and no socket: servers are :class:`~launcher.relay.seams.Downstream`\ s, the
client an :class:`~launcher.relay.seams.Upstream`. It answers what it can itself (``initialize``,
``ping``, the lists gathered from the servers), relays the servers' notifications (routes
rebuilt when a list changes) and asks the client what the approvals need.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Coroutine
from typing import Any

from launcher.relay import stateless
from launcher.relay.asking import Asking
from launcher.relay.asks import ServerAsks, elicitation_modes
from launcher.relay.call import Call, ClientLink
from launcher.relay.checked import CHECKED, CheckedCalls
from launcher.relay.inputs import ServerInputs
from launcher.relay.listens import LISTEN, UPDATED, Listens
from launcher.relay.rounds import Rounds, Spent
from launcher.relay.seams import Core, Downstream, Upstream
from launcher.shared.callers import Caller
from launcher.shared.jsonrpc import (
    HANDSHAKE,
    LATEST_PROTOCOL,
    PROTOCOL_VERSIONS,
    STATELESS,
    TOOL,
    Message,
    error,
    loads,
    notification,
    own_info,
    result,
    unencodable,
)

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
INSTRUCTIONS = (
    "Tools of several MCP servers, each sandboxed; every call is checked by policy. Denied "
    "calls return an error result starting with DENIED."
)
# Bytes waiting for the client beyond which servers' notifications are dropped.
NOTIFICATION_BACKLOG = 16 * 1024 * 1024
_NO_UTF8 = "holds a lone surrogate (\\ud800-\\udfff), which has no UTF-8 form"


class Relay(Asking):
    def __init__(self, core: Core) -> None:
        self.core = core
        self.upstream: Upstream | None = None
        self.client_capabilities: Message | None = None  # as declared at initialize
        self.client_elicits = False  # it takes form elicitations (approvals can ask it)
        self.initialized = False  # the client has had its initialize answer
        self.era: str | None = None  # the protocol era, once the client's first request says
        self._asked: dict[object, str] = {}  # a stateless client's requests out: their methods
        self.calls = CheckedCalls(
            core,
            ClientLink(
                self.send,
                self.ask_approval,
                self._elicits,
                self._spawn,
                lambda: self.era or HANDSHAKE,
                self._takes,
            ),
        )
        self.asks = ServerAsks(
            core,
            ask_client=self.ask_client,
            client_capabilities=self._takes,
            approve_via=self.ask_approval,
            client_elicits=self._elicits,
            related=self.calls.only_call_at,
            spawn=self._spawn,
            era=lambda: self.era or HANDSHAKE,
            busy=self._busy,
        )
        self.calls.inputs = ServerInputs(self.asks, self.calls)
        # Questions out to a stateless client, asked by answering its request.
        self.rounds = Rounds(
            self._deliver,
            self.calls.rebind,
            self.send,
            self._caller_of,
            self._lacking,
            self._refuse_retry,
        )
        # A stateless client's notification streams (subscriptions/listen).
        self.listens = Listens(self.send, self.calls.start, self._caller_of)
        self._tasks: set[asyncio.Task[None]] = set()
        self._upstream_ids = itertools.count(1)
        self._upstream_pending: dict[str, asyncio.Future[Message]] = {}
        self._dropping = False
        self._refreshing: dict[tuple[str, str], bool] = {}  # refreshes: another wanted?
        core.router.build(core.servers, core.outputs.listed)
        self._attach()

    # -- upstream --------------------------------------------------------------------------

    def send(self, message: Message, related: str | int | None = None) -> None:
        if isinstance(related, Spent):
            return  # about a request that had its answer (a question): its retry is awaited
        if self.era == STATELESS and "method" not in message and "id" in message:
            if isinstance(message["id"], Spent):  # its request had its answer (a question)
                self.rounds.ended(message["id"], message)  # this one is kept for the retry
                return
            if self.listens.own(message["id"]):
                self.listens.answered(message)  # a listen's subscription, made or not
                return
            message = stateless.answered(message, self._asked.pop(message["id"], None))
        if self.upstream is not None:
            self.upstream.deliver(message, related)

    def _deliver(self, message: Message, related: str | int | None = None) -> None:
        """An answer of ironcurtain's own to a stateless client, in the era's form
        already (one that asks for input)."""
        self._asked.pop(message.get("id"), None)
        if self.upstream is not None:
            self.upstream.deliver(message, related)

    def feed(self, line: bytes) -> None:
        """One message from the client (JSON text)."""
        if not line.strip():
            return
        try:
            message = loads(line)
        except (ValueError, RecursionError):  # not JSON, or nested past what Python parses
            self.send(error(None, -32700, "parse error: not JSON"))
            return
        if not isinstance(message, dict):
            self.send(error(None, -32600, "invalid request: batches are not supported"))
            return
        # Nothing the audit log cannot hold reaches a server: a string with no UTF-8 form (a
        # lone surrogate, which a "\ud800" escape gives) is refused here; a call's arguments
        # are hashed before anything is sent, which refuses one there too.
        request_id = message.get("id")
        if type(request_id) is not int:
            if type(request_id) not in (str, float, type(None)):
                if "method" in message:  # true and 1 would share a slot, a list none at all
                    self.send(error(None, -32600, "invalid request: an id is a string or number"))
                return
            if unencodable(request_id):
                if "method" in message:
                    self.send(error(None, -32600, f"invalid request: its id {_NO_UTF8}"))
                return
        method = message.get("method")
        if method is None:
            self._client_answer(message)
            return
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if "id" not in message:
            self._client_notification(str(method), params)
            return
        try:
            if method == TOOL:
                # The arguments are checked when they are hashed; the rest here (quick for
                # the usual {name, arguments}).
                others = len(params) - ("name" in params) - ("arguments" in params)
                if unencodable(params.get("name")) or (
                    others and unencodable({k: v for k, v in params.items() if k != "arguments"})
                ):
                    self.send(error(request_id, -32600, f"invalid request: its params {_NO_UTF8}"))
                    return
            elif unencodable(message):
                self.send(error(request_id, -32600, f"invalid request: a string in it {_NO_UTF8}"))
                return
            self._request(str(method), params, request_id)
        except UnicodeEncodeError:  # from hashing the arguments: nothing was sent
            self.send(error(request_id, -32600, f"invalid request: an argument {_NO_UTF8}"))
        except Exception as exc:  # never take the session down for one request
            self.send(error(request_id, -32603, f"internal error: {exc}"))

    def _client_answer(self, message: Message) -> None:
        """The client's answer to a request of ours (an elicitation), else nothing."""
        key = message.get("id")
        future = self._upstream_pending.pop(key, None) if isinstance(key, str) else None
        if future is not None and not future.done():
            future.set_result(message)

    def _client_notification(self, method: str, params: Message) -> None:
        if method != "notifications/cancelled":
            return
        request_id = params.get("requestId")
        if isinstance(request_id, str | int):
            if not self.listens.cancelled(request_id):
                self.calls.cancel(request_id)
            self._asked.pop(request_id, None)  # it gets no answer

    def _request(self, method: str, params: Message, request_id: Any) -> None:
        router = self.core.router
        if self.era is None:  # the first request says which era the connection speaks
            if method == "server/discover" or stateless.speaks(params):
                self.era = STATELESS
            elif method == "initialize":
                self.era = HANDSHAKE
        if self.era == STATELESS:
            refused = stateless.refusal(method, params)
            if refused is not None:
                self.send(error(request_id, *refused))
                return
            self._asked[request_id] = method
            if "requestState" in params:  # a retry, with the answers to a question
                not_taken = self.rounds.resume(method, params, request_id)
                if not_taken is not None:
                    self.send(error(request_id, *not_taken))
                return
            if method == "server/discover":
                found = stateless.discover(router.capabilities(), INSTRUCTIONS)
                self.send(result(request_id, found))
                return
            if method == LISTEN:
                not_open = self.listens.open(request_id, params)
                if not_open is not None:
                    self.send(error(request_id, *not_open))
                return
        if method in CHECKED:
            self.calls.start(method, params, request_id)
            return
        answer: Message
        if method == "initialize":
            self.send(result(request_id, self._initialize(params)))
            self.initialized = True
            return
        if method == "logging/setLevel":
            self._set_level(params)
            answer = {}
        elif method == "ping":
            answer = {}
        elif method == "tools/list":
            answer = {"tools": self.core.gate.listed(method, router, self.core.caller)}
        elif method == "prompts/list":
            answer = {"prompts": self.core.gate.listed(method, router, self.core.caller)}
        elif method == "resources/list":
            answer = {"resources": router.resources}
        elif method == "resources/templates/list":
            answer = {"resourceTemplates": router.resource_templates}
        else:
            self.send(error(request_id, -32601, f"method not found: {method}"))
            return
        self.send(result(request_id, answer))

    def _set_level(self, params: Message) -> None:
        """The client's log level goes to every server that logs (their answers are not
        waited for: the level is the client's to set, nothing to check)."""
        level = params.get("level")
        if not isinstance(level, str):
            return
        for conn in self.core.servers.values():
            # A server of the stateless era takes no logging/setLevel (not in its era).
            if "logging" in conn.capabilities and conn.era == HANDSHAKE:
                with contextlib.suppress(Exception):
                    conn.send_request("logging/setLevel", {"level": level}, _ignore)

    def _initialize(self, params: Message) -> Message:
        client_caps = params.get("capabilities")
        self.client_capabilities = client_caps if isinstance(client_caps, dict) else {}
        self.client_elicits = "form" in elicitation_modes(self.client_capabilities)
        requested = params.get("protocolVersion")
        return {
            "protocolVersion": requested if requested in PROTOCOL_VERSIONS else LATEST_PROTOCOL,
            "capabilities": self.core.router.capabilities(),
            "serverInfo": own_info(),
            "instructions": INSTRUCTIONS,
        }

    # -- from the servers ------------------------------------------------------------------

    def _attach(self) -> None:
        """The servers' requests of the client come here (a restarted server's too)."""
        for conn in self.core.servers.values():
            conn.on_request = self.asks.request

    def on_server_notification(self, conn: Downstream, message: Message) -> None:
        method = message.get("method")
        if method == "notifications/cancelled":
            params = message.get("params")
            self.asks.cancelled(conn, params if isinstance(params, dict) else {})
        elif method in FORWARDED_NOTIFICATIONS:
            if self.era == STATELESS:
                if method == UPDATED:  # to the listens that watch it
                    self.listens.notify(self.core.outputs.message(conn.name, message))
                if method != "notifications/progress":
                    return  # only what belongs to a request or a listen reaches it
            elif not self.initialized:
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
            upstream = self.upstream
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
            self.send(message, related)
        elif isinstance(method, str) and method in LIST_CHANGED:
            # One refresh per server and list at a time; changes meanwhile make one more.
            key = (conn.name, LIST_CHANGED[method])
            if key in self._refreshing:
                self._refreshing[key] = True
                return
            self._refreshing[key] = False
            self._spawn(self._refresh(conn, key[1], method))

    def _progress_of(self, conn: Downstream, message: Message) -> Call | None:
        """The call of this server still out that a progress notification is about."""
        params = message.get("params")
        token = params.get("progressToken") if isinstance(params, dict) else None
        return self.calls.progress.get((conn.name, token)) if type(token) in (str, int) else None

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
        self._attach()
        self.core.router.build(self.core.servers, self.core.outputs.listed)
        if self.initialized:
            self.send(notification(method))
        elif self.era == STATELESS:
            self.listens.notify(notification(method))

    # -- tasks and stopping ----------------------------------------------------------------

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @property
    def pending(self) -> list[asyncio.Task[None]]:
        return [t for t in self._tasks if not t.done()]

    async def stop(self) -> None:
        """Calls still out are cancelled at their servers and audited ``cancelled``; the
        instances started for approved calls are stopped."""
        self.calls.stop()
        self.listens.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.core.widen is not None:
            await self.core.widen.close()


def _after(message: Message, offset: int) -> Message:
    """A server's progress moved past what ironcurtain reported for the call already, so
    the client sees it go on increasing."""
    params = dict(message["params"])
    for key in ("progress", "total"):
        if isinstance(params.get(key), int | float):
            params[key] += offset
    return {**message, "params": params}


def _ignore(outcome: Message | BaseException) -> None:
    """An answer nobody waits for."""
