"""Questions to a client of the stateless era through the relay core, asked as that era asks
(multi round-trip requests): an approval, and a server's own question, reach the client as
the answer ``input_required`` to the request they are asked during; the retry with the
answer carries the call on. The state handed out is ironcurtain's: bound to the call it was
given for, single use, refused when altered."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from launcher.relay.questions.rounds import APPROVAL, QUESTION
from launcher.relay.stateless.era import CAPABILITIES, VERSION
from launcher.shared.jsonrpc import Message
from tests.support.relay import Harness, build, run

ASKABLE = {VERSION: "2026-07-28", CAPABILITIES: {"elicitation": {"form": {}}, "sampling": {}}}
FORM = {"message": "Your name?", "requestedSchema": {"type": "object", "properties": {}}}


def stateless(tmp_path: Path, **options: Any) -> Harness:
    return build(tmp_path, initialize=False, **options)


def modern(params: Message, meta: Message = ASKABLE) -> Message:
    return {**params, "_meta": dict(meta)}


def private(h: Harness, name: str = "x") -> Message:
    """A call the policy escalates (a read under the workspace's private/)."""
    return {"name": "read_file", "arguments": {"path": str(h.ws / "private" / name)}}


def retry(params: Message, asked: Message, responses: Message) -> Message:
    """The client's retry of ``params`` after ``asked`` (an input_required result)."""
    return {**params, "inputResponses": responses, "requestState": asked["requestState"]}


def approval(answer: str) -> Message:
    return {APPROVAL: {"action": "accept", "content": {"answer": answer}}}


def test_an_approval_is_asked_as_the_answer_and_the_retry_makes_the_call(tmp_path: Path) -> None:
    h = stateless(tmp_path)
    call = modern(private(h))

    async def work() -> None:
        first = await h.request("tools/call", call)
        assert first is not None
        asked = first["result"]
        assert asked["resultType"] == "input_required"
        (question,) = asked["inputRequests"].items()
        assert question[0] == APPROVAL and question[1]["method"] == "elicitation/create"
        assert question[1]["params"]["message"].startswith("ironcurtain: the agent wants to call")
        assert "tools/call" not in h.fs.methods  # nothing reaches the server before a human
        done = await h.request("tools/call", retry(call, asked, approval("approve")))
        assert done is not None and done["result"]["resultType"] == "complete"
        assert done["result"]["content"][0]["text"] == "tools/call read_file"

    run(work)
    assert h.fs.methods.count("tools/call") == 1
    (entry,) = h.entries()
    assert entry["escalation"] == "approved" and entry["result"] == "success"
    assert entry["era"] == "stateless"


def test_an_approval_refused_in_the_retry_never_reaches_the_server(tmp_path: Path) -> None:
    h = stateless(tmp_path)
    call = modern(private(h))

    async def work() -> None:
        first = await h.request("tools/call", call)
        assert first is not None
        done = await h.request("tools/call", retry(call, first["result"], approval("deny")))
        assert done is not None
        assert done["result"]["content"][0]["text"].startswith("ESCALATION DENIED")

    run(work)
    assert "tools/call" not in h.fs.methods
    (entry,) = h.entries()
    assert entry["escalation"] == "denied"


def test_a_state_is_used_once_and_only_by_the_request_it_was_given_for(tmp_path: Path) -> None:
    # As the agent: an approval asked for one call is carried to another (other arguments,
    # another method), replayed after it was used, or its state altered; none of it
    # reaches the server, and the call it was asked for still takes its answer.
    h = stateless(tmp_path)
    call = modern(private(h, "asked"))

    async def work() -> None:
        first = await h.request("tools/call", call)
        assert first is not None
        asked = first["result"]
        state = asked["requestState"]
        body, tag = state.split(".")
        forged = [
            retry(modern(private(h, "other")), asked, approval("approve")),
            {**retry(call, asked, approval("approve")), "requestState": f"{body}.{tag[::-1]}"},
            {**retry(call, asked, approval("approve")), "requestState": "opaque"},
            {**retry(call, asked, approval("approve")), "requestState": f"{body[:-2]}xx.{tag}"},
        ]
        for params in forged:
            refused = await h.request("tools/call", params)
            assert refused is not None and refused["error"]["code"] == -32602, params
        other_method = modern({"name": "summarize", "arguments": {"path": "/x"}})
        refused = await h.request("prompts/get", retry(other_method, asked, approval("approve")))
        assert refused is not None and refused["error"]["code"] == -32602
        assert "tools/call" not in h.fs.methods
        done = await h.request("tools/call", retry(call, asked, approval("approve")))
        assert done is not None and "content" in done["result"]
        replayed = await h.request("tools/call", retry(call, asked, approval("approve")))
        assert replayed is not None and replayed["error"]["code"] == -32602

    run(work)
    ((_, sent),) = [r for r in h.fs.requests if r[0] == "tools/call"]
    assert sent["arguments"]["path"].endswith("private/asked")


def test_a_retry_without_the_answer_is_asked_again(tmp_path: Path) -> None:
    h = stateless(tmp_path)
    call = modern(private(h))

    async def work() -> None:
        first = await h.request("tools/call", call)
        assert first is not None
        again = await h.request("tools/call", retry(call, first["result"], {}))
        assert again is not None and again["result"]["resultType"] == "input_required"
        assert APPROVAL in again["result"]["inputRequests"]
        stale = await h.request("tools/call", retry(call, first["result"], approval("approve")))
        assert stale is not None and stale["error"]["code"] == -32602  # the first state is used
        done = await h.request("tools/call", retry(call, again["result"], approval("approve")))
        assert done is not None and "content" in done["result"]

    run(work)
    assert h.fs.methods.count("tools/call") == 1


def test_an_unanswered_question_ends_the_call_and_nothing_more_is_sent(tmp_path: Path) -> None:
    h = stateless(tmp_path)
    h.relay.core.gate.approvals.timeout = 0.1
    call = modern(private(h))

    async def work() -> None:
        first = await h.request("tools/call", call)
        assert first is not None
        await asyncio.sleep(0.3)
        late = await h.request("tools/call", retry(call, first["result"], approval("approve")))
        assert late is not None and late["error"]["code"] == -32602

    run(work)
    assert "tools/call" not in h.fs.methods
    (entry,) = h.entries()
    assert entry["escalation"] == "timeout" and entry["result"] == "denied"
    # One answer per request: the request that asked had its answer, and nothing after it.
    assert [m.get("id") for m in h.client.sent if "method" not in m] == [1, 2]


def test_a_client_that_declares_no_elicitation_is_not_asked(tmp_path: Path) -> None:
    h = stateless(tmp_path)
    bare = {VERSION: "2026-07-28", CAPABILITIES: {}}

    async def work() -> None:
        answer = await h.request("tools/call", modern(private(h), bare))
        assert answer is not None
        assert answer["result"]["content"][0]["text"].startswith("ESCALATION REQUIRED")

    run(work)
    assert "tools/call" not in h.fs.methods


def _server_asks(h: Harness, method: str, params: Message, rid: int = 77) -> None:
    assert h.fs.on_request is not None
    h.fs.on_request(h.fs, {"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


def test_a_servers_question_reaches_the_client_as_the_answer_and_its_answer_goes_back(
    tmp_path: Path,
) -> None:
    h = stateless(tmp_path)
    h.fs.answer = lambda method, params: None  # the call stays out while the server asks
    inside = modern({"name": "read_file", "arguments": {"path": str(h.ws / "a.txt")}})

    async def work() -> None:
        h.feed({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": inside})
        await asyncio.sleep(0.01)
        _server_asks(h, "elicitation/create", FORM)
        first = await h.answer(1)
        assert first is not None
        asked = first["result"]
        assert asked["resultType"] == "input_required"
        question = asked["inputRequests"][QUESTION]
        assert question["method"] == "elicitation/create"
        assert question["params"]["message"] == "[server 'fs'] Your name?"  # as the server's
        answer = {QUESTION: {"action": "accept", "content": {"name": "Ada"}}}
        h.feed(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": retry(inside, asked, answer),
            }
        )
        await asyncio.sleep(0.01)
        ((rid, given),) = h.fs.replies
        assert rid == 77 and given["result"]["content"] == {"name": "Ada"}
        (held,) = h.fs.held
        h.fs.release(held, {"result": {"content": [{"type": "text", "text": "hello Ada"}]}})
        done = await h.answer(2)
        assert done is not None and done["result"]["content"][0]["text"] == "hello Ada"

    run(work)
    assert h.fs.methods.count("tools/call") == 1
    asked_entry = next(e for e in h.entries() if e["method"] == "elicitation/create")
    assert asked_entry["result"] == "success" and asked_entry["era"] == "stateless"
    assert asked_entry["callRequestId"] == 1  # the client's request it was asked during


def test_sampling_asks_a_human_then_the_model_each_in_its_own_round(tmp_path: Path) -> None:
    h = stateless(tmp_path)
    h.fs.answer = lambda method, params: None
    inside = modern({"name": "read_file", "arguments": {"path": str(h.ws / "a.txt")}})
    sampling: dict[str, object] = {
        "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]
    }
    sampling["maxTokens"] = 10

    async def work() -> None:
        h.feed({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": inside})
        await asyncio.sleep(0.01)
        _server_asks(h, "sampling/createMessage", sampling)
        first = await h.answer(1)
        assert first is not None
        assert list(first["result"]["inputRequests"]) == [APPROVAL]
        h.feed(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": retry(inside, first["result"], approval("approve")),
            }
        )
        second = await h.answer(2)
        assert second is not None
        sample = second["result"]["inputRequests"][QUESTION]
        assert sample["method"] == "sampling/createMessage"
        said = {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"}
        h.feed(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "tools/call",
                "params": retry(inside, second["result"], {QUESTION: said}),
            }
        )
        await asyncio.sleep(0.01)
        ((_, given),) = h.fs.replies
        assert given["result"]["content"]["text"] == "hello"
        (held,) = h.fs.held
        h.fs.release(held, {"result": {"content": [{"type": "text", "text": "done"}]}})
        done = await h.answer(3)
        assert done is not None and done["result"]["content"][0]["text"] == "done"

    run(work)
    entry = next(e for e in h.entries() if e["method"] == "sampling/createMessage")
    assert entry["escalation"] == "approved" and entry["result"] == "success"


def test_a_question_during_a_request_that_cannot_take_one_is_refused(tmp_path: Path) -> None:
    # A completion cannot be answered input_required: the server's question is refused as
    # for a client that takes none, and nothing is sent to the client.
    h = stateless(tmp_path)
    h.fs.answer = lambda method, params: None
    ref = {"type": "ref/prompt", "name": "summarize"}
    completing = modern({"ref": ref, "argument": {"name": "path", "value": str(h.ws)}})

    async def work() -> None:
        h.feed({"jsonrpc": "2.0", "id": 1, "method": "completion/complete", "params": completing})
        await asyncio.sleep(0.01)
        _server_asks(h, "elicitation/create", FORM)
        await asyncio.sleep(0.01)

    run(work)
    assert h.client.sent == []
    ((_, outcome),) = h.fs.replies
    assert "client-capability" in outcome["error"]["message"]
    assert json.dumps(h.fs.replies).count("Your name") == 0


def _asked_during_a_held_call(h: Harness, inside: Message) -> None:
    """A call (id 1) at a server that holds it and asks the client a question meanwhile."""
    h.fs.answer = lambda method, params: None
    h.feed({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": inside})


@pytest.mark.parametrize("ending", ["answered", "timed out", "withdrawn, then answered"])
def test_a_call_that_ends_before_its_retry_gives_the_retry_its_answer(
    tmp_path: Path, ending: str
) -> None:
    # As a hostile (or slow) server: its call ends while the client's retry is awaited.
    # The retry gets the call's answer, once; nothing is lost and nothing waits forever.
    h = stateless(tmp_path)
    inside = modern({"name": "read_file", "arguments": {"path": str(h.ws / "a.txt")}})
    answer = {QUESTION: {"action": "accept", "content": {"name": "Ada"}}}

    async def work() -> None:
        _asked_during_a_held_call(h, inside)
        await asyncio.sleep(0.01)
        _server_asks(h, "elicitation/create", FORM)
        first = await h.answer(1)
        assert first is not None and first["result"]["resultType"] == "input_required"
        (held,) = h.fs.held
        if ending.startswith("withdrawn"):
            assert h.fs.on_request is not None
            cancel = {"requestId": 77, "reason": "no longer needed"}
            h.relay.on_server_notification(
                h.fs, {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
            )
            await asyncio.sleep(0.01)
        done: Message | BaseException = {
            "result": {"content": [{"type": "text", "text": "RESULT"}]}
        }
        if ending == "timed out":
            done = TimeoutError()
        h.fs.release(held, done)
        await asyncio.sleep(0.01)
        params = retry(inside, first["result"], answer)
        h.feed({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params})
        got = await h.answer(2)
        assert got is not None, "the retry was never answered"
        text = got["result"]["content"][0]["text"]
        assert text == "RESULT" if ending != "timed out" else "did not answer within" in text

    run(work)
    assert [m["id"] for m in h.client.sent if "method" not in m] == [1, 2]
    assert h.relay._asked == {}


def test_a_question_after_its_call_was_answered_is_not_asked(tmp_path: Path) -> None:
    # As a hostile server: a question and its call's answer in one write. The client's
    # request has its answer; it gets no second one.
    h = stateless(tmp_path)
    inside = modern({"name": "read_file", "arguments": {"path": str(h.ws / "a.txt")}})

    async def work() -> None:
        _asked_during_a_held_call(h, inside)
        await asyncio.sleep(0.01)
        (held,) = h.fs.held
        _server_asks(h, "elicitation/create", FORM)  # decided now, asked in a task
        h.fs.release(held, {"result": {"content": [{"type": "text", "text": "RESULT"}]}})
        await asyncio.sleep(0.05)

    run(work)
    answers = [m for m in h.client.sent if m.get("id") == 1]
    assert len(answers) == 1 and answers[0]["result"]["content"][0]["text"] == "RESULT"
    ((_, told),) = h.fs.replies
    assert "error" in told


@pytest.mark.parametrize("era", ["handshake", "stateless"])
def test_an_escalated_call_cancelled_at_once_is_still_audited(tmp_path: Path, era: str) -> None:
    # Cancelled in the same read as the request, before its escalation took a step.
    h = build(tmp_path, initialize=era == "handshake")
    call = private(h) if era == "handshake" else modern(private(h))

    async def work() -> None:
        h.feed({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": call})
        cancel = {"requestId": 5, "reason": "no longer wanted"}
        h.feed({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
        await asyncio.sleep(0.05)

    run(work)
    assert "tools/call" not in h.fs.methods
    assert [(e["tool"], e["result"]) for e in h.entries()] == [("read_file", "cancelled")]


def test_a_second_question_while_the_first_is_out_is_refused_for_that_reason(
    tmp_path: Path,
) -> None:
    h = stateless(tmp_path)
    inside = modern({"name": "read_file", "arguments": {"path": str(h.ws / "a.txt")}})

    async def work() -> None:
        _asked_during_a_held_call(h, inside)
        await asyncio.sleep(0.01)
        _server_asks(h, "elicitation/create", FORM, rid=77)
        await asyncio.sleep(0.01)
        _server_asks(h, "elicitation/create", FORM, rid=78)
        await asyncio.sleep(0.01)

    run(work)
    ((rid, told),) = h.fs.replies
    assert rid == 78 and "already out during this request" in told["error"]["message"]
    second = next(e for e in h.entries() if e["requestId"] == 78)
    assert second["policy"]["rule"] == "client-requests-limit"


def test_one_caller_that_never_retries_cannot_push_out_anothers_question(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Gateway mode, one relay for every caller: bob opens more escalated calls than may
    # wait at once and never retries; alice's approval, asked first, still takes her retry.
    from launcher.relay.questions import rounds

    monkeypatch.setattr(rounds, "MAX_WAITING", 16)
    h = stateless(tmp_path)
    h.relay.rounds.caller_of = lambda rid: {"name": str(rid)[0], "issuer": "idp"}
    call = modern(private(h))

    async def work() -> None:
        h.feed({"jsonrpc": "2.0", "id": "A1", "method": "tools/call", "params": call})
        asked = await h.answer("A1")
        assert asked is not None
        for n in range(16):
            h.feed({"jsonrpc": "2.0", "id": f"B{n}", "method": "tools/call", "params": call})
        await asyncio.sleep(0.2)
        params = retry(call, asked["result"], approval("approve"))
        h.feed({"jsonrpc": "2.0", "id": "A2", "method": "tools/call", "params": params})
        done = await h.answer("A2")
        assert done is not None and done["result"]["resultType"] == "complete", done

    run(work)
