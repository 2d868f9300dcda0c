"""An escalated call, from the policy's ``escalate`` to its forward or its refusal: what
approving it would give beyond its server's sandbox, the human's answer (the client hears
progress while it waits), and, approved with more access, the instance that holds it and
what the call changed carried over to the host afterwards.

The checked path (:mod:`launcher.relay.checked`) hands a call here and gets it back through
:class:`Ends`: forwarded, or ended with its audit entry and the client's answer.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Protocol

from launcher.audit.log import hash_value
from launcher.relay.approving.approval import Outcome, Requester, asking_with
from launcher.relay.approving.grants import (
    CannotWiden,
    Grant,
    describe,
    instruction_paths,
    runs_on_host,
    steers_an_agent,
)
from launcher.relay.call import Call, ClientLink
from launcher.relay.gate.decide import denial_text, label
from launcher.relay.seams import Core, OneShot
from launcher.shared.jsonrpc import TOOL, Message, notification
from policy.decision import Decision
from policy.patterns import CallShape, Pattern, call_shape, offered

# While a human decides, a call with a progress token hears this often that it is alive.
KEEPALIVE_SECONDS = 10.0


class Ends(Protocol):
    """What the checked path does with an escalated call once it is decided."""

    def forward(self, call: Call) -> None: ...

    def end(
        self, call: Call, status: str, *, denial: str | None = None, failure: str | None = None
    ) -> None: ...

    def finish(self, call: Call, status: str) -> None: ...

    def answered(self, call: Call, outcome: Message | BaseException) -> None: ...


class Escalations:
    def __init__(self, core: Core, ends: Ends, link: ClientLink) -> None:
        self.core = core
        self.ends = ends
        self.send = link.send
        self.ask = link.ask
        self.client_elicits = link.elicits
        self._spawn = link.spawn
        self._waiting: dict[object, asyncio.Task[None]] = {}  # by the client's id
        self.keepalive = KEEPALIVE_SECONDS

    def start(self, call: Call, decision: Decision) -> None:
        """Put ``call`` to a human, in a task of its own (the relay goes on meanwhile)."""
        task = self._spawn(self._escalate(call, decision))
        # A task cancelled before its first step never runs: the call is audited all the same.
        task.add_done_callback(lambda done: self._unstarted(done, call))
        if isinstance(call.request_id, str | int):
            self._waiting[call.request_id] = task

    def _unstarted(self, task: asyncio.Task[None], call: Call) -> None:
        if task.cancelled() and not call.ended:
            self.ends.finish(call, "cancelled")
        if self._waiting.get(call.request_id) is task:
            del self._waiting[call.request_id]

    def cancel(self, request_id: str | int) -> None:
        """The client cancelled a call that waits for a human: no one is asked any more."""
        task = self._waiting.get(request_id)
        if task is not None:
            task.cancel()

    def rebind(self, old: object, new: object) -> None:
        """A waiting call's client id is now ``new`` (the retry it goes on as)."""
        waiting = self._waiting.pop(old, None)
        if waiting is not None:
            self._waiting[new] = waiting

    def carry_over(self, call: Call, outcome: Message | BaseException) -> None:
        """A widened call answered: in a task, its instance is stopped and what it changed
        carried over before the client is answered (:meth:`_carry_over`)."""
        assert call.one_shot is not None
        self._spawn(self._carry_over(call, call.one_shot, outcome))

    async def _escalate(self, call: Call, decision: Decision) -> None:
        assert call.server is not None
        named = label(call.method, call.name)
        ends = self.ends
        grants = self._grants_or_end(call, decision)
        if grants is None:
            return
        shape = self._shape(call, decision)
        token = call.progress_token()
        alive = self._spawn(self._keep_alive(call, token)) if token is not None else None
        try:
            outcome = await self.core.gate.approvals.decide(
                call.server,
                named,
                call.arguments,
                decision,
                self.client_elicits(call),
                asking_with(self.ask, call)
                if call.given is None
                else _given(call.given, call.asked),
                describe(call.server, grants) if grants else "",
                beyond_own=self._beyond_own(call, grants),
                shape=shape,
                offers=self._offers(shape),
            )
        except asyncio.CancelledError:
            ends.finish(call, "cancelled")  # by the client, or at stop
            raise
        except Exception as exc:  # never leave the client without an answer
            ends.end(call, "error", failure=f"ERROR: the approval failed: {exc}")
            return
        finally:
            if alive is not None:
                alive.cancel()
            if self._waiting.get(call.request_id) is asyncio.current_task():
                del self._waiting[call.request_id]
        await self._approved_or_not(call, decision, outcome, grants)

    def _grants_or_end(self, call: Call, decision: Decision) -> list[Grant] | None:
        """What approving would give the call; None when that cannot be worked out or would
        not take effect (the call is then answered, and no one asked)."""
        ends = self.ends
        try:
            return self._grants(call)
        except CannotWiden as exc:
            call.entry["escalation"] = "cannot-take-effect"
            text = (
                f"ESCALATION CANNOT TAKE EFFECT (rule: {decision.rule}): {decision.reason}; "
                f"no approval was asked, because {exc}"
            )
            ends.end(call, "denied", denial=text)
            return None
        except Exception as exc:  # whatever it was, no one is asked and the call is answered
            call.entry["escalation"] = "cannot-take-effect"
            text = f"ERROR: what an approval would give could not be worked out: {exc}"
            ends.end(call, "error", failure=text)
            return None

    async def _approved_or_not(
        self, call: Call, decision: Decision, outcome: Outcome, grants: list[Grant]
    ) -> None:
        """The call as its approval said: given its access and forwarded, or denied."""
        assert call.server is not None
        named = label(call.method, call.name)
        ends = self.ends
        call.entry["escalation"] = outcome.escalation
        if outcome.escalation == "approved-for-session":
            call.entry["whitelisted"] = {  # what later identical calls will match
                "server": call.server,
                "tool": named,
                "arguments": hash_value(call.arguments),
            }
        if outcome.pattern is not None:  # the pattern given, or the one that answered
            call.entry["pattern"] = outcome.pattern
        if outcome.approved and grants:
            try:
                for_session = outcome.escalation in ("approved-for-session", "session-whitelist")
                await self._widen(call, grants, for_session)
            except asyncio.CancelledError:
                ends.finish(call, "cancelled")
                raise
            except Exception as exc:
                text = f"ERROR: the approved call could not be given its access: {exc}"
                ends.end(call, "error", failure=text)
                return
        if outcome.approved:
            ends.forward(call)
            return
        text = (
            denial_text(decision)
            if outcome.escalation == "no-approval-channel"
            else f"ESCALATION DENIED (rule: {decision.rule}): {decision.reason}; "
            f"{outcome.detail or 'not approved'}"
        )
        ends.end(call, "denied", denial=text)

    def _beyond_own(self, call: Call, grants: list[Grant]) -> str:
        """A path the approved call would reach that a caller's own client may not give
        ('' when none): anything approving gives beyond the server's sandbox (even in a
        place of the caller's: one its server may only read is not the caller's to write),
        then any path the call names that is not the caller's own (a directory the server
        shares between callers is no caller's own). Without callers, nothing is asked of
        this."""
        if not self.core.gate.approvals.callers:
            return ""
        widened = next((g.path for g in grants if g.outside), "")
        if widened:
            return widened
        paths: list[str] = []
        if call.server is not None and call.name is not None:
            cwd = self.core.settings[call.server].cwd
            named = self.core.gate.paths(call.method, call.server, call.name, call.arguments, cwd)
            paths += [path for _, path in named]
        places = self.core.gate.places
        return places.beyond_own(paths) if places is not None else next(iter(paths), "")

    def _shape(self, call: Call, decision: Decision) -> CallShape | None:
        try:
            return self._judged_shape(call, decision)
        except Exception:  # what cannot be judged is asked, never answered by a pattern
            return None

    def _judged_shape(self, call: Call, decision: Decision) -> CallShape | None:
        """The call as pattern approvals judge it (None: a request no pattern answers: not
        a tool call, one of a tool with no annotation, or one naming a place host tools load
        or run (or a file in one), an agent's instruction file, or the home's settings and
        secrets: each such call is put to the human)."""
        if call.method != TOOL or call.server is None or call.name is None:
            return None
        engine = self.core.gate.engine
        annotation = engine.get_annotation(call.server, call.name)
        if annotation is None:
            return None
        cwd = self.core.settings[call.server].cwd
        shape = call_shape(call.server, call.name, decision.rule, annotation, call.arguments, cwd)
        if any(_loaded_or_steering(path) for path in shape.paths):
            return None
        return shape

    def _offers(self, shape: CallShape | None) -> list[Pattern]:
        """The patterns the question may offer: none whose directory is, or lies in, a
        protected place, a system directory, or (with callers) another caller's place."""
        if shape is None:
            return []
        structural = self.core.gate.engine.structural
        places = self.core.gate.places

        def refused(directory: str) -> str | None:
            if structural.protected_label(directory, removing=True):
                return "it is or holds a protected place"
            if structural.system_root(directory) is not None:
                return "it is in a system directory"
            if places is not None and places.others(directory):
                return "it is another caller's place"
            return None

        return offered(shape, refused)

    def _grants(self, call: Call) -> list[Grant]:
        """What an approval of ``call`` would have to give beyond its server's sandbox."""
        widen = self.core.widen
        if widen is None or call.method != TOOL or call.server is None:
            return []
        return widen.grants(call.server, call.name, call.arguments)

    async def _widen(self, call: Call, grants: list[Grant], for_session: bool) -> None:
        """Run the approved ``call`` in an instance that holds the grants: its own, or the
        one kept for the identical calls approved for the session."""
        assert self.core.widen is not None and call.server is not None
        call.entry["granted"] = [g.record() for g in grants if g.outside]
        keep = None
        era = call.conn.era if call.conn is not None else None  # the one its client has
        if for_session:
            named = label(call.method, call.name)
            keep = f"{call.server}\0{named}\0{hash_value(call.arguments)}\0{era}"
        one_shot = await self.core.widen.start(call.server, grants, keep, era)
        call.one_shot, call.conn = one_shot, one_shot.conn

    async def _keep_alive(self, call: Call, token: str | int) -> None:
        """Progress for a call waiting for a human, so a client that times requests out
        (and counts progress as life) keeps waiting; the server's own progress for it later
        is reported after these."""
        while True:
            await asyncio.sleep(self.keepalive)
            call.progress_sent += 1
            params = {
                "progressToken": token,
                "progress": call.progress_sent,
                "message": "waiting for a human to approve this call",
            }
            self.send(notification("notifications/progress", params), call.request_id)

    async def _carry_over(
        self, call: Call, one_shot: OneShot, outcome: Message | BaseException
    ) -> None:
        """A widened call answered: its instance is stopped, then what the call changed of
        the approved paths is carried over to the host (only when it succeeded), then the
        client is answered as for any call."""
        call.one_shot = None
        failure = None
        try:
            if not one_shot.kept:
                await one_shot.stop()
            succeeded = (
                isinstance(outcome, dict)
                and isinstance(outcome.get("result"), dict)
                and not outcome["result"].get("isError")
            )
            if succeeded:
                # The guard leaves the instruction files the call was approved to write to
                # the trusted process, then takes what it wrote as the user's.
                carried = self.core.widen.carried() if self.core.widen is not None else None
                paths = instruction_paths(one_shot.grants) if carried is not None else []
                if carried is not None:
                    carried.expect(paths)
                committed = False
                try:
                    # In a thread: a large file's copy must not hold the other calls up.
                    call.granted, failure = await asyncio.to_thread(one_shot.commit)
                    committed = failure is None
                finally:
                    # A failed carry-over wrote nothing of the user's: what appeared meanwhile
                    # is a sandbox's, checked as any other path.
                    if carried is not None:
                        carried.accept(paths, wrote=committed)
        except Exception as exc:  # whatever it was, the client is told and nothing more runs
            failure = f"the approved change could not be carried over: {exc}"
        finally:
            if one_shot.kept and failure is None:
                one_shot.release()
            else:
                await discard(one_shot)
        if failure is not None:
            self.ends.end(call, "error", failure=f"ERROR: {failure}")
            return
        self.ends.answered(call, outcome)


