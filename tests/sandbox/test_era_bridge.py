"""The bridge between the eras, end to end: the ``mcp`` SDK's client in each era, over stdio
and ``--http``, through ``ironcurtain run`` to a server on the ``mcp`` SDK that serves the
stateless era alone (tests/servers/dual_server.py ``--stateless-only``, in its sandbox). The server
asks by its results; each client is asked in its own era, an approval first where the
policy escalates; the answers reach the server. (A handshake-era server's questions, to
clients of either era: tests/attacks/test_server_questions.py and
tests/sandbox/test_stateless_rounds.py.)"""

from __future__ import annotations

import anyio
import pytest

from tests.support.asking import ELICIT, SAMPLE, Human
from tests.support.audit import audit_entries
from tests.support.dual import dual_args
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.modes import client_in

pytestmark = needs_bwrap
ERA = "2026-07-28"


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_a_stateless_servers_questions_reach_a_client_of_either_era(
    user: Home, mode: str, transport: str
) -> None:
    human = Human("approve")
    said: dict[str, tuple[bool, str]] = {}

    async def scenario() -> None:
        args = dual_args(user, "--stateless-only")
        async with client_in(user, transport, args, mode, human) as client:
            for tool in ("greet", "haiku", "roots"):
                result = await client.call_tool(tool, {})
                text = "\n".join(getattr(c, "text", "") for c in result.content)
                said[tool] = (bool(result.is_error), text)

    anyio.run(scenario)
    # The server was spoken to in the stateless era, whatever the client's.
    assert said["greet"] == (False, "hello Ada (2026-07-28)")
    assert said["haiku"] == (False, "the model's answer (2026-07-28)")
    assert said["roots"][0] is False and said["roots"][1].endswith("(2026-07-28)")
    # The client was asked: the approval of greet, the server's form (as the server's),
    # the approval of its sampling request, then the model.
    assert len(human.approval_questions) == 2
    assert "greet on server 'dual'" in human.approval_questions[0]
    assert "asks the user's model" in human.approval_questions[1]
    (form,) = human.forms
    assert form["message"] == "[server 'dual'] Your name?"
    assert len(human.asked(SAMPLE)) == 1
    entries = audit_entries(user.root / "audit.jsonl")
    calls = [e for e in entries if e["method"] == "tools/call"]
    assert [(e["tool"], e["result"]) for e in calls] == [
        ("greet", "success"),
        ("haiku", "success"),
        ("roots", "success"),
    ]
    assert calls[0]["escalation"] == "approved"
    asked = [(e["method"], e["result"]) for e in entries if e.get("direction")]
    assert asked == [(ELICIT, "success"), (SAMPLE, "success")]
    expected = "stateless" if mode == "2026-07-28" else None
    assert {e.get("era") for e in entries} == {expected}


@pytest.mark.parametrize(
    ("settings", "era"),
    [({}, "2025-11-25"), ({"era": "handshake"}, "2025-11-25"), ({"era": "stateless"}, ERA)],
)
def test_a_server_of_both_eras_is_spoken_to_in_the_era_its_config_names(
    user: Home, settings: dict[str, str], era: str
) -> None:
    # Named, whatever the client's; unset, the client's (here of the handshake era; clients
    # of both: tests/sandbox/test_dual_era_clients.py).
    human = Human("approve")
    said: list[str] = []

    async def scenario() -> None:
        args = dual_args(user, era=settings.get("era"))
        async with client_in(user, "stdio", args, "legacy", human) as client:
            result = await client.call_tool("greet", {})
            said.append("\n".join(getattr(c, "text", "") for c in result.content))

    anyio.run(scenario)
    assert said == [f"hello Ada ({era})"]
    assert len(human.forms) == 1 and len(human.approval_questions) == 1
