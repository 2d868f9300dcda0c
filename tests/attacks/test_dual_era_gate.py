"""As the agent, through a client of the stateless era: a server of both eras is then spoken
to in that era, in an instance of its own opened for it, and that instance is behind the
same gate. A call the policy denies is denied and never reaches the server, a call the
policy escalates waits for the human and a denied one never runs, and both are audited as
the stateless client's, as they would be in the handshake era. (The control: the same
call, allowed, reaches the server in the stateless era, so the gate is what stopped it.)"""

from __future__ import annotations

from typing import Any

import anyio

from launcher.relay.approving.approval import DENY
from tests.support.asking import SAMPLE, Human
from tests.support.audit import audit_entries
from tests.support.dual import dual_args
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.modes import STATELESS, client_in

pytestmark = needs_bwrap
NO_HAIKU = {"name": "no-haiku", "if": {"tool": ["haiku"]}, "then": "deny", "reason": "no verse"}


def calls(user: Home, human: Human, rules: list[dict[str, Any]]) -> list[tuple[bool, str]]:
    """A stateless client on stdio calls ``haiku``, then ``greet`` (escalated)."""
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with client_in(user, "stdio", dual_args(user, rules=rules), STATELESS, human) as c:
            for tool in ("haiku", "greet"):
                result = await c.call_tool(tool, {})
                text = "\n".join(getattr(x, "text", "") for x in result.content)
                out.append((bool(result.is_error), text))

    anyio.run(scenario)
    return out


def test_the_gate_decides_every_call_in_the_stateless_era_too(user: Home) -> None:
    human = Human(DENY)  # the approval of greet: denied
    (haiku, greet) = calls(user, human, [NO_HAIKU])
    assert haiku[0] and haiku[1].startswith("DENIED")
    assert "no verse" in haiku[1]
    assert greet[0] and "2026-07-28" not in greet[1]
    # The server asked nothing: neither call reached it (haiku would sample the model,
    # greet would ask the user's name).
    assert human.asked(SAMPLE) == [] and human.forms == []
    assert len(human.approval_questions) == 1
    assert "greet on server 'dual'" in human.approval_questions[0]
    entries = audit_entries(user.root / "audit.jsonl")
    done = [(e["tool"], e["result"], e.get("era")) for e in entries if e["method"] == "tools/call"]
    assert done == [("haiku", "denied", "stateless"), ("greet", "denied", "stateless")]


def test_control_allowed_the_same_calls_reach_the_server_in_the_stateless_era(
    user: Home,
) -> None:
    human = Human()  # approves
    (haiku, greet) = calls(user, human, [])
    assert haiku == (False, f"the model's answer ({STATELESS})")
    assert greet == (False, f"hello Ada ({STATELESS})")
    assert len(human.asked(SAMPLE)) == 1 and len(human.forms) == 1
