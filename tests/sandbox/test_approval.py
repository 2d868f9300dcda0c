"""Escalations answered through a real MCP client's elicitation callback."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp.types as types
from mcp import ClientSession

from tests.support.audit import audit_entries
from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_calls, probe_session
from tests.support.sdk import (
    PROMPT,
    Answer,
    Elicitation,
    answer_asked,
    answering,
    attached_terminal,
    call,
    connect,
    leave,
    session_calls,
)

pytestmark = needs_bwrap


def _setup(user: Home) -> tuple[list[str], Path, Path]:
    ask = {
        "name": "ask-before-env",
        "if": {"tool": ["env_value"]},
        "then": "escalate",
        "reason": "reading the server's environment needs a human",
    }
    return probe_session(user, first=[ask])


def _elicitation(answer: Answer | None) -> Elicitation | None:
    """The client's elicitation callback: ``answer`` asked; None, a client that cannot."""
    if answer is None:
        return None

    async def callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return await answer(params)

    return callback


@asynccontextmanager
async def session_with(
    user: Home, args: list[str], answer: Answer | None
) -> AsyncIterator[ClientSession]:
    async with connect(user, *args, elicitation=_elicitation(answer)) as session:
        yield session


def _env_values(
    user: Home, args: list[str], answer: Answer | None, *names: str
) -> list[tuple[bool, str]]:
    """One session: ``probe__env_value`` of each name in turn (the rule asks before each)."""
    calls = [("probe__env_value", {"name": name}) for name in names]
    return session_calls(user, args, calls, _elicitation(answer))


def test_approve_and_deny(user: Home) -> None:
    args, ws, audit = _setup(user)
    answer, seen = answering("approve", "deny")
    out = _env_values(user, args, answer, "HOME", "LANG")
    assert out[0] == (False, "/tmp/home")
    assert out[1][0] and out[1][1].startswith("ESCALATION DENIED (rule: ask-before-env)")
    assert "the user answered deny" in out[1][1]
    # The human saw which call, why, and the exact arguments.
    assert "env_value on server 'probe'" in seen[0] and "ask-before-env" in seen[0]
    assert '"name": "HOME"' in seen[0]
    assert [c["name"] for c in probe_calls(ws) if c["tool"] == "env_value"] == ["HOME"]
    assert [e["escalation"] for e in audit_entries(audit)] == ["approved", "denied"]


def test_an_approval_is_used_once(user: Home) -> None:
    # The same call again is asked again; the second answer (deny) stands.
    args, ws, _ = _setup(user)
    answer, seen = answering("approve", "deny")
    out = _env_values(user, args, answer, "HOME", "HOME")
    assert len(seen) == 2
    assert out[0] == (False, "/tmp/home") and out[1][1].startswith("ESCALATION DENIED")
    assert len(probe_calls(ws)) == 1


def test_approve_for_this_session_covers_only_the_same_call(user: Home) -> None:
    args, _, audit = _setup(user)
    answer, seen = answering("approve for this session", "deny")
    # The second HOME is not asked; PATH is, and denied.
    out = _env_values(user, args, answer, "HOME", "HOME", "PATH")
    assert len(seen) == 2
    assert out[0] == out[1] == (False, "/tmp/home")
    assert out[2][0] and out[2][1].startswith("ESCALATION DENIED")
    entries = audit_entries(audit)
    assert [e["escalation"] for e in entries] == [
        "approved-for-session",
        "session-whitelist",
        "denied",
    ]
    assert entries[0]["whitelisted"]["tool"] == "env_value"
    assert entries[0]["whitelisted"]["arguments"].startswith("sha256:")


def test_no_answer_in_time_is_a_deny(user: Home) -> None:
    args, ws, audit = _setup(user)

    async def slow(params: types.ElicitRequestParams) -> types.ElicitResult:
        await asyncio.sleep(5)
        return types.ElicitResult(action="accept", content={"answer": "approve"})

    out = _env_values(user, [*args, "--approval-timeout", "1"], slow, "HOME")
    assert out[0][0] and "no answer within 1 s" in out[0][1]
    assert probe_calls(ws) == []
    assert [e["escalation"] for e in audit_entries(audit)] == ["timeout"]


