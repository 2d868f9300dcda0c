"""Pattern approvals kept in the shared state: the stores' contract (this process's and a
real ``redis-server``'s); a pattern given on one instance answers its owner's calls on
another, never another caller's; a revoke holds at the next call everywhere; a lost Redis
answers nothing (asked of no one, denied) and is said once; the directory or host is never
in Redis in clear; and matching from the hash answers exactly what the in-process store
answers. Each promise with its control: instances keeping their patterns each in their own
process."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from launcher.audit.log import hash_value
from launcher.relay.approving.approval import PATTERN, Approvals
from launcher.relay.approving.patterns import LocalPatterns, PatternStore, lister, owner_of
from launcher.relay.approving.shared_patterns import SharedPatterns, candidates
from launcher.shared_state.memory import MemoryState
from launcher.shared_state.redis_store import RedisState, connect
from launcher.shared_state.store import SharedState, StateLost, scope_of
from policy.decision import Decision
from policy.patterns import CallShape, Pattern, offered
from tests.support.marks import lacks
from tests.support.shared_state import Redis, needs_redis, redis_server

ASK = Decision("escalate", "ask-elsewhere", "a write elsewhere needs a human")
ISSUER = "https://id.example"
ALICE = {"issuer": ISSUER, "name": "alice"}
BOB = {"issuer": ISSUER, "name": "bob"}
NOTES = "/srv/team-notes/q3-layoffs"
HOST = "payroll.internal.example"


@pytest.fixture(scope="module")
def redis() -> Iterator[Redis]:
    with redis_server() as server:
        yield server


@pytest.fixture
def store(redis: Redis) -> Iterator[Redis]:
    """The module's Redis, emptied."""
    one = connect(redis.url, lambda line: None)
    one._client.flushdb()
    one.close()
    yield redis


@pytest.fixture(params=["memory", "redis"])
def state(request: pytest.FixtureRequest) -> Iterator[SharedState]:
    if request.param == "memory":
        yield MemoryState()
        return
    if shutil.which("redis-server") is None:
        lacks("redis-server is not installed (Debian's redis-server package)")
    server: Redis = request.getfixturevalue("store")
    kept = connect(server.url, lambda line: None)
    yield kept
    kept.close()


def write(*paths: str) -> CallShape:
    classes = {"path": "write", "content": "opaque"}
    return CallShape("fs", "write_file", ASK.rule, classes, paths, ())


def fetch(*urls: str) -> CallShape:
    return CallShape("web", "fetch", ASK.rule, {"url": "url"}, (), urls)


