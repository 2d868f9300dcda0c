"""An approved call that needs a path beyond its server's sandbox runs in an instance of its
own, and what it changed is carried over to the host after its answer. When its server (of
the stateless era) asks a question first, nothing reaches the host before the question is
answered, and the retry goes to the same instance."""

from __future__ import annotations

import json
import sys
from typing import Any

import httpx2

from tests.support.audit import audit_entries
from tests.support.home import Home
from tests.support.http import ACCEPT, TOKEN, serving
from tests.support.marks import needs_bwrap
from tests.support.paths import TESTS

pytestmark = needs_bwrap
WRITER = TESTS / "servers" / "stateless_writer.py"
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}  # fmt: skip


def _post(url: str, rid: int, params: dict[str, Any]) -> dict[str, Any]:
    headers = {"Content-Type": "application/json", "Accept": ACCEPT,
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
               "Mcp-Name": "write_file", "Authorization": f"Bearer {TOKEN}"}  # fmt: skip
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
    answer: dict[str, Any] = httpx2.post(url, json=body, headers=headers, timeout=60).json()
    return answer


def test_a_widened_call_whose_server_asks_is_carried_over_only_after_the_answer(
    user: Home,
) -> None:
    notes = user.root / "notes"
    notes.mkdir()
    target = notes / "todo.md"
    sandbox = {"filesystem": {"allowRead": [str(WRITER.parent)], "allowWrite": ["${workspace}"]}}
    server = {"command": sys.executable, "args": [str(WRITER)], "sandbox": sandbox,
              "clientRequests": {"elicitation": "allow"}}  # fmt: skip
    config = user.root / "c.json"
    config.write_text(json.dumps({"mcpServers": {"w": server}}))
    policy = user.root / "policy"
    policy.mkdir()
    write = {"toolName": "write_file", "serverName": "w", "effect": "write", "sideEffects": True,
             "args": {"path": ["write-path"], "content": ["none"]}}  # fmt: skip
    (policy / "tool-annotations.json").write_text(
        json.dumps({"servers": {"w": {"tools": [write]}}})
    )
    ask = {"name": "ask-writes", "if": {"effect": ["write"]}, "then": "escalate",
           "reason": "writes need a human"}  # fmt: skip
    (policy / "compiled-policy.json").write_text(json.dumps({"rules": [ask]}))
    args = ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(user.ws()),
            "--audit-log", str(user.root / "audit.jsonl"), "--server", "w"]  # fmt: skip
    call = {"name": "write_file", "arguments": {"path": str(target), "content": "milk\n"}}
    call["_meta"] = META
    with serving(user, *args) as served:
        first = _post(served.url, 1, call)["result"]
        approve = {"ironcurtain/approval": {"action": "accept", "content": {"answer": "approve"}}}
        state = first["requestState"]
        second = _post(served.url, 2, {**call, "inputResponses": approve, "requestState": state})
        assert second["result"]["inputRequests"]["keep"]["method"] == "elicitation/create"
        assert not target.exists()  # the server wrote it in its instance: not on the host yet
        keep = {"keep": {"action": "accept", "content": {}}}
        state = second["result"]["requestState"]
        third = _post(served.url, 3, {**call, "inputResponses": keep, "requestState": state})
        assert json.loads(third["result"]["content"][0]["text"]) == keep  # the same instance
    assert target.read_text() == "milk\n"
    (entry,) = [e for e in audit_entries(user.root / "audit.jsonl") if e["method"] == "tools/call"]
    assert entry["escalation"] == "approved" and entry["result"] == "success"
    assert entry["carriedOver"][0]["outcome"] == "written"
