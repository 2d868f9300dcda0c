"""Real gateway instances sharing a real Redis, attacked as a caller with allowed calls
only: a deployment that shares its Redis with another keeps its approvals and round states
to itself; one round state sent to two instances at the same moment is taken once; a round
state used before Redis was restarted empty is not taken again; an approval for the session
holds on another instance for that very call alone. (The controls, the same attacks through
the store as it was before each protection, are in the unit tests of the shared state.)"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.sandbox.test_shared_state import ASK, ENV_CALL, SESSION, post, where
from tests.support.cli import run_args
from tests.support.home import Home
from tests.support.http import ACCEPT, Served, serving
from tests.support.idp import AUDIENCE, Provider, identity_provider
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_calls, write_probe_config, write_raw_policy
from tests.support.shared_state import Redis, needs_redis, redis_server

pytestmark = [needs_bwrap, needs_redis]
OTHER = "https://other.team.example/mcp"  # the audience of another deployment
# Subjects built to reach alice's keys, were they joined into key names.
LIKE_ALICE = ["alice:*", "alice\n", "*", "alice" + "x" * 2000]
ONCE = {"ironcurtain/approval": {"action": "accept", "content": {"answer": "approve"}}}


@pytest.fixture
def idp() -> Iterator[Provider]:
    with identity_provider() as provider:
        yield provider


@pytest.fixture
def redis() -> Iterator[Redis]:
    with redis_server() as server:
        yield server


@contextmanager
def deployment(
    user: Home, idp: Provider, name: str, count: int, state: str, audience: str = AUDIENCE
) -> Iterator[tuple[list[Served], list[Path], list[Path]]]:
    """``count`` instances of one deployment (its audience, its own policy), sharing
    ``state``: the instances, their audit logs and their workspaces."""
    policy = write_raw_policy(user.root / f"policy-{name}", first=[ASK])
    config = write_probe_config(user)
    audits = [user.root / f"audit-{name}-{n}.jsonl" for n in range(count)]
    spaces = [user.ws(f"ws-{name}-{n}") for n in range(count)]
    options = ["--server", "probe", "--oidc-issuer", idp.issuer, "--oidc-audience", audience,
               "--approval", "elicit", "--state", state]  # fmt: skip
    served: list[Served] = []
    try:
        with ExitStack() as stack:
            for ws, audit in zip(spaces, audits, strict=True):
                args = run_args(config, policy, ws, audit)
                served.append(stack.enter_context(serving(user, *args, *options)))
            yield served, audits, spaces
    finally:
        for instance in served:
            if instance.proc.stderr:
                instance.proc.stderr.close()


def attempt(url: str, token: str, params: dict[str, Any]) -> tuple[int, Any]:
    """``post``, for a caller that may not be admitted: its status, and its JSON if 200."""
    headers = {"Content-Type": "application/json", "Accept": ACCEPT,
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
               "Mcp-Name": str(params["name"]), "Authorization": f"Bearer {token}"}  # fmt: skip
    body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}
    answer = httpx2.post(url, json=body, headers=headers, timeout=60)
    return answer.status_code, answer.json() if answer.status_code == 200 else answer.text


def reached(spaces: list[Path]) -> list[dict[str, Any]]:
    return [call for ws in spaces for call in probe_calls(ws)]


def test_another_deployment_in_the_same_redis_takes_neither_approvals_nor_rounds(
    user: Home, idp: Provider, redis: Redis
) -> None:
    with (
        deployment(user, idp, "a", 1, redis.url) as ([a], _, a_spaces),
        deployment(user, idp, "b", 1, redis.url, OTHER) as ([b], b_audits, b_spaces),
    ):
        at_a, at_b = idp.token("alice"), idp.token("alice", aud=OTHER)
        asked = post(a.url, at_a, 1, ENV_CALL)["result"]
        retry = {**ENV_CALL, "inputResponses": SESSION, "requestState": asked["requestState"]}
        # Alice's round of A, answered on B (her token for B): not B's to take.
        assert post(b.url, at_b, 2, retry)["error"]["code"] == -32602
        done = post(a.url, at_a, 3, retry)  # A takes it: approved for the session on A
        assert done["result"]["content"][0]["text"] == "/tmp/home"
        assert post(a.url, at_a, 4, ENV_CALL)["result"]["content"][0]["text"] == "/tmp/home"
        # The same call of hers on B is asked: A's approval is not B's.
        assert post(b.url, at_b, 5, ENV_CALL)["result"]["resultType"] == "input_required"
    assert reached(b_spaces) == [] and len(reached(a_spaces)) == 2
    assert where(b_audits, "env_value") == []


def test_one_round_state_sent_to_two_instances_at_once_is_taken_once(
    user: Home, idp: Provider, redis: Redis
) -> None:
    token = idp.token("alice")
    answers: list[dict[str, Any]] = []

    def race(instances: list[Served], retry: dict[str, Any], first: int) -> None:
        """``retry`` sent to each of ``instances`` at the same moment."""
        start = threading.Barrier(len(instances))

        def send(instance: Served, n: int) -> None:
            start.wait(timeout=60)
            answers.append(post(instance.url, token, n, retry))

        racers = [
            threading.Thread(target=send, args=(s, first + n)) for n, s in enumerate(instances)
        ]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join(timeout=120)

    with deployment(user, idp, "race", 3, redis.url) as (served, audits, spaces):
        for rid in range(3):  # three rounds, each raced by the two instances that did not ask
            asked = post(served[0].url, token, 100 + rid, ENV_CALL)["result"]
            retry = {**ENV_CALL, "inputResponses": ONCE, "requestState": asked["requestState"]}
            race(served[1:], retry, 200 + 10 * rid)
    taken = [a for a in answers if "result" in a]
    refused = [a for a in answers if "error" in a]
    assert len(taken) == 3 and [a["error"]["code"] for a in refused] == [-32602] * 3, answers
    assert all(a["result"]["content"][0]["text"] == "/tmp/home" for a in taken)
    assert len(reached(spaces)) == 3  # each approval ran its call once
    assert sorted(e for n, e in where(audits, "env_value") if n) == ["approved"] * 3


def test_a_round_state_used_before_redis_restarted_empty_is_not_taken_again(
    user: Home, idp: Provider, redis: Redis
) -> None:
    token = idp.token("alice")
    with deployment(user, idp, "restart", 3, redis.url) as (served, audits, spaces):
        asked = post(served[0].url, token, 1, ENV_CALL)["result"]
        retry = {**ENV_CALL, "inputResponses": ONCE, "requestState": asked["requestState"]}
        done = post(served[1].url, token, 2, retry)  # approved once, taken on instance 1
        assert done["result"]["content"][0]["text"] == "/tmp/home"
        redis.stop()
        redis.start()  # back, empty: which states were used is forgotten
        replayed = [post(s.url, token, 3 + n, retry) for n, s in enumerate(served)]
        # A new round still works, on any instance, once the instances made a new key.
        again = post(served[2].url, token, 10, ENV_CALL)["result"]
        fresh = {**ENV_CALL, "inputResponses": ONCE, "requestState": again["requestState"]}
        after = post(served[0].url, token, 11, fresh)
    assert all("error" in answer for answer in replayed), replayed
    assert after["result"]["content"][0]["text"] == "/tmp/home", after
    assert len(reached(spaces)) == 2
    assert sorted(e for _, e in where(audits, "env_value")) == ["approved"] * 2


def test_an_approval_for_the_session_holds_elsewhere_for_that_very_call_alone(
    user: Home, idp: Provider, redis: Redis
) -> None:
    token = idp.token("alice")
    with deployment(user, idp, "exact", 2, redis.url) as (served, _, spaces):
        asked = post(served[0].url, token, 1, ENV_CALL)["result"]
        retry = {**ENV_CALL, "inputResponses": SESSION, "requestState": asked["requestState"]}
        assert post(served[0].url, token, 2, retry)["result"]["content"][0]["text"] == "/tmp/home"
        same = post(served[1].url, token, 3, ENV_CALL)["result"]
        other_argument = {**ENV_CALL, "arguments": {"name": "PATH"}}
        extra_argument = {**ENV_CALL, "arguments": {"name": "HOME", "x": 1}}
        others = [post(served[1].url, token, 4 + n, c)["result"] for n, c in
                  enumerate([other_argument, extra_argument])]  # fmt: skip
        built = [attempt(served[1].url, idp.token(name), ENV_CALL) for name in LIKE_ALICE]
    assert same["content"][0]["text"] == "/tmp/home"
    for result in others:
        assert result.get("resultType") == "input_required", result
    for status, answer in built:  # asked, or not admitted at all: never taken as approved
        assert status != 200 or answer["result"]["resultType"] == "input_required", answer
    assert len(reached(spaces)) == 2
