"""A server of the stateless era asks by its result (``input_required``): ironcurtain answers
each question as it would the same request from a handshake-era server (the same checks,
the client asked in its own era), then sends the call again with the answers and the
server's state, which no client ever sees."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from launcher.relay.questions.input_bridge import MAX_ROUNDS
from launcher.relay.questions.rounds import APPROVAL
from launcher.relay.stateless.era import CAPABILITIES, VERSION
from launcher.shared.jsonrpc import Message
from tests.support.relay import Harness, build, run

STATE = "the server's own state: 7f3a"
FORM = {"message": "Your name?", "requestedSchema": {"type": "object", "properties": {}}}
ASKABLE = {VERSION: "2026-07-28", CAPABILITIES: {"elicitation": {"form": {}}, "sampling": {}}}


def asking_server(h: Harness, questions: Message, state: str | None = STATE) -> list[Message]:
    """The fake server speaks the stateless era and asks ``questions`` on a call's first
    round; answers the retry with what it got. The params of each call it gets."""
    h.fs.era = "stateless"
    h.fs.roots = ({"uri": f"file://{h.ws}", "name": "workspace"},)
    got: list[Message] = []

    def answer(method: str, params: Message) -> Message:
        got.append(params)
        if "inputResponses" not in params:
            asked: Message = {"resultType": "input_required", "inputRequests": questions}
            if state is not None:
                asked["requestState"] = state
            return {"result": asked}
        text = json.dumps(params["inputResponses"])
        return {"result": {"content": [{"type": "text", "text": text}], "resultType": "complete"}}

    h.fs.answer = answer
    return got


def inside(h: Harness) -> Message:
    return {"name": "read_file", "arguments": {"path": str(h.ws / "a.txt")}}


def test_a_handshake_client_is_asked_the_servers_question_as_a_request(tmp_path: Path) -> None:
    h = build(tmp_path)
    got = asking_server(h, {"who": {"method": "elicitation/create", "params": FORM}})

    async def work() -> None:
        answer = await h.request("tools/call", inside(h))
        assert answer is not None and json.loads(answer["result"]["content"][0]["text"]) == {
            "who": {"action": "accept", "content": {"answer": "approve"}}
        }
        assert "resultType" not in answer["result"]

    run(work)
    (asked,) = h.client.elicitations
    assert asked["params"]["message"] == "[server 'fs'] Your name?"  # marked as the server's
    assert h.client.related[h.client.sent.index(asked)] == 1  # on the call's own stream
    first, retried = got
    assert "inputResponses" not in first
    assert retried["requestState"] == STATE and retried["name"] == "read_file"
    assert STATE not in json.dumps(h.client.sent)
    kinds = [(e["method"], e.get("direction"), e["result"]) for e in h.entries()]
    assert kinds == [
        ("elicitation/create", "server-to-client", "success"),
        ("tools/call", None, "success"),
    ]


def test_a_stateless_client_is_asked_in_rounds_with_ironcurtains_state(tmp_path: Path) -> None:
    h = build(tmp_path, initialize=False)
    got = asking_server(h, {"who": {"method": "elicitation/create", "params": FORM}})
    call = {**inside(h), "_meta": ASKABLE}

    async def work() -> None:
        first = await h.request("tools/call", call)
        assert first is not None
        asked = first["result"]
        assert asked["resultType"] == "input_required"
        assert list(asked["inputRequests"]) == ["who"]  # the server's own key
        assert asked["inputRequests"]["who"]["params"]["message"].startswith("[server 'fs']")
        assert asked["requestState"] != STATE
        reply = {"who": {"action": "accept", "content": {"name": "Ada"}}}
        params = {**call, "inputResponses": reply, "requestState": asked["requestState"]}
        done = await h.request("tools/call", params)
        assert done is not None and done["result"]["resultType"] == "complete"
        said = json.loads(done["result"]["content"][0]["text"])
        assert said == {"who": {"action": "accept", "content": {"name": "Ada"}}}

    run(work)
    assert STATE not in json.dumps(h.client.sent)
    assert [p.get("requestState") for p in got] == [None, STATE]
    assert {e["era"] for e in h.entries()} == {"stateless"}


def test_roots_are_answered_with_the_sandbox_and_the_client_is_not_asked(tmp_path: Path) -> None:
    h = build(tmp_path)
    got = asking_server(h, {"r": {"method": "roots/list", "params": {}}}, state=None)

    async def work() -> None:
        answer = await h.request("tools/call", inside(h))
        assert answer is not None

    run(work)
    assert h.client.elicitations == []
    assert got[1]["inputResponses"] == {
        "r": {"roots": [{"uri": f"file://{h.ws}", "name": "workspace"}]}
    }
    assert "requestState" not in got[1]


def test_sampling_is_approved_by_a_human_first(tmp_path: Path) -> None:
    h = build(tmp_path)
    sampling: dict[str, object] = {
        "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]
    }
    sampling |= {"maxTokens": 5, "includeContext": "allServers"}
    h.feed(
        {
            "jsonrpc": "2.0",
            "id": "hello",
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"elicitation": {}, "sampling": {}},
            },
        }
    )
    got = asking_server(h, {"s": {"method": "sampling/createMessage", "params": sampling}})

    async def work() -> None:
        answer = await h.request("tools/call", inside(h))
        assert answer is not None and "sampled" in answer["result"]["content"][0]["text"]

    run(work)
    (approval,) = h.client.elicitations
    assert approval["params"]["message"].startswith(
        "ironcurtain: server 'fs' asks the user's model"
    )
    (sampled,) = [m for m in h.client.sent if m.get("method") == "sampling/createMessage"]
    assert sampled["params"]["includeContext"] == "none"
    assert len(got) == 2


@pytest.mark.parametrize(
    ("questions", "setting", "why"),
    [
        ({"q": {"method": "elicitation/create", "params": FORM}}, "deny", "client-requests"),
        ({"q": {"method": "tools/call", "params": {}}}, "allow", "method not found"),
        ({"q": "not a request"}, "allow", "not a map of requests"),
        ({f"q{i}": {"method": "roots/list"} for i in range(5)}, "allow", "5 questions at once"),
        (  # one that would be held, and asked again, at length
            {"q": {"method": "elicitation/create", "params": {**FORM, "message": "x" * 300_000}}},
            "allow",
            "more than 256 KiB",
        ),
    ],
)
def test_a_question_refused_ends_the_call_and_the_server_gets_no_answers(
    tmp_path: Path, questions: Message, setting: str, why: str
) -> None:
    h = build(tmp_path)
    settings = dict(h.relay.core.settings)
    settings["fs"] = dataclasses.replace(settings["fs"], elicitation=setting)
    h.relay.core.settings = settings
    got = asking_server(h, questions)

    async def work() -> None:
        answer = await h.request("tools/call", inside(h))
        assert answer is not None and answer["result"]["isError"] is True
        assert why in answer["result"]["content"][0]["text"]

    run(work)
    assert h.client.elicitations == []
    assert len(got) == 1  # never retried
    call = next(e for e in h.entries() if e["method"] == "tools/call")
    assert call["result"] == "error"


def test_a_server_that_keeps_asking_is_stopped(tmp_path: Path) -> None:
    h = build(tmp_path)
    h.fs.era = "stateless"
    calls: list[Any] = []

    def answer(method: str, params: Message) -> Message:
        calls.append(params)
        roots = {"r": {"method": "roots/list", "params": {}}}
        return {"result": {"resultType": "input_required", "inputRequests": roots}}

    h.fs.answer = answer

    async def work() -> None:
        done = await h.request("tools/call", inside(h))
        assert done is not None and "more than 10 times" in done["result"]["content"][0]["text"]

    run(work)
    assert len(calls) == MAX_ROUNDS + 1


def test_a_call_cancelled_while_its_servers_question_waits_is_withdrawn(tmp_path: Path) -> None:
    h = build(tmp_path, answer=None)  # the client does not answer
    asking_server(h, {"who": {"method": "elicitation/create", "params": FORM}})

    async def work() -> None:
        h.feed({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": inside(h)})
        await asyncio.sleep(0.05)
        assert len(h.client.elicitations) == 1
        cancel = {"requestId": 5, "reason": "no longer wanted"}
        h.feed({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
        await asyncio.sleep(0.05)

    run(work)
    withdrawn = [m for m in h.client.sent if m.get("method") == "notifications/cancelled"]
    assert len(withdrawn) == 1
    assert not [m for m in h.client.sent if m.get("id") == 5]  # no answer to a cancelled call
    results = {e["method"]: e["result"] for e in h.entries()}
    assert results == {"tools/call": "cancelled", "elicitation/create": "cancelled"}


def test_an_approval_and_a_servers_question_in_rounds_for_one_call(tmp_path: Path) -> None:
    # A stateless client, a stateless server: the escalated call's approval, then the
    # server's question, each its own round; one call reaches the server's tool twice.
    h = build(tmp_path, initialize=False)
    got = asking_server(h, {"who": {"method": "elicitation/create", "params": FORM}})
    private = {"name": "read_file", "arguments": {"path": str(h.ws / "private" / "x")}}
    call = {**private, "_meta": ASKABLE}

    async def work() -> None:
        first = await h.request("tools/call", call)
        assert first is not None and list(first["result"]["inputRequests"]) == [APPROVAL]
        approve = {APPROVAL: {"action": "accept", "content": {"answer": "approve"}}}
        second = await h.request(
            "tools/call",
            {**call, "inputResponses": approve, "requestState": first["result"]["requestState"]},
        )
        assert second is not None and list(second["result"]["inputRequests"]) == ["who"]
        reply = {"who": {"action": "decline"}}
        third = await h.request(
            "tools/call",
            {**call, "inputResponses": reply, "requestState": second["result"]["requestState"]},
        )
        assert third is not None
        assert json.loads(third["result"]["content"][0]["text"]) == {"who": {"action": "decline"}}

    run(work)
    assert [p.get("requestState") for p in got] == [None, STATE]
    call_entry = next(e for e in h.entries() if e["method"] == "tools/call")
    assert call_entry["escalation"] == "approved" and call_entry["result"] == "success"


def test_a_servers_questions_go_out_in_one_round_and_keys_stay_its_own(tmp_path: Path) -> None:
    # Two questions at once: one round with both. A server's key in ironcurtain's own
    # namespace is not taken as one of ironcurtain's.
    h = build(tmp_path, initialize=False)
    forged = {"method": "elicitation/create", "params": FORM}
    questions = {"a": {"method": "elicitation/create", "params": FORM}, APPROVAL: forged}
    got = asking_server(h, questions)
    call = {**inside(h), "_meta": ASKABLE}

    async def work() -> None:
        first = await h.request("tools/call", call)
        assert first is not None
        asked = first["result"]["inputRequests"]
        assert sorted(asked) == ["a", f"server/{APPROVAL}"]
        half = {"a": {"action": "accept", "content": {"name": "Ada"}}}
        state = first["result"]["requestState"]
        second = await h.request(
            "tools/call", {**call, "inputResponses": half, "requestState": state}
        )
        assert second is not None  # the one not answered is asked again, alone
        assert list(second["result"]["inputRequests"]) == [f"server/{APPROVAL}"]
        rest = {f"server/{APPROVAL}": {"action": "decline"}}
        state = second["result"]["requestState"]
        done = await h.request(
            "tools/call", {**call, "inputResponses": rest, "requestState": state}
        )
        assert done is not None and done["result"]["resultType"] == "complete"

    run(work)
    assert got[1]["inputResponses"] == {
        "a": {"action": "accept", "content": {"name": "Ada"}},
        APPROVAL: {"action": "decline"},
    }
