"""Pattern approvals in a session's approvals: given at the operator's terminal, each its
owner's alone (gateway mode: a caller's), listed and revoked (and the revocation audited)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from launcher.relay.approving.approval import PATTERN, Approvals
from launcher.relay.approving.patterns import LocalPatterns, lister
from launcher.transports.approvals.board import said
from policy.decision import Decision
from policy.models import ToolAnnotation
from policy.patterns import CallShape, call_shape, offered

ENV = ToolAnnotation(
    tool_name="env_value", server_name="probe", effect="read", side_effects=False,
    args={"name": ["none"]},
)  # fmt: skip
ASK = Decision("escalate", "ask-env", "reading the environment needs a human")


class Terminal:
    """An attached terminal that answers each question with the next of ``answers``."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.asked: list[dict[str, Any]] = []

    @property
    def attached(self) -> bool:
        return True

    async def ask(self, question: dict[str, Any], timeout: float) -> str:
        self.asked.append(question)
        return self.answers.pop(0)


def _shape(name: str) -> CallShape:
    return call_shape("probe", "env_value", ASK.rule, ENV, {"name": name}, "/")


async def _never(method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    raise AssertionError("the client is never asked here")


def _decide(approvals: Approvals, name: str) -> tuple[bool, str]:
    shape = _shape(name)
    offers = offered(shape, lambda d: None)
    outcome = asyncio.run(
        approvals.decide(
            "probe", "env_value", {"name": name}, ASK, False, _never, shape=shape, offers=offers
        )
    )
    return outcome.approved, outcome.escalation


def test_the_question_shows_the_exact_pattern_before_it_is_chosen() -> None:
    terminal = Terminal(f"{PATTERN}1")
    approvals = Approvals("auto", 5, terminal)
    assert _decide(approvals, "HOME") == (True, "approved-pattern")
    (offer,) = terminal.asked[0]["patterns"]
    assert offer == {
        "answer": f"{PATTERN}1",
        "text": "calls of env_value on server 'probe' escalated by rule ask-env, with any "
        "arguments (none of them names a path or a URL)",
    }
    # Another name is not asked again: the pattern answers it.
    assert _decide(approvals, "PATH") == (True, "pattern")
    assert len(terminal.asked) == 1


def test_an_answer_naming_no_offered_pattern_gives_none() -> None:
    terminal = Terminal(f"{PATTERN}2", "deny")
    approvals = Approvals("auto", 5, terminal)
    assert _decide(approvals, "HOME") == (False, "denied")
    assert approvals.patterns.listed() == []


def test_a_callers_pattern_is_never_used_for_another_caller() -> None:
    terminal = Terminal(f"{PATTERN}1", "deny", "deny")
    session = Approvals("auto", 5, terminal, callers=True)
    alice = session.for_caller({"name": "alice", "issuer": "https://idp"})
    bob = session.for_caller({"name": "bob", "issuer": "https://idp"})
    mallory = session.for_caller({"name": "alice", "issuer": "https://other-idp"})
    assert _decide(alice, "HOME") == (True, "approved-pattern")
    assert _decide(alice, "PATH") == (True, "pattern")
    # Bob's identical call is asked (and denied): alice's pattern is alice's.
    assert _decide(bob, "PATH") == (False, "denied")
    # A caller of the same name from another issuer is another caller.
    assert _decide(mallory, "PATH") == (False, "denied")
    assert len(terminal.asked) == 3
    # Control: the pattern is in the one store every caller's approvals share.
    assert bob.patterns is alice.patterns and len(bob.patterns.listed()) == 1


def test_a_revoked_pattern_answers_nothing_and_the_revocation_is_recorded() -> None:
    terminal = Terminal(f"{PATTERN}1", "deny")
    approvals = Approvals("auto", 5, terminal)
    recorded: list[dict[str, object]] = []
    control = lister(approvals.patterns, recorded.append)
    assert _decide(approvals, "HOME") == (True, "approved-pattern")
    (listed,) = control({"type": "patterns"})["patterns"]
    assert listed["text"].startswith("calls of env_value on server 'probe'")
    # Control: before the revocation the pattern answers.
    assert _decide(approvals, "LANG") == (True, "pattern")
    revoked = control({"type": "revoke", "id": listed["id"]})
    assert revoked["pattern"]["id"] == listed["id"]
    assert _decide(approvals, "LANG") == (False, "denied")
    assert recorded[0]["event"] == "pattern-revoked"
    assert control({"type": "revoke", "id": listed["id"]})["pattern"] is None
    assert control({"type": "patterns"})["patterns"] == []


def test_a_tool_that_changed_drops_its_patterns() -> None:
    approvals = Approvals("auto", 5, Terminal(f"{PATTERN}1", "deny"))
    assert _decide(approvals, "HOME") == (True, "approved-pattern")
    approvals.forget("probe", "env_value")
    assert _decide(approvals, "HOME") == (False, "denied")


def test_the_page_sends_only_a_pattern_the_question_offers() -> None:
    answers = {"approve": "approve", "deny": "deny"}
    message = {"patterns": [{"answer": f"{PATTERN}1", "text": "t"}]}
    assert said(message, "pattern1", answers) == f"{PATTERN}1"
    assert said(message, "pattern2", answers) is None
    assert said(message, "pattern0", answers) is None
    assert said({}, "pattern1", answers) is None
    assert said(message, "deny", answers) == "deny"


def test_the_audit_keeps_a_patterns_directory_as_its_hash(tmp_path: Path) -> None:
    write = ToolAnnotation(
        tool_name="write_file", server_name="fs", effect="write", side_effects=True,
        args={"path": ["write-path"], "content": ["none"]},
    )  # fmt: skip
    secret = tmp_path / "customer-acme"
    secret.mkdir()
    arguments: dict[str, object] = {"path": str(secret / "x"), "content": ""}
    shape = call_shape("fs", "write_file", "w", write, arguments, "/")
    approvals = Approvals("auto", 5, Terminal(f"{PATTERN}1"), patterns=LocalPatterns())
    outcome = asyncio.run(
        approvals.decide(
            "fs", "write_file", arguments, Decision("escalate", "w", "r"), False, _never,
            shape=shape, offers=offered(shape, lambda d: None),
        )
    )  # fmt: skip
    assert outcome.escalation == "approved-pattern" and outcome.pattern is not None
    assert "customer-acme" not in repr(outcome.pattern)
    assert str(outcome.pattern["value"]).startswith("sha256:")


def test_a_client_asked_by_elicitation_can_never_give_a_pattern() -> None:
    asked: list[dict[str, Any]] = []

    async def client(method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        asked.append(params)
        return {"result": {"action": "accept", "content": {"answer": f"{PATTERN}1"}}}

    approvals = Approvals("auto", 5, None)
    shape = _shape("HOME")
    outcome = asyncio.run(
        approvals.decide(
            "probe", "env_value", {"name": "HOME"}, ASK, True, client,
            shape=shape, offers=offered(shape, lambda d: None),
        )
    )  # fmt: skip
    assert (outcome.approved, outcome.escalation) == (False, "denied")
    assert approvals.patterns.listed() == []
    # The client was offered no pattern: its form has the three answers only.
    answers = asked[0]["requestedSchema"]["properties"]["answer"]["enum"]
    assert answers == ["approve", "approve for this session", "deny"]
