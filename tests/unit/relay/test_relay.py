"""The relay core in-process: every method that reaches a server × every decision, with a fake
server (tests/support/downstream.py), the real policy engine, gate, approvals and audit log.

What only the OS can show (sandboxes, processes, stdio framing) is tested through bwrap in
the other modules; here the routing, the one gate, escalation, cancellation and the audit
entries are checked fast and exhaustively.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import json
from pathlib import Path
from typing import Any

import pytest

import launcher
from launcher.relay.approving.approval import APPROVE, APPROVE_SESSION, DENY
from launcher.relay.gate.pins import Pins
from launcher.relay.questions.server_requests import MAX_OPEN
from launcher.relay.questions.to_client import WITHDRAWN
from launcher.shared.jsonrpc import Message, ServerGone
from tests.support.relay import (
    TIMEOUT,
    Harness,
    build,
    prompt_listing,
    run,
    tool_listing,
)


def test_the_initialize_answer_gives_the_installed_package_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = build(tmp_path)
    assert h.hello["result"]["serverInfo"]["version"] == importlib.metadata.version("ironcurtain")
    # The one version the code holds, not a second number written elsewhere.
    monkeypatch.setattr(launcher, "__version__", "7.7.7")
    h = build(tmp_path / "again")
    assert h.hello["result"]["serverInfo"]["version"] == "7.7.7"


# -- every method × every decision -----------------------------------------------------------

METHODS = [
    "tools/call",
    "prompts/get",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "completion/complete",
    "completion/complete (resource)",
]


def params_for(method: str, path: str) -> tuple[str, Message]:
    if method == "tools/call":
        return method, {"name": "read_file", "arguments": {"path": path}}
    if method == "prompts/get":
        return method, {"name": "summarize", "arguments": {"path": path}}
    if method == "completion/complete":
        ref = {"type": "ref/prompt", "name": "summarize"}
        return method, {"ref": ref, "argument": {"name": "path", "value": path}}
    if method == "completion/complete (resource)":
        ref = {"type": "ref/resource", "uri": "file:///{path}"}
        value = path.removeprefix("/")
        return "completion/complete", {"ref": ref, "argument": {"name": "path", "value": value}}
    return method, {"uri": f"file://{path}"}


def where(h: Harness, decision: str) -> str:
    return {
        "allow": str(h.ws / "a.txt"),
        "deny": str(h.tmp / "outside.txt"),
        "escalate": str(h.ws / "private" / "key.txt"),
    }[decision]


def refusal(answer: Message | None, method: str) -> str:
    """The text a refused request was answered with (a tool result, or an error)."""
    assert answer is not None, "no answer"
    if method == "tools/call":
        result = answer["result"]
        assert result["isError"] is True
        return str(result["content"][0]["text"])
    assert answer["error"]["code"] == -32001, answer
    return str(answer["error"]["message"])


@pytest.mark.parametrize("method", METHODS)
def test_allowed_requests_reach_the_server_and_are_audited(tmp_path: Path, method: str) -> None:
    h = build(tmp_path)

    async def scenario() -> None:
        wire, params = params_for(method, where(h, "allow"))
        answer = await h.request(wire, params)
        assert answer is not None and "result" in answer, answer
        assert h.fs.methods == [wire]
        assert h.fs.timeouts == [TIMEOUT]

    run(scenario)
    (entry,) = h.entries()
    assert entry["method"] == params_for(method, "")[0]
    assert entry["policy"]["decision"] == "allow" and entry["result"] == "success"
    assert entry["server"] == "fs" and entry["escalation"] is None


def assert_refused(h: Harness, requests: list[tuple[str, str]], starts: str) -> None:
    """Each ``(method, path)`` request is answered with a refusal starting ``starts``, no
    human is asked, and none of them reaches the server."""

    async def scenario() -> None:
        for method, path in requests:
            wire, params = params_for(method, path)
            text = refusal(await h.request(wire, params), wire)
            assert text.startswith(starts), text

    run(scenario)
    assert h.fs.requests == []


@pytest.mark.parametrize("method", METHODS)
def test_denied_requests_never_reach_the_server(tmp_path: Path, method: str) -> None:
    h = build(tmp_path)
    assert_refused(h, [(method, where(h, "deny"))], "DENIED (rule: default-deny)")
    (entry,) = h.entries()
    assert entry["policy"]["rule"] == "default-deny" and entry["result"] == "denied"


ASKED = [m for m in METHODS if not m.startswith("completion")]


@pytest.mark.parametrize("method", ASKED)
@pytest.mark.parametrize("said", [APPROVE, APPROVE_SESSION])
def test_an_escalation_approved_by_the_human_is_forwarded(
    tmp_path: Path, method: str, said: str
) -> None:
    h = build(tmp_path, answer=said)

    async def scenario() -> None:
        wire, params = params_for(method, where(h, "escalate"))
        answer = await h.request(wire, params)
        assert answer is not None and "result" in answer
        assert not answer["result"].get("isError")
        assert h.fs.methods == [wire]
        (asked,) = h.client.elicitations
        assert "private files need a human" in asked["params"]["message"]

    run(scenario)
    (entry,) = h.entries()
    assert entry["policy"]["decision"] == "escalate" and entry["result"] == "success"
    expected = "approved" if said == APPROVE else "approved-for-session"
    assert entry["escalation"] == expected


@pytest.mark.parametrize("method", ASKED)
def test_an_escalation_the_human_refuses_is_not_forwarded(tmp_path: Path, method: str) -> None:
    h = build(tmp_path, answer=DENY)
    starts = "ESCALATION DENIED (rule: escalate-private-reads)"
    assert_refused(h, [(method, where(h, "escalate"))], starts)
    (entry,) = h.entries()
    assert entry["escalation"] == "denied" and entry["result"] == "denied"


@pytest.mark.parametrize("method", ASKED)
def test_an_escalation_without_an_approval_channel_is_refused(tmp_path: Path, method: str) -> None:
    h = build(tmp_path, approval="deny")
    starts = "ESCALATION REQUIRED (rule: escalate-private-reads)"
    assert_refused(h, [(method, where(h, "escalate"))], starts)
    assert h.client.elicitations == []
    (entry,) = h.entries()
    assert entry["escalation"] == "no-approval-channel" and entry["result"] == "denied"


@pytest.mark.parametrize("method", [m for m in METHODS if m.startswith("completion")])
def test_a_completion_is_never_put_to_a_human(tmp_path: Path, method: str) -> None:
    h = build(tmp_path, answer=APPROVE)
    assert_refused(h, [(method, where(h, "escalate"))], "DENIED (rule: escalate-private-reads)")
    assert h.client.elicitations == []
    (entry,) = h.entries()
    assert "never put to a human" in entry["policy"]["reason"]


def test_a_completion_of_a_system_path_is_denied(tmp_path: Path) -> None:
    h = build(tmp_path)
    request = ("completion/complete (resource)", "/etc/pas")
    assert_refused(h, [request], "DENIED (rule: structural-system-root)")


# -- routing ---------------------------------------------------------------------------------


def test_names_are_prefixed_with_several_servers_and_forwarded_as_the_servers_own(
    tmp_path: Path,
) -> None:
    h = build(tmp_path, servers=("fs", "notes"))
    path = where(h, "allow")

    async def scenario() -> None:
        listed = await h.request("tools/list", {})
        assert listed is not None
        names = {t["name"] for t in listed["result"]["tools"]}
        assert names == {f"{s}__{t}" for s in ("fs", "notes") for t in ("read_file", "write_file")}
        prompts = await h.request("prompts/list", {})
        assert prompts is not None
        assert {p["name"] for p in prompts["result"]["prompts"]} == {
            "fs__summarize",
            "notes__summarize",
        }
        await h.request("tools/call", {"name": "notes__read_file", "arguments": {"path": path}})
        await h.request("prompts/get", {"name": "fs__summarize", "arguments": {"path": path}})
        ref = {"type": "ref/prompt", "name": "notes__summarize"}
        argument = {"name": "path", "value": path}
        await h.request("completion/complete", {"ref": ref, "argument": argument})

    run(scenario)
    notes, fs = h.servers["notes"], h.fs
    assert notes.requests[0] == ("tools/call", {"name": "read_file", "arguments": {"path": path}})
    assert fs.requests == [("prompts/get", {"name": "summarize", "arguments": {"path": path}})]
    assert notes.requests[1][1]["ref"] == {"type": "ref/prompt", "name": "summarize"}


def test_what_no_server_offers_is_refused_and_audited(tmp_path: Path) -> None:
    h = build(tmp_path, servers=("fs", "notes"))

    async def scenario() -> None:
        tool = await h.request("tools/call", {"name": "nope", "arguments": {}})
        assert refusal(tool, "tools/call").startswith("DENIED (rule: structural-unknown-tool)")
        prompt = await h.request("prompts/get", {"name": "nope"})
        assert prompt is not None and prompt["error"]["code"] == -32602
        # Two servers offer resources: a URI neither lists belongs to neither.
        resource = await h.request("resources/read", {"uri": "mem://nowhere"})
        assert resource is not None and resource["error"]["code"] == -32002

    run(scenario)
    assert h.servers["fs"].requests == [] and h.servers["notes"].requests == []
    assert [(e["method"], e["result"]) for e in h.entries()] == [
        ("tools/call", "denied"),
        ("prompts/get", "denied"),
        ("resources/read", "denied"),
    ]


def test_a_uri_nobody_lists_goes_to_the_one_server_with_resources_and_is_checked(
    tmp_path: Path,
) -> None:
    h = build(tmp_path)
    ws = tmp_path / "ws"

    async def scenario() -> None:
        made = await h.request("resources/subscribe", {"uri": "mem://made-at-run-time"})
        assert made is not None and "result" in made
        inside = await h.request("resources/read", {"uri": f"file://{ws}/later.txt"})
        assert inside is not None and "result" in inside
        outside = await h.request("resources/read", {"uri": "file:///etc/shadow"})
        assert outside is not None and outside["error"]["code"] == -32001

    run(scenario)
    assert [r[1]["uri"] for r in h.fs.requests] == [
        "mem://made-at-run-time",
        f"file://{ws}/later.txt",
    ]


def test_an_unannotated_prompt_is_never_called(tmp_path: Path) -> None:
    h = build(tmp_path)
    h.fs.prompts.append(prompt_listing("shout", "text"))
    h.relay.lists_changed("notifications/prompts/list_changed")

    async def scenario() -> None:
        answer = await h.request("prompts/get", {"name": "shout", "arguments": {"text": "hi"}})
        assert refusal(answer, "prompts/get").startswith("DENIED (rule: structural-unknown")

    run(scenario)
    assert h.fs.requests == []


def test_initialize_offers_what_the_servers_offer(tmp_path: Path) -> None:
    h = build(tmp_path)
    h.fs.capabilities = {"tools": {}}  # no completions, no subscriptions
    h.fs.prompts.clear()
    h.relay.lists_changed()

    async def scenario() -> None:
        init = await h.request("initialize", {"protocolVersion": "2025-06-18"})
        assert init is not None
        caps = init["result"]["capabilities"]
        assert "completions" not in caps and "prompts" not in caps
        assert caps["resources"]["subscribe"] is False
        sub = await h.request("resources/subscribe", {"uri": f"file://{h.ws}/a.txt"})
        assert sub is not None and sub["error"]["code"] == -32601

    run(scenario)
    assert h.fs.requests == []


# -- the gate's other parts ------------------------------------------------------------------


def test_the_breaker_stops_the_same_request_on_every_method(tmp_path: Path) -> None:
    h = build(tmp_path, breaker=2)

    async def scenario() -> None:
        for method in ("tools/call", "prompts/get", "resources/read"):
            wire, params = params_for(method, where(h, "allow"))
            for _ in range(2):
                answer = await h.request(wire, params)
                assert answer is not None and "result" in answer
            text = refusal(await h.request(wire, params), wire)
            assert text.startswith("DENIED (rule: circuit-breaker)"), text

    run(scenario)
    assert h.fs.methods == ["tools/call"] * 2 + ["prompts/get"] * 2 + ["resources/read"] * 2


def test_a_tool_changed_since_it_was_pinned_is_escalated(tmp_path: Path) -> None:
    Pins.load(str(tmp_path / "pins"), "fs").save(
        [tool_listing("read_file", "path", "reads a file")]
    )
    h = build(tmp_path, approval="deny")
    assert_refused(
        h, [("tools/call", where(h, "allow"))], "ESCALATION REQUIRED (rule: tool-changed)"
    )
    assert any("differ from their pins" in line for line in h.said)
    assert any("(start the session with accept_tool_changes)" in line for line in h.said)


def test_how_to_accept_a_changed_tool_is_said_in_the_command_layers_words(
    tmp_path: Path,
) -> None:
    Pins.load(str(tmp_path / "pins"), "fs").save(
        [tool_listing("read_file", "path", "reads a file")]
    )
    flags = {"accept_tool_changes": "--accept-tool-changes"}
    h = build(tmp_path, approval="deny", names=flags.__getitem__)
    assert any("(start the session with --accept-tool-changes)" in line for line in h.said)


def test_nothing_reaches_a_server_once_the_audit_log_is_gone(tmp_path: Path) -> None:
    h = build(tmp_path)
    (tmp_path / "audit.jsonl").unlink()
    requests = [(method, where(h, "allow")) for method in METHODS]
    assert_refused(h, requests, "DENIED (rule: audit-log-unwritable)")


def test_approve_for_session_answers_the_same_request_later_without_asking(
    tmp_path: Path,
) -> None:
    h = build(tmp_path, answer=APPROVE_SESSION)

    async def scenario() -> None:
        for method in ("prompts/get", "tools/call"):
            wire, params = params_for(method, where(h, "escalate"))
            for _ in range(2):
                answer = await h.request(wire, params)
                assert answer is not None and "result" in answer

    run(scenario)
    assert len(h.client.elicitations) == 2  # once per method: the whitelist is per method
    assert [e["escalation"] for e in h.entries()] == [
        "approved-for-session",
        "session-whitelist",
    ] * 2


# -- cancellation, failures, answers ---------------------------------------------------------


@pytest.mark.parametrize("method", ["tools/call", "prompts/get", "resources/read"])
def test_a_cancelled_request_is_cancelled_at_the_server_and_never_answered(
    tmp_path: Path, method: str
) -> None:
    h = build(tmp_path)
    h.fs.answer = lambda method, params: None  # holds every request

    async def scenario() -> None:
        wire, params = params_for(method, where(h, "allow"))
        h.feed({"jsonrpc": "2.0", "id": "c1", "method": wire, "params": params})
        await asyncio.sleep(0.01)
        assert list(h.fs.held) == [1]
        h.feed({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": "c1", "reason": "user"}})  # fmt: skip
        await asyncio.sleep(0.01)
        assert h.client.sent == []

    run(scenario)
    assert h.fs.cancelled == [(1, "cancelled")]
    (entry,) = h.entries()
    assert entry["result"] == "cancelled"


def test_a_request_cancelled_while_a_human_is_asked_is_never_made(tmp_path: Path) -> None:
    h = build(tmp_path, answer=None)  # the human never answers

    async def scenario() -> None:
        wire, params = params_for("prompts/get", where(h, "escalate"))
        h.feed({"jsonrpc": "2.0", "id": "c2", "method": wire, "params": params})
        await asyncio.sleep(0.01)
        (asked,) = h.client.elicitations
        h.feed({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": "c2"}})  # fmt: skip
        await asyncio.sleep(0.01)
        withdrawn = [m for m in h.client.sent if m.get("method") == "notifications/cancelled"]
        assert [m["params"]["requestId"] for m in withdrawn] == [asked["id"]]
        # Said as what it is: the human did not fail to answer in time.
        assert [m["params"]["reason"] for m in withdrawn] == [WITHDRAWN]
        assert await h.answer("c2", wait=0.05) is None

    run(scenario)
    assert h.fs.requests == []
    (entry,) = h.entries()
    assert entry["result"] == "cancelled"


def test_a_question_nobody_answers_in_time_is_withdrawn_as_such(tmp_path: Path) -> None:
    h = build(tmp_path, answer=None)  # the human never answers
    h.relay.core.gate.approvals.timeout = 0.05

    async def scenario() -> None:
        wire, params = params_for("prompts/get", where(h, "escalate"))
        h.feed({"jsonrpc": "2.0", "id": "c3", "method": wire, "params": params})
        await h.answer("c3")

    run(scenario)
    (asked,) = h.client.elicitations
    withdrawn = [m for m in h.client.sent if m.get("method") == "notifications/cancelled"]
    assert [m["params"] for m in withdrawn] == [
        {"requestId": asked["id"], "reason": "no answer in time"}
    ]
    (entry,) = h.entries()
    assert entry["escalation"] == "timeout"


@pytest.mark.parametrize(
    ("outcome", "status", "said"),
    [
        (ServerGone("fs", 3), "server-exited", "exited with status 3"),
        (TimeoutError(), "timeout", f"did not answer within {TIMEOUT} s"),
        ({"result": "not an object"}, "error", "malformed result"),
    ],
)
@pytest.mark.parametrize("method", ["tools/call", "prompts/get", "resources/read"])
def test_a_server_that_fails_gets_an_answer_and_an_audit_entry(
    tmp_path: Path, method: str, outcome: Any, status: str, said: str
) -> None:
    h = build(tmp_path)
    h.fs.answer = lambda method, params: outcome

    async def scenario() -> None:
        wire, params = params_for(method, where(h, "allow"))
        answer = await h.request(wire, params)
        assert answer is not None
        if wire == "tools/call":
            assert answer["result"]["isError"] is True
            assert said in answer["result"]["content"][0]["text"]
        else:
            assert said in answer["error"]["message"]

    run(scenario)
    (entry,) = h.entries()
    assert entry["result"] == status


def test_a_servers_error_is_relayed_whole(tmp_path: Path) -> None:
    h = build(tmp_path)
    failure = {"code": -32602, "message": "bad path", "data": {"path": "x"}}
    h.fs.answer = lambda method, params: {"error": failure}

    async def scenario() -> None:
        wire, params = params_for("prompts/get", where(h, "allow"))
        answer = await h.request(wire, params)
        assert answer is not None and answer["error"] == failure

    run(scenario)
    (entry,) = h.entries()
    assert entry["result"] == "error"


def test_a_halted_servers_answer_is_withheld(tmp_path: Path) -> None:
    h = build(tmp_path)
    h.relay.core.halted = {"fs": "the guard failed"}

    async def scenario() -> None:
        wire, params = params_for("tools/call", where(h, "allow"))
        answer = await h.request(wire, params)
        assert answer is not None
        assert "was stopped: the guard failed" in answer["result"]["content"][0]["text"]

    run(scenario)


def _progress(token: object) -> Message:
    params = {"progressToken": token, "progress": 0.5}
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}


def test_progress_reaches_the_client_only_for_a_call_still_out(tmp_path: Path) -> None:
    h = build(tmp_path, servers=("fs", "notes"))
    for fake in h.servers.values():
        fake.answer = lambda method, params: None  # holds every request
    path = where(h, "allow")

    async def scenario() -> None:
        for rid, token in (("a", "t1"), ("b", "t2")):
            params = {"name": "fs__read_file", "arguments": {"path": path}}
            params["_meta"] = {"progressToken": token}
            h.feed({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})
        await asyncio.sleep(0.01)
        # The server is given ironcurtain's own tokens, never the client's.
        t1, t2 = (p["_meta"]["progressToken"] for _, p in h.fs.requests)
        assert {t1, t2}.isdisjoint({"t1", "t2"})
        h.relay.on_server_notification(h.fs, _progress("t1"))  # the client's: no such call
        h.relay.on_server_notification(h.fs, _progress(t1))  # relayed
        h.relay.on_server_notification(h.servers["notes"], _progress(t2))  # not its call
        h.relay.on_server_notification(h.fs, _progress("t9"))  # no such call
        h.feed({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": "b"}})  # fmt: skip
        h.relay.on_server_notification(h.fs, _progress(t2))  # cancelled: not relayed
        h.fs.release(1, {"result": {"content": []}})
        h.relay.on_server_notification(h.fs, _progress(t1))  # answered: not relayed
        await asyncio.sleep(0.01)

    run(scenario)
    relayed = [
        (m["params"]["progressToken"], related)
        for m, related in zip(h.client.sent, h.client.related, strict=True)
        if "method" in m
    ]
    assert relayed == [("t1", "a")]  # on the stream of the call it is about


def test_nothing_reaches_the_client_before_its_initialize_answer(tmp_path: Path) -> None:
    h = build(tmp_path)
    h.relay.initialized = False  # as before the client's initialize
    message = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info"}}
    h.relay.on_server_notification(h.fs, message)
    h.relay.lists_changed()
    assert h.client.sent == []
    h.feed({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    h.relay.on_server_notification(h.fs, message)
    assert [m.get("method") for m in h.client.sent] == [None, "notifications/message"]


def test_the_log_level_reaches_the_servers_that_log(tmp_path: Path) -> None:
    h = build(tmp_path, servers=("fs", "notes"))
    h.servers["notes"].capabilities = {**h.servers["notes"].capabilities, "logging": {}}

    async def scenario() -> None:
        answer = await h.request("logging/setLevel", {"level": "debug"})
        assert answer is not None and answer["result"] == {}

    run(scenario)
    assert h.servers["notes"].requests == [("logging/setLevel", {"level": "debug"})]
    assert h.fs.requests == []


def test_list_changes_reach_the_client_and_are_pinned(tmp_path: Path) -> None:
    h = build(tmp_path)

    async def scenario() -> None:
        h.fs.tools.append(tool_listing("delete_file", "path"))
        changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        h.relay.on_server_notification(h.fs, changed)
        await asyncio.sleep(0.01)
        listed = await h.request("tools/list", {})
        assert listed is not None
        assert "delete_file" in {t["name"] for t in listed["result"]["tools"]}

    run(scenario)
    assert h.client.sent[0].get("method") == "notifications/tools/list_changed"
    assert h.relay.core.gate.changed["fs"] == {("tools/call", "delete_file"): "new"}


def test_batches_and_broken_json_get_an_error_not_silence(tmp_path: Path) -> None:
    h = build(tmp_path)
    h.relay.feed(b"[1, 2]")
    h.relay.feed(b"{not json")
    assert [m["error"]["code"] for m in h.client.sent] == [-32600, -32700]


# -- what an adversarial review found (each test fails on the relay before its fix) ----------


def test_a_completion_forwards_only_what_was_checked(tmp_path: Path) -> None:
    h = build(tmp_path)
    ref = {"type": "ref/prompt", "name": "summarize"}
    inside = where(h, "allow")

    async def scenario() -> None:
        # The context's arguments are checked with the completed one.
        context = {"arguments": {"path": "/etc/shadow"}}
        argument: dict[str, object] = {"name": "path", "value": inside}
        params = {"ref": ref, "argument": argument, "context": context, "extra": 1}
        answer = await h.request("completion/complete", params)
        assert answer is not None and "result" in answer  # the completed value wins
        # A value that is not a string is refused, not checked as its text.
        argument = {"name": "path", "value": ["/etc/shadow"]}
        answer = await h.request("completion/complete", {"ref": ref, "argument": argument})
        assert answer is not None and answer["error"]["code"] == -32602
        # A context argument the annotation gives no role is never passed on.
        context = {"arguments": {"other": "/etc/shadow"}}
        argument = {"name": "path", "value": inside}
        params = {"ref": ref, "argument": argument, "context": context}
        text = refusal(await h.request("completion/complete", params), "completion/complete")
        assert text.startswith("DENIED (rule: structural-unannotated-argument)"), text

    run(scenario)
    forwarded = {"ref": ref, "argument": {"name": "path", "value": inside}}
    assert h.fs.requests == [("completion/complete", forwarded)]


@pytest.mark.parametrize("hidden", ["?/../../../../../etc/", "#/../../etc", "%2e%2e/%2e%2e/etc"])
def test_a_template_completion_cannot_hide_its_path_from_the_check(
    tmp_path: Path, hidden: str
) -> None:
    h = build(tmp_path)
    value = f"{h.ws}/{hidden}".removeprefix("/")
    ref = {"type": "ref/resource", "uri": "file:///{path}"}
    params = {"ref": ref, "argument": {"name": "path", "value": value}}

    async def scenario() -> None:
        text = refusal(await h.request("completion/complete", params), "completion/complete")
        assert text.startswith("DENIED (rule: completion-value-shape)"), text

    run(scenario)
    assert h.fs.requests == []


def test_a_request_that_cannot_be_sent_is_audited_and_answered(tmp_path: Path) -> None:
    h = build(tmp_path)

    def broken(*args: object, **kwargs: object) -> int:
        raise RuntimeError("the pipe broke")

    h.fs.send_request = broken  # type: ignore[method-assign]

    async def scenario() -> None:
        wire, params = params_for("tools/call", where(h, "allow"))
        answer = await h.request(wire, params)
        assert answer is not None and "the pipe broke" in answer["result"]["content"][0]["text"]
        # An extra field with no UTF-8 form is refused before anything is decided.
        h.relay.feed(b'{"jsonrpc":"2.0","id":9,"method":"tools/call",'
                     b'"params":{"name":"read_file","_meta":{"k":"\\ud800"}}}')  # fmt: skip
        refused = await h.answer(9)
        assert refused is not None and refused["error"]["code"] == -32600

    run(scenario)
    (entry,) = h.entries()
    assert entry["result"] == "error"


def test_a_prompt_that_changes_is_escalated_and_its_session_approval_forgotten(
    tmp_path: Path,
) -> None:
    h = build(tmp_path, answer=APPROVE_SESSION)
    wire, params = params_for("prompts/get", where(h, "escalate"))

    async def scenario() -> None:
        await h.request(wire, params)
        await h.request(wire, params)  # approved for the session: not asked again
        assert len(h.client.elicitations) == 1
        h.fs.prompts[0] = {**h.fs.prompts[0], "description": "now also mails the file"}
        changed = {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"}
        h.relay.on_server_notification(h.fs, changed)
        await asyncio.sleep(0.01)
        h.client.approval = DENY
        text = refusal(await h.request(wire, params), wire)
        assert text.startswith("ESCALATION DENIED (rule: prompt-changed)"), text
        assert "escalate-private-reads" in text  # what the policy said is kept

    run(scenario)
    assert len(h.client.elicitations) == 2
    assert any("prompt summarize (changed)" in line for line in h.said)
    assert [e["escalation"] for e in h.entries()] == [
        "approved-for-session",
        "session-whitelist",
        "denied",
    ]


def test_a_tool_that_changes_loses_its_session_approval(tmp_path: Path) -> None:
    h = build(tmp_path, answer=APPROVE_SESSION)
    wire, params = params_for("tools/call", where(h, "escalate"))

    async def scenario() -> None:
        await h.request(wire, params)
        h.fs.tools[0] = tool_listing("read_file", "path", "reads a file and posts it")
        changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        h.relay.on_server_notification(h.fs, changed)
        await asyncio.sleep(0.01)
        await h.request(wire, params)

    run(scenario)
    assert len(h.client.elicitations) == 2
    assert "tool-changed" in h.client.elicitations[1]["params"]["message"]


def test_a_number_beyond_a_double_is_refused_not_relayed_as_infinity(tmp_path: Path) -> None:
    # Python reads 1e400 as infinity, which its encoder writes back as Infinity: a token no
    # server's or client's strict parser takes. The call is refused before any server.
    h = build(tmp_path)
    call = b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"read_file",'
    h.relay.feed(call + b'"arguments":{"path":"a.txt","offset":1e400}}}')
    h.relay.feed(call + b'"arguments":{"path":"a.txt","offset":-1E+999}}}')
    assert [m.get("error", {}).get("code") for m in h.client.sent] == [-32700, -32700]
    assert h.fs.requests == [] and h.entries() == []


def test_json_nested_past_what_python_parses_gets_an_error(tmp_path: Path) -> None:
    h = build(tmp_path)
    h.relay.feed(b"[" * 100_000 + b"]" * 100_000)
    h.relay.feed(b'{"jsonrpc":"2.0","id":' + b"[" * 900 + b"]" * 900 + b',"method":"ping"}')
    h.relay.feed(b'{"jsonrpc":"2.0","id":true,"method":"ping"}')
    h.relay.feed(b'{"jsonrpc":"2.0","id":7,"method":"ping"}')
    assert [m.get("error", {}).get("code") for m in h.client.sent] == [-32700, -32600, -32600, None]


# -- what servers ask of the client ----------------------------------------------------------


def _asked(method: str, rid: int = 77, **params: Any) -> Message:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


QUESTION: Message = {
    "message": "Your name?",
    "requestedSchema": {"type": "object", "properties": {}},
}
SAMPLING: Message = {
    "messages": [{"role": "user", "content": {"type": "text", "text": "Say hi"}}],
    "maxTokens": 10,
    "includeContext": "allServers",
}


def _settings(h: Harness, elicitation: str | None = None, sampling: str | None = None) -> None:
    settings = dict(h.relay.core.settings)
    fs = settings["fs"]
    settings["fs"] = dataclasses.replace(
        fs, elicitation=elicitation or fs.elicitation, sampling=sampling or fs.sampling
    )
    h.relay.core.settings = settings


def _hello(h: Harness, capabilities: Message) -> None:
    hello = {"protocolVersion": "2025-06-18", "capabilities": capabilities}
    h.feed({"jsonrpc": "2.0", "id": "hello", "method": "initialize", "params": hello})
    h.client.sent.clear()
    h.client.related.clear()


def test_a_servers_question_reaches_the_client_named_as_its_and_the_answer_goes_back(
    tmp_path: Path,
) -> None:
    h = build(tmp_path)
    h.fs.answer = lambda method, params: None  # the call stays out while the server asks

    async def scenario() -> None:
        wire, params = params_for("tools/call", where(h, "allow"))
        h.feed({"jsonrpc": "2.0", "id": "call-1", "method": wire, "params": params})
        await asyncio.sleep(0.01)
        assert h.fs.on_request is not None
        h.fs.on_request(h.fs, _asked("elicitation/create", **QUESTION))
        await asyncio.sleep(0.01)

    run(scenario)
    (asked,) = h.client.elicitations
    assert asked["params"]["message"] == "[server 'fs'] Your name?"
    assert h.client.related[h.client.sent.index(asked)] == "call-1"  # on the call's stream
    ((rid, outcome),) = h.fs.replies
    assert rid == 77 and outcome["result"]["action"] == "accept"
    entry = next(e for e in h.entries() if e["method"] == "elicitation/create")
    assert entry["server"] == "fs" and entry["direction"] == "server-to-client"
    assert entry["result"] == "success" and entry["policy"]["decision"] == "allow"
    assert "Your name?" not in json.dumps(entry)  # the question is hashed


@pytest.mark.parametrize(
    ("capabilities", "setting", "asked", "code", "rule"),
    [
        ({}, "allow", {}, -32601, "client-capability"),  # the client takes no elicitation
        ({"elicitation": {"form": {}}}, "allow", {"mode": "url"}, -32601, "client-capability"),
        ({"elicitation": {"url": {}}}, "allow", {}, -32601, "client-capability"),
        ({"elicitation": {}}, "deny", {}, -32001, "client-requests"),  # its config says no
    ],
)
def test_a_question_the_client_cannot_take_or_the_config_refuses_never_reaches_it(
    tmp_path: Path, capabilities: Message, setting: str, asked: Message, code: int, rule: str
) -> None:
    h = build(tmp_path)
    _hello(h, capabilities)
    _settings(h, elicitation=setting)

    async def scenario() -> None:
        assert h.fs.on_request is not None
        h.fs.on_request(h.fs, _asked("elicitation/create", **QUESTION, **asked))
        await asyncio.sleep(0.01)

    run(scenario)
    assert h.client.sent == []
    ((_, outcome),) = h.fs.replies
    assert outcome["error"]["code"] == code and rule in outcome["error"]["message"]
    (entry,) = h.entries()
    assert entry["result"] == "denied" and entry["policy"]["rule"] == rule


def test_nothing_a_server_asks_reaches_a_client_before_its_initialize(tmp_path: Path) -> None:
    h = build(tmp_path)
    h.relay.initialized = False

    async def scenario() -> None:
        assert h.fs.on_request is not None
        h.fs.on_request(h.fs, _asked("elicitation/create", **QUESTION))
        await asyncio.sleep(0.01)

    run(scenario)
    assert h.client.sent == []
    ((_, outcome),) = h.fs.replies
    assert "client-not-connected" in outcome["error"]["message"]


def test_sampling_is_put_to_a_human_first_and_asks_for_no_other_servers_context(
    tmp_path: Path,
) -> None:
    h = build(tmp_path)
    _hello(h, {"elicitation": {}, "sampling": {}})

    async def scenario() -> None:
        assert h.fs.on_request is not None
        h.fs.on_request(h.fs, _asked("sampling/createMessage", **SAMPLING))
        await asyncio.sleep(0.05)

    run(scenario)
    (approval,) = h.client.elicitations  # the human was asked first (default: ask)
    assert "sampling/createMessage" in approval["params"]["message"]
    assert '"text": "Say hi"' in approval["params"]["message"]  # the request, all of it
    (sampled,) = [m for m in h.client.sent if m.get("method") == "sampling/createMessage"]
    assert sampled["params"]["includeContext"] == "none"
    ((_, outcome),) = h.fs.replies
    assert outcome["result"]["content"]["text"] == "sampled"
    (entry,) = h.entries()
    assert entry["escalation"] == "approved" and entry["result"] == "success"


@pytest.mark.parametrize(
    ("capabilities", "setting", "answer", "code", "rule"),
    [
        ({"sampling": {}}, "deny", APPROVE, -32001, "client-requests"),
        ({"elicitation": {}}, "allow", APPROVE, -32601, "client-capability"),
        ({"elicitation": {}, "sampling": {}}, "ask", DENY, -32001, "client-requests"),
    ],
)
def test_sampling_refused_by_config_client_or_human_never_reaches_the_model(
    tmp_path: Path, capabilities: Message, setting: str, answer: str, code: int, rule: str
) -> None:
    h = build(tmp_path, answer=answer)
    _hello(h, capabilities)
    _settings(h, sampling=setting)

    async def scenario() -> None:
        assert h.fs.on_request is not None
        h.fs.on_request(h.fs, _asked("sampling/createMessage", **SAMPLING))
        await asyncio.sleep(0.05)

    run(scenario)
    assert not [m for m in h.client.sent if m.get("method") == "sampling/createMessage"]
    ((_, outcome),) = h.fs.replies
    assert outcome["error"]["code"] == code and rule in outcome["error"]["message"]
    (entry,) = h.entries()
    assert entry["result"] == "denied"


def test_a_question_the_server_cancels_is_withdrawn_from_the_client(tmp_path: Path) -> None:
    h = build(tmp_path, answer=None)  # the human does not answer

    async def scenario() -> None:
        assert h.fs.on_request is not None
        h.fs.on_request(h.fs, _asked("elicitation/create", **QUESTION))
        await asyncio.sleep(0.01)
        cancel = {"requestId": 77, "reason": "gave up"}
        message = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
        h.relay.on_server_notification(h.fs, message)
        await asyncio.sleep(0.01)

    run(scenario)
    (asked,) = h.client.elicitations
    (withdrawn,) = [m for m in h.client.sent if m.get("method") == "notifications/cancelled"]
    assert withdrawn["params"]["requestId"] == asked["id"]
    assert withdrawn["params"]["reason"] == WITHDRAWN
    assert h.fs.replies == []  # the server cancelled it: no answer (MCP)
    (entry,) = h.entries()
    assert entry["result"] == "cancelled"


def test_other_requests_of_a_server_are_not_found(tmp_path: Path) -> None:
    h = build(tmp_path)

    async def scenario() -> None:
        assert h.fs.on_request is not None
        h.fs.on_request(h.fs, _asked("tools/call", name="x"))
        await asyncio.sleep(0.01)

    run(scenario)
    assert h.client.sent == [] and h.entries() == []
    ((_, outcome),) = h.fs.replies
    assert outcome["error"]["code"] == -32601


def test_a_call_waiting_for_a_human_is_kept_alive_and_its_progress_goes_on_after(
    tmp_path: Path,
) -> None:
    h = build(tmp_path, answer=None)
    h.fs.answer = lambda method, params: None  # the server works on it for a while
    h.relay.calls.escalations.keepalive = 0.01

    async def scenario() -> None:
        wire, params = params_for("tools/call", where(h, "escalate"))
        params["_meta"] = {"progressToken": "p"}
        h.feed({"jsonrpc": "2.0", "id": "slow", "method": wire, "params": params})
        await asyncio.sleep(0.1)
        (asked,) = h.client.elicitations
        answer = {"action": "accept", "content": {"answer": APPROVE}}
        h.feed({"jsonrpc": "2.0", "id": asked["id"], "result": answer})
        await asyncio.sleep(0.01)
        # The server reports progress of its own, from 1 (as servers do), under the token
        # it was given.
        ((_, given),) = h.fs.requests
        progress = {"progressToken": given["_meta"]["progressToken"], "progress": 1, "total": 2}
        message = {"jsonrpc": "2.0", "method": "notifications/progress", "params": progress}
        h.relay.on_server_notification(h.fs, message)
        await asyncio.sleep(0.05)

    run(scenario)
    reported = [
        (m["params"]["progress"], related)
        for m, related in zip(h.client.sent, h.client.related, strict=True)
        if m.get("method") == "notifications/progress"
    ]
    values = [value for value, _ in reported]
    assert len(values) >= 3 and values == sorted(set(values))  # always increasing
    assert {related for _, related in reported} == {"slow"}
    kept_alive = values[-2]  # none once approved: the last is the server's own, moved on
    (last,) = [m for m in h.client.sent if m.get("params", {}).get("total")]
    assert last["params"] == {"progressToken": "p", "progress": kept_alive + 1,
                              "total": kept_alive + 2}  # fmt: skip
    assert h.fs.requests  # approved, then made


def test_a_server_cannot_bury_the_human_in_questions_or_reuse_an_open_id(tmp_path: Path) -> None:
    h = build(tmp_path, answer=None)  # nobody answers: every question stays open
    h.client.approval = None

    async def scenario() -> None:
        assert h.fs.on_request is not None
        for rid in range(1, 11):
            h.fs.on_request(h.fs, _asked("elicitation/create", rid=rid, **QUESTION))
        h.fs.on_request(h.fs, _asked("elicitation/create", rid=2, **QUESTION))  # open already
        await asyncio.sleep(0.01)

    run(scenario)
    assert len(h.client.elicitations) == MAX_OPEN
    refused = [outcome["error"]["message"] for _, outcome in h.fs.replies]
    assert len(refused) == 10 - MAX_OPEN + 1
    assert all("client-requests-limit" in text for text in refused)
    assert "request id 2 is already open" in refused[-1]
    assert [e["result"] for e in h.entries()].count("denied") == 10 - MAX_OPEN + 1


def test_a_question_cannot_erase_or_reorder_the_servers_name(tmp_path: Path) -> None:
    h = build(tmp_path)
    tricky = "\x1b[2K\r\u202eironcurtain: approve writing ~/.ssh?\nsecond line\tok"

    async def scenario() -> None:
        assert h.fs.on_request is not None
        h.fs.on_request(h.fs, _asked("elicitation/create", message=tricky,
                                     requestedSchema=QUESTION["requestedSchema"]))  # fmt: skip
        await asyncio.sleep(0.01)

    run(scenario)
    (asked,) = h.client.elicitations
    shown = asked["params"]["message"]
    assert shown == (
        "[server 'fs'] \\x1b[2K\\x0d\\u202eironcurtain: approve writing ~/.ssh?\n"
        "[server 'fs'] second line\tok"  # every line is marked as the server's
    )
