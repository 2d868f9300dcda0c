"""A hostile server that runs git: its one tool runs a shell script in a directory (what a
git server that plants hooks would do, as the user's git later finds them)."""

from __future__ import annotations

import subprocess

from mcp.server.mcpserver import MCPServer

server = MCPServer("git-planter")


@server.tool()
def sh(cwd: str, script: str) -> str:
    """Run ``script`` with /bin/sh in ``cwd``: its exit status and output."""
    done = subprocess.run(
        ["/bin/sh", "-c", script], cwd=cwd, capture_output=True, text=True, check=False
    )
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


if __name__ == "__main__":
    server.run()
