"""A stateless-era server's questions: a call answered ``"resultType": "input_required"``
(multi round-trip requests) is not passed on as it is. ironcurtain answers each input
request itself, as it would the same request a handshake-era server sent on its own
(:class:`launcher.relay.questions.server_requests.ServerAsks`: ``clientRequests``, the
client's capabilities, the form marked as the server's, a sampling request approved first,
the audit), asking the client in the client's own era; ``roots/list`` with what the server's
sandbox holds. Then it sends the server the same call again with the answers and the
server's ``requestState``, exactly as given, which never leaves ironcurtain: no client sees
a server's state, so none can replay it, alter it or carry it to another server.

A question ironcurtain refuses, or the client does not answer, ends the call with an error
(the server is not retried with answers it did not get); a server that asks more than
``MAX_ROUNDS`` times for one call, or more than ``MAX_INPUTS`` questions at once, or in a
form that is not the era's, has its call ended too.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import field
from typing import Protocol

from launcher.relay.call import Call
from launcher.relay.questions.rounds import Keyed
from launcher.relay.questions.server_requests import ServerAsks
from launcher.shared.jsonrpc import PROMPT, READ, STATELESS, TOOL, Message
from sandbox_profiles.records import mutable

MAX_ROUNDS = 10  # as the SDKs' clients allow
MAX_INPUTS = 4  # questions in one round (as many as a server may have open)
MAX_ROUND_BYTES = 256 * 1024  # what one round's questions may hold, as JSON
MAX_ASKING = 32  # calls of one server whose questions wait for answers at once
ANSWERABLE = frozenset({TOOL, PROMPT, READ})
ROOTS = "roots/list"


class Retries(Protocol):
    """What the checked path does with a call once its questions are answered: send it
    again with ``extra`` params, or end it."""

    def forward(self, call: Call, extra: Message | None = None) -> None: ...

    def end(
        self, call: Call, status: str, *, denial: str | None = None, failure: str | None = None
    ) -> None: ...


@mutable
class _Answering:
    """A question of the server's, as :class:`ServerAsks` answers it: into ``future``."""

    name: str
    future: asyncio.Future[Message]

    def reply(self, request_id: object, outcome: Message) -> None:
        if not self.future.done():
            self.future.set_result(outcome)


@mutable
class ServerInputs:
    asks: ServerAsks
    ends: Retries
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _asking: dict[str, int] = field(default_factory=dict)  # per server, calls asking now

    @staticmethod
    def bridged(call: Call, result: Message) -> bool:
        """Whether ``result`` is a stateless-era server's question that is answered for it
        (the era's form, on a request that may be answered so)."""
        return (
            call.conn is not None
            and call.conn.era == STATELESS
            and call.method in ANSWERABLE
            and result.get("resultType") == "input_required"
        )

    async def answer(self, call: Call, result: Message) -> None:
        """Answer every input request of ``result``, then send ``call`` again with them."""
        assert call.conn is not None
        server = call.conn.name
        call.rounds += 1
        requests = result.get("inputRequests", {})
        state = result.get("requestState")
        problem = None
        if call.rounds > MAX_ROUNDS:
            problem = f"it asked for input more than {MAX_ROUNDS} times for one call"
        elif not isinstance(requests, dict) or not all(
            isinstance(k, str) and isinstance(v, dict) for k, v in requests.items()
        ):
            problem = "its inputRequests is not a map of requests"
        elif len(requests) > MAX_INPUTS:
            problem = f"it asked {len(requests)} questions at once (at most {MAX_INPUTS})"
        elif state is not None and not isinstance(state, str):
            problem = "its requestState is not a string"
        elif not requests and state is None:
            problem = "it asked for input without saying what"
        elif len(json.dumps(requests)) + len(state or "") > MAX_ROUND_BYTES:
            problem = f"its questions hold more than {MAX_ROUND_BYTES // 1024} KiB"
        elif self._asking.get(server, 0) >= MAX_ASKING:
            problem = f"{MAX_ASKING} of its calls already wait for answers to its questions"
        if problem is not None:
            self.ends.end(call, "error", failure=f"ERROR: server '{server}': {problem}")
            return
        responses: Message = {}
        keys = list(requests)
        self._asking[server] = self._asking.get(server, 0) + 1
        try:  # asked at once: a client of the stateless era gets them in one round
            outcomes = await asyncio.gather(*(self._ask(call, k, requests[k]) for k in keys))
        finally:
            self._asking[server] -= 1
        for key, outcome in zip(keys, outcomes, strict=True):
            if not isinstance(outcome.get("result"), dict):
                err = outcome.get("error")
                said = err.get("message") if isinstance(err, dict) else None
                text = f"ERROR: server '{server}' asked for input that was not given: {said}"
                self.ends.end(call, "error", failure=text)
                return
            responses[key] = outcome["result"]
        extra: Message = {"inputResponses": responses}
        if state is not None:
            extra["requestState"] = state
        self.ends.forward(call, extra)

    async def _ask(self, call: Call, key: str, asked: Message) -> Message:
        """One input request, answered as the server's own request would be (asked of a
        stateless client under the server's ``key``)."""
        assert call.conn is not None
        method, params = asked.get("method"), asked.get("params", {})
        if method == ROOTS:
            return {"result": {"roots": list(call.conn.roots)}}
        question = {
            "jsonrpc": "2.0",
            "id": f"input-{next(self._ids)}",
            "method": method,
            "params": params if isinstance(params, dict) else {},
        }
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        answering = _Answering(call.conn.name, future)
        self.asks.request(answering, question, related=Keyed(call, key), bridged=True)
        try:
            return await future
        except asyncio.CancelledError:  # the call was cancelled: the question is withdrawn
            self.asks.cancelled(answering, {"requestId": question["id"]})
            raise
