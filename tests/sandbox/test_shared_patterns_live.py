"""Pattern approvals across real gateway instances behind a real HAProxy, kept in a real
Redis (``--state``): the operator's real ``ironcurtain approvals`` terminal, attached to
every instance, gives a pattern on one; it answers the same caller's calls on every
instance and never another caller's; ``--revoke`` through one instance holds on all of
them at their next call; a lost Redis answers nothing; a directory pattern of the real
filesystem server holds on another instance while Redis holds the directory only as its
hash. The control: the same instances without ``--state``, where the pattern stays on the
instance that gave it."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from launcher.audit.log import hash_value
from tests.sandbox.test_shared_state import META, calls, entries, post, workspaces
from tests.support.audit import audit_entries
from tests.support.cli import run_args
from tests.support.home import Home
from tests.support.http import Served, http_session, serving
from tests.support.idp import AUDIENCE, Provider, identity_provider
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN
from tests.support.probe import write_probe_config, write_raw_policy
from tests.support.sdk import answer_asked, attached_terminal, leave
from tests.support.sdk import call as sdk_call
from tests.support.shared_state import Redis, haproxy, needs_haproxy, needs_redis, redis_server

pytestmark = [needs_bwrap, needs_redis, needs_haproxy]
RULE = "ask-before-env"
ASK = {"name": RULE, "if": {"tool": ["env_value"]}, "then": "escalate", "reason": "a human"}
PATTERN = (
    f"calls of env_value on server 'probe' escalated by rule {RULE}, with any arguments "
    "(none of them names a path or a URL)"
)
LOST = "ironcurtain: shared state unix://"
OFFER = f"[p1] approve for this session all {PATTERN}"


@pytest.fixture
def idp() -> Iterator[Provider]:
    with identity_provider() as provider:
        yield provider


@pytest.fixture
def redis() -> Iterator[Redis]:
    with redis_server() as server:
        yield server


@contextmanager
def instances(
    user: Home, idp: Provider, count: int, state: str | None, said: list[list[str]] | None = None
) -> Iterator[tuple[str, list[Served], list[Path]]]:
    """``count`` instances of the probe, approvals put to the operator's terminal, sharing
    ``state`` (None: each its own), behind HAProxy: its URL, the instances, their audits
    (``said``: filled with what each instance said on stderr, once they stopped)."""
    policy = write_raw_policy(user.root / "policy", first=[ASK])
    config = write_probe_config(user)
    audits = [user.root / f"audit-{n}.jsonl" for n in range(count)]
    shared = ["--state", state] if state is not None else []
    options = ["--server", "probe", "--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE,
               "--approval", "auto", "--approval-timeout", "120", *shared]  # fmt: skip
    served: list[Served] = []
    try:
        with ExitStack() as stack:
            for ws, audit in zip(workspaces(user, count), audits, strict=True):
                args = run_args(config, policy, ws, audit)
                served.append(stack.enter_context(serving(user, *args, *options)))
            yield stack.enter_context(haproxy(user.root, [s.port for s in served])), served, audits
    finally:
        for one in served:  # each one's whole stderr, its block over
            if said is not None:
                said.append(one.stderr)


def env(name: str) -> dict[str, Any]:
    return {"name": "env_value", "arguments": {"name": name}, "_meta": META}


async def text(url: str, token: str, rid: int, name: str) -> str:
    """The answer to ``env_value(name)`` posted to ``url`` (its text: a value, or why not)."""
    answer = await asyncio.to_thread(post, url, token, rid, env(name))
    return str(answer["result"]["content"][0]["text"])


async def asked(
    terminal: asyncio.subprocess.Process, said: bytes, url: str, token: str, rid: int, name: str
) -> tuple[str, str]:
    """``env_value(name)`` posted to ``url``, put to the terminal, which answers ``said``:
    what the terminal showed, and the call's answer."""
    call = asyncio.ensure_future(text(url, token, rid, name))
    shown = await answer_asked(terminal, said)
    return shown, await call