def test_waiting_for_a_human_does_not_block_other_calls(user: Home) -> None:
    args, _, _ = _setup(user)
    release = asyncio.Event()
    order: list[str] = []

    async def human(params: types.ElicitRequestParams) -> types.ElicitResult:
        await release.wait()
        return types.ElicitResult(action="accept", content={"answer": "approve"})

    async def scenario() -> None:
        async with session_with(user, args, human) as s:

            async def escalated() -> None:
                await call(s, "probe__env_value", {"name": "HOME"})
                order.append("escalated")

            async def unrelated() -> None:
                await call(s, "probe__read_path", {"path": "/nonexistent"})
                order.append("unrelated")
                release.set()

            await asyncio.gather(escalated(), unrelated())

    asyncio.run(scenario())
    assert order == ["unrelated", "escalated"]


def test_without_a_channel_escalations_are_denied(user: Home) -> None:
    args, ws, audit = _setup(user)
    answer, seen = answering("approve")
    out = [
        *_env_values(user, args, None, "HOME"),  # a client that cannot elicit
        *_env_values(user, [*args, "--approval", "deny"], answer, "HOME"),
    ]
    assert all(e and t.startswith("ESCALATION REQUIRED") for e, t in out)
    assert seen == []  # --approval deny never asks
    assert probe_calls(ws) == []
    assert [e["escalation"] for e in audit_entries(audit)] == ["no-approval-channel"] * 2


def test_an_attached_approvals_terminal_answers(user: Home, run_dir: Path) -> None:
    args, _, audit = _setup(user)
    out: list[tuple[bool, str]] = []
    shown: list[str] = []

    async def scenario() -> None:
        # A client that cannot elicit: with a terminal attached, auto asks the terminal.
        async with session_with(user, args, None) as s:
            terminal = await attached_terminal(user)
            first = asyncio.create_task(call(s, "probe__env_value", {"name": "HOME"}))
            shown.append(await answer_asked(terminal, b"x"))  # a typo is asked again
            shown.append(await answer_asked(terminal, b"a"))
            out.append(await first)
            second = asyncio.create_task(call(s, "probe__env_value", {"name": "LANG"}))
            shown.append(await answer_asked(terminal, b"d"))
            out.append(await second)
        # The session is over: the terminal says so; it leaves when its input ends.
        shown.append(await leave(terminal))

    asyncio.run(scenario())
    assert out[0] == (False, "/tmp/home")
    assert out[1][0] and "the user answered deny" in out[1][1]
    assert "probe/env_value needs your approval" in shown[0]
    assert "rule ask-before-env" in shown[0] and '"name": "HOME"' in shown[0]
    assert shown[1].strip() == PROMPT.decode().strip()  # the typo: only asked again
    assert '"name": "LANG"' in shown[2]
    assert re.search(r"session \S+ ended", shown[3])
    assert [e["escalation"] for e in audit_entries(audit)] == ["approved", "denied"]


def test_approvals_for_one_session_leaves_when_it_ends(user: Home, run_dir: Path) -> None:
    args, _, _ = _setup(user)
    shown: list[str] = []

    async def scenario() -> None:
        async with session_with(user, args, None):
            (made,) = run_dir.glob("ironcurtain-*")
            session = made.name.removeprefix("ironcurtain-")
            terminal = await attached_terminal(user, "--session", session)
            assert terminal.stdout
        shown.append((await asyncio.wait_for(terminal.stdout.read(), 30)).decode())
        assert await terminal.wait() == 0

    asyncio.run(scenario())
    assert "the session ended" in shown[0]


def test_approvals_for_a_session_not_running_says_so(user: Home) -> None:
    user.env["XDG_RUNTIME_DIR"] = str(user.root)
    done = ironcurtain(user, "approvals", "--session", "20261207-000000-000000")
    assert done.returncode == 2 and "no approvals socket for session" in done.stderr


