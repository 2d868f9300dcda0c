"""The scan of what the agent sends (policy/argument_scan.py): each encoding it catches, what
it leaves alone, where a finding is named (never by its value); and at the gate, for each
method it reads (a tool call, a prompt, a resource read): escalated, refused with no one to
ask, forwarded when a human approves, and forwarded unasked with the scan off (the control).
The relay end to end, with a real server in its sandbox: tests/attacks/test_argument_secrets.py."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import quote

import pytest

from launcher.plan.config_schema import ArgumentScanConfig, ServerConfig
from launcher.relay.approving.approval import APPROVE
from launcher.session.report import argument_scan
from policy.argument_scan import ArgumentScan, scan_arguments
from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.relay import Harness, build, run

VALUE = "pa55/word+with=reserved&chars"
SCAN = ArgumentScan.of([("DB_PASSWORD", VALUE)])
GITHUB_TOKEN = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "b3BlbnNzaC1rZXktdjEAAAAA" * 3 + "\n"


def _lower_escapes(text: str) -> str:
    return re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), text)


def _b64(text: str, urlsafe: bool = False) -> str:
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    return encode(text.encode()).decode()


CAUGHT = [
    ("aws key", "key=AKIAQYLPMN5HJKT2XWRB", "aws-access-key-id"),
    ("github token", f"t {GITHUB_TOKEN}", "github-token"),
    ("github token url-encoded", quote(f"x={GITHUB_TOKEN}", safe=""), "github-token"),
    ("a key's first lines", KEY, "private-key"),
    ("value", f"password: {VALUE}", "configured-secret DB_PASSWORD, plain"),
    ("value url-encoded", quote(VALUE, safe=""), "configured-secret DB_PASSWORD, url-encoded"),
    (
        "value lower-case %xx",
        _lower_escapes(quote(VALUE, safe="")),
        "configured-secret DB_PASSWORD, url-encoded",
    ),
    ("value hex", VALUE.encode().hex(), "configured-secret DB_PASSWORD, hex"),
    ("value HEX", VALUE.encode().hex().upper(), "configured-secret DB_PASSWORD, hex"),
    ("value base64", _b64(VALUE), "configured-secret DB_PASSWORD, base64"),
    ("value base64 url-safe", _b64(VALUE, True), "configured-secret DB_PASSWORD, base64"),
    (
        "inside a text base64'd, 2 before",
        _b64("u:" + VALUE),
        "configured-secret DB_PASSWORD, base64",
    ),
    (
        "inside a text base64'd, 3 before",
        _b64("us:" + VALUE + "!"),
        "configured-secret DB_PASSWORD, base64",
    ),
    (
        "inside a text base64'd, 4 before",
        _b64("use:" + VALUE),
        "configured-secret DB_PASSWORD, base64",
    ),
]


@pytest.mark.parametrize(("text", "detector"), [c[1:] for c in CAUGHT], ids=[c[0] for c in CAUGHT])
def test_each_form_is_caught(text: str, detector: str | None) -> None:
    (finding,) = scan_arguments({"content": text}, SCAN)
    assert finding.argument == "content" and finding.top == "content"
    if detector is not None:
        assert finding.detector == detector


NOT_CAUGHT = [
    ("prose", "a sentence about AWS keys and GitHub tokens, none in it"),
    ("short", "AKIA"),
    ("a part of the value", VALUE[:10]),
    ("a number", 12345),
    ("base64 twice", _b64(_b64(VALUE))),
    ("reversed", VALUE[::-1]),
]


@pytest.mark.parametrize("value", [c[1] for c in NOT_CAUGHT], ids=[c[0] for c in NOT_CAUGHT])
def test_what_is_not_caught(value: object) -> None:
    assert scan_arguments({"content": value}, SCAN) == ()


def test_where_a_finding_is_named_never_by_its_value() -> None:
    args = {
        "files": [{"name": "a", "text": "fine"}, {"name": "b", "text": f"x {GITHUB_TOKEN}"}],
        "meta": {GITHUB_TOKEN: "as a key"},
        "weird": {"a key with spaces": {"deep": _b64(VALUE)}},
    }
    found = {f.top: f for f in scan_arguments(args, SCAN)}
    assert found["files"].argument == "files[1].text"
    assert found["meta"].argument == "meta (key 0)"
    assert found["weird"].argument == "weird.<key 0>.deep"
    for finding in found.values():
        assert GITHUB_TOKEN not in finding.said() and VALUE not in finding.said()


def test_a_deep_argument_is_read_to_the_bottom() -> None:
    deep: object = GITHUB_TOKEN
    for _ in range(50_000):
        deep = [deep]
    (finding,) = scan_arguments({"nest": deep}, SCAN)
    assert finding.detector == "github-token"


def test_a_detector_left_out_and_the_values_left_out() -> None:
    args = {"a": f"x {GITHUB_TOKEN}", "b": VALUE}
    assert [
        f.top for f in scan_arguments(args, ArgumentScan.of([("P", VALUE)], ["github-token"]))
    ] == ["b"]
    assert [
        f.top for f in scan_arguments(args, ArgumentScan.of([("P", VALUE)], ["configured-secret"]))
    ] == ["a"]


def test_a_short_value_is_looked_for_only_as_it_is() -> None:
    scan = ArgumentScan.of([("PIN", "4711")])
    assert [form for _, form, _ in scan.forms] == ["plain"]
    assert scan_arguments({"a": "code 4711"}, scan) != ()
    assert scan_arguments({"a": _b64("4711")}, scan) == ()


# -- at the gate ------------------------------------------------------------------------------

SECRET_PATH = f"notes-{GITHUB_TOKEN}.txt"  # inside the workspace: the policy allows it


def _params(h: Harness, method: str) -> tuple[str, dict[str, object]]:
    path = str(h.ws / SECRET_PATH)
    if method == "tools/call":
        return method, {"name": "read_file", "arguments": {"path": path}}
    if method == "prompts/get":
        return method, {"name": "summarize", "arguments": {"path": path}}
    return method, {"uri": f"file://{path}"}


METHODS = ["tools/call", "prompts/get", "resources/read"]


def _scanned(tmp_path: Path, on: bool, **how: str) -> Harness:
    h = build(tmp_path, **how)  # type: ignore[arg-type]
    if on:
        h.relay.core.gate.scans = {"fs": SCAN}
    return h


@pytest.mark.parametrize("method", METHODS)
def test_with_no_one_to_ask_the_request_is_not_made(tmp_path: Path, method: str) -> None:
    h = _scanned(tmp_path, True, approval="deny")

    async def scenario() -> None:
        answer = json.dumps(await h.request(*_params(h, method)))
        assert "ESCALATION REQUIRED (rule: secret-in-arguments)" in answer
        assert "(github-token)" in answer

    run(scenario)
    assert h.fs.requests == []
    (entry,) = h.entries()
    argument = "uri" if method == "resources/read" else "path"
    assert entry["policy"]["secretsInArguments"] == [
        {"argument": argument, "detector": "github-token"}
    ]
    assert GITHUB_TOKEN not in (tmp_path / "audit.jsonl").read_text()


@pytest.mark.parametrize("method", METHODS)
def test_a_human_who_approves_sends_it(tmp_path: Path, method: str) -> None:
    h = _scanned(tmp_path, True, answer=APPROVE)

    async def scenario() -> None:
        await h.request(*_params(h, method))
        (asked,) = h.client.elicitations
        assert "holds a credential (github-token)" in asked["params"]["message"]

    run(scenario)
    assert h.fs.methods == [method]


@pytest.mark.parametrize("method", METHODS)
def test_control_with_the_scan_off_it_is_sent_unasked(tmp_path: Path, method: str) -> None:
    h = _scanned(tmp_path, False, answer=APPROVE)
    run(lambda: h.request(*_params(h, method)))  # type: ignore[arg-type,return-value]
    assert h.client.elicitations == []
    assert h.fs.methods == [method]


def test_what_is_scanned_is_said_at_start() -> None:
    def plan(**scans: object) -> Any:
        servers = {
            name: SimpleNamespace(config=ServerConfig(command="x", scan_arguments=scan))  # type: ignore[arg-type]
            for name, scan in scans.items()
        }
        return SimpleNamespace(servers=servers)

    assert argument_scan(plan(a=True)) == "credentials in arguments escalated"
    both = plan(a=False, b=ArgumentScanConfig(skip=["jwt", "configured-secret"]), c=True)
    assert argument_scan(both) == (
        "credentials in arguments escalated (off for: a; b skips jwt, configured-secret)"
    )
    assert "NOT looked for" in argument_scan(plan(a=False))


@pytest.mark.parametrize("scan", [True, False])
def test_check_previews_the_escalation_as_the_gate_makes_it(user: Home, scan: bool) -> None:
    ws = user.ws()
    server = {"command": "mcp-server-filesystem", "args": ["${workspace}"]}
    config = user.root / "mcp-servers.json"
    config.write_text(json.dumps({"mcpServers": {"filesystem": {**server, "scanArguments": scan}}}))
    arguments = {"path": "notes.txt", "content": f"token {GITHUB_TOKEN}"}
    done = ironcurtain(
        user, "check", "filesystem", "write_file", "--config", str(config),
        "--workspace", str(ws), "--args", json.dumps(arguments),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    if scan:
        assert "rule:      secret-in-arguments" in done.stdout
        assert "argument 'content' holds a credential (github-token)" in done.stdout
    else:  # the control: the policy's own decision
        assert "decision:  allow" in done.stdout
