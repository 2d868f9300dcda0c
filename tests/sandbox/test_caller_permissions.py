"""A caller's permissions end to end: the real ``ironcurtain run`` with the bundled ``time``
server in its sandbox and a ``permissions.json`` that requires ``time:convert`` for
``convert_time``, through the ``mcp`` SDK's clients. Over stdio with a caller file, and over
HTTP in gateway mode with two callers whose tokens carry different scopes (a provider on
loopback, tests/support/idp.py): the caller without the permission neither sees the tool nor
can call it (in either protocol era), the one with it does both, and the audit entry names
what was missing. A mistake in the file stops ``run`` before anything starts."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from policy.loader import bundled_policy_dir
from tests.support.audit import audit_entries
from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.http import ACCEPT, http_session, serving
from tests.support.idp import AUDIENCE, Provider, identity_provider
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN
from tests.support.sdk import call, connect

pytestmark = needs_bwrap
NOT_PERMITTED = "DENIED (rule: caller-permissions): operation not permitted"
PERMISSIONS = {
    "tools": [
        {"server": "time", "tool": "convert_*", "required": ["time:convert"]},
        {"server": "time", "tool": "*", "required": ["time:read"]},
    ]
}
CONVERT = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Europe/Paris"}
NOW = {"timezone": "UTC"}
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}  # fmt: skip


def _policy(user: Home, permissions: Any = PERMISSIONS) -> Path:
    """The bundled policy with ``permissions`` as its ``permissions.json``."""
    policy = user.root / "policy"
    policy.mkdir(exist_ok=True)
    for name in ("tool-annotations.json", "compiled-policy.json"):
        (policy / name).write_bytes((bundled_policy_dir() / name).read_bytes())
    text = permissions if isinstance(permissions, str) else json.dumps(permissions)
    (policy / "permissions.json").write_text(text)
    return policy


# The tools a caller is shown, and (is error, text) of its call of each of the two.
Used = tuple[list[str], tuple[bool, str], tuple[bool, str]]


def _args(user: Home) -> list[str]:
    return ["--server", "time", "--workspace", str(user.ws()), "--policy-dir",
            str(_policy(user)), "--audit-log", str(user.root / "audit.jsonl")]  # fmt: skip


async def _use(session: Any) -> Used:
    """What a caller is shown, and its calls of both tools."""
    listed = sorted(tool.name for tool in (await session.list_tools()).tools)
    return (
        listed,
        await call(session, "convert_time", CONVERT),
        await call(session, "get_current_time", NOW),
    )


def _stdio(user: Home, permissions: list[str]) -> Used:
    caller = user.root / "caller.json"
    caller.write_text(json.dumps({"name": "billing-agent", "permissions": permissions}))
    out: list[Used] = []

    async def scenario() -> None:
        async with connect(user, *_args(user), "--caller", str(caller)) as session:
            out.append(await _use(session))

    asyncio.run(scenario())
    return out[0]


def test_over_stdio_a_caller_without_the_permission_neither_sees_nor_calls_the_tool(
    user: Home,
) -> None:
    listed, converted, now = _stdio(user, ["time:read"])
    assert listed == ["get_current_time"]
    assert converted == (True, NOT_PERMITTED)
    assert not now[0] and "UTC" in now[1]
    entries = [e for e in audit_entries(user.root / "audit.jsonl") if e.get("tool")]
    denied = next(e for e in entries if e["tool"] == "convert_time")
    assert denied["policy"] == {
        "decision": "deny",
        "rule": "caller-permissions",
        "reason": "operation not permitted",
        "missing": ["time:convert"],
    }
    assert denied["result"] == "denied"
    assert denied["caller"] == {"name": "billing-agent", "issuer": "static"}
    tail = ironcurtain(user, "audit", "tail", str(user.root / "audit.jsonl"))
    [line] = [line for line in tail.stdout.splitlines() if "time/convert_time" in line]
    assert "DENY" in line and "rule=caller-permissions  missing=time:convert" in line


def test_over_stdio_a_caller_with_the_permission_sees_and_calls_it(user: Home) -> None:
    listed, converted, now = _stdio(user, ["time:read", "time:convert"])
    assert listed == ["convert_time", "get_current_time"]
    assert not converted[0] and "Europe/Paris" in converted[1]
    assert not now[0]


@pytest.fixture
def idp() -> Iterator[Provider]:
    with identity_provider() as provider:
        yield provider


def _stateless(url: str, token: str, method: str, params: dict[str, Any]) -> Any:
    """A request of the stateless era (MCP 2026-07-28): its result."""
    headers = {"Content-Type": "application/json", "Accept": ACCEPT,
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method,
               "Authorization": f"Bearer {token}"}  # fmt: skip
    if "name" in params:
        headers["Mcp-Name"] = params["name"]
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": META}}
    answer = httpx2.post(url, json=body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]


def test_in_gateway_mode_each_caller_sees_and_calls_what_its_token_permits(
    user: Home, idp: Provider
) -> None:
    alice = idp.token("alice", scope="time:read time:convert")
    bob = idp.token("bob", scope="time:read")
    args = [*_args(user), "--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE]
    seen: dict[str, Any] = {}

    async def as_caller(url: str, name: str, token: str) -> None:
        async with http_session(url, token) as session:
            seen[name] = await _use(session)

    with serving(user, *args) as served:

        async def both() -> None:
            await asyncio.gather(
                as_caller(served.url, "alice", alice), as_caller(served.url, "bob", bob)
            )

        asyncio.run(both())
        convert = {"name": "convert_time", "arguments": CONVERT}
        stateless = {
            name: _stateless(served.url, token, "tools/call", convert)
            for name, token in (("alice", alice), ("bob", bob))
        }
        modern_lists = {
            name: [t["name"] for t in _stateless(served.url, token, "tools/list", {})["tools"]]
            for name, token in (("alice", alice), ("bob", bob))
        }
    listed, converted, _ = seen["alice"]
    assert listed == ["convert_time", "get_current_time"]
    assert not converted[0] and "Europe/Paris" in converted[1]
    listed, converted, now = seen["bob"]
    assert listed == ["get_current_time"] and converted == (True, NOT_PERMITTED) and not now[0]
    assert modern_lists == {
        "alice": ["get_current_time", "convert_time"],
        "bob": ["get_current_time"],
    }
    assert not stateless["alice"].get("isError")
    assert stateless["bob"]["isError"] is True
    assert stateless["bob"]["content"] == [{"type": "text", "text": NOT_PERMITTED}]
    entries = audit_entries(user.root / "audit.jsonl")
    converts = [e for e in entries if e.get("tool") == "convert_time"]
    by = {(e["caller"]["name"], e.get("era", "handshake")): e["policy"] for e in converts}
    assert (
        by[("alice", "handshake")]["decision"] == by[("alice", "stateless")]["decision"] == "allow"
    )
    for era in ("handshake", "stateless"):
        assert by[("bob", era)]["missing"] == ["time:convert"]
        assert by[("bob", era)]["rule"] == "caller-permissions"


@pytest.mark.parametrize(
    ("permissions", "says"),
    [
        ('{"tools": [{"server": "time", "tool": "*", "required": ["time read"]}]}',
         '$.tools[0].required[0]: "time read" holds a space'),
        ('{"tools": [{"server": "time", "tool": "*", "requires": ["time:read"]}]}',
         '$.tools[0]: unknown key "requires"'),
        ('{"tools": [{"server": "tyme", "tool": "*", "required": ["time:read"]}]}',
         "$.tools[0].server: 'tyme' matches no server of the config"),
        ('{"tools": [', "line 1 column 12: invalid JSON"),
    ],
)  # fmt: skip
def test_a_mistake_in_permissions_json_stops_run_with_exit_2(
    user: Home, permissions: str, says: str
) -> None:
    policy = _policy(user, permissions)
    done = subprocess.run(
        [IRONCURTAIN, "run", "--server", "time", "--workspace", str(user.ws()),
         "--policy-dir", str(policy)],
        env=user.env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"ironcurtain: error: {policy / 'permissions.json'}: {says}" in done.stderr
    assert "Traceback" not in done.stderr and "ready" not in done.stderr


def test_an_entry_naming_no_tool_of_its_server_stops_the_session(user: Home) -> None:
    policy = _policy(user, {"tools": [{"server": "time", "tool": "convert_tiem",
                                        "required": ["time:convert"]}]})  # fmt: skip
    done = ironcurtain(user, "run", "--server", "time", "--workspace", str(user.ws()),
                       "--policy-dir", str(policy))  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert (
        f"{policy / 'permissions.json'}: $.tools[0].tool: 'convert_tiem' matches no tool of "
        "time (its tools: convert_time, get_current_time)"
    ) in done.stderr
    assert "Traceback" not in done.stderr and "ready, serving" not in done.stderr


ASKS: dict[str, Any] = {"elicitation": {"form": {}}}
ROUND_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
              "io.modelcontextprotocol/clientCapabilities": ASKS}  # fmt: skip
APPROVE = {"ironcurtain/approval": {"action": "accept", "content": {"answer": "approve"}}}


def _env_call(url: str, token: str, rid: int, params: dict[str, Any]) -> dict[str, Any]:
    headers = {"Content-Type": "application/json", "Accept": ACCEPT,
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
               "Mcp-Name": "env_value", "Authorization": f"Bearer {token}"}  # fmt: skip
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
    answer: dict[str, Any] = httpx2.post(url, json=body, headers=headers, timeout=60).json()
    return answer


def test_a_retry_with_a_narrower_token_does_not_make_the_call(user: Home) -> None:
    # As the agent: permitted when asked for approval, alice comes back with the approval
    # and a token that no longer carries the permission. The call is not made; with a token
    # that carries it again, the same approved retry makes it.
    from tests.support.probe import probe_calls, probe_session

    ask = {"name": "ask-before-env", "if": {"tool": ["env_value"]}, "then": "escalate",
           "reason": "needs a human"}  # fmt: skip
    args, ws, audit = probe_session(user, first=[ask])
    policy = Path(args[args.index("--policy-dir") + 1])
    required = {"tools": [{"server": "probe", "tool": "env_value", "required": ["probe:env"]}]}
    (policy / "permissions.json").write_text(json.dumps(required))
    params = {"name": "env_value", "arguments": {"name": "HOME"}, "_meta": ROUND_META}
    with identity_provider() as idp:
        args += ["--server", "probe", "--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE]
        args += ["--approval", "elicit"]  # a caller's client answers only when told so
        wide, narrow = idp.token("alice", scope="probe:env"), idp.token("alice", scope="")
        with serving(user, *args) as served:
            asked = _env_call(served.url, wide, 1, params)["result"]
            assert asked["resultType"] == "input_required"
            retry = {**params, "inputResponses": APPROVE, "requestState": asked["requestState"]}
            refused = _env_call(served.url, narrow, 2, retry)
            made = _env_call(served.url, wide, 3, retry)
    assert refused["result"]["content"][0]["text"] == (
        "DENIED (rule: caller-permissions): operation not permitted"
    )
    assert made["result"]["content"][0]["text"] == "/tmp/home"
    assert [c["name"] for c in probe_calls(ws) if c["tool"] == "env_value"] == ["HOME"]
    entries = [e for e in audit_entries(audit) if e.get("tool") == "env_value"]
    assert [(e["result"], e["policy"]["rule"], e["policy"].get("missing")) for e in entries] == [
        ("denied", "caller-permissions", ["probe:env"]),
        ("success", "ask-before-env", None),
    ]
