"""What a client cannot make the OpenTelemetry export carry or become: anything of its
``_meta`` but the trace context, a name without end, a metric series per made-up tool, or a
failed call from a trace context that is not one. The relay core in-process, the real SDK
exporting to a real OTLP receiver on loopback (tests/support/otlp.py); each attack with its
control."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.support.otlp import (
    PARENT_ID,
    TRACE_ID,
    Receiver,
    attributes,
    calls,
    exporting,
)
from tests.support.relay import build, tool_listing

SECRET = "S3CRET-meta-5b0e"
VALID = f"00-{TRACE_ID}-{PARENT_ID}-01"


class _Recording(logging.Handler):
    """Keeps every record it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_nothing_of_meta_but_the_trace_context_is_exported(
    tmp_path: Path, receiver: Receiver
) -> None:
    h = build(tmp_path)
    telemetry = exporting(h)
    meta = {
        "traceparent": VALID,
        "tracestate": "vendor=kept-as-given",
        "progressToken": SECRET,
        "com.example/secret": SECRET,
        "baggage": f"token={SECRET}",
    }
    params = {"name": "read_file", "arguments": {"path": str(h.ws / "a.txt")}, "_meta": meta}
    (answer,) = calls(h, ("tools/call", params))
    telemetry.stop()
    assert answer is not None and "result" in answer
    (span,) = receiver.wait_for_spans(1)
    assert span.trace_id.hex() == TRACE_ID
    assert not any(SECRET.encode() in body for body in receiver.raw)
    # The control: what is exported of _meta (the trace state) is there, as given.
    assert any(b"vendor=kept-as-given" in body for body in receiver.raw)


def test_a_name_without_end_is_cut(tmp_path: Path, receiver: Receiver) -> None:
    # As a hostile server: a tool it lists under a name without end.
    h = build(tmp_path)
    name = "t" * 100_000
    h.fs.tools = [*h.fs.tools, tool_listing(name, "path")]
    h.relay.lists_changed()
    telemetry = exporting(h)
    calls(h, ("tools/call", {"name": name, "arguments": {}}))
    telemetry.stop()
    (span,) = receiver.wait_for_spans(1)
    assert span.name == "tools/call " + "t" * 200
    assert sum(map(len, receiver.raw)) < 20_000
    # The control: the name came whole (the audit entry has it all).
    (entry,) = h.entries()
    assert entry["tool"] == name


def test_made_up_tool_names_are_one_metric_series(tmp_path: Path, receiver: Receiver) -> None:
    """A client inventing names cannot grow the metrics or the span names without bound: a
    name no server has is not exported."""
    h = build(tmp_path)
    telemetry = exporting(h)
    made_up = [f"no_such_tool_{i}" for i in range(40)]
    calls(h, *[("tools/call", {"name": n, "arguments": {}}) for n in made_up])
    telemetry.stop()
    series = [(a, p) for name, a, p in receiver.metric_points() if name == "ironcurtain.calls"]
    assert len(series) == 1
    attrs, point = series[0]
    assert point.as_int == 40 and "ironcurtain.tool" not in attrs
    assert "ironcurtain.server" not in attrs
    # Nor the spans: each is named by its method alone, whatever name the client sent
    # (the control: the audit log has each name).
    spans = receiver.wait_for_spans(40)
    assert {s.name for s in spans} == {"tools/call"}
    assert not any("ironcurtain.tool" in attributes(s) for s in spans)
    assert sorted(e["tool"] for e in h.entries()) == sorted(made_up)


@pytest.mark.parametrize(
    "traceparent",
    [
        "garbage",
        f"00-{'0' * 32}-{PARENT_ID}-01",  # an all-zero trace id is invalid
        f"00-{TRACE_ID}-{'0' * 16}-01",  # so is an all-zero span id
        f"ff-{TRACE_ID}-{PARENT_ID}-01",  # version ff is forbidden
        f"00-{TRACE_ID.upper()}-{PARENT_ID}-01",  # upper case is not the format
        f"00-{TRACE_ID}-{PARENT_ID}-01" + "x" * 10_000,
        123,
        [VALID],
        {"traceparent": VALID},
    ],
)
def test_a_traceparent_that_is_not_one_starts_a_trace_of_its_own(
    tmp_path: Path, receiver: Receiver, traceparent: object
) -> None:
    h = build(tmp_path)
    telemetry = exporting(h)
    listener = _Recording()
    heard = listener.records  # what the SDK says of it
    logging.getLogger("opentelemetry.trace").addHandler(listener)
    path = str(h.ws / "a.txt")
    bad = {"name": "read_file", "arguments": {"path": path}, "_meta": {"traceparent": traceparent}}
    good = {"name": "read_file", "arguments": {"path": path}, "_meta": {"traceparent": VALID}}
    try:
        answers = calls(h, ("tools/call", bad), ("tools/call", good))
    finally:
        logging.getLogger("opentelemetry.trace").removeHandler(listener)
    telemetry.stop()
    assert all(a is not None and not a["result"].get("isError") for a in answers)
    alone, continued = receiver.wait_for_spans(2)
    assert alone.parent_span_id == b"" and alone.trace_id.hex() != TRACE_ID
    # The control: a well-formed one, in the same session, is continued.
    assert continued.trace_id.hex() == TRACE_ID and continued.parent_span_id.hex() == PARENT_ID
    # Whatever the SDK says of a client's trace context is not the operator's one line
    # about exporting (the control: of the overlong one, it does say something).
    assert h.said == []
    if isinstance(traceparent, str) and len(traceparent) > 512:
        assert any("maximum length" in r.getMessage() for r in heard)


def test_a_servers_tool_name_puts_no_control_or_bidi_character_in_a_span(
    tmp_path: Path, receiver: Receiver
) -> None:
    # As a hostile server: a tool listed under a name that would rewrite a terminal or a
    # trace viewer's line (the control: the audit entry has the name as listed).
    h = build(tmp_path)
    name = "evil\n\u202eAAAA\x1b[31m"
    h.fs.tools = [*h.fs.tools, tool_listing(name, "path")]
    h.relay.lists_changed()
    telemetry = exporting(h)
    calls(h, ("tools/call", {"name": name, "arguments": {}}))
    telemetry.stop()
    (span,) = receiver.wait_for_spans(1)
    assert span.name == "tools/call evil__AAAA__31m"
    assert attributes(span)["ironcurtain.tool"] == "evil__AAAA__31m"
    assert not any(c in body for body in receiver.raw for c in (b"\n\xe2\x80\xae", b"\x1b["))
    (entry,) = h.entries()
    assert entry["tool"] == name