class Terminal:
    """An operator's terminal answering each question with the next of ``answers``."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.asked: list[dict[str, Any]] = []

    @property
    def attached(self) -> bool:
        return True

    async def ask(self, question: dict[str, Any], timeout: float) -> str:
        self.asked.append(question)
        return self.answers.pop(0)


def instance(state: SharedState | None, terminal: Terminal, caller: dict[str, str]) -> Approvals:
    """One instance's approvals of ``caller``'s calls: its patterns kept in ``state``
    (None: in this process, as without ``--state``)."""
    patterns: PatternStore = SharedPatterns(state) if state is not None else LocalPatterns()
    base = Approvals("socket", 30, terminal, callers=True, shared=state, patterns=patterns)
    return base.for_caller(caller, scope_of((caller["issuer"], caller["name"])))


async def _never(method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
    raise AssertionError("no client is asked here")


def decide(approvals: Approvals, shape: CallShape) -> str:
    """The escalation a call of ``shape`` ends with (offered what it may be offered)."""
    offers = offered(shape, lambda directory: None)
    arguments: dict[str, object] = {"path": list(shape.paths), "url": list(shape.urls)}
    outcome = asyncio.run(
        approvals.decide(
            shape.server, shape.tool, arguments, ASK, False, _never, shape=shape, offers=offers
        )
    )
    return outcome.escalation


def test_patterns_are_their_scopes_own_listed_and_dropped(state: SharedState) -> None:
    state.add_pattern("c-alice", "p-1", '{"a": 1}')
    state.add_pattern("c-alice", "p-2", '{"a": 2}')
    state.add_pattern("c-bob", "p-3", '{"b": 3}')
    assert state.patterns("c-alice") == {"p-1": '{"a": 1}', "p-2": '{"a": 2}'}
    assert state.patterns("c-mallory") == {}
    assert state.drop_pattern("c-alice", "p-1") and not state.drop_pattern("c-bob", "p-1")
    assert state.every_pattern() == {"c-alice": {"p-2": '{"a": 2}'}, "c-bob": {"p-3": '{"b": 3}'}}


@needs_redis
def test_a_pattern_given_on_one_instance_answers_its_owner_on_another_never_another_caller(
    store: Redis,
) -> None:
    one, two = connect(store.url, print), connect(store.url, print)
    operator = Terminal(f"{PATTERN}1", "deny")
    try:
        assert decide(instance(one, operator, ALICE), write(f"{NOTES}/a.md")) == "approved-pattern"
        # On the other instance: alice's write under the directory, answered by the pattern.
        assert decide(instance(two, operator, ALICE), write(f"{NOTES}/sub/b.md")) == "pattern"
        # Bob's identical write is put to the operator (who denies it).
        assert decide(instance(two, operator, BOB), write(f"{NOTES}/sub/b.md")) == "denied"
    finally:
        one.close()
        two.close()
    assert [q.get("caller", {}).get("name") for q in operator.asked] == ["alice", "bob"]


def test_control_kept_in_each_process_a_pattern_stays_on_its_instance() -> None:
    operator = Terminal(f"{PATTERN}1", "deny")
    assert decide(instance(None, operator, ALICE), write(f"{NOTES}/a.md")) == "approved-pattern"
    assert decide(instance(None, operator, ALICE), write(f"{NOTES}/sub/b.md")) == "denied"


@needs_redis
def test_a_revoke_on_one_instance_holds_on_the_other_at_its_next_call(store: Redis) -> None:
    one, two = connect(store.url, print), connect(store.url, print)
    operator = Terminal(f"{PATTERN}1", "deny")
    audited: list[dict[str, object]] = []
    try:
        here, there = instance(one, operator, ALICE), instance(two, operator, ALICE)
        assert decide(here, write(f"{NOTES}/a.md")) == "approved-pattern"
        assert decide(there, write(f"{NOTES}/b.md")) == "pattern"  # used there: then revoked
        listing = lister(here.patterns, audited.append)  # the instance where it was given
        (held,) = listing({"type": "patterns"})["patterns"]
        assert held["owner"] == owner_of(ALICE) and held["text"].endswith(
            f"whose every path is under {NOTES} (reads and writes there)"
        )
        assert listing({"type": "revoke", "id": held["id"]})["pattern"]["id"] == held["id"]
        assert decide(there, write(f"{NOTES}/c.md")) == "denied"  # asked again, denied
    finally:
        one.close()
        two.close()
    assert audited[0]["event"] == "pattern-revoked"
    assert audited[0]["pattern"]["value"] == hash_value(NOTES)  # type: ignore[index]


@needs_redis
def test_the_directory_and_the_host_are_never_in_redis_in_clear(store: Redis) -> None:
    one = connect(store.url, print)
    try:
        patterns = SharedPatterns(one)
        patterns.give(owner_of(ALICE), Pattern("directory", "fs", "write_file", ASK.rule, NOTES))
        origin = f"https://{HOST}"  # a host pattern is bound to scheme, host and port
        patterns.give(owner_of(ALICE), Pattern("domain", "web", "fetch", ASK.rule, origin))
        everything = _dump(one)
        # Another instance (which never saw them in clear) still matches from the hash.
        other = SharedPatterns(connect(store.url, print))
        assert other.find(owner_of(ALICE), write(f"{NOTES}/x")) is not None
        assert other.find(owner_of(ALICE), fetch(f"https://{HOST}/salaries")) is not None
        # What it lists of them: the hash (it never saw the values).
        assert {g.pattern.value for g in SharedPatterns(one).listed()} == {
            hash_value(NOTES),
            hash_value(origin),
        }
    finally:
        one.close()
    for secret in (NOTES, "team-notes", "q3-layoffs", HOST, "payroll"):
        assert secret.encode() not in everything
    assert hash_value(NOTES).encode() in everything  # control: the records are all there
    assert hash_value(f"https://{HOST}").encode() in everything and b"alice" in everything


def _dump(state: RedisState) -> bytes:
    """Every key of the store and its whole value, as bytes (what a reader of Redis reads)."""
    client: Any = state._client
    found = b""
    for name in client.scan_iter():
        found += bytes(name) + b"\n" + bytes(client.dump(name) or b"") + b"\n"
        if client.type(name) == b"hash":
            for field, value in client.hgetall(name).items():
                found += bytes(field) + b"=" + bytes(value) + b"\n"
    return found


# A given pattern's call, and calls an attacker would try next under it.
_CALLS = [
    write(f"{NOTES}/a.md"),
    write(f"{NOTES}/deep/er/b.md", f"{NOTES}/c.md"),
    write(NOTES),
    write(f"{NOTES}x/a.md"),
    write("/srv/team-notes/a.md"),
    write(f"{NOTES}/a.md", "/etc/passwd"),
    write("srv/team-notes/q3-layoffs/a.md"),
    write(f"{NOTES}/../../../etc/cron.d/x"),
    write("/"),
    fetch(f"https://{HOST}/a"),
    fetch(f"http://{HOST}:8443/a?b#c"),
    fetch(f"https://{HOST}.evil.example/a"),
    fetch(f"https://{HOST}@evil.example/a"),
    fetch(f"https://evil.example/?{HOST}"),
    fetch(f"https://{HOST}/a", "https://evil.example/"),
    fetch(f"https://sub.{HOST}/a"),
    fetch(f"https://{HOST.upper()}/a"),
    CallShape("probe", "env_value", ASK.rule, {"name": "opaque"}, (), ()),
    CallShape("probe", "env_value", ASK.rule, {"name": "read"}, ("/etc/shadow",), ()),
    CallShape("probe", "env_value", "another-rule", {"name": "opaque"}, (), ()),
]


@pytest.mark.parametrize("given", range(len(_CALLS)), ids=lambda n: f"given{n}")
def test_matching_from_the_hash_answers_what_matching_in_clear_answers(given: int) -> None:
    """For every pattern a call is offered, each other call is answered by the hashed
    record exactly as by the pattern kept in clear."""
    for pattern in offered(_CALLS[given], lambda directory: None):
        local, shared = LocalPatterns(), SharedPatterns(MemoryState())
        local.give("alice", pattern)
        shared.give("alice", pattern)
        for shape in _CALLS:
            found = shared.find("alice", shape)
            assert (found is not None) == (local.find("alice", shape) is not None), (pattern, shape)
            assert found is None or pattern.value in candidates(pattern.kind, shape)


def test_control_the_hash_alone_would_answer_what_the_pattern_does_not_cover(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Control: a hit on the hash without the judgement after it takes a write whose first
    path is under the directory and whose second is ``/etc/passwd``; the store refuses it."""
    pattern = offered(_CALLS[0], lambda directory: None)[0]
    shared = SharedPatterns(MemoryState())
    shared.give("alice", pattern)
    smuggled = write(f"{NOTES}/a.md", "/etc/passwd")
    assert shared.find("alice", smuggled) is None
    monkeypatch.setattr("launcher.relay.approving.shared_patterns.covers", lambda p, s: True)
    assert shared.find("alice", smuggled) is not None


