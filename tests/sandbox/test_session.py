"""``ironcurtain run`` end to end: real bwrap, real reference servers, the real MCP client."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from mcp import MCPError as McpError

from tests.support.audit import audit_entries
from tests.support.cli import run_args
from tests.support.client import Client
from tests.support.home import Home, git_repo
from tests.support.marks import needs_bwrap
from tests.support.paths import TESTS
from tests.support.probe import probe_calls, probe_server_config, write_probe_config
from tests.support.sdk import call, connect

pytestmark = needs_bwrap


def run(coro: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(coro())  # type: ignore[arg-type]


def test_reference_servers_work_and_are_listed(user: Home) -> None:
    ws = user.ws()
    git_repo(ws)
    audit = user.root / "audit.jsonl"

    async def scenario() -> None:
        async with connect(user, "--workspace", str(ws), "--audit-log", str(audit)) as s:
            names = {t.name for t in (await s.list_tools()).tools}
            assert {"filesystem__read_file", "git__git_status", "time__get_current_time"} <= names
            error, text = await call(s, "git__git_status", {"repo_path": str(ws)})
            assert not error and "README.md" in text
            error, text = await call(
                s, "filesystem__write_file", {"path": "sub-note.txt", "content": "written"}
            )
            assert not error, text
            error, text = await call(s, "filesystem__read_text_file", {"path": "sub-note.txt"})
            assert (error, text) == (False, "written")
            error, text = await call(s, "time__get_current_time", {"timezone": "UTC"})
            assert not error and "UTC" in text

    run(scenario)
    assert (ws / "sub-note.txt").read_text() == "written"
    entries = audit_entries(audit)
    assert [e["result"] for e in entries] == ["success"] * 4
    assert all(e["sandboxed"] is True for e in entries)
    write = entries[1]
    assert write["arguments"]["content"].startswith("sha256:")
    assert "written" not in audit.read_text()


def test_denied_calls_never_reach_the_server(user: Home) -> None:
    ws = user.ws()
    outside = user.root / "outside"
    outside.mkdir()
    (outside / "loot.txt").write_text(user.secret)
    (ws / "escape").symlink_to(outside)
    audit = user.root / "audit.jsonl"
    config = user.config / "ironcurtain" / "mcp-servers.json"
    config.parent.mkdir(parents=True)
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "filesystem": {
                        "command": "mcp-server-filesystem",
                        "args": [str(ws), str(outside)],
                    }
                }
            }
        )
    )
    attacks = [
        ({"path": "/etc/passwd"}, "structural-system-root"),
        ({"path": "~/.ssh/id_rsa"}, "deny-read-elsewhere"),
        ({"path": str(config)}, "structural-protected-path"),
        ({"path": str(audit)}, "structural-protected-path"),
        ({"path": "escape/loot.txt"}, "deny-read-elsewhere"),
        ({"path": str(ws / "escape" / ".." / "outside" / "loot.txt")}, "deny-read-elsewhere"),
    ]

    async def scenario() -> None:
        # The server itself is told it may read `outside` too: only the policy stands between.
        async with connect(user, "--workspace", str(ws), "--audit-log", str(audit)) as s:
            for args, _rule in attacks:
                error, text = await call(s, "filesystem__read_text_file", args)
                assert error and text.startswith("DENIED"), text
                assert user.secret not in text

    run(scenario)
    entries = audit_entries(audit)
    assert [(e["policy"]["decision"], e["policy"]["rule"], e["result"]) for e in entries] == [
        ("deny", rule, "denied") for _, rule in attacks
    ]
    assert user.secret not in audit.read_text()


PROBE_ATTACKS = [
    ("read_path", {"path": "{home}/.ssh/id_rsa"}, "READ OK"),
    ("write_path", {"path": "{home}/.bashrc", "content": "pwned"}, "WRITE OK"),
    ("env_value", {"name": "CALLER_SECRET_TOKEN"}, "<unset>"),
    ("env_value", {"name": "PROBE_LOG"}, "declared"),
]


def _probe_results(user: Home, sandboxed: bool) -> list[str]:
    ws = user.ws("probe-ws")
    config = write_probe_config(user, probe_server_config(sandboxed))
    policy = TESTS / "data" / "probe-policy-allow-all"
    results: list[str] = []

    async def scenario() -> None:
        async with connect(
            user, "--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)
        ) as s:
            for tool, args, _ in PROBE_ATTACKS:
                filled = {k: v.format(home=user.home, root=user.root) for k, v in args.items()}
                results.append((await call(s, f"probe__{tool}", filled))[1])

    run(scenario)
    return results


def test_sandbox_contains_a_server_the_policy_allows(user: Home) -> None:
    results = _probe_results(user, sandboxed=True)
    assert results[0].startswith("READ FAILED") and user.secret not in results[0]
    assert results[1].startswith("WRITE FAILED")
    assert not (user.home / ".bashrc").exists()
    assert results[2] == "<unset>"
    assert results[3].endswith("probe-calls.jsonl")  # declared variables do arrive


def test_the_probe_really_attacks_when_unsandboxed(user: Home) -> None:
    # The same calls with the OS layer switched off succeed: the probe is a real attacker.
    results = _probe_results(user, sandboxed=False)
    assert results[0] == "READ OK: " + user.secret
    assert results[1] == "WRITE OK" and (user.home / ".bashrc").read_text() == "pwned"
    # The caller's environment is never handed to a server, sandboxed or not.
    assert results[2] == "<unset>" and results[3].endswith("probe-calls.jsonl")


def test_single_server_names_are_unprefixed(user: Home) -> None:
    ws = user.ws()

    async def scenario() -> None:
        async with connect(user, "--workspace", str(ws), "--server", "time") as s:
            names = {t.name for t in (await s.list_tools()).tools}
            assert names == {"get_current_time", "convert_time"}
            error, _ = await call(s, "get_current_time", {"timezone": "UTC"})
            assert not error

    run(scenario)


def _workspace_read_policy(user: Home) -> Path:
    policy = user.root / "probe-policy"
    policy.mkdir()
    base = TESTS / "data" / "probe-policy-allow-all"
    (policy / "tool-annotations.json").write_text((base / "tool-annotations.json").read_text())
    (policy / "compiled-policy.json").write_text(
        json.dumps(
            {
                "rules": [
                    {
                        "name": "allow-read-in-workspace",
                        "if": {
                            "effect": ["read"],
                            "paths": {"roles": ["read-path"], "within": "${workspace}"},
                        },
                        "then": "allow",
                        "reason": "ws",
                    },
                    {
                        "name": "allow-greetings",
                        "if": {"prompt": ["greet"]},
                        "then": "allow",
                        "reason": "a greeting reads nothing",
                    },
                ]
            }
        )
    )
    return policy


def test_policy_denial_is_not_forwarded_to_the_probe(user: Home) -> None:
    ws = user.ws("probe-ws")
    config = write_probe_config(user)
    policy = _workspace_read_policy(user)

    async def scenario() -> None:
        async with connect(
            user, "--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)
        ) as s:
            error, text = await call(s, "probe__read_path", {"path": str(ws / "x")})
            assert not error and text.startswith("READ FAILED")
            error, text = await call(s, "probe__read_path", {"path": str(user.home / "x")})
            assert error and text.startswith("DENIED (rule: default-deny)")

    run(scenario)
    calls = probe_calls(ws)
    assert calls == [{"tool": "read_path", "path": str(ws / "x")}]


def test_prompts_and_resources_are_routed_and_file_reads_checked(user: Home) -> None:
    ws = user.ws("probe-ws")
    (ws / "hello.txt").write_text("hello from the workspace")
    (user.root / "outside.txt").write_text(user.secret)
    config = write_probe_config(user)
    policy = _workspace_read_policy(user)
    audit = user.root / "audit.jsonl"

    async def scenario() -> None:
        async with connect(user, *run_args(config, policy, ws, audit)) as s:
            prompts = {p.name for p in (await s.list_prompts()).prompts}
            assert prompts == {"probe__greet"}
            got = await s.get_prompt("probe__greet", {"name": "Ada"})
            assert "Hello Ada" in got.messages[0].content.text  # type: ignore[union-attr]
            uris = {str(r.uri) for r in (await s.list_resources()).resources}
            assert f"file://{ws}/hello.txt" in uris and "probe://status" in uris
            read = await s.read_resource(f"file://{ws}/hello.txt")
            assert read.contents[0].text == "hello from the workspace"  # type: ignore[union-attr]
            read = await s.read_resource("probe://status")
            assert read.contents[0].text == "probe ok"  # type: ignore[union-attr]
            for uri, rule in [
                ("file:///etc/hostname", "structural-system-root"),
                (f"file://{ws}/../outside.txt", "default-deny"),
            ]:
                with pytest.raises(McpError, match=rf"DENIED \(rule: {rule}\)"):
                    await s.read_resource(uri)
            # A URI the probe does not list still goes to it (the one server with
            # resources), and is decided as a read of that path: outside, so denied.
            with pytest.raises(McpError, match=r"DENIED \(rule: default-deny\)"):
                await s.read_resource("file:///nowhere")

    run(scenario)
    calls = probe_calls(ws)
    assert [c.get("uri") for c in calls] == ["hello.txt", "probe://status"]
    entries = audit_entries(audit)
    assert [(e["method"], e["tool"], e["result"]) for e in entries] == [
        ("prompts/get", "greet", "success"),
        ("resources/read", "resources/read", "success"),
        ("resources/read", "resources/read", "success"),
        ("resources/read", "resources/read", "denied"),
        ("resources/read", "resources/read", "denied"),
        ("resources/read", "resources/read", "denied"),  # listed by nobody, outside
    ]
    assert user.secret not in audit.read_text()


TS_SDK = (
    Path(sys.prefix)
    / "lib/node_modules/@modelcontextprotocol/server-filesystem/node_modules"
    / "@modelcontextprotocol/sdk"
)
# URI parsers (WHATWG's, which the TypeScript SDK's server uses) drop leading spaces and
# controls and remove tabs and newlines anywhere: each of these is read as file://PATH.
DISGUISES = (" file://{}", "\x01file://{}", "fi\tle://{}")


def _ts_file_server() -> dict[str, Any]:
    assert (TS_SDK / "dist" / "esm" / "server" / "mcp.js").is_file(), (
        "the TypeScript SDK comes with the filesystem server: run scripts/install.sh"
    )
    return {
        "command": "node",
        "args": [str(TESTS / "servers" / "ts_file_resources.mjs")],
        "env": {"TS_SDK": str(TS_SDK)},
        "sandbox": False,  # only the gate stands between the agent and the file
    }


def test_the_typescript_sdk_reads_a_disguised_file_uri(user: Home) -> None:
    # The attack's premise, spoken to the server directly: the disguise reads the file.
    server = _ts_file_server()
    secret = user.root / "outside.txt"
    secret.write_text(user.secret)
    client = Client.spawn([server["command"], *server["args"]], {**user.env, **server["env"]})
    try:
        client.initialize()
        for disguise in DISGUISES:
            rid = client.request("resources/read", {"uri": disguise.format(secret)})
            read = client.answer(rid)
            assert read["result"]["contents"][0]["text"] == user.secret, read
    finally:
        client.close(timeout=10)


def test_a_file_uri_disguised_for_the_gate_is_refused(user: Home) -> None:
    server = _ts_file_server()
    ws = user.ws("probe-ws")
    secret = user.root / "outside.txt"
    secret.write_text(user.secret)
    config = user.root / "files.json"
    config.write_text(json.dumps({"mcpServers": {"probe": server}}))
    policy = _workspace_read_policy(user)
    audit = user.root / "audit.jsonl"
    out: list[str] = []

    async def scenario() -> None:
        async with connect(user, *run_args(config, policy, ws, audit)) as s:
            for disguise in DISGUISES:
                try:
                    read = await s.read_resource(disguise.format(secret))
                    out.append(f"read: {read.contents[0]}")
                except McpError as exc:
                    out.append(str(exc))

    run(scenario)
    assert all(o.startswith("DENIED (rule: structural-uri-shape)") for o in out), out
    assert user.secret not in audit.read_text()


def test_state_dir_inside_the_workspace_stays_read_only_in_the_sandbox(user: Home) -> None:
    # The workspace holds ironcurtain's state (audit logs), as a home would (a home is never
    # a workspace). The policy is told the write argument is not a path, and a bare relative
    # path slips past the path heuristic: only the sandbox stands between the probe and the
    # audit logs.
    ws = user.ws("everything")
    state = ws / ".local" / "state"
    env = {**user.env, "XDG_STATE_HOME": str(state)}
    (state / "ironcurtain" / "audit").mkdir(parents=True)
    config = write_probe_config(user)
    policy = user.root / "blind-policy"
    policy.mkdir()
    base = TESTS / "data" / "probe-policy-allow-all"
    annotations = json.loads((base / "tool-annotations.json").read_text())
    for tool in annotations["servers"]["probe"]["tools"]:
        if tool["toolName"] == "write_path":
            tool["args"]["path"] = ["none"]
    (policy / "tool-annotations.json").write_text(json.dumps(annotations))
    (policy / "compiled-policy.json").write_text((base / "compiled-policy.json").read_text())
    target = ".local/state/ironcurtain/audit/planted.jsonl"

    args = ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)]

    async def scenario() -> None:
        async with connect(replace(user, env=env), *args) as s:
            error, text = await call(s, "probe__write_path", {"path": target, "content": "x"})
            assert not error and text.startswith("WRITE FAILED"), text
            error, text = await call(s, "probe__write_path", {"path": "ok.txt", "content": "x"})
            assert text == "WRITE OK"

    run(scenario)
    assert not (ws / target).exists()
    assert (ws / "ok.txt").read_text() == "x"
