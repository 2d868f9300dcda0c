"""OpenTelemetry export of every checked call: one span each, and counters, over OTLP/HTTP.

On only when the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (read once, when the
session is planned: :mod:`launcher.audit.telemetry_plan`); the OpenTelemetry SDK is
imported only then, by :class:`Telemetry`. The SDK reads the other standard variables
itself (headers, timeout, compression, certificates, signal endpoints, the service name and
resource attributes, the batch and export intervals, the sampler).

A span carries what the audit entry says of the call, never its arguments: the method,
server, tool or prompt (for a resource, no URI), the decision and its rule, the result,
the caller and its issuer, the duration. When the client passed a W3C ``traceparent`` (and
``tracestate``) in the request's ``_meta``, the span continues that trace. Spans and
metrics leave in the SDK's background threads (a bounded queue: when the receiver cannot
keep up, spans are dropped, calls are never held); a receiver that cannot be reached is
said once.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from launcher.audit.telemetry_plan import TelemetryPlan

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import Tracer
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

SERVICE_NAME = "ironcurtain"
# Results that are failures of the call (the span's status is an error).
FAILED = frozenset({"error", "timeout", "server-exited"})
# At stop: how long what is still queued may take to leave.
STOP_TIMEOUT = 2.0
# The longest name a span carries (a server may list any name).
LONGEST_NAME = 200
# What is not part of a name as MCP spells tool names (a server's own may hold anything).
_NOT_NAME = re.compile(r"[^A-Za-z0-9_./ -]")
# The SDK's loggers whose complaints are about exporting.
EXPORTING_LOGGERS = ("opentelemetry.exporter", "opentelemetry.sdk")
# The longest complaint of the SDK's that is said.
LONGEST_SAID = 400


def shown_name(method: str, server: str | None, name: str | None) -> str | None:
    """What a span names the call by: the tool or prompt a server offers; a completion's
    reference (a resource template only when a server declared it); nothing of a resource's
    URI, nothing for a request named by its method alone (a server's question), nothing a
    client named that no server offers (any text a client sends would be a new name). A
    name keeps only the characters MCP's tool names are made of: each other one is ``_``.

    >>> shown_name("tools/call", "fs", "read_file")
    'read_file'
    >>> shown_name("resources/read", "fs", "resources/read") is None
    True
    >>> shown_name("completion/complete", None, "ref/resource file:///{path}?k=v")
    'ref/resource'
    >>> shown_name("tools/call", None, "pw=hunter2") is None
    True
    >>> shown_name("tools/call", "evil", "a" + chr(10) + chr(0x202E) + "b" + chr(27) + "[31m")
    'a__b__31m'
    """
    if not name or name == method or method.startswith("resources/"):
        return None
    if server is None:
        return "ref/resource" if name.startswith("ref/resource ") else None
    return _NOT_NAME.sub("_", name[:LONGEST_NAME])


def _shown_endpoint(endpoint: str) -> str:
    """The endpoint as said: no user or password it may carry.

    >>> _shown_endpoint("https://user:secret@collector.example:4318/otlp")
    'https://collector.example:4318/otlp'
    """
    parts = urlsplit(endpoint)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


class _Trouble(logging.Handler):
    """The SDK's complaints about exporting (an export that failed, a receiver that cannot
    be reached, spans dropped): said once, the first of them; while ``starting``, each (a
    setting it could not use, and the default it took instead). What it says of a client's
    trace context is not said at all (a client could otherwise spend the one line)."""

    def __init__(self, endpoint: str, say: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self.endpoint, self.say, self.said, self.starting = endpoint, say, False, True

    def emit(self, record: logging.LogRecord) -> None:
        if self.said or not record.name.startswith(EXPORTING_LOGGERS):
            return
        try:
            text = record.getMessage()
        except Exception:  # a message the SDK could not format is still a failure
            text = str(record.msg)
        if len(text) > LONGEST_SAID:
            text = text[: LONGEST_SAID - 3] + "..."
        if self.starting:
            self.say(f"telemetry: {text}")
            return
        self.said = True
        self.say(
            f"telemetry to {self.endpoint}: {text}; calls go on, and further trouble "
            "exporting is not said"
        )


def _measured(
    entry: Mapping[str, Any], status: str, method: str, server: str | None, name: str | None
) -> dict[str, str]:
    """The attributes a call is counted by."""
    policy = entry.get("policy") or {}
    measured: dict[str, str] = {
        "mcp.method.name": method,
        "ironcurtain.decision": str(policy.get("decision")),
        "ironcurtain.rule": str(policy.get("rule")),
        "ironcurtain.result": status,
    }
    if server is not None:
        measured["ironcurtain.server"] = server
        if name is not None:  # a name no server has is not counted by name
            measured["ironcurtain.tool"] = name
    escalation = entry.get("escalation")
    if isinstance(escalation, str):  # what the human (or the approval) said
        measured["ironcurtain.escalation"] = escalation
    if entry.get("direction") == "server-to-client":
        measured["ironcurtain.direction"] = "server-to-client"
    return measured


class Telemetry:
    """Spans and counters of the session's checked calls, exported in the background."""

    def __init__(
        self, plan: TelemetryPlan, say: Callable[[str], None], session_id: str | None = None
    ) -> None:
        import asyncio

        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.plan = plan
        self.session_id = session_id
        self._say = say
        self._failed = False
        self._running_loop = asyncio.get_running_loop
        self._kind, self._status, self._code = SpanKind.SERVER, Status, StatusCode
        self._trouble = _Trouble(_shown_endpoint(plan.endpoint), say)
        sdk_log = logging.getLogger("opentelemetry")
        # Its lines are said once, as ironcurtain's (above); never on stderr of their own,
        # not even after the session (a NullHandler keeps Python's last-resort one away).
        if not any(type(h) is logging.NullHandler for h in sdk_log.handlers):
            sdk_log.addHandler(logging.NullHandler())
        sdk_log.addHandler(self._trouble)
        sdk_log.propagate = False
        resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
        self._propagator: TraceContextTextMapPropagator = TraceContextTextMapPropagator()
        self._spans: BatchSpanProcessor | None = None
        self._tracer: Tracer | None = None
        self._traces: TracerProvider | None = None
        if plan.traces:
            self._traces = TracerProvider(resource=resource, shutdown_on_exit=False)
            self._spans = BatchSpanProcessor(
                OTLPSpanExporter(), schedule_delay_millis=plan.batch_delay_ms
            )
            self._traces.add_span_processor(self._spans)
            self._tracer = self._traces.get_tracer("ironcurtain")
        self._metrics: MeterProvider | None = None
        self._calls: Counter | None = None
        self._duration: Histogram | None = None
        if plan.metrics:
            reader = PeriodicExportingMetricReader(OTLPMetricExporter())
            self._metrics = MeterProvider(
                metric_readers=[reader], resource=resource, shutdown_on_exit=False
            )
            meter = self._metrics.get_meter("ironcurtain")
            self._calls = meter.create_counter(
                "ironcurtain.calls", unit="{call}", description="calls checked by the gate"
            )
            self._duration = meter.create_histogram(
                "ironcurtain.call.duration", unit="ms", description="how long each call took"
            )
        self._trouble.starting = False  # from here on, trouble is said once

    def call(
        self,
        entry: Mapping[str, Any],
        status: str,
        duration_ms: float,
        params: Mapping[str, Any] | None = None,
        stamped: Mapping[str, Any] | None = None,
    ) -> None:
        """Record one call as its audit ``entry`` describes it, ended with ``status`` after
        ``duration_ms``; ``params``: the client's (only its ``_meta`` trace context is
        read); ``stamped``: what the audit log adds to its entries (the caller). In an
        event loop, the span is made once the loop has done what it was doing (the call's
        answer is sent first); never raises: a call is not failed for its telemetry."""
        end = time.time_ns()
        try:
            loop = self._running_loop()
        except RuntimeError:  # no loop: at once
            self._guarded(entry, status, duration_ms, params, stamped, end)
            return
        loop.call_soon(self._guarded, entry, status, duration_ms, params, stamped, end)

    def _guarded(self, *args: Any) -> None:
        try:
            self._record(*args)
        except Exception as exc:
            if not self._failed:
                self._failed = True
                self._say(f"telemetry: a call could not be recorded ({exc}); not said again")

    def _record(
        self,
        entry: Mapping[str, Any],
        status: str,
        duration_ms: float,
        params: Mapping[str, Any] | None,
        stamped: Mapping[str, Any] | None,
        end: int,
    ) -> None:
        method = str(entry.get("method"))
        server = entry.get("server")
        server = server if isinstance(server, str) else None
        name = shown_name(method, server, entry.get("tool"))
        measured = _measured(entry, status, method, server, name)
        if self._calls is not None and self._duration is not None:
            self._calls.add(1, measured)
            self._duration.record(duration_ms, measured)
        if self._tracer is None:
            return
        attributes = self._attributes(entry, status, duration_ms, stamped, measured, name)
        span = self._tracer.start_span(
            f"{method} {name}" if name else method,
            context=self._parent(params),
            kind=self._kind,
            attributes=attributes,
            start_time=end - int(duration_ms * 1_000_000),
        )
        if status in FAILED:
            span.set_status(self._status(self._code.ERROR, status))
        elif status == "success":
            span.set_status(self._status(self._code.OK))
        span.end(end_time=end)

    def _attributes(
        self,
        entry: Mapping[str, Any],
        status: str,
        duration_ms: float,
        stamped: Mapping[str, Any] | None,
        measured: Mapping[str, str],
        name: str | None,
    ) -> dict[str, str | float]:
        """A call's span's attributes: what is counted, and what names this one call."""
        method = measured["mcp.method.name"]
        attributes: dict[str, str | float] = {**measured, "ironcurtain.duration_ms": duration_ms}
        if name is not None:
            attributes["ironcurtain.tool"] = name
            if method == "tools/call":
                attributes["gen_ai.tool.name"] = name
            elif method == "prompts/get":
                attributes["gen_ai.prompt.name"] = name
        request_id = entry.get("requestId")
        if isinstance(request_id, str | int) and not isinstance(request_id, bool):
            attributes["jsonrpc.request.id"] = str(request_id)[:LONGEST_NAME]
        if self.session_id is not None:
            attributes["ironcurtain.session.id"] = self.session_id
        caller = (stamped or {}).get("caller")
        if isinstance(caller, Mapping):
            for key in ("name", "issuer"):
                if isinstance(caller.get(key), str):
                    attributes[f"ironcurtain.caller.{key}"] = caller[key]
        if status in FAILED:
            attributes["error.type"] = status
        return attributes

    def _parent(self, params: Mapping[str, Any] | None) -> Any:
        """The trace the client's request continues (its ``_meta.traceparent``), or None."""
        meta = params.get("_meta") if params is not None else None
        if not isinstance(meta, Mapping) or not isinstance(meta.get("traceparent"), str):
            return None
        carrier = {
            k: meta[k] for k in ("traceparent", "tracestate") if isinstance(meta.get(k), str)
        }
        return self._propagator.extract(carrier)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Send what is still queued, giving it at most ``timeout`` seconds (a receiver that
        does not answer is left behind: the SDK's threads do not keep the process), and
        stop."""
        stopping = threading.Thread(
            target=self._shutdown, args=(timeout,), name="ironcurtain-telemetry", daemon=True
        )
        stopping.start()
        stopping.join(timeout)
        logging.getLogger("opentelemetry").removeHandler(self._trouble)

    def _shutdown(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        if self._spans is not None and self._traces is not None:
            self._spans.force_flush(timeout_millis=int(timeout * 1000))
            self._traces.shutdown()
        if self._metrics is not None:
            left = max(deadline - time.monotonic(), 0.05)
            self._metrics.shutdown(timeout_millis=left * 1000)
