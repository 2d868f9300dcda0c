"""The shared state attacked, on a real ``redis-server``: what one deployment, or one caller,
keeps there is never another's; a round state is taken once, even by two instances at once
and even after Redis forgot which states were used; a reply Redis would never give (or a
value ironcurtain did not write) grants nothing; the breaker opens no wider when Redis is
emptied. Each promise has its control: the same attack through the store as it was before
the protection, which lets it through."""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from launcher.relay.approving.approval import Approvals
from launcher.relay.gate.breaker import CircuitBreaker
from launcher.relay.questions import rounds
from launcher.shared_state import redis_store
from launcher.shared_state.redis_store import PREFIX, RedisState, connect
from launcher.shared_state.store import StateLost, deployment_of, scope_of
from launcher.transports.http.endpoint import CALLER_REQUESTS, HttpEndpoint
from policy.decision import Decision
from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.relay import Harness, build, run
from tests.support.shared_state import Redis, needs_redis, redis_server
from tests.unit.relay.questions.test_relay_rounds import approval, modern, private, retry

pytestmark = needs_redis
ALICE = ("https://id.example", "alice")
GROUP = "fs\0write_file"


@pytest.fixture(scope="module")
def redis() -> Iterator[Redis]:
    with redis_server() as server:
        yield server


@pytest.fixture
def fresh(redis: Redis) -> Redis:
    """The module's Redis, emptied."""
    store = connect(redis.url, lambda line: None)
    store._client.flushall()
    store.close()
    return redis


class Before(RedisState):
    """The store as it was before the protections under test: one prefix for every
    deployment, a used mark set without looking whether Redis still knows what was used."""

    def __init__(self, url: str, say: Callable[[str], None], deployment: str = "") -> None:
        super().__init__(url, say, "")

    def first_use(self, mark: str, ttl: float) -> bool:
        name = f"{PREFIX}used:{mark}"
        return bool(self._do(lambda: self._client.set(name, 1, nx=True, px=int(ttl * 1000))))


def stores(
    url: str, count: int, deployment: str = "", kind: type[RedisState] = RedisState
) -> list[RedisState]:
    made = [kind(url, lambda line: None, deployment) for _ in range(count)]
    for store in made:
        store.sealing_key()
    return made


def relays(tmp_path: Path, states: list[RedisState]) -> list[Harness]:
    """One relay per state (as instances of a gateway), the same options and workspace."""
    return [build(tmp_path, initialize=False, state=state) for state in states]


def take_over(
    one: Harness, two: Harness, replays: list[Harness], between: Callable[[], object]
) -> list[Any]:
    """Alice's call asked on ``one``, approved once and taken on ``two``; ``between`` done;
    then the same retry sent again to each of ``replays``: their answers."""
    call = modern(private(one))
    again: list[Any] = []

    async def work() -> None:
        first = await one.request("tools/call", call)
        assert first is not None
        answered = retry(call, first["result"], approval("approve"))
        done = await two.request("tools/call", answered)
        assert done is not None and done["result"]["content"][0]["text"] == "tools/call read_file"
        between()
        for relay in replays:
            again.append(await relay.request("tools/call", answered))

    run(work)
    return again


def test_two_deployments_in_one_redis_share_no_grant_no_count_no_sealing_key(fresh: Redis) -> None:
    (a,) = stores(fresh.url, 1, deployment_of("oidc", "https://id.example", "gateway-a"))
    (b,) = stores(fresh.url, 1, deployment_of("oidc", "https://id.example", "gateway-b"))
    a.grant(scope_of(ALICE), GROUP, "sha256:x")
    assert a.granted(scope_of(ALICE), GROUP, "sha256:x")
    assert not b.granted(scope_of(ALICE), GROUP, "sha256:x")
    assert a.count("k", 1, 60) and b.count("k", 1, 60)
    assert a.sealing_key() != b.sealing_key()
    # Control: one prefix for both, as before: alice's approval on A holds on B.
    old_a, old_b = stores(fresh.url, 2, kind=Before)
    old_a.grant(scope_of(ALICE), GROUP, "sha256:x")
    assert old_b.granted(scope_of(ALICE), GROUP, "sha256:x")
    assert old_a.sealing_key() == old_b.sealing_key()


def test_a_round_of_one_deployment_is_not_taken_by_another_sharing_its_redis(
    tmp_path: Path, fresh: Redis
) -> None:
    (a,) = stores(fresh.url, 1, deployment_of("token", "deployment-a"))
    (b,) = stores(fresh.url, 1, deployment_of("token", "deployment-b"))
    one, two = relays(tmp_path, [a, b])
    call = modern(private(one))

    async def work() -> None:
        first = await one.request("tools/call", call)
        assert first is not None
        taken = await two.request("tools/call", retry(call, first["result"], approval("approve")))
        assert taken is not None and taken["error"]["code"] == -32602

    run(work)
    assert "tools/call" not in two.fs.methods and "tools/call" not in one.fs.methods


