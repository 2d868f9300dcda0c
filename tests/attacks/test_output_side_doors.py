"""Attacks on the output policy and the credential detectors, by a hostile server: once a
tool has an output policy, nothing of its answer reaches the client but what the policy
passed, by any path (errors, ``_meta``, keys the schema does not name, content items'
annotations, an embedded resource's URI or blob, a progress message); the detectors mask
credentials in the listings and in object keys. Each door is also tried with the protection
off (no output policy; the detectors off for the server), where what it carries gets through.

The client is raw JSON lines, so it sees every byte ironcurtain sends."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.servers.side_door_server import AWS_KEY, CODE, DOORS, GITHUB_TOKEN, SSN
from tests.support.client import Client
from tests.support.home import Home, make_home
from tests.support.paths import IRONCURTAIN, TESTS
from tests.support.probe import write_raw_policy

# The side-door server runs (unsandboxed: what is tested is the relay, not the OS sandbox).
pytestmark = pytest.mark.sandbox

SERVER = TESTS / "servers" / "side_door_server.py"
POLICY = {
    "tools": [
        {"server": "side", "tool": "record", "fields": {".customer.id": "allow", "..email": "mask"}}
    ]
}


@contextlib.contextmanager
def _session(user: Home, output_policy: bool, mask: bool = True) -> Iterator[Client]:
    server: dict[str, Any] = {"command": sys.executable, "args": [str(SERVER)], "sandbox": False}
    if not mask:
        server["maskSecrets"] = False
    config = user.root / "side.json"
    config.write_text(json.dumps({"mcpServers": {"side": server}}))
    policy = write_raw_policy(user.root / "policy", {"side": {"record": ["door"]}})
    if output_policy:
        (policy / "output-policy.json").write_text(json.dumps(POLICY))
    args = ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(user.ws()),
            "--audit-log", str(user.root / "audit.jsonl"), "--server", "side",
            "--allow-unsandboxed"]  # fmt: skip
    client = Client.spawn([IRONCURTAIN, "run", *args], user.env)
    try:
        client.initialize({}, timeout=60)
        yield client
    finally:
        client.kill()
        client.proc.wait()


def _through(client: Client, door: str) -> str:
    """Everything the client receives for one call through ``door``, as text."""
    params = {"name": "record", "arguments": {"door": door}, "_meta": {"progressToken": "p"}}
    request_id = client.request("tools/call", params)
    seen: list[dict[str, Any]] = []
    while True:
        message = client.receive()
        seen.append(message)
        if message.get("id") == request_id and "method" not in message:
            return json.dumps(seen)


@pytest.fixture(scope="module")
def through(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, dict[str, str]]:
    """What the client got through each door, with the output policy and without."""
    out: dict[bool, dict[str, str]] = {}
    for protected in (True, False):
        user = make_home(tmp_path_factory.mktemp(f"side-{protected}"))
        with _session(user, protected) as client:
            out[protected] = {door: _through(client, door) for door in DOORS}
    return out


@pytest.mark.parametrize("door", sorted(DOORS))
def test_nothing_the_output_policy_removed_gets_out_by_another_door(
    through: dict[bool, dict[str, str]], door: str
) -> None:
    assert SSN not in through[True][door], through[True][door]


@pytest.mark.parametrize("door", sorted(DOORS))
def test_without_an_output_policy_each_door_carries_it(
    through: dict[bool, dict[str, str]], door: str
) -> None:
    got = through[False][door]
    if door == "resource-blob":  # the blob carries it encoded
        assert "MTIzLTQ1LTY3ODk=" in got, got
    elif door == "error-code":  # no JSON-RPC code is that large: refused whatever the policy
        assert str(CODE) not in got, got
    else:
        assert SSN in got, got


def test_an_error_code_that_spells_it_does_not_get_out(
    through: dict[bool, dict[str, str]],
) -> None:
    assert str(CODE) not in through[True]["error-code"]


def test_what_the_policy_lets_through_still_arrives(through: dict[bool, dict[str, str]]) -> None:
    answer = json.loads(through[True]["result-meta"])[-1]["result"]
    assert answer == {"content": [{"type": "text", "text": '{"customer": {"id": 7}}'}]}
    progress = json.loads(through[True]["progress-message"])
    assert progress[0]["params"] == {"progressToken": "p", "progress": 1, "total": 2}
    error = json.loads(through[True]["error-message"])[-1]["error"]
    assert error["code"] == -32603 and "withheld by the output policy" in error["message"]
    for door in ("progress-data", "progress-meta", "progress-top-level"):
        (note, _) = json.loads(through[True][door])
        assert note == {"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": "p", "progress": 1}}, note  # fmt: skip
    assert len(json.loads(through[True]["progress-value"])) == 1  # no number: not shown
    masked = json.loads(through[True]["mask-object-keys"])[-1]["result"]
    assert masked["structuredContent"] == {"customer": {"id": 7, "email": {}}}


def _listings(client: Client) -> str:
    return json.dumps(
        [client.ask(method) for method in ("tools/list", "prompts/list", "resources/list")]
    )


def test_credentials_in_listings_and_keys_are_masked(user: Home) -> None:
    with _session(user, output_policy=False) as client:
        listed = _listings(client)
        call = client.call("record", {"door": "result-meta", GITHUB_TOKEN: "x"})
    assert AWS_KEY not in listed and GITHUB_TOKEN not in listed, listed
    assert "[secret masked: aws-access-key-id]" in listed
    tools = json.loads(listed)[0]["result"]["tools"]
    assert [t["name"] for t in tools] == ["record"]  # a name routes calls: kept
    assert "error" not in call, call  # and the call still reaches the tool


def test_with_the_detectors_off_the_listings_carry_them(user: Home) -> None:
    with _session(user, output_policy=False, mask=False) as client:
        listed = _listings(client)
    assert AWS_KEY in listed and GITHUB_TOKEN in listed
