"""Questions to a client of the stateless era, end to end: the ``mcp`` SDK's own client pinned
to 2026-07-28, over stdio and over ``--http``, through ``ironcurtain run`` to handshake-era
servers in their sandboxes. ironcurtain's approvals and a server's own questions
(elicitation, sampling) reach it as ``input_required`` answers; its callbacks answer them
and its retries carry the calls on, under the same checks as for a client of the handshake
era."""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp.types as types
import pytest

from tests.support.asking import ELICIT, SAMPLE, Human, asking_args
from tests.support.audit import audit_entries
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.modes import client_in
from tests.support.probe import probe_calls, probe_session

pytestmark = needs_bwrap
ERA = "2026-07-28"


def _text(result: types.CallToolResult) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_an_approval_is_asked_and_answered_in_rounds(user: Home, transport: str) -> None:
    ask = {"name": "ask-before-env", "if": {"tool": ["env_value"]}, "then": "escalate"}
    args, ws, audit = probe_session(user, first=[{**ask, "reason": "needs a human"}])
    human = Human("approve", "deny")
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with client_in(user, transport, args, ERA, human) as client:
            assert client.protocol_version == ERA
            for name in ("HOME", "LANG"):
                result = await client.call_tool("probe__env_value", {"name": name})
                out.append((bool(result.is_error), _text(result)))

    anyio.run(scenario)
    assert out[0] == (False, "/tmp/home")
    assert out[1][0] and out[1][1].startswith("ESCALATION DENIED (rule: ask-before-env)")
    assert len(human.approval_questions) == 2
    assert "env_value on server 'probe'" in human.approval_questions[0]
    assert [c["name"] for c in probe_calls(ws) if c["tool"] == "env_value"] == ["HOME"]
    entries = audit_entries(audit)
    assert [e["escalation"] for e in entries] == ["approved", "denied"]
    assert {e["era"] for e in entries} == {"stateless"}


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_servers_questions_are_asked_and_answered_in_rounds(user: Home, transport: str) -> None:
    form = {"message": "Your name?", "requestedSchema": {"type": "object", "properties": {}}}
    sampling = {
        "messages": [{"role": "user", "content": {"type": "text", "text": "Say hi"}}],
        "maxTokens": 10,
        "includeContext": "allServers",
    }
    human = Human()
    got: list[Any] = []

    async def scenario() -> None:
        async with client_in(user, transport, asking_args(user), ERA, human) as client:
            for method, params in ((ELICIT, form), (SAMPLE, sampling)):
                result = await client.call_tool("ask", {"method": method, "params": params})
                got.append(json.loads(_text(result)))

    anyio.run(scenario)
    # The server got the client's answers, as the client gave them.
    assert got[0] == {"result": {"action": "accept", "content": {"name": "Ada"}}}
    assert got[1]["result"]["content"]["text"] == "the model's answer"
    # The client was shown the server's form as the server's, and asked a human before its
    # model answered the server's prompt.
    (shown,) = human.forms
    assert shown["message"] == "[server 'asker'] Your name?"
    (approval,) = human.approval_questions
    assert "asks the user's model" in approval
    (sampled,) = human.asked(SAMPLE)
    assert sampled["includeContext"] == "none"
    entries = audit_entries(user.root / "audit.jsonl")
    asked = [e for e in entries if e.get("direction") == "server-to-client"]
    assert [(e["method"], e["result"]) for e in asked] == [(ELICIT, "success"), (SAMPLE, "success")]
    assert {e["era"] for e in asked} == {"stateless"}
