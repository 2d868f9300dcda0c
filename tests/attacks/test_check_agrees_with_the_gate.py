"""`ironcurtain check` previews a call as the gate decides it: for every case of a table
(``permissions.json`` files, callers, tools, and no caller), the decision `check` prints is
the gate's, so a caller the gate denies is never shown a call it could make, nor the other
way round. The control: a `check` that asks the policy without first asking what the
caller holds (the copy it once kept of the gate's order) is caught by the same table."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from launcher.audit.log import AuditLog
from launcher.cli import check
from launcher.cli.check import check_call
from launcher.plan.session_plan import RunOptions, plan_session
from launcher.relay.approving.approval import Approvals
from launcher.relay.gate.breaker import CircuitBreaker
from launcher.relay.gate.decide import Gate
from launcher.shared.caller_identity import STATIC, Caller
from launcher.shared.jsonrpc import TOOL
from policy.access import Access
from policy.loader import bundled_policy_dir
from tests.support.home import Home

PERMISSION_FILES: list[dict[str, Any]] = [
    {"tools": [{"server": "time", "tool": "convert_*", "required": ["time:convert"]},
               {"server": "time", "tool": "*", "required": ["time:read"]}]},
    {"tools": [{"server": "*", "tool": "get_current_time", "required": ["clock"]}],
     "prompts": [{"server": "time", "prompt": "*", "required": ["time:read"]}]},
    {},
]  # fmt: skip
HELD: list[list[str] | None] = [
    None, [], ["time:read"], ["time:convert"], ["time:read", "time:convert"], ["time:*"],
    ["TIME:READ"], ["clock"],
]  # fmt: skip
TOOLS = ["get_current_time", "convert_time", "convert_*"]


def _policy(user: Home, n: int, permissions: dict[str, Any]) -> Path:
    policy = user.root / f"policy-{n}"
    policy.mkdir()
    for name in ("tool-annotations.json", "compiled-policy.json"):
        (policy / name).write_bytes((bundled_policy_dir() / name).read_bytes())
    (policy / "permissions.json").write_text(json.dumps(permissions))
    return policy


def _disagreements(user: Home, tmp_path: Path) -> list[tuple[str, str, str]]:
    """Each case where `check`'s decision is not the gate's: the case, `check`'s rule and
    the gate's."""
    found = []
    for n, permissions in enumerate(PERMISSION_FILES):
        policy = _policy(user, n, permissions)
        plan = plan_session(
            RunOptions(policy_dir=str(policy), servers=("time",), display_only=True)
        )
        audit = AuditLog(str(tmp_path / f"audit-{n}.jsonl"), "agree")
        gate = Gate(plan.engine, CircuitBreaker(0), audit, Approvals("elicit", 2.0), str(tmp_path))
        found += _disagreeing(gate, plan, user, policy, permissions)
        audit.close()
    return found


def _disagreeing(
    gate: Gate, plan: Any, user: Home, policy: Path, permissions: dict[str, Any]
) -> list[tuple[str, str, str]]:
    """Each case of one permissions file where `check` and ``gate`` decide apart."""
    found = []
    for held, tool in itertools.product(HELD, TOOLS):
        caller = None if held is None else Caller("agent", frozenset(held), STATIC)
        options: dict[str, str] = {}
        if caller is not None:
            path = user.root / "caller.json"
            path.write_text(json.dumps({"name": "agent", "permissions": held}))
            options["caller_file"] = str(path)
        shown = check_call("time", tool, "{}", None, str(policy), None, **options)
        said = dict(line.split(":", 1) for line in shown.splitlines()[:3])
        previewed = (said["decision"].strip(), said["rule"].strip(), said["reason"].strip())
        cwd = plan.servers["time"].cwd
        decided = gate.check(TOOL, "time", tool, {}, cwd, caller).decision
        if previewed != (decided.decision, decided.rule, decided.reason):
            found.append((f"{permissions} {held} {tool}", previewed[1], decided.rule))
    return found


def test_check_and_the_gate_decide_every_case_alike(
    user: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user.enter(monkeypatch)
    monkeypatch.chdir(user.root)
    assert _disagreements(user, tmp_path) == []


def test_control_a_check_that_skips_the_callers_permissions_is_caught(
    user: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user.enter(monkeypatch)
    monkeypatch.chdir(user.root)
    monkeypatch.setattr(check, "caller_access", lambda *args: Access())
    found = _disagreements(user, tmp_path)
    # Denied by the gate, previewed as the policy decides: each caller lacking a permission.
    assert len(found) >= 10
    assert {gate for _, _, gate in found} == {"caller-permissions"}
    assert "caller-permissions" not in {shown for _, shown, _ in found}
