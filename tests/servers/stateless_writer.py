"""A server of the stateless era alone, written on the wire: it refuses ``initialize`` and
serves ``server/discover``; its one tool ``write_file`` writes the file, then asks the client
("keep the file?") by its result (``input_required``), and answers the retry with what the
client said."""

from __future__ import annotations

import json
import sys
from typing import Any

TOOLS = [
    {
        "name": "write_file",
        "description": "Write a file.",
        "inputSchema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    }
]


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if "method" not in message or "id" not in message:
            continue
        rid, method, params = message["id"], message["method"], message.get("params") or {}
        if method == "initialize":
            refused = {"code": -32022, "message": "this server speaks 2026-07-28 only"}
            send({"jsonrpc": "2.0", "id": rid, "error": refused})
            continue
        if method == "subscriptions/listen":
            continue  # held open
        if method == "server/discover":
            found: dict[str, Any] = {
                "supportedVersions": ["2026-07-28"],
                "capabilities": {"tools": {}},
            }
        elif method == "tools/list":
            found = {"tools": TOOLS}
        elif method == "tools/call" and "inputResponses" not in params:
            arguments = params.get("arguments") or {}
            with open(arguments["path"], "w", encoding="utf-8") as handle:
                handle.write(arguments["content"])
            question = {"message": "keep the file?", "requestedSchema": {"type": "object"}}
            asked = {"keep": {"method": "elicitation/create", "params": question}}
            found = {"resultType": "input_required", "inputRequests": asked, "requestState": "w"}
        elif method == "tools/call":
            found = {"content": [{"type": "text", "text": json.dumps(params["inputResponses"])}]}
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}})
            continue
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "result": {**found, "resultType": found.get("resultType", "complete")},
            }
        )


if __name__ == "__main__":
    main()
