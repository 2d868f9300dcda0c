"""What a server returns, filtered before the agent sees it, through ``ironcurtain run`` with
the real ``mcp`` client: a credential in a file the real filesystem server reads is masked in
``read_text_file``'s answer and counted in the audit entry (and, with the detectors turned
off for that server, reaches the agent: what the protection stops); a tool's output policy
masks and removes fields of its structured and JSON text answer; a server's question to the
human carries no credential either."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import mcp_types as types

from tests.support.audit import audit_entries
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import BIN, IRONCURTAIN
from tests.support.probe import probe_server_config, write_raw_policy
from tests.support.sdk import call, connect

pytestmark = needs_bwrap

AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8"
NOTES = f"deploy notes\naws_access_key_id = {AWS_KEY}\ntoken: {GITHUB_TOKEN}\n"


def _filesystem_config(user: Home, mask: bool) -> Path:
    server: dict[str, Any] = {
        "command": os.path.join(BIN, "mcp-server-filesystem"),
        "args": ["${workspace}"],
    }
    if not mask:
        server["maskSecrets"] = False
    config = user.root / f"fs-{mask}.json"
    config.write_text(json.dumps({"mcpServers": {"filesystem": server}}))
    return config


def _read_notes(user: Home, mask: bool) -> tuple[bool, str]:
    ws = user.ws()
    (ws / "deploy.txt").write_text(NOTES)
    audit = user.root / f"audit-{mask}.jsonl"
    args = ["--config", str(_filesystem_config(user, mask)), "--workspace", str(ws),
            "--audit-log", str(audit), "--server", "filesystem"]  # fmt: skip
    out: list[tuple[bool, str]] = []

    async def scenario() -> None:
        async with connect(user, *args) as session:
            out.append(await call(session, "read_text_file", {"path": str(ws / "deploy.txt")}))

    asyncio.run(scenario())
    return out[0]


def test_a_key_in_a_file_is_masked_in_the_answer_and_counted_in_the_audit(user: Home) -> None:
    failed, text = _read_notes(user, mask=True)
    assert not failed
    assert AWS_KEY not in text and GITHUB_TOKEN not in text
    assert "[secret masked: aws-access-key-id]" in text and "[secret masked: github-token]" in text
    assert text.startswith("deploy notes\naws_access_key_id = ")
    audit = user.root / "audit-True.jsonl"
    entry = audit_entries(audit)[-1]
    # The server sends the file twice: as text content and as structured content.
    assert entry["output"] == {"secretsMasked": {"aws-access-key-id": 2, "github-token": 2}}
    assert AWS_KEY not in audit.read_text()


def test_with_the_detectors_off_for_that_server_the_key_reaches_the_agent(user: Home) -> None:
    failed, text = _read_notes(user, mask=False)
    assert not failed and AWS_KEY in text and GITHUB_TOKEN in text
    assert "output" not in audit_entries(user.root / "audit-False.jsonl")[-1]


def _probe_args(
    user: Home, output_policy: dict[str, Any] | None, scan_arguments: bool = True
) -> list[str]:
    config = user.root / "probe.json"
    server = probe_server_config(True)
    if not scan_arguments:
        server["scanArguments"] = False
    config.write_text(json.dumps({"mcpServers": {"probe": server}}))
    policy = write_raw_policy(user.root / "policy")
    if output_policy is not None:
        (policy / "output-policy.json").write_text(json.dumps(output_policy))
    return ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(user.ws()),
            "--audit-log", str(user.root / "audit.jsonl"), "--server", "probe",
            "--approval", "elicit"]  # fmt: skip


def test_a_tools_output_policy_masks_and_removes_fields(user: Home) -> None:
    fields = {".customer.id": "allow", ".customer.name": "allow", "..email": "mask",
              ".customer.ssn": "redact", ".note": "allow"}  # fmt: skip
    policy = {"tools": [{"server": "probe", "tool": "record", "fields": fields}]}
    got: list[types.CallToolResult] = []

    async def scenario() -> None:
        async with connect(user, *_probe_args(user, policy)) as session:
            got.append(await session.call_tool("record", {"customer_id": 7}))

    asyncio.run(scenario())
    answer = got[0]
    expected = {
        "customer": {
            "id": 7,
            "name": {"first_name": "Ada", "last_name": "Lovelace"},
            "email": "[masked by the output policy]",
        },
        "note": "api key [secret masked: aws-access-key-id] in a field the policy lets through",
    }
    assert answer.structured_content == expected
    text = "".join(getattr(c, "text", "") for c in answer.content)
    assert json.loads(text) == expected and "123-45-6789" not in text
    entry = audit_entries(user.root / "audit.jsonl")[-1]
    # Counted twice over: in the structured answer and in its JSON text.
    assert entry["output"] == {
        "fieldsMasked": 2,
        "fieldsRemoved": 2,
        "secretsMasked": {"aws-access-key-id": 2},
    }


def test_without_an_output_policy_every_field_passes(user: Home) -> None:
    got: list[types.CallToolResult] = []

    async def scenario() -> None:
        async with connect(user, *_probe_args(user, None)) as session:
            got.append(await session.call_tool("record", {"customer_id": 7}))

    asyncio.run(scenario())
    structured = got[0].structured_content
    assert structured is not None and structured["customer"]["ssn"] == "123-45-6789"


def test_a_servers_question_carries_no_credential(user: Home) -> None:
    asked: list[str] = []

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(getattr(params, "message", ""))
        return types.ElicitResult(action="decline")

    async def scenario() -> None:
        # The agent's own argument holds the key: the argument scan (attacked on its own
        # elsewhere) would stop the call before the server could ask; here the server asks.
        args = _probe_args(user, None, scan_arguments=False)
        async with connect(user, *args, elicitation=elicit) as session:
            await call(session, "ask_user", {"question": f"Is {AWS_KEY} your key?"})

    asyncio.run(scenario())
    assert asked == ["[server 'probe'] Is [secret masked: aws-access-key-id] your key?"]


def test_an_output_policy_for_a_server_or_tool_that_does_not_exist_is_an_error(
    user: Home,
) -> None:
    for entry, code, says in [
        ({"server": "crm", "tool": "get", "fields": {".id": "allow"}}, 2,
         "$.tools[0].server: 'crm' matches no server of the config (it defines: probe)"),
        ({"server": "probe", "tool": "get_*", "fields": {".id": "allow"}}, 1,
         "$.tools[0].tool: 'get_*' matches no tool of probe (its tools: "),
    ]:  # fmt: skip
        args = _probe_args(user, {"tools": [entry]})
        done = subprocess.run(
            [IRONCURTAIN, "run", *args], env=user.env, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == code, done.stderr
        assert "output-policy.json: " + says in done.stderr
        assert "Traceback" not in done.stderr and "ready, serving" not in done.stderr


def test_check_previews_what_the_agent_would_get(user: Home) -> None:
    fields = {".customer.id": "allow", "..email": "mask"}
    args = _probe_args(user, {"tools": [{"server": "probe", "tool": "record", "fields": fields}]})
    sample = {"customer": {"id": 7, "email": "ada@example.com", "ssn": "1"}, "key": AWS_KEY}
    done = subprocess.run(
        [IRONCURTAIN, "check", "probe", "record", "--args", '{"customer_id": 7}',
         *args[:6], "--output", json.dumps(sample)],
        env=user.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "output policy: probe/record" in done.stdout
    # Counted in the structured content and again in its JSON text; the key was removed
    # by the policy before the detectors looked.
    assert "filtered:  2 fields masked, 4 removed; credentials: none found" in done.stdout
    shown = json.loads(done.stdout.split("the agent gets:\n", 1)[1])
    expected = {"customer": {"id": 7, "email": "[masked by the output policy]"}}
    assert shown["structuredContent"] == expected
    assert json.loads(shown["content"][0]["text"]) == expected


def test_a_policy_that_breaks_a_tools_output_schema_is_reported_at_start(user: Home) -> None:
    policy = {"tools": [{"server": "probe", "tool": "card", "fields": {".id": "allow"}}]}
    done = subprocess.run(
        [IRONCURTAIN, "run", *_probe_args(user, policy)], env=user.env,
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (
        "WARNING: the output policy of probe/card breaks its outputSchema (a client that "
        "checks results will refuse them): .ssn is required and removed"
    ) in done.stderr
    fine = {
        "tools": [{"server": "probe", "tool": "card", "fields": {".id": "allow", ".ssn": "mask"}}]
    }
    done = subprocess.run(
        [IRONCURTAIN, "run", *_probe_args(user, fine)], env=user.env,
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and "outputSchema" not in done.stderr
