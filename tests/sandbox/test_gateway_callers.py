"""Callers kept apart end to end: the real ``ironcurtain run --http`` in gateway mode (JWTs of
an identity provider on loopback) with the probe server in its sandbox, through the ``mcp``
SDK's client and raw requests of the stateless protocol. Each caller's stateless requests
reach server instances of its own; "approve for this session" given by one caller covers
that caller's later sessions and never another caller; the circuit breaker counts each
caller's calls across its sessions, and another caller is not stopped by it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from mcp import types

from tests.support.audit import audit_entries
from tests.support.home import Home
from tests.support.http import ACCEPT, http_session, probe_args, serving
from tests.support.idp import AUDIENCE, Provider, identity_provider
from tests.support.marks import needs_bwrap
from tests.support.probe import write_raw_policy
from tests.support.sdk import answering, call

pytestmark = needs_bwrap
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}  # fmt: skip
ASK = {"name": "ask-before-env", "if": {"tool": ["env_value"]}, "then": "escalate",
       "reason": "reading the server's environment needs a human"}  # fmt: skip


@pytest.fixture
def idp() -> Iterator[Provider]:
    with identity_provider() as provider:
        yield provider


def _args(user: Home, idp: Provider, *more: str) -> list[str]:
    args = probe_args(user)
    write_raw_policy(user.root / "policy", first=[ASK])
    return [*args, "--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE, *more]


def _stateless(url: str, token: str, tool: str, arguments: dict[str, Any]) -> str:
    """A tools/call of the stateless protocol: its text."""
    headers = {"Content-Type": "application/json", "Accept": ACCEPT,
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
               "Mcp-Name": tool, "Authorization": f"Bearer {token}"}  # fmt: skip
    params = {"name": tool, "arguments": arguments, "_meta": META}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    answer = httpx2.post(url, json=body, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    return "".join(c.get("text", "") for c in answer.json()["result"]["content"])


def test_each_callers_stateless_requests_reach_servers_of_its_own(
    user: Home, idp: Provider
) -> None:
    alice, bob = idp.token("alice"), idp.token("bob")
    with serving(user, *_args(user, idp)) as served:
        seen = [_stateless(served.url, who, "instance", {}) for who in (alice, bob, alice, bob)]
    assert all(text.startswith("INSTANCE ") for text in seen)
    assert seen[0] == seen[2] and seen[1] == seen[3]  # each caller's own, kept
    assert seen[0] != seen[1]  # never the other's


def test_approve_for_this_session_covers_that_caller_only(user: Home, idp: Provider) -> None:
    alice_says, alice_saw = answering("approve for this session")
    bob_says, bob_saw = answering("deny")

    def asking(answer: Any) -> dict[str, Any]:
        async def callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            return await answer(params)  # type: ignore[no-any-return]

        return {"elicitation_callback": callback}

    out: dict[str, tuple[bool, str]] = {}

    async def scenario(url: str) -> None:
        async with http_session(url, idp.token("alice"), **asking(alice_says)) as session:
            out["alice"] = await call(session, "env_value", {"name": "HOME"})
        # Her next session: what she approved for the session still covers her.
        async with http_session(url, idp.token("alice"), **asking(alice_says)) as session:
            out["alice again"] = await call(session, "env_value", {"name": "HOME"})
        # Bob's identical call is his own to answer, and he denies it.
        async with http_session(url, idp.token("bob"), **asking(bob_says)) as session:
            out["bob"] = await call(session, "env_value", {"name": "HOME"})

    with serving(user, *_args(user, idp)) as served:
        asyncio.run(scenario(served.url))
    assert out["alice"] == out["alice again"] == (False, "/tmp/home")
    assert out["bob"][0] and out["bob"][1].startswith("ESCALATION DENIED")
    assert len(alice_saw) == 1 and len(bob_saw) == 1
    calls = [e for e in audit_entries(user.root / "audit.jsonl") if e.get("tool") == "env_value"]
    assert [(e["caller"]["name"], e["escalation"]) for e in calls] == [
        ("alice", "approved-for-session"),
        ("alice", "session-whitelist"),
        ("bob", "denied"),
    ]


def test_the_circuit_breaker_counts_each_callers_calls_across_its_sessions(
    user: Home, idp: Provider
) -> None:
    out: list[tuple[str, bool, str]] = []

    async def calls(url: str, who: str, times: int) -> None:
        async with http_session(url, idp.token(who)) as session:
            for _ in range(times):
                failed, text = await call(session, "instance", {})
                out.append((who, failed, text))

    async def scenario(url: str) -> None:
        await calls(url, "alice", 3)
        await calls(url, "alice", 1)  # a new session does not start her count again
        await calls(url, "bob", 1)  # nor is bob stopped by hers

    with serving(user, *_args(user, idp, "--max-identical-calls", "3")) as served:
        asyncio.run(scenario(served.url))
    assert [(who, failed) for who, failed, _ in out] == [
        ("alice", False),
        ("alice", False),
        ("alice", False),
        ("alice", True),
        ("bob", False),
    ]
    assert out[3][2].startswith("DENIED (rule: circuit-breaker)")
    entries = audit_entries(user.root / "audit.jsonl")
    rules = [(e["caller"]["name"], e["policy"]["rule"]) for e in entries if e.get("tool")]
    assert rules[3] == ("alice", "circuit-breaker") and rules[4][0] == "bob"
    assert json.dumps(rules[4]).count("circuit-breaker") == 0
