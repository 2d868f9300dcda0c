"""Escalations asked of a human (SPEC §8).

An escalated call waits (alone: other calls go on) for an answer from an approval channel:
MCP elicitation to the upstream client when it declared the capability. No channel, no
answer within ``--approval-timeout``, or anything but an approval means deny. An approval
is bound to the exact server, tool and argument hash of the call that asked and is used by
that call alone; "approve for this session" records a narrow entry (same server, tool and
canonical arguments) that later identical calls match without asking again.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from launcher.audit import hash_value
from policy import Decision

MODES = ("auto", "elicit", "deny")
APPROVE, APPROVE_SESSION, DENY = "approve", "approve for this session", "deny"

Requester = Callable[[str, dict[str, Any], float], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class Outcome:
    approved: bool
    escalation: str  # what the audit log records
    detail: str = ""  # for the client when denied


@dataclass
class Approvals:
    mode: str
    timeout: float
    # (server, tool, argument hash) that the user approved for the rest of the session.
    session_whitelist: set[tuple[str, str, str]] = field(default_factory=set)

    def channel(self, client_elicits: bool) -> str | None:
        if self.mode in ("auto", "elicit") and client_elicits:
            return "elicit"
        return None

    async def decide(
        self,
        server: str,
        tool: str,
        arguments: dict[str, object],
        decision: Decision,
        client_elicits: bool,
        ask: Requester,
    ) -> Outcome:
        key = (server, tool, hash_value(arguments))
        if key in self.session_whitelist:
            return Outcome(True, "session-whitelist")
        if self.channel(client_elicits) is None:
            return Outcome(False, "no-approval-channel")
        params = {
            "mode": "form",
            "message": approval_message(server, tool, arguments, decision),
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "answer": {
                        "type": "string",
                        "title": "Allow this call?",
                        "enum": [APPROVE, APPROVE_SESSION, DENY],
                    }
                },
                "required": ["answer"],
            },
        }
        try:
            reply = await ask("elicitation/create", params, self.timeout)
        except TimeoutError:
            return Outcome(False, "timeout", f"no answer within {self.timeout:g} s")
        except Exception as exc:  # a failed channel is a deny, with the reason
            return Outcome(False, "channel-failed", str(exc))
        result = reply.get("result") if isinstance(reply.get("result"), dict) else {}
        assert isinstance(result, dict)
        content = result.get("content") if isinstance(result.get("content"), dict) else {}
        assert isinstance(content, dict)
        answer = content.get("answer") if result.get("action") == "accept" else None
        if answer == APPROVE:
            return Outcome(True, "approved")
        if answer == APPROVE_SESSION:
            self.session_whitelist.add(key)
            return Outcome(True, "approved-for-session")
        action = result.get("action") or ("error" if "error" in reply else "?")
        return Outcome(False, "denied", f"the user answered {answer or action}")


def approval_message(
    server: str, tool: str, arguments: dict[str, object], decision: Decision
) -> str:
    """What the human sees: which call, why it needs them, the exact (canonical) arguments."""
    shown = json.dumps(arguments, indent=2, ensure_ascii=False, sort_keys=True)
    return (
        f"ironcurtain: the agent wants to call {tool} on server '{server}'.\n"
        f"Policy rule {decision.rule}: {decision.reason}.\n"
        f"Arguments (as the server would get them):\n{shown}"
    )