def _given(answer: Message, asked: str) -> Requester:
    """What the approval question is answered with when its answer came with the request:
    ``answer`` (the client gave it to a round another instance began, for this very
    request), once, and only to the question it was given to (``asked``: its digest): a
    question worded otherwise here (another rule, another grant) was never shown, and
    denies, as does a question after it."""
    left = [answer]

    async def asking(method: str, params: dict[str, Any], timeout: float) -> Message:
        if method != "elicitation/create" or not left:
            raise RuntimeError("the client's answer was given already")
        if hash_value({"method": method, "params": params}) != asked:
            raise RuntimeError("the client's answer was given to another question")
        return {"jsonrpc": "2.0", "id": 0, "result": left.pop()}

    return asking


def _loaded_or_steering(path: str) -> bool:
    """Whether ``path`` is, or lies in, a place host tools load or run (a file of
    ``.git/hooks``, of ``.claude``, of ``~/.ssh``...: the place itself or any directory
    holding it), is an agent instruction file, or lies in the home's dot-files and
    dot-directories (programs' settings and secrets: ``~/.aws``, ``~/.netrc``)."""
    parts = [p for p in path.split("/") if p]
    for n in range(len(parts), 0, -1):
        place = "/" + "/".join(parts[:n])
        if runs_on_host(place, n < len(parts) or os.path.isdir(place)) is not None:
            return True
    return steers_an_agent(path) or _in_home_settings(path)


def _in_home_settings(path: str) -> bool:
    """Whether ``path`` is a dot-file of the home, or lies in one of its dot-directories."""
    for home in {os.path.expanduser("~"), os.path.realpath(os.path.expanduser("~"))}:
        if home not in ("", "/") and path.startswith(home.rstrip("/") + "/"):
            return path[len(home.rstrip("/")) + 1 :].startswith(".")
    return False


async def discard(one_shot: OneShot) -> None:
    """Stop an instance for approved calls and remove what it was given."""
    try:
        await one_shot.stop()
    finally:
        one_shot.discard()
