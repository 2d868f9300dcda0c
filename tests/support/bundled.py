"""The bundled default config's servers, for tests that run them as the user would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.paths import REPO

BUNDLED_CONFIG = REPO / "launcher" / "defaults" / "mcp-servers.json"


def bundled_servers(*names: str, sandboxed: bool = True) -> dict[str, dict[str, Any]]:
    """The entries of ``names`` in the bundled config (``sandboxed=False``: each with
    ``"sandbox": false``, the control that shows an attack working)."""
    servers = json.loads(BUNDLED_CONFIG.read_text())["mcpServers"]
    chosen = {name: servers[name] for name in names}
    if not sandboxed:
        for server in chosen.values():
            server["sandbox"] = False
    return chosen


def write_config(path: Path, servers: dict[str, dict[str, Any]]) -> Path:
    """``servers`` as a config file at ``path``; ``path``."""
    path.write_text(json.dumps({"mcpServers": servers}))
    return path
