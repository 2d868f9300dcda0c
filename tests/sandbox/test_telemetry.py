"""``ironcurtain run`` exporting its calls over OTLP/HTTP: the bundled time server in its
sandbox, the ``mcp`` SDK's client over stdio, a real receiver on loopback
(tests/support/otlp.py)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from typing import cast

import httpx2
import pytest
from mcp_types import RequestParamsMeta

from tests.support.cli import ironcurtain
from tests.support.home import Home
from tests.support.http import ACCEPT, http_session, serving
from tests.support.idp import AUDIENCE, identity_provider
from tests.support.marks import needs_bwrap
from tests.support.otlp import Receiver, attributes
from tests.support.sdk import call, connect

SECRET = "Europe/S3CRET-77e1"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as served:
        yield served


@needs_bwrap
def test_a_session_exports_each_call_by_the_time_it_ends(user: Home, receiver: Receiver) -> None:
    user.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
    user.env["OTEL_BSP_SCHEDULE_DELAY"] = "50"
    caller = user.root / "caller.json"
    caller.write_text(json.dumps({"name": "billing-agent", "permissions": []}))
    audit = user.root / "audit.jsonl"
    args = ["--server", "time", "--workspace", str(user.ws()), "--audit-log", str(audit)]
    # An open map (extra keys allowed), which mypy does not read from its TypedDict yet.
    meta = cast(RequestParamsMeta, {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
    answers = []

    async def scenario() -> None:
        async with connect(user, *args, "--caller", str(caller)) as session:
            now = {"timezone": "UTC"}
            answers.append(await session.call_tool("get_current_time", now, meta=meta))
            answers.append(await session.call_tool("get_current_time", {"timezone": SECRET}))
            answers.append(await session.call_tool("no_such_tool", {"x": SECRET}))

    asyncio.run(scenario())
    assert not answers[0].is_error
    assert answers[2].is_error and "DENIED" in str(answers[2].content)
    # The session has ended: what it called is at the receiver, no waiting needed.
    spans = receiver.spans()
    entries = [json.loads(line) for line in audit.read_text().splitlines()]
    entries = [e for e in entries if "policy" in e]
    assert len(spans) == len(entries) == 3
    by_id = {attributes(s)["jsonrpc.request.id"]: s for s in spans}
    for entry in entries:
        got = attributes(by_id[str(entry["requestId"])])
        assert got["ironcurtain.decision"] == entry["policy"]["decision"]
        assert got["ironcurtain.rule"] == entry["policy"]["rule"]
        assert got["ironcurtain.result"] == entry["result"]
        assert got["ironcurtain.caller.name"] == "billing-agent"
        assert got["ironcurtain.session.id"] == entry["sessionId"]
    first = by_id[str(entries[0]["requestId"])]
    assert first.trace_id.hex() == TRACE_ID and first.parent_span_id.hex() == PARENT_ID
    assert attributes(first)["ironcurtain.server"] == "time"
    assert attributes(first)["gen_ai.tool.name"] == "get_current_time"
    denied = attributes(by_id[str(entries[2]["requestId"])])
    assert denied["ironcurtain.decision"] == "deny" and denied["ironcurtain.result"] == "denied"
    counted = [p.as_int for name, _, p in receiver.metric_points() if name == "ironcurtain.calls"]
    assert sum(counted) == 3
    assert not any(SECRET.encode() in body for body in receiver.raw)
    assert receiver.resources()[0]["service.name"] == "ironcurtain"


@needs_bwrap
def test_without_the_endpoint_nothing_of_opentelemetry_is_loaded(user: Home) -> None:
    """A whole session (start, a call answered, stop), what it imported written as it
    exits: none of OpenTelemetry. The control: with the endpoint set, it is loaded."""
    record = user.root / "loaded.txt"
    program = (
        f"import atexit, sys; atexit.register(lambda: open({str(record)!r}, 'w').write("
        "' '.join(sorted(m for m in sys.modules if m.startswith('opentelemetry'))))); "
        "sys.argv[:] = ['ironcurtain', *sys.argv[2:]]; "
        "from launcher.cli.entry import main; main()"
    )

    def loaded() -> str:
        record.unlink(missing_ok=True)
        prefix = [sys.executable, "-c", program]

        async def scenario() -> None:
            args = ["--server", "time", "--workspace", str(user.ws())]
            async with connect(user, *args, prefix=prefix) as session:
                answer = await session.call_tool("get_current_time", {"timezone": "UTC"})
                assert not answer.is_error

        asyncio.run(scenario())
        return record.read_text()

    assert loaded() == ""
    with Receiver() as receiver:
        user.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
        assert "opentelemetry.sdk.trace" in loaded().split()
        assert len(receiver.spans()) == 1


def test_an_endpoint_that_is_not_a_url_stops_the_session_before_it_starts(user: Home) -> None:
    user.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "collector:4318"
    done = ironcurtain(user, "run", "--server", "time", "--workspace", str(user.ws()))
    assert done.returncode == 2, done.stderr
    assert "OTEL_EXPORTER_OTLP_ENDPOINT 'collector:4318': expected the URL of an OTLP/HTTP" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr and "ready" not in done.stderr
    assert user.left_behind() == []


@needs_bwrap
def test_over_http_each_span_names_the_caller_its_token_says(
    user: Home, receiver: Receiver
) -> None:
    """Gateway mode: callers by their identity provider's JWTs, one in a session of the
    handshake era, one in a stateless request that carries a trace of its own."""
    user.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
    user.env["OTEL_BSP_SCHEDULE_DELAY"] = "50"
    with identity_provider() as idp:
        args = ["--server", "time", "--workspace", str(user.ws()),
                "--oidc-issuer", idp.issuer, "--oidc-audience", AUDIENCE]  # fmt: skip

        async def in_a_session(url: str) -> None:
            async with http_session(url, idp.token("alice")) as session:
                failed, _ = await call(session, "get_current_time", {"timezone": "UTC"})
                assert not failed

        with serving(user, *args) as served:
            asyncio.run(in_a_session(served.url))
            headers = {"Content-Type": "application/json", "Accept": ACCEPT,
                       "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call",
                       "Mcp-Name": "get_current_time",
                       "Authorization": f"Bearer {idp.token('carol')}"}  # fmt: skip
            meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}  # fmt: skip
            params = {"name": "get_current_time", "arguments": {"timezone": "UTC"}, "_meta": meta}
            body = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": params}
            answer = httpx2.post(served.url, json=body, headers=headers, timeout=30)
            assert answer.status_code == 200 and not answer.json()["result"].get("isError")
            spans = receiver.wait_for_spans(2)
    by_caller = {str(attributes(s)["ironcurtain.caller.name"]): s for s in spans}
    assert sorted(by_caller) == ["alice", "carol"]
    assert {attributes(s)["ironcurtain.caller.issuer"] for s in spans} == {idp.issuer}
    assert by_caller["carol"].trace_id.hex() == TRACE_ID
    assert by_caller["alice"].trace_id.hex() != TRACE_ID
