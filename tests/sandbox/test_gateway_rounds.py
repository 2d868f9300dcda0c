"""An approval asked in rounds in gateway mode: the state handed to one caller is that
caller's. Another caller holding it cannot give the answer (its retry is refused and
reaches nothing); the caller that was asked can, and the call's audit entry names it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import httpx2
import pytest

from tests.support.audit import audit_entries
from tests.support.home import Home
from tests.support.http import ACCEPT, serving
from tests.support.idp import AUDIENCE, Provider, identity_provider
from tests.support.marks import needs_bwrap
from tests.support.probe import probe_calls, probe_session

pytestmark = needs_bwrap
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}  # fmt: skip
APPROVE = {"ironcurtain/approval": {"action": "accept", "content": {"answer": "approve"}}}


@pytest.fixture
def idp() -> Iterator[Provider]:
    with identity_provider() as provider:
        yield provider


def _post(url: str, token: str, rid: int, params: Mapping[str, object]) -> httpx2.Response:
    headers = {"Content-Type": "application/json", "Accept": ACCEPT,
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
               "Mcp-Name": "env_value", "Authorization": f"Bearer {token}"}  # fmt: skip
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
    return httpx2.post(url, json=body, headers=headers, timeout=30)


def test_a_state_given_to_one_caller_takes_no_answer_from_another(
    user: Home, idp: Provider
) -> None:
    ask = {"name": "ask-before-env", "if": {"tool": ["env_value"]}, "then": "escalate"}
    args, ws, audit = probe_session(user, first=[{**ask, "reason": "needs a human"}])
    args += ["--server", "probe", "--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE]
    args += ["--approval", "elicit"]  # a caller's client answers only when told so
    call = {"name": "env_value", "arguments": {"name": "HOME"}, "_meta": META}
    with serving(user, *args) as served:
        asked = _post(served.url, idp.token("alice"), 1, call).json()["result"]
        assert asked["resultType"] == "input_required"
        retry = {**call, "inputResponses": APPROVE, "requestState": asked["requestState"]}
        stolen = _post(served.url, idp.token("mallory"), 2, retry).json()
        assert stolen["error"]["code"] == -32602
        assert probe_calls(ws) == []
        done = _post(served.url, idp.token("alice"), 3, retry).json()
        assert done["result"]["content"][0]["text"] == "/tmp/home"
    (entry,) = [e for e in audit_entries(audit) if e.get("tool") == "env_value"]
    assert entry["escalation"] == "approved" and entry["caller"]["name"] == "alice"
    assert len(probe_calls(ws)) == 1
