"""The shared state's two stores kept to one contract (this process's, and a real
``redis-server``'s); two Redis connections see one state (as two instances do); the
callers' limits of two HTTP endpoints counted together; a lost Redis raising StateLost,
said once, and said back. And ``--state`` refused with one line when it names no Redis or
one that cannot be reached."""

from __future__ import annotations

import asyncio
import shutil
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from launcher.relay.approving.approval import APPROVE_SESSION, Approvals
from launcher.shared_state.memory import MemoryState
from launcher.shared_state.redis_store import connect
from launcher.shared_state.store import SharedState, StateLost
from launcher.transports.http.endpoint import CALLER_REQUESTS, HttpEndpoint
from policy.decision import Decision
from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.marks import lacks
from tests.support.shared_state import Redis, needs_redis, redis_server


@pytest.fixture(scope="module")
def redis() -> Iterator[Redis]:
    with redis_server() as server:
        yield server


@pytest.fixture(params=["memory", "redis"])
def state(request: pytest.FixtureRequest) -> Iterator[SharedState]:
    if request.param == "memory":
        yield MemoryState()
        return
    if shutil.which("redis-server") is None:
        lacks("redis-server is not installed (Debian's redis-server package)")
    server: Redis = request.getfixturevalue("redis")
    emptied = connect(server.url, lambda line: None)
    emptied._client.flushdb()  # its sealing key too: the store that counts connects after
    emptied.close()
    store = connect(server.url, lambda line: None)
    yield store
    store.close()


def test_grants_are_their_scopes_own_and_revoked_by_group(state: SharedState) -> None:
    state.grant("alice", "fs\0write_file", "sha256:a")
    assert state.granted("alice", "fs\0write_file", "sha256:a")
    assert not state.granted("bob", "fs\0write_file", "sha256:a")
    assert not state.granted("alice", "fs\0write_file", "sha256:b")
    assert not state.granted("alice", "fs\0write", "sha256:a")
    state.revoke("alice", "fs\0write_file")
    assert not state.granted("alice", "fs\0write_file", "sha256:a")


def test_a_count_refuses_past_its_limit_within_its_window(state: SharedState) -> None:
    assert [state.count("k", 3, 60) for _ in range(4)] == [True, True, True, False]
    assert state.count("other", 3, 60)


def test_entries_are_limited_and_given_back(state: SharedState) -> None:
    assert [state.enter("caller", f"t{n}", 2) for n in range(3)] == [True, True, False]
    state.leave("caller", "t0")
    assert state.enter("caller", "t3", 2)


def test_a_mark_is_used_once(state: SharedState) -> None:
    assert state.first_use("round:h1", 60) and not state.first_use("round:h1", 60)


def test_two_connections_share_one_state(redis: Redis) -> None:
    one, two = connect(redis.url, print), connect(redis.url, print)
    try:
        assert one.sealing_key() == two.sealing_key() and len(one.sealing_key()) == 32
        one.grant("alice", "g", "i")
        assert two.granted("alice", "g", "i")
        assert one.count("same", 1, 60) and not two.count("same", 1, 60)
        assert one.first_use("m", 60) and not two.first_use("m", 60)
    finally:
        one.close()
        two.close()


def _endpoint(state: SharedState) -> HttpEndpoint:
    async def opener(*args: Any) -> Any:
        raise AssertionError("nothing is opened here")

    return HttpEndpoint(0, None, opener, lambda text: None, None, 16, state)


def test_a_callers_requests_are_counted_across_instances(redis: Redis) -> None:
    stores = [connect(redis.url, print), connect(redis.url, print)]
    stores[0]._client.flushdb()
    first, second = (_endpoint(s) for s in stores)
    counted = [("caller", "issuer\0alice", CALLER_REQUESTS)]
    try:
        half = CALLER_REQUESTS // 2
        held = [first._places(counted) for _ in range(half)]
        held += [second._places(counted) for _ in range(CALLER_REQUESTS - half)]
        assert all(refused is None for refused, _ in held)
        refused, _ = first._places(counted)
        assert refused == f"too many requests of this caller at once ({CALLER_REQUESTS})"
        assert second._places([("caller", "issuer\0bob", CALLER_REQUESTS)])[0] is None
        held[0][1]()  # one of alice's requests ends, on the first instance
        assert second._places(counted)[0] is None
    finally:
        for store in stores:
            store.close()


