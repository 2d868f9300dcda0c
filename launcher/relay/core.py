r"""The relay core: the client's messages in, the servers' answers out, every request that
reaches a server checked on the way (:mod:`launcher.relay.checked`).

It knows no process and no socket: servers are :class:`~launcher.relay.seams.Downstream`\ s, the
client an :class:`~launcher.relay.seams.Upstream`. It answers what it can itself (``initialize``,
``ping``, the lists gathered from the servers), relays the servers' notifications
(:mod:`launcher.relay.notices`) and asks the client what the approvals need
(:mod:`launcher.relay.questions.to_client`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Coroutine
from typing import Any

from launcher.relay.call import ClientLink
from launcher.relay.checked import CHECKED, CheckedCalls
from launcher.relay.notices import Notices
from launcher.relay.questions.input_bridge import ServerInputs
from launcher.relay.questions.rounds import Rounds, Spent, TakeOver
from launcher.relay.questions.server_requests import ServerAsks, elicitation_modes
from launcher.relay.questions.to_client import ClientQuestions
from launcher.relay.seams import Core, Downstream, Upstream
from launcher.relay.stateless import era as stateless
from launcher.relay.stateless.listens import LISTEN, Listens
from launcher.shared.caller_identity import Caller
from launcher.shared.error_codes import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
)
from launcher.shared.jsonrpc import (
    HANDSHAKE,
    LATEST_PROTOCOL,
    PROTOCOL_VERSIONS,
    STATELESS,
    TOOL,
    Message,
    error,
    loads,
    own_info,
    result,
    unencodable,
)

INSTRUCTIONS = (
    "Tools of several MCP servers, each sandboxed; every call is checked by policy. Denied "
    "calls return an error result starting with DENIED."
)
# The client's messages held at most while its servers are opened in its era.
HELD = 1024
_NO_UTF8 = "holds a lone surrogate (\\ud800-\\udfff), which has no UTF-8 form"


def _invalid(request_id: Any, what: str) -> Message:
    """The answer to a request that is not one as JSON-RPC has it: ``what`` is wrong."""
    return error(request_id, INVALID_REQUEST, f"invalid request: {what}")


class Relay:
    def __init__(self, core: Core) -> None:
        self.core = core
        self.upstream: Upstream | None = None
        self.client_capabilities: Message | None = None  # as declared at initialize
        self.client_elicits = False  # it takes form elicitations (approvals can ask it)
        self.initialized = False  # the client has had its initialize answer
        self.era: str | None = None  # the protocol era, once the client's first request says
        self._asked: dict[object, str] = {}  # a stateless client's requests out: their methods
        # The relay's questions to its client (a server's, and the approvals').
        self.asking = asking = ClientQuestions(core, self)
        self.calls = CheckedCalls(
            core,
            ClientLink(
                self.send,
                asking.ask_approval,
                asking.elicits,
                self.spawn,
                lambda: self.era or HANDSHAKE,
                asking.takes,
            ),
        )
        self.asks = ServerAsks(
            core,
            ask_client=asking.ask_client,
            client_capabilities=asking.takes,
            approve_via=asking.ask_approval,
            client_elicits=asking.elicits,
            related=self.calls.only_call_at,
            spawn=self.spawn,
            era=lambda: self.era or HANDSHAKE,
            busy=asking.busy,
        )
        self.calls.inputs = ServerInputs(self.asks, self.calls)
        # Questions out to a stateless client, asked by answering its request.
        self.rounds = Rounds(
            self._deliver,
            self.calls.rebind,
            self.send,
            asking.caller_of,
            asking.lacking,
            asking.refuse_retry,
            shared=core.state,
        )
        # A stateless client's notification streams (subscriptions/listen).
        self.listens = Listens(self.send, self.calls.start, asking.caller_of)
        self._tasks: set[asyncio.Task[None]] = set()
        # What servers tell the client unasked.
        self.notices = Notices(core, self)
        # The client's messages held while its servers are opened in its era.
        self._held: list[bytes] | None = None
        core.router.build(core.servers, core.outputs.listed)
        self.notices.attach()

    # -- what servers tell the client, and whom it serves (:mod:`launcher.relay.notices`) --

    def on_server_notification(self, conn: Downstream, message: Message) -> None:
        self.notices.on_server_notification(conn, message)

    def serve(self, caller: Caller | None) -> None:
        """Serve ``caller``'s requests (:meth:`Notices.serve`)."""
        self.notices.serve(caller)

    def lists_changed(self, method: str = "notifications/tools/list_changed") -> None:
        """A server's lists changed (:meth:`Notices.lists_changed`)."""
        self.notices.lists_changed(method)

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
        if self._held is not None:
            if len(self._held) < HELD:
                self._held.append(line)
            else:
                self._busy_refusal(line)
            return
        try:
            message = loads(line)
        except (ValueError, RecursionError):  # not JSON, or nested past what Python parses
            self.send(error(None, PARSE_ERROR, "parse error: not JSON"))
            return
        if not isinstance(message, dict):
            self.send(_invalid(None, "batches are not supported"))
            return
        # Nothing the audit log cannot hold reaches a server: a string with no UTF-8 form (a
        # lone surrogate, which a "\ud800" escape gives) is refused here; a call's arguments
        # are hashed before anything is sent, which refuses one there too.
        request_id = message.get("id")
        if type(request_id) is not int:
            if type(request_id) not in (str, float, type(None)):
                if "method" in message:  # true and 1 would share a slot, a list none at all
                    self.send(_invalid(None, "an id is a string or number"))
                return
            if unencodable(request_id):
                if "method" in message:
                    self.send(_invalid(None, f"its id {_NO_UTF8}"))
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
        if self.era is None and self._chose_era(line, str(method), params):
            return
        try:
            if method == TOOL:
                # The arguments are checked when they are hashed; the rest here (quick for
                # the usual {name, arguments}).
                others = len(params) - ("name" in params) - ("arguments" in params)
                if unencodable(params.get("name")) or (
                    others and unencodable({k: v for k, v in params.items() if k != "arguments"})
                ):
                    self.send(_invalid(request_id, f"its params {_NO_UTF8}"))
                    return
            elif unencodable(message):
                self.send(_invalid(request_id, f"a string in it {_NO_UTF8}"))
                return
            self._request(str(method), params, request_id)
        except UnicodeEncodeError:  # from hashing the arguments: nothing was sent
            self.send(_invalid(request_id, f"an argument {_NO_UTF8}"))
        except Exception as exc:  # never take the session down for one request
            self.send(error(request_id, INTERNAL_ERROR, f"internal error: {exc}"))

    def _chose_era(self, line: bytes, method: str, params: Message) -> bool:
        """The client's first request says which era it speaks; a server of both eras is
        then spoken to in it. True when the servers are being opened in it: the request
        (and what follows it) waits, then is served as it came."""
        if method == "server/discover" or stateless.speaks(params):
            self.era = STATELESS
        elif method == "initialize":
            self.era = HANDSHAKE
        else:
            return False
        opening = self.core.speak(self.era)
        if opening is None:
            return False
        self._held = [line]
        self.spawn(self._opened(opening))
        return True

    def _busy_refusal(self, line: bytes) -> None:
        """A request past what is held while the servers are opened: refused."""
        with contextlib.suppress(ValueError, RecursionError):
            message = loads(line)
            rid = message.get("id") if isinstance(message, dict) else None
            if type(rid) in (str, int) and "method" in message:
                why = "too many requests wait while the servers are opened in the client's era"
                self.send(error(rid, INTERNAL_ERROR, why))

    async def _opened(self, opening: Awaitable[None]) -> None:
        try:
            await opening
        except asyncio.CancelledError:  # the relay is stopping: nothing more is served
            raise
        except Exception as exc:  # its servers stay as they were: bridged
            self.core.say(f"warning: opening servers in the {self.era} era failed: {exc}")
        held, self._held = self._held or [], None
        for line in held:
            self.feed(line)

    def _client_answer(self, message: Message) -> None:
        """The client's answer to a request of ours (an elicitation), else nothing."""
        self.asking.answered(message)

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
                self._retry(method, params, request_id)
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
            self.send(error(request_id, METHOD_NOT_FOUND, f"method not found: {method}"))
            return
        self.send(result(request_id, answer))

    def _retry(self, method: str, params: Message, request_id: Any) -> None:
        """A stateless client's retry: its call goes on, or (its round begun on another
        instance) is checked from the start here, or it is refused."""
        not_taken = self.rounds.resume(method, params, request_id)
        if isinstance(not_taken, TakeOver):
            self.calls.start(
                method, not_taken.params, request_id, not_taken.answer, not_taken.asked
            )
        elif not_taken is not None:
            self.send(error(request_id, *not_taken))

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

    # -- tasks and stopping ----------------------------------------------------------------

    def spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
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


def _ignore(outcome: Message | BaseException) -> None:
    """An answer nobody waits for."""
