"""How the relay asks its client: a server's question, or ironcurtain's own (an approval),
made during a call. A client of the handshake era is sent a request of ironcurtain's and its
answer awaited; a client of the stateless era is asked in rounds
(:mod:`launcher.relay.questions.rounds`), as the answer to the request the call came in. What the
client takes is what it declared: at ``initialize``, or in that request's ``_meta``.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Protocol

from launcher.relay.call import Call
from launcher.relay.gate.decide import denial_text
from launcher.relay.questions.rounds import APPROVAL, OWN, QUESTION, Keyed, Rounds, Spent
from launcher.relay.questions.server_requests import elicitation_modes
from launcher.relay.seams import Core, Upstream
from launcher.relay.stateless.era import CAPABILITIES
from launcher.shared.error_codes import DENIED
from launcher.shared.jsonrpc import (
    STATELESS,
    TOOL,
    Message,
    error,
    notification,
    result,
    tool_result,
)
from policy.access import NOT_PERMITTED

# Why a question to the client is withdrawn before its time is up.
WITHDRAWN = "no longer needed: the request it was asked for was cancelled"


class Client(Protocol):
    """What asking the client reads of the relay: the era it speaks, what it declared at
    ``initialize``, where its messages go, and the rounds a stateless client is asked in."""

    era: str | None
    upstream: Upstream | None
    initialized: bool
    client_capabilities: Message | None
    client_elicits: bool
    rounds: Rounds

    def send(self, message: Message, related: str | int | None = None) -> None: ...


class ClientQuestions:
    """The relay's questions to its client; ``client``: the relay, as :class:`Client`."""

    def __init__(self, core: Core, client: Client) -> None:
        self.core = core
        self.client = client
        self._upstream_ids = itertools.count(1)
        self._upstream_pending: dict[str, asyncio.Future[Message]] = {}

    def answered(self, message: Message) -> None:
        """The client's answer to a request of ours (an elicitation), else nothing."""
        key = message.get("id")
        future = self._upstream_pending.pop(key, None) if isinstance(key, str) else None
        if future is not None and not future.done():
            future.set_result(message)

    def lacking(self, call: Call) -> list[str]:
        """What the relay's caller, as its latest token says, lacks for ``call`` (a retry
        is a new request: its token may carry less than the one the call came with)."""
        caller = self.core.caller
        if caller is None or call.server is None or call.name is None:
            return []
        return self.core.gate.missing(call.method, call.server, call.name, caller)

    def refuse_retry(self, call: Call, request_id: object, missing: list[str]) -> None:
        """A retry whose token lacks what ``call`` needs: refused as the call itself would
        be now, and audited with what was missing; the call still waits for a retry that
        may make it (its state is not spent), or for its time to run out."""
        policy = {
            "decision": "deny",
            "rule": NOT_PERMITTED.rule,
            "reason": NOT_PERMITTED.reason,
            "missing": missing,
        }
        refused = {**call.entry, "requestId": request_id, "policy": policy, "escalation": None}
        self.core.audit.write({**refused, "result": "denied", "retry": True})
        text = denial_text(NOT_PERMITTED)
        if call.method == TOOL:
            self.client.send(result(request_id, tool_result(text)))
        else:
            self.client.send(error(request_id, DENIED, text))

    def caller_of(self, request_id: object) -> object:
        """Who sent the client's request ``request_id``, as the transport knows (gateway
        mode over HTTP), or None."""
        fields = getattr(self.client.upstream, "audit_fields", None)
        return fields({"requestId": request_id}).get("caller") if fields is not None else None

    def takes(self, related: object = None) -> Message | None:
        """What the client takes as requests during the call ``related``: its capabilities
        once it has initialized; from a client of the stateless era, what the request of that
        call declared, when a question can be asked during it (as its answer)."""
        if isinstance(related, Keyed):
            related = related.call
        if self.client.era == STATELESS:
            if not isinstance(related, Call) or not Rounds.can_ask(related):
                return {}
            meta = related.params.get("_meta")
            declared = meta.get(CAPABILITIES) if isinstance(meta, dict) else None
            return declared if isinstance(declared, dict) else {}
        return self.client.client_capabilities if self.client.initialized else None

    def busy(self, related: object) -> str | None:
        """Why a stateless client cannot be asked during the call ``related`` now: it was
        asked already and its retry is awaited."""
        call = related.call if isinstance(related, Keyed) else related
        if (
            self.client.era == STATELESS
            and isinstance(call, Call)
            and isinstance(call.request_id, Spent)
        ):
            return "a question is already out during this request; ask again after its answer"
        return None

    def elicits(self, related: object = None) -> bool:
        """Whether the client takes a form elicitation (an approval's question) now,
        during the call ``related``."""
        if self.client.era == STATELESS:
            return "form" in elicitation_modes(self.takes(related) or {})
        return self.client.client_elicits

    async def ask_client(
        self, method: str, params: Message, timeout: float, related: object = None
    ) -> Message:
        """Ask the client a server's question and wait for its whole response; ``related``:
        the call it is asked during (or the client's id of a request)."""
        if self.client.era == STATELESS:
            return await self._ask_in_rounds(QUESTION, method, params, timeout, related)
        return await self._ask(method, params, timeout, related)

    async def ask_approval(
        self, method: str, params: Message, timeout: float, related: object = None
    ) -> Message:
        """Ask the client ironcurtain's own question (an approval), as :meth:`ask_client`."""
        if self.client.era == STATELESS:
            return await self._ask_in_rounds(APPROVAL, method, params, timeout, related)
        return await self._ask(method, params, timeout, related)

    async def _ask_in_rounds(
        self, key: str, method: str, params: Message, timeout: float, related: object
    ) -> Message:
        """A stateless client is asked by answering the request of the call ``related``
        (a server's question under the key the server gave it; never one of ironcurtain's
        own keys)."""
        if isinstance(related, Keyed):
            if key == QUESTION:
                key = related.key if not related.key.startswith(OWN) else f"server/{related.key}"
            related = related.call
        if not isinstance(related, Call):
            raise RuntimeError("the client can be asked only during a request of its own")
        return await self.client.rounds.ask(related, key, method, params, timeout)

    async def _ask(self, method: str, params: Message, timeout: float, about: object) -> Message:
        """Send a request to the client and wait for its whole response."""
        if isinstance(about, Keyed):
            about = about.call
        if isinstance(about, Call):
            about = about.request_id
        related = about if isinstance(about, str | int) else None
        request_id = f"ironcurtain-{next(self._upstream_ids)}"
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._upstream_pending[request_id] = future
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        self.client.send(message, related)
        try:
            return await asyncio.wait_for(future, timeout)
        except (TimeoutError, asyncio.CancelledError) as ended:
            # Withdrawn: unanswered in time, or no longer needed (the request it was asked
            # for was cancelled, by the client or by the server, or the session is ending).
            why = "no answer in time" if isinstance(ended, TimeoutError) else WITHDRAWN
            reason = {"requestId": request_id, "reason": why}
            self.client.send(notification("notifications/cancelled", reason), related)
            raise
        finally:
            self._upstream_pending.pop(request_id, None)
