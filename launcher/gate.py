"""The one gate every request that reaches a server passes: one decision, strictest wins.

In order: the policy engine (by method: a tool call, a prompt, a resource read, a
completion), the tool pins (a tool that changed since it was pinned is escalated), the
circuit breaker (the same request too often is denied) and the audit log's health (no
request while it cannot be written). An escalation is then put to a human through the
approvals; nothing else waits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from launcher.approval import Approvals, Outcome, Requester
from launcher.audit import AuditLog, argument_hashes
from launcher.breaker import CircuitBreaker
from launcher.jsonrpc import Message
from launcher.pins import Pins
from policy import Decision, PolicyEngine

TOOL, PROMPT, READ = "tools/call", "prompts/get", "resources/read"
SUBSCRIBE, UNSUBSCRIBE = "resources/subscribe", "resources/unsubscribe"
COMPLETE = "completion/complete"
# The methods whose requests name a resource by its URI, decided as a read of it.
BY_URI = (READ, SUBSCRIBE, UNSUBSCRIBE)

_TEMPLATE_VARIABLE = re.compile(r"\{([+#./;?&]?)([^}]*)\}")


@dataclass(frozen=True, slots=True)
class Checked:
    """What the gate made of a request: the decision, and the arguments to forward."""

    decision: Decision
    arguments: dict[str, object]  # canonical: what the server gets, what the audit hashes
    hashes: dict[str, str]


def expand_template(uri_template: str, variable: str, value: str) -> str:
    """A URI template with one variable given (the one being completed), the others empty.

    >>> expand_template("file:///{path}", "path", "etc/pa")
    'file:///etc/pa'
    >>> expand_template("db://{table}/{+id}", "id", "7")
    'db:///7'
    """
    return _TEMPLATE_VARIABLE.sub(
        lambda m: value if m.group(2).split(":")[0].rstrip("*") == variable else "", uri_template
    )


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
    ) -> None:
        self.engine = engine
        self.breaker = breaker
        self.audit = audit
        self.approvals = approvals
        self.pins_dir = pins_dir
        self.accept_tool_changes = accept_tool_changes
        self.say = say
        self.changed_tools: dict[str, dict[str, str]] = {}
        self._pins: dict[str, Pins] = {}
        self.pinning = True

    # -- the decision ----------------------------------------------------------------------

    def check(
        self, method: str, server: str | None, name: str, args: Mapping[str, object], cwd: str
    ) -> Checked:
        """Decide one request. ``server`` is None when no server offers ``name``; ``args``
        are the client's (a resource's ``{"uri"}``; a completion's ``{argument: value}``
        with ``name`` the prompt or URI template completed)."""
        decision, forward = self._policy(method, server, name, args, cwd)
        if method == TOOL and decision.decision == "allow" and server is not None:
            changed = self.changed_tools.get(server, {}).get(name)
            if changed:
                decision = Decision(
                    "escalate",
                    "tool-changed",
                    f"the tool is {changed} since its description and schema were pinned; "
                    "a human must approve its calls",
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
        return Checked(decision, forward, hashes)

    def _policy(
        self, method: str, server: str | None, name: str, args: Mapping[str, object], cwd: str
    ) -> tuple[Decision, dict[str, object]]:
        engine = self.engine
        if method == TOOL:
            return engine.decide(server or "", name, args, cwd=cwd)
        if method == PROMPT:
            if server is None:
                return _unknown("prompt", name), dict(args)
            return engine.decide_prompt(server, name, args, cwd=cwd)
        if method in BY_URI:
            uri = str(args.get("uri"))
            if server is None:
                return _unknown("resource", uri), dict(args)
            decision, forward_uri = engine.decide_resource_read(server, uri, cwd)
            return decision, {"uri": forward_uri}
        if method == COMPLETE:
            return self._completion(server, name, args, cwd)
        return Decision("deny", "unknown-method", f"{method} is not relayed"), dict(args)

    def _completion(
        self, server: str | None, name: str, args: Mapping[str, object], cwd: str
    ) -> tuple[Decision, dict[str, object]]:
        """A completion reveals what the server would do with the value typed so far: it is
        decided as that request would be (the prompt with this argument; a read of the
        resource the template names with this value), and never asked of a human."""
        if server is None:
            return _unknown("prompt or resource template", name), dict(args)
        (variable, value), *_ = list(args.items()) or [("", "")]
        if name.startswith("ref/prompt "):
            prompt = name.removeprefix("ref/prompt ")
            decision, forward = self.engine.decide_prompt(server, prompt, args, cwd=cwd)
        else:
            uri = expand_template(name.removeprefix("ref/resource "), variable, str(value))
            decision, _ = self.engine.decide_resource_read(server, uri, cwd)
            forward = dict(args)
        if decision.decision == "escalate":
            decision = Decision(
                "deny",
                decision.rule,
                f"{decision.reason} (a completion is never put to a human)",
            )
        return decision, forward

    async def approve(
        self,
        server: str,
        label: str,
        arguments: dict[str, object],
        decision: Decision,
        client_elicits: bool,
        ask: Requester,
    ) -> Outcome:
        """Put an escalated request to a human (or find it approved for the session)."""
        return await self.approvals.decide(server, label, arguments, decision, client_elicits, ask)

    # -- tool pins -------------------------------------------------------------------------

    def pin(self, server: str, tools: list[Message], at_start: bool) -> None:
        """Compare a server's tools with their pins (pinning them the first time, or when
        the user accepts changes); tools that differ are escalated from now on."""
        if not self.pinning:
            return
        pins = self._pins.get(server) or Pins.load(self.pins_dir, server)
        self._pins[server] = pins
        if at_start and (not pins.existed or self.accept_tool_changes):
            try:
                pins.save(tools)
            except OSError as exc:
                self.say(f"warning: cannot pin tools of '{server}': {exc}")
            self.changed_tools[server] = {}
            return
        changed = pins.changed(tools)
        self.changed_tools[server] = changed
        if changed:
            listing = ", ".join(f"{name} ({kind})" for name, kind in sorted(changed.items()))
            self.say(
                f"server '{server}' has tools that differ from their pins, "
                f"escalated until accepted (run --accept-tool-changes): {listing}"
            )


def _unknown(kind: str, name: str) -> Decision:
    return Decision("deny", "not-found", f"{kind} not found: no server offers {name!r}")
