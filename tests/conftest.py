from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

BIN = os.path.dirname(sys.executable)
IRONCURTAIN = os.path.join(BIN, "ironcurtain")
TESTS = Path(__file__).resolve().parent
PROBE = TESTS / "servers" / "probe_server.py"

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


@dataclass
class Home:
    """An isolated user: HOME, XDG dirs, a secret SSH key, and the environment to run with."""

    root: Path
    home: Path
    state: Path
    config: Path
    env: dict[str, str]
    secret: str

    def ws(self, name: str = "ws") -> Path:
        path = self.root / name
        path.mkdir(exist_ok=True)
        return path


@pytest.fixture
def user(tmp_path: Path) -> Home:
    return make_home(tmp_path)


def make_home(tmp_path: Path) -> Home:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    secret = "SECRET-KEY-" + os.urandom(8).hex()
    (home / ".ssh" / "id_rsa").write_text(secret)
    state = tmp_path / "state"
    config = tmp_path / "xdg-config"
    env = {
        "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "XDG_STATE_HOME": str(state),
        "XDG_CONFIG_HOME": str(config),
        "LANG": "C.UTF-8",
        "CALLER_SECRET_TOKEN": secret,
    }
    return Home(tmp_path, home, state, config, env, secret)


def probe_config(user: Home, ws: Path, sandbox: object) -> Path:
    server: dict[str, Any] = {
        "command": sys.executable,
        "args": [str(PROBE)],
        "env": {"PROBE_LOG": "${workspace}/probe-calls.jsonl"},
    }
    if sandbox is False:
        server["sandbox"] = False
    else:
        # It logs into the workspace, whatever roles its tools have.
        server["sandbox"] = {
            "filesystem": {"allowRead": [str(PROBE.parent)], "allowWrite": ["${workspace}"]}
        }
    path = user.root / f"probe-{'bare' if sandbox is False else 'boxed'}.json"
    path.write_text(json.dumps({"mcpServers": {"probe": server}}))
    return path
