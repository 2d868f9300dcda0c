"""Each checked call exported as an OpenTelemetry span and counters: the relay core in-process
(tests/support/relay.py), the real SDK and its OTLP/HTTP exporter, sending to a real
receiver on loopback (tests/support/otlp.py) that decodes what it gets with the official
OTLP messages."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.audit.telemetry_plan import telemetry_plan
from launcher.shared.user_errors import OptionError
from tests.support.otlp import (
    PARENT_ID,
    TRACE_ID,
    Receiver,
    attributes,
    calls,
    exporting,
)
from tests.support.paths import REPO
from tests.support.relay import build, run, tool_listing

SECRET = "S3CRET-9f4c1d-never-exported"


def test_a_call_is_one_span_with_what_the_audit_says_and_no_argument(
    tmp_path: Path, receiver: Receiver
) -> None:
    h = build(tmp_path)
    caller = {"caller": {"name": "billing-agent", "issuer": "https://idp.example"}}
    telemetry = exporting(h, caller)
    (h.ws / f"{SECRET}.txt").write_text("x")
    allowed = {"name": "read_file", "arguments": {"path": str(h.ws / f"{SECRET}.txt")}}
    denied = {"name": "read_file", "arguments": {"path": f"/etc/{SECRET}"}}
    read = {"uri": f"file://{h.ws}/a.txt?token={SECRET}"}
    answers = calls(h, ("tools/call", allowed), ("tools/call", denied), ("resources/read", read))
    telemetry.stop()

    assert "DENIED" not in str(answers[0]) and "DENIED" in str(answers[1])
    spans = receiver.wait_for_spans(3)
    assert len(spans) == 3
    entries = h.entries()
    for span, entry in zip(spans, entries, strict=True):
        got = attributes(span)
        assert got["mcp.method.name"] == entry["method"]
        assert got["ironcurtain.server"] == "fs"
        assert got["ironcurtain.decision"] == entry["policy"]["decision"]
        assert got["ironcurtain.rule"] == entry["policy"]["rule"]
        assert got["ironcurtain.result"] == entry["result"]
        assert got["ironcurtain.caller.name"] == "billing-agent"
        assert got["ironcurtain.caller.issuer"] == "https://idp.example"
        assert got["ironcurtain.session.id"] == "relay-test"
        assert got["ironcurtain.duration_ms"] == entry["durationMs"]
        assert span.end_time_unix_nano - span.start_time_unix_nano == pytest.approx(
            entry["durationMs"] * 1e6, abs=1000
        )
    allowed_span, denied_span, read_span = spans
    assert allowed_span.name == "tools/call read_file"
    assert attributes(allowed_span)["gen_ai.tool.name"] == "read_file"
    assert attributes(allowed_span)["ironcurtain.decision"] == "allow"
    assert allowed_span.status.code == allowed_span.status.STATUS_CODE_OK
    assert denied_span.status.code == denied_span.status.STATUS_CODE_UNSET  # not a failure
    assert attributes(denied_span)["ironcurtain.decision"] == "deny"
    assert attributes(denied_span)["ironcurtain.result"] == "denied"
    assert attributes(denied_span)["ironcurtain.rule"]
    assert "ironcurtain.tool" not in attributes(read_span)  # nothing of its URI
    assert read_span.name == "resources/read"
    # Nothing of the arguments, anywhere in what was sent: spans or metrics.
    assert receiver.raw and not any(SECRET.encode() in body for body in receiver.raw)
    assert h.said == []


def test_the_search_for_the_secret_would_find_it_where_it_is_exported(
    tmp_path: Path, receiver: Receiver
) -> None:
    """The control: what is exported (here a tool's name) is found in the bodies as sent, so
    the search above would see an argument that leaked."""
    h = build(tmp_path)
    h.fs.tools = [*h.fs.tools, tool_listing(f"tool_{SECRET}", "path")]  # a server's own name
    h.relay.lists_changed()
    telemetry = exporting(h)
    calls(h, ("tools/call", {"name": f"tool_{SECRET}", "arguments": {}}))
    telemetry.stop()
    receiver.wait_for_spans(1)
    assert any(SECRET.encode() in body for body in receiver.raw)


def test_a_clients_traceparent_is_continued(tmp_path: Path, receiver: Receiver) -> None:
    h = build(tmp_path)
    telemetry = exporting(h)
    meta = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01", "tracestate": "vendor=opaque"}
    path = str(h.ws / "a.txt")
    calls(
        h,
        ("tools/call", {"name": "read_file", "arguments": {"path": path}, "_meta": meta}),
        ("tools/call", {"name": "read_file", "arguments": {"path": path}}),
    )
    telemetry.stop()
    continued, alone = receiver.wait_for_spans(2)
    assert continued.trace_id.hex() == TRACE_ID
    assert continued.parent_span_id.hex() == PARENT_ID
    assert continued.trace_state == "vendor=opaque"
    assert continued.kind == continued.SPAN_KIND_SERVER
    assert alone.trace_id.hex() != TRACE_ID and alone.parent_span_id == b""


def test_an_approved_call_and_a_servers_question_are_spans_too(
    tmp_path: Path, receiver: Receiver
) -> None:
    h = build(tmp_path)
    hello = {"protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}, "sampling": {}}}
    h.feed({"jsonrpc": "2.0", "id": "hello", "method": "initialize", "params": hello})
    telemetry = exporting(h)
    (h.ws / "private" / "key.txt").write_text("k")
    private = {"name": "read_file", "arguments": {"path": str(h.ws / "private" / "key.txt")}}
    asked = {
        "messages": [{"role": "user", "content": {"type": "text", "text": SECRET}}],
        "maxTokens": 10,
    }

    async def work() -> None:
        await h.request("tools/call", private)  # a human approves it (the client answers)
        assert h.fs.on_request is not None
        h.fs.on_request(h.fs, {"jsonrpc": "2.0", "id": 77, "method": "sampling/createMessage",
                               "params": asked})  # fmt: skip
        while not h.fs.replies:
            await asyncio.sleep(0.005)

    run(work)
    telemetry.stop()
    approved, sampled = receiver.wait_for_spans(2)
    got = attributes(approved)
    assert got["ironcurtain.decision"] == "escalate"
    assert got["ironcurtain.escalation"] == "approved"
    assert got["ironcurtain.result"] == "success"
    got = attributes(sampled)
    assert sampled.name == "sampling/createMessage" and "ironcurtain.tool" not in got
    assert got["ironcurtain.direction"] == "server-to-client"
    assert got["ironcurtain.server"] == "fs"
    assert got["ironcurtain.escalation"] == "approved"
    assert not any(SECRET.encode() in body for body in receiver.raw)


def test_a_failed_call_is_an_error_span_and_a_cancelled_one_is_not(
    tmp_path: Path, receiver: Receiver
) -> None:
    h = build(tmp_path)
    telemetry = exporting(h)
    path = str(h.ws / "a.txt")
    read = {"name": "read_file", "arguments": {"path": path}}

    async def work() -> None:
        h.fs.answer = lambda method, params: TimeoutError()
        await h.request("tools/call", read)
        h.fs.answer = lambda method, params: None  # held: the client cancels it
        h.feed({"jsonrpc": "2.0", "id": "held", "method": "tools/call", "params": read})
        await asyncio.sleep(0.01)
        cancel = {"requestId": "held", "reason": "changed my mind"}
        h.feed({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
        await asyncio.sleep(0.01)

    run(work)
    telemetry.stop()
    timed_out, cancelled = receiver.wait_for_spans(2)
    assert attributes(timed_out)["ironcurtain.result"] == "timeout"
    assert attributes(timed_out)["error.type"] == "timeout"
    assert timed_out.status.code == timed_out.status.STATUS_CODE_ERROR
    assert attributes(cancelled)["ironcurtain.result"] == "cancelled"
    assert "error.type" not in attributes(cancelled)
    assert cancelled.status.code == cancelled.status.STATUS_CODE_UNSET
    assert [e["result"] for e in h.entries()] == ["timeout", "cancelled"]


def test_counters_and_durations_arrive_by_server_tool_decision_and_rule(
    tmp_path: Path, receiver: Receiver
) -> None:
    h = build(tmp_path)
    telemetry = exporting(h)
    path = str(h.ws / "a.txt")
    read = ("tools/call", {"name": "read_file", "arguments": {"path": path}})
    calls(h, read, read, ("tools/call", {"name": "read_file", "arguments": {"path": "/etc"}}))
    telemetry.stop()
    points = list(receiver.metric_points())
    counted = {
        (a["ironcurtain.decision"], a["ironcurtain.result"]): p.as_int
        for name, a, p in points
        if name == "ironcurtain.calls"
    }
    assert counted == {("allow", "success"): 2, ("deny", "denied"): 1}
    durations = [p for name, _, p in points if name == "ironcurtain.call.duration"]
    assert sum(p.count for p in durations) == 3
    rules = {a["ironcurtain.rule"] for name, a, _ in points if name == "ironcurtain.calls"}
    assert rules == {e["policy"]["rule"] for e in h.entries()}
    assert {a["ironcurtain.tool"] for _, a, _ in points} == {"read_file"}
    assert {"service.name": "ironcurtain"}.items() <= receiver.resources()[0].items()


def test_the_service_name_is_the_operators_when_set(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "mcp-gateway-eu")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme")
    h = build(tmp_path)
    telemetry = exporting(h)
    calls(h, ("tools/call", {"name": "read_file", "arguments": {"path": str(h.ws / "a.txt")}}))
    telemetry.stop()
    receiver.wait_for_spans(1)
    assert receiver.resources()[0]["service.name"] == "mcp-gateway-eu"
    assert receiver.headers[0]["x-tenant"] == "acme"


def test_an_unreachable_receiver_is_said_once_and_calls_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    h = build(tmp_path)
    telemetry = exporting(h)
    read = ("tools/call", {"name": "read_file", "arguments": {"path": str(h.ws / "a.txt")}})
    first = calls(h, *[read] * 5)
    deadline = time.monotonic() + 20
    while not h.said and time.monotonic() < deadline:
        time.sleep(0.02)
    later = calls(h, *[read] * 20)
    telemetry.stop(timeout=0.5)
    assert all(a is not None and "result" in a and not a["result"].get("isError") for a in first)
    assert all(a is not None and "result" in a and not a["result"].get("isError") for a in later)
    assert len(h.entries()) == 25
    assert len(h.said) == 1
    assert h.said[0].startswith(f"telemetry to http://127.0.0.1:{port}: ")
    assert "calls go on" in h.said[0]
    assert "Transient error" not in capfd.readouterr().err  # only ironcurtain's line


def test_a_setting_the_sdk_cannot_use_is_said_at_start_and_trouble_still_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "sometimes")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    h = build(tmp_path)
    telemetry = exporting(h)
    # The SDK's logger is the process's: an exporter another test in this worker left
    # retrying may be heard too, so this session's own lines are looked for among them.
    assert "telemetry: Couldn't recognize sampler sometimes." in h.said
    calls(h, ("tools/call", {"name": "read_file", "arguments": {"path": str(h.ws / "a.txt")}}))
    ours = f"telemetry to http://127.0.0.1:{port}: "
    deadline = time.monotonic() + 60
    while not any(line.startswith(ours) for line in h.said) and time.monotonic() < deadline:
        time.sleep(0.02)
    telemetry.stop(timeout=0.5)
    assert sum(line.startswith(ours) for line in h.said) == 1, h.said


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318", "expected the URL of an OTLP/HTTP"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "grpc://collector:4317", "http:// or https://"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://", "and a host"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:99999", "expected the URL"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector/v1/traces", "expected the URL"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "http/protobuf only"),
    ],
)
def test_a_value_that_cannot_be_used_names_its_variable(
    variable: str, value: str, expected: str
) -> None:
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", variable: value}
    with pytest.raises(OptionError) as raised:
        telemetry_plan(environ)
    assert raised.value.option == variable
    assert str(raised.value).startswith(f"{variable} {value!r}: ")
    assert expected in str(raised.value)


def test_off_unless_the_endpoint_is_set_or_when_turned_off() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector.example:4318"}
    assert telemetry_plan({}) is None
    assert telemetry_plan({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}) is None
    assert telemetry_plan({**endpoint, "OTEL_SDK_DISABLED": "true"}) is None
    both_off = {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"}
    assert telemetry_plan({**endpoint, **both_off}) is None
    plan = telemetry_plan({**endpoint, "OTEL_METRICS_EXPORTER": "none"})
    assert plan is not None and plan.traces and not plan.metrics
    assert plan.batch_delay_ms == 100  # ironcurtain's own default
    plan = telemetry_plan({**endpoint, "OTEL_BSP_SCHEDULE_DELAY": "2000"})
    assert plan is not None and plan.batch_delay_ms is None  # the SDK reads the operator's


def test_nothing_of_opentelemetry_is_loaded_when_the_endpoint_is_not_set() -> None:
    """What ``ironcurtain run`` loads to plan a session and relay calls: no OpenTelemetry.
    The control: the same with the endpoint set loads it once a session starts exporting."""
    code = (
        "import os, sys\n"
        "from launcher.plan.session_plan import plan_session\n"
        "from launcher.session import wiring\n"
        "from launcher.relay import checked\n"
        "from launcher.relay.questions import server_requests\n"
        "from launcher.audit.telemetry import Telemetry\n"
        "from launcher.audit.telemetry_plan import telemetry_plan\n"
        "plan = telemetry_plan(os.environ)\n"
        "if plan is not None: Telemetry(plan, lambda text: None).stop(0.1)\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry'))[:1])\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    off = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert off.returncode == 0, off.stderr
    assert off.stdout.strip() == "[]"
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"
    on = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO
    )
    assert on.returncode == 0, on.stderr
    assert on.stdout.strip().startswith("['opentelemetry")
