"""A real OTLP/HTTP receiver on loopback: it takes ``POST /v1/traces`` and ``/v1/metrics``
with ``application/x-protobuf`` bodies, decodes them with the official OTLP messages
(``opentelemetry-proto``) and answers as OTLP/HTTP specifies (200 with the protobuf
response; 400 for a body it cannot decode; 404 for any other path)."""

from __future__ import annotations

import contextlib
import gzip
import os
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from launcher.audit.telemetry import Telemetry
from launcher.audit.telemetry_plan import telemetry_plan
from tests.support.relay import Harness, run

MESSAGES: dict[str, tuple[Any, Any]] = {
    "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse),
    "/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse),
}


def attributes(item: Any) -> dict[str, object]:
    """A span's (or a data point's, or a resource's) attributes as plain values."""
    found: dict[str, object] = {}
    for kv in item.attributes:
        kind = kv.value.WhichOneof("value")
        found[kv.key] = getattr(kv.value, kind) if kind else None
    return found


class Receiver:
    """Listening on 127.0.0.1 (a free port) until closed; what it received, decoded."""

    def __init__(self) -> None:
        self.raw: list[bytes] = []  # every body, as it came (after decompression)
        self.headers: list[dict[str, str]] = []
        self.traces: list[Any] = []  # ExportTraceServiceRequest
        self.metrics: list[Any] = []  # ExportMetricsServiceRequest
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                encoding = (self.headers.get("Content-Encoding") or "").lower()
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                messages = MESSAGES.get(self.path)
                if messages is None:
                    self._answer(404, b"", "text/plain")
                    return
                if self.headers.get("Content-Type") != "application/x-protobuf":
                    self._answer(415, b"", "text/plain")
                    return
                request, response = messages
                decoded = request()
                try:
                    decoded.ParseFromString(body)
                except Exception:
                    self._answer(400, b"", "text/plain")
                    return
                with receiver.lock:
                    receiver.raw.append(body)
                    receiver.headers.append(dict(self.headers.items()))
                    kept = receiver.traces if self.path == "/v1/traces" else receiver.metrics
                    kept.append(decoded)
                self._answer(200, response().SerializeToString(), "application/x-protobuf")

            def _answer(self, status: int, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def spans(self) -> list[Any]:
        with self.lock:
            requests = list(self.traces)
        return [
            span
            for request in requests
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]

    def resources(self) -> list[dict[str, object]]:
        with self.lock:
            requests = [*self.traces, *self.metrics]
        kinds = ("resource_spans", "resource_metrics")
        return [
            attributes(r.resource)
            for request in requests
            for kind in kinds
            if hasattr(request, kind)
            for r in getattr(request, kind)
        ]

    def metric_points(self) -> Iterator[tuple[str, dict[str, object], Any]]:
        """Each data point received: its metric's name, its attributes, the point."""
        with self.lock:
            requests = list(self.metrics)
        for request in requests:
            for resource_metrics in request.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        data = metric.WhichOneof("data")
                        for point in getattr(metric, data).data_points:
                            yield metric.name, attributes(point), point

    def wait_for_spans(self, count: int, wait: float = 15.0) -> list[Any]:
        """The spans received once there are ``count`` (or all there are after ``wait``)."""
        deadline = time.monotonic() + wait
        while len(self.spans()) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.spans()


# A client's trace context, as the W3C specification's examples give it.
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"


@contextlib.contextmanager
def receiving(monkeypatch: pytest.MonkeyPatch) -> Iterator[Receiver]:
    """A receiver, and the environment of a session exporting to it (spans sent within
    20 ms of being made, no service name of the test runner's)."""
    with Receiver() as served:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", served.endpoint)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
        yield served


def exporting(h: Harness, stamp: dict[str, Any] | None = None) -> Telemetry:
    """The in-process relay ``h`` exporting its calls as a session does (the plan from the
    environment); ``stamp``: what its audit log adds to entries (a caller)."""
    plan = telemetry_plan(os.environ)
    assert plan is not None
    telemetry = Telemetry(plan, h.said.append, "relay-test")
    h.relay.core.telemetry = telemetry
    if stamp is not None:
        h.relay.core.audit = h.audit.for_client(lambda entry: stamp)
    return telemetry


def calls(h: Harness, *requests: tuple[str, dict[str, Any]]) -> list[Any]:
    """Each request sent in turn through ``h``; each answer (None: none came)."""
    answers: list[Any] = []

    async def work() -> None:
        for method, params in requests:
            answers.append(await h.request(method, params))

    run(work)
    return answers
