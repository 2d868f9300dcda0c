"""A caller's permissions through the relay core in-process (fake servers, the real engine,
gate, approvals and audit log): what ``permissions.json`` requires is checked before the
policy; the client is told only that the operation is not permitted, the audit entry what
was missing; listings show a caller what it may call; compiled rules may name callers; and
without a caller nothing changes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from launcher.shared.caller_identity import STATIC, Caller
from tests.support.relay import RULES, Harness, build, run, tool_listing

NOT_PERMITTED = "DENIED (rule: caller-permissions): operation not permitted"
PERMISSIONS = {
    "tools": [
        {"server": "*", "tool": "write_*", "required": ["fs:write"]},
        {"server": "*", "tool": "*", "required": ["fs:use"]},
    ],
    "prompts": [{"server": "fs", "prompt": "summarize", "required": ["fs:prompts"]}],
}
READER = Caller("reader", frozenset({"fs:use"}), STATIC)
WRITER = Caller("writer", frozenset({"fs:use", "fs:write", "fs:prompts"}), "https://id.example")
NOBODY = Caller("nobody", frozenset(), STATIC)


def _build(tmp_path: Path, caller: Caller | None, **options: Any) -> Harness:
    options.setdefault("permissions", PERMISSIONS)
    return build(tmp_path, caller=caller, **options)


def _call(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "arguments": {"path": path}}


def _names(answer: dict[str, Any] | None, key: str) -> list[str]:
    assert answer is not None
    return [item["name"] for item in answer["result"][key]]


def test_a_call_without_the_permission_is_denied_and_never_reaches_the_server(
    tmp_path: Path,
) -> None:
    h = _build(tmp_path, READER)
    inside = str(h.ws / "a.txt")

    async def scenario() -> None:
        answer = await h.request("tools/call", _call("write_file", inside))
        assert answer is not None
        assert answer["result"] == {
            "content": [{"type": "text", "text": NOT_PERMITTED}],
            "isError": True,
        }

    run(scenario)
    assert h.fs.requests == []
    (entry,) = h.entries()
    assert entry["policy"] == {
        "decision": "deny",
        "rule": "caller-permissions",
        "reason": "operation not permitted",
        "missing": ["fs:write"],
    }
    assert entry["result"] == "denied" and entry["tool"] == "write_file"
    # What was missing is the audit's, never the client's.
    assert "fs:write" not in json.dumps(h.client.sent)


def test_a_call_the_policy_would_escalate_is_denied_without_asking_anyone(
    tmp_path: Path,
) -> None:
    h = _build(tmp_path, NOBODY)
    private = str(h.ws / "private" / "key.txt")  # the rules escalate this read

    async def scenario() -> None:
        answer = await h.request("tools/call", _call("read_file", private))
        assert answer is not None
        assert answer["result"]["content"][0]["text"] == NOT_PERMITTED

    run(scenario)
    assert h.client.elicitations == [] and h.fs.requests == []
    (entry,) = h.entries()
    assert entry["policy"]["missing"] == ["fs:use"] and entry["escalation"] is None


def test_with_the_permissions_the_policy_decides_as_before(tmp_path: Path) -> None:
    h = _build(tmp_path, WRITER)
    inside, outside = str(h.ws / "a.txt"), str(tmp_path / "outside.txt")

    async def scenario() -> None:
        allowed = await h.request("tools/call", _call("read_file", inside))
        assert allowed is not None and not allowed["result"]["isError"]
        denied = await h.request("tools/call", _call("read_file", outside))
        assert denied is not None
        assert denied["result"]["content"][0]["text"].startswith("DENIED (rule: default-deny)")

    run(scenario)
    assert h.fs.methods == ["tools/call"]
    allowed, denied = h.entries()
    assert allowed["policy"]["rule"] == "allow-reads-in-workspace"
    assert "missing" not in allowed["policy"] and "missing" not in denied["policy"]


def test_listings_show_a_caller_only_what_it_may_call(tmp_path: Path) -> None:
    h = _build(tmp_path, READER)

    async def scenario() -> None:
        assert _names(await h.request("tools/list", {}), "tools") == ["read_file"]
        assert _names(await h.request("prompts/list", {}), "prompts") == []
        # The caller's latest token carries more: the listing follows at once.
        h.relay.core.caller = WRITER
        assert _names(await h.request("tools/list", {}), "tools") == ["read_file", "write_file"]
        assert _names(await h.request("prompts/list", {}), "prompts") == ["summarize"]
        h.relay.core.caller = NOBODY
        assert _names(await h.request("tools/list", {}), "tools") == []

    run(scenario)


def test_a_listing_is_filtered_anew_when_the_servers_lists_change(tmp_path: Path) -> None:
    h = _build(tmp_path, READER)

    async def scenario() -> None:
        assert _names(await h.request("tools/list", {}), "tools") == ["read_file"]
        h.fs.tools = [*h.fs.tools, tool_listing("write_notes", "path"), tool_listing("ls", "p")]
        h.relay.lists_changed()
        assert _names(await h.request("tools/list", {}), "tools") == ["read_file", "ls"]

    run(scenario)


def test_what_the_policy_denies_is_still_listed(tmp_path: Path) -> None:
    # The rules allow no write at all; a caller holding fs:write is still shown write_file.
    h = _build(tmp_path, WRITER)

    async def scenario() -> None:
        assert "write_file" in _names(await h.request("tools/list", {}), "tools")

    run(scenario)


def test_a_prompt_and_a_completion_of_its_argument_are_denied_without_the_permission(
    tmp_path: Path,
) -> None:
    h = _build(tmp_path, READER)
    inside = str(h.ws / "a.txt")

    async def scenario() -> None:
        got = await h.request("prompts/get", {"name": "summarize", "arguments": {"path": inside}})
        assert got is not None and got["error"] == {"code": -32001, "message": NOT_PERMITTED}
        ref = {"type": "ref/prompt", "name": "summarize"}
        params = {"ref": ref, "argument": {"name": "path", "value": inside}}
        completed = await h.request("completion/complete", params)
        assert completed is not None
        assert completed["error"] == {"code": -32001, "message": NOT_PERMITTED}
        # A resource template's completion requires nothing (permissions.json names tools
        # and prompts): the policy decides it.
        ref = {"type": "ref/resource", "uri": "file:///{path}"}
        params = {"ref": ref, "argument": {"name": "path", "value": inside.lstrip("/")}}
        template = await h.request("completion/complete", params)
        assert template is not None and "result" in template

    run(scenario)
    assert h.fs.methods == ["completion/complete"]
    prompt, completion, _ = h.entries()
    assert prompt["policy"]["missing"] == completion["policy"]["missing"] == ["fs:prompts"]
    assert "fs:prompts" not in json.dumps(h.client.sent)


def test_with_the_permission_the_prompt_is_got(tmp_path: Path) -> None:
    h = _build(tmp_path, WRITER)
    inside = str(h.ws / "a.txt")

    async def scenario() -> None:
        got = await h.request("prompts/get", {"name": "summarize", "arguments": {"path": inside}})
        assert got is not None and "result" in got

    run(scenario)
    assert h.fs.methods == ["prompts/get"]


CALLER_RULES = {
    "rules": [
        {
            "name": "writers-write-the-workspace",
            "if": {
                "caller": ["writ*"],
                "effect": ["write"],
                "paths": {"roles": ["write-path"], "within": "${ws}"},
            },
            "then": "allow",
            "reason": "writers write",
        },
        *RULES["rules"],
    ]
}


def test_a_compiled_rule_naming_callers_applies_to_those_only(tmp_path: Path) -> None:
    everyone: dict[str, Any] = {"tools": [], "prompts": []}
    for caller, rule in [
        (WRITER, "writers-write-the-workspace"),
        (Caller("rewriter", frozenset(), STATIC), "default-deny"),
        (Caller("Writer", frozenset(), STATIC), "default-deny"),
        (None, "default-deny"),
    ]:
        h = _build(tmp_path / str(caller), caller, rules=CALLER_RULES, permissions=everyone)

        async def scenario(h: Harness = h, rule: str = rule) -> None:
            answer = await h.request("tools/call", _call("write_file", str(h.ws / "new.txt")))
            assert answer is not None
            assert bool(answer["result"]["isError"]) is (rule == "default-deny")

        run(scenario)
        assert [e["policy"]["rule"] for e in h.entries()] == [rule]


def test_without_a_caller_nothing_is_required_or_hidden(tmp_path: Path) -> None:
    h = _build(tmp_path, None)
    inside = str(h.ws / "a.txt")

    async def scenario() -> None:
        assert _names(await h.request("tools/list", {}), "tools") == ["read_file", "write_file"]
        assert _names(await h.request("prompts/list", {}), "prompts") == ["summarize"]
        answer = await h.request("tools/call", _call("read_file", inside))
        assert answer is not None and not answer["result"]["isError"]
        got = await h.request("prompts/get", {"name": "summarize", "arguments": {"path": inside}})
        assert got is not None and "result" in got

    run(scenario)
    assert h.fs.methods == ["tools/call", "prompts/get"]
    assert all("missing" not in e["policy"] for e in h.entries())


def test_without_a_permissions_file_a_caller_is_refused_nothing(tmp_path: Path) -> None:
    h = _build(tmp_path, NOBODY, permissions=None)
    inside = str(h.ws / "a.txt")

    async def scenario() -> None:
        assert _names(await h.request("tools/list", {}), "tools") == ["read_file", "write_file"]
        answer = await h.request("tools/call", _call("read_file", inside))
        assert answer is not None and not answer["result"]["isError"]

    run(scenario)


def test_an_approval_for_the_session_does_not_outlast_the_permission(tmp_path: Path) -> None:
    from launcher.relay.approving.approval import APPROVE_SESSION

    h = _build(tmp_path, WRITER, answer=APPROVE_SESSION)
    private = str(h.ws / "private" / "key.txt")  # escalated: a human approves it for the session

    async def scenario() -> None:
        for caller in (WRITER, WRITER, NOBODY, WRITER):
            h.relay.core.caller = caller  # the caller's latest token
            answer = await h.request("tools/call", _call("read_file", private))
            assert answer is not None
            text = answer["result"]["content"][0]["text"]
            assert (text == NOT_PERMITTED) is (caller is NOBODY), text

    run(scenario)
    assert len(h.client.elicitations) == 1 and h.fs.methods == ["tools/call"] * 3
    assert [e["escalation"] for e in h.entries()] == [
        "approved-for-session", "session-whitelist", None, "session-whitelist",
    ]  # fmt: skip


def test_completing_a_prompt_on_a_server_without_completions_is_refused_and_audited(
    tmp_path: Path,
) -> None:
    # As the agent: the prompt is hidden; where its server completes nothing, asking for a
    # completion of its argument must not answer "nothing to complete" (which a name no
    # server offers is not), unrecorded.
    h = _build(tmp_path, READER)
    h.fs.capabilities.pop("completions")
    h.relay.lists_changed()

    async def scenario() -> None:
        ref = {"type": "ref/prompt", "name": "summarize"}
        params = {"ref": ref, "argument": {"name": "path", "value": "a"}}
        completed = await h.request("completion/complete", params)
        assert completed is not None
        assert completed["error"] == {"code": -32001, "message": NOT_PERMITTED}

    run(scenario)
    assert h.fs.methods == []
    (entry,) = h.entries()
    assert entry["policy"]["missing"] == ["fs:prompts"]


def test_completing_on_a_server_without_completions_still_answers_nothing_when_permitted(
    tmp_path: Path,
) -> None:
    h = _build(tmp_path, WRITER)
    h.fs.capabilities.pop("completions")
    h.relay.lists_changed()

    async def scenario() -> None:
        ref = {"type": "ref/prompt", "name": "summarize"}
        params = {"ref": ref, "argument": {"name": "path", "value": "a"}}
        completed = await h.request("completion/complete", params)
        assert completed is not None
        assert completed["result"]["completion"] == {"values": [], "hasMore": False}

    run(scenario)
    assert h.fs.methods == [] and h.entries() == []


def _list_changes(h: Harness) -> list[str]:
    return [str(m["method"]) for m in h.client.sent if str(m.get("method", "")).endswith("changed")]


def test_a_token_that_changes_what_the_caller_may_see_tells_its_client_the_lists_changed(
    tmp_path: Path,
) -> None:
    h = _build(tmp_path, READER)
    narrow = READER
    wide = Caller(READER.name, frozenset({"fs:use", "fs:write"}), READER.issuer)

    async def scenario() -> None:
        assert _names(await h.request("tools/list", {}), "tools") == ["read_file"]
        h.relay.serve(narrow)  # the same again: nothing to tell
        assert _list_changes(h) == []
        h.relay.serve(wide)
        assert _list_changes(h) == [
            "notifications/tools/list_changed",
            "notifications/prompts/list_changed",
        ]
        assert _names(await h.request("tools/list", {}), "tools") == ["read_file", "write_file"]
        h.relay.serve(narrow)
        assert len(_list_changes(h)) == 4
        assert _names(await h.request("tools/list", {}), "tools") == ["read_file"]

    run(scenario)


def test_without_permissions_json_a_new_token_tells_nothing(tmp_path: Path) -> None:
    h = build(tmp_path, caller=READER)

    async def scenario() -> None:
        await h.request("tools/list", {})
        h.relay.serve(Caller(READER.name, frozenset({"other"}), READER.issuer))
        assert _list_changes(h) == []

    run(scenario)
