"""The checked call: one path for every request that reaches a server (``tools/call``,
``prompts/get``, ``resources/read``, ``resources/subscribe``/``unsubscribe``,
``completion/complete``).

Route → gate (one decision) → approval when escalated (:mod:`launcher.relay.escalation`) →
forward → audit. The request is decided, audited and forwarded in the callback that read
it, and the answer relayed in the callback that read it; only an escalation, which waits for
a human, runs as a task. A refused tool call is answered with a tool result whose text
starts ``DENIED`` (the model reads it); any other refused method with an error answer saying
the same.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from typing import Any

from launcher.audit.log import hashed_arguments
from launcher.relay.call import Call, ClientLink, malformed_answer
from launcher.relay.escalation import Escalations, discard
from launcher.relay.gate.decide import denial_text
from launcher.relay.questions.input_bridge import ServerInputs
from launcher.relay.router import SEPARATOR
from launcher.relay.seams import Core, Downstream
from launcher.relay.stateless.era import asks_for_input, for_server, server_result
from launcher.shared.error_codes import (
    DENIED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    RESOURCE_NOT_FOUND,
)
from launcher.shared.jsonrpc import (
    BY_URI,
    COMPLETE,
    HANDSHAKE,
    META_CAPABILITIES,
    PROMPT,
    STATELESS,
    SUBSCRIBE,
    TOOL,
    UNSUBSCRIBE,
    Message,
    ServerGone,
    error,
    result,
    tool_result,
)
from policy.argument_scan import Finding
from policy.decision import Decision
from policy.models import Annotation

NOT_FOUND = {
    PROMPT: INVALID_PARAMS,
    COMPLETE: INVALID_PARAMS,
    **dict.fromkeys(BY_URI, RESOURCE_NOT_FOUND),
}
CHECKED = (TOOL, PROMPT, COMPLETE, *BY_URI)


class CheckedCalls:
    def __init__(self, core: Core, link: ClientLink) -> None:
        self.core = core
        self.send = link.send
        self.link = link
        self._spawn = link.spawn
        self._calls: dict[object, Call] = {}  # forwarded, by the client's id
        # Progress tokens of calls out at a server: (server, token) -> call. A server's
        # progress is relayed only for its own calls still out (not after a cancel).
        self.progress: dict[tuple[str, object], Call] = {}
        self._tokens = itertools.count(1)
        self.escalations = Escalations(core, self, link)
        # Answers a stateless-era server's questions (set once the relay has its asks).
        self.inputs: ServerInputs | None = None

    def only_call_at(self, server: str) -> Call | None:
        """The one call out at ``server``; None when there are none or several (what the
        server asks then cannot be told apart)."""
        found = [c for c in self._calls.values() if c.server == server]
        return found[0] if len(found) == 1 else None

    def rebind(self, call: Call, request_id: object) -> None:
        """``call`` goes on under the client's id ``request_id`` (a stateless client's retry
        of the request it was asked a question during, or where it waits for that retry)."""
        old = call.request_id
        if self._calls.get(old) is call:
            del self._calls[old]
            self._calls[request_id] = call
        self.escalations.rebind(old, request_id)
        call.request_id = request_id

    def cancel(self, request_id: str | int) -> None:
        """The client cancelled ``request_id``: the server is told (or the human no longer
        asked); the audit says ``cancelled``; the client gets no answer (MCP)."""
        call = self._calls.get(request_id)
        if call is not None:
            self._cancel(call, "cancelled")
            return
        self.escalations.cancel(request_id)

    def stop(self) -> None:
        """Calls still out are cancelled at their servers and audited ``cancelled``."""
        for call in list(self._calls.values()):
            self._cancel(call, "the session is stopping")

    def start(
        self,
        method: str,
        params: Message,
        request_id: Any,
        given: Message | None = None,
        asked: str = "",
    ) -> None:
        """Decided, audited and forwarded in the callback that read it; the answer is
        relayed in the callback that reads it (:meth:`answered`). ``given``: the client's
        answer to the approval question of a round another instance began (``asked``: a
        digest of that question)."""
        started = time.perf_counter()
        malformed = malformed_answer(method, params, request_id)
        if malformed is not None:
            self.send(malformed)
            return
        server, name, args = self.core.router.target(method, params)
        subscribing = method in (SUBSCRIBE, UNSUBSCRIBE)
        if server is not None and subscribing and server not in self.core.router.subscribes:
            self.send(
                error(request_id, METHOD_NOT_FOUND, f"server '{server}' has no subscriptions")
            )
            return
        if server is not None and method == COMPLETE and server not in self.core.router.completes:
            caller = self.core.caller
            # Nothing to complete; but what a caller may not ask of the prompt is refused
            # and audited as the gate refuses it, not answered as though it could.
            if caller is None or not self.core.gate.missing(method, server, name, caller):
                self.send(result(request_id, {"completion": {"values": [], "hasMore": False}}))
                return
        cwd = self.core.settings[server].cwd if server else self.core.workspace
        checked = self.core.gate.check(method, server, name, args, cwd, self.core.caller)
        decision = checked.decision
        conn = self.core.servers.get(server) if server else None
        call = Call(request_id, method, params, started, server, name, checked.arguments, conn)
        call.given, call.asked = given, asked
        call.entry = self._entry(call, decision, checked.hashes, checked.secrets)
        if checked.missing:  # what the caller lacked: the audit's to know, not the client's
            call.entry["policy"]["missing"] = list(checked.missing)
        if decision.decision == "escalate" and conn is not None and server is not None:
            self.escalations.start(call, decision)
        elif decision.decision != "allow" or conn is None:
            denial = (self._stopped(method, name) if server is None else None) or denial_text(
                decision
            )
            self.end(call, "denied", denial=denial, missing=server is None)
        else:
            self.forward(call)

    def _stopped(self, method: str, name: str) -> str | None:
        """Why the server a tool or prompt name no server offers is named after is not
        serving (stopped, or not opened for this caller), when it is one; else None."""
        router = self.core.router
        if method not in (TOOL, PROMPT) or not router.prefixed:
            return None
        server, separator, _ = name.partition(SEPARATOR)
        why = self.core.halted.get(server) if separator else None
        return f"ERROR: server '{server}' is not serving: {why}" if why else None

    def forward(self, call: Call, extra: Message | None = None) -> None:
        """Send ``call`` to its server (or the instance an approval gave it); ``extra``:
        what is sent with it again (the answers to its server's questions)."""
        conn, server = call.conn, call.server
        assert conn is not None and server is not None
        if call.token is None and call.progress_token() is not None:
            call.token = f"ironcurtain-progress-{next(self._tokens)}"
        params = self._forwarded_params(call)
        try:
            call.downstream = conn.send_request(
                call.method,
                {**params, **extra} if extra else params,
                lambda outcome: self.answered(call, outcome),
                self.core.settings[server].timeout,
            )
        except ServerGone as gone:
            self.answered(call, gone)
            return
        except Exception as exc:  # whatever it was, the call is audited and answered
            self.end(call, "error", failure=f"ERROR: the request could not be sent: {exc}")
            return
        if isinstance(call.request_id, str | int):
            self._calls[call.request_id] = call
        if call.token is not None:
            self.progress[(server, call.token)] = call
        call.prepared = self.core.audit.prepare(call.entry, late=("result", "durationMs"))

    def _forwarded_params(self, call: Call) -> Message:
        """The client's params as the server knows them: its own names, canonical values,
        none of the stateless era's ``_meta`` (the server is in its own session); to a server
        of the stateless era, what the client declared it takes (the connection keeps to
        what ironcurtain lets the server ask within that)."""
        params = for_server(self._server_params(call))
        if call.token is not None:  # the server reports progress under ironcurtain's token
            meta = params.get("_meta")
            params = {**params, "_meta": {**(meta if isinstance(meta, dict) else {}),
                                          "progressToken": call.token}}  # fmt: skip
        if call.conn is not None and call.conn.era == STATELESS:
            meta = params.get("_meta")
            declared = {META_CAPABILITIES: self.link.takes(call) or {}}
            params = {**params, "_meta": {**(meta if isinstance(meta, dict) else {}), **declared}}
        return params

    def _server_params(self, call: Call) -> Message:
        params, method = call.params, call.method
        if method == TOOL:
            return {**params, "name": call.name, "arguments": call.arguments}
        if method == PROMPT:
            return {**params, "name": call.name, "arguments": call.arguments}
        if method == COMPLETE:
            # Rebuilt from what was checked: the completed argument first, then the context.
            (argument, value), *context = call.arguments.items()
            ref = dict(params["ref"])
            if ref.get("type") == "ref/prompt":
                ref["name"] = call.name.removeprefix("ref/prompt ")
            forward: Message = {"ref": ref, "argument": {"name": argument, "value": value}}
            if context:
                forward["context"] = {"arguments": dict(context)}
            return forward
        return {**params, "uri": call.arguments["uri"]}

    def answered(self, call: Call, outcome: Message | BaseException) -> None:
        """The server answered, exited, or ran out of time: audit, then answer the client."""
        if self._calls.get(call.request_id) is call:
            del self._calls[call.request_id]
        if call.one_shot is not None and not self._asks(call, outcome):
            # Carried over only with its last answer: a widened call whose server asks
            # first keeps its instance (and nothing reaches the host) until then.
            self.escalations.carry_over(call, outcome)
            return
        try:
            self.core.settle()  # what the call created is dealt with before it returns
            halted = self.core.halted.get(call.server) if call.server else None
            if halted is not None:
                text = f"ERROR: server '{call.server}' was stopped: {halted}; it is not running"
                self.end(call, "error", failure=text)
                return
            self._answer(call, outcome)
        except Exception as exc:  # never take the session down for one call
            self.send(error(call.request_id, INTERNAL_ERROR, f"internal error: {exc}"))

    def _answer(self, call: Call, outcome: Message | BaseException) -> None:
        server, conn = call.server, call.conn
        assert conn is not None and server is not None
        if isinstance(outcome, BaseException):
            self._no_answer(call, server, conn, outcome)
            return
        if "error" in outcome:
            self._relay_error(call, server, outcome)
            return
        answer = outcome.get("result")
        if not isinstance(answer, dict):
            text = f"ERROR: server '{server}' returned a malformed result"
            self.end(call, "error", failure=text)
            return
        if self.inputs is not None and self.inputs.bridged(call, answer):
            # A stateless-era server's question: answered for it (as its own request
            # would be), then the call is sent again; it is still out meanwhile.
            if isinstance(call.request_id, str | int):
                self._calls[call.request_id] = call
            call.asking = self._spawn(self._answer_inputs(call, answer))
            return
        if asks_for_input(answer):
            # A server asks the client only in its era's way (a request of its own in the
            # handshake era, a result in the stateless era), which passes the questions'
            # checks; anything else that asks is refused.
            text = f"ERROR: server '{server}' asked for input in its result, which is not relayed"
            self.end(call, "error", failure=text)
            return
        answer = server_result(answer)
        failed = call.method == TOOL and bool(answer.get("isError"))
        answer, filtered = self.core.outputs.answer(server, call.method, call.name or "", answer)
        self.finish(call, "error" if failed else "success", filtered)
        if not self.core.audit.healthy:
            text = (
                "DENIED (rule: audit-log-unwritable): the audit log cannot be "
                "written; the call ran but its result is withheld"
            )
            self._reply(call, text, DENIED)
            return
        self.send(result(call.request_id, answer))

    def _no_answer(self, call: Call, server: str, conn: Downstream, outcome: BaseException) -> None:
        """A call its server gave no answer to: gone, or not in time (anything else raised)."""
        if isinstance(outcome, ServerGone):
            again = "it is being restarted, try again shortly" if conn.restarting else None
            self.end(
                call, "server-exited", failure=f"ERROR: {outcome}; {again or 'it is not running'}"
            )
            return
        if isinstance(outcome, TimeoutError):
            timeout = self.core.settings[server].timeout
            text = (
                f"ERROR: server '{server}' did not answer within {timeout} s; "
                "the call was cancelled"
            )
            self.end(call, "timeout", failure=text)
            return
        raise outcome

    def _relay_error(self, call: Call, server: str, outcome: Message) -> None:
        """The server's error answer, passed on through the output policy with a code a
        JSON-RPC client takes."""
        self.finish(call, "error")
        err = outcome["error"] if isinstance(outcome["error"], dict) else {}
        code = err.get("code")
        relayed: Message = {
            **err,
            # A JSON-RPC code is a 32-bit integer; anything else carries the server's data.
            "code": code if type(code) is int and -(2**31) <= code < 2**31 else INTERNAL_ERROR,
            "message": str(err.get("message", "error")),
        }
        relayed = self.core.outputs.error(server, call.method, call.name or "", relayed)
        self.send({"jsonrpc": "2.0", "id": call.request_id, "error": relayed})

    def _asks(self, call: Call, outcome: Message | BaseException) -> bool:
        """Whether ``outcome`` is a question of its server's that is answered for it."""
        answer = outcome.get("result") if isinstance(outcome, dict) else None
        return (
            self.inputs is not None
            and isinstance(answer, dict)
            and self.inputs.bridged(call, answer)
        )

    async def _answer_inputs(self, call: Call, answer: Message) -> None:
        assert self.inputs is not None
        try:
            await self.inputs.answer(call, answer)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # never leave the client without an answer
            self.end(call, "error", failure=f"ERROR: the server's questions failed: {exc}")
        finally:
            call.asking = None

    def end(
        self,
        call: Call,
        status: str,
        *,
        denial: str | None = None,
        failure: str | None = None,
        missing: bool = False,
    ) -> None:
        """Audit ``call`` with ``status`` and tell the client why it was not made (a denial)
        or did not work (a failure)."""
        self.finish(call, status)
        one_shot, call.one_shot = call.one_shot, None
        if one_shot is not None:  # an approved instance of a call that ended: nothing kept
            self._spawn(discard(one_shot))
        if denial is not None:
            code = NOT_FOUND.get(call.method, DENIED) if missing else DENIED
            self._reply(call, denial, code)
        else:
            self._reply(call, failure or "ERROR", INTERNAL_ERROR)

    def _reply(self, call: Call, text: str, code: int) -> None:
        """A tool call's refusal is a tool result (so the model reads it); any other
        method's is an error answer."""
        if call.method == TOOL:
            self.send(result(call.request_id, tool_result(text)))
        else:
            self.send(error(call.request_id, code, text))

    def _cancel(self, call: Call, reason: str) -> None:
        """The client cancelled it, or the session is stopping: the server is told, the
        audit says ``cancelled``, the client gets no answer (MCP)."""
        if self._calls.get(call.request_id) is call:
            del self._calls[call.request_id]
        assert call.conn is not None and call.downstream is not None
        asking, call.asking = call.asking, None
        if asking is not None:  # its server's questions are being answered: no more
            asking.cancel()
            self.finish(call, "cancelled")
        elif call.conn.cancel_request(call.downstream, reason):
            self.finish(call, "cancelled")
        one_shot, call.one_shot = call.one_shot, None
        if one_shot is not None:  # nothing of a cancelled call is carried over
            self._spawn(discard(one_shot))

    def _entry(
        self, call: Call, decision: Decision, hashes: dict[str, str], secrets: Sequence[Finding]
    ) -> dict[str, Any]:
        """The call's audit entry; an argument that holds a credential is hashed even where
        arguments are written in clear, and the entry names where each is and what found it."""
        server, era = call.server, self.link.era()
        hidden = [*self._pii(call), *(finding.top for finding in secrets)]
        found = [{"argument": f.argument, "detector": f.detector} for f in secrets]
        return {
            "requestId": call.request_id,
            "method": call.method,
            "server": server,
            "tool": call.name,
            "arguments": hashed_arguments(
                call.arguments, self.core.audit_args_clear, hidden, hashes
            ),
            "policy": {
                "decision": decision.decision,
                "rule": decision.rule,
                "reason": decision.reason,
                **({"secretsInArguments": found} if found else {}),
            },
            "escalation": None,
            "sandboxed": bool(server and self.core.settings[server].sandboxed),
            **({"era": era} if era != HANDSHAKE else {}),
        }

    def _pii(self, call: Call) -> list[str]:
        if not self.core.audit_args_clear or call.server is None:
            return []
        engine = self.core.gate.engine
        annotation: Annotation | None = None
        if call.method == TOOL:
            annotation = engine.get_annotation(call.server, call.name)
        elif call.method == PROMPT:
            annotation = engine.get_prompt_annotation(call.server, call.name)
        return list(annotation.pii_fields) if annotation else []

    def finish(self, call: Call, status: str, output: Message | None = None) -> None:
        """Write the call's audit entry with its outcome (what was known before is already
        serialised in ``call.prepared`` when the call was forwarded)."""
        call.ended = True
        key = (str(call.server), call.token)
        if call.token is not None and self.progress.get(key) is call:
            del self.progress[key]
        outcome: Message = {
            "result": status,
            "durationMs": round((time.perf_counter() - call.started) * 1000, 3),
        }
        if output is not None:
            outcome["output"] = output  # what the output filters did: counts, detector names
        if call.granted is not None:
            outcome["carriedOver"] = call.granted  # a widened call: what reached the host
        audit = self.core.audit
        if self.core.telemetry is not None:
            stamped = audit.fields_for(call.entry)
            self.core.telemetry.call(
                call.entry, status, outcome["durationMs"], call.params, stamped
            )
        if call.prepared is not None:
            written = audit.write(outcome, call.prepared)
        else:
            written = audit.write({**call.entry, **outcome})
        if not written:
            self.core.say(f"audit log write failed ({audit.error}); denying every further call")
