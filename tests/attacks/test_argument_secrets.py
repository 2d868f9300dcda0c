"""Credentials the agent sends out in arguments, as the agent with allowed calls only: the
raw policy lets every call of the probe through, and the agent writes files whose content
holds an AWS key, a GitHub token, a configured secret's exact value and that value
base64'd, URL-encoded and as hex. None reaches the server (the probe logs every call it
gets, and the file is never written): each is escalated, and with no approval channel not
made; the audit entry names the detector and the argument, never the value, even with
arguments written in clear. The controls: the same calls with the scan off for the server
(``"scanArguments": false``) reach it, and a detector left out (``skip``) lets its kind
through while the others are still caught."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.audit import audit_entries
from tests.support.home import Home, make_home
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_calls, probe_server_config, write_raw_policy
from tests.support.sdk import session_calls

pytestmark = [pytest.mark.sandbox, needs_bwrap]

# The configured secret: matched by no detector, so only knowing the value catches it.
VALUE = "s3cr3t-Value-for-the-api-7f3a9c1e5d2b"
AWS_KEY = "AKIA" + "QYLPMN5HJKT2XWRB"  # the shape of a key, nobody's
GITHUB_TOKEN = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
CONTENTS = {
    "aws": (f"[default]\naws_access_key_id = {AWS_KEY}\n", "aws-access-key-id"),
    "github": (f"GITHUB_TOKEN={GITHUB_TOKEN}\n", "github-token"),
    "plain": (f"token: {VALUE}\n", "configured-secret API_TOKEN, plain"),
    "base64": (base64.b64encode(VALUE.encode()).decode(), "configured-secret API_TOKEN, base64"),
    "basic": (
        "Authorization: Basic " + base64.b64encode(f"me:{VALUE}".encode()).decode(),
        "configured-secret API_TOKEN, base64",
    ),
    "url": (
        "https://example.com/?t=" + "".join(f"%{byte:02X}" for byte in VALUE.encode()),
        "configured-secret API_TOKEN, url-encoded",
    ),
    "hex": (VALUE.encode().hex(), "configured-secret API_TOKEN, hex"),
}
HARMLESS = "a note with no credential in it, long enough to be scanned"


def _session(user: Home, scan: object) -> tuple[dict[str, tuple[bool, str]], Path, Path]:
    """One session of the sandboxed probe, holding API_TOKEN as a brokered secret: each of
    :data:`CONTENTS` (and a harmless note) written to the workspace; the answers by name,
    the workspace and the audit log."""
    server = probe_server_config(True)
    server["sandbox"]["network"] = {
        "allowedDomains": ["api.test:443"],
        "hosts": {"api.test": "127.0.0.1"},
    }
    server["secrets"] = {"API_TOKEN": {"from": "env:MY_TOKEN", "hosts": ["api.test"]}}
    if scan is not None:
        server["scanArguments"] = scan
    user.env["MY_TOKEN"] = VALUE
    config = user.root / "probe.json"
    config.write_text(json.dumps({"mcpServers": {"probe": server}}))
    policy = write_raw_policy(user.root / "policy")
    ws, audit = user.ws("ws"), user.root / "audit.jsonl"
    args = ["--config", str(config), "--policy-dir", str(policy), "--workspace", str(ws)]
    args += ["--audit-log", str(audit), "--audit-args", "clear"]
    names = [*CONTENTS, "harmless"]
    calls = [
        ("probe__write_path", {"path": str(ws / f"{name}.txt"), "content": content})
        for name, content in [*((n, c) for n, (c, _) in CONTENTS.items()), ("harmless", HARMLESS)]
    ]
    answers = session_calls(user, args, calls)
    return dict(zip(names, answers, strict=True)), ws, audit


def _reached(ws: Path) -> set[str]:
    """The files whose write reached the server (it logged the call)."""
    return {Path(str(c["path"])).stem for c in probe_calls(ws) if c.get("tool") == "write_path"}


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, scan in (("on", None), ("off", False), ("skip", {"skip": ["aws-access-key-id"]})):
        user = make_home(tmp_path_factory.mktemp(f"argscan-{label}"))
        out[label] = _session(user, scan)
    return out


def test_no_credential_in_arguments_reaches_the_server(sessions: dict[str, Any]) -> None:
    answers, ws, _ = sessions["on"]
    assert _reached(ws) == {"harmless"}
    for name in CONTENTS:
        assert not (ws / f"{name}.txt").exists(), name
        is_error, text = answers[name]
        assert is_error and text.startswith("ESCALATION REQUIRED (rule: secret-in-arguments)")
        assert "argument 'content'" in text, text
    assert (ws / "harmless.txt").read_text() == HARMLESS


def test_the_audit_names_detector_and_argument_never_the_value(sessions: dict[str, Any]) -> None:
    _, _, audit = sessions["on"]
    text = audit.read_text()
    for content, _ in CONTENTS.values():
        assert content not in text
    for secret in (VALUE, AWS_KEY, GITHUB_TOKEN, base64.b64encode(VALUE.encode()).decode()):
        assert secret not in text
    found = {}
    for entry in audit_entries(audit):
        policy = entry.get("policy") or {}
        if policy.get("rule") == "secret-in-arguments":
            path = str(entry["arguments"]["path"])  # in clear: --audit-args clear
            assert str(entry["arguments"]["content"]).startswith("sha256:")
            found[Path(path).stem] = policy["secretsInArguments"]
    assert found == {
        name: [{"argument": "content", "detector": detector}]
        for name, (_, detector) in CONTENTS.items()
    }


def test_control_with_the_scan_off_every_call_reaches_the_server(
    sessions: dict[str, Any],
) -> None:
    answers, ws, audit = sessions["off"]
    assert _reached(ws) == {*CONTENTS, "harmless"}
    for name, (content, _) in CONTENTS.items():
        assert (ws / f"{name}.txt").read_text() == content
        assert not answers[name][0]
    assert "secret-in-arguments" not in audit.read_text()


def test_a_detector_left_out_lets_its_kind_through_only(sessions: dict[str, Any]) -> None:
    _, ws, _ = sessions["skip"]
    assert _reached(ws) == {"aws", "harmless"}
