"""A session one of whose servers fails to start, beside the real time server in its
sandbox: the error names the server and says what it printed, and nothing of the session is
left behind."""

from __future__ import annotations

import json

from tests.support.cli import ironcurtain
from tests.support.home import Home


def test_a_server_that_fails_to_start_leaves_nothing_behind(user: Home) -> None:
    config = user.root / "mcp-servers.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "time": {"command": "mcp-server-time"},
                    "broken": {
                        "command": "sh",
                        "args": ["-c", "echo 'cannot start: no token' >&2; exit 3"],
                    },
                }
            }
        )
    )
    done = ironcurtain(user, "run", "--config", str(config))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "server 'broken' failed to start" in done.stderr
    assert "cannot start: no token" in done.stderr
    assert not any(p.is_file() for p in user.left_behind())
    assert not list((user.state / "ironcurtain" / "workspaces").iterdir())
