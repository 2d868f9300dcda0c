"""Escalations asked of a human.

An escalated call waits (alone: other calls go on) for an answer from an approval channel,
in this order in mode ``auto`` with one local user: MCP elicitation to the upstream client
when it declared the capability; an attached ``ironcurtain approvals`` terminal (a unix socket
in the session's owner-only runtime directory). With callers (a caller file, or callers
authenticated by their tokens), the party whose call it is never answers it in mode ``auto``:
only the operator's channel (the terminal) is asked. Only in mode ``elicit`` is a caller's
client asked, and then only when approving gives no sandbox anything beyond what it has
and every path the call names is the caller's own (``${caller}``); an approval that would
widen a sandbox onto the host, or reach any other path, is denied without asking. No
channel, no answer within the timeout, or anything but an approval means deny. An approval
is bound to the exact server, tool and argument hash of the call that asked and is used by
that call alone; "approve for this session" records a narrow entry (same server, tool and
canonical arguments) that later identical calls match without asking again. With a shared
state (several instances of one gateway), the entry is kept there, and so are the pattern
approvals given, so each holds on every instance; while that state cannot be reached, no
escalation is asked (each is denied), no pattern answers a call and no approval for the
session or pattern is taken.

A server's own request of the client (sampling) is asked the same way, worded as the
server's, never as a call the agent makes: the human is shown the whole request as it will
be sent, and a session entry covers only a request whose every field is the same. The
question's message starts with ``ironcurtain:``, which a server's own question relayed to
the client never does (each of its lines starts with ``[server 'name']``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import field
from typing import Any, Protocol

from launcher.audit.log import hash_value
from launcher.relay.approving.patterns import LocalPatterns, PatternStore, owner_of
from launcher.shared.jsonrpc import Message
from launcher.shared.shown import visible
from launcher.shared_state.store import SharedState, StateLost
from policy.decision import Decision
from policy.patterns import CallShape, Pattern
from sandbox_profiles.records import frozen, mutable

APPROVE, APPROVE_SESSION, DENY = "approve", "approve for this session", "deny"
# The answer choosing the question's n-th offered pattern (from 1): f"{PATTERN}{n}".
PATTERN = "approve the pattern "

# What a server's own request (not a tool call) is kept as in the session whitelist.
SERVER_REQUEST = "server request: "
Requester = Callable[[str, dict[str, Any], float], Awaitable[dict[str, Any]]]


class AskClient(Protocol):
    """Sends the client a request; ``related``: the client's request it belongs to (its
    id, or the call made of it)."""

    def __call__(
        self, method: str, params: Message, timeout: float, related: object = None
    ) -> Awaitable[Message]: ...


def asking_with(ask: AskClient, related: object) -> Requester:
    """``ask`` for questions about the client's request ``related``: they go with it (over
    HTTP, on the event stream of that request, which the client reads; a client need not
    open the stream for what nobody asked; to a client of the stateless era, as the answer
    to that request)."""

    def asking(method: str, params: dict[str, Any], timeout: float) -> Awaitable[Message]:
        return ask(method, params, timeout, related)

    return asking


class AnsweredElsewhere(TimeoutError):
    """No answer came here: the client answered on another instance of the gateway, which
    took the call over (so this copy of it is not run)."""


@frozen
class Outcome:
    approved: bool
    escalation: str  # what the audit log records
    detail: str = ""  # for the client when denied
    pattern: dict[str, object] | None = None  # the pattern given or used (the audit's)


class Terminals(Protocol):
    """Where a human answers in a terminal (``ironcurtain approvals``): whether one is
    attached, and asking it."""

    @property
    def attached(self) -> bool: ...

    async def ask(self, question: dict[str, Any], timeout: float) -> str:
        """The answer to ``question`` (TimeoutError when none comes in time)."""
        ...


@mutable
class Approvals:
    mode: str
    timeout: float
    terminals: Terminals | None = None
    # (server, tool, argument hash) that the user approved for the rest of the session.
    session_whitelist: set[tuple[str, str, str]] = field(default_factory=set)
    # Whose calls these are (gateway mode: a caller's own), as a terminal is told.
    caller: dict[str, str] | None = None
    # The session has callers: the party whose call it is is not the operator.
    callers: bool = False
    # Where instances of one gateway keep what is approved for the session (None: here,
    # in session_whitelist), and whose it is there (a caller's key, hashed).
    shared: SharedState | None = None
    scope: str = "-"
    # Tools whose approvals were forgotten here while the shared state could not say so.
    _forgotten: set[tuple[str, str]] = field(default_factory=set)
    # The patterns given in the session (every caller's: each answers its owner's only).
    patterns: PatternStore = field(default_factory=LocalPatterns)

    def for_caller(self, caller: dict[str, str], scope: str = "-") -> Approvals:
        """Approvals asked the same way, for ``caller``'s calls only: what it is approved for
        the session, and the patterns it is given, are its own (``scope``: whose, in the
        shared state)."""
        return Approvals(
            self.mode,
            self.timeout,
            self.terminals,
            caller=caller,
            callers=True,
            shared=self.shared,
            scope=scope,
            patterns=self.patterns,
        )

    @property
    def owner(self) -> str:
        """Whose patterns answer these calls."""
        return owner_of(self.caller)

    def forget(self, server: str, tool: str) -> None:
        """What was approved for the session for ``tool`` of ``server``, by call or by
        pattern, no longer counts (it changed since)."""
        self.session_whitelist = {
            key for key in self.session_whitelist if key[:2] != (server, tool)
        }
        if self.shared is None:
            self.patterns.forget(server, tool)
            return
        self._forgotten.add((server, tool))  # until the shared state has forgotten too
        try:
            self.shared.revoke(self.scope, f"{server}\0{tool}")
            self.patterns.forget(server, tool)  # every caller's, where they are kept
        except StateLost:
            return
        self._forgotten.discard((server, tool))

    def _whitelisted(self, key: tuple[str, str, str]) -> bool:
        """Whether ``key`` was approved for the session (StateLost: cannot be known)."""
        if self.shared is None:
            return key in self.session_whitelist
        if key[:2] in self._forgotten:
            self.forget(*key[:2])
            if key[:2] in self._forgotten:
                raise StateLost("what changed could not be forgotten there")
        return self.shared.granted(self.scope, f"{key[0]}\0{key[1]}", key[2])

    def _whitelist(self, key: tuple[str, str, str]) -> None:
        """Approved for the session (StateLost: not taken)."""
        if self.shared is None:
            self.session_whitelist.add(key)
        else:
            self.shared.grant(self.scope, f"{key[0]}\0{key[1]}", key[2])

    def channel(self, client_elicits: bool) -> str | None:
        """Who is asked: the client (``elicit``), the attached terminal (``socket``), or no
        one. With callers, the client only when the operator chose it (mode ``elicit``)."""
        if client_elicits and (self.mode == "elicit" or (self.mode == "auto" and not self.callers)):
            return "elicit"
        if self.terminals is not None and (
            self.mode == "socket" or (self.mode == "auto" and self.terminals.attached)
        ):
            return "socket"
        return None

    async def decide(
        self,
        server: str,
        tool: str,
        arguments: dict[str, object],
        decision: Decision,
        client_elicits: bool,
        ask: Requester,
        grant: str = "",
        by_server: bool = False,
        beyond_own: str = "",
        shape: CallShape | None = None,
        offers: Sequence[Pattern] = (),
    ) -> Outcome:
        """``grant``: what approving gives the call beyond its server's sandbox, said in
        the question (empty: nothing); ``by_server``: the request is the server's own of the
        client (``tool`` its method, ``arguments`` all of it as it will be sent);
        ``beyond_own``: a path approving would reach beyond the server's sandbox, or that is
        not the caller's own (empty: none), which a caller's client is never asked to give;
        ``shape``: the call as patterns judge it (None: no pattern answers it); ``offers``:
        the patterns the question may offer (the operator's channels alone offer them)."""
        # A server's own request is never the same entry as a tool of the same name.
        key = (server, f"{SERVER_REQUEST}{tool}" if by_server else tool, hash_value(arguments))
        try:
            if self._whitelisted(key):
                return Outcome(True, "session-whitelist")
        except StateLost as lost:
            return _unavailable(lost)
        try:
            given = self.patterns.find(self.owner, shape) if shape is not None else None
        except StateLost as lost:
            return _unavailable(lost)
        if given is not None:
            return Outcome(True, "pattern", pattern={"id": given.pid})
        channel = self.channel(client_elicits)
        if channel is None:
            return Outcome(False, "no-approval-channel")
        if channel == "elicit" and self.callers and beyond_own:
            return Outcome(
                False,
                "not-asked-beyond-own",
                f"approving would reach {beyond_own}, beyond the server's sandbox or not the "
                "caller's own; a caller's client is never asked to give that",
            )
        if channel == "socket":
            question = {
                "server": server,
                "tool": tool,
                "arguments": arguments,
                "rule": decision.rule,
                "reason": decision.reason,
                "question": visible(_asked(server, tool, by_server)),
                **({"grant": grant} if grant else {}),
                **({"caller": self.caller} if self.caller else {}),
                **({"patterns": _offered(offers)} if offers else {}),
            }
            return await self._at_terminal(key, question, offers)
        message = approval_message(server, tool, arguments, decision, grant, by_server)
        return await self._by_elicitation(key, ask, message, by_server)

    async def _by_elicitation(
        self, key: tuple[str, str, str], ask: Requester, message: str, by_server: bool
    ) -> Outcome:
        """The client asked, by a form of one question."""
        params = {
            "mode": "form",
            "message": message,
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "answer": {
                        "type": "string",
                        "title": "Allow this request?" if by_server else "Allow this call?",
                        "enum": [APPROVE, APPROVE_SESSION, DENY],
                    }
                },
                "required": ["answer"],
            },
        }
        try:
            reply = await ask("elicitation/create", params, self.timeout)
        except AnsweredElsewhere:
            return Outcome(False, "answered-elsewhere", "answered on another instance")
        except TimeoutError:
            return Outcome(False, "timeout", f"no answer within {self.timeout:g} s")
        except Exception as exc:  # a failed channel is a deny, with the reason
            return Outcome(False, "channel-failed", str(exc))
        result = reply.get("result") if isinstance(reply.get("result"), dict) else {}
        assert isinstance(result, dict)
        content = result.get("content") if isinstance(result.get("content"), dict) else {}
        assert isinstance(content, dict)
        answer = content.get("answer") if result.get("action") == "accept" else None
        action = result.get("action") or ("error" if "error" in reply else "?")
        return self._outcome(key, answer, str(answer or action))

    async def _at_terminal(
        self, key: tuple[str, str, str], question: dict[str, Any], offers: Sequence[Pattern]
    ) -> Outcome:
        """``question`` asked at the attached terminal (or the page), which may choose one of
        the patterns ``offers``."""
        assert self.terminals is not None
        try:
            said = await self.terminals.ask(question, self.timeout)
        except TimeoutError:
            return Outcome(False, "timeout", f"no answer within {self.timeout:g} s")
        chosen = _chosen(said, offers)
        if chosen is not None:
            try:
                given = self.patterns.give(self.owner, chosen)
            except StateLost as lost:  # not kept: not taken
                return _unavailable(lost)
            # The directory or host is an argument's: the audit log keeps its hash only.
            record: dict[str, object] = {
                "id": given.pid,
                "kind": chosen.kind,
                "value": hash_value(chosen.value),
            }
            return Outcome(True, "approved-pattern", pattern=record)
        return self._outcome(key, said, said)

    def _outcome(self, key: tuple[str, str, str], answer: object, said: str) -> Outcome:
        if answer == APPROVE:
            return Outcome(True, "approved")
        if answer == APPROVE_SESSION:
            try:
                self._whitelist(key)
            except StateLost as lost:
                return _unavailable(lost)
            return Outcome(True, "approved-for-session")
        return Outcome(False, "denied", f"the user answered {said}")


