"""A server whose ``tools/list`` answer is one line longer than a pipe holds (some 300 KiB:
many tools with long schemas, as real servers with output schemas have), and which writes
log lines to stderr as it starts and at every request, as chatty servers do. Standard
library only, so it starts in a few milliseconds."""

from __future__ import annotations

import json
import sys

TOOLS = [
    {
        "name": f"tool_{i:03d}",
        "description": f"Tool {i}. " + "It does one thing well. " * 20,
        "inputSchema": {
            "type": "object",
            "properties": {
                f"field_{j}": {"type": "string", "description": "A field. " * 10} for j in range(6)
            },
        },
    }
    for i in range(200)
]


def answer(message: dict[str, object]) -> dict[str, object] | None:
    method = message.get("method")
    if "id" not in message:
        return None
    if method == "initialize":
        result: object = {
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "wide-list", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "ping":
        result = {}
    else:
        error = {"code": -32601, "message": f"no method {method}"}
        return {"jsonrpc": "2.0", "id": message["id"], "error": error}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def main() -> None:
    for n in range(50):
        print(json.dumps({"level": 30, "msg": f"starting, step {n}"}), file=sys.stderr)
    for line in sys.stdin:
        print(json.dumps({"level": 20, "msg": "request", "line": line[:200]}), file=sys.stderr)
        reply = answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
