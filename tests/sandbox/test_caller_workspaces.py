"""Each caller's own workspace, end to end: the real ``ironcurtain run`` with the real
filesystem server in its sandbox, written to through the ``mcp`` SDK's clients. In gateway
mode (callers from a provider on loopback, tests/support/idp.py) the workspace
``…/work/${caller}`` is each caller's: two callers writing a file of the same name each see
only their own, and a caller whose name reads as a path to another caller's workspace gets a
directory of its own. Over stdio a caller file's caller works in its own directory."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.support.acls import getfacl, names_sandbox
from tests.support.audit import audit_entries
from tests.support.home import Home
from tests.support.http import ACCEPT, http_session, serving
from tests.support.idp import AUDIENCE, Provider, identity_provider
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_server_config, write_raw_policy
from tests.support.sdk import call, connect

pytestmark = needs_bwrap
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}  # fmt: skip


@pytest.fixture
def idp() -> Iterator[Provider]:
    with identity_provider() as provider:
        yield provider


def _args(user: Home, *more: str) -> list[str]:
    return ["--server", "filesystem", "--workspace", f"{user.root}/work/${{caller}}",
            "--audit-log", str(user.root / "audit.jsonl"), "--approval", "deny",
            *more]  # fmt: skip


async def _write_then_read(url: str, token: str, text: str) -> tuple[str, str]:
    """``note.txt`` written with ``text`` in the caller's workspace, then read back; and
    what a listing of the workspace shows."""
    async with http_session(url, token) as session:
        failed, said = await call(session, "write_file", {"path": "note.txt", "content": text})
        assert not failed, said
        failed, read = await call(session, "read_text_file", {"path": "note.txt"})
        assert not failed, read
        _, listing = await call(session, "list_directory", {"path": "."})
        return read, listing


def _stateless_read(url: str, token: str, path: str) -> dict[str, Any]:
    """``read_text_file`` as a request of the stateless protocol: its result."""
    headers = {"Content-Type": "application/json", "Accept": ACCEPT,
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
               "Mcp-Name": "read_text_file", "Authorization": f"Bearer {token}"}  # fmt: skip
    params = {"name": "read_text_file", "arguments": {"path": path}, "_meta": META}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    answer = httpx2.post(url, json=body, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()["result"]
    return result


def test_two_callers_each_write_and_see_only_their_own(user: Home, idp: Provider) -> None:
    work = user.root / "work"
    gateway = ["--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE]
    with serving(user, *_args(user, *gateway)) as served:
        said = "".join(served.stderr)
        assert "started for each caller when it first calls" in said
        assert not work.exists()  # nothing is made before a caller calls

        async def both() -> list[tuple[str, str]]:
            return list(
                await asyncio.gather(
                    _write_then_read(served.url, idp.token("alice"), "alice's"),
                    _write_then_read(served.url, idp.token("auth0|Bob"), "bob's"),
                )
            )

        (alice, alice_sees), (bob, bob_sees) = asyncio.run(both())
        assert (alice, bob) == ("alice's", "bob's")
        assert alice_sees.count("note.txt") == bob_sees.count("note.txt") == 1
        assert (work / "alice" / "note.txt").read_text() == "alice's"
        assert (work / "auth0%7C%42ob" / "note.txt").read_text() == "bob's"
        assert sorted(os.listdir(work)) == ["alice", "auth0%7C%42ob"]
        for own in ("alice", "auth0%7C%42ob"):
            assert stat.S_IMODE((work / own).stat().st_mode) == 0o700
        # A caller's next session, and its requests of the stateless protocol, are served
        # in its workspace.
        again = asyncio.run(_write_then_read(served.url, idp.token("alice"), "alice again"))
        assert again[0] == "alice again"
        answer = _stateless_read(served.url, idp.token("auth0|Bob"), "note.txt")
        assert answer["content"][0]["text"] == "bob's", answer
    entries = audit_entries(user.root / "audit.jsonl")
    made = {
        e["caller"]["name"]: e["workspace"] for e in entries if e.get("event") == "caller-workspace"
    }
    assert made == {"alice": str(work / "alice"), "auth0|Bob": str(work / "auth0%7C%42ob")}


def test_a_name_that_reads_as_a_path_gets_a_workspace_of_its_own(user: Home, idp: Provider) -> None:
    """``x/../alice`` and ``../work/alice`` as raw names would be alice's workspace; made
    safe, each is a directory of its own, and alice's file is out of their reach (the
    sandbox shows neither alice's workspace nor the directory that holds them)."""
    work = user.root / "work"
    gateway = ["--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE]
    with serving(user, *_args(user, *gateway)) as served:
        asyncio.run(_write_then_read(served.url, idp.token("alice"), "alice's secret"))

        async def attack(name: str) -> list[tuple[bool, str]]:
            async with http_session(served.url, idp.token(name)) as session:
                return [
                    await call(session, "read_text_file", {"path": "note.txt"}),
                    await call(session, "read_text_file", {"path": f"{work}/alice/note.txt"}),
                    await call(session, "read_text_file", {"path": "../alice/note.txt"}),
                    await call(session, "write_file", {"path": "note.txt", "content": "mine"}),
                ]

        for name in ("x/../alice", "../work/alice", "%61lice"):
            results = asyncio.run(attack(name))
            assert all("alice's secret" not in text for _, text in results), name
            assert not results[3][0], results[3]  # its own write works, in its own place
    assert (work / "alice" / "note.txt").read_text() == "alice's secret"
    own = ["alice", "x%2F..%2Falice", "%2E.%2Fwork%2Falice", "%2561lice"]
    assert sorted(os.listdir(work)) == sorted(own)


def test_over_stdio_a_caller_file_names_the_workspace(user: Home) -> None:
    caller = user.root / "caller.json"
    caller.write_text(json.dumps({"name": "billing|Agent"}))

    async def scenario() -> str:
        async with connect(user, *_args(user, "--caller", str(caller))) as session:
            failed, said = await call(session, "write_file", {"path": "n.txt", "content": "x"})
            assert not failed, said
            return said

    asyncio.run(scenario())
    assert (user.root / "work" / "billing%7C%41gent" / "n.txt").read_text() == "x"


def _probe_args(user: Home, idp: Provider, allow_write: str) -> list[str]:
    """The hostile probe alone, every call allowed (only the sandbox stands in its way),
    ``allow_write`` writable besides each caller's workspace."""
    server = probe_server_config(True)
    server["sandbox"]["filesystem"]["allowWrite"].append(allow_write)
    config = user.root / "probe.json"
    config.write_text(json.dumps({"mcpServers": {"probe": server}}))
    policy = write_raw_policy(user.root / "policy")
    return ["--config", str(config), "--policy-dir", str(policy), "--server", "probe",
            "--workspace", f"{user.root}/work/${{caller}}", "--audit-log",
            str(user.root / "audit.jsonl"), "--oidc-issuer", idp.issuer,
            "--oidc-audience", AUDIENCE]  # fmt: skip


def _writes(url: str, token: str, paths: list[Path]) -> list[str]:
    async def scenario() -> list[str]:
        async with http_session(url, token) as session:
            return [
                (await call(session, "write_path", {"path": str(p), "content": "x"}))[1]
                for p in paths
            ]

    return asyncio.run(scenario())


@pytest.mark.parametrize("shared", [False, True], ids=["own", "control-shared"])
def test_a_server_writes_only_its_callers_own_directory(
    user: Home, idp: Provider, shared: bool
) -> None:
    """A directory in allowWrite naming ${caller} is made for each caller when it first
    calls and is all of that directory its servers can write: a hostile server of alice's,
    let through by the policy, cannot write bob's. The control names the directory that
    holds them instead: the same write then lands in bob's."""
    cache = user.root / "cache"
    allow = str(cache) if shared else f"{cache}/${{caller}}"
    if shared:
        (cache / "bob").mkdir(parents=True)
    with serving(user, *_probe_args(user, idp, allow)) as served:
        assert _writes(served.url, idp.token("bob"), [cache / "bob" / "mine.txt"]) == ["WRITE OK"]
        if not shared:  # made for bob, no one else's (as root, an ACL lets the servers' user in)
            assert stat.S_IMODE((cache / "bob").stat().st_mode) & 0o007 == 0
        alice = _writes(
            served.url,
            idp.token("alice"),
            [cache / "alice" / "mine.txt", cache / "bob" / "planted.txt"],
        )
    if os.geteuid() == 0 and shutil.which("getfacl"):
        # As root, what each caller's plan opened to the servers' user is closed again.
        assert not [b for b in getfacl(cache).values() if names_sandbox(b)]
    if shared:
        assert (cache / "bob" / "planted.txt").exists()  # the attack works here
        return
    assert alice[0] == "WRITE OK" and (cache / "alice" / "mine.txt").exists()
    assert alice[1].startswith("WRITE FAILED"), alice
    assert not (cache / "bob" / "planted.txt").exists()


def test_what_one_callers_server_does_to_its_workspace_stops_only_that_callers(
    user: Home, idp: Provider
) -> None:
    """Alice's hostile server makes a tree deeper than the guard follows in alice's
    workspace: the guard fails closed and alice's server is stopped, her calls refused from
    then on (the failure is real); bob's server, whose workspace is another, goes on."""
    work = user.root / "work"
    deep = work / "alice" / "/".join(["d"] * 410) / "f.txt"
    with serving(user, *_probe_args(user, idp, f"{user.root}/cache/${{caller}}")) as served:
        assert _writes(served.url, idp.token("bob"), [work / "bob" / "a.txt"]) == ["WRITE OK"]
        tree = asyncio.run(_write_parents(served.url, idp.token("alice"), deep))
        assert "server 'probe' was stopped: the guard could not neutralise" in tree
        after = _writes(served.url, idp.token("alice"), [work / "alice" / "b.txt"])
        assert "WRITE OK" not in after[0]  # the control: alice's server was stopped
        assert _writes(served.url, idp.token("bob"), [work / "bob" / "b.txt"]) == ["WRITE OK"]
    entries = audit_entries(user.root / "audit.jsonl")
    failures = [e for e in entries if e.get("event") == "guard-failure"]
    assert failures and failures[0]["root"] == str(work / "alice")


async def _write_parents(url: str, token: str, path: Path) -> str:
    async with http_session(url, token) as session:
        args = {"path": str(path), "content": "x", "parents": True}
        return (await call(session, "write_path", args))[1]
