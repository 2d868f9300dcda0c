"""Questions to a client of the stateless era, asked the era's way (multi round-trip
requests): the client's request is answered ``resultType: "input_required"`` with the
question under a key of ``inputRequests`` and a ``requestState``; the client asks its user
(or its model) and sends the request again, with a new id, its answers in
``inputResponses`` and the state exactly as it was given. The call it was asked for waits
meanwhile (at its server, or for its approval) and goes on as the retry: the retry's id is
the one its answer, or the next question, goes to.

Only ``tools/call``, ``prompts/get`` and ``resources/read`` may be answered this way; a
question during any other request is refused as for a client that cannot be asked.

``requestState`` is ironcurtain's alone (a server's never reaches a client): a single-use
handle and what it was handed out for (the method, a digest of the request's params without
its ``_meta`` and answers, the caller it was asked of, an expiry), signed with a key this
relay makes at start (HMAC-SHA256). A retry whose state was altered, has expired or was
used already, or that is not the same request of the same caller, is refused (``-32602``)
and reaches nothing: the state of one call cannot carry another's answers, and an answer
given for one call is used by that call once.

Instances of one gateway that share a state (``--state``) seal with the key they share and
mark each handle used there, so a round begun on one instance may be answered on another:
when the only question open is ironcurtain's own (an approval), the instance the retry
reaches takes the call over (:class:`TakeOver`): it is checked again from the start there,
and the answer in the retry answers its approval question (only the very question it was
given to: a digest of it is sealed in the state); a handle is still used once,
by one instance. A round with a server's question stays with the instance whose server
asked it (another refuses its retry).
A retry without the answer asked for is asked again. A call that ends while its retry is
awaited (its server answered it, or withdrew its question) keeps its answer for the retry,
or goes on as the retry without one: a retry is always answered once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import field

from launcher.audit.log import hash_value
from launcher.relay.approving.approval import AnsweredElsewhere
from launcher.relay.call import Call, Send
from launcher.shared.error_codes import INTERNAL_ERROR, INVALID_PARAMS
from launcher.shared.jsonrpc import PROMPT, READ, TOOL, Message
from launcher.shared_state.store import SharedState, StateLost
from sandbox_profiles.records import frozen, mutable

INPUT_REQUIRED = "input_required"
# The key ironcurtain's own question (an approval) is asked under; a server's question's.
OWN = "ironcurtain/"
APPROVAL = OWN + "approval"
QUESTION = "question"
# What a retry carries that belongs to the rounds, not to the request itself.
ROUND_FIELDS = ("_meta", "inputResponses", "requestState")
ASKABLE = frozenset({TOOL, PROMPT, READ})
INVALID_STATE = INVALID_PARAMS, "invalid params: invalid or expired requestState"
STATE_LOST = INTERNAL_ERROR, "the shared state cannot be reached to take this requestState"
# Rounds awaiting their retries at once; past it the oldest is let go (its questions
# withdrawn), so clients that never retry cannot hold more.
MAX_WAITING = 1024
# Seconds the clocks of a gateway's instances may disagree by: a handle's used mark outlives
# its state's expiry by this much, so an instance whose clock is behind (and still takes
# the state) finds it used.
SKEW = 600.0
CALLERS_SHARE = 8  # one caller's rounds may be this part of them at most (gateway mode)


@frozen
class Spent:
    """Where a call waits for its retry: the client's request it was asked during has had
    its answer (``input_required``), so nothing more may go to that id."""

    request_id: object
    handle: str


@frozen
class TakeOver:
    """A retry of a round another instance began, taken over here: ``params``, the request
    to check from the start; ``answer``, the client's answer to the approval question
    ``asked`` (which it answers alone: a question asked here otherwise is asked anew)."""

    params: Message
    answer: Message | None
    asked: str = ""  # a digest of the approval question ``answer`` was given to


@mutable
class Keyed:
    """A question asked during ``call`` under ``key`` (the key its server gave it)."""

    call: Call
    key: str


@mutable
class _Parked:
    call: Call
    digest: str  # of the request the state is for
    # The questions of one round, by key: each request, and where its answer goes.
    questions: dict[str, tuple[Message, asyncio.Future[Message]]] = field(default_factory=dict)
    handle: str = ""
    expires: float = 0.0  # time.time() past which the state is refused
    rounds: int = 0
    ended: Message | None = None  # the call's answer, when it came before the retry
    caller: str | None = None  # who was asked (hashed), in gateway mode

    def open(self) -> dict[str, tuple[Message, asyncio.Future[Message]]]:
        """The questions still waiting for their answers."""
        return {k: q for k, q in self.questions.items() if not q[1].done()}


@mutable
class Rounds:
    """The questions out to a stateless client: ``deliver`` sends the client an answer (as
    ironcurtain's own, in the era's form already); ``rebind`` moves a call to the client's
    id its next answer goes to. The questions asked during one call at once (a server's
    several) go out in one round."""

    deliver: Send
    rebind: Callable[[Call, object], None]
    reply: Send  # an answer of the call's to the client, made in the era's form
    # Who sent the client's request of an id (as its audit entries name them; None: the
    # session's one user): a retry must come from whoever was asked.
    caller_of: Callable[[object], object] = lambda request_id: None
    # What the caller, as its retry's token says, lacks for a waiting call (nothing: it may
    # go on); and how a retry it may not make is refused (the call, the retry's id, that).
    lacking: Callable[[Call], list[str]] = lambda call: []
    refuse: Callable[[Call, object, list[str]], None] = lambda call, request_id, missing: None
    # Shared with the other instances of one gateway: the sealing key and single use.
    shared: SharedState | None = None
    _key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    _parked: dict[str, _Parked] = field(default_factory=dict)
    _gathering: dict[int, _Parked] = field(default_factory=dict)  # by id(call), this turn

    def __post_init__(self) -> None:
        if self.shared is not None and not self.shared.shared:
            self.shared = None

    def _sealing(self) -> bytes:
        """The key states are sealed and opened with: the instances' (made again when
        their store was emptied, so that nothing sealed before opens), or this relay's."""
        return self.shared.sealing_key() if self.shared is not None else self._key

    @staticmethod
    def can_ask(call: Call | None) -> bool:
        """Whether a question can be asked during ``call`` now (its request is one that may
        be answered ``input_required``, and is not waiting for a retry already)."""
        return (
            call is not None
            and call.method in ASKABLE
            and not call.ended
            and not isinstance(call.request_id, Spent)
        )

    async def ask(
        self, call: Call, key: str, method: str, params: Message, timeout: float
    ) -> Message:
        """Ask the client ``method`` with ``params`` during ``call``, under ``key``: its
        answer, as a response (``{"result": ...}``), once it retries; TimeoutError when no
        retry with it comes within ``timeout`` seconds."""
        if not self.can_ask(call):
            raise RuntimeError("the client cannot be asked during this request")
        loop = asyncio.get_running_loop()
        parked = self._gathering.get(id(call))
        if parked is None:  # the first question of a round: sent once this turn is done
            parked = _Parked(call, _digest(call))
            parked.expires = time.time() + timeout
            self._gathering[id(call)] = parked
            loop.call_soon(self._send_round, parked)
        key = _unused(key, parked.questions)
        future: asyncio.Future[Message] = loop.create_future()
        parked.questions[key] = ({"method": method, "params": params}, future)
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            parked.questions.pop(key, None)
            if not parked.open():
                self._parked.pop(parked.handle, None)
            if self._taken_elsewhere(parked.handle):
                raise AnsweredElsewhere(method) from None
            raise
        # Withdrawn (by its server, or because the call ended): the state still takes the
        # retry until it expires, which the call goes on as (or gets its answer).

    def _send_round(self, parked: _Parked) -> None:
        self._gathering.pop(id(parked.call), None)
        if parked.open():
            self._put(parked)

    def ended(self, spent: Spent, message: Message) -> None:
        """The answer of a call that waits for its retry: kept for the retry, and its
        questions withdrawn."""
        parked = self._parked.get(spent.handle)
        if parked is None or parked.call.request_id != spent:
            return
        parked.ended = message
        for _, future in parked.open().values():
            future.cancel()

    def resume(
        self, method: str, params: Message, request_id: object
    ) -> tuple[int, str] | TakeOver | None:
        """A retry (a request with ``requestState``): the waiting call goes on as it, with
        the client's answers; or, begun on another instance, is taken over here. The error
        to answer it with when it is not a retry this relay can take."""
        self._sweep()
        claims = self._open(params.get("requestState"))
        if claims is None or not self._fits(claims, method, params, request_id):
            return INVALID_STATE
        parked = self._parked.get(claims.get("h", ""))
        if parked is None:
            return self._take_over(claims, params)
        if parked.call.method != method or hash_value(_request(params)) != parked.digest:
            return INVALID_STATE
        missing = self.lacking(parked.call)
        if missing:  # its token no longer carries what the call needs: the call waits on
            self.refuse(parked.call, request_id, missing)
            return None
        used = self._use(parked.handle, parked.expires)
        if used is not None:
            return used
        del self._parked[parked.handle]  # single use
        if parked.ended is not None:  # the call ended meanwhile: its answer, to the retry
            self.reply({**parked.ended, "id": request_id})
            return None
        self.rebind(parked.call, request_id)
        responses = params.get("inputResponses")
        responses = responses if isinstance(responses, dict) else {}
        for key, (_, future) in parked.open().items():
            answer = responses.get(key)
            if isinstance(answer, dict):
                future.set_result({"jsonrpc": "2.0", "id": key, "result": answer})
        if parked.open():  # not all answered: what is not, asked again on the retry
            self._put(parked)
        # Else every question is answered, or was withdrawn: the call goes on as the retry.
        return None

    def _taken_elsewhere(self, handle: str) -> bool:
        """Whether the round's retry was taken by another instance (its handle is used,
        and not here: a retry taken here would have answered the question)."""
        if self.shared is None or not handle:
            return False
        try:
            return not self.shared.first_use(f"round:{handle}", 60)
        except StateLost:
            return False

    def _fits(self, claims: Message, method: str, params: Message, request_id: object) -> bool:
        """Whether sealed ``claims`` are of this request, of this caller, and not past."""
        return (
            claims.get("x", 0) >= time.time()
            and claims.get("m") == method
            and claims.get("d") == hash_value(_request(params))
            and claims.get("c") == _hashed(self.caller_of(request_id))
        )

    def _use(self, handle: str, expires: float) -> tuple[int, str] | None:
        """The handle's single use, among the instances (the error when it was used, or
        cannot be known to be unused)."""
        if self.shared is None:
            return None
        try:
            first = self.shared.first_use(f"round:{handle}", expires - time.time() + SKEW)
        except StateLost:
            return STATE_LOST
        return None if first else INVALID_STATE

    def _take_over(self, claims: Message, params: Message) -> tuple[int, str] | TakeOver:
        """A retry of a round another instance began (sealed with the key they share): the
        call, to be checked here from the start, with the answer to its approval."""
        asked = claims.get("q")
        if self.shared is None or not claims.get("p") or not isinstance(asked, str):
            return INVALID_STATE  # not ours, or a server's question waits at its instance
        used = self._use(str(claims.get("h")), float(claims.get("x", 0)))
        if used is not None:
            return used
        responses = params.get("inputResponses")
        answer = responses.get(APPROVAL) if isinstance(responses, dict) else None
        again = {k: v for k, v in params.items() if k not in ("inputResponses", "requestState")}
        return TakeOver(again, answer if isinstance(answer, dict) else None, asked)

    def waiting(self) -> bool:
        """Whether a question's retry is still awaited (its state not expired)."""
        self._sweep()
        return bool(self._parked)

    def _sweep(self) -> None:
        """States past their expiry are let go (their retries are refused)."""
        now = time.time()
        for handle in [h for h, p in self._parked.items() if p.expires < now]:
            del self._parked[handle]

    def _put(self, parked: _Parked) -> None:
        """Answer the call's request with its open questions, and a new state for the
        retry."""
        self._sweep()
        call = parked.call
        caller = self.caller_of(call.request_id)
        parked.caller = _hashed(caller)
        # A caller's own oldest is let go first when it has its share waiting, so one caller
        # that never retries cannot push another's out; then the oldest of all.
        mine = [h for h, p in self._parked.items() if p.caller == parked.caller]
        if len(mine) >= MAX_WAITING // CALLERS_SHARE and parked.caller is not None:
            self._let_go(mine[0])
        while len(self._parked) >= MAX_WAITING:
            self._let_go(next(iter(self._parked)))
        parked.handle = secrets.token_urlsafe(16)
        parked.rounds += 1
        self._parked[parked.handle] = parked
        claims = {"h": parked.handle, "m": call.method, "x": parked.expires, "d": parked.digest}
        if set(parked.open()) == {APPROVAL}:  # only its approval: any instance may take it
            claims["p"] = 1  # and its answer answers that very question there, no other
            claims["q"] = hash_value(parked.questions[APPROVAL][0])
        if parked.caller is not None:
            claims["c"] = parked.caller
        answered = call.request_id
        self.rebind(call, Spent(answered, parked.handle))
        asked = {
            "resultType": INPUT_REQUIRED,
            "inputRequests": {k: q for k, (q, _) in parked.open().items()},
            "requestState": self._seal(claims),
        }
        self.deliver({"jsonrpc": "2.0", "id": answered, "result": asked}, None)

    def _let_go(self, handle: str) -> None:
        for _, future in self._parked.pop(handle).open().values():
            future.cancel()

    def _seal(self, claims: Message) -> str:
        body = json.dumps(claims, separators=(",", ":"), sort_keys=True).encode()
        tag = hmac.new(self._sealing(), body, hashlib.sha256).digest()
        return f"{_b64(body)}.{_b64(tag)}"

    def _open(self, state: object) -> Message | None:
        """The claims of a state this relay sealed, or None (altered, or not ours)."""
        if not isinstance(state, str) or state.count(".") != 1 or len(state) > 1024:
            return None
        body_text, tag_text = state.split(".")
        try:
            body, tag = _unb64(body_text), _unb64(tag_text)
        except (binascii.Error, ValueError):
            return None
        if not hmac.compare_digest(hmac.new(self._sealing(), body, hashlib.sha256).digest(), tag):
            return None
        claims = json.loads(body)
        return claims if isinstance(claims, dict) else None


def _request(params: Message) -> Message:
    """A request's params without what belongs to its rounds: what a retry repeats."""
    return {k: v for k, v in params.items() if k not in ROUND_FIELDS}


def _unused(key: str, taken: Message) -> str:
    """``key``, or one like it that no other question of the round has."""
    found, n = key, 1
    while found in taken:
        n += 1
        found = f"{key}-{n}"
    return found


def _hashed(caller: object) -> str | None:
    return None if caller is None else hash_value(caller)


def _digest(call: Call) -> str:
    return hash_value(_request(call.params))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
