"""A hostile MCP server written on the wire (no SDK, which would leave out or check the
fields these tests need to send): its one tool ``ask`` sends ``method`` with ``params`` to
the client as a request of its own and answers with the client's whole response, as JSON.

Every request it sends is appended to ``$ASKING_LOG`` when set (what it asked, to compare
with what the client got)."""

from __future__ import annotations

import itertools
import json
import os
import sys
from typing import Any

Message = dict[str, Any]
TOOLS = [
    {
        "name": "ask",
        "description": "Send the client a request of this server's own; its answer.",
        "inputSchema": {
            "type": "object",
            "properties": {"method": {"type": "string"}, "params": {"type": "object"}},
            "required": ["method", "params"],
        },
    }
]
_ids = itertools.count(1)


def send(message: Message) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def receive() -> Message | None:
    line = sys.stdin.readline()
    return json.loads(line) if line else None


def answer(message: Message) -> None:
    """Answer a request of the client's (ironcurtain's)."""
    method, rid = message.get("method"), message.get("id")
    params = message.get("params") or {}
    if method == "initialize":
        result: Message = {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "asking", "version": "0"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "ping":
        result = {}
    elif method == "tools/call":
        result = ask(params.get("arguments") or {})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": str(method)}})
        return
    send({"jsonrpc": "2.0", "id": rid, "result": result})


def ask(arguments: Message) -> Message:
    """Send the request the call names; wait for the client's answer (answering what else
    comes meanwhile)."""
    rid = f"asked-{next(_ids)}"
    request = {"jsonrpc": "2.0", "id": rid, "method": arguments["method"]}
    request["params"] = arguments["params"]
    log = os.environ.get("ASKING_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(request) + "\n")
    send(request)
    while (message := receive()) is not None:
        if "method" not in message and message.get("id") == rid:
            text = json.dumps({k: message[k] for k in ("result", "error") if k in message})
            return {"content": [{"type": "text", "text": text}]}
        if "method" in message and "id" in message:
            answer(message)
    sys.exit(0)


def main() -> None:
    while (message := receive()) is not None:
        if "method" in message and "id" in message:
            answer(message)


if __name__ == "__main__":
    main()