def approvals(user: Home, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [IRONCURTAIN, "approvals", *args], env=user.env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def escalations(audits: list[Path], tool: str = "env_value") -> list[tuple[int, str, str]]:
    """Each instance's calls of ``tool``: (instance, caller, escalation), by instance."""
    return sorted(
        (n, str(e["caller"]["name"]), str(e["escalation"]))
        for n, audit in enumerate(audits)
        for e in entries(audit, tool)
    )


def test_a_pattern_given_on_one_instance_holds_on_all_for_its_caller_alone_until_revoked(
    user: Home, idp: Provider, redis: Redis
) -> None:
    alice, bob = idp.token("alice"), idp.token("bob")
    out: dict[str, Any] = {}

    async def scenario(url: str, served: list[Served]) -> None:
        terminal = await attached_terminal(user, sessions=3)
        out["offer"], out["given"] = await asked(terminal, b"p1", served[0].url, alice, 1, "HOME")
        # Through the balancer, once on each instance: answered by the pattern, not asked.
        out["balanced"] = [await text(url, alice, rid, "PATH") for rid in (2, 3, 4)]
        out["bob"] = await asked(terminal, b"d", served[1].url, bob, 5, "HOME")
        out["list"] = await asyncio.to_thread(approvals, user, "--list")
        pid = re.search(r"^(p-[0-9a-f]+) ", out["list"].stdout, re.M)
        assert pid, out["list"].stdout + out["list"].stderr
        out["revoke"] = await asyncio.to_thread(approvals, user, "--revoke", pid[1])
        # Revoked through one instance: asked again on every one (and denied).
        out["after"] = [
            await asked(terminal, b"d", s.url, alice, 6 + n, "HOME") for n, s in enumerate(served)
        ]
        out["listed-after"] = await asyncio.to_thread(approvals, user, "--list")
        out["left"] = await leave(terminal)

    with instances(user, idp, 3, redis.url) as (url, served, audits):
        asyncio.run(scenario(url, served))
    assert OFFER in out["offer"] and out["given"] == "/tmp/home"
    balanced = out["balanced"]
    assert len(set(balanced)) == 1 and not balanced[0].startswith("ESCALATION"), balanced
    shown, bobs = out["bob"]
    assert "bob" in shown and bobs.startswith("ESCALATION DENIED"), bobs
    (line,) = out["list"].stdout.splitlines()  # one pattern, listed once of three sessions
    assert f"caller alice ({idp.issuer})" in line and line.endswith(PATTERN), line
    assert out["revoke"].returncode == 0 and out["revoke"].stdout.startswith("revoked p-")
    for shown, answer in out["after"]:
        assert "alice" in shown and answer.startswith("ESCALATION DENIED"), answer
    assert out["listed-after"].stdout == "no pattern approvals in force\n"
    assert escalations(audits) == [
        (0, "alice", "approved-pattern"), (0, "alice", "denied"), (0, "alice", "pattern"),
        (1, "alice", "denied"), (1, "alice", "pattern"), (1, "bob", "denied"),
        (2, "alice", "denied"), (2, "alice", "pattern"),
    ]  # fmt: skip
    # Redis keeps the pattern's value as the audit log does: its hash, never in clear.
    (given,) = [e for e in audit_entries(audits[0]) if e.get("escalation") == "approved-pattern"]
    assert given["pattern"]["value"] == hash_value("opaque")
    revoked = [e for a in audits if a.exists() for e in audit_entries(a) if e.get("event")]
    assert [e["event"] for e in revoked if e["event"] == "pattern-revoked"] == ["pattern-revoked"]
    assert len(calls(user, 3)) == 4  # the given call, and the three the pattern answered


def test_control_without_a_shared_state_a_pattern_stays_on_its_instance(
    user: Home, idp: Provider
) -> None:
    alice = idp.token("alice")
    out: dict[str, Any] = {}

    async def scenario(served: list[Served]) -> None:
        terminal = await attached_terminal(user, sessions=2)
        out["offer"], out["given"] = await asked(terminal, b"p1", served[0].url, alice, 1, "HOME")
        out["here"] = await text(served[0].url, alice, 2, "PATH")
        out["there"] = await asked(terminal, b"d", served[1].url, alice, 3, "PATH")
        out["list"] = await asyncio.to_thread(approvals, user, "--list")
        await leave(terminal)

    with instances(user, idp, 2, None) as (_, served, audits):
        asyncio.run(scenario(served))
    assert OFFER in out["offer"] and not out["here"].startswith("ESCALATION"), out["here"]
    shown, answer = out["there"]
    assert "alice" in shown and answer.startswith("ESCALATION DENIED"), answer
    assert len(out["list"].stdout.splitlines()) == 1
    assert escalations(audits) == [
        (0, "alice", "approved-pattern"), (0, "alice", "pattern"), (1, "alice", "denied"),
    ]  # fmt: skip


def test_redis_lost_a_pattern_answers_nothing_and_the_list_says_why(
    user: Home, idp: Provider, redis: Redis
) -> None:
    alice = idp.token("alice")
    out: dict[str, Any] = {}

    async def scenario(served: list[Served]) -> None:
        terminal = await attached_terminal(user, sessions=2)
        out["offer"], out["given"] = await asked(terminal, b"p1", served[0].url, alice, 1, "HOME")
        held = (await asyncio.to_thread(approvals, user, "--list")).stdout.split(" ")[0]
        assert held.startswith("p-"), held
        redis.stop()
        # Denied on both instances without asking anyone (the terminal is shown nothing).
        where = [(served[0], "PATH"), (served[1], "PATH"), (served[0], "HOME")]
        out["lost"] = [await text(s.url, alice, 2 + n, name) for n, (s, name) in enumerate(where)]
        out["list"] = await asyncio.to_thread(approvals, user, "--list")
        out["revoke"] = await asyncio.to_thread(approvals, user, "--revoke", held)
        out["left"] = await leave(terminal)

    said: list[list[str]] = []
    with instances(user, idp, 2, redis.url, said) as (_, served, audits):
        asyncio.run(scenario(served))
    assert OFFER in out["offer"] and out["given"] == "/tmp/home"
    lost = [[line for line in lines if line.startswith(LOST)] for lines in said]
    assert [len(lines) for lines in lost] == [1, 1], lost  # said once, by each instance
    for answer in out["lost"]:
        assert "shared state" in answer and "cannot be reached" in answer, answer
    assert "[a]pprove" not in out["left"]
    assert out["list"].returncode == 1 and out["list"].stdout == ""
    errors = out["list"].stderr.splitlines()
    assert len(errors) == 2 and all("the shared state cannot be reached" in e for e in errors)
    # Nor can a pattern be revoked: said, exit 1 (not "no session holds it").
    assert out["revoke"].returncode == 1 and out["revoke"].stdout == ""
    assert "the shared state cannot be reached" in out["revoke"].stderr
    assert escalations(audits) == [
        (0, "alice", "approved-pattern"), (0, "alice", "state-unavailable"),
        (0, "alice", "state-unavailable"), (1, "alice", "state-unavailable"),
    ]  # fmt: skip
    assert len(calls(user, 2)) == 1


def test_a_directory_pattern_holds_on_another_instance_and_redis_never_holds_the_directory(
    user: Home, idp: Provider, redis: Redis
) -> None:
    """The real filesystem server under the bundled policy: alice's write outside her
    workspace, asked on instance 0, given its directory as a pattern; her next write there on
    instance 1 is made without asking, bob's is asked (and denied). Redis holds the pattern,
    and the directory only as its hash."""
    notes = user.root / "confidential-notes"
    notes.mkdir()
    out: dict[str, Any] = {}

    def write(name: str) -> tuple[str, dict[str, Any]]:
        return "write_file", {"path": str(notes / name), "content": f"{name}\n"}

    async def scenario(urls: list[str]) -> None:
        async with (
            http_session(urls[0], idp.token("alice")) as alice_0,
            http_session(urls[1], idp.token("alice")) as alice_1,
            http_session(urls[1], idp.token("bob")) as bob_1,
        ):
            terminal = await attached_terminal(user, sessions=2)
            shown = asyncio.ensure_future(answer_asked(terminal, b"p1"))
            out["first"] = await sdk_call(alice_0, *write("alice-1"))
            out["offer"] = await shown
            out["there"] = await sdk_call(alice_1, *write("alice-2"))  # not asked
            shown = asyncio.ensure_future(answer_asked(terminal, b"d"))
            out["bob"] = await sdk_call(bob_1, *write("bob-1"))
            out["bob-shown"] = await shown
            out["redis"] = _redis_dump(redis)
            await leave(terminal)

    audits = [user.root / "audit-0.jsonl", user.root / "audit-1.jsonl"]
    gateway = ["--server", "filesystem", "--oidc-issuer", idp.issuer,
               "--oidc-audience", AUDIENCE, "--state", redis.url]  # fmt: skip
    with ExitStack() as stack:
        served: list[Served] = []
        for n, audit in enumerate(audits):
            ws = f"{user.root}/work-{n}/${{caller}}"
            args = [*gateway, "--audit-log", str(audit), "--workspace", ws]
            served.append(stack.enter_context(serving(user, *args)))
        try:
            asyncio.run(scenario([s.url for s in served]))
        finally:
            for one in served:
                assert one.proc.stderr
                one.proc.stderr.close()
    directory = str(notes.resolve())
    assert f"whose every path is under {directory} (reads and writes there)" in out["offer"]
    assert out["first"][0] is False and out["there"][0] is False, out
    assert (notes / "alice-2").read_text() == "alice-2\n"
    assert "bob" in out["bob-shown"] and out["bob"][0] is True and not (notes / "bob-1").exists()
    assert escalations(audits, "write_file") == [
        (0, "alice", "approved-pattern"), (1, "alice", "pattern"), (1, "bob", "denied"),
    ]  # fmt: skip
    assert hash_value(directory).encode() in out["redis"]  # control: the pattern is there
    for clear in (directory, "confidential-notes"):
        assert clear.encode() not in out["redis"]


def _redis_dump(redis: Redis) -> bytes:
    """Every key in ``redis`` and its whole value (what a reader of Redis reads)."""
    import redis as redis_py

    client: Any = redis_py.Redis(unix_socket_path=str(redis.socket))
    found = b""
    try:
        for name in client.scan_iter():
            found += bytes(name) + b"\n" + bytes(client.dump(name) or b"") + b"\n"
            if client.type(name) == b"hash":
                for field, value in client.hgetall(name).items():
                    found += bytes(field) + b"=" + bytes(value) + b"\n"
    finally:
        client.close()
    return found
