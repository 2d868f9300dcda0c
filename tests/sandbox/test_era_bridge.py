"""The bridge between the eras, end to end: the ``mcp`` SDK's client in each era, over stdio
and ``--http``, through ``ironcurtain run`` to a server on the ``mcp`` SDK that serves the
stateless era alone (tests/servers/dual_server.py ``--stateless-only``, in its sandbox). The server
asks by its results; each client is asked in its own era, an approval first where the
policy escalates; the answers reach the server. (A handshake-era server's questions, to
clients of either era: tests/attacks/test_server_questions.py and
tests/sandbox/test_stateless_rounds.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.support.asking import ELICIT, SAMPLE, Human
from tests.support.audit import audit_entries
from tests.support.dual import dual_args
from tests.support.home import Home
from tests.support.http import TOKEN, serving
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN

pytestmark = needs_bwrap
ERA = "2026-07-28"


def _wire(params: Any) -> dict[str, Any]:
    wired: dict[str, Any] = params.model_dump(by_alias=True, exclude_none=True)
    return wired


@asynccontextmanager
async def client_of(
    user: Home, mode: str, transport: str, human: Human, args: list[str]
) -> AsyncIterator[Client]:
    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult.model_validate(
            human.answer({"method": ELICIT, "params": _wire(params)})
        )

    async def sample(context: Any, params: Any) -> types.CreateMessageResult:
        return types.CreateMessageResult.model_validate(
            human.answer({"method": SAMPLE, "params": _wire(params)})
        )

    callbacks: dict[str, Any] = {"elicitation_callback": elicit, "sampling_callback": sample}
    if transport == "stdio":
        target = StdioServerParameters(
            command=IRONCURTAIN, args=["run", *args], env=user.env, cwd=str(user.root)
        )
        async with Client(target, mode=mode, **callbacks) as client:
            yield client
        return
    with serving(user, *args) as served:
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            httpx2.AsyncClient(headers=bearer, timeout=30) as http,
            Client(
                streamable_http_client(served.url, http_client=http), mode=mode, **callbacks
            ) as client,
        ):
            yield client


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_a_stateless_servers_questions_reach_a_client_of_either_era(
    user: Home, mode: str, transport: str
) -> None:
    human = Human("approve")
    said: dict[str, tuple[bool, str]] = {}

    async def scenario() -> None:
        args = dual_args(user, "--stateless-only")
        async with client_of(user, mode, transport, human, args) as client:
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


@pytest.mark.parametrize(("settings", "era"), [({}, "2025-11-25"), ({"era": "stateless"}, ERA)])
def test_a_server_of_both_eras_is_opened_in_the_era_its_config_says(
    user: Home, settings: dict[str, str], era: str
) -> None:
    human = Human("approve")
    said: list[str] = []

    async def scenario() -> None:
        args = dual_args(user, **settings)
        async with client_of(user, "legacy", "stdio", human, args) as client:
            result = await client.call_tool("greet", {})
            said.append("\n".join(getattr(c, "text", "") for c in result.content))

    anyio.run(scenario)
    assert said == [f"hello Ada ({era})"]
    assert len(human.forms) == 1 and len(human.approval_questions) == 1
