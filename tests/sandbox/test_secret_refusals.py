"""What ``ironcurtain run`` refuses of a server's ``secrets``: a source that is missing,
unreadable or the OS keyring, a host outside the server's network, a server with no
sandbox to broker through, an unknown key. Each is one line naming the server and the
secret, exit 2, nothing started, and the value itself never in it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_server_config

pytestmark = needs_bwrap

VALUE = "value-that-must-never-be-printed-31337"


def _refused(user: Home, secret: dict[str, Any], sandboxed: bool = True) -> str:
    server = probe_server_config(sandboxed)
    if sandboxed:
        server["sandbox"]["network"] = {"allowedDomains": ["api.example.com"]}
    server["secrets"] = {"API_TOKEN": secret}
    config = user.root / "mcp-servers.json"
    config.write_text(json.dumps({"mcpServers": {"probe": server}}))
    user.env["SET_TOKEN"] = VALUE
    done = ironcurtain(user, "run", "--config", str(config), "--allow-unsandboxed")
    assert done.returncode == 2, done.stderr
    message = done.stderr.strip()
    assert message.startswith("ironcurtain: error:") and len(message.splitlines()) == 1, message
    assert "$.mcpServers.probe.secrets.API_TOKEN" in message
    assert VALUE not in done.stderr + done.stdout and "Traceback" not in done.stderr
    assert not user.left_behind()
    return message


def _unreadable(tmp: Path) -> str:
    path = tmp / "token"
    path.write_text(VALUE)
    path.chmod(0o000)
    return f"file:{path}"


CASES = [
    ({"from": "env:NOT_SET_ANYWHERE", "hosts": ["api.example.com"]}, "no variable NOT_SET"),
    ({"from": "file:/nonexistent/token", "hosts": ["api.example.com"]}, "cannot read the file"),
    ({"from": "keyring:github/me", "hosts": ["api.example.com"]}, "keyring is not supported"),
    ({"from": "env:SET_TOKEN", "hosts": ["gist.github.com"]}, "outside the server's network"),
    ({"from": "env:SET_TOKEN", "hosts": ["*.example.com"]}, "no wildcard"),
    ({"from": "env:SET_TOKEN", "hosts": ["api.example.com"], "bodies": True}, "did you mean"),
    ({"from": "vault:x", "hosts": ["api.example.com"]}, "should match pattern"),
]


@pytest.mark.parametrize(("secret", "said"), CASES)
def test_a_bad_secret_is_one_clear_error(user: Home, secret: dict[str, Any], said: str) -> None:
    assert said in _refused(user, secret)


def test_a_value_that_is_a_sentinel_is_one_clear_error(user: Home) -> None:
    # What a server inside another ironcurtain sandbox holds: never a credential, and never
    # sendable (a sentinel is not swapped for another).
    user.env["LOOKS_LIKE"] = "ironcurtain-sentinel-" + "0" * 32
    message = _refused(user, {"from": "env:LOOKS_LIKE", "hosts": ["api.example.com"]})
    assert "holds an ironcurtain sentinel, not a credential" in message


def test_an_unreadable_key_file_is_one_clear_error(user: Home, tmp_path: Path) -> None:
    if os.geteuid() == 0:
        # Root reads a file whatever its mode: a directory in its place is unreadable too.
        (tmp_path / "dir-token").mkdir()
        source = f"file:{tmp_path / 'dir-token'}"
    else:
        source = _unreadable(tmp_path)
    assert "cannot read the file" in _refused(user, {"from": source, "hosts": ["api.example.com"]})


def test_an_unsandboxed_server_cannot_have_brokered_secrets(user: Home) -> None:
    message = _refused(user, {"from": "env:SET_TOKEN", "hosts": ["api.example.com"]}, False)
    assert "runs unsandboxed" in message


def test_profile_says_which_variables_are_brokered_and_never_the_value(user: Home) -> None:
    server = probe_server_config(True)
    server["sandbox"]["network"] = {"allowedDomains": ["api.example.com"]}
    server["secrets"] = {"API_TOKEN": {"from": "env:SET_TOKEN", "hosts": ["api.example.com"]}}
    config = user.root / "mcp-servers.json"
    config.write_text(json.dumps({"mcpServers": {"probe": server}}))
    user.env["SET_TOKEN"] = VALUE
    for fmt in ("bwrap", "json"):
        done = ironcurtain(user, "profile", "probe", "--config", str(config), "--format", fmt)
        assert done.returncode == 0, done.stderr
        assert VALUE not in done.stdout + done.stderr
        assert "brokered: a sentinel; the value goes only to api.example.com" in done.stdout
        assert "/run/ironcurtain/ca.pem" in done.stdout
