"""Several real gateway instances behind a real HAProxy (round robin), sharing a real
Redis (``--state``): what is given or counted on one instance holds on the others, and
losing Redis fails closed. Each promise has its control: the same instances without
``--state``, where the attack (or the mishap) goes through."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.support.audit import audit_entries
from tests.support.cli import run_args
from tests.support.home import Home
from tests.support.http import ACCEPT, Served, serving
from tests.support.idp import AUDIENCE, Provider, identity_provider
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_calls, write_probe_config, write_raw_policy
from tests.support.shared_state import Redis, haproxy, needs_haproxy, needs_redis, redis_server

pytestmark = [needs_bwrap, needs_redis, needs_haproxy]
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}  # fmt: skip
SESSION = {"ironcurtain/approval": {"action": "accept",
                                    "content": {"answer": "approve for this session"}}}  # fmt: skip
ASK = {"name": "ask-before-env", "if": {"tool": ["env_value"]}, "then": "escalate",
       "reason": "needs a human"}  # fmt: skip
LOST = "ironcurtain: shared state unix://"
ENV_CALL = {"name": "env_value", "arguments": {"name": "HOME"}, "_meta": META}


@pytest.fixture
def idp() -> Iterator[Provider]:
    with identity_provider() as provider:
        yield provider


@pytest.fixture
def redis() -> Iterator[Redis]:
    with redis_server() as server:
        yield server


def post(url: str, token: str, rid: int, params: Mapping[str, Any]) -> dict[str, Any]:
    """One stateless-era ``tools/call``, as a client of the 2026-07-28 protocol sends it."""
    headers = {"Content-Type": "application/json", "Accept": ACCEPT,
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
               "Mcp-Name": str(params["name"]), "Authorization": f"Bearer {token}"}  # fmt: skip
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
    answer: dict[str, Any] = httpx2.post(url, json=body, headers=headers, timeout=60).json()
    return answer


@contextmanager
def instances(
    user: Home, idp: Provider, count: int, state: str | None, *extra: str
) -> Iterator[tuple[str, list[Served], list[Path]]]:
    """``count`` gateway instances of the probe (the same options, each its own audit
    log), sharing ``state`` (None: each its own), behind HAProxy: its URL, the instances,
    their audit logs."""
    policy = write_raw_policy(user.root / "policy", first=[ASK])
    config = write_probe_config(user)
    audits = [user.root / f"audit-{n}.jsonl" for n in range(count)]
    shared = ["--state", state] if state is not None else []
    options = ["--server", "probe", "--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE,
               "--approval", "elicit", *shared, *extra]  # fmt: skip
    with ExitStack() as stack:
        served = [
            stack.enter_context(serving(user, *run_args(config, policy, ws, audit), *options))
            for ws, audit in zip(workspaces(user, count), audits, strict=True)
        ]
        url = stack.enter_context(haproxy(user.root, [s.port for s in served]))
        yield url, served, audits


def workspaces(user: Home, count: int) -> list[Path]:
    """Each instance's own workspace (as on machines of their own)."""
    return [user.ws(f"ws-{n}") for n in range(count)]


def calls(user: Home, count: int) -> list[dict[str, Any]]:
    """What reached the probe, on every instance."""
    return [call for ws in workspaces(user, count) for call in probe_calls(ws)]


def entries(audit: Path, tool: str) -> list[dict[str, Any]]:
    return [e for e in audit_entries(audit) if e.get("tool") == tool] if audit.exists() else []


def where(audits: list[Path], tool: str) -> list[tuple[int, str]]:
    """Which instance audited each call of ``tool`` that ended before it stopped, and its
    escalation, by instance."""
    return [
        (n, str(e.get("escalation")))
        for n, audit in enumerate(audits)
        for e in entries(audit, tool)
        if e.get("result") != "cancelled"
    ]


def test_a_round_begun_on_one_instance_is_answered_on_another_and_the_approval_holds_on_all(
    user: Home, idp: Provider, redis: Redis
) -> None:
    token = idp.token("alice")
    with instances(user, idp, 3, redis.url) as (url, _, audits):
        asked = post(url, token, 1, ENV_CALL)["result"]  # instance 0 asks
        assert asked["resultType"] == "input_required"
        retry = {**ENV_CALL, "inputResponses": SESSION, "requestState": asked["requestState"]}
        done = post(url, token, 2, retry)  # instance 1 takes the round over
        assert done["result"]["content"][0]["text"] == "/tmp/home"
        assert where(audits, "env_value") == [(1, "approved-for-session")]
        # The same call on each instance: approved for the session on all of them.
        for rid in (3, 4, 5):
            again = post(url, token, rid, ENV_CALL)["result"]
            assert again["content"][0]["text"] == "/tmp/home", again
        # Another caller's identical call is asked, not taken as approved.
        other = post(url, idp.token("bob"), 6, ENV_CALL)["result"]
        assert other["resultType"] == "input_required"
        # The state is used once: the same retry again, on whichever instance, is refused.
        replayed = [post(url, token, rid, retry) for rid in (7, 8, 9)]
    assert [r["error"]["code"] for r in replayed] == [-32602] * 3
    escalations = sorted(where(audits, "env_value"))
    assert escalations == [(0, "session-whitelist"), (1, "approved-for-session"),
                           (1, "session-whitelist"), (2, "session-whitelist")]  # fmt: skip
    assert len(calls(user, 3)) == 4