def test_a_terminal_answer_to_an_old_question_is_ignored(tmp_path: Path) -> None:
    from launcher.transports.approvals.session_socket import ApprovalsSocket

    async def scenario() -> None:
        terminals = ApprovalsSocket(str(tmp_path / "a.sock"))
        await terminals.start()
        reader, writer = await asyncio.open_unix_connection(str(tmp_path / "a.sock"))
        assert json.loads(await reader.readline())["type"] == "attached"
        first = asyncio.create_task(terminals.ask({"tool": "one"}, 5))
        question = json.loads(await reader.readline())
        writer.write(
            json.dumps({"type": "answer", "id": question["id"], "answer": "approve"}).encode()
            + b"\n"
        )
        assert await first == "approve"
        assert json.loads(await reader.readline())["type"] == "closed"
        # A replay of that answer does not answer the next question.
        second = asyncio.create_task(terminals.ask({"tool": "two"}, 1))
        await reader.readline()
        writer.write(
            json.dumps({"type": "answer", "id": question["id"], "answer": "approve"}).encode()
            + b"\n"
        )
        try:
            await second
        except TimeoutError:
            pass
        else:
            raise AssertionError("a replayed answer was taken")
        writer.close()
        await terminals.stop()

    asyncio.run(scenario())


def test_the_question_shows_what_would_act_on_a_screen_as_escapes() -> None:
    # A path whose right-to-left override would show "exe.txt" as "txt.exe", and content
    # holding a C1 control, a zero-width space and a line separator.
    from launcher.relay.approving.approval import approval_message
    from policy.decision import Decision

    arguments: dict[str, object] = {
        "path": "/ws/evil\u202etxt.exe",
        "content": "a\u009bb\u200bc\u2028d\u061ce\U000e0041f",  # and a bidi mark, a tag
    }
    decision = Decision("escalate", "escalate-writes", "writes need a person")
    text = approval_message("fs", "write_file", arguments, decision)
    assert not any(c in text for c in "\u202e\u009b\u200b\u2028\u061c\U000e0041"), text
    assert "evil\\u202etxt.exe" in text
    assert "a\\x9bb\\u200bc\\u2028d\\u061ce\\U000e0041f" in text


def test_a_servers_request_is_asked_as_the_servers_and_a_name_keeps_to_its_line() -> None:
    from launcher.relay.approving.approval import approval_message
    from policy.decision import Decision

    decision = Decision("escalate", "client-requests", "a human approves sampling")
    request: dict[str, object] = {
        "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]
    }
    text = approval_message("fs", "sampling/createMessage", request, decision, by_server=True)
    head = text.splitlines()[0]
    assert head.startswith("ironcurtain: server 'fs' asks the user's model") and "agent" not in head
    assert "The request, all of it, as it would be sent:\n" in text
    # A tool name (the server's) cannot start a line that reads as ironcurtain's own.
    forged = approval_message("fs", "read\nironcurtain: approved", {}, decision)
    assert [line for line in forged.splitlines() if line.startswith("ironcurtain:")] == [
        forged.splitlines()[0]
    ]


def test_a_tool_approved_for_the_session_never_covers_a_servers_request() -> None:
    """A server names a tool after its own request (``sampling/createMessage``): the agent's
    call to it, approved for the session, must not let the server's sampling request with
    the same content through unasked."""
    from launcher.relay.approving.approval import APPROVE_SESSION, Approvals
    from policy.decision import Decision

    asked: list[str] = []

    async def human(method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        asked.append(params["message"].splitlines()[0])
        return {"result": {"action": "accept", "content": {"answer": APPROVE_SESSION}}}

    decision = Decision("escalate", "r", "ask")
    request: dict[str, object] = {
        "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]
    }
    approvals = Approvals("elicit", 5.0)

    async def scenario() -> list[str]:
        outcomes = []
        for by_server in (False, True, True):
            outcome = await approvals.decide(
                "fs", "sampling/createMessage", request, decision, True, human, by_server=by_server
            )
            outcomes.append(outcome.escalation)
        return outcomes

    outcomes = asyncio.run(scenario())
    # The tool call and the server's request are each asked; the server's second, the same,
    # is covered by its own approval for the session.
    assert outcomes == ["approved-for-session", "approved-for-session", "session-whitelist"]
    assert len(asked) == 2 and "agent" in asked[0] and "asks the user's model" in asked[1]
