"""What ``ironcurtain run`` refuses once it knows this machine can sandbox, while it plans
each server's sandbox: a command not on the PATH, an npx package that is not installed, a
grant holding where sessions keep their sockets, and an audit log it cannot open. Each is
one clear error and leaves nothing behind; each needs a bwrap able to sandbox (without one,
the session is refused before any of this). (The errors found before: the config, the
policy and the options, ``tests/unit/plan/test_config_errors.py``.)"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.marks import needs_bwrap
from tests.support.paths import IRONCURTAIN
from tests.support.probe import probe_server_config, write_raw_policy

pytestmark = needs_bwrap


def test_a_command_not_on_the_path_is_one_clear_error(user: Home) -> None:
    config = user.root / "mcp-servers.json"
    config.write_text(json.dumps({"mcpServers": {"a": {"command": "no-such-cmd-xyz"}}}))
    done = ironcurtain(user, "run", "--config", str(config))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    message = done.stderr.strip()
    assert message.startswith("ironcurtain: error:") and len(message.splitlines()) == 1
    assert str(config) in message
    assert "$.mcpServers.a.command" in message and "not found on PATH" in message
    # Nothing half-started: no workspace, no audit log, no runtime files.
    assert not user.left_behind()


def test_npx_of_a_package_not_installed_is_a_config_error(user: Home) -> None:
    config = user.root / "npx.json"
    config.write_text(
        json.dumps({"mcpServers": {"x": {"command": "npx", "args": ["-y", "not-a-real-pkg-ic"]}}})
    )
    done = subprocess.run(
        [IRONCURTAIN, "run", "--config", str(config)],
        capture_output=True,
        text=True,
        env=user.env,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "$.mcpServers.x.args" in done.stderr
    assert "npx would download not-a-real-pkg-ic" in done.stderr
    assert "npm install -g not-a-real-pkg-ic" in done.stderr


def test_a_grant_holding_the_sessions_sockets_is_refused(user: Home) -> None:
    server = probe_server_config(True, allow_read=("/tmp",))  # /tmp: where sockets go
    config = user.root / "c.json"
    config.write_text(json.dumps({"mcpServers": {"probe": server}}))
    policy = write_raw_policy(user.root / "policy")
    out = ironcurtain(user, "run", "--config", str(config), "--policy-dir", str(policy))
    assert out.returncode != 0
    assert "$.mcpServers.probe.sandbox.filesystem.allowRead[1]" in out.stderr, out.stderr
    assert "keeps its sockets" in out.stderr and "Traceback" not in out.stderr


def test_unwritable_audit_log_is_a_clear_error(user: Home) -> None:
    blocker = user.root / "not-a-dir"
    blocker.write_text("")
    runtime = Path(tempfile.mkdtemp(prefix="rt-"))  # short: the session's sockets fit in it
    user.env["XDG_RUNTIME_DIR"] = str(runtime)
    try:
        done = ironcurtain(user, "run", "--server", "time", "--audit-log", str(blocker / "a.jsonl"))
        made = list(runtime.iterdir())
    finally:
        shutil.rmtree(runtime)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"cannot open the audit log {blocker / 'a.jsonl'}" in done.stderr
    # Nothing half-made is left: no runtime directory, no workspace made for the session.
    assert not made
    assert not list((user.state / "ironcurtain" / "workspaces").iterdir())
