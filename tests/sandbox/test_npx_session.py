"""A server configured as ``npx -y PACKAGE``, as client configs name them: run from npx's
cache with node, never downloaded, the real filesystem server answering in its sandbox.
(Finding the package in npx's cache: ``tests/unit/sandbox_profiles/test_discover.py``.)"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from tests.support.home import Home
from tests.support.paths import IRONCURTAIN
from tests.support.sdk import connect


def test_npx_runs_the_cached_package_with_node(user: Home, tmp_path: Path) -> None:
    # npx's cache entry, as `npx -y @modelcontextprotocol/server-filesystem` leaves it.
    installed = Path(sys.prefix) / "lib" / "node_modules"
    entry = user.home / ".npm" / "_npx" / "0123456789abcdef"
    entry.mkdir(parents=True)
    (entry / "node_modules").symlink_to(installed)
    ws = user.ws()
    config = user.root / "npx.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "files": {
                        "command": "npx",
                        "args": ["-y", "@modelcontextprotocol/server-filesystem", "${workspace}"],
                    }
                }
            }
        )
    )
    done = subprocess.run(
        [IRONCURTAIN, "profile", "files", "--config", str(config), "--workspace", str(ws)],
        capture_output=True,
        text=True,
        env=user.env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    script = f"{installed}/@modelcontextprotocol/server-filesystem/dist/index.js"
    assert f"/usr/bin/node {script} {ws}" in done.stdout

    async def scenario() -> None:
        async with connect(user, "--config", str(config), "--workspace", str(ws)) as s:
            names = {t.name for t in (await s.list_tools()).tools}
            assert "files__read_text_file" in names

    asyncio.run(scenario())
