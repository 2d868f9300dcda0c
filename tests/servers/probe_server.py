"""A test MCP server that tries things from inside the sandbox and reports what happened.

Every call it receives is appended to ``$PROBE_LOG`` (a file in the workspace), so a test
can prove that a denied call never reached it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("probe")


def _record(tool: str, **args: str) -> None:
    log = os.environ.get("PROBE_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"tool": tool, **args}) + "\n")


@server.tool()
def read_path(path: str) -> str:
    """Read a file and return its content, or the error."""
    _record("read_path", path=path)
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return "READ OK: " + handle.read(4096)
    except OSError as exc:
        return f"READ FAILED: {exc.strerror}"


@server.tool()
def write_path(path: str, content: str) -> str:
    """Write a file and report whether it worked."""
    _record("write_path", path=path)
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(content)
    except OSError as exc:
        return f"WRITE FAILED: {exc.strerror}"
    return "WRITE OK"


@server.tool()
def env_value(name: str) -> str:
    """One environment variable of the server process."""
    _record("env_value", name=name)
    return os.environ.get(name, "<unset>")


# Resources: one in the workspace, one outside it (reached with ..), one in /etc, one that
# is not a file. The workspace is where $PROBE_LOG lives.
_WS = os.path.dirname(os.environ.get("PROBE_LOG", "/nonexistent/log"))


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        return f"READ FAILED: {exc.strerror}"


@server.resource(f"file://{_WS}/hello.txt")
def hello() -> str:
    _record("resource", uri="hello.txt")
    return _read(f"{_WS}/hello.txt")


@server.resource(f"file://{_WS}/../outside.txt")
def outside() -> str:
    _record("resource", uri="outside.txt")
    return _read(f"{_WS}/../outside.txt")


@server.resource("file:///etc/hostname")
def hostname() -> str:
    _record("resource", uri="/etc/hostname")
    return _read("/etc/hostname")


@server.resource("probe://status")
def status() -> str:
    _record("resource", uri="probe://status")
    return "probe ok"


@server.prompt()
def greet(name: str) -> str:
    """A greeting."""
    return f"Hello {name}"


@server.tool()
async def linger() -> str:
    """Refuse to die: ignore SIGTERM and keep a non-daemon thread alive after stdin closes."""
    _record("linger")
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=time.sleep, args=(3600,), daemon=False).start()
    return "lingering"


if __name__ == "__main__":
    server.run()
