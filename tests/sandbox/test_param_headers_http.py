"""A tool's ``Mcp-Param-*`` headers over ``--http`` (the stateless era), end to end: the
dual-era server's ``region`` tool marks its ``region`` argument for the ``Mcp-Param-Region``
header; ironcurtain holds the header to the body by the schema the caller is shown, once
the caller's token is checked, and a request they disagree on reaches neither the gate nor
the server."""

from __future__ import annotations

import base64
from typing import Any

import httpx2

from tests.support.audit import audit_entries
from tests.support.dual import dual_args
from tests.support.home import Home
from tests.support.http import TOKEN, serving
from tests.support.marks import needs_bwrap
from tests.support.modes import STATELESS

pytestmark = needs_bwrap
META = {"io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": {}}  # fmt: skip


def post(url: str, rid: int, args: dict[str, Any], token: str = TOKEN, **params: str) -> Any:
    """A ``tools/call`` of ``region`` with ``args``; ``params``: its Mcp-Param-* headers."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": STATELESS, "Mcp-Method": "tools/call",
               "Mcp-Name": "region"}  # fmt: skip
    headers.update({f"Mcp-Param-{k}": v for k, v in params.items()})
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
            "params": {"name": "region", "arguments": args, "_meta": META}}  # fmt: skip
    return httpx2.post(url, json=body, headers=headers, timeout=60)


def test_a_header_must_say_what_the_body_does(user: Home) -> None:
    west = {"region": "us-west1"}
    with serving(user, *dual_args(user)) as served:
        url = served.url
        agreed = post(url, 1, west, Region="us-west1")
        greet = "=?base64?" + base64.b64encode("Grüße".encode()).decode() + "?="
        encoded = post(url, 2, {"region": "Grüße"}, Region=greet)
        unmarked = post(url, 3, {**west, "zone": "a"}, Region="us-west1", Zone="b")
        other = post(url, 4, west, Region="eu-west1")
        missing = post(url, 5, west)
        padding = post(url, 6, {"region": "Hello"}, Region="=?base64?SGVsbG8?=")
        no_token = post(url, 7, west, token="not-the-token", Region="eu-west1")
    assert agreed.status_code == 200, agreed.text
    assert agreed.json()["result"]["content"][0]["text"] == f"region=us-west1 ({STATELESS})"
    assert encoded.json()["result"]["content"][0]["text"] == f"region=Grüße ({STATELESS})"
    # A header no argument of the tool's schema is marked for is not judged.
    assert unmarked.status_code == 200, unmarked.text
    for refused in (other, missing, padding):
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == -32020
        assert "Mcp-Param-Region" in refused.json()["error"]["message"]
    # Without the token nothing about the tool is judged or told.
    assert no_token.status_code == 401 and "Mcp-Param" not in no_token.text
    # What disagreed reached neither the gate nor the server.
    entries = audit_entries(user.root / "audit.jsonl")
    ran = [e["result"] for e in entries if e["method"] == "tools/call"]
    assert ran == ["success"] * 3
