"""What servers ask of the client: ``elicitation/create`` and ``sampling/createMessage``,
relayed through one path (``ping`` and ``roots/list`` a server connection answers itself).

- **Elicitation** reaches the client when the client declared the mode asked for (``form``,
  the default, or ``url``) and the server's ``clientRequests.elicitation`` is ``allow``. It
  is marked as the server's, its strings shown as escapes, and a link is relayed only to a
  host the server's egress allows (:mod:`launcher.relay.questions.made_safe`).
- **Sampling** reaches the client when it declared ``sampling`` and the server's
  ``clientRequests.sampling`` lets it: ``allow``, or ``ask`` (a human approves each first,
  through the approval channels, shown the whole request as the client's model would get
  it). ``includeContext`` is sent as ``none``: to the client, "this server" is ironcurtain,
  so any context it added would be every server's.
- Anything else a server asks is answered "method not found".

What the client gets is made once (:func:`launcher.relay.questions.made_safe.forwarded`,
after the server's credentials are masked): the human approving a sampling request is shown
that, it is what is sent, and "approve for this session" covers only a request whose
forwarded content is the same. Each is audited like a call (server, method, the request's
fields hashed, the decision, the outcome); the client's answer goes back to the server as it
came. A server that cancels its request has the question withdrawn from the client. A server
has at most ``MAX_OPEN`` of them open at once (more are refused, so it cannot bury the human
in questions), and an id it is already using is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from launcher.audit.log import hashed_arguments
from launcher.relay.approving.approval import AskClient, asking_with
from launcher.relay.questions.made_safe import ELICIT, SAMPLE, Refused, forwarded
from launcher.relay.seams import Core
from launcher.shared.error_codes import DENIED, INTERNAL_ERROR, METHOD_NOT_FOUND
from launcher.shared.jsonrpc import HANDSHAKE, Message, ServerGone
from policy.decision import Decision

_UNSET = object()
# How long a question of a server's may wait for the client (a human answering a form).
ASK_TIMEOUT = 600.0
MAX_OPEN = 4  # questions one server may have open at once


class Asker(Protocol):
    """Who asked: a server, by its name, and how its question is answered."""

    name: str

    def reply(self, request_id: object, outcome: Message) -> None: ...


class ServerAsks:
    def __init__(
        self,
        core: Core,
        *,
        ask_client: AskClient,
        client_capabilities: Callable[[object], Message | None],
        approve_via: AskClient,
        client_elicits: Callable[[object], bool],
        related: Callable[[str], object],
        spawn: Callable[[Coroutine[Any, Any, None]], asyncio.Task[None]],
        era: Callable[[], str] = lambda: HANDSHAKE,
        busy: Callable[[object], str | None] = lambda related: None,
    ) -> None:
        self.core = core
        self._ask_client = ask_client
        # What the client takes during its request of an id: None until it initialized.
        self._client = client_capabilities
        self._approve_via = approve_via
        self._client_elicits = client_elicits
        self._related = related
        self._spawn = spawn
        self._era = era
        self._busy = busy  # why the client cannot be asked during ``related`` now, if so
        self._open: dict[tuple[str, str | int], asyncio.Task[None]] = {}

    def request(
        self, conn: Asker, message: Message, related: object = _UNSET, bridged: bool = False
    ) -> None:
        """A request ``conn``'s server sent; it is answered (now or when the client has).
        ``related``: the call it is asked during (by default, the one call out at that
        server, if there is one); ``bridged``: asked in a result of the stateless era, not
        by a server waiting for the answer (its questions are bounded per call, not by
        ``MAX_OPEN``, which a client that never answers would otherwise use up)."""
        method = str(message.get("method"))
        request_id = message.get("id")
        if method not in (ELICIT, SAMPLE):
            _reply(conn, request_id, error=(METHOD_NOT_FOUND, f"method not found: {method}"))
            return
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        started = time.perf_counter()
        if related is _UNSET:
            related = self._related(conn.name)  # the call the server asks during
        decision = self._decide(conn.name, method, params, related)
        if decision.decision != "deny" and not bridged:
            decision = self._limit(conn.name, request_id) or decision
        sent: Message = {}
        if decision.decision != "deny":
            settings = self.core.settings[conn.name]
            try:
                sent = forwarded(
                    conn.name,
                    method,
                    self.core.outputs.message(conn.name, params),
                    settings.allowed_domains,
                    settings.denied_domains,
                )
            except Refused as exc:
                rule = "elicitation-url" if params.get("mode") == "url" else "client-request-shape"
                decision = Decision("deny", rule, str(exc))
        entry = self._entry(conn.name, request_id, method, params, decision)
        during = _request_of(related)
        if during is not None:  # the client's request it is asked during: whose it is
            entry["callRequestId"] = during
        if decision.decision == "deny":
            code = METHOD_NOT_FOUND if decision.rule == "client-capability" else DENIED
            self._finish(entry, "denied", started)
            _reply(
                conn, request_id, error=(code, f"DENIED (rule: {decision.rule}): {decision.reason}")
            )
            return
        task = self._spawn(
            self._relay(conn, request_id, method, sent, decision, entry, started, related)
        )
        if isinstance(request_id, str | int):
            key = (conn.name, request_id)
            self._open[key] = task
            task.add_done_callback(lambda _: self._open.pop(key, None))

    def cancelled(self, conn: Asker, params: Message) -> None:
        """The server cancelled a request of its own: the client's question is withdrawn."""
        request_id = params.get("requestId")
        task = (
            self._open.get((conn.name, request_id)) if isinstance(request_id, str | int) else None
        )
        if task is not None:
            task.cancel()

    def _limit(self, server: str, request_id: Any) -> Decision | None:
        """A refusal when the server asks too much at once, or reuses an open id."""
        if isinstance(request_id, str | int) and (server, request_id) in self._open:
            return Decision(
                "deny", "client-requests-limit", f"request id {request_id!r} is already open"
            )
        if sum(1 for name, _ in self._open if name == server) >= MAX_OPEN:
            return Decision(
                "deny",
                "client-requests-limit",
                f"server '{server}' already has {MAX_OPEN} questions open; "
                "it may ask again once one is answered",
            )
        return None

    def _decide(self, server: str, method: str, params: Message, related: object) -> Decision:
        settings = self.core.settings[server]
        busy = self._busy(related)
        if busy is not None:
            return Decision("deny", "client-requests-limit", busy)
        client = self._client(related)
        if client is None:
            return Decision("deny", "client-not-connected", "no client has connected yet")
        if method == ELICIT:
            mode = params.get("mode", "form")
            if settings.elicitation != "allow":
                return Decision(
                    "deny",
                    "client-requests",
                    f"server '{server}' may not ask the user questions "
                    "(its clientRequests.elicitation is deny)",
                )
            if mode not in elicitation_modes(client):
                return Decision(
                    "deny",
                    "client-capability",
                    f"the client does not take {mode!r} elicitation requests",
                )
            return Decision("allow", "client-requests", "elicitation is allowed for this server")
        if settings.sampling == "deny":
            return Decision(
                "deny",
                "client-requests",
                f"server '{server}' may not ask for sampling (its clientRequests.sampling is deny)",
            )
        if not isinstance(client.get("sampling"), dict):
            return Decision("deny", "client-capability", "the client does not take sampling")
        if settings.sampling == "ask":
            return Decision(
                "escalate",
                "client-requests",
                f"server '{server}' wants the user's model to answer its own prompt",
            )
        return Decision("allow", "client-requests", "sampling is allowed for this server")

    async def _relay(
        self,
        conn: Asker,
        request_id: Any,
        method: str,
        sent: Message,
        decision: Decision,
        entry: dict[str, Any],
        started: float,
        related: object,
    ) -> None:
        """Ask the client ``sent`` (first a human, when the decision escalates: shown
        ``sent``, all of it) and give the server its answer; ``related``: the client's
        request it is asked during."""
        server = conn.name

        try:
            if decision.decision == "escalate":
                outcome = await self.core.gate.approvals.decide(
                    server,
                    method,
                    sent,
                    decision,
                    self._client_elicits(related),
                    asking_with(self._approve_via, related),
                    by_server=True,
                )
                entry["escalation"] = outcome.escalation
                if not outcome.approved:
                    text = f"DENIED (rule: {decision.rule}): {outcome.detail or 'not approved'}"
                    self._finish(entry, "denied", started)
                    _reply(conn, request_id, error=(DENIED, text))
                    return
            answer = await self._ask_client(method, sent, ASK_TIMEOUT, related)
        except asyncio.CancelledError:
            self._finish(entry, "cancelled", started)  # by the server, or at stop
            raise
        except TimeoutError:
            self._finish(entry, "timeout", started)
            _reply(conn, request_id, error=(INTERNAL_ERROR, "the client did not answer in time"))
            return
        except Exception as exc:  # never leave the server without an answer
            self._finish(entry, "error", started)
            _reply(
                conn,
                request_id,
                error=(INTERNAL_ERROR, f"the request failed in ironcurtain: {exc}"),
            )
            return
        failed = "error" in answer or not isinstance(answer.get("result"), dict)
        self._finish(entry, "error" if failed else "success", started)
        if failed:
            err = answer.get("error")
            err = err if isinstance(err, dict) else {"code": INTERNAL_ERROR, "message": "no result"}
            with contextlib.suppress(ServerGone, OSError):
                conn.reply(request_id, {"error": err})
        else:
            with contextlib.suppress(ServerGone, OSError):
                conn.reply(request_id, {"result": answer["result"]})

    def _entry(
        self, server: str, request_id: Any, method: str, params: Message, decision: Decision
    ) -> dict[str, Any]:
        fields = {k: v for k, v in params.items() if k != "_meta"}
        era = self._era()
        return {
            "requestId": request_id,
            "method": method,
            "server": server,
            "tool": method,
            "direction": "server-to-client",
            "arguments": hashed_arguments(fields, self.core.audit_args_clear),
            "policy": {
                "decision": decision.decision,
                "rule": decision.rule,
                "reason": decision.reason,
            },
            "escalation": None,
            "sandboxed": self.core.settings[server].sandboxed,
            **({"era": era} if era != HANDSHAKE else {}),
        }

    def _finish(self, entry: dict[str, Any], status: str, started: float) -> None:
        duration = round((time.perf_counter() - started) * 1000, 3)
        audit = self.core.audit
        if self.core.telemetry is not None:
            self.core.telemetry.call(entry, status, duration, None, audit.fields_for(entry))
        if not audit.write({**entry, "result": status, "durationMs": duration}):
            self.core.say(f"audit log write failed ({audit.error}); denying every further call")


def _request_of(related: object) -> str | int | None:
    """The client's id of the request a question is asked during (``related``: a call, or
    a call with the key a server gave its question)."""
    call = getattr(related, "call", related)
    request_id = getattr(call, "request_id", None)
    return request_id if isinstance(request_id, str | int) else None


def elicitation_modes(capabilities: Message) -> frozenset[str]:
    """The elicitation modes a client declared: an empty ``elicitation`` object means form
    (as before modes existed).

    >>> sorted(elicitation_modes({"elicitation": {}}))
    ['form']
    >>> sorted(elicitation_modes({"elicitation": {"url": {}}}))
    ['url']
    >>> sorted(elicitation_modes({}))
    []
    """
    declared = capabilities.get("elicitation")
    if not isinstance(declared, dict):
        return frozenset()
    modes = frozenset(m for m in ("form", "url") if isinstance(declared.get(m), dict))
    return modes or frozenset({"form"})


def _reply(conn: Asker, request_id: Any, *, error: tuple[int, str]) -> None:
    with contextlib.suppress(ServerGone, OSError):
        conn.reply(request_id, {"error": {"code": error[0], "message": error[1]}})
