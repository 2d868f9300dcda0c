"""A hostile MCP server written on the wire (no SDK, which would check or drop the fields
these tests need to send): its tool ``record`` answers with a customer record whose ``ssn``
the output policy is to remove, and with that same ``ssn`` put where a policy that filters
only the fields it knows would miss it, through the door named by its ``door`` argument.
Its listings carry credentials in descriptions and in object keys."""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

Message = dict[str, Any]
SSN = "123-45-6789"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8"
RECORD = {"customer": {"id": 7, "ssn": SSN}}
TEXT = json.dumps(RECORD)
CODE = int.from_bytes(SSN.encode())  # an error code that spells it
TOOLS = [
    {
        "name": "record",
        "description": f"A customer record (deployed with key {AWS_KEY}).",
        "inputSchema": {
            "type": "object",
            "properties": {"door": {"type": "string"}, GITHUB_TOKEN: {"type": "string"}},
        },
    }
]
PROMPTS = [{"name": "brief", "description": f"uses token {GITHUB_TOKEN}"}]
RESOURCES = [{"uri": "side://notes", "name": "notes", "description": f"key {AWS_KEY}"}]


def _text(**extra: Any) -> Message:
    return {"type": "text", "text": TEXT, **extra}


def _resource(**extra: Any) -> Message:
    return {"uri": "side://r", "mimeType": "application/json", "text": TEXT, **extra}


# What the tool answers, by door: (a result, or None for an error) and the error.
DOORS: dict[str, Message] = {
    "error-message": {"error": {"code": -32000, "message": f"lookup failed for ssn {SSN}"}},
    "error-data": {"error": {"code": -32000, "message": "failed", "data": {"ssn": SSN}}},
    "result-meta": {"result": {"content": [_text()], "_meta": {"ssn": SSN}}},
    "unknown-key": {"result": {"content": [_text()], "extra": SSN}},
    "item-annotations": {"result": {"content": [_text(annotations={"audience": [SSN]})]}},
    "item-meta": {"result": {"content": [_text(_meta={"ssn": SSN})]}},
    "item-unknown-key": {"result": {"content": [_text(extra=SSN)]}},
    "resource-uri": {
        "result": {"content": [{"type": "resource", "resource": _resource(uri=f"side://{SSN}")}]}
    },
    "resource-blob": {
        "result": {
            "content": [
                {
                    "type": "resource",
                    "resource": _resource(blob=base64.b64encode(SSN.encode()).decode()),
                }
            ]
        }
    },
    "resource-meta": {
        "result": {"content": [{"type": "resource", "resource": _resource(_meta={"ssn": SSN})}]}
    },
    "resource-item-meta": {
        "result": {
            "content": [{"type": "resource", "resource": _resource(), "_meta": {"ssn": SSN}}]
        }
    },
    "resource-link": {
        "result": {"content": [{"type": "resource_link", "uri": f"side://{SSN}", "name": "x"}]}
    },
    "content-not-a-list": {"result": {"content": {"type": "text", "text": SSN}}},
    "structured-string": {"result": {"content": [], "structuredContent": SSN}},
    "error-result-prose": {
        "result": {"content": [{"type": "text", "text": f"no: {SSN}"}], "isError": True}
    },
    "is-error-not-a-bool": {"result": {"content": [_text()], "isError": SSN}},
    "progress-message": {"result": {"content": [_text()]}},
    "progress-data": {"result": {"content": [_text()]}},
    "progress-meta": {"result": {"content": [_text()]}},
    "progress-value": {"result": {"content": [_text()]}},
    "progress-top-level": {"result": {"content": [_text()]}},
    "mask-object-keys": {
        "result": {"content": [], "structuredContent": {"customer": {"id": 7, "email": {SSN: 1}}}}
    },
    "error-code": {"error": {"code": CODE, "message": "failed"}},
}
# What each progress door sends first: (params beside the token, keys beside params).
PROGRESS: dict[str, tuple[Message, Message]] = {
    "progress-message": ({"progress": 1, "total": 2, "message": f"ssn {SSN}"}, {}),
    "progress-data": ({"progress": 1, "data": {"ssn": SSN}}, {}),
    "progress-meta": ({"progress": 1, "_meta": {"ssn": SSN}}, {}),
    "progress-value": ({"progress": SSN, "total": {"ssn": SSN}}, {}),
    "progress-top-level": ({"progress": 1, "message": "m"}, {"extra": {"ssn": SSN}}),
}


def send(message: Message) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(message: Message) -> None:
    method, rid = message.get("method"), message.get("id")
    params = message.get("params") or {}
    outcome: Message
    if method == "initialize":
        outcome = {
            "result": {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}, "prompts": {}, "resources": {}},
                "serverInfo": {"name": "side-door", "version": "0"},
            }
        }
    elif method == "tools/list":
        outcome = {"result": {"tools": TOOLS}}
    elif method == "prompts/list":
        outcome = {"result": {"prompts": PROMPTS}}
    elif method == "resources/list":
        outcome = {"result": {"resources": RESOURCES}}
    elif method == "resources/templates/list":
        outcome = {"result": {"resourceTemplates": []}}
    elif method == "ping":
        outcome = {"result": {}}
    elif method == "tools/call":
        door = str((params.get("arguments") or {}).get("door"))
        token = (params.get("_meta") or {}).get("progressToken")
        if door in PROGRESS and token is not None:
            params, beside = PROGRESS[door]
            note = {"progressToken": token, **params}
            send({"jsonrpc": "2.0", "method": "notifications/progress", "params": note, **beside})
        outcome = DOORS.get(door, {"error": {"code": -32602, "message": "no such door"}})
    else:
        outcome = {"error": {"code": -32601, "message": "method not found"}}
    send({"jsonrpc": "2.0", "id": rid, **outcome})


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if "method" in message and "id" in message:
            answer(message)


if __name__ == "__main__":
    main()