def test_control_without_a_shared_state_the_round_and_the_approval_stay_on_their_instance(
    user: Home, idp: Provider
) -> None:
    token = idp.token("alice")
    with instances(user, idp, 2, None) as (_, served, audits):
        first, second = served[0].url, served[1].url
        asked = post(first, token, 1, ENV_CALL)["result"]
        retry = {**ENV_CALL, "inputResponses": SESSION, "requestState": asked["requestState"]}
        refused = post(second, token, 2, retry)  # instance 1 cannot open instance 0's state
        assert refused["error"]["code"] == -32602
        taken = post(first, token, 3, retry)  # instance 0 takes it
        assert taken["result"]["content"][0]["text"] == "/tmp/home"
        asked_again = post(second, token, 4, ENV_CALL)["result"]  # instance 1 asks again
        assert asked_again["resultType"] == "input_required"
    assert where(audits, "env_value") == [(0, "approved-for-session")]


def test_the_breaker_counts_a_callers_identical_calls_on_every_instance(
    user: Home, idp: Provider, redis: Redis
) -> None:
    token = idp.token("alice")
    call = {"name": "read_path", "arguments": {"path": "/nonexistent"}, "_meta": META}

    def texts(state: str | None) -> list[str]:
        with instances(user, idp, 2, state, "--max-identical-calls", "3") as (url, _, _):
            return [post(url, token, n, call)["result"]["content"][0]["text"] for n in range(4)]

    shared = texts(redis.url)
    assert [t.startswith("READ FAILED") for t in shared] == [True, True, True, False]
    assert "rule: circuit-breaker" in shared[3]
    # Control: each instance counts alone, and two of three each make four in all.
    alone = texts(None)
    assert all(t.startswith("READ FAILED") for t in alone)


def test_redis_lost_escalations_denied_approvals_not_taken_said_once_nothing_crashes(
    user: Home, idp: Provider, redis: Redis
) -> None:
    token = idp.token("alice")
    with instances(user, idp, 2, redis.url) as (url, served, audits):
        asked = post(served[0].url, token, 1, ENV_CALL)["result"]
        retry = {**ENV_CALL, "inputResponses": SESSION, "requestState": asked["requestState"]}
        redis.stop()
        not_taken = post(served[1].url, token, 2, retry)  # cannot mark the state used
        assert not_taken["error"]["code"] == -32603
        # Every escalation is denied, on both instances, without asking.
        denied = [post(url, token, n, ENV_CALL)["result"] for n in (3, 4, 5, 6)]
        # What needs no approval goes on (the breaker counts on each instance alone).
        read_x = {"name": "read_path", "arguments": {"path": "/x"}, "_meta": META}
        read = post(url, token, 7, read_x)
        assert read["result"]["content"][0]["text"].startswith("READ FAILED")
        alive = [s.proc.poll() for s in served]
    assert alive == [None, None]
    for result in denied:
        assert result.get("isError") is True and result["resultType"] == "complete"
        assert "shared state" in result["content"][0]["text"]
    assert [c["tool"] for c in calls(user, 2)] == ["read_path"]
    said = [[line for line in s.stderr if line.startswith(LOST)] for s in served]
    assert [len(lines) for lines in said] == [1, 1], said
    assert "lost (" in said[0][0] and "escalations are denied" in said[0][0]
    assert sorted(e for _, e in where(audits, "env_value")) == ["state-unavailable"] * 4


def test_a_shared_round_takes_no_other_callers_no_other_request_no_other_deployment(
    user: Home, idp: Provider, redis: Redis
) -> None:
    """The variants after the round taken over: what another instance takes is that very
    request of that caller, sealed by this deployment, once; and the instance that asked
    records where it was answered."""
    token = idp.token("alice")
    with redis_server() as elsewhere, ExitStack() as stack:
        _, served, audits = stack.enter_context(
            instances(user, idp, 2, redis.url, "--approval-timeout", "20")
        )
        other_policy = write_raw_policy(user.root / "other-policy", first=[ASK])
        other_args = run_args(write_probe_config(user), other_policy, user.ws("ws-other"),
                              user.root / "audit-other.jsonl")  # fmt: skip
        foreign = stack.enter_context(serving(user, *other_args, "--server", "probe",
            "--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE, "--approval", "elicit",
            "--state", elsewhere.url))  # fmt: skip
        asked = post(served[0].url, token, 1, ENV_CALL)["result"]
        state = asked["requestState"]
        retry = {**ENV_CALL, "inputResponses": SESSION, "requestState": state}
        attempts = {
            "another caller": post(served[1].url, idp.token("mallory"), 2, retry),
            "other arguments": post(
                served[1].url, token, 3, {**retry, "arguments": {"name": "PATH"}}
            ),
            "another deployment": post(foreign.url, token, 4, retry),
        }
        for what, answer in attempts.items():
            assert answer.get("error", {}).get("code") == -32602, what
        assert calls(user, 2) == [] and probe_calls(user.ws("ws-other")) == []
        done = post(served[1].url, token, 5, retry)  # still whole: alice's, on instance 1
        assert done["result"]["content"][0]["text"] == "/tmp/home"
        # The instance that asked lets its copy go once its question times out, saying where
        # it was answered (waited for, not timed: a loaded machine takes what it takes).
        deadline = time.monotonic() + 300
        while not entries(audits[0], "env_value") and time.monotonic() < deadline:
            assert served[0].proc.poll() is None
            time.sleep(0.1)
        (first,) = entries(audits[0], "env_value")
    assert first["escalation"] == "answered-elsewhere" and first["result"] == "denied"
    assert where(audits, "env_value") == [(0, "answered-elsewhere"), (1, "approved-for-session")]
    assert len(calls(user, 2)) == 1
