"""The one gate every request that reaches a server passes: one decision, strictest wins.

In order: the caller's permissions (a caller without what ``permissions.json`` requires of
a tool or prompt is refused, and nothing else is asked), the policy engine (by method: a
tool call, a prompt, a resource read, a completion), the credentials in the arguments of a
tool call, prompt or resource read (escalated: :mod:`policy.argument_scan`), the tool pins
(a tool that changed since it was pinned is escalated), the circuit breaker (the same
request too often is denied) and the audit log's health (no request while it cannot be
written). An escalation is then put to a human through the approvals; nothing else waits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from launcher.audit.log import AuditLog, argument_hashes
from launcher.relay.gate.breaker import CircuitBreaker
from launcher.relay.gate.caller_places import CallerPlaces
from launcher.relay.gate.pins import Pins
from launcher.relay.router import Router
from launcher.shared.caller_identity import Caller
from launcher.shared.jsonrpc import BY_URI, COMPLETE, PROMPT, READ, TOOL, Message
from launcher.shared.user_errors import Names, by_field
from policy.access import NOT_PERMITTED, caller_access
from policy.argument_scan import ArgumentScan, Finding, escalated, scan_arguments
from policy.compiled import PATH_ROLES
from policy.decision import Decision
from policy.engine import PolicyEngine
from policy.models import Annotation
from policy.paths import canonical_path, iter_strings
from policy.prepare import prepare_tool_args
from policy.urls import file_uri_path
from sandbox_profiles.records import frozen

if TYPE_CHECKING:  # the approvals (asyncio) load with the session, not with its plan
    from launcher.relay.approving.approval import Approvals


_SHOWN_KEPT = 256  # filtered listings kept per router build (distinct sets of permissions)
_TEMPLATE_VARIABLE = re.compile(r"\{([+#./;?&]?)([^}]*)\}")
_URI_SPECIAL = re.compile(r"[?#%\x00-\x1f\x7f]")
SCANNED = frozenset({TOOL, PROMPT, READ})  # the requests whose arguments are scanned


@frozen(slots=True)
class Checked:
    """What the gate made of a request: the decision, and the arguments to forward."""

    decision: Decision
    arguments: dict[str, object]  # canonical: what the server gets, what the audit hashes
    hashes: dict[str, str]
    # The permissions the caller lacked (for the audit entry only: never told the client).
    missing: tuple[str, ...] = ()
    # The credentials found in the arguments (where and by what, never the value).
    secrets: tuple[Finding, ...] = ()


def expand_template(uri_template: str, values: Mapping[str, object]) -> str:
    """A URI template with the variables ``values`` gives; the others empty.

    >>> expand_template("file:///{path}", {"path": "etc/pa"})
    'file:///etc/pa'
    >>> expand_template("db://{table}/{+id}", {"id": "7"})
    'db:///7'
    """
    return _TEMPLATE_VARIABLE.sub(
        lambda m: str(values.get(m.group(2).split(":")[0].rstrip("*"), "")), uri_template
    )


def denial_text(decision: Decision) -> str:
    """What the client is told when a request is not made; the first word is the contract."""
    if decision.decision == "escalate":
        return (
            f"ESCALATION REQUIRED (rule: {decision.rule}): {decision.reason}. "
            "No approval channel is available in this session, so the call was not made."
        )
    return f"DENIED (rule: {decision.rule}): {decision.reason}"


class Gate:
    def __init__(
        self,
        engine: PolicyEngine,
        breaker: CircuitBreaker,
        audit: AuditLog,
        approvals: Approvals,
        pins_dir: str,
        accept_tool_changes: bool = False,
        say: Callable[[str], None] = print,
        names: Names = by_field,
        scans: Mapping[str, ArgumentScan] | None = None,
    ) -> None:
        """``say``: a line for the person running the session; ``names``: how that person
        calls a setting (the command layer's words for it); ``scans``: what each server's
        arguments are scanned for (a server absent: not scanned)."""
        self.engine = engine
        self.breaker = breaker
        self.audit = audit
        self.approvals = approvals
        self.pins_dir = pins_dir
        self.accept_tool_changes = accept_tool_changes
        self.say = say
        self.names = names
        self.scans = dict(scans or {})
        # Per server, the tools and prompts (by method and name) that differ from their pins.
        self.changed: dict[str, dict[tuple[str, str], str]] = {}
        self._pins: dict[str, Pins] = {}
        # In a session whose places are each caller's: the places of the caller served.
        self.places: CallerPlaces | None = None

    # -- the decision ----------------------------------------------------------------------

    def check(
        self,
        method: str,
        server: str | None,
        name: str,
        args: Mapping[str, object],
        cwd: str,
        caller: Caller | None = None,
    ) -> Checked:
        """Decide one request. ``server`` is None when no server offers ``name``; ``args``
        are the client's (a resource's ``{"uri"}``; a completion's ``{argument: value}``
        with ``name`` the prompt or URI template completed); ``caller``: who asks (None: no
        caller source, one local user)."""
        held = caller.permissions if caller is not None else None
        access = caller_access(self.engine.permissions, method, server, name, held)
        if not access.permitted:
            forward = dict(args)
            found = self.secrets(method, server, forward)  # kept out of the audit even so
            return Checked(NOT_PERMITTED, forward, argument_hashes(forward), access.missing, found)
        who = caller.name if caller is not None else None
        decision, forward = self._policy(method, server, name, args, cwd, who)
        if decision.decision != "deny" and server is not None:
            decision = self._theirs(method, server, name, args, cwd) or decision
        found = self.secrets(method, server, forward)
        decision = escalated(found, decision)
        changed = self.changed.get(server, {}).get((method, name)) if server else None
        if changed and decision.decision != "deny":
            what = "tool" if method == TOOL else "prompt"
            also = (
                f"; and {decision.rule}: {decision.reason}" if decision.decision != "allow" else ""
            )
            decision = Decision(
                "escalate",
                f"{what}-changed",
                f"the {what} is {changed} since it was pinned; a human must approve its "
                f"calls{also}",
            )
        hashes = argument_hashes(forward)
        if (
            decision.decision != "deny"
            and server is not None
            and not self.breaker.allow(server, f"{method} {name}", hashes)
        ):
            decision = Decision(
                "deny",
                "circuit-breaker",
                f"the same request was made {self.breaker.limit} times within "
                f"{self.breaker.window:g} s; it is refused until that slows down",
            )
        if not self.audit.check():
            decision = Decision(
                "deny",
                "audit-log-unwritable",
                f"the audit log cannot be written ({self.audit.error}), so no call is allowed",
            )
        return Checked(decision, forward, hashes, secrets=found)

    def secrets(
        self, method: str, server: str | None, forward: Mapping[str, object]
    ) -> tuple[Finding, ...]:
        """The credentials in a request's arguments, as they go to the server (none when
        its method is not scanned or its server's config turns the scan off)."""
        scan = self.scans.get(server) if server is not None and method in SCANNED else None
        return scan_arguments(forward, scan) if scan is not None else ()

    def _theirs(
        self, method: str, server: str, name: str, args: Mapping[str, object], cwd: str
    ) -> Decision | None:
        """A request naming a path in another caller's place (or holding them all) is
        denied, never put to a human: no approval reaches another caller's files."""
        if self.places is None:
            return None
        for argument, path in self.paths(method, server, name, args, cwd):
            if self.places.others(path):
                return Decision(
                    "deny",
                    "another-callers-place",
                    f"argument '{argument}' names a place of another caller's (or the "
                    "directory that holds every caller's); no approval reaches it",
                )
        return None

    def paths(
        self, method: str, server: str, name: str, args: Mapping[str, object], cwd: str
    ) -> list[tuple[str, str]]:
        """The paths a request names as the policy reads them (absolute, links resolved),
        each with the argument naming it: a tool's or a prompt's by their annotated roles,
        a resource's ``file://`` URI."""
        if method in BY_URI:
            uri = str(args.get("uri", ""))
            path = file_uri_path(uri) if uri[:5].lower() == "file:" else None
            return [("uri", canonical_path(path, cwd))] if path is not None else []
        annotation: Annotation | None = None
        if method == TOOL:
            annotation = self.engine.get_annotation(server, name)
        elif method == PROMPT:
            annotation = self.engine.get_prompt_annotation(server, name)
        if annotation is None:
            return []
        _, for_policy = prepare_tool_args(args, annotation, cwd)
        return [
            (argument, path)
            for argument, roles in annotation.args.items()
            if set(roles) & PATH_ROLES
            for path in iter_strings(for_policy.get(argument))
        ]

    def missing(self, method: str, server: str, name: str, caller: Caller) -> list[str]:
        """What ``caller`` lacks of what ``permissions.json`` requires for a request (a
        completion of a prompt's argument needs what the prompt needs: it reveals it)."""
        permissions = self.engine.permissions
        return list(caller_access(permissions, method, server, name, caller.permissions).missing)

    def _policy(
        self,
        method: str,
        server: str | None,
        name: str,
        args: Mapping[str, object],
        cwd: str,
        caller: str | None,
    ) -> tuple[Decision, dict[str, object]]:
        engine = self.engine
        if method == TOOL:
            return engine.decide(server or "", name, args, cwd=cwd, caller=caller)
        if method == PROMPT:
            if server is None:
                return _unknown("prompt", name), dict(args)
            return engine.decide_prompt(server, name, args, cwd=cwd, caller=caller)
        if method in BY_URI:
            uri = str(args.get("uri"))
            if server is None:
                return _unknown("resource", uri), dict(args)
            decision, forward_uri = engine.decide_resource_read(server, uri, cwd, caller=caller)
            return decision, {"uri": forward_uri}
        if method == COMPLETE:
            return self._completion(server, name, args, cwd, caller)
        return Decision("deny", "unknown-method", f"{method} is not relayed"), dict(args)

    def _completion(
        self,
        server: str | None,
        name: str,
        args: Mapping[str, object],
        cwd: str,
        caller: str | None,
    ) -> tuple[Decision, dict[str, object]]:
        """A completion reveals what the server would do with the value typed so far: it is
        decided as that request would be (the prompt with this argument and its context; a
        read of the resource the template names with these values), and never asked of a
        human. ``args``: the completed argument, then the context's."""
        if server is None:
            return _unknown("prompt or resource template", name), dict(args)
        if name.startswith("ref/prompt "):
            prompt = name.removeprefix("ref/prompt ")
            decision, forward = self.engine.decide_prompt(
                server, prompt, args, cwd=cwd, caller=caller
            )
        elif any(_URI_SPECIAL.search(str(v)) for v in args.values()):
            # Parsed as a URI, the value would be judged on less than the server gets.
            refused = "a value completed into a URI template may not hold ?, #, % or controls"
            return Decision("deny", "completion-value-shape", refused), dict(args)
        else:
            uri = expand_template(name.removeprefix("ref/resource "), args)
            decision, _ = self.engine.decide_resource_read(server, uri, cwd, caller=caller)
            forward = dict(args)
        if decision.decision == "escalate":
            decision = Decision(
                "deny",
                decision.rule,
                f"{decision.reason} (a completion is never put to a human)",
            )
        return decision, forward

    def listed(self, method: str, router: Router, caller: Caller | None) -> list[Message]:
        """The tools (``method`` ``tools/list``) or prompts (``prompts/list``) ``caller`` is
        shown: those ``permissions.json`` lets it call (what the policy would deny is
        still listed). Kept per router build and set of permissions."""
        tools = method == "tools/list"
        exposed = router.exposed_tools if tools else router.exposed_prompts
        permissions = self.engine.permissions
        if caller is None or not permissions:
            return exposed
        key = (tools, caller.permissions)
        shown = router.shown.get(key)
        if shown is None:
            routes, called = (router.tools, TOOL) if tools else (router.prompts, PROMPT)
            shown = []
            for item in exposed:
                # By the route a call of this name takes (what the gate then checks).
                route = routes.get(str(item.get("name")))
                if (
                    route
                    and caller_access(permissions, called, *route, caller.permissions).permitted
                ):
                    shown.append(item)
            if len(router.shown) >= _SHOWN_KEPT:
                router.shown.clear()
            router.shown[key] = shown
        return shown

    # -- pins ------------------------------------------------------------------------------

    def pin(
        self, server: str, tools: list[Message], prompts: list[Message], at_start: bool
    ) -> None:
        """Compare a server's tools and prompts with their pins (pinning them the first
        time, or when the user accepts changes); those that differ are escalated from now
        on, and what was approved for the session for them no longer counts."""
        pins = self._pins.get(server) or Pins.load(self.pins_dir, server)
        self._pins[server] = pins
        fresh = not pins.existed or self.accept_tool_changes
        if at_start and (fresh or pins.prompts is None):
            try:
                # A pins file from before prompts were pinned keeps its tools' pins.
                pins.save(tools if fresh else _pinned_only(tools, pins), prompts)
            except OSError as exc:
                self.say(f"warning: cannot pin the tools of '{server}': {exc}")
        changed = {
            **{(TOOL, name): kind for name, kind in pins.changed(tools).items()},
            **{(PROMPT, name): kind for name, kind in pins.changed(prompts, "prompts").items()},
        }
        self.changed[server] = changed
        if changed:
            for method, name in changed:
                self.approvals.forget(server, label(method, name))
            listing = ", ".join(
                f"{'prompt ' if method == PROMPT else ''}{name} ({kind})"
                for (method, name), kind in sorted(changed.items())
            )
            self.say(
                f"server '{server}' has tools or prompts that differ from their pins, "
                "escalated until accepted (start the session with "
                f"{self.names('accept_tool_changes')}): {listing}"
            )


def label(method: str, name: str) -> str:
    """How an escalated request is named to the human, and in the session's approvals."""
    return name if method == TOOL else f"{method} {name}"


def _pinned_only(tools: list[Message], pins: Pins) -> list[Message]:
    """The tools as pinned: a changed or new one keeps its old pin (or none)."""
    same = set(pins.pinned) - set(pins.changed(tools))
    return [t for t in tools if str(t.get("name", "")) in same]


def _unknown(kind: str, name: str) -> Decision:
    return Decision("deny", "not-found", f"{kind} not found: no server offers {name!r}")
