"""A remote MCP server on the ``mcp`` SDK, served over streamable HTTP (or the legacy SSE
transport) on loopback: what ironcurtain reaches by a ``url``. It records every tool call
that reaches it (one JSON line each) in the file given, and refuses every request without
the bearer token given, when one is.

Tools: ``echo`` (says its text and the protocol version its request came in), ``wipe``
(which a policy denies: its record proves whether it was reached), ``leak`` (answers with a
credential, which ironcurtain masks).

Usage: ``remote_server.py PORT RECORD [--sse] [--token TOKEN] [--any-host] [--headers FILE]``
(``--headers``: the ``Authorization`` header of every HTTP request, one JSON line each, in
FILE: what a server reached learns of its callers' credentials).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

# A GitHub personal access token's shape (not a real one).
LEAKED = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"

mcp = MCPServer("remote")
RECORD = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("/dev/null")


def _record(tool: str, args: dict[str, object]) -> None:
    with RECORD.open("a") as out:
        out.write(json.dumps({"tool": tool, "args": args}) + "\n")


@mcp.tool()
def echo(text: str, ctx: Context) -> str:
    """Say the text back."""
    _record("echo", {"text": text})
    return f"echo: {text} ({ctx.protocol_version})"


@mcp.tool()
def wipe(target: str) -> str:
    """Delete everything at target."""
    _record("wipe", {"target": target})
    return f"wiped {target}"


@mcp.tool()
def leak() -> str:
    """Say the deploy token."""
    _record("leak", {})
    return f"the deploy token is {LEAKED}"


def _guarded(app: Any, token: str) -> Any:
    """``app`` behind a bearer token: 401 for any request without it."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"").decode()
            if given != f"Bearer {token}":
                start = {"type": "http.response.start", "status": 401, "headers": []}
                await send(start)
                await send({"type": "http.response.body", "body": b"no"})
                return
        await app(scope, receive, send)

    return guarded


def _recording(app: Any, path: Path) -> Any:
    """``app``, each HTTP request's Authorization header (empty: none) noted in ``path``."""

    async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"").decode()
            with path.open("a") as out:
                out.write(json.dumps({"authorization": given}) + "\n")
        await app(scope, receive, send)

    return recording


def main() -> None:
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    port = int(sys.argv[1])
    sse = "--sse" in sys.argv
    # ``--any-host``: a server reached by a name other than its address (its own check of the
    # Host header off).
    security = (
        TransportSecuritySettings(enable_dns_rebinding_protection=False)
        if "--any-host" in sys.argv
        else None
    )
    app: Any = (
        mcp.sse_app(transport_security=security)
        if sse
        else mcp.streamable_http_app(transport_security=security)
    )
    if "--token" in sys.argv:
        app = _guarded(app, sys.argv[sys.argv.index("--token") + 1])
    if "--headers" in sys.argv:
        app = _recording(app, Path(sys.argv[sys.argv.index("--headers") + 1]))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