def test_control_deployments_under_one_prefix_take_each_others_rounds(
    tmp_path: Path, fresh: Redis
) -> None:
    one, two = relays(tmp_path, stores(fresh.url, 2, kind=Before))
    take_over(one, two, [], lambda: None)
    assert two.fs.methods.count("tools/call") == 1


def test_a_used_state_is_not_taken_again_after_redis_forgot_it_was_used(
    tmp_path: Path, fresh: Redis
) -> None:
    """Redis restarted without its data (or flushed, or its keys evicted) forgets which
    handles were used; the instances still hold the old sealing key. A replay then is
    refused everywhere, and a new round works (under a new key)."""
    states = stores(fresh.url, 3)
    one, two, three = relays(tmp_path, states)
    again = take_over(one, two, [one, two, three], lambda: states[0]._client.flushall())
    assert all(answer is not None and "error" in answer for answer in again), again
    assert [h.fs.methods.count("tools/call") for h in (one, two, three)] == [0, 1, 0]
    assert len({s.sealing_key() for s in states}) == 1  # one new key, the same for all
    fresh_round = take_over(three, one, [], lambda: None)
    assert fresh_round == [] and one.fs.methods.count("tools/call") == 1


def test_control_a_used_mark_set_blindly_lets_the_state_be_replayed_after_a_flush(
    tmp_path: Path, fresh: Redis
) -> None:
    states = stores(fresh.url, 3, kind=Before)
    one, two, three = relays(tmp_path, states)
    again = take_over(one, two, [three], lambda: states[0]._client.flushall())
    assert again[0] is not None and "result" in again[0]
    assert three.fs.methods.count("tools/call") == 1  # the approval used twice


