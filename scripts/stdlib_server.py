"""The smallest MCP server worth timing: the standard library only, one tool (``echo``).

It starts in the time an interpreter takes (~13 ms), so what a launcher adds to a server's
start is not hidden behind the server's own (``bench.py ready``). ``--stamp FILE``: its
first line writes the wall-clock time to FILE (when the server began to run, for the
benchmark to compare with when it was launched)."""

from __future__ import annotations

import sys
import time

if sys.argv[1:2] == ["--stamp"]:
    with open(sys.argv[2], "w") as stamp:
        stamp.write(repr(time.time()))

import json  # after the stamp: it times the start up to the server's own code

TOOL = {
    "name": "echo",
    "description": "Return the text it is given.",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
}


def answer(request: dict[str, object]) -> dict[str, object] | None:
    method, params = request.get("method"), request.get("params") or {}
    assert isinstance(params, dict)
    if "id" not in request:
        return None  # a notification
    if method == "initialize":
        result: dict[str, object] = {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "stdlib-echo", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call":
        text = str((params.get("arguments") or {}).get("text", ""))
        result = {"content": [{"type": "text", "text": text}]}
    elif method == "ping":
        result = {}
    else:
        return {
            "jsonrpc": "2.0",
            "id": request["id"],
            "error": {"code": -32601, "message": f"method not found: {method}"},
        }
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


def main() -> None:
    for line in sys.stdin:
        reply = answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