def _unavailable(lost: StateLost) -> Outcome:
    """Denied: what is approved for the session is kept in a shared state that cannot be
    reached (an approval would not be taken)."""
    return Outcome(
        False, "state-unavailable", f"the shared state of approvals cannot be reached ({lost})"
    )


def _offered(offers: Sequence[Pattern]) -> list[dict[str, str]]:
    """The patterns a question offers: the answer choosing each, and its exact words."""
    return [{"answer": f"{PATTERN}{n}", "text": visible(p.text())} for n, p in enumerate(offers, 1)]


def _chosen(said: str, offers: Sequence[Pattern]) -> Pattern | None:
    """The offered pattern the answer ``said`` chooses (None: it chooses none)."""
    for n, pattern in enumerate(offers, 1):
        if said == f"{PATTERN}{n}":
            return pattern
    return None


def approval_message(
    server: str,
    tool: str,
    arguments: dict[str, object],
    decision: Decision,
    grant: str = "",
    by_server: bool = False,
) -> str:
    """What the human sees: which call (or which request of a server's, ``by_server``), why
    it needs them, what approving gives, the exact (canonical) arguments."""
    shown = json.dumps(arguments, indent=2, ensure_ascii=False, sort_keys=True)
    what = (
        "The request, all of it, as it would be sent"
        if by_server
        else "Arguments (as the server would get them)"
    )
    # Characters that act rather than show (bidi overrides, C1 controls, zero-width) are
    # written as escapes: the person approves what the server gets, not what it looks like.
    return visible(
        f"ironcurtain: {_asked(server, tool, by_server)}.\n"
        f"Policy rule {decision.rule}: {decision.reason}.\n"
        + (f"{grant}.\n" if grant else "")
        + f"{what}:\n{shown}"
    )


def _asked(server: str, tool: str, by_server: bool) -> str:
    """The question, in words: whose request it is and what it asks for (a tool's name is
    the server's: on one line, so it cannot start a line of its own)."""
    tool = visible(tool, one_line=True)
    if not by_server:
        return f"the agent wants to call {tool} on server '{server}'"
    if tool == "sampling/createMessage":
        return (
            f"server '{server}' asks the user's model to answer its request ({tool}); "
            "nothing is sent to the model unless you approve"
        )
    return f"server '{server}' asks the client: {tool}"