def test_control_without_a_shared_state_each_instance_counts_alone() -> None:
    first, second = _endpoint(MemoryState()), HttpEndpoint(0, None, None, print)  # type: ignore[arg-type]
    counted = [("caller", "issuer\0alice", CALLER_REQUESTS)]
    for _ in range(CALLER_REQUESTS):
        assert first._places(counted)[0] is None
    assert second._places(counted)[0] is None  # the other instance never heard of them


def test_a_lost_redis_raises_is_said_once_and_said_back() -> None:
    said: list[str] = []
    with redis_server() as server:
        store = connect(server.url, said.append)
        server.stop()
        for _ in range(3):
            with pytest.raises(StateLost):
                store.granted("alice", "g", "i")
        with pytest.raises(StateLost):
            store.count("k", 3, 60)
        assert len(said) == 1 and "lost" in said[0] and "escalations are denied" in said[0]
        server.start()  # back, empty: what was granted before is gone, nothing is granted
        assert not store.granted("alice", "g", "i")
        assert said[1:] == [f"shared state {server.url} is back"]
    store.close()


def test_a_redis_that_stops_answering_is_lost_not_waited_for() -> None:
    """A Redis that hangs (stopped, not gone) holds an operation for its timeout, then
    counts as lost: the operation raises, and the loss is said."""
    said: list[str] = []
    with redis_server() as server:
        store = connect(server.url, said.append)
        assert server.proc is not None
        server.proc.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(StateLost):
                store.first_use("round:h", 60)
        finally:
            server.proc.send_signal(signal.SIGCONT)
        assert len(said) == 1 and "lost" in said[0]
    store.close()


class _Lost:
    """A shared state that cannot be reached."""

    where, shared = "redis://gone", True

    def __getattr__(self, name: str) -> Any:
        def raising(*args: object) -> object:
            raise StateLost("Connection refused")

        return raising


class _Shared(MemoryState):
    shared = True  # as another instance would see it


class _Terminal:
    attached = True

    def __init__(self) -> None:
        self.asked: list[dict[str, Any]] = []

    async def ask(self, question: dict[str, Any], timeout: float) -> str:
        self.asked.append(question)
        return APPROVE_SESSION


async def _decide(approvals: Approvals) -> str:
    async def never(*args: object) -> dict[str, Any]:
        raise AssertionError("not asked by elicitation")

    decision = Decision("escalate", "ask", "needs a human")
    outcome = await approvals.decide("fs", "write_file", {"path": "/w/a"}, decision, False, never)
    return outcome.escalation


def test_lost_no_escalation_is_asked_and_none_is_taken() -> None:
    terminal = _Terminal()
    lost = Approvals("socket", 5, terminal, shared=_Lost())
    assert [asyncio.run(_decide(lost)) for _ in range(2)] == ["state-unavailable"] * 2
    assert terminal.asked == []
    # Control: the same question, the state reachable: asked, then approved for the session.
    kept = Approvals("socket", 5, terminal, shared=_Shared())
    outcomes = [asyncio.run(_decide(kept)) for _ in range(2)]
    assert outcomes == ["approved-for-session", "session-whitelist"]
    assert len(terminal.asked) == 1


def test_bad_state_urls_are_one_line_exit_2(user: Home) -> None:
    for url, said in [
        ("http://127.0.0.1:6379", "expected redis://HOST[:PORT][/DB]"),
        ("redis://", "names no host"),
        ("redis://127.0.0.1:6379/zero", "the database 'zero' is not a number"),
        ("redis://:hunter2@127.0.0.1:notaport", "expected redis://"),
    ]:
        done = ironcurtain(user, "run", "--server", "time", "--http", "0", "--state", url)
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.splitlines()
        assert line.startswith("ironcurtain: error: --state ") and said in line, line
        assert "hunter2" not in line
    done = ironcurtain(user, "run", "--server", "time", "--state", "redis://127.0.0.1")
    assert done.returncode == 2 and done.stderr.splitlines() == [
        "ironcurtain: error: --state redis://127.0.0.1: is only used with --http"
    ]


@needs_redis
def test_a_redis_that_cannot_be_reached_stops_the_start(user: Home, redis: Redis) -> None:
    gone = redis.url.replace("redis.sock", "nothing-here.sock")
    done = ironcurtain(user, "run", "--server", "time", "--http", "0", "--state", gone)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"ironcurtain: error: --state {gone}: cannot be reached: ")
