"""A server on the ``mcp`` SDK that serves both protocol eras, each in its own way of asking:
its tools ask the client through the SDK's resolvers, which send a request of the server's
own in the handshake era and answer ``input_required`` in the stateless era. Each tool says
the protocol version its request came in.

- ``greet``: asks the user's name (a form), says hello;
- ``haiku``: asks the client's model for a line (sampling);
- ``roots``: asks the client's roots;
- ``region``: says its ``region`` argument, which its schema marks to be mirrored in the
  ``Mcp-Param-Region`` HTTP header (``x-mcp-header``).

With ``--stateless-only`` it serves the stateless era alone, as a server written for it
does: an ``initialize`` is refused (``-32022``, naming the versions it serves), everything
else goes to the same server, run as a child. With ``--handshake-only`` it serves the
handshake era alone, as a server written before the stateless era does: ``server/discover``
is not a method it knows (``-32601``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Annotated

from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve, Sample
from mcp.server.mcpserver.resolve import ListRoots
from mcp.types import CreateMessageResult, ListRootsResult, SamplingMessage, TextContent
from pydantic import BaseModel, Field


class Name(BaseModel):
    name: str


def ask_name() -> Elicit[Name]:
    return Elicit("Your name?", Name)


def ask_line() -> Sample:
    said = SamplingMessage(role="user", content=TextContent(type="text", text="A line, please"))
    return Sample([said], max_tokens=20)


def ask_roots() -> ListRoots:
    return ListRoots()


mcp = MCPServer("dual")


@mcp.tool()
def greet(name: Annotated[Name, Resolve(ask_name)], ctx: Context) -> str:
    """Greet the user by name."""
    return f"hello {name.name} ({ctx.protocol_version})"


@mcp.tool()
def haiku(line: Annotated[CreateMessageResult, Resolve(ask_line)], ctx: Context) -> str:
    """A line from the client's model."""
    text = line.content.text if isinstance(line.content, TextContent) else "?"
    return f"{text} ({ctx.protocol_version})"


@mcp.tool()
def roots(found: Annotated[ListRootsResult, Resolve(ask_roots)], ctx: Context) -> str:
    """The client's roots."""
    return " ".join(str(r.uri) for r in found.roots) + f" ({ctx.protocol_version})"


@mcp.tool()
def region(
    region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})],
    ctx: Context,
    zone: str = "",
) -> str:
    """Say the region (mirrored in a header by clients over HTTP)."""
    return f"region={region} ({ctx.protocol_version})"


def refusal(message: object, handshake_only: bool) -> dict[str, object] | None:
    """The error a server of one era answers a request of the other era's with, or None."""
    if not isinstance(message, dict):
        return None
    if handshake_only and message.get("method") == "server/discover":
        return {"code": -32601, "message": "Method not found"}
    if not handshake_only and message.get("method") == "initialize":
        data = {"supported": ["2026-07-28"], "requested": message["params"].get("protocolVersion")}
        return {"code": -32022, "message": "unsupported protocol version", "data": data}
    return None


def one_era(handshake_only: bool) -> None:
    child = subprocess.Popen(
        [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert child.stdin and child.stdout
    lock = threading.Lock()

    def write(line: bytes) -> None:
        with lock:
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()

    def relay_out() -> None:
        assert child.stdout
        for line in child.stdout:
            write(line)

    threading.Thread(target=relay_out, daemon=True).start()
    for line in sys.stdin.buffer:
        message = json.loads(line) if line.strip() else None
        refused = refusal(message, handshake_only)
        if refused is not None:
            assert isinstance(message, dict)
            write(
                json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": refused}).encode()
                + b"\n"
            )
            continue
        child.stdin.write(line)
        child.stdin.flush()
    child.stdin.close()
    child.wait()


if __name__ == "__main__":
    if "--stateless-only" in sys.argv or "--handshake-only" in sys.argv:
        one_era("--handshake-only" in sys.argv)
    else:
        mcp.run()