def test_a_handle_is_used_once_by_instances_racing_for_it(fresh: Redis) -> None:
    """Eight instances take the same handle at the same moment: one of them gets it."""
    racers = stores(fresh.url, 8)
    start = threading.Barrier(len(racers))
    won: list[bool] = []

    def race(store: RedisState) -> None:
        start.wait(timeout=60)
        won.append(store.first_use("round:h", 60))

    threads = [threading.Thread(target=race, args=(store,)) for store in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(won) == [False] * 7 + [True]


def test_instances_starting_at_once_agree_on_one_sealing_key(fresh: Redis) -> None:
    start = threading.Barrier(8)
    keys: list[bytes] = []

    def begin() -> None:
        start.wait(timeout=60)
        store = connect(fresh.url, lambda line: None, "d")
        keys.append(store.sealing_key())
        store.close()

    threads = [threading.Thread(target=begin) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(keys) == 8 and len(set(keys)) == 1


@pytest.mark.parametrize(
    "name",
    ["alice:*", "alice\n", "alice\0x", "*", "a" * 4096, "alice:grants:c-0"],
    ids=["colon-star", "newline", "nul", "star", "long", "prefix-like"],
)
def test_a_callers_grants_are_not_reachable_by_a_name_built_to_reach_them(
    fresh: Redis, name: str
) -> None:
    (store,) = stores(fresh.url, 1, "d")
    store.grant(scope_of(ALICE), GROUP, "sha256:x")
    for other in [
        (ALICE[0], name),
        (ALICE[0] + "\0" + "alice", ""),
        ("https://other.example", "alice"),
    ]:
        assert not store.granted(scope_of(other), GROUP, "sha256:x"), other
    keys: Any = store._client.keys("*")
    names = [bytes(key).decode(errors="replace") for key in keys]
    assert all(name not in key and "alice" not in key for key in names)


def test_the_breaker_opens_no_wider_when_redis_is_emptied(fresh: Redis) -> None:
    (store,) = stores(fresh.url, 1, "d")
    breaker = CircuitBreaker(3, shared=store, scope=scope_of(ALICE))
    assert [breaker.allow("fs", "t", {"a": "h"}) for _ in range(3)] == [True] * 3
    store._client.flushall()
    assert not breaker.allow("fs", "t", {"a": "h"})
    # Control: counted in Redis alone (this instance's own count off), the flush reopens it.
    (other,) = stores(fresh.url, 1, "e")
    blind = CircuitBreaker(3, shared=other, scope=scope_of(ALICE))
    blind._here = lambda key: True  # type: ignore[method-assign]
    assert [blind.allow("fs", "t", {"a": "h"}) for _ in range(3)] == [True] * 3
    other._client.flushall()
    assert blind.allow("fs", "t", {"a": "h"})


@contextmanager
def lying(hello: bytes) -> Iterator[str]:
    """A server on a unix socket that speaks Redis's protocol and says yes to everything:
    ``+OK`` to each command, to ``GET`` 32 bytes (as a sealing key would be), and ``hello``
    to ``HELLO`` (the handshake of a client of RESP3): its URL."""
    where = tempfile.mkdtemp(prefix="ic-liar-", dir="/tmp")
    path = os.path.join(where, "liar.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(8)
    stop = threading.Event()

    def said(command: bytes) -> bytes:
        if b"\r\nHELLO\r\n" in command.upper():
            return hello
        if b"\r\nGET\r\n" in command.upper():
            return b"$32\r\n" + b"k" * 32 + b"\r\n"
        return b"+OK\r\n"

    def serve(conn: socket.socket) -> None:
        with conn:
            while not stop.is_set():
                data = conn.recv(65536)
                if not data:
                    return
                conn.sendall(b"".join(said(command) for command in data.split(b"*")[1:]))

    def accept() -> None:
        listener.settimeout(0.2)  # to see ``stop`` soon
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"unix://{path}"
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=30)
        os.unlink(path)
        os.rmdir(where)


@pytest.fixture
def liar() -> Iterator[str]:
    """A yes-to-everything server that knows no RESP3 (the client falls back to RESP2 and
    gets as far as reading and making the sealing key)."""
    with lying(b"-ERR unknown command 'HELLO'\r\n") as url:
        yield url


def test_a_store_that_says_yes_to_everything_grants_nothing(liar: str) -> None:
    said: list[str] = []
    store = connect(liar, said.append, "d")
    try:
        attempts: list[Callable[[], bool]] = [
            lambda: store.granted(scope_of(ALICE), GROUP, "sha256:x"),
            lambda: store.first_use("round:h", 60),
            lambda: store.count("k", 3, 60),
            lambda: store.enter("k", "t", 3),
        ]
        for attempt in attempts:
            with pytest.raises(StateLost):
                attempt()
        approvals = Approvals("elicit", 5.0, shared=store, scope=scope_of(ALICE))

        async def asked(method: str, params: dict[str, Any], timeout: float) -> Any:
            raise AssertionError("no one is asked while the store cannot be believed")

        outcome = asyncio.run(
            approvals.decide(
                "fs", "write_file", {"path": "/x"}, Decision("escalate", "r", "ask"), True, asked
            )
        )
        assert not outcome.approved and outcome.escalation == "state-unavailable"
        # Control: the same lie read as Redis's usual reply would have been a yes.
        assert store._client.sismember("k", "v")
    finally:
        store.close()
    assert len(said) == 1 and "lost" in said[0]


def test_values_ironcurtain_did_not_write_grant_nothing(fresh: Redis) -> None:
    (store,) = stores(fresh.url, 1, "d")
    prefix = f"{PREFIX}d:"
    store._client.set(f"{prefix}grants:{scope_of(ALICE)}:{GROUP}", "sha256:x")
    with pytest.raises(StateLost):
        store.granted(scope_of(ALICE), GROUP, "sha256:x")
    store._client.set(f"{prefix}used:round:h", "not ours")
    assert not store.first_use("round:h", 60)  # a mark already there: taken, refused
    store._client.set(f"{prefix}count:k", "garbage")
    with pytest.raises(StateLost):
        store.count("k", 3, 60)
    store._client.set(f"{prefix}sealing-key", "short")
    with pytest.raises(StateLost):
        connect(fresh.url, lambda line: None, "d")


def test_a_store_that_is_not_redis_stops_the_start_with_one_line(user: Home) -> None:
    """Its ``+OK`` to the handshake makes the client fail in a way of its own (not a
    Redis error): still one line, exit 2, nothing started."""
    with lying(b"+OK\r\n") as url:
        done = ironcurtain(user, "run", "--server", "time", "--http", "0", "--state", url)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"ironcurtain: error: --state {url}: cannot be reached: "), line


def test_a_redis_that_evicts_keys_is_warned_of_at_start(fresh: Redis) -> None:
    """Its evicting a used mark alone (the sealing key kept) could not be noticed: said."""
    (admin,) = stores(fresh.url, 1)
    said: list[str] = []
    try:
        admin._client.config_set("maxmemory", "64mb")
        admin._client.config_set("maxmemory-policy", "volatile-lru")
        connect(fresh.url, said.append, "d").close()
    finally:
        admin._client.config_set("maxmemory", "0")
        admin._client.config_set("maxmemory-policy", "noeviction")
    (line,) = said
    assert line.startswith(f"WARNING: shared state {fresh.url} evicts keys when full"), line
    assert "volatile-lru" in line and "noeviction" in line
    quiet: list[str] = []
    connect(fresh.url, quiet.append, "d").close()  # control: a Redis that never evicts
    assert quiet == []


class Clock:
    """``time.time`` as the round module reads it, ``behind`` seconds slow (an instance
    whose clock is behind the others')."""

    def __init__(self) -> None:
        self.behind = 0.0

    def time(self) -> float:
        return time.time() - self.behind


def replayed_on_a_slow_clock(tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Alice's approval taken on one instance; once its used mark could have lapsed, the
    same retry on an instance whose clock is 120 s behind (it still takes the state)."""
    clock = Clock()
    monkeypatch.setattr(rounds, "time", clock)
    states = stores(url, 3)
    one, two, slow = relays(tmp_path, states)

    def later() -> None:
        """Until the used mark lapses, or for 6 s (past the lapse of a mark that outlives
        its 2 s state by a second; not long enough to matter to one kept for minutes)."""
        until = time.monotonic() + 6
        while states[0]._client.keys("*used:round:*") and time.monotonic() < until:
            time.sleep(0.1)
        clock.behind = 120.0

    (again,) = take_over(one, two, [slow], later)
    return again, slow


def test_a_used_state_is_not_taken_by_an_instance_whose_clock_is_behind(
    tmp_path: Path, fresh: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    again, slow = replayed_on_a_slow_clock(tmp_path, fresh.url, monkeypatch)
    assert again is not None and again["error"]["code"] == -32602, again
    assert "tools/call" not in slow.fs.methods


def test_control_a_mark_that_lapses_with_its_state_lets_a_slow_clock_replay_it(
    tmp_path: Path, fresh: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rounds, "SKEW", 1.0)  # the mark lapsing a second after its state
    again, slow = replayed_on_a_slow_clock(tmp_path, fresh.url, monkeypatch)
    assert again is not None and "result" in again, again
    assert slow.fs.methods.count("tools/call") == 1  # the approval used twice


class Forgetful(dict[tuple[str, str], int]):
    """An instance's own count of requests at once that keeps nothing (its count off)."""

    def __setitem__(self, key: tuple[str, str], value: int) -> None:
        return None


@pytest.mark.parametrize("own", ["counted", "control-not-counted"])
def test_a_callers_requests_at_once_get_no_new_room_when_redis_is_emptied(
    fresh: Redis, own: str
) -> None:
    (store,) = stores(fresh.url, 1, "d")
    endpoint = HttpEndpoint(0, None, None, lambda text: None, None, 16, store)  # type: ignore[arg-type]
    if own != "counted":
        endpoint._out = Forgetful()
    counted = [("caller", "issuer\0alice", CALLER_REQUESTS)]
    held = [endpoint._places(counted) for _ in range(CALLER_REQUESTS)]
    assert all(refused is None for refused, _ in held)
    store._client.flushall()  # Redis restarted empty: its leases are gone
    refused, _ = endpoint._places(counted)
    if own == "counted":
        assert refused == f"too many requests of this caller at once ({CALLER_REQUESTS})"
    else:
        assert refused is None  # the control: a fresh set of places for alice


@contextmanager
def hung() -> Iterator[tuple[str, list[bytes]]]:
    """A server on a unix socket that reads every command and never answers (a Redis that
    hangs): its URL, and what it was sent (one entry per read: the client's handshake,
    each time it connects again after a timeout)."""
    where = tempfile.mkdtemp(prefix="ic-hung-", dir="/tmp")
    path = os.path.join(where, "hung.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(8)
    sent: list[bytes] = []
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(0.2)
            while not stop.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    return
                sent.append(data)

    def accept() -> None:
        listener.settimeout(0.2)  # to see ``stop`` soon
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"unix://{path}", sent
    finally:
        stop.set()
        listener.close()
        thread.join(timeout=30)
        os.unlink(path)
        os.rmdir(where)


@pytest.mark.parametrize("hung_for", [redis_store.HUNG_FOR, 0.0], ids=["kept-off", "control"])
def test_a_redis_that_hangs_is_not_waited_on_by_every_call(
    monkeypatch: pytest.MonkeyPatch, hung_for: float
) -> None:
    """Each wait for a hung store holds the event loop (every caller's requests) for its
    timeout: after one, the calls that follow fail closed at once, sending it nothing."""
    monkeypatch.setattr(redis_store, "HUNG_FOR", hung_for)
    with hung() as (url, sent):
        store = RedisState(url, lambda line: None, "d")
        store._key = b"k" * 32  # as read at start, before it hung
        for _ in range(3):
            with pytest.raises(StateLost):
                store.granted(scope_of(ALICE), GROUP, "sha256:x")
        store.close()
    assert len(sent) == (1 if hung_for else 3), sent  # each wait: one command sent
