"""The faulty test server (``tests/servers/faulty_server.py``: crashes, hangs, garbage) next
to the probe, both under the raw policy."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support.cli import run_args
from tests.support.home import Home
from tests.support.paths import FAULTY, PROBE
from tests.support.probe import PROBE_TOOLS, write_raw_policy

FAULTY_TOOLS = {
    "echo": ["text"],
    "crash_now": [],
    "exit_soon": [],
    "hang": ["seconds"],
    "garbage": [],
    "huge": ["megabytes"],
}


def faulty_and_probe(user: Home, timeout: float = 30) -> tuple[list[str], Path, Path]:
    """Config, raw policy and audit log for the faulty server and the probe: the
    ``ironcurtain run`` options, the workspace, the audit log. The config is
    ``servers.json`` in the user's root."""
    ws = user.ws()
    # The faulty server logs into the workspace, and its tools take no path: allowWrite.
    sandbox = {"filesystem": {"allowRead": [str(FAULTY.parent)], "allowWrite": ["${workspace}"]}}
    servers = {
        "faulty": {
            "command": sys.executable,
            "args": [str(FAULTY)],
            "env": {"FAULTY_LOG": "${workspace}/faulty.log"},
            "timeout": timeout,
            "sandbox": sandbox,
        },
        "probe": {"command": sys.executable, "args": [str(PROBE)], "sandbox": sandbox},
    }
    config = user.root / "servers.json"
    config.write_text(json.dumps({"mcpServers": servers}))
    policy = write_raw_policy(user.root / "policy", {"faulty": FAULTY_TOOLS, "probe": PROBE_TOOLS})
    audit = user.root / "audit.jsonl"
    return run_args(config, policy, ws, audit), ws, audit
