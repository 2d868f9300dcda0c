"""Whether a session exports its calls over OpenTelemetry, decided from the standard
``OTEL_*`` variables when the session is planned (a value that cannot be used stops it
before anything starts). Nothing of OpenTelemetry is imported here: the export itself is
:mod:`launcher.audit.telemetry`."""

from __future__ import annotations

from collections.abc import Mapping

from launcher.shared.user_errors import OptionError
from sandbox_profiles.records import frozen

ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
SIGNAL_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
# How long a span waits for its batch, unless OTEL_BSP_SCHEDULE_DELAY says (the SDK's own
# default is 5 s): spans held that long are objects the garbage collector walks again and
# again, which showed as a tenth of a millisecond more per call (docs/performance.md).
BATCH_DELAY_MS = 100
PROTOCOLS = (
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
)


@frozen
class TelemetryPlan:
    """Where calls are exported: ``endpoint`` (the base URL of an OTLP/HTTP receiver);
    which signals (``OTEL_TRACES_EXPORTER``/``OTEL_METRICS_EXPORTER`` ``none`` turns one
    off); ``batch_delay_ms``: how long spans wait for their batch, unless
    ``OTEL_BSP_SCHEDULE_DELAY`` says (None)."""

    endpoint: str
    traces: bool = True
    metrics: bool = True
    batch_delay_ms: int | None = BATCH_DELAY_MS


def telemetry_plan(environ: Mapping[str, str]) -> TelemetryPlan | None:
    """Whether calls are exported, from the standard variables in ``environ``: None unless
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (or the SDK is disabled). A value that cannot
    be used raises :class:`OptionError` naming the variable.

    >>> telemetry_plan({}) is None
    True
    >>> telemetry_plan({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}).endpoint
    'http://127.0.0.1:4318'
    >>> try:
    ...     telemetry_plan({"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"})
    ... except OptionError as error:
    ...     print(error.option, error.value)
    OTEL_EXPORTER_OTLP_ENDPOINT 'localhost:4318'
    """
    endpoint = environ.get(ENDPOINT, "").strip()
    if not endpoint or environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    for name in (ENDPOINT, *SIGNAL_ENDPOINTS):
        value = environ.get(name, "").strip()
        if value:
            _check_url(name, value)
    for name in PROTOCOLS:
        protocol = environ.get(name, "").strip()
        if protocol and protocol != "http/protobuf":
            raise OptionError(
                name,
                repr(protocol),
                "ironcurtain exports OTLP over http/protobuf only; set http/protobuf or unset it",
            )
    _check_installed()
    traces = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() != "none"
    metrics = environ.get("OTEL_METRICS_EXPORTER", "").strip().lower() != "none"
    if not (traces or metrics):
        return None
    delay = None if environ.get("OTEL_BSP_SCHEDULE_DELAY", "").strip() else BATCH_DELAY_MS
    return TelemetryPlan(endpoint, traces, metrics, delay)


def _check_installed() -> None:
    """The SDK and its OTLP/HTTP exporter are there (found without importing them)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("opentelemetry-sdk")
        version("opentelemetry-exporter-otlp-proto-http")
    except PackageNotFoundError:
        raise OptionError(
            ENDPOINT,
            None,
            "is set, and exporting needs the OpenTelemetry SDK, which is not installed: "
            "pip install 'ironcurtain[telemetry]' (or, to export nothing, unset it or set "
            "OTEL_SDK_DISABLED=true)",
        ) from None


def _check_url(name: str, value: str) -> None:
    expected = (
        "expected the URL of an OTLP/HTTP receiver, http:// or https:// and a host "
        "(such as http://localhost:4318)"
    )
    from urllib.parse import urlsplit  # lazy: only an exporter's URL is checked

    try:
        parts = urlsplit(value)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
        parts = urlsplit("")
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise OptionError(name, repr(value), expected)