class _Lost:
    """A shared state that cannot be reached."""

    shared = True
    where = "redis://gone"

    def __getattr__(self, name: str) -> Any:
        def lost(*args: object) -> Any:
            raise StateLost("connection refused")

        return lost


class _Unwritable(MemoryState):
    """A shared state lost just as a pattern is to be kept."""

    def add_pattern(self, scope: str, pid: str, record: str) -> None:
        raise StateLost("connection reset")


def test_lost_the_pattern_answers_nothing_and_none_is_given() -> None:
    """A lost store: no pattern answers a call, the call is denied without asking; a pattern
    chosen that cannot be kept is not taken, and the call it answered is denied."""
    operator = Terminal()
    patterns = SharedPatterns(_Lost())
    lost = Approvals("socket", 30, operator, callers=True, patterns=patterns)
    assert decide(lost, write(f"{NOTES}/a.md")) == "state-unavailable"
    assert operator.asked == []
    assert lister(patterns, print)({"type": "patterns"}) == {
        "type": "error",
        "error": "the shared state cannot be reached (connection refused)",
    }
    chooser = Terminal(f"{PATTERN}1")
    unwritable = SharedPatterns(_Unwritable())
    approvals = Approvals("socket", 30, chooser, callers=True, patterns=unwritable)
    assert decide(approvals, write(f"{NOTES}/a.md")) == "state-unavailable"
    assert len(chooser.asked) == 1 and unwritable.listed() == []


def test_control_a_store_that_keeps_it_takes_the_pattern() -> None:
    chooser = Terminal(f"{PATTERN}1")
    kept = SharedPatterns(MemoryState())
    approvals = Approvals("socket", 30, chooser, callers=True, patterns=kept)
    assert decide(approvals, write(f"{NOTES}/a.md")) == "approved-pattern"
    assert decide(approvals, write(f"{NOTES}/b.md")) == "pattern"
    assert [g.pattern.value for g in kept.listed()] == [NOTES]  # seen here: listed in clear


@needs_redis
def test_redis_stopped_patterns_answer_nothing_said_once_then_back() -> None:
    said: list[str] = []
    operator = Terminal(f"{PATTERN}1", "deny")
    with redis_server() as server:
        kept = connect(server.url, said.append)
        try:
            approvals = instance(kept, operator, ALICE)
            assert decide(approvals, write(f"{NOTES}/a.md")) == "approved-pattern"
            server.stop()
            lost = [decide(approvals, write(f"{NOTES}/{n}.md")) for n in range(3)]
            server.start()  # nothing kept: the pattern is gone with the store's memory
            again = decide(approvals, write(f"{NOTES}/x.md"))
        finally:
            kept.close()
    assert lost == ["state-unavailable"] * 3 and again == "denied"
    assert len(operator.asked) == 2
    assert [line.split(" (")[0] for line in said] == [
        f"shared state {server.url} lost",
        f"shared state {server.url} is back",
    ]


@needs_redis
def test_a_tool_that_changed_loses_its_patterns_on_every_instance(store: Redis) -> None:
    one, two = connect(store.url, print), connect(store.url, print)
    operator = Terminal(f"{PATTERN}1", f"{PATTERN}1", "deny")
    try:
        assert decide(instance(one, operator, ALICE), write(f"{NOTES}/a.md")) == "approved-pattern"
        assert decide(instance(one, operator, BOB), write(f"{NOTES}/a.md")) == "approved-pattern"
        instance(two, operator, ALICE).forget("fs", "write_file")
        assert SharedPatterns(one).listed() == []
        assert decide(instance(one, operator, BOB), write(f"{NOTES}/b.md")) == "denied"
    finally:
        one.close()
        two.close()
