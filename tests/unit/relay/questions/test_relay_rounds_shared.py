"""Question rounds between two relays of one gateway that share their state (two
instances, in process): an approval's round begun on one is taken over by the other, whose
server alone gets the call; a round in which a server asked stays with that server's relay
(the other refuses its retry, and the asking relay still takes it). The control: relays
that share nothing refuse each other's states."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest

from launcher.relay import escalation
from launcher.relay.questions.rounds import QUESTION
from launcher.shared.jsonrpc import Message
from launcher.shared_state.memory import MemoryState
from launcher.shared_state.store import SharedState
from tests.support.relay import RULES, Harness, build, run
from tests.unit.relay.questions.test_relay_rounds import (
    FORM,
    _server_asks,
    approval,
    modern,
    private,
    retry,
)


class Shared(MemoryState):
    """One state two relays see, as two instances see one Redis."""

    shared = True


def pair(tmp_path: Path, state: SharedState | None) -> tuple[Harness, Harness]:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    return (
        build(tmp_path / "a", initialize=False, state=state),
        build(tmp_path / "b", initialize=False, state=state),
    )


def test_an_approvals_round_taken_over_is_decided_again_by_the_relay_that_takes_it(
    tmp_path: Path,
) -> None:
    """The retry's approval answers the question the taking relay asks, if it asks one: its
    own policy decides the call first (here the path is outside its workspace: denied, the
    approval notwithstanding), and the state is used up wherever it was taken."""
    one, two = pair(tmp_path, Shared())
    call = modern(private(one))

    async def work() -> None:
        first = await one.request("tools/call", call)
        assert first is not None
        asked = first["result"]
        taken = await two.request("tools/call", retry(call, asked, approval("approve")))
        assert taken is not None
        assert taken["result"]["content"][0]["text"].startswith("DENIED (rule: default-deny)")
        again = await one.request("tools/call", retry(call, asked, approval("approve")))
        assert again is not None and again["error"]["code"] == -32602  # used, on the other

    run(work)
    assert "tools/call" not in one.fs.methods and "tools/call" not in two.fs.methods


def test_an_approvals_round_begun_on_one_relay_is_answered_on_the_other(tmp_path: Path) -> None:
    state = Shared()
    one = build(tmp_path, initialize=False, state=state)
    two = build(tmp_path, initialize=False, state=state)  # the same options and workspace
    call = modern(private(one))

    async def work() -> None:
        first = await one.request("tools/call", call)
        assert first is not None
        done = await two.request("tools/call", retry(call, first["result"], approval("approve")))
        assert done is not None
        assert done["result"]["content"][0]["text"] == "tools/call read_file"

    run(work)
    assert "tools/call" not in one.fs.methods and two.fs.methods.count("tools/call") == 1


def test_a_round_a_server_asked_in_stays_with_that_relay(tmp_path: Path) -> None:
    one, two = pair(tmp_path, Shared())
    one.fs.answer = lambda method, params: None  # the call stays out while the server asks
    inside = modern({"name": "read_file", "arguments": {"path": str(one.ws / "a.txt")}})
    answer = {QUESTION: {"action": "accept", "content": {"name": "Ada"}}}

    async def work() -> None:
        one.feed({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": inside})
        await asyncio.sleep(0.01)
        _server_asks(one, "elicitation/create", FORM)
        first = await one.answer(1)
        assert first is not None
        elsewhere = await two.request("tools/call", retry(inside, first["result"], answer))
        assert elsewhere is not None and elsewhere["error"]["code"] == -32602
        one.feed({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                  "params": retry(inside, first["result"], answer)})  # fmt: skip
        await asyncio.sleep(0.01)
        ((rid, given),) = one.fs.replies
        assert rid == 77 and given["result"]["content"] == {"name": "Ada"}

    run(work)
    assert "tools/call" not in two.fs.methods


def test_control_relays_that_share_nothing_refuse_each_others_states(tmp_path: Path) -> None:
    one, two = pair(tmp_path, None)
    call = modern(private(one))

    async def work() -> None:
        first = await one.request("tools/call", call)
        assert first is not None
        done = await two.request("tools/call", retry(call, first["result"], approval("approve")))
        assert done is not None and done["error"]["code"] == -32602

    run(work)
    assert "tools/call" not in two.fs.methods


def _worded_otherwise() -> dict[str, Any]:
    """The test policy, its escalation given another reason (so its question reads otherwise)."""
    rules = copy.deepcopy(RULES)
    rules["rules"][0]["reason"] = "private files: the reader takes them off the premises"
    return rules


def _answered_elsewhere(tmp_path: Path) -> tuple[Harness, Message | None]:
    """Alice's approval asked on one relay, her "approve" sent to another relay whose policy
    words the question otherwise: that relay, and its answer to the retry."""
    state = Shared()
    one = build(tmp_path, initialize=False, state=state)
    two = build(tmp_path, initialize=False, state=state, rules=_worded_otherwise())
    call = modern(private(one))
    answers: list[Message | None] = []

    async def work() -> None:
        first = await one.request("tools/call", call)
        assert first is not None
        answers.append(
            await two.request("tools/call", retry(call, first["result"], approval("approve")))
        )

    run(work)
    return two, answers[0]


def test_an_answer_taken_over_answers_only_the_question_it_was_given_to(tmp_path: Path) -> None:
    """The human approved the question the first relay showed; the relay that takes the
    call over would ask another (another rule's reason, another grant): never shown, so the
    answer is not taken for it, and the call is denied."""
    two, answer = _answered_elsewhere(tmp_path)
    assert answer is not None and "result" in answer, answer
    assert answer["result"]["content"][0]["text"].startswith("ESCALATION DENIED")
    assert "tools/call" not in two.fs.methods


def test_control_an_answer_taken_for_any_question_runs_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def any_question(answer: Message, asked: str) -> Any:
        async def asking(method: str, params: dict[str, Any], timeout: float) -> Message:
            return {"jsonrpc": "2.0", "id": 0, "result": answer}

        return asking

    monkeypatch.setattr(escalation, "_given", any_question)
    two, _ = _answered_elsewhere(tmp_path)
    assert two.fs.methods.count("tools/call") == 1  # approved, though never asked so
