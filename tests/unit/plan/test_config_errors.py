"""Every kind of bad input: one clear message naming file and location, exit 2, no traceback,
and nothing started or created. (What is refused while planning the sandboxes, which needs a
working bwrap: ``tests/sandbox/test_plan_refusals.py``; a server that fails to start:
``tests/sandbox/test_start_failure.py``.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.marks import needs_bwrap

GOOD_SERVER = {"command": "mcp-server-time"}


CASES = [
    (
        "invalid-json",
        '{"mcpServers": {"a": {"command": "x",}}}',
        (),
        "line 1 column 38",
        "invalid JSON",
    ),
    (
        "wrong-type",
        json.dumps({"mcpServers": {"a": {"command": "x", "args": "-v"}}}),
        (),
        "$.mcpServers.a.args",
        "valid list",
    ),
    (
        "missing-command",
        json.dumps({"mcpServers": {"a": {"args": []}}}),
        (),
        "$.mcpServers.a.command",
        "Field required",
    ),
    (
        "unset-variable",
        json.dumps(
            {
                "mcpServers": {
                    "a": {**GOOD_SERVER, "env": {"TOKEN": "${IRONCURTAIN_TEST_UNSET_VAR}"}}
                }
            }
        ),
        (),
        "$.mcpServers.a.env.TOKEN",
        "${IRONCURTAIN_TEST_UNSET_VAR} is not set",
    ),
    (
        "relative-sandbox-path",
        json.dumps(
            {
                "mcpServers": {
                    "a": {**GOOD_SERVER, "sandbox": {"filesystem": {"allowRead": ["src/lib"]}}}
                }
            }
        ),
        (),
        "$.mcpServers.a.sandbox.filesystem.allowRead[0]",
        "relative path 'src/lib'",
    ),
    (
        "unknown-server",
        json.dumps({"mcpServers": {"a": GOOD_SERVER}}),
        ("--server", "b"),
        "--server b",
        "no such server",
    ),
    (
        "bad-timeout",
        json.dumps({"mcpServers": {"a": {**GOOD_SERVER, "timeout": -1}}}),
        (),
        "$.mcpServers.a.timeout",
        "greater than 0",
    ),
    (
        "typo-inside-sandbox",
        json.dumps(
            {"mcpServers": {"a": {**GOOD_SERVER, "sandbox": {"filesystem": {"denyReed": ["~"]}}}}}
        ),
        (),
        "$.mcpServers.a.sandbox.filesystem.denyReed",
        'unknown key "denyReed": did you mean "denyRead"?',
    ),
    (
        "typo-in-limits",
        json.dumps({"mcpServers": {"a": {**GOOD_SERVER, "sandbox": {"limits": {"memroy": "1G"}}}}}),
        (),
        "$.mcpServers.a.sandbox.limits.memroy",
        'did you mean "memory"?',
    ),
    (
        "unknown-key-in-client-requests",
        json.dumps({"mcpServers": {"a": {**GOOD_SERVER, "clientRequests": {"x": "deny"}}}}),
        (),
        "$.mcpServers.a.clientRequests.x",
        'unknown key "x": known keys: elicitation, sampling',
    ),
    (
        "key-given-twice-inside-sandbox",
        '{"mcpServers": {"a": {"command": "x", "sandbox": {"filesystem": '
        '{"denyRead": ["~/.ssh"], "denyRead": []}}}}}',
        (),
        "$.mcpServers.a.sandbox.filesystem.denyRead",
        '"denyRead" is given twice: write it once',
    ),
    (
        "sandbox-given-twice",
        '{"mcpServers": {"a": {"command": "x", "sandbox": {"network": false}, "sandbox": {}}}}',
        (),
        "$.mcpServers.a.sandbox",
        '"sandbox" is given twice',
    ),
    ("not-an-object", "[]", (), "$", "expected an object"),
    (
        "unknown-detector-skipped",
        json.dumps({"mcpServers": {"a": {**GOOD_SERVER, "scanArguments": {"skip": ["jtw"]}}}}),
        (),
        "$.mcpServers.a.scanArguments.skip",
        "'jtw' is not a detector",
    ),
    (
        "scan-object-typo",
        json.dumps({"mcpServers": {"a": {**GOOD_SERVER, "scanArguments": {"skp": ["jwt"]}}}}),
        (),
        "$.mcpServers.a.scanArguments.skp",
        'unknown key "skp"',
    ),
    (
        "servers-key-vscode",
        json.dumps({"servers": {"a": {"args": []}}}),
        (),
        "$.servers.a.command",
        "Field required",
    ),
    (
        "bad-server-name",
        json.dumps({"mcpServers": {"a__b": GOOD_SERVER}}),
        (),
        "$.mcpServers",
        "server name 'a__b'",
    ),
]


@pytest.mark.parametrize(
    ("text", "extra", "where", "what"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_config_is_one_clear_error(
    user: Home, text: str, extra: tuple[str, ...], where: str, what: str
) -> None:
    config = user.root / "mcp-servers.json"
    config.write_text(text)
    done = ironcurtain(user, "run", "--config", str(config), *extra)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    message = done.stderr.strip()
    assert message.startswith("ironcurtain: error:") and len(message.splitlines()) == 1
    assert str(config) in message
    assert where in message and what in message
    # Nothing half-started: no workspace, no audit log, no runtime files.
    assert not user.left_behind()


def test_missing_config_file(user: Home) -> None:
    done = ironcurtain(user, "run", "--config", str(user.root / "nope.json"))
    assert done.returncode == 2
    assert f"{user.root / 'nope.json'}: no such file" in done.stderr


def test_bad_policy_file(user: Home) -> None:
    policy = user.root / "policy"
    policy.mkdir()
    (policy / "tool-annotations.json").write_text(
        json.dumps(
            {
                "servers": {
                    "time": {
                        "tools": [
                            {
                                "toolName": "t",
                                "serverName": "time",
                                "effect": "read",
                                "sideEffects": False,
                                "args": {"x": ["reed-path"]},
                            }
                        ]
                    }
                }
            }
        )
    )
    (policy / "compiled-policy.json").write_text('{"rules": []}')
    done = ironcurtain(user, "run", "--policy-dir", str(policy))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "tool-annotations.json: $.servers.time.tools[0].args.x[0]" in done.stderr
    assert "reed-path" in done.stderr


def test_unknown_placeholder_in_policy(user: Home) -> None:
    policy = user.root / "policy"
    policy.mkdir()
    (policy / "tool-annotations.json").write_text('{"servers": {}}')
    (policy / "compiled-policy.json").write_text(
        json.dumps(
            {
                "rules": [
                    {
                        "name": "r",
                        "if": {"paths": {"roles": ["read-path"], "within": "${workspce}"}},
                        "then": "allow",
                        "reason": "typo",
                    }
                ]
            }
        )
    )
    done = ironcurtain(user, "check", "time", "x", "--policy-dir", str(policy))
    assert done.returncode == 2
    assert "$.rules[0].if.paths.within: unknown placeholder ${workspce}" in done.stderr


def _check(
    user: Home, server: str, tool: str, arguments: dict[str, Any], *options: str
) -> subprocess.CompletedProcess[str]:
    """``ironcurtain check`` of one call, its arguments given as JSON."""
    return ironcurtain(user, "check", server, tool, *options, "--args", json.dumps(arguments))


def test_unknown_keys_warn_and_are_ignored(user: Home, tmp_path: Path) -> None:
    config = user.root / "mcp-servers.json"
    config.write_text(json.dumps({"mcpServers": {"time": {**GOOD_SERVER, "comand": "typo"}}}))
    done = _check(user, "time", "get_current_time", {"timezone": "UTC"}, "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "$.mcpServers.time.comand: unknown key, ignored" in done.stderr


@needs_bwrap
def test_a_typo_inside_sandbox_starts_nothing(user: Home) -> None:
    """A restriction the user misspelt is not silently dropped: the session does not start,
    so the server that would have read what ``denyReed`` meant to hide never runs."""
    ws = user.ws()
    started = ws / "started"
    server = {
        "command": sys.executable,
        "args": ["-c", f"open({str(started)!r}, 'w')"],
        "sandbox": {
            "filesystem": {"allowWrite": [str(ws)], "denyReed": [str(user.root / "private")]}
        },
    }
    config = user.root / "mcp-servers.json"
    config.write_text(json.dumps({"mcpServers": {"a": server}}))
    done = ironcurtain(user, "run", "--config", str(config), "--workspace", str(ws))
    assert done.returncode == 2, done.stderr
    assert f'{config}: $.mcpServers.a.sandbox.filesystem.denyReed: unknown key "denyReed": ' in (
        done.stderr
    )
    assert 'did you mean "denyRead"?' in done.stderr and not started.exists()
    # Control: spelt right, the same config starts the server.
    server["sandbox"] = {
        "filesystem": {"allowWrite": [str(ws)], "denyRead": [str(user.root / "private")]}
    }
    config.write_text(json.dumps({"mcpServers": {"a": server}}))
    done = ironcurtain(user, "run", "--config", str(config), "--workspace", str(ws))
    assert started.exists(), done.stderr


def test_unknown_keys_clients_share_still_only_warn(user: Home) -> None:
    config = user.root / "mcp-servers.json"
    server = {**GOOD_SERVER, "type": "stdio", "autoApprove": []}
    config.write_text(json.dumps({"mcpServers": {"time": server}, "inputs": []}))
    done = _check(user, "time", "get_current_time", {"timezone": "UTC"}, "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert "$.mcpServers.time.autoApprove: unknown key, ignored" in done.stderr
    assert "$.inputs: unknown key, ignored" in done.stderr


def test_check_prints_decision_rule_reason_and_canonical_arguments(user: Home) -> None:
    ws = user.ws()
    done = _check(
        user, "filesystem", "read_file", {"path": "sub/../notes.txt"}, "--workspace", str(ws)
    )
    assert done.returncode == 0, done.stderr
    assert "decision:  allow" in done.stdout
    assert "rule:      allow-read-in-workspace" in done.stdout
    assert json.dumps({"path": str(ws / "notes.txt")}) in done.stdout
    done = ironcurtain(user, "check", "filesystem", "read_file", "--args", "not json")
    assert done.returncode == 2 and "--args: not valid JSON" in done.stderr


def test_check_plans_like_run_and_names_itself_in_errors(user: Home) -> None:
    done = ironcurtain(user, "check", "nope", "read_file")
    assert done.returncode == 2 and "check nope: no such server in" in done.stderr
    ws = user.ws()
    (ws / "sub").mkdir()
    config = user.root / "mcp-servers.json"
    # A server with its own working directory: relative paths resolve there, as in run.
    server = {"command": "mcp-server-filesystem", "args": ["${workspace}"]}
    config.write_text(
        json.dumps({"mcpServers": {"filesystem": {**server, "cwd": "${workspace}/sub"}}})
    )
    options = ["--config", str(config), "--workspace", str(ws)]
    done = _check(user, "filesystem", "read_file", {"path": "notes.txt"}, *options)
    assert done.returncode == 0, done.stderr
    assert json.dumps({"path": str(ws / "sub" / "notes.txt")}) in done.stdout


def test_an_error_quoting_a_hostile_name_cannot_drive_the_terminal(user: Home) -> None:
    """A config file whose name (a project's choice) holds escape sequences and a direction
    override: the error that quotes it shows them as escapes, on the one line it takes."""
    name = "\x1b]0;pwned\x07\x1b[2J\u202eevil\nironcurtain: ready.json"
    done = ironcurtain(user, "run", "--config", str(user.root / name))
    assert done.returncode == 2, done.stderr
    message = done.stderr.strip()
    assert message.startswith("ironcurtain: error:") and len(message.splitlines()) == 1
    assert "\x1b" not in done.stderr and "\u202e" not in done.stderr and "\x07" not in done.stderr
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\u202eevil\\x0aironcurtain: ready.json" in message


def test_one_servers_unset_variable_stops_only_that_server(user: Home) -> None:
    """A config holding several servers (wrap keeps each client's in one file): a variable
    one of them needs and this environment lacks is an error for a session that starts that
    server, and nothing else."""
    from tests.support.client import Client
    from tests.support.paths import IRONCURTAIN, REPO

    fine = {"command": sys.executable, "args": [str(REPO / "scripts" / "stdlib_server.py")],
            "sandbox": False}  # fmt: skip
    needs = {**fine, "env": {"TOKEN": "${IRONCURTAIN_TEST_UNSET_TOKEN}"}}
    config = user.root / "mcp-servers.json"
    config.write_text(json.dumps({"mcpServers": {"fine": fine, "needs": needs}}))
    run = ["run", "--config", str(config), "--workspace", str(user.ws()), "--allow-unsandboxed"]
    client = Client.spawn([IRONCURTAIN, *run, "--server", "fine"], user.env)
    try:
        answer = client.initialize({}, timeout=60)
        assert "result" in answer, answer
    finally:
        client.kill()
    for chosen in (["--server", "needs"], []):
        done = ironcurtain(user, *run, *chosen)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert "$.mcpServers.needs.env.TOKEN" in done.stderr
        assert "IRONCURTAIN_TEST_UNSET_TOKEN" in done.stderr
