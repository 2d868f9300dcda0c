"""The policy and the sandboxes checked against each other: a rule no sandbox can honour, an
escalation no approval can make work, a mount no rule uses; the bundled ones agree."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.paths import TESTS

BUNDLED_POLICY = TESTS.parent / "policy" / "defaults"


def _setup(
    user: Home, rules: list[dict[str, Any]], filesystem: dict[str, Any] | None = None
) -> list[str]:
    """A filesystem server (the bundled annotations) under ``rules``; the ``check``
    options for it."""
    policy = user.root / "policy"
    policy.mkdir()
    shutil.copy(BUNDLED_POLICY / "tool-annotations.json", policy)
    (policy / "compiled-policy.json").write_text(json.dumps({"rules": rules}))
    server: dict[str, Any] = {"command": "mcp-server-filesystem", "args": ["${workspace}"]}
    if filesystem:
        server["sandbox"] = {"filesystem": filesystem}
    config = user.root / "fs.json"
    config.write_text(json.dumps({"mcpServers": {"filesystem": server}}))
    ws = user.ws()
    return ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)]


def _warnings(user: Home, options: list[str]) -> list[str]:
    done = ironcurtain(
        user, "check", "filesystem", "read_text_file", "--args", '{"path": "a"}', *options
    )
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line.startswith("warning:")]


def _rule(name: str, effect: str, then: str, roles: list[str], within: str) -> dict[str, Any]:
    return {
        "name": name,
        "if": {"effect": [effect], "paths": {"roles": roles, "within": within}},
        "then": then,
        "reason": "test",
    }


def test_the_bundled_config_and_policy_agree(user: Home) -> None:
    done = ironcurtain(user, "check", "filesystem", "read_text_file", "--args", '{"path": "a"}')
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stdout + done.stderr


@pytest.mark.parametrize("effect", ["write", "read"])
def test_a_rule_that_allows_what_the_sandbox_cannot_reach(user: Home, effect: str) -> None:
    data = user.root / "data"
    data.mkdir()
    roles = ["write-path"] if effect == "write" else ["read-path"]
    options = _setup(user, [_rule("allow-data", effect, "allow", roles, str(data))])
    warnings = _warnings(user, options)
    assert len(warnings) == 1, warnings
    assert "rule 'allow-data'" in warnings[0] and str(data) in warnings[0]
    fix = "allowWrite" if effect == "write" else "allowRead"
    assert f"mcpServers.filesystem.sandbox.filesystem.{fix}" in warnings[0]
    # Given the directory, the same rule agrees with the sandbox.
    shutil.rmtree(user.root / "policy")
    options = _setup(
        user,
        [_rule("allow-data", effect, "allow", roles, str(data))],
        {"allowWrite" if effect == "write" else "allowRead": [str(data)]},
    )
    assert _warnings(user, options) == []


def test_an_escalation_no_approval_can_make_work(user: Home) -> None:
    data = user.root / "data"
    data.mkdir()
    rules = [
        _rule("read-data", "read", "allow", ["read-path"], str(data)),
        _rule("ask-data", "write", "escalate", ["write-path"], str(data)),
    ]
    warnings = _warnings(user, _setup(user, rules, {"allowRead": [str(data)]}))
    assert len(warnings) == 1, warnings
    assert "rule 'ask-data'" in warnings[0] and "read-only" in warnings[0]
    # Outside every mount, an escalation is fine: an approval gives the call its paths.
    shutil.rmtree(user.root / "policy")
    assert _warnings(user, _setup(user, rules[1:])) == []


@pytest.mark.parametrize("kind", ["allowWrite", "allowRead"])
def test_a_mount_no_rule_uses(user: Home, kind: str) -> None:
    spare = user.root / "spare"
    spare.mkdir()
    rules = [
        _rule("write-ws", "write", "allow", ["write-path"], "${workspace}"),
        _rule("read-ws", "read", "allow", ["read-path"], "${workspace}"),
    ]
    warnings = _warnings(user, _setup(user, rules, {kind: [str(spare)]}))
    assert len(warnings) == 1, warnings
    assert f"server 'filesystem' {kind} {spare}" in warnings[0]
    assert "remove it" in warnings[0]
    # A rule for it (an escalation counts: an approved call uses the mount) settles it.
    shutil.rmtree(user.root / "policy")
    effect, role = ("write", "write-path") if kind == "allowWrite" else ("read", "read-path")
    rules.append(_rule("ask-spare", effect, "escalate", [role], str(spare)))
    assert _warnings(user, _setup(user, rules, {kind: [str(spare)]})) == []
